/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The DWARF of the file an object's names came from (its own, a debug
 * file, debuginfod's), for the functions inlined at a pc and their lines:
 * prof_symbolizer_inlines() (symbolizer.h) is here. At most 256 MB of
 * DWARF sections (decompressed) are read for an object; past that, it has
 * no inlined functions.
 *
 * For the files that implement symbolizer.h only. Threading: the
 * symbolizer's thread. Reads the file the first time an object is asked:
 * may block. Memory: the object owns its DWARF (libdw's) and the
 * descriptors of the file, until prof_sym_dwarf_forget().
 */

#ifndef PROF_DWARF_INLINES_H
#define PROF_DWARF_INLINES_H

#include "profiler/object_cache.h"


/*
 * The file the names of o came from is no longer its names' (its object
 * is freed, or debuginfod's debug file replaced them): its DWARF, its path
 * and its descriptors go.
 */
void prof_sym_dwarf_forget(prof_sym_object_t *o);


#endif /* PROF_DWARF_INLINES_H */
