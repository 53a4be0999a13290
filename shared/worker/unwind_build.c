/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unwind tables built (unwind_build.h), in one anonymous mapping per
 * table.
 *
 * For every FDE the CIE's and the FDE's call frame instructions are run
 * once, at build time (eh_frame.c), keeping only what a walk needs: how
 * the CFA is computed (stack or frame pointer + offset), whether the
 * return address is where the machine's calls leave it (arch.h: on x86-64
 * at CFA - 8) or undefined (the outermost frame), and where the frame
 * pointer was saved. Each change of those rules becomes a row; rows are
 * sorted by pc, and an index narrows each lookup to the rows of 256 bytes
 * of code: a walk touches few cache lines a frame, which matters as the
 * tables are cold whenever the signal comes.
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/arch.h"
#include "worker/eh_frame.h"
#include "worker/unwind_build.h"


/*
 * Where a frame saved a register, in words from the CFA (unknown < slot
 * <= max): 0 when it keeps the caller's value, unknown when the walk
 * cannot get it back.
 */
static int
prof_builder_slot(const prof_eh_reg_rule_t *r, int unknown, int max)
{
    if (r->rule == PROF_EH_RULE_SAME) {
        return 0;
    }

    if (r->rule == PROF_EH_RULE_OFFSET && r->offset % 8 == 0
        && r->offset != 0 && r->offset / 8 > unknown && r->offset / 8 <= max)
    {
        return (int) (r->offset / 8);
    }

    return unknown;
}


/*
 * Whether the walk can find a frame's return address, by its rule r, and
 * where: in words from the CFA, 0 in the link register (arch.h).
 */
static int
prof_builder_ra(const prof_eh_reg_rule_t *r, int *slot)
{
#ifdef PROF_ARCH_RA_IN_ROWS
    if (r->rule == PROF_EH_RULE_SAME) {
        *slot = 0;
        return 1;
    }

    if (r->rule == PROF_EH_RULE_OFFSET && r->offset % 8 == 0
        && r->offset != 0 && r->offset / 8 >= INT16_MIN
        && r->offset / 8 <= INT16_MAX)
    {
        *slot = (int) (r->offset / 8);
        return 1;
    }

    return 0;
#else
    *slot = PROF_ARCH_RA_SLOT;

    return r->rule == PROF_EH_RULE_OFFSET
           && r->offset == PROF_ARCH_RA_SLOT * 8;
#endif
}


/* The row of the rules from pc on (state NULL: no rule), if it adds one. */
static int
prof_builder_emit(prof_unwind_builder_t *b, uintptr_t pc,
    const prof_eh_cfa_state_t *state)
{
    int         ra_slot;
    prof_row_t  row, *last;

    memset(&row, 0, sizeof(row));

    if (pc < b->code_low || pc > b->code_high
        || pc - b->o->base > UINT32_MAX)
    {
        return -1;
    }

    row.pc = (uint32_t) (pc - b->o->base);

    if (state == NULL) {
        row.cfa = PROF_CFA_NONE;                /* past the function */

    } else if (state->ra.rule == PROF_EH_RULE_UNDEFINED) {
        row.cfa = PROF_CFA_OUTERMOST;

    } else if (state->cfa_ok
               && (state->cfa_reg == PROF_ARCH_DW_SP
                   || state->cfa_reg == PROF_ARCH_DW_FP
#ifdef PROF_ARCH_DW_AUX
                   || state->cfa_reg == PROF_ARCH_DW_AUX
#endif
                  )
               && state->cfa_offset % 8 == 0
               && state->cfa_offset / 8 >= INT16_MIN
               && state->cfa_offset / 8 <= INT16_MAX
               && prof_builder_ra(&state->ra, &ra_slot))
    {
        row.cfa = (state->cfa_reg == PROF_ARCH_DW_SP) ? PROF_CFA_SP
                  : (state->cfa_reg == PROF_ARCH_DW_FP) ? PROF_CFA_FP
                  : PROF_CFA_AUX;
        row.cfa_slots = (int16_t) (state->cfa_offset / 8);
        row.fp_slot = prof_builder_slot(&state->fp, PROF_UNWIND_FP_UNKNOWN,
                                        PROF_UNWIND_FP_MAX);
        row.aux_slot = prof_builder_slot(&state->aux,
                                         PROF_UNWIND_AUX_UNKNOWN, 15);
#ifdef PROF_ARCH_RA_IN_ROWS
        row.ra_slot = (int16_t) ra_slot;
#else
        (void) ra_slot;
#endif

    } else {
        row.cfa = PROF_CFA_NONE;
    }

    if (b->row_count > 0) {
        last = &b->rows[b->row_count - 1];

        if (row.pc < last->pc) {
            return 0;                           /* overlapping FDEs */
        }

        if (row.pc == last->pc) {
            *last = row;
            return 0;
        }

        if (last->cfa == row.cfa && last->cfa_slots == row.cfa_slots
            && last->fp_slot == row.fp_slot
            && last->aux_slot == row.aux_slot
#ifdef PROF_ARCH_RA_IN_ROWS
            && last->ra_slot == row.ra_slot
#endif
           )
        {
            return 0;
        }
    }

    if (b->row_count == b->row_room) {
        b->full = 1;
        return -1;
    }

    b->rows[b->row_count++] = row;

    return 0;
}


