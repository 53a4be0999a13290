/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The sampler thread: turns the ring's slots into samples, closes
 * profiles at the flushes the sampled thread asks for; its watch over a
 * thread out of its event wait is blocked_watch.c's.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "common/clock.h"
#include "common/futex.h"
#include "profiler/ring_drain_internal.h"
#include "profiler/thread.h"


static void prof_ring_drain_stalls(prof_ring_drain_t *drain, int final);


void
prof_ring_drain_notify(prof_ring_drain_t *drain)
{
    if (drain->conf.notify != NULL) {
        drain->conf.notify(drain->conf.notify_data);
    }
}


static void
prof_ring_drain_push(prof_ring_drain_t *drain, int64_t now_ns)
{
    prof_queue_push(drain->conf.queue, drain->batch);
    drain->batch = NULL;
    drain->last_push_ns = now_ns;
    prof_ring_drain_notify(drain);
}


/* Room for a sample of size bytes in the current batch, or NULL. */
static unsigned char *
prof_ring_drain_reserve(prof_ring_drain_t *drain, size_t size, int64_t now_ns)
{
    prof_batch_t        *next;
    prof_diagnostics_t  *d = drain->sampler->conf.diagnostics;

    if (drain->batch == NULL) {
        drain->batch = prof_queue_acquire(drain->conf.queue);
        if (drain->batch == NULL) {
            return NULL;
        }
    }

    if (drain->batch->used + size > drain->batch->capacity) {
        next = prof_queue_acquire(drain->conf.queue);

        if (next == NULL) {
            /* The ceiling: drop this whole batch and reuse it. */
            prof_counter_add(d->dropped_batches, 1);
            prof_counter_add(d->dropped_samples, drain->batch->sample_count);
            drain->batch->used = 0;
            drain->batch->sample_count = 0;

        } else {
            prof_ring_drain_push(drain, now_ns);
            drain->batch = next;
        }
    }

    if (drain->batch->used + size > drain->batch->capacity) {
        return NULL;
    }

    return drain->batch->data + drain->batch->used;
}


/* The sampling intervals a wall time covers. */
static uint32_t
prof_ring_drain_intervals(prof_sampler_t *s, int64_t wall_ns)
{
    int64_t  n;

    n = (wall_ns + s->conf.interval_ns / 2) / s->conf.interval_ns;

    return (n > UINT32_MAX) ? UINT32_MAX : (uint32_t) n;
}


/* 0: recorded; -1: dropped (and counted). */
static int
prof_ring_drain_append(prof_ring_drain_t *drain, const prof_sample_t *values,
    const uint64_t *frames, int64_t now_ns)
{
    size_t               size;
    unsigned char       *p;
    prof_diagnostics_t  *d = drain->sampler->conf.diagnostics;

    size = prof_sample_size(values->frame_count);

    p = prof_ring_drain_reserve(drain, size, now_ns);
    if (p == NULL) {
        prof_counter_add(d->dropped_samples, 1);
        return -1;
    }

    memcpy(p, values, sizeof(prof_sample_t));
    memcpy(p + sizeof(prof_sample_t), frames,
           values->frame_count * sizeof(uint64_t));

    drain->batch->used += size;
    drain->batch->sample_count++;

    prof_counter_add(d->samples_recorded, 1);

    return 0;
}


/* Wall time without CPU at a stack: the wait's, or where it last ran. */
static void
prof_ring_drain_append_wall(prof_ring_drain_t *drain, int idle, int64_t wall_ns,
    int64_t off_cpu_ns, int64_t time_ns, int64_t now_ns)
{
    prof_sample_t        values;
    const uint64_t      *frames;
    prof_sampler_t      *s = drain->sampler;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    if (wall_ns <= 0) {
        return;
    }

    memset(&values, 0, sizeof(values));
    values.wall_ns = wall_ns;
    values.off_cpu_ns = off_cpu_ns;
    values.wall_samples = prof_ring_drain_intervals(s, wall_ns);
    values.time_ns = time_ns;

    if (idle && __atomic_load_n(&s->idle_stack_ready, __ATOMIC_ACQUIRE)) {
        values.frame_count = s->idle_frame_count;
        frames = s->idle_frames;
        prof_counter_add(d->idle_samples, 1);

    } else if (drain->last_frame_count > 0) {
        values.frame_count = drain->last_frame_count;
        frames = drain->last_frames;

    } else {
        prof_counter_add(d->wall_dropped, 1);
        prof_counter_add(d->wall_dropped_ns, wall_ns);
        return;
    }

    (void) prof_ring_drain_append(drain, &values, frames, now_ns);
}


