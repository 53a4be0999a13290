/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * An object's inline table: what its DWARF says of every pc (the line
 * running there, and the functions inlined there with the line running
 * in each), computed once from the DWARF with libdw and kept as one
 * compact, pointer-free image that the symbol store holds for the
 * instance, so that a profiler process names inlined frames with a binary
 * search in shared pages, holding none of libdw's tables.
 *
 * The answers are libdw's, as dwarf_inlines.c asked them of it pc by pc
 * (dwarf_addrdie, dwarf_getsrc_die, dwarf_getscopes and the scopes of its
 * innermost DIE): the table holds them for every range of pcs over which
 * none of what they depend on changes (a line row, an arange, the pc
 * ranges of a DIE), each range's answer taken at its start.
 *
 * Threading: none of its own. Building reads the whole DWARF (seconds for
 * a large debug file, megabytes of libdw's memory, all freed before it
 * returns): the profiler process's loop thread, never a signal handler
 * nor a worker's event loop. Lookups read the image only: any thread,
 * no allocation.
 */

#ifndef PROF_INLINE_TABLE_H
#define PROF_INLINE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "profiler/symbolizer.h"


/*
 * The inline table of the DWARF of the ELF file open at fd (not moved), in
 * memory of its own (malloc, *image and *len): 0, -ENOENT when the file
 * has no DWARF to read (no .debug_info, or no pc in it), -EFBIG when its
 * pcs span 4 GB or more, -ENOEXEC when libdw refuses it, -ENOMEM. The
 * signature of a symbol store's builder (symbol_store.h); data unused.
 */
int prof_inline_table_build(int fd, void *data, void **image, size_t *len);

/*
 * Whether image (len bytes, from the store: another process wrote it) is a
 * whole inline table whose every index stays within it.
 */
int prof_inline_table_valid(const void *image, size_t len);

/*
 * The functions inlined at vaddr (an ELF virtual address of the file),
 * as prof_symbolizer_inlines() says (symbolizer.h): how many (at most max,
 * else none), innermost first, each with its line; *line the line in the
 * function around them. The names point into the image.
 */
size_t prof_inline_table_lookup(const void *image, uint64_t vaddr,
    prof_inline_t *frames, size_t max, uint32_t *line);


#endif /* PROF_INLINE_TABLE_H */
