/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The worker's status slot, written by its profiler process: counters,
 * the last upload and error, where the objects' names come from, and
 * what LuaJIT support found.
 */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/buffer.h"
#include "channel/status.h"
#include "profiler/status_publish.h"


/* The status slot, from the loop thread: counters and the last news. */
void
prof_publish_status(prof_process_t *p)
{
    int                   rc, kind;
    char                  lua[PROF_STATUS_TEXT_MAX];
    size_t                i;
    prof_buffer_t         symbols = { NULL, 0, 0 };
    prof_status_info_t    info;
    const prof_object_t  *o;
    static const char    *sources[] = {
        "none", ".symtab", "debug file", "MiniDebugInfo", "debuginfod",
        ".dynsym"
    };

    /* The worker's slot while it is its: released when the worker went. */
    if (__atomic_load_n(&p->worker_gone, __ATOMIC_ACQUIRE)
        || __atomic_load_n(&p->conf.status_slot->pid, __ATOMIC_ACQUIRE)
           != p->pid)
    {
        return;
    }

    memset(&info, 0, sizeof(info));
    info.running = 1;
    info.profiler_pid = getpid();
    info.started_ns = p->started_ns;
    info.last_error_ns = p->log.last_error_ns;
    info.last_error = p->log.last_error;
    rc = 0;

    if (p->uploader != NULL) {
        info.last_upload = prof_uploader_last(p->uploader,
                                              &info.last_upload_ns);
    }

    /* Where the names of the objects in its profiles come from. */
    for (i = 0; i < prof_symbolizer_object_count(p->symbolizer); i++) {
        kind = prof_symbolizer_symbols_loaded(p->symbolizer, i);
        if (kind >= 0) {
            o = prof_symbolizer_object(p->symbolizer, i);
            rc |= prof_buffer_printf(&symbols, "%s\t%s\n", o->path,
                                     sources[kind]);
        }
    }

    if (rc == 0 && prof_buffer_append(&symbols, "", 1) == 0) {
        info.symbols = (const char *) symbols.data;
    }

    if (p->lua != NULL
        && __atomic_load_n(&p->lua->state, __ATOMIC_ACQUIRE)
           == PROF_LUA_NOT_RECOGNIZED
        && snprintf(lua, sizeof(lua), "not recognized, no Lua frames (%s)",
                    p->lua->why) > 0)
    {
        info.lua = lua;

    } else if (p->lua != NULL
        && __atomic_load_n(&p->lua->state, __ATOMIC_ACQUIRE)
           == PROF_LUA_FOUND
        && snprintf(lua, sizeof(lua), "%s (%s): Lua frames in %llu "
                        "samples, %llu cut short, %u functions met",
                        p->lua->vm.version, p->lua->vm.library,
                        (unsigned long long) p->lua->walks,
                        (unsigned long long) p->lua->lost,
                        __atomic_load_n(&p->lua->count, __ATOMIC_ACQUIRE))
           > 0)
    {
        info.lua = lua;
    }

    prof_status_publish(p->conf.status_slot, &p->channel->diagnostics, &info);
    prof_buffer_free(&symbols);
}