static int
prof_builder_emit_cb(void *data, uintptr_t pc,
    const prof_eh_cfa_state_t *state)
{
    return prof_builder_emit(data, pc, state);
}


/* One FDE of the image; a corrupt one adds no row. */
static void
prof_builder_add_fde(prof_unwind_builder_t *b, const prof_unwind_image_t *im,
    const uint8_t *fde, prof_eh_cie_t *cie)
{
    uint32_t             rows_before;
    uintptr_t            pc, range;
    prof_eh_cursor_t     c;
    prof_eh_cfa_state_t  state;

    if (prof_eh_fde_open(fde, im->low, im->high, cie, &c, &pc, &range) != 0) {
        return;
    }

    if (range == 0 || range > PROF_SPAN_MAX || pc < b->code_low
        || pc >= b->code_high || range > b->code_high - pc)
    {
        return;
    }

    state = cie->initial;
    rows_before = b->row_count;

    if (prof_eh_run_cfa(&c, cie, &state, pc, cie->fde_encoding,
                        prof_builder_emit_cb, b) != 0)
    {
        /* An instruction not understood: no rule for the function. */
        b->row_count = rows_before;
        (void) prof_builder_emit(b, pc, NULL);
    }

    (void) prof_builder_emit(b, pc + range, NULL);
}


/* The page index of the rows just built; 0, or -1: no room. */
static int
prof_builder_index(prof_unwind_builder_t *b)
{
    uint32_t               i, page, pages, *index;
    uintptr_t              first, span;
    prof_unwind_object_t  *o = b->o;

    first = b->rows[0].pc;
    o->start = o->base + first;
    o->end = o->base + b->rows[b->row_count - 1].pc;
    span = o->end - o->start;

    pages = (uint32_t) (span >> PROF_UNWIND_PAGE_SHIFT) + 2;
    index = (uint32_t *) (b->rows + b->row_count);

    if ((size_t) (b->limit - (unsigned char *) index)
        < pages * sizeof(uint32_t))
    {
        b->full = 1;
        return -1;
    }

    i = 0;
    for (page = 0; page < pages; page++) {
        while (i + 1 < b->row_count
               && b->rows[i + 1].pc
                  <= first + ((uintptr_t) page << PROF_UNWIND_PAGE_SHIFT))
        {
            i++;
        }
        index[page] = i;
    }

    o->rows = b->rows;
    o->row_count = b->row_count;
    o->pages = index;

    b->next = (unsigned char *) (index + pages);
    b->next = (unsigned char *) (((uintptr_t) b->next + 15) & ~15UL);

    return 0;
}


/* Whether [from, to) lies in a readable executable segment of im. */
static int
prof_builder_readable(const prof_unwind_image_t *im, uintptr_t from,
    uintptr_t to)
{
    unsigned  i;

    for (i = 0; i < im->segments; i++) {
        if (from >= im->segment_low[i] && to <= im->segment_high[i]) {
            return 1;
        }
    }

    return 0;
}


/* Whether the code at target is a PLT entry (arch.h): a call there
   leaves the object. */
static int
prof_builder_plt_entry(const prof_unwind_image_t *im, uintptr_t target)
{
    return prof_builder_readable(im, target, target + PROF_ARCH_PLT_BYTES)
           && prof_arch_plt_entry((const uint8_t *) target);
}


/*
 * Appends to sites (n of room) the offsets past the calls that end in
 * (from, to], absolute, whose bytes lie in [from, to) and in a readable
 * segment: every call (return sites) or those that may leave the object
 * (call-outs). 0, or -1: no room.
 */
