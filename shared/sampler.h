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
 *   thread in its process. Each CPU signal takes the wall time since the last account:
 *   the part the thread spent in its event wait (timed with the TSC) goes
 *   to the event wait's stack, the rest to the stack sampled (off-CPU time
 *   = that rest - CPU: preempted or blocked there). A flush accounts the
 *   time since the last signal the same way (the wait's stack, and where
 *   the thread last ran), so a worker that sleeps for a whole period gets
 *   its wall time without one wake-up. The sampler thread (in the profiler
 *   process, profiler.h) wakes a few times a second only: it drains the
 *   ring into batches and, when the thread neither waited nor burned CPU
 *   for a while (blocked outside its event loop), asks it for its stack
 *   with a queued SIGPROF, to account the blocked time.
 *
 * Two sides, in two processes or one (tests):
 * - the sampled thread (the nginx worker's only thread) calls
 *   prof_sampler_start, _stop, _flush, _maintain, _capture_idle_stack and
 *   the hot functions below; none of them blocks. _maintain rebuilds the
 *   unwind table when the handler met code outside it and the set of
 *   loaded objects changed since (dlopen).
 * - the profiler side calls prof_sampler_run (after start, in the process
 *   forked by the sampled one, or in the same process) and _finish (once
 *   the sampled thread stopped or is gone). The sampler thread is created
 *   with every signal blocked. It takes the queue's mutex only; it waits
 *   for the handler through process-shared futex words.
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
struct prof_lua_s;


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
    uint64_t       wait_start;      /* TSC when the wait began */
    uint64_t       wait_ticks;      /* TSC ticks spent waiting, all */
    uint32_t       unknown_pcs;     /* walks that left the unwind table */
    uint32_t       unknown_pcs_seen;    /* by prof_sampler_maintain */
} prof_sampler_hot_t;


/* Samples the calling thread. 0 or -errno (-EBUSY: one is running). */
int prof_sampler_start(prof_sampler_t **sampler,
    const prof_sampler_conf_t *conf);

/* The sampler thread, in the calling process: 0 or -errno. */
int prof_sampler_run(prof_sampler_t *s);

/*
 * Stops sampling: the wall time since the last sample, a final flush
 * barrier closing period, SIGPROF restored. The sampler thread finishes
 * on its own side (prof_sampler_finish). Never blocks.
 */
void prof_sampler_stop(prof_sampler_t *s, uint64_t period);

/* A stopped (and, in one process, finished) sampler's mapping unmapped in
   the calling process (the other process keeps its own). */
void prof_sampler_release(prof_sampler_t *s);

/*
 * On the profiler side: a final barrier when the sampled thread went
 * without one (it crashed), then the thread joined. The mapping stays
 * (prof_sampler_release): other threads may still read its fields.
 */
void prof_sampler_finish(prof_sampler_t *s);

/*
 * Closes profile number period now: the barrier follows every sample
 * taken before; the aggregator takes that period's endpoint counts with
 * it. Never blocks.
 */
void prof_sampler_flush(prof_sampler_t *s, uint64_t period);

/* See prof_sampler_maintain. */
void prof_sampler_maintain_table(prof_sampler_t *s, int64_t now_ns);

/*
 * Records the stack the event wait's time goes to: the caller's callers
 * (skip_frames of them dropped), below the given leaf frames (innermost
 * first, e.g. the wait function and the event loop's poll function).
 */
void prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames);

prof_sampler_hot_t *prof_sampler_hot(prof_sampler_t *s);

/* LuaJIT's frames too from now (lua_frames.h: the table, in memory shared with
   the profiler side, its vm found); on the sampled thread. */
void prof_sampler_enable_lua(prof_sampler_t *s, struct prof_lua_s *lua);

/*
 * On the sampled thread, once the rest of the program started (it may
 * have installed its own): the actions for SIGPROF and, with LuaJIT's
 * frames, SIGSEGV become the sampler's again, the ones found kept to hand
 * on what is not the sampler's, as for those there before it started.
 */
void prof_sampler_retake_signals(prof_sampler_t *s);


/*
 * From the sampled thread's event loop (now: a coarse monotonic clock):
 * the unwind table rebuilt when walks left it and objects were loaded.
 * A load and a compare unless walks left it.
 */
static inline void
prof_sampler_maintain(prof_sampler_t *s, prof_sampler_hot_t *h,
    int64_t now_ns)
{
    if (__atomic_load_n(&h->unknown_pcs, __ATOMIC_RELAXED)
        != h->unknown_pcs_seen)
    {
        prof_sampler_maintain_table(s, now_ns);
    }
}


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
 * sampled in the proportion of TSC ticks waited. wait_ticks adds up
 * modulo 2^64 (a TSC behind on another core subtracts; a total below zero
 * counts as no wait, signal_path.c).
 * The sampler thread reads waiting, and wait_start to see the loop move.
 */
static inline void
prof_wait_begin(prof_sampler_hot_t *h)
{
    __atomic_store_n(&h->wait_start, __builtin_ia32_rdtsc(), __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&h->waiting, 1, __ATOMIC_RELAXED);
}


static inline void
prof_wait_end(prof_sampler_hot_t *h)
{
    h->wait_ticks += __builtin_ia32_rdtsc() - h->wait_start;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&h->waiting, 0, __ATOMIC_RELAXED);
}


#endif /* PROF_SAMPLER_H */
