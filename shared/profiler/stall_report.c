/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Stalls of the worker's event loop: counted, named and logged from the
 * reports of the sampler thread (ring_drain.h).
 */

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "channel/lua_frames.h"
#include "profiler/process.h"
#include "profiler/stall_report.h"


#define PROF_STALL_WINDOW_NS  (60 * 1000000000LL)


static const char *
prof_stall_phase(uint32_t phase)
{
    switch (phase) {

    case PROF_PHASE_START:
        return "the worker's start (init_process, init_worker_by_lua)";

    case PROF_PHASE_TIMERS:
        return "a timer";

    case PROF_PHASE_POSTED:
        return "a posted event";

    case PROF_PHASE_NGINX:
        return "a timer or a posted event";

    default:
        return "an event with no request known";
    }
}


/*
 * A frame's name appended at p (at most end): a Lua function as
 * "name (file:line)", a native one by its name; unnamed code (JIT code,
 * an object without symbols) as "?". The number of bytes written, 0 for
 * a marker frame.
 */
static size_t
prof_stall_frame(prof_process_t *p, uint64_t pc, char *buf, size_t size)
{
    int                    n;
    size_t                 len;
    uint32_t               line;
    const char            *file, *at;
    const prof_address_t  *info;

    if (PROF_FRAME_IS_MARKER(pc)) {
        return 0;
    }

    info = prof_aggregator_name(p->aggregator, pc);

    if (info == NULL || info->function == NULL) {
        n = snprintf(buf, size, "?");

    } else if (info->file != NULL) {
        /* Lua: the line running, else (JIT code) the function's first. */
        file = info->file;
        if (file[0] == '@' || file[0] == '=') {
            file++;
        }

        line = info->line ? info->line : (uint32_t) info->start_line;
        len = strlen(file);

        /* A chunk's main function is named after the chunk. */
        if (strncmp(info->function, file, len) == 0
            && info->function[len] == ':')
        {
            n = snprintf(buf, size, "%s:%u", file, (unsigned) line);

        } else {
            n = snprintf(buf, size, "%s (%s:%u)", info->function, file,
                         (unsigned) line);
        }

    } else {
        /* A symbol's version left out: "read", not "read@@GLIBC_2.2.5". */
        at = strchr(info->function, '@');
        n = snprintf(buf, size, "%.*s",
                     (int) (at ? at - info->function
                               : (ptrdiff_t) strlen(info->function)),
                     info->function);
    }

    return (n < 0) ? 0 : ((size_t) n >= size ? size - 1 : (size_t) n);
}


/* The code of a report: its frames named, leaf first. */
static void
prof_stall_code(prof_process_t *p, const prof_stall_report_t *r, char *buf,
    size_t size)
{
    char      *at, *end, name[512];
    size_t     n;
    uint32_t   i, named;
    uint64_t   pc;
    int        unknown;

    at = buf;
    end = buf + size;
    *at = '\0';
    named = 0;
    unknown = 0;

    for (i = 0; i < r->frame_count && named < PROF_STALL_NAMED; i++) {
        /* A caller's return address, moved back into its call. */
        pc = r->frames[i];
        if (i > 0 && !PROF_FRAME_IS_MARKER(pc) && !PROF_FRAME_IS_LUA(pc)) {
            pc--;
        }

        n = prof_stall_frame(p, pc, name, sizeof(name));
        if (n == 0) {
            continue;
        }

        /* Unnamed frames in a row said once. */
        if (name[0] == '?' && name[1] == '\0') {
            if (unknown) {
                continue;
            }
            unknown = 1;

        } else {
            unknown = 0;
        }

        n = (size_t) snprintf(at, end - at, "%s%s", named ? " < " : "", name);
        if (n >= (size_t) (end - at)) {
            break;
        }

        at += n;
        named++;
    }

    if (named == 0) {
        (void) snprintf(buf, size, "not sampled");
    }
}


static void
prof_stall_copy(char *to, size_t size, const char *from)
{
    size_t  n;

    n = strlen(from);
    if (n >= size) {
        n = size - 1;
    }

    memcpy(to, from, n);
    to[n] = '\0';
}


/*
 * The worker's stack could not be read from outside (the sampler thread
 * says why, once): said once, with what it means.
 */
static void
prof_stalls_refused(prof_process_t *p)
{
    uint32_t        err;
    prof_stalls_t  *st = &p->stalls;

    err = __atomic_load_n(&p->stall_mailbox.stack_reads_refused,
                          __ATOMIC_ACQUIRE);

    if (err == 0 || st->refused_told) {
        return;
    }

    st->refused_told = 1;

    prof_log(&p->log, PROF_LOG_NOTICE, "profiling: the profiler process "
             "may not read worker %d's stack (%s): its stack is asked for "
             "with a signal when it is blocked outside its event loop, "
             "which ends a sleep or a poll it is in early (EINTR); the "
             "worker must be dumpable, and Yama's ptrace_scope at most 1",
             (int) p->pid, strerror((int) err));
}


