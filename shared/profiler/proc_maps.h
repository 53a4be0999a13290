/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The maps of the process a symbolizer names (its own, or a worker's):
 * prof_symbolizer_refresh() (symbolizer.h) reads them into the objects it
 * holds; these say when to read them again and find the object of a pc.
 *
 * For the files that implement symbolizer.h only. Threading: the
 * symbolizer's thread. prof_sym_loader_generation() takes the loader's
 * lock (dl_iterate_phdr()) for one callback that does not allocate: never
 * call it with that lock held. Memory: nothing of their own.
 */

#ifndef PROF_PROC_MAPS_H
#define PROF_PROC_MAPS_H

#include <stdint.h>

#include "profiler/object_cache.h"
#include "profiler/symbolizer.h"


/*
 * The loader's count of objects loaded plus unloaded: it changes with
 * every dlopen() and dlclose() that maps or unmaps an object.
 */
unsigned long long prof_sym_loader_generation(void);

/*
 * For a pc in no known object: whether to read the maps again (1 or 0).
 * Always when they were never read or the loader's objects changed; else
 * at most a burst at once, then once a second on average.
 */
int prof_sym_should_reread(prof_symbolizer_t *sym);

/*
 * Whether pc was in an executable mapping of no file (JIT code) at the
 * last read of the maps: no object's, and no reason to read them again.
 */
int prof_sym_anonymous_find(prof_symbolizer_t *sym, uint64_t pc);

/* The object mapping pc at the last read of the maps, or NULL. */
prof_sym_object_t *prof_sym_object_find(prof_symbolizer_t *sym,
    uint64_t pc);


#endif /* PROF_PROC_MAPS_H */
