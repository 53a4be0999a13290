/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unwind tables (unwind.h) of the objects loaded now, or of one image in
 * memory, built by unwind_build.c; the loader's count of objects that
 * tells whether a table is stale.
 *
 * A build runs dl_iterate_phdr twice: once to size the mapping (objects,
 * FDEs, code spans), once, with the mapping made, to parse every object
 * into it. Nothing is allocated inside the callbacks (a malloc there could
 * wait for a lock held by a thread that waits for the loader lock), and
 * every object's data is read inside the callback, while the loader lock
 * keeps it mapped. Should the rows not fit (objects loaded between the
 * passes, rules denser than guessed), the build starts again, larger.
 */

#define _GNU_SOURCE

#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "worker/eh_frame.h"
#include "worker/unwind_build.h"


/* Rows guessed per FDE when sizing, then doubled on each retry. */
#define PROF_ROWS_PER_FDE    6
#define PROF_BUILD_ATTEMPTS  4


/* Sizes found by the first pass; of the objects shared (see below). */
typedef struct {
    size_t             objects;
    size_t             fdes;
    size_t             pages;
    size_t             code;        /* bytes */
    int                sparse;      /* an object without unwind tables */
    const prof_unwind_table_t  *shared;
    size_t             shared_fdes;
    size_t             shared_pages;
    size_t             shared_code;
} prof_sizes_t;


/*
 * The object of table t (NULL: none) built from the same loaded image:
 * its load bias and code the same. Its arrays are then the new table's
 * too. Allocates nothing (inside dl_iterate_phdr).
 */
static const prof_unwind_object_t *
prof_shared_object(const prof_unwind_table_t *t, const prof_unwind_image_t *im)
{
    unsigned                     lo, hi, mid;
    const prof_unwind_object_t  *o;

    if (t == NULL) {
        return NULL;
    }

    lo = 0;
    hi = t->object_count;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (t->objects[mid].start < im->code_low) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    o = (lo < t->object_count) ? &t->objects[lo] : NULL;

    return (o != NULL && o->start == im->code_low && o->end == im->code_high
            && o->base == im->base)
           ? o : NULL;
}


/*
 * The image of a loaded object: its .eh_frame_hdr's segment (none: hdr
 * NULL), its code; -1 when it has none, or more than the table can hold.
 */
static int
prof_image_of(struct dl_phdr_info *info, prof_unwind_image_t *im)
{
    int                 i;
    uintptr_t           hdr, seg_end, lo, hi;
    const ElfW(Phdr)   *ph, *eh, *seg;

    eh = NULL;
    seg = NULL;
    memset(im, 0, sizeof(prof_unwind_image_t));
    im->base = info->dlpi_addr;
    im->code_low = UINTPTR_MAX;

    for (i = 0; i < info->dlpi_phnum; i++) {
        ph = &info->dlpi_phdr[i];

        if (ph->p_type == PT_GNU_EH_FRAME) {
            eh = ph;

        } else if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            lo = info->dlpi_addr + ph->p_vaddr;
            hi = lo + ph->p_memsz;
            if (lo < im->code_low) {
                im->code_low = lo;
            }
            if (hi > im->code_high) {
                im->code_high = hi;
            }
            /* Mapped from the file and readable: what may be read. */
            if ((ph->p_flags & PF_R) && im->segments < PROF_IMAGE_SEGMENTS) {
                im->segment_low[im->segments] = lo;
                im->segment_high[im->segments] = lo + ph->p_filesz;
                im->segments++;
            }
        }
    }

    if (im->code_low >= im->code_high
        || im->code_high - im->code_low > PROF_SPAN_MAX
        || im->code_high - im->base >= UINT32_MAX)
    {
        return -1;
    }

    if (eh == NULL) {
        return 0;
    }

    for (i = 0; i < info->dlpi_phnum; i++) {
        ph = &info->dlpi_phdr[i];

        if (ph->p_type == PT_LOAD && eh->p_vaddr >= ph->p_vaddr
            && eh->p_vaddr - ph->p_vaddr < ph->p_memsz)
        {
            seg = ph;
        }
    }

    if (seg == NULL) {
        return -1;
    }

    hdr = info->dlpi_addr + eh->p_vaddr;
    seg_end = info->dlpi_addr + seg->p_vaddr + seg->p_memsz;

    im->low = (const uint8_t *) (info->dlpi_addr + seg->p_vaddr);
    im->high = (const uint8_t *) seg_end;
    im->hdr = (const uint8_t *) hdr;
    im->hdr_size = (eh->p_memsz < seg_end - hdr) ? eh->p_memsz
                                                 : seg_end - hdr;

    return 0;
}