/*
 * A slot's turn: its stack kept for a stall's report (the turn's first
 * past the threshold, else its last); past the threshold, the turn's
 * length then in ms, for the sample's label (else 0).
 */
static uint32_t
prof_ring_drain_turn(prof_ring_drain_t *drain, const prof_slot_t *slot,
    uint32_t outside)
{
    int64_t          stall_ns;
    uint32_t         past;
    unsigned         n;
    prof_sampler_t  *s = drain->sampler;

    stall_ns = s->sampled.stall_ns;

    if (stall_ns <= 0 || slot->turn == 0) {
        return 0;
    }

    past = (slot->turn_ns >= stall_ns);

    if (slot->turn != drain->turn || !drain->turn_past) {
        n = slot->frame_count;
        if (n > PROF_STALL_FRAMES) {
            n = PROF_STALL_FRAMES;
        }

        memcpy(drain->turn_frames, slot->frames, n * sizeof(uint64_t));
        drain->turn_frame_count = n;
        drain->turn = slot->turn;
        drain->turn_past = past;
        drain->turn_outside = outside;
    }

    if (!past) {
        return 0;
    }

    /* At least 1: the threshold is 1 ms or more. */
    return (slot->turn_ns / 1000000 > UINT32_MAX)
           ? UINT32_MAX : (uint32_t) (slot->turn_ns / 1000000);
}


void
prof_ring_drain_take_stack(prof_ring_drain_t *drain, prof_slot_t *slot,
    uint32_t outside, int64_t now_ns)
{
    prof_sample_t        values;
    prof_sampler_t      *s = drain->sampler;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    if (slot->frame_count > 0
        && slot->frames[slot->frame_count - 1] == PROF_FRAME_TRUNCATED)
    {
        prof_counter_add(d->truncated_stacks, 1);
    }

    if (slot->unwind_stop != 0) {
        prof_counter_add(d->unwind_stops, 1);
        if (slot->unwind_stop == PROF_SLOT_STOP_NO_OBJECT) {
            prof_counter_add(d->unwind_stops_unknown_code, 1);
        }
    }

    prof_counter_add(d->scanned_frames, slot->scanned);

    memset(&values, 0, sizeof(values));
    values.wall_ns = slot->wall_ns;
    values.off_cpu_ns = slot->off_cpu_ns;
    values.wall_samples = prof_ring_drain_intervals(s, slot->wall_ns);
    values.request = slot->request;
    values.time_ns = slot->time_ns;
    values.frame_count = slot->frame_count;
    values.stall_ms = prof_ring_drain_turn(drain, slot, outside);

    if (slot->kind == PROF_SLOT_CPU) {
        values.cpu_ns = (int64_t) slot->interval_ns * slot->weight;
        values.cpu_samples = slot->weight;
        prof_counter_add(d->cpu_samples, 1);

        memcpy(drain->last_frames, slot->frames,
               slot->frame_count * sizeof(uint64_t));
        drain->last_frame_count = slot->frame_count;

        /* The CPU its turn used, as its samples stand for it. */
        if (slot->turn != 0) {
            if (slot->turn != drain->cpu_turn) {
                drain->cpu_turn = slot->turn;
                drain->cpu_turn_ns = 0;
            }
            drain->cpu_turn_ns += values.cpu_ns;
        }

    } else {
        prof_counter_add(d->blocked_samples, 1);
    }

    (void) prof_ring_drain_append(drain, &values, slot->frames, now_ns);

    prof_ring_drain_append_wall(drain, 1, slot->idle_ns, slot->idle_ns,
                                slot->time_ns, now_ns);
}


/* A slot the handler filled: its cost, its samples. */
static void
prof_ring_drain_take_slot(prof_ring_drain_t *drain, prof_slot_t *slot,
    int64_t now_ns)
{
    prof_diagnostics_t  *d = drain->sampler->conf.diagnostics;

    drain->window_handler_ns += prof_diagnostics_add_handler(d,
                                    slot->handler_ns, slot->handler_wall_ns);

    prof_ring_drain_take_stack(drain, slot, 0, now_ns);
}