static int
prof_builder_calls(prof_unwind_builder_t *b, const prof_unwind_image_t *im,
    uintptr_t from, uintptr_t to, int callouts, uint32_t *sites, size_t room,
    size_t *n)
{
    int        kind;
    unsigned   i;
    uintptr_t  lo, hi, at, target;

    for (i = 0; i < im->segments; i++) {
        lo = from > im->segment_low[i] ? from : im->segment_low[i];
        hi = to < im->segment_high[i] ? to : im->segment_high[i];

        /* Where an instruction may end, past the shortest call. */
        at = lo + PROF_ARCH_CALL_MIN;
        at += (PROF_ARCH_INSN_ALIGN - at % PROF_ARCH_INSN_ALIGN)
              % PROF_ARCH_INSN_ALIGN;

        for ( ; at <= hi; at += PROF_ARCH_INSN_ALIGN) {
            kind = prof_arch_call_ends_at((const uint8_t *) at, at - lo,
                                          b->code_low, b->code_high,
                                          &target);

            if (kind == 0
                || (callouts && kind == PROF_ARCH_CALL_DIRECT
                    && !prof_builder_plt_entry(im, target)))
            {
                continue;
            }

            if (*n == room) {
                b->full = 1;
                return -1;
            }

            sites[(*n)++] = (uint32_t) (at - b->o->base);
        }
    }

    return 0;
}


/*
 * After the index: the return sites of the code without rules of a
 * sparse object (rows without a rule but the last, the object's end), or
 * of any object the first bytes after the program's entry point (_start,
 * which musl's crt1.o gives no FDE); then, if the table wants them, the
 * call-outs of the code with rules. 0, or -1: no room.
 */
static int
prof_builder_sites(prof_unwind_builder_t *b, const prof_unwind_image_t *im,
    int sparse)
{
    int                    gap;
    size_t                 room, n;
    uint32_t               i, *sites;
    uintptr_t              from, to;
    prof_unwind_object_t  *o = b->o;

    sites = (uint32_t *) b->next;
    room = (size_t) (b->limit - b->next) / sizeof(uint32_t);

    for (gap = 1; gap >= 0; gap--) {
        n = 0;

        for (i = 0; i + 1 < o->row_count; i++) {
            if ((o->rows[i].cfa == PROF_CFA_NONE) != gap
                || (!gap && !b->callouts))
            {
                continue;
            }

            from = o->base + o->rows[i].pc;
            to = o->base + o->rows[i + 1].pc;

            if (gap && !sparse) {
                /* Only _start's. */
                if (b->entry < from || b->entry >= to) {
                    continue;
                }
                from = b->entry;
                if (to - from > PROF_UNWIND_ENTRY_SPAN) {
                    to = from + PROF_UNWIND_ENTRY_SPAN;
                }
            }

            if (prof_builder_calls(b, im, from, to, !gap, sites, room, &n)
                != 0)
            {
                return -1;
            }
        }

        if (gap) {
            o->sites = sites;
            o->site_count = (uint32_t) n;
        } else {
            o->callouts = sites;
            o->callout_count = (uint32_t) n;
        }

        sites += n;
        room -= n;
    }

    b->next = (unsigned char *) sites;
    b->next = (unsigned char *) (((uintptr_t) b->next + 15) & ~15UL);

    return 0;
}


/* The row that ends the object's code at pc: 0, or -1: no room. */
static int
prof_builder_end(prof_unwind_builder_t *b, uintptr_t pc)
{
    uint32_t  offset = (uint32_t) (pc - b->o->base);

    if (b->row_count > 0 && b->rows[b->row_count - 1].pc >= offset) {
        return 0;
    }

    if (b->row_count == b->row_room) {
        b->full = 1;
        return -1;
    }

    memset(&b->rows[b->row_count], 0, sizeof(prof_row_t));
    b->rows[b->row_count++].pc = offset;

    return 0;
}


uint64_t
prof_unwind_image_fdes(const prof_unwind_image_t *im, const uint8_t **table)
{
    uint64_t  n;

    *table = NULL;

    if (im->hdr == NULL || !prof_eh_hdr_searchable(im->hdr, im->hdr_size)
        || prof_eh_hdr_table(im->hdr, im->hdr_size, table, &n) != 0)
    {
        *table = NULL;
        return 0;
    }

    return n;
}


