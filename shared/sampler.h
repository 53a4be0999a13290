/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Sampler: records where the worker's main thread burns CPU and spends wall
 * time, into batches for the aggregator. One per process.
 *
 * - CPU: a timer on the thread's own CPU clock sends it SIGPROF every
 *   interval of CPU time it uses; the handler (signal_path.c) walks the
 *   native stack with the unwind table into a preallocated ring of slots.
 *   A thread that uses no CPU gets no signal. Each such sample weighs
 *   interval * (1 + timer overruns).
 * - Wall: accounted on the sampled thread itself, without a ticking
 *   thread. Each CPU signal takes the wall time since the last account:
 *   the part the thread spent in its event wait (timed with the TSC) goes
 *   to the event wait's stack, the rest to the stack sampled (off-CPU time
 *   = that rest - CPU: preempted or blocked there). A flush accounts the
 *   time since the last signal the same way (the wait's stack, and where
 *   the thread last ran), so a worker that sleeps for a whole period gets
 *   its wall time without one wake-up. The sampler thread wakes a few times a
 *   second only: it drains the ring into batches and, when the thread
 *   neither waited nor burned CPU for a while (blocked outside its event
 *   loop), asks it for its stack with tgkill, to account the blocked time.
 *
 * Threading contract:
 * - prof_sampler_start, _stop, _flush, _capture_idle_stack and the hot
 *   functions below are called by the sampled thread (the nginx worker's
 *   main thread) only. None of them blocks, except _stop, which joins the
 *   sampler thread.
 * - The sampler thread is created with every signal blocked. It takes the
 *   queue's mutex only; it waits for the handler through futex words. It
 *   rebuilds the unwind table when the handler met code outside it and
 *   the set of loaded objects changed since (dlopen).
 * - The SIGPROF handler runs on the sampled thread and is async-signal-
 *   safe (signal_path.c, whose undefined symbols CI checks): a table walk
 *   into a preallocated slot, clock_gettime, a futex wake. No malloc, no
 *   locks, no I/O, no read of memory not proven mapped. SIGPROF signals
 *   the sampler did not arm are handed to the action installed before it,
 *   or ignored.
 * Memory: the sampler owns its slots and current batch; batches belong to
 * the queue; endpoint logs go with their barrier.
 */

#ifndef PROF_SAMPLER_H
#define PROF_SAMPLER_H

#include <stdint.h>

#include "diagnostics.h"
#include "sample_queue.h"
#include "unwind.h"


typedef struct prof_sampler_s  prof_sampler_t;


typedef struct {
    int64_t        interval_ns;
    unsigned       max_frames;      /* 8 .. PROF_MAX_FRAMES_LIMIT */
    int64_t        push_every_ns;   /* hand partial batches over this often */
    prof_queue_t  *queue;
    prof_diagnostics_t  *diagnostics;
    void         (*notify)(void *data);   /* a batch was queued */
    void          *notify_data;
    int64_t        start_monotonic_ns;    /* when the first profile started
                                             (0: at prof_sampler_start) */
    prof_unwind_table_t  *unwind_table;   /* the caller's (kept by it), or
                                             NULL: the sampler builds one */
} prof_sampler_conf_t;


/*
 * What the sampled thread tells the handler, with plain stores (the
 * handler runs on the same thread): the request executing (a tag the
 * sampler issues; samples carry it), and whether it waits in its event
 * loop. The server resolves a tag into labels only when a sample carried
 * it (sampled == tag), off the signal path.
 */
typedef struct {
    uint64_t       epoch;           /* the last tag issued */
    uint64_t       published;       /* the tag executing, 0: none */
    uint64_t       sampled;         /* the last tag a sample carried */
    uint32_t       waiting;         /* in the event wait */
    uint32_t       waits;           /* event waits entered */
    uint64_t       wait_start;      /* TSC when the wait began */
    uint64_t       wait_ticks;      /* TSC ticks spent waiting, all */
} prof_sampler_hot_t;


/* Samples the calling thread. 0 or -errno (-EBUSY: one is running). */
int prof_sampler_start(prof_sampler_t **sampler,
    const prof_sampler_conf_t *conf);

/*
 * Stops sampling: the wall time since the last sample, a final flush
 * barrier (with the period's endpoint log, may be NULL), then the thread
 * is joined and SIGPROF restored.
 */
void prof_sampler_stop(prof_sampler_t *s, prof_endpoint_log_t *endpoints);

/*
 * Closes the profile now: the barrier follows every sample taken before
 * and carries the period's endpoint log (may be NULL) to the aggregator.
 * Never blocks.
 */
void prof_sampler_flush(prof_sampler_t *s, prof_endpoint_log_t *endpoints);

/*
 * Records the stack the event wait's time goes to: the caller's callers
 * (skip_frames of them dropped), below the given leaf frames (innermost
 * first, e.g. the wait function and the event loop's poll function).
 */
void prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames);

prof_sampler_hot_t *prof_sampler_hot(prof_sampler_t *s);


/* A new request executes from now: its tag. */
static inline uint64_t
prof_request_enter(prof_sampler_hot_t *h)
{
    uint64_t  tag;

    tag = h->epoch + 1;
    h->epoch = tag;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    h->published = tag;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    return tag;
}


static inline void
prof_request_leave(prof_sampler_hot_t *h)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    h->published = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}


/* Whether a sample carried tag (the handler writes sampled). */
static inline int
prof_request_sampled(prof_sampler_hot_t *h, uint64_t tag)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    return h->sampled == tag;
}


/*
 * The event wait, timed with the TSC (an instruction, where a clock read
 * would cost tens): wall time is split between the wait and the stacks
 * sampled in the proportion of TSC ticks waited. The sampler thread reads
 * waits and waiting.
 */
static inline void
prof_wait_begin(prof_sampler_hot_t *h)
{
    h->wait_start = __builtin_ia32_rdtsc();
    __atomic_store_n(&h->waits, h->waits + 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&h->waiting, 1, __ATOMIC_RELAXED);
}


static inline void
prof_wait_end(prof_sampler_hot_t *h)
{
    uint64_t  now;

    now = __builtin_ia32_rdtsc();
    h->wait_ticks += (now > h->wait_start) ? now - h->wait_start : 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&h->waiting, 0, __ATOMIC_RELAXED);
}


#endif /* PROF_SAMPLER_H */