/* A barrier closes the profile after every sample taken before it. */
static void
prof_ring_drain_barrier(prof_ring_drain_t *drain, prof_flush_t *f,
    int64_t now_ns)
{
    prof_batch_t  *b;

    prof_ring_drain_append_wall(drain, 0, f->wall_ns, f->off_cpu_ns,
                                f->monotonic_ns, now_ns);
    prof_ring_drain_append_wall(drain, 1, f->idle_ns, f->idle_ns,
                                f->monotonic_ns, now_ns);

    b = drain->batch;
    if (b == NULL) {
        b = prof_queue_acquire(drain->conf.queue);
    }
    if (b == NULL) {
        b = prof_queue_acquire_barrier(drain->conf.queue);
    }
    if (b == NULL) {
        /* No memory at all: the next barrier closes both. */
        return;
    }

    b->flush_after = 1;
    b->flush_monotonic_ns = f->monotonic_ns;
    b->flush_realtime_ns = f->realtime_ns;
    b->flush_last_tag = f->last_tag;
    b->flush_period = f->period;

    drain->batch = b;
    prof_ring_drain_push(drain, now_ns);
}


void
prof_ring_drain_slots(prof_ring_drain_t *drain, int64_t now_ns)
{
    uint32_t         limit, added;
    prof_slot_t     *slot;
    prof_flush_t    *f;
    prof_sampler_t  *s = drain->sampler;

    for ( ;; ) {
        added = __atomic_load_n(&s->flushes_added, __ATOMIC_ACQUIRE);
        f = (s->flushes_taken != added)
            ? &s->flushes[s->flushes_taken % PROF_FLUSHES] : NULL;

        /* A stack read from outside: before the first flush whose
           account came after the one its wall time starts from. */
        if (drain->outside_pending
            && (f == NULL || f->monotonic_ns > drain->outside_from_ns))
        {
            prof_ring_drain_take_stack(drain, drain->outside,
                                       drain->outside_pending, now_ns);
            drain->outside_pending = 0;
        }

        limit = f ? f->write_index
                  : __atomic_load_n(&s->write_index, __ATOMIC_ACQUIRE);

        while (s->read_index != limit) {
            slot = prof_sampler_slot(s, s->read_index);

            if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE)
                != PROF_SLOT_READY)
            {
                break;
            }

            /* A stall that ended before this slot was taken: its turn's
               stack is the one kept now. */
            prof_ring_drain_stalls(drain, 0);

            prof_ring_drain_take_slot(drain, slot, now_ns);

            __atomic_store_n(&slot->state, PROF_SLOT_FREE, __ATOMIC_RELEASE);
            __atomic_store_n(&s->read_index, s->read_index + 1,
                             __ATOMIC_RELEASE);
        }

        prof_ring_drain_stalls(drain, 0);

        if (f == NULL || s->read_index != f->write_index) {
            return;
        }

        prof_ring_drain_barrier(drain, f, now_ns);
        __atomic_store_n(&s->flushes_taken, s->flushes_taken + 1,
                         __ATOMIC_RELEASE);
    }
}


/*
 * profiling_max_cpu: each window, the profiler's share of the worker's
 * CPU (the handler's time there, this process's CPU but for what naming
 * code seen for the first time took: a burst when the worker first runs
 * it, an object's tables built once, which no interval lowers) against
 * the ceiling. Over it two windows in a row (one alone is a profile's
 * close), the CPU timer's interval widens in
 * proportion (to 80% of the ceiling, at most eightfold a window, at most
 * 100 times the configured one, at most 1 s); under half of it, it
 * narrows back, at most by half a window, to the configured one. A
 * window in which the
 * worker used less than a quarter of its time decides nothing: the
 * profiler's fixed costs (its status, its profiles' close), which no
 * interval lowers, would look large against it, and its samples cost
 * little in absolute terms.
 */
#define PROF_THROTTLE_WINDOW_NS   (1000 * 1000 * 1000LL)
#define PROF_INTERVAL_MAX_NS      (1000 * 1000 * 1000LL)
#define PROF_INTERVAL_MAX_TIMES   100

/* The CPU naming new code took so far, the naming under way included. */
static int64_t
prof_ring_drain_naming_ns(prof_ring_drain_t *drain)
{
    int64_t  done, since, now;

    done = (int64_t) prof_counter_get(
                         drain->sampler->conf.diagnostics->naming_cpu_ns);

    if (drain->conf.naming_since == NULL) {
        return done;
    }

    since = __atomic_load_n(drain->conf.naming_since, __ATOMIC_ACQUIRE);
    now = (since >= 0) ? prof_clock_ns(drain->conf.naming_clock) : -1;

    return (now > since) ? done + (now - since) : done;
}


