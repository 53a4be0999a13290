/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Names from debuginfod: the debug file of an object whose frames the
 * files at hand leave unnamed is asked, and taken, once fetched, as the
 * object's names.
 */

#define _GNU_SOURCE

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "profiler/debuginfod.h"
#include "profiler/debuginfod_symbols.h"
#include "profiler/dwarf_inlines.h"
#include "profiler/object_cache.h"
#include "profiler/symbol_table.h"
#include "profiler/symbolizer_internal.h"


/*
 * A frame of o has no name: its debug file is asked of debuginfod, when
 * none of the files at hand had its functions.
 */
void
prof_sym_ask_debuginfod(prof_symbolizer_t *sym, prof_sym_object_t *o)
{
    if (sym->debuginfod == NULL || o->asked || o->fetched
        || o->obj.corrupt || o->build_id[0] == '\0'
        || o->names == PROF_SYMBOLS_SYMTAB
        || o->names == PROF_SYMBOLS_DEBUG_FILE)
    {
        return;
    }

    o->asked = 1;
    (void) prof_debuginfod_ask(sym->debuginfod, o->build_id);
}


int
prof_symbolizer_renamed(prof_symbolizer_t *sym, const prof_object_t *object)
{
    /* obj is the first member of the symbolizer's object */
    return ((const prof_sym_object_t *) object)->renamed;
}


void
prof_symbolizer_set_debuginfod(prof_symbolizer_t *sym, prof_debuginfod_t *d,
    int64_t wait_ms)
{
    sym->debuginfod = d;
    sym->fetch_wait_ms = wait_ms;
}


/* Its .symtab for o's, from a debug file open at fd: 0, or -errno. */
static int
prof_sym_take_debug_file(prof_sym_object_t *o, int fd)
{
    int                   rc;
    char                  path[32];
    prof_symbol_table_t   fetched;

    memset(&fetched, 0, sizeof(fetched));
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

    rc = prof_symbol_table_read(&fetched, path, SHT_SYMTAB);
    if (rc != 0) {
        return rc;
    }

    prof_symbol_table_free(&o->table);

    o->table = fetched;
    o->names = PROF_SYMBOLS_DEBUGINFOD;

    prof_sym_dwarf_forget(o);
    o->names_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);

    return 0;
}


size_t
prof_symbolizer_take_fetched(prof_symbolizer_t *sym, int wait)
{
    int                      fd;
    size_t                   i, asked, renamed;
    prof_sym_object_t       *o;
    prof_debuginfod_state_e  state;

    if (sym->debuginfod == NULL) {
        return 0;
    }

    /* Those that failed are asked again (debuginfod.h says when). */
    for (i = 0, asked = 0; i < sym->nobjects; i++) {
        sym->objects[i]->renamed = 0;

        if (sym->objects[i]->unnamed) {
            prof_sym_ask_debuginfod(sym, sym->objects[i]);
        }

        asked += sym->objects[i]->asked;
    }

    if (asked == 0) {
        return 0;
    }

    if (wait) {
        (void) prof_debuginfod_wait(sym->debuginfod,
                                    prof_clock_ns(CLOCK_MONOTONIC)
                                    + sym->fetch_wait_ms * 1000000);
    }

    renamed = 0;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (!o->asked) {
            continue;
        }

        state = prof_debuginfod_take(sym->debuginfod, o->build_id, &fd);
        if (state == PROF_DEBUGINFOD_PENDING) {
            continue;
        }

        /* A failure is asked again by the next frame left unnamed. */
        o->asked = 0;

        if (state != PROF_DEBUGINFOD_FOUND) {
            continue;
        }

        o->fetched = 1;
        o->renamed = (prof_sym_take_debug_file(o, fd) == 0);
        renamed += o->renamed;
        close(fd);
    }

    return renamed;
}


const prof_object_t *
prof_symbolizer_fetched_object(prof_symbolizer_t *sym)
{
    size_t              i;
    prof_sym_object_t  *o;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->names == PROF_SYMBOLS_DEBUGINFOD && !o->fetched_reported) {
            o->fetched_reported = 1;
            return &o->obj;
        }
    }

    return NULL;
}
