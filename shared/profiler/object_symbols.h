/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The function names of an object the symbolizer holds, from the first
 * file at hand that has them (symbolizer.h says in which order), loaded
 * once. prof_symbolizer_symbols(), prof_symbolizer_symbols_loaded() and
 * prof_symbolizer_parse_file_for_test() (symbolizer.h) are here too.
 *
 * For the files that implement symbolizer.h only. Threading: the
 * symbolizer's thread. Reads the object's file and its debug files: may
 * block. Memory: the names belong to the object (its table).
 */

#ifndef PROF_OBJECT_SYMBOLS_H
#define PROF_OBJECT_SYMBOLS_H

#include "profiler/object_cache.h"


/*
 * The symbols of an object, from the first of: its .symtab, the .symtab
 * of its debug file by build id under debug_dir, of the debug file its
 * .gnu_debuglink names (debug_dir NULL: no other file is read), its
 * MiniDebugInfo with its .dynsym, its .dynsym. A malformed object file
 * has none and is marked corrupt. Records where they came from (names)
 * and, when that file may have DWARF, its path (names_path).
 */
void prof_sym_object_load(const char *debug_dir, prof_sym_object_t *o);

/*
 * Its symbols, loaded, held in the symbol store (store NULL: none): the
 * first profiler process to load them puts them there, the others map
 * them and free their own. Not the vdso's (no file).
 */
void prof_sym_object_share(prof_symbol_store_t *store, prof_sym_object_t *o);


#endif /* PROF_OBJECT_SYMBOLS_H */