int
prof_unwind_builder_add_image(prof_unwind_builder_t *b,
    const prof_unwind_image_t *im)
{
    uint64_t              n, k;
    const uint8_t        *table, *fde;
    prof_eh_cie_t         cie;
    prof_unwind_table_t  *t = b->t;

    if (im->code_low >= im->code_high
        || t->object_count == b->object_capacity)
    {
        return -1;
    }

    /* No .eh_frame_hdr, or no FDE in it: code without rules only. */
    n = prof_unwind_image_fdes(im, &table);

    b->o = &t->objects[t->object_count];
    memset(b->o, 0, sizeof(prof_unwind_object_t));
    b->o->base = im->base;
    b->code_low = im->code_low;
    b->code_high = im->code_high;

    b->rows = (prof_row_t *) b->next;
    b->row_count = 0;
    b->row_room = (uint32_t) ((size_t) (b->limit - b->next)
                              / sizeof(prof_row_t) > UINT32_MAX
                              ? UINT32_MAX
                              : (size_t) (b->limit - b->next)
                                / sizeof(prof_row_t));

    memset(&cie, 0, sizeof(cie));

    /* All the code, from its first byte: FDEs cover it or not. */
    (void) prof_builder_emit(b, im->code_low, NULL);

    for (k = 0; k < n && !b->full; k++) {
        fde = prof_eh_hdr_fde(im->hdr, table + 8 * k, im->low, im->high);

        if (fde != NULL) {
            prof_builder_add_fde(b, im, fde, &cie);
        }
    }

    if (b->full || prof_builder_end(b, im->code_high) != 0
        || b->row_count < 2 || prof_builder_index(b) != 0
        || prof_builder_sites(b, im,
                              prof_unwind_sparse(im->code_high
                                                 - im->code_low, n)) != 0)
    {
        return -1;
    }

    if (t->object_count == 0 || b->o->start < t->code_low) {
        t->code_low = b->o->start;
    }
    if (b->o->end > t->code_high) {
        t->code_high = b->o->end;
    }

    t->object_count++;

    return 0;
}


static int
prof_unwind_compare(const void *a, const void *b)
{
    const prof_unwind_object_t  *x = a, *y = b;

    return (x->start > y->start) - (x->start < y->start);
}


prof_unwind_table_t *
prof_unwind_table_create(size_t size, size_t objects,
    prof_unwind_builder_t *b)
{
    void                 *m;
    size_t                page, head;
    prof_unwind_table_t  *t;

    page = (size_t) sysconf(_SC_PAGESIZE);

    head = sizeof(prof_unwind_table_t)
           + PROF_UNWIND_CACHE_SIZE * sizeof(prof_unwind_cache_entry_t)
           + objects * sizeof(prof_unwind_object_t) + 64;
    size = (head + size + page - 1) & ~(page - 1);

    m = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        return NULL;
    }

    t = m;
    t->arena = m;
    t->arena_size = size;
    t->cache = (prof_unwind_cache_entry_t *) (t + 1);
    t->objects = (prof_unwind_object_t *) (t->cache
                                           + PROF_UNWIND_CACHE_SIZE);

    memset(b, 0, sizeof(prof_unwind_builder_t));
    b->t = t;
    b->object_capacity = objects;
    b->next = (unsigned char *) (t->objects + objects);
    b->next = (unsigned char *) (((uintptr_t) b->next + 15) & ~15UL);
    b->limit = t->arena + size;

    return t;
}


int
prof_unwind_builder_add_object(prof_unwind_builder_t *b,
    const prof_unwind_object_t *o)
{
    prof_unwind_table_t  *t = b->t;

    if (t->object_count == b->object_capacity) {
        return -1;
    }

    t->objects[t->object_count] = *o;

    if (t->object_count == 0 || o->start < t->code_low) {
        t->code_low = o->start;
    }
    if (o->end > t->code_high) {
        t->code_high = o->end;
    }

    t->object_count++;

    return 0;
}


void
prof_unwind_table_finish(prof_unwind_table_t *t, prof_unwind_builder_t *b)
{
    size_t  page, used;

    qsort(t->objects, t->object_count, sizeof(prof_unwind_object_t),
          prof_unwind_compare);

    page = (size_t) sysconf(_SC_PAGESIZE);
    used = ((size_t) (b->next - t->arena) + page - 1) & ~(page - 1);

    if (used < t->arena_size) {
        (void) munmap(t->arena + used, t->arena_size - used);
        t->arena_size = used;
    }

    t->bytes = (size_t) (b->next - t->arena);
}

