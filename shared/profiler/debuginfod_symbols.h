/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Names from debuginfod's debug files for the objects the files at hand
 * leave unnamed (stripped: .dynsym, MiniDebugInfo, nothing): asked when a
 * pc of such an object is in no function, taken as its names by
 * prof_symbolizer_take_fetched() (symbolizer.h, with
 * prof_symbolizer_set_debuginfod(), prof_symbolizer_renamed() and
 * prof_symbolizer_fetched_object(), which are here).
 *
 * For the files that implement symbolizer.h only. Threading: the
 * symbolizer's thread; asking does not wait (the fetch runs on
 * debuginfod.h's own thread). Memory: a debug file taken is the object's.
 */

#ifndef PROF_DEBUGINFOD_SYMBOLS_H
#define PROF_DEBUGINFOD_SYMBOLS_H

#include "profiler/object_cache.h"
#include "profiler/symbolizer.h"


/*
 * A frame of o has no name: its debug file is asked of debuginfod (when
 * the symbolizer has one), when none of the files at hand had its
 * functions and it was not asked already.
 */
void prof_sym_ask_debuginfod(prof_symbolizer_t *sym, prof_sym_object_t *o);


#endif /* PROF_DEBUGINFOD_SYMBOLS_H */
