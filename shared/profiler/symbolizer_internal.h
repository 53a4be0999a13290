/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The symbolizer's own state, shared by the files that implement
 * symbolizer.h (symbolizer.c, proc_maps.c, object_cache.c,
 * object_symbols.c, dwarf_inlines.c, debuginfod_symbols.c) and by no
 * other.
 *
 * Threading: the symbolizer's thread (no lock), but frozen, which any
 * thread may set (atomic, prof_symbolizer_freeze()).
 */

#ifndef PROF_SYMBOLIZER_INTERNAL_H
#define PROF_SYMBOLIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "profiler/debuginfod.h"
#include "profiler/object_cache.h"
#include "profiler/symbol_store.h"
#include "profiler/symbolizer.h"


struct prof_symbolizer_s {
    prof_sym_object_t  **objects;           /* held: mapped, and unmapped
                                               until collected */
    size_t               nobjects;
    prof_sym_object_t  **active;            /* mapped ones, by start */
    size_t               nactive;
    uint64_t            *anonymous;         /* executable mappings of no
                                               file (JIT code): start, end
                                               pairs, by start */
    size_t               nanonymous;
    char                *debug_dir;
    prof_debuginfod_t   *debuginfod;        /* NULL: none */
    prof_symbol_store_t *store;             /* the instance's, NULL: none
                                               (symbol_store.h) */
    int64_t              fetch_wait_ms;
    unsigned             next_id;
    unsigned             maps_tried:1;      /* a read was attempted */
    char                 maps_path[64];     /* /proc/self/maps, or the
                                               worker's */
    int                  frozen;            /* maps never read again */
    unsigned long long   loader_generation; /* loads + unloads at the last
                                               attempt to read the maps */
    int64_t              reread_due_ns;     /* rate of rereads for unknown
                                               pcs (GCRA) */
    prof_symbolizer_stats_t  stats;
};


#endif /* PROF_SYMBOLIZER_INTERNAL_H */