static void
prof_ring_drain_throttle(prof_ring_drain_t *drain, int64_t now_ns)
{
    double               share, target, factor;
    int64_t              worker_ns, own_ns, naming_ns, elapsed, used, now,
                         next, conf;
    prof_sampler_t      *s = drain->sampler;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    elapsed = now_ns - drain->window_ns;
    if (elapsed < PROF_THROTTLE_WINDOW_NS) {
        return;
    }

    worker_ns = prof_clock_ns(s->process_clock);
    own_ns = prof_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    naming_ns = prof_ring_drain_naming_ns(drain);

    conf = s->conf.interval_ns;
    now = __atomic_load_n(&s->interval_wanted_ns, __ATOMIC_RELAXED);

    if (now > conf) {
        prof_counter_add(d->throttled_ns, elapsed);
    }

    if (drain->window_ns != 0 && own_ns >= drain->window_own_ns) {
        prof_counter_add(d->profiler_cpu_ns, own_ns - drain->window_own_ns);
    }

    used = worker_ns - drain->window_worker_ns;

    if (drain->window_ns != 0 && drain->conf.max_cpu_ppm > 0
        && worker_ns >= 0 && own_ns >= 0 && used >= elapsed / 4)
    {
        share = (double) (drain->window_handler_ns
                          + (own_ns - drain->window_own_ns)
                          - (naming_ns - drain->window_naming_ns)) / used;
        target = 0.8 * drain->conf.max_cpu_ppm / 1e6;
        next = now;

        drain->windows_over = (share * 1e6 > drain->conf.max_cpu_ppm)
                              ? drain->windows_over + 1 : 0;

        if (drain->windows_over >= 2) {
            factor = share / target;
            next = (int64_t) (now * (factor > 8 ? 8 : factor));

        } else if (now > conf && share * 2e6 < drain->conf.max_cpu_ppm) {
            factor = share / target;
            next = (int64_t) (now * (factor < 0.5 ? 0.5 : factor));
        }

        if (next < conf) {
            next = conf;
        }
        if (next > conf * PROF_INTERVAL_MAX_TIMES) {
            next = conf * PROF_INTERVAL_MAX_TIMES;
        }
        if (next > PROF_INTERVAL_MAX_NS) {
            next = PROF_INTERVAL_MAX_NS;
        }

        if (next != now) {
            __atomic_store_n(&s->interval_wanted_ns, next, __ATOMIC_RELAXED);
            __atomic_store_n(&d->interval_ns, (uint64_t) next,
                             __ATOMIC_RELAXED);
            if (drain->conf.interval_told != NULL) {
                __atomic_store_n(drain->conf.interval_told, next,
                                 __ATOMIC_RELEASE);
                prof_ring_drain_notify(drain);
            }
        }
    }

    drain->window_ns = now_ns;
    drain->window_handler_ns = 0;
    drain->window_worker_ns = worker_ns;
    drain->window_own_ns = own_ns;
    drain->window_naming_ns = naming_ns;
}


/*
 * The stalls the sampled thread posted, each with the stack kept for its
 * turn, to the loop thread, in order with the slots: a stall is taken
 * once the slots filled before it ended are (all of them when final).
 */
