/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The identification line: once, at NOTICE, the module's version and what
 * its unwinder, symbolizer and Lua support found, and whether the agent
 * took the first profile.
 */

#define _GNU_SOURCE

#include <limits.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "common/buffer.h"
#include "profiler/identify.h"


/* The identification line waits this long for the worker's first event
   loop turn to say whether it runs LuaJIT, looking every ..._STEP_MS. */
#define PROF_IDENTIFY_LUA_WAIT_MS  5000
#define PROF_IDENTIFY_LUA_STEP_MS  10


/* The file name of a path. */
static const char *
prof_base_name(const char *path)
{
    const char  *slash;

    slash = strrchr(path, '/');

    return slash != NULL ? slash + 1 : path;
}


/*
 * Once, at NOTICE, in one line for a bug report: the version, what the
 * unwinder and the symbolizer found, and whether the agent took the
 * first profile (agent: its first outcome; NULL when there is none yet).
 */
void
prof_identify(prof_process_t *p, const char *agent)
{
    int                   rc;
    char                  exe[PATH_MAX];
    size_t                i, j, n, count[PROF_SYMBOLS_DYNSYM + 1];
    ssize_t               len;
    const char           *main_symbols;
    prof_buffer_t         b = { NULL, 0, 0 },
                          names[PROF_SYMBOLS_DYNSYM + 1];
    prof_symbols_e        kind;
    const prof_object_t  *o;
    static const char    *kinds[] = {
        "none", "all functions (.symtab)", "all functions (debug file)",
        "all functions (MiniDebugInfo)", "all functions (debuginfod)",
        "exported functions (.dynsym)"
    };
    static const char    *libraries[] = {
        "without", "with .symtab", "with a debug file", "with MiniDebugInfo",
        "with debuginfod's debug file", "with .dynsym only"
    };

    if (p->identify_logged || !p->conf.identify) {
        return;
    }

    p->identify_logged = 1;

    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[len > 0 ? len : 0] = '\0';

    if (prof_symbolizer_object_count(p->symbolizer) == 0) {
        (void) prof_symbolizer_refresh(p->symbolizer);
    }

    memset(count, 0, sizeof(count));
    memset(names, 0, sizeof(names));
    main_symbols = "unknown";
    rc = 0;

    /* Where each object's names come from: the first few by name. */

    n = prof_symbolizer_object_count(p->symbolizer);

    for (i = 0; i < n; i++) {
        o = prof_symbolizer_object(p->symbolizer, i);

        /* A file's other mappings (under qemu-user: all it has). */
        for (j = 0; j < i; j++) {
            if (strcmp(prof_symbolizer_object(p->symbolizer, j)->path,
                       o->path) == 0)
            {
                break;
            }
        }

        if (j < i) {
            continue;
        }

        kind = prof_symbolizer_symbols(p->symbolizer, i);

        if (strcmp(o->path, exe) == 0) {
            main_symbols = kinds[kind];
            continue;
        }

        if (count[kind]++ < 8) {
            rc |= prof_buffer_printf(&names[kind], "%s%s",
                                     names[kind].length ? ", " : "",
                                     prof_base_name(o->path));

        } else if (count[kind] == 9) {
            rc |= prof_buffer_append_str(&names[kind], ", ...");
        }
    }

    rc |= prof_buffer_printf(&b, "profiling: ngx_http_profiling_module %s "
        "(nginx %s, %s): unwind tables for %llu objects (%llu KB, %llu left "
        "out); symbols: %s %s; libraries", PROF_VERSION,
        p->runtime_version ? p->runtime_version : "", p->arch,
        (unsigned long long)
            prof_counter_get(p->channel->diagnostics.unwind_objects),
        (unsigned long long)
            prof_counter_get(p->channel->diagnostics.unwind_table_bytes) / 1024,
        (unsigned long long)
            prof_counter_get(p->channel->diagnostics.unwind_objects_skipped),
        prof_base_name(exe), main_symbols);

    for (i = PROF_SYMBOLS_SYMTAB; i <= PROF_SYMBOLS_DYNSYM + 1; i++) {
        kind = (i <= PROF_SYMBOLS_DYNSYM) ? (prof_symbols_e) i
                                          : PROF_SYMBOLS_NONE;

        rc |= prof_buffer_printf(&b, "%s %zu %s", i > 1 ? "," : ":",
                                 count[kind], libraries[kind]);

        if (names[kind].length > 0) {
            rc |= prof_buffer_printf(&b, " (%.*s)", (int) names[kind].length,
                                     (char *) names[kind].data);
        }

        prof_buffer_free(&names[kind]);
    }

    if (p->lua != NULL
        && __atomic_load_n(&p->lua->state, __ATOMIC_ACQUIRE)
           == PROF_LUA_FOUND)
    {
        rc |= prof_buffer_printf(&b, "; Lua: %s (%s)", p->lua->vm.version,
                                 p->lua->vm.library);

    } else if (p->lua != NULL
               && __atomic_load_n(&p->lua->state, __ATOMIC_ACQUIRE)
                  == PROF_LUA_NOT_RECOGNIZED)
    {
        rc |= prof_buffer_printf(&b, "; Lua: not recognized, no Lua "
                                 "frames (%s)", p->lua->why);
    }

    if (p->agent_url == NULL) {
        rc |= prof_buffer_append_str(&b, "; agent: none");

    } else {
        rc |= prof_buffer_printf(&b, "; agent %s: %s (%s)", p->agent_url,
                                 agent == NULL ? "not tried"
                                 : strncmp(agent, "uploaded", 8) == 0
                                 ? "reachable" : "not reachable",
                                 agent ? agent : "no profile yet");
    }

    if (rc == 0 && prof_buffer_append(&b, "", 1) == 0) {
        prof_log(&p->log, PROF_LOG_NOTICE, "%s", (char *) b.data);
    }

    prof_buffer_free(&b);
}


/* Without an agent, the line goes once the worker said what Lua it has. */
static void
prof_on_identify_timer(uv_timer_t *timer)
{
    prof_process_t  *p = timer->data;

    if (p->lua != NULL
        && __atomic_load_n(&p->lua->state, __ATOMIC_ACQUIRE)
           == PROF_LUA_UNKNOWN
        && uv_now(&p->loop) - p->identify_from_ms < PROF_IDENTIFY_LUA_WAIT_MS)
    {
        return;
    }

    uv_timer_stop(timer);
    prof_identify(p, NULL);
}


void
prof_identify_start(prof_process_t *p)
{
    /* With an agent, the line waits for its first answer. */
    (void) uv_timer_init(&p->loop, &p->identify_timer);
    p->identify_timer.data = p;

    if (p->uploader == NULL) {
        uv_update_time(&p->loop);
        p->identify_from_ms = uv_now(&p->loop);
        (void) uv_timer_start(&p->identify_timer, prof_on_identify_timer, 0,
                              PROF_IDENTIFY_LUA_STEP_MS);
    }
}


void
prof_identify_close(prof_process_t *p)
{
    prof_identify(p, NULL);
    uv_timer_stop(&p->identify_timer);
    uv_close((uv_handle_t *) &p->identify_timer, NULL);
}