static int
prof_size_object(struct dl_phdr_info *info, size_t size, void *data)
{
    uint64_t              n;
    const uint8_t        *table;
    prof_sizes_t         *sizes = data;
    prof_unwind_image_t   im;

    sizes->objects++;

    if (prof_image_of(info, &im) != 0) {
        return 0;
    }

    n = prof_unwind_image_fdes(&im, &table);

    sizes->fdes += n;
    sizes->pages += ((im.code_high - im.code_low) >> PROF_UNWIND_PAGE_SHIFT)
                    + 2;
    sizes->code += im.code_high - im.code_low;

    if (prof_unwind_sparse(im.code_high - im.code_low, n)) {
        sizes->sparse = 1;
    }

    if (prof_shared_object(sizes->shared, &im) != NULL) {
        sizes->shared_fdes += n;
        sizes->shared_pages += ((im.code_high - im.code_low)
                                >> PROF_UNWIND_PAGE_SHIFT) + 2;
        sizes->shared_code += im.code_high - im.code_low;
    }

    return 0;
}


static void
prof_note_generation(prof_unwind_table_t *t, struct dl_phdr_info *info,
    size_t size)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs)
                + sizeof(info->dlpi_subs))
    {
        t->adds = info->dlpi_adds;
        t->subs = info->dlpi_subs;
    }
}


static int
prof_parse_object(struct dl_phdr_info *info, size_t size, void *data)
{
    prof_unwind_image_t          im;
    prof_unwind_builder_t       *b = data;
    const prof_unwind_object_t  *o;

    prof_note_generation(b->t, info, size);

    if (prof_image_of(info, &im) != 0) {
        return 0;
    }

    o = prof_shared_object(b->shared, &im);

    if (o != NULL && prof_unwind_builder_add_object(b, o) == 0) {
        return 0;
    }

    if (prof_unwind_builder_add_image(b, &im) != 0) {
        if (b->full) {
            return 1;                   /* start again, larger */
        }
        b->t->skipped++;
    }

    return 0;
}


prof_unwind_table_t *
prof_unwind_table_build(void)
{
    return prof_unwind_table_build_over(NULL);
}


prof_unwind_table_t *
prof_unwind_table_build_over(const prof_unwind_table_t *shared)
{
    int                    attempt;
    size_t                 rows, scale;
    prof_sizes_t           sizes;
    prof_unwind_table_t   *t;
    prof_unwind_builder_t  b;

    for (attempt = 0, scale = 1; attempt < PROF_BUILD_ATTEMPTS;
         attempt++, scale *= 2)
    {
        /* Measured again each time: objects loaded meanwhile count. */
        memset(&sizes, 0, sizeof(sizes));
        sizes.shared = shared;
        (void) dl_iterate_phdr(prof_size_object, &sizes);

        /*
         * The objects of the shared table take no room: their arrays are
         * its. Not when the call-outs differ (an object without unwind
         * tables loaded since, or gone): every object is parsed again.
         */
        if (shared != NULL && shared->callouts == sizes.sparse) {
            sizes.fdes -= sizes.shared_fdes;
            sizes.pages -= sizes.shared_pages;
            sizes.code -= sizes.shared_code;

        } else {
            sizes.shared = NULL;
        }

        rows = (sizes.fdes * PROF_ROWS_PER_FDE + 4096) * scale;

        /* Return sites and call-outs: room for a call every 16 or 32
           bytes of code (only objects without unwind tables have sites,
           call-outs only where one is loaded; the pages not used are
           given back by prof_unwind_table_finish). */
        t = prof_unwind_table_create(rows * sizeof(prof_row_t)
                                     + (sizes.pages * scale + 64)
                                       * sizeof(uint32_t)
                                     + sizes.code * scale
                                       / (sizes.sparse ? 16 : 32)
                                       * sizeof(uint32_t)
                                     + (sizes.objects + 16) * 32,
                                     sizes.objects + 16, &b);
        if (t == NULL) {
            return NULL;
        }

        b.callouts = sizes.sparse;
        b.shared = sizes.shared;
        b.entry = (uintptr_t) getauxval(AT_ENTRY);
        t->callouts = sizes.sparse;

        (void) dl_iterate_phdr(prof_parse_object, &b);

        if (!b.full) {
            t->entry = b.entry;
            prof_unwind_table_finish(t, &b);
            return t;
        }

        prof_unwind_table_free(t);
    }

    return NULL;
}