static void
prof_ring_drain_stalls(prof_ring_drain_t *drain, int final)
{
    uint32_t               added;
    uint64_t               lost;
    prof_stall_t          *st;
    prof_sampler_t        *s = drain->sampler;
    prof_stall_report_t   *r;
    prof_stall_mailbox_t  *m = drain->conf.stalls;

    added = __atomic_load_n(&s->stalls_added, __ATOMIC_ACQUIRE);

    while (s->stalls_taken != added) {
        st = &s->stalls[s->stalls_taken % PROF_STALLS];

        if (!final && (int32_t) (st->write_index - s->read_index) > 0) {
            break;
        }

        if (m == NULL) {
            /* not reported */

        } else if (m->added - __atomic_load_n(&m->taken, __ATOMIC_ACQUIRE)
                   == PROF_STALL_REPORTS)
        {
            __atomic_add_fetch(&m->lost, 1, __ATOMIC_RELAXED);

        } else {
            r = &m->reports[m->added % PROF_STALL_REPORTS];
            memcpy(&r->stall, st, sizeof(prof_stall_t));
            r->cpu_ns = (drain->cpu_turn == st->turn) ? drain->cpu_turn_ns
                                                      : 0;

            if (drain->turn == st->turn) {
                r->past = drain->turn_past;
                r->outside = drain->turn_outside;
                r->frame_count = drain->turn_frame_count;
                memcpy(r->frames, drain->turn_frames,
                       drain->turn_frame_count * sizeof(uint64_t));

            } else {
                r->past = 0;
                r->outside = 0;
                r->frame_count = 0;
            }

            __atomic_store_n(&m->added, m->added + 1, __ATOMIC_RELEASE);
        }

        __atomic_store_n(&s->stalls_taken, s->stalls_taken + 1,
                         __ATOMIC_RELEASE);
        prof_ring_drain_notify(drain);
    }

    /* The sampled thread's, lost before they came here. */
    lost = __atomic_load_n(&s->stalls_lost, __ATOMIC_RELAXED);
    if (m != NULL && lost != drain->stalls_lost) {
        __atomic_add_fetch(&m->lost, lost - drain->stalls_lost,
                           __ATOMIC_RELAXED);
        drain->stalls_lost = lost;
        prof_ring_drain_notify(drain);
    }
}


int
prof_stall_mailbox_take(prof_stall_mailbox_t *m, prof_stall_report_t *r,
    uint64_t *lost)
{
    *lost = __atomic_load_n(&m->lost, __ATOMIC_RELAXED);

    if (m->taken == __atomic_load_n(&m->added, __ATOMIC_ACQUIRE)) {
        return 0;
    }

    memcpy(r, &m->reports[m->taken % PROF_STALL_REPORTS],
           sizeof(prof_stall_report_t));
    __atomic_store_n(&m->taken, m->taken + 1, __ATOMIC_RELEASE);

    return 1;
}


/*
 * Sleeps until woken while the sampled thread is in the wait the last two
 * looks found it in (idle a look distance at least): nothing to look at
 * until the wait ends, which wakes this thread (prof_wait_end), as a
 * sample, a flush, a stall or the stop do; the next look then at once.
 * 1: it slept.
 */
static int
prof_ring_drain_sleep_idle(prof_ring_drain_t *drain, uint32_t wake,
    int64_t now_ns)
{
    prof_sampler_t  *s = drain->sampler;

    if (!drain->watch_idle
        || !prof_waiting(__atomic_load_n(&s->sampled.wait_ticks,
                                         __ATOMIC_RELAXED))
        || __atomic_load_n(&s->sampled.wait_start, __ATOMIC_RELAXED)
           != drain->watch_waits)
    {
        return 0;
    }

    /* What it holds goes to the loop thread first: no more comes. */
    if (drain->batch != NULL && drain->batch->sample_count > 0) {
        prof_ring_drain_push(drain, now_ns);
    }

    /* Dekker's pair with prof_wait_end (sampler.h): the store, then the
       load, each side. */
    __atomic_store_n(&s->sampled.watcher_asleep, 1, __ATOMIC_SEQ_CST);

    if (prof_waiting(__atomic_load_n(&s->sampled.wait_ticks,
                                     __ATOMIC_SEQ_CST))
        && __atomic_load_n(&s->sampled.wait_start, __ATOMIC_RELAXED)
           == drain->watch_waits)
    {
        (void) prof_sampler_futex(&s->wake, FUTEX_WAIT, wake, NULL);
    }

    __atomic_store_n(&s->sampled.watcher_asleep, 0, __ATOMIC_RELAXED);

    /* A look at once: the turn that began has its own deadline. */
    drain->watch_next_ns = 0;
    drain->watch_idle = 0;

    return 1;
}