void
prof_stalls_report(prof_process_t *p)
{
    char                  line[PROF_STALL_SUBJECT_MAX + 2048], code[1536];
    char                  more[96];
    int64_t               now_ns;
    uint64_t              lost;
    const char           *what, *when;
    prof_stalls_t        *st = &p->stalls;
    prof_stall_report_t   r;

    prof_stalls_refused(p);

    while (prof_stall_mailbox_take(&p->stall_mailbox, &r, &lost)) {
        st->count++;

        if (r.stall.length_ns > st->longest_ns) {
            st->longest_ns = r.stall.length_ns;
            st->longest_at_ns = prof_clock_ns(CLOCK_REALTIME);
            st->longest_pending = 1;
        }

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);

        if (now_ns - st->window_ns >= PROF_STALL_WINDOW_NS) {
            st->window_ns = now_ns;
            st->window_lines = 0;
        }

        if (st->window_lines >= PROF_STALL_LINES && !st->longest_pending) {
            st->not_logged++;
            continue;
        }

        prof_stall_code(p, &r, code, sizeof(code));

        /* A stack read from outside (the worker blocked in a system
           call) names the code and the turn's phase, but what an event
           ran for only the worker's own samples name. */
        what = r.stall.sampled ? prof_stall_phase(r.stall.phase)
               : r.stall.phase == PROF_PHASE_START
               ? prof_stall_phase(PROF_PHASE_START)
               : r.outside == 0 ? "what no sample caught"
               : r.outside - 1 == PROF_PHASE_EVENTS
               ? "an event not named (its stack was read while it was "
                 "blocked)"
               : prof_stall_phase(r.outside - 1);
        when = (r.stall.sampled == 1 && !r.past && r.frame_count > 0)
               ? " (sampled before the threshold)" : "";

        more[0] = '\0';
        if (st->not_logged > 0) {
            (void) snprintf(more, sizeof(more), " (and %llu more not "
                            "logged since the last line)",
                            (unsigned long long) st->not_logged);
        }

        (void) snprintf(line, sizeof(line),
                        "profiling: a stall of %lld ms in worker %d%s, "
                        "%lld ms of it on CPU, in %.*s; code%s: %s",
                        (long long) (r.stall.length_ns / 1000000),
                        (int) p->pid, more,
                        (long long) (r.cpu_ns / 1000000),
                        (int) (r.stall.subject_length
                               ? r.stall.subject_length : strlen(what)),
                        r.stall.subject_length ? r.stall.subject : what,
                        when, code);

        if (st->longest_pending) {
            st->longest_pending = 0;
            prof_stall_copy(st->longest, sizeof(st->longest),
                            line + sizeof("profiling: ") - 1);
        }

        if (st->window_lines >= PROF_STALL_LINES) {
            /* The longest's line, for the status page, not logged. */
            st->not_logged++;
            continue;
        }

        st->window_lines++;
        st->logged++;
        st->not_logged = 0;

        prof_log(&p->log, PROF_LOG_WARN | PROF_LOG_REPORT, "%s", line);
    }

    /* Lost on the way: counted, never named. */
    st->count += lost - st->lost;
    st->not_logged += lost - st->lost;
    st->lost = lost;
}


void
prof_stalls_status(prof_process_t *p, prof_status_loop_t *l)
{
    double                  rate;
    unsigned                i;
    prof_stalls_t          *st = &p->stalls;
    prof_sampled_thread_t  *h = p->sampled;

    memset(l, 0, sizeof(prof_status_loop_t));

    l->threshold_ns = h->stall_ns;
    l->count = st->count;
    l->logged = st->logged;
    l->longest_ns = st->longest_ns;
    l->longest_at_ns = st->longest_at_ns;
    memcpy(l->longest, st->longest, sizeof(l->longest));

    __atomic_load(&h->ns_per_tick, &rate, __ATOMIC_RELAXED);

    for (i = 0; i < PROF_STATUS_TURN_BUCKETS && i < PROF_TURN_BUCKETS; i++) {
        l->turns[i] = __atomic_load_n(&h->turns[i], __ATOMIC_RELAXED);
        l->turn_le_ns[i] = (uint64_t) ((double) (2ULL << (i < 62 ? i : 62))
                                       * rate);
    }
}
