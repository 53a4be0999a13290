/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Sampler, the sampled thread's side: records where the worker's main
 * thread burns CPU and spends wall time, into the ring its profiler
 * process drains into batches for the aggregator. One per process.
 *
 * - CPU: a timer on the thread's own CPU clock sends it SIGPROF every
 *   interval of CPU time it uses; the handler (signal_path.c) walks the
 *   native stack with the unwind table into a preallocated ring of slots.
 *   A thread that uses no CPU gets no signal. Each such sample weighs
 *   interval * (1 + timer overruns).
 * - Wall: accounted on the sampled thread itself, without a ticking
 *   thread in its process. Each CPU signal takes the wall time since the
 *   last account: the part the thread spent in its event wait (timed with
 *   the TSC) goes to the event wait's stack, the rest to the stack sampled
 *   (off-CPU time = that rest - CPU: preempted or blocked there). A flush
 *   accounts the time since the last signal the same way (the wait's
 *   stack, and where the thread last ran), so a worker that sleeps for a
 *   whole period gets its wall time without one wake-up. The sampler
 *   thread (in the profiler process, profiler/ring_drain.h) drains the
 *   ring and asks a thread blocked outside its event loop for its stack.
 *
 * Threading: the sampled thread (the nginx worker's only thread) calls
 * every function here and the prof_sampled_thread_t functions below; none
 * of them blocks. _maintain_table rebuilds the unwind table when the
 * handler met code outside it and the set of loaded objects changed since
 * (dlopen). The SIGPROF handler runs on the sampled thread and is
 * async-signal-safe (signal_path.c, whose undefined symbols CI checks): a
 * table walk into a preallocated slot, clock_gettime, a futex wake. No
 * malloc, no locks, no I/O, no read of memory not proven mapped. SIGPROF
 * signals the sampler did not arm are handed to the action installed
 * before it, or ignored.
 * Memory: the sampler's state, its slots and the idle stack are one
 * mapping shared with the profiler process (channel/sampler_state.h),
 * made by prof_sampler_start and unmapped by prof_sampler_release; the
 * unwind table is the sampler's unless the caller gave it.
 */

#ifndef PROF_SAMPLER_H
#define PROF_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/diagnostics.h"
#include "channel/sampled_thread.h"
#include "channel/sampler_state.h"
#include "worker/arch.h"
#include "worker/unwind.h"


struct prof_lua_s;


/* Samples the calling thread. 0 or -errno (-EBUSY: one is running). */
int prof_sampler_start(prof_sampler_t **sampler,
    const prof_sampler_conf_t *conf);

/*
 * Stops sampling: the wall time since the last sample, a final flush
 * barrier closing period, SIGPROF restored. The sampler thread finishes
 * on its own side (prof_ring_drain_finish). Never blocks.
 */
void prof_sampler_stop(prof_sampler_t *s, uint64_t period);

/* A stopped (and, in one process, finished) sampler's mapping unmapped in
   the calling process (the other process keeps its own). */
void prof_sampler_release(prof_sampler_t *s);

/*
 * Closes profile number period now: the barrier follows every sample
 * taken before; the aggregator takes that period's endpoint counts with
 * it. Never blocks.
 */
void prof_sampler_flush(prof_sampler_t *s, uint64_t period);

/* See prof_sampler_left_table and prof_sampler_turn_slow. */
void prof_sampler_maintain_table(prof_sampler_t *s, int64_t now_ns);

/*
 * Records the stack the event wait's time goes to: the caller's callers
 * (skip_frames of them dropped), below the given leaf frames (innermost
 * first, e.g. the wait function and the event loop's poll function).
 */
void prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames);

prof_sampled_thread_t *prof_sampler_sampled_thread(prof_sampler_t *s);

/* The ring's slots filled so far (the sampled thread, in its loop). */
uint32_t prof_sampler_write_index(prof_sampler_t *s);

/*
 * A turn of ticks (prof_wait_begin) past stall_ticks ended (the sampled
 * thread, from its loop, before its wait): the unwind table rebuilt if the
 * handler asked (prof_sampler_maintain_table; now_ns: a coarse monotonic
 * clock), stall_ticks set back. Whether the turn may be a stall (past the
 * threshold, or the threshold not known yet): then
 * prof_sampler_turn_ended.
 */
int prof_sampler_turn_slow(prof_sampler_t *s, uint64_t ticks,
    int64_t now_ns);

/*
 * A turn of ticks past the stall threshold ended: its length in ns when
 * it is a stall (at least the conf's stall_ns), else 0. The sampled
 * thread, from its loop.
 */
int64_t prof_sampler_turn_ended(prof_sampler_t *s, uint64_t ticks);

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
 * Whether walks left the unwind table since it was last looked at (a load
 * and a compare); then prof_sampler_maintain_table (now: a coarse
 * monotonic clock) rebuilds it if objects were loaded. The handler also
 * sets stall_ticks to 0 then, so that the loop's slow path looks
 * (prof_sampler_turn_slow).
 */
