/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The worker's status slot, written by its profiler process: counters,
 * the last upload and error, where the objects' names come from, what
 * LuaJIT support found and what the process holds.
 */

#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "channel/status.h"
#include "profiler/aggregator.h"
#include "profiler/status_publish.h"
#include "profiler/symbol_store.h"


/*
 * This process's proportional set size is read again when its resident
 * size moved by more than an eighth since the last read, or a minute
 * passed: the kernel walks every mapping for it (a tenth of the profiler
 * process's CPU on a busy worker when it was read each second), and only
 * counts its resident pages for the other (statm).
 */
#define PROF_PSS_EVERY_NS  (60 * 1000 * 1000 * 1000LL)


/* This process's proportional set size, from the kernel: bytes, 0. */
static uint64_t
prof_status_read_pss(void)
{
    FILE                *f;
    char                 line[128];
    unsigned long long   kb;

    f = fopen("/proc/self/smaps_rollup", "re");
    if (f == NULL) {
        return 0;
    }

    kb = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "Pss: %llu kB", &kb) == 1) {
            break;
        }
    }

    (void) fclose(f);

    return (uint64_t) kb * 1024;
}


/* This process's resident pages, from the kernel's counters: 0 if not
   known. */
static uint64_t
prof_status_resident_pages(void)
{
    int                 fd;
    char                text[128];
    ssize_t             n;
    unsigned long long  size, resident;

    fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }

    n = read(fd, text, sizeof(text) - 1);
    (void) close(fd);

    if (n <= 0) {
        return 0;
    }

    text[n] = '\0';

    return (sscanf(text, "%llu %llu", &size, &resident) == 2) ? resident : 0;
}


/* This process's PSS (and its heap's bytes in use), read again when
   they may have moved (see above). */
static uint64_t
prof_status_pss(prof_process_t *p)
{
    int64_t   now_ns;
    uint64_t  resident, moved;

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    resident = prof_status_resident_pages();
    moved = (resident > p->pss_resident) ? resident - p->pss_resident
                                         : p->pss_resident - resident;

    if (p->pss_read_ns == 0 || resident == 0
        || moved > p->pss_resident / 8
        || now_ns - p->pss_read_ns >= PROF_PSS_EVERY_NS)
    {
        p->pss = prof_status_read_pss();
        p->pss_read_ns = now_ns;
        p->pss_resident = resident;
#ifdef __GLIBC__
        {
            /* (It walks the allocator's free lists: as seldom.) */
            struct mallinfo2  mi = mallinfo2();

            p->heap = mi.uordblks + mi.hblkhd;
        }
#endif
    }

    return p->pss;
}


/* What this process holds, for the status page. */
static void
prof_status_memory(prof_process_t *p, prof_status_memory_t *m)
{
    prof_symbolizer_stats_t    ss;
    prof_symbol_store_stats_t  st;

    m->pss = prof_status_pss(p);
    m->heap = p->heap;
    m->queued = prof_queue_allocated_bytes(&p->queue);
    m->queue_limit = p->conf.memory_limit;
    m->tables = (p->aggregator != NULL) ? prof_aggregator_bytes(p->aggregator)
                                        : 0;

    prof_symbolizer_stats(p->symbolizer, &ss);
    m->functions = ss.functions;
    m->function_bytes = ss.function_bytes;
    m->dwarf_open = ss.dwarf_open;

    prof_symbol_store_stats(p->store, &st);
    m->store = st.bytes;
    m->store_images = st.images;
    m->store_mapped = st.mapped;
}


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

    if (p->pyroscope != NULL) {
        info.last_push = prof_uploader_last(p->pyroscope,
                                            &info.last_push_ns);
    }

    if (p->otlp != NULL) {
        info.last_export = prof_uploader_last(p->otlp, &info.last_export_ns);
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

    prof_status_memory(p, &info.memory);
    prof_stalls_status(p, &info.loop);

    prof_status_publish(p->conf.status_slot, &p->channel->diagnostics, &info);
    prof_buffer_free(&symbols);
}
