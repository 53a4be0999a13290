/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The objects a symbolizer holds: one per executable mapping of a file
 * (or the vdso) that its reads of the maps showed, with what is known of
 * it (load bias, build id, function names, DWARF), kept once unmapped
 * until prof_symbolizer_collect() frees it.
 *
 * For the files that implement symbolizer.h only. Threading: the
 * symbolizer's thread (no lock). Creating an object reads its ELF file:
 * it may block. Memory: the symbolizer owns its objects, and each object
 * its path, build id, symbol table and the descriptors it keeps open.
 */

#ifndef PROF_OBJECT_CACHE_H
#define PROF_OBJECT_CACHE_H

#include <elfutils/libdw.h>
#include <stdint.h>

#include "profiler/elf_file.h"
#include "profiler/symbol_store.h"
#include "profiler/symbol_table.h"
#include "profiler/symbolizer.h"


typedef struct {
    prof_object_t        obj;               /* what callers see: first, a
                                               prof_object_t * is one */
    char                 build_id[2 * PROF_ELF_BUILD_ID_MAX + 1];
    uint64_t             inode;             /* of the file, from the maps */
    unsigned             mapped:1;          /* in the last maps read */
    unsigned             seen:1;            /* in the maps read under way */
    unsigned             loaded:1;          /* symbols were looked for */
    unsigned             corrupt_reported:1;
    unsigned             asked:1;           /* of debuginfod, not taken */
    unsigned             unnamed:1;         /* a pc of it in no function */
    unsigned             renamed:1;         /* by the last take_fetched */
    unsigned             fetched:1;         /* debuginfod's file taken */
    unsigned             fetched_reported:1;
    prof_symbols_e       names;             /* where they came from, once
                                               loaded */
    prof_symbol_table_t  table;             /* its functions */
    char                 image[32];         /* where to read the ELF when
                                               not at obj.path: the vdso */
    int                  image_fd;
    char                *names_path;        /* the file its names came
                                               from, when its DWARF may
                                               tell inlined functions */
    int                  names_fd;          /* or that file open: -1 */
    const void          *inline_table;      /* of that file, from the */
    size_t               inline_table_len;  /* symbol store, once asked */
    prof_symbol_store_t *inline_store;      /* (inline_table.h), or */
    Dwarf               *dwarf;             /* its DWARF, without a store */
    int                  dwarf_fd;
    int64_t              dwarf_retry_ns;    /* not asked before: its
                                               image was being built */
    unsigned             dwarf_tried:1;
    unsigned             dwarf_used:1;      /* asked since the last
                                               release */
} prof_sym_object_t;


/* The file to read an object's ELF data from. */
static inline const char *
prof_sym_image(prof_sym_object_t *o)
{
    return o->image[0] != '\0' ? o->image : o->obj.path;
}


/*
 * Adds an object for a mapping of the maps (path copied), with a new id:
 * NULL when out of memory. file is 0 when the mapping has no file to read
 * (a deleted file, the vdso): such an object has no names, but the vdso
 * when its image can be copied from memory.
 */
prof_sym_object_t *prof_sym_object_create(prof_symbolizer_t *sym,
    uint64_t start, uint64_t end, uint64_t off, uint64_t inode,
    const char *path, int file);

/*
 * Best effort: the load bias and build id of a new object, from its ELF
 * file. A malformed file marks it corrupt.
 */
void prof_sym_object_inspect(prof_sym_object_t *o);

/* Frees an object the symbolizer no longer holds. */
void prof_sym_object_free(prof_sym_object_t *o);


#endif /* PROF_OBJECT_CACHE_H */