prof_unwind_table_t *
prof_unwind_table_from_image(uintptr_t base, const void *segment,
    size_t segment_size, size_t hdr_offset, size_t hdr_size)
{
    size_t                 rows, span;
    prof_unwind_table_t   *t;
    prof_unwind_image_t    im;
    prof_unwind_builder_t  b;

    memset(&im, 0, sizeof(im));

    if (hdr_offset > segment_size) {
        hdr_offset = segment_size;
    }
    if (hdr_size > segment_size - hdr_offset) {
        hdr_size = segment_size - hdr_offset;
    }

    im.base = base;
    im.low = segment;
    im.high = im.low + segment_size;
    im.hdr = (hdr_size == 0) ? NULL : im.low + hdr_offset;
    im.hdr_size = hdr_size;
    im.code_low = (uintptr_t) segment;
    im.code_high = (uintptr_t) segment + segment_size;
    im.segments = 1;
    im.segment_low[0] = im.code_low;
    im.segment_high[0] = im.code_high;

    span = segment_size;
    rows = (hdr_size / 8) * PROF_ROWS_PER_FDE * 4 + 4096;

    t = prof_unwind_table_create(rows * sizeof(prof_row_t)
                                 + ((span >> PROF_UNWIND_PAGE_SHIFT) + 64)
                                   * sizeof(uint32_t)
                                 + span / 2 * sizeof(uint32_t), 1, &b);
    if (t == NULL) {
        return NULL;
    }

    /* (with call-outs: all the builder's code, for the fuzz target) */
    b.callouts = 1;
    t->callouts = 1;

    if (prof_unwind_builder_add_image(&b, &im) != 0) {
        t->skipped++;
    }

    prof_unwind_table_finish(t, &b);

    return t;
}


void
prof_unwind_table_free(prof_unwind_table_t *t)
{
    if (t != NULL) {
        (void) munmap(t->arena, t->arena_size);
    }
}


size_t
prof_unwind_table_bytes(const prof_unwind_table_t *t)
{
    return t->bytes;
}


unsigned
prof_unwind_table_objects(const prof_unwind_table_t *t)
{
    return t->object_count;
}


unsigned
prof_unwind_table_skipped(const prof_unwind_table_t *t)
{
    return t->skipped;
}


unsigned long long
prof_unwind_table_generation(const prof_unwind_table_t *t)
{
    return t->adds + t->subs;
}


static int
prof_count_generation(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long  *generation = data;

    if (size >= offsetof(struct dl_phdr_info, dlpi_subs)
                + sizeof(info->dlpi_subs))
    {
        *generation = info->dlpi_adds + info->dlpi_subs;
    }

    return 1;
}


unsigned long long
prof_unwind_generation_now(void)
{
    unsigned long long  generation = 0;

    (void) dl_iterate_phdr(prof_count_generation, &generation);

    return generation;
}
