/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The objects a symbolizer holds: made for a mapping of the maps (load
 * bias and build id from the ELF file, the vdso's image copied from
 * memory), freed when collected once unmapped.
 */

#define _GNU_SOURCE

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profiler/dwarf_inlines.h"
#include "profiler/elf_file.h"
#include "profiler/object_cache.h"
#include "profiler/proc_maps.h"
#include "profiler/symbolizer_internal.h"


#define PROF_SYM_NOTES_MAX      (1 << 20)   /* bytes of one PT_NOTE */


/* Load bias from the PT_LOAD segment holding the mapping's file offset. */

static void
prof_elf_load_bias(prof_elf_t *elf, Elf64_Phdr *ph, prof_object_t *obj)
{
    uint64_t     page, base, off;
    Elf64_Phdr  *best;
    unsigned     i;

    page = (uint64_t) sysconf(_SC_PAGESIZE);
    off = obj->file_offset;
    best = NULL;

    for (i = 0; i < elf->ehdr.e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD || ph[i].p_offset > elf->size
            || ph[i].p_filesz > elf->size)
        {
            continue;
        }

        base = ph[i].p_offset - ph[i].p_offset % page;

        if (off < base || off >= ph[i].p_offset + ph[i].p_filesz) {
            continue;
        }

        if (best == NULL || ((ph[i].p_flags & PF_X) && !(best->p_flags & PF_X)))
        {
            best = &ph[i];
        }
    }

    if (best) {
        obj->load_bias = obj->start - off + best->p_offset - best->p_vaddr;
    }
}


/*
 * The vdso has no file, but its image in memory is a whole ELF object
 * (with a build id and .dynsym): copy it to a memory file to read it.
 */
static int
prof_sym_vdso_image(prof_sym_object_t *o)
{
    int      fd;
    size_t   size;
    ssize_t  n;

    size = o->obj.end - o->obj.start;

    fd = memfd_create("vdso", MFD_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }

    n = write(fd, (const void *) (uintptr_t) o->obj.start, size);
    if (n != (ssize_t) size) {
        close(fd);
        return -EIO;
    }

    o->image_fd = fd;
    snprintf(o->image, sizeof(o->image), "/proc/self/fd/%d", fd);

    return 0;
}


/*
 * Best effort: the load bias and build id of a new object. A malformed
 * file marks it corrupt.
 */

void
prof_sym_object_inspect(prof_sym_object_t *o)
{
    int          rc;
    unsigned     i;
    uint64_t     align;
    prof_elf_t   elf;
    Elf64_Phdr  *ph;
    void        *notes;

    rc = prof_elf_open(&elf, prof_sym_image(o));
    if (rc != 0) {
        o->obj.corrupt = (rc == -ENOEXEC);
        return;
    }

    rc = prof_elf_read_alloc(&elf, elf.ehdr.e_phoff,
                             (uint64_t) elf.ehdr.e_phnum * sizeof(Elf64_Phdr),
                             (void **) &ph);
    if (rc != 0) {
        goto done;
    }

    prof_elf_load_bias(&elf, ph, &o->obj);

    for (i = 0; i < elf.ehdr.e_phnum && o->build_id[0] == '\0'; i++) {
        if (ph[i].p_type != PT_NOTE || ph[i].p_filesz > PROF_SYM_NOTES_MAX) {
            continue;
        }

        rc = prof_elf_read_alloc(&elf, ph[i].p_offset, ph[i].p_filesz,
                                 &notes);
        if (rc != 0) {
            break;
        }

        align = ph[i].p_align == 8 ? 8 : 4;
        rc = prof_elf_build_id(notes, ph[i].p_filesz, align, o->build_id);
        free(notes);

        if (rc == -ENOEXEC) {
            break;
        }
    }

    free(ph);

done:

    o->obj.corrupt = (rc == -ENOEXEC);
    close(elf.fd);
}


void
prof_sym_object_free(prof_sym_object_t *o)
{
    prof_symbol_table_free(&o->table);
    free((char *) o->obj.path);

    if (o->image_fd >= 0) {
        close(o->image_fd);
    }

    prof_sym_dwarf_forget(o);

    free(o);
}


prof_sym_object_t *
prof_sym_object_create(prof_symbolizer_t *sym, uint64_t start, uint64_t end,
    uint64_t off, uint64_t inode, const char *path, int file)
{
    prof_sym_object_t  *o, **objects;

    objects = realloc(sym->objects,
                      (sym->nobjects + 1) * sizeof(prof_sym_object_t *));
    if (objects == NULL) {
        return NULL;
    }

    sym->objects = objects;

    o = calloc(1, sizeof(prof_sym_object_t));
    if (o == NULL) {
        return NULL;
    }

    o->obj.path = strdup(path);
    if (o->obj.path == NULL) {
        free(o);
        return NULL;
    }

    o->obj.id = ++sym->next_id;
    o->obj.start = start;
    o->obj.end = end;
    o->obj.file_offset = off;
    o->obj.load_bias = start - off;
    o->obj.build_id = o->build_id;
    o->inode = inode;
    o->image_fd = -1;
    o->names_fd = -1;
    o->dwarf_fd = -1;

    if (!file && strcmp(path, "[vdso]") == 0
        && prof_sym_vdso_image(o) == 0)
    {
        file = 1;
    }

    if (file) {
        prof_sym_object_inspect(o);
        sym->stats.objects_corrupt += o->obj.corrupt;

    } else {
        o->loaded = 1;
    }

    sym->objects[sym->nobjects++] = o;

    return o;
}


/*
 * Frees the objects the last read of the maps did not show, after reading
 * them again when the loader's objects changed.
 */
size_t
prof_symbolizer_collect(prof_symbolizer_t *sym)
{
    size_t              i, kept, evicted;
    prof_sym_object_t  *o;

    if (!sym->maps_tried) {
        return 0;
    }

    if (prof_sym_loader_generation() != sym->loader_generation) {
        (void) prof_symbolizer_refresh(sym);
    }

    kept = 0;
    evicted = 0;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->mapped) {
            sym->objects[kept++] = o;
            continue;
        }

        prof_sym_object_free(o);
        evicted++;
    }

    sym->nobjects = kept;
    sym->stats.objects_evicted += evicted;

    return evicted;
}