static void
prof_ring_drain_main(void *arg)
{
    int                 stopping;
    uint32_t            unknown;
    uint64_t            tables;
    prof_sampler_t     *s;
    int64_t             now_ns, next_ns;
    uint32_t            wake;
    struct timespec     deadline;
    prof_ring_drain_t  *drain = arg;

    s = drain->sampler;

    prof_thread_settle("prof-sampler", 0);

    drain->watch_ns = prof_clock_ns(CLOCK_MONOTONIC);
    drain->watch_cpu_ns = -1;
    drain->tables_told = prof_counter_get(s->conf.diagnostics->unwind_tables);

    for ( ;; ) {
        wake = __atomic_load_n(&s->wake, __ATOMIC_ACQUIRE);
        stopping = __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);

        prof_ring_drain_slots(drain, now_ns);

        if (stopping
            && s->flushes_taken
               == __atomic_load_n(&s->flushes_added, __ATOMIC_ACQUIRE))
        {
            prof_ring_drain_stalls(drain, 1);
            break;
        }

        prof_ring_drain_watch(drain, now_ns);
        prof_ring_drain_throttle(drain, now_ns);

        /* The worker loaded or unloaded objects (it built its unwind
           tables again), or its walks left them (code loaded a moment
           ago, or JIT code: told at most every 200 ms): the other side
           reads its maps while it lives. */
        tables = prof_counter_get(s->conf.diagnostics->unwind_tables);
        unknown = __atomic_load_n(&s->sampled.unknown_pcs, __ATOMIC_RELAXED);

        if (tables != drain->tables_told
            || (unknown != drain->unknown_told
                && now_ns - drain->unknown_told_ns >= PROF_UNKNOWN_TOLD_NS))
        {
            drain->tables_told = tables;
            drain->unknown_told = unknown;
            drain->unknown_told_ns = now_ns;
            prof_ring_drain_notify(drain);
        }

        if (prof_ring_drain_sleep_idle(drain, wake, now_ns)) {
            continue;
        }

        /* The next look, as the last one set it. */
        next_ns = drain->watch_next_ns;

        if (drain->batch != NULL && drain->batch->sample_count > 0) {
            if (now_ns - drain->last_push_ns >= drain->conf.push_every_ns) {
                prof_ring_drain_push(drain, now_ns);

            } else if (drain->last_push_ns + drain->conf.push_every_ns
                       < next_ns)
            {
                next_ns = drain->last_push_ns + drain->conf.push_every_ns;
            }
        }

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);
        if (next_ns <= now_ns) {
            continue;
        }

        deadline.tv_sec = next_ns / 1000000000;
        deadline.tv_nsec = next_ns % 1000000000;
        (void) prof_sampler_futex(&s->wake, FUTEX_WAIT_BITSET, wake,
                                  &deadline);
    }

    if (drain->batch != NULL && drain->batch->sample_count > 0) {
        prof_ring_drain_push(drain, prof_clock_ns(CLOCK_MONOTONIC));
    }
}


static void
prof_ring_drain_free(prof_ring_drain_t *drain)
{
    prof_remote_stack_free(drain->remote);
    free(drain->outside);
    free(drain->last_frames);
    free(drain);
}


int
prof_ring_drain_start(prof_ring_drain_t **drain, prof_sampler_t *s,
    const prof_ring_drain_conf_t *conf)
{
    int                 rc;
    prof_ring_drain_t  *d;

    d = calloc(1, sizeof(prof_ring_drain_t));
    if (d == NULL) {
        return -ENOMEM;
    }

    d->sampler = s;
    d->conf = *conf;

    d->last_frames = calloc(s->conf.max_frames + 1, sizeof(uint64_t));
    d->outside = calloc(1, s->slot_size);
    if (d->last_frames == NULL || d->outside == NULL) {
        prof_ring_drain_free(d);
        return -ENOMEM;
    }

    rc = prof_remote_stack_create(&d->remote, s);
    if (rc != 0) {
        prof_ring_drain_free(d);
        return rc;
    }

    d->last_push_ns = prof_clock_ns(CLOCK_MONOTONIC);

    rc = prof_thread_create(&d->thread, prof_ring_drain_main, d);
    if (rc != 0) {
        prof_ring_drain_free(d);
        return rc;
    }

    *drain = d;
    return 0;
}


void
prof_ring_drain_finish(prof_ring_drain_t *drain)
{
    prof_sampler_t  *s = drain->sampler;

    /* Its sampled thread is gone without a final barrier: one now. */
    if (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        prof_sampler_post_flush(s, __atomic_load_n(&s->period,
                                                   __ATOMIC_RELAXED), 1,
                                prof_clock_ns(CLOCK_MONOTONIC), 0, 0, 0);
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    }

    prof_sampler_wake(s);
    (void) uv_thread_join(&drain->thread);

    if (drain->batch != NULL) {
        prof_queue_release(drain->conf.queue, drain->batch);
        drain->batch = NULL;
    }

    prof_ring_drain_free(drain);
}