static inline int
prof_sampler_left_table(prof_sampled_thread_t *h)
{
    return __atomic_load_n(&h->unknown_pcs, __ATOMIC_RELAXED)
           != h->unknown_pcs_seen;
}


/*
 * Objects with a stamp the handler may read: count of them, size bytes
 * apart from base, each with a word (uint64_t) at stamp_offset, in memory
 * that stays mapped as long as the sampler runs. Once, from the sampled
 * thread (the handler looks at none until objects_end is set).
 */
static inline void
prof_sampler_set_objects(prof_sampled_thread_t *h, const void *base,
    size_t size, size_t count, size_t stamp_offset)
{
    if (base == NULL || size == 0 || count == 0) {
        return;
    }

    h->object_size = size;
    h->stamp_offset = stamp_offset;
    h->objects = (uint64_t) (uintptr_t) base;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    h->objects_end = h->objects + size * count;
}


/* What executes from now (see prof_running_t). */
static inline void
prof_publish(prof_sampled_thread_t *h, const void *request, const void *log,
    const void *object)
{
    /* A store of a word each, as the handler reads them (volatile: not
       packed into a vector register first, two instructions more). */
    *(volatile uint64_t *) &h->running.request = (uintptr_t) request;
    *(volatile uint64_t *) &h->running.log = (uintptr_t) log;
    *(volatile uint64_t *) &h->running.object = (uintptr_t) object;

    /* Before the caller looks at what is pending: a sample after this
       cannot name what was published before. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}


/*
 * Nothing executes from now: the log word cleared, the other two left as
 * they were (they mean nothing while it is 0: see prof_running_t). One
 * store where prof_publish(h, NULL, NULL, NULL) takes three.
 */
static inline void
prof_unpublish(prof_sampled_thread_t *h)
{
    *(volatile uint64_t *) &h->running.log = 0;

    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}


/* The tag a sample took and the thread has not resolved: 0, none. */
static inline uint64_t
prof_pending_tag(prof_sampled_thread_t *h)
{
    return __atomic_load_n(&h->pending_tag, __ATOMIC_RELAXED);
}


/* The pending tag resolved (or given up): the next sample takes a new one. */
static inline void
prof_pending_clear(prof_sampled_thread_t *h)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&h->pending_tag, 0, __ATOMIC_RELAXED);
}


/*
 * The event wait, timed with the TSC (an instruction, where a clock read
 * would cost tens): wall time is split between the wait and the stacks
 * sampled in the proportion of TSC ticks waited. wait_ticks adds up
 * modulo 2^64: the TSC subtracted at the wait's start, added at its end
 * (sampled_thread.h; a TSC behind on another core subtracts; a total
 * below the last one counts as no wait, prof_wall_split).
 * The sampler thread reads wait_ticks (whether the thread waits) and
 * wait_start to see the loop move; it sleeps through a long wait, and the
 * wait's end wakes it.
 *
 * The time between a wait's end and the next wait's start is the loop's
 * turn: counted in turns, and returned in ticks by prof_wait_begin; more
 * than stall_ticks, the caller looks at it on its slow path
 * (prof_sampler_turn_slow).
 */
/*
 * The sampler thread, asleep through the wait that just ended, woken (a
 * system call, once per idle time: prof_wait_end's slow path).
 */
void prof_sampler_wake_watcher(prof_sampled_thread_t *h);


static inline uint64_t
prof_wait_begin(prof_sampled_thread_t *h)
{
    uint64_t   now, turn;

    now = prof_arch_ticks();
    turn = now - h->turn_start;

    /* The turns' histogram, read by the profiler process. */
    prof_own_add(h->turns[63 - __builtin_clzll(turn | 1)], 1);

    __atomic_store_n(&h->wait_start, now, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    /* Below zero while the wait runs, which says the thread waits (after
       wait_start): one add here and one at the end (the handler, on this
       thread, only reads it). */
    prof_own_add(h->wait_ticks, -now);

    return turn;
}


static inline void
prof_wait_end(prof_sampled_thread_t *h)
{
    uint64_t  now;

    now = prof_arch_ticks();
    __atomic_store_n(&h->turn_start, now, __ATOMIC_RELAXED);
    h->phase = PROF_PHASE_EVENTS;

    /*
     * The wait's end (wait_ticks at or above zero again, after
     * turn_start), as a full barrier between it and the load below (the
     * sampler thread stores watcher_asleep, then loads wait_ticks): one of
     * the two sees the other's store, so a sleeping sampler thread is
     * always woken. One locked add, where an add and an exchange of a
     * word of its own were.
     */
    (void) __atomic_add_fetch(&h->wait_ticks, now, __ATOMIC_SEQ_CST);

    if (__atomic_load_n(&h->watcher_asleep, __ATOMIC_SEQ_CST)) {
        prof_sampler_wake_watcher(h);
    }
}


/* What the turn runs from here (PROF_PHASE_*), for a stall's report. */
static inline void
prof_turn_phase(prof_sampled_thread_t *h, uint32_t phase)
{
    h->phase = phase;
}


#endif /* PROF_SAMPLER_H */
