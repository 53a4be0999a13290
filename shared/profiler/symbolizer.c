/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Symbolizer: finds the ELF object (path, build id, load bias) mapping a pc
 * of a process (this one, or the worker of a profiler process) from its
 * maps, and the function containing it. This file holds its life cycle and
 * lookups; the maps, the objects, their names, their DWARF and debuginfod's
 * files are in the files symbolizer_internal.h lists.
 * Threading, memory and when the maps are read: see symbolizer.h.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/debuginfod_symbols.h"
#include "profiler/object_cache.h"
#include "profiler/object_symbols.h"
#include "profiler/proc_maps.h"
#include "profiler/symbol_table.h"
#include "profiler/symbolizer.h"
#include "profiler/symbolizer_internal.h"


#define PROF_SYM_DEBUG_DIR      "/usr/lib/debug/.build-id"


prof_symbolizer_t *
prof_symbolizer_create(void)
{
    prof_symbolizer_t  *sym;

    sym = calloc(1, sizeof(prof_symbolizer_t));
    if (sym == NULL) {
        return NULL;
    }

    sym->debug_dir = strdup(PROF_SYM_DEBUG_DIR);
    if (sym->debug_dir == NULL) {
        free(sym);
        return NULL;
    }

    strcpy(sym->maps_path, "/proc/self/maps");

    return sym;
}


void
prof_symbolizer_freeze(prof_symbolizer_t *sym)
{
    __atomic_store_n(&sym->frozen, 1, __ATOMIC_RELEASE);
}


void
prof_symbolizer_set_pid(prof_symbolizer_t *sym, pid_t pid)
{
    snprintf(sym->maps_path, sizeof(sym->maps_path), "/proc/%d/maps",
             (int) pid);
}


void
prof_symbolizer_destroy(prof_symbolizer_t *sym)
{
    size_t  i;

    if (sym == NULL) {
        return;
    }

    for (i = 0; i < sym->nobjects; i++) {
        prof_sym_object_free(sym->objects[i]);
    }

    free(sym->objects);
    free(sym->active);
    free(sym->anonymous);
    free(sym->debug_dir);
    free(sym);
}


/* Applies to the objects whose symbols are not loaded yet. */

int
prof_symbolizer_set_debug_dir(prof_symbolizer_t *sym, const char *dir)
{
    char  *copy;

    if (dir == NULL) {
        return -EINVAL;
    }

    copy = strdup(dir);
    if (copy == NULL) {
        return -ENOMEM;
    }

    free(sym->debug_dir);
    sym->debug_dir = copy;

    return 0;
}


const prof_object_t *
prof_symbolize(prof_symbolizer_t *sym, uint64_t pc, const char **function)
{
    int                 corrupt;
    prof_sym_object_t  *o;

    if (function) {
        *function = NULL;
    }

    o = prof_sym_object_find(sym, pc);

    if (o == NULL) {
        /* JIT code: known since the last read, and no object's. */
        if (prof_sym_anonymous_find(sym, pc)
            || !prof_sym_should_reread(sym))
        {
            return NULL;
        }

        (void) prof_symbolizer_refresh(sym);

        o = prof_sym_object_find(sym, pc);
        if (o == NULL) {
            return NULL;
        }
    }

    if (!o->loaded) {
        corrupt = o->obj.corrupt;
        prof_sym_object_load(sym->debug_dir, o);
        prof_sym_object_share(sym->store, o);
        sym->stats.objects_corrupt += !corrupt && o->obj.corrupt;
    }

    if (function) {
        *function = prof_symbol_table_lookup(&o->table,
                                             pc - o->obj.load_bias);

        if (*function == NULL) {
            o->unnamed = 1;
            prof_sym_ask_debuginfod(sym, o);
        }
    }

    return &o->obj;
}


const char *
prof_symbolizer_function(prof_symbolizer_t *sym, const prof_object_t *object,
    uint64_t pc)
{
    prof_sym_object_t  *o;

    /* obj is the first member of the symbolizer's object */
    o = (prof_sym_object_t *) object;

    return o->loaded ? prof_symbol_table_lookup(&o->table,
                                                pc - o->obj.load_bias)
                     : NULL;
}


size_t
prof_symbolizer_object_count(prof_symbolizer_t *sym)
{
    return sym->nactive;
}


const prof_object_t *
prof_symbolizer_object(prof_symbolizer_t *sym, size_t i)
{
    return (i < sym->nactive) ? &sym->active[i]->obj : NULL;
}


const prof_object_t *
prof_symbolizer_corrupt_object(prof_symbolizer_t *sym)
{
    size_t              i;
    prof_sym_object_t  *o;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->obj.corrupt && !o->corrupt_reported) {
            o->corrupt_reported = 1;
            return &o->obj;
        }
    }

    return NULL;
}


void
prof_symbolizer_stats(prof_symbolizer_t *sym, prof_symbolizer_stats_t *stats)
{
    size_t              i;
    prof_sym_object_t  *o;

    *stats = sym->stats;
    stats->objects_held = sym->nobjects;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];
        stats->functions += o->table.nsyms;
        stats->function_bytes += o->table.nsyms * sizeof(prof_symbol_t);
        stats->dwarf_open += (o->dwarf != NULL);
    }
}
