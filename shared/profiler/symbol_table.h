/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The function symbols of an ELF file (.symtab or .dynsym, and
 * MiniDebugInfo's .symtab beside .dynsym), sorted by address, and the
 * lookup of the function containing an address.
 *
 * Bounded: a symbol table or its string table of at most 512 MiB; a table
 * whose names are not within its string table is -ENOEXEC, never a crash.
 *
 * Threading: none of its own; a table belongs to its caller. It reads
 * files, so it may block: never on a signal handler or the event loop.
 * Memory: a table owns its symbols and the string tables their names
 * point into, or maps its image in the symbol store (shared), until
 * prof_symbol_table_free().
 */

#ifndef PROF_SYMBOL_TABLE_H
#define PROF_SYMBOL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "profiler/symbol_store.h"


typedef struct {
    uint64_t             addr;              /* ELF virtual address */
    uint64_t             size;
    const char          *name;              /* in the table's strtab */
    unsigned             rank;              /* lower is preferred */
    unsigned             unsized;           /* size: up to the next one */
} prof_symbol_t;


/* Zeroed: no symbols. */
typedef struct {
    prof_symbol_t       *syms;              /* sorted by addr, no dups */
    size_t               nsyms;
    char                *strtab;
    char                *strtab_extra;      /* MiniDebugInfo's, beside
                                               .dynsym's */
    const void          *image;             /* or, syms NULL, the table
                                               in the symbol store */
    size_t               image_len;
    prof_symbol_store_t *store;
} prof_symbol_table_t;


/*
 * Reads the functions of the first section of the given type (SHT_SYMTAB,
 * SHT_DYNSYM) in the file at path into an empty table: 0, -ENOENT when
 * there are none, -ENOEXEC when the file is malformed, -EFBIG past the
 * bound, -errno. On failure the table is left as it was.
 */
int prof_symbol_table_read(prof_symbol_table_t *t, const char *path,
    uint32_t type);

/*
 * .dynsym and MiniDebugInfo's .symtab of the ELF file at path together,
 * into an empty table: 0, -ENOEXEC when .dynsym is malformed, or -ENOENT
 * when the file has no MiniDebugInfo with functions (the table is then
 * left as it was).
 */
int prof_symbol_table_read_minidebuginfo(prof_symbol_table_t *t,
    const char *path);

/*
 * The table, read, held once for the instance: in the symbol store, as
 * the image of kind (PROF_STORE_SYMTAB...) of the file it was read from,
 * open at fd, which the first process to get there puts there. Its own
 * arrays are then freed. 0, or -errno (the table is left as it was).
 */
int prof_symbol_table_share(prof_symbol_table_t *t,
    prof_symbol_store_t *store, int fd, uint32_t kind);

/* The name of the function containing vaddr, or NULL. */
const char *prof_symbol_table_lookup(const prof_symbol_table_t *t,
    uint64_t vaddr);

/* Frees what the table holds; it is then empty. */
void prof_symbol_table_free(prof_symbol_table_t *t);


#endif /* PROF_SYMBOL_TABLE_H */
