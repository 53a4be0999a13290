/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The words a sampled thread shares with its SIGPROF handler: what
 * executes (published by the thread's event loop), the tag a sample took
 * for it, and the event wait's timing. They head the sampler's state
 * (sampler_state.h), in memory shared with the profiler process.
 *
 * Who writes what: the sampled thread and its handler only, on one
 * thread (the worker's). The profiler process only reads: its sampler
 * thread wait_ticks, wait_start, turn_start and unknown_pcs
 * (profiler/ring_drain.h), and, when it reads the stack of the thread
 * blocked in a system call, what executes, the pending tag, the wait's
 * and the turn's words and the calibration (profiler/remote_stack.h);
 * its loop thread unknown_pcs and the turns. The functions that write
 * them are the worker's (worker/sampler.h); none blocks or allocates.
 */

#ifndef PROF_SAMPLED_THREAD_H
#define PROF_SAMPLED_THREAD_H

#include <stdint.h>


/* What a turn of the loop runs (the turn's phase). */
enum {
    PROF_PHASE_START = 0,           /* the worker's start, to its first wait */
    PROF_PHASE_EVENTS,              /* the events the wait returned */
    PROF_PHASE_TIMERS,              /* the timers due */
    PROF_PHASE_POSTED,              /* the events posted */
    PROF_PHASE_NGINX                /* nginx's own, after the wrapper's:
                                       timers due meanwhile, events
                                       posted by the last ones */
};

/* Turn lengths: bucket i holds turns of 2^i to 2^(i+1) - 1 TSC ticks. */
#define PROF_TURN_BUCKETS  64


/*
 * What executes, as the sampled thread publishes it to the handler: three
 * words the server gives meaning to (nginx: the request, when known; the
 * log of the event's connection; the event's data), log 0 for nothing
 * (then the other two mean nothing, and may be left from before: a reader
 * looks at them only when log is set; a word of them 0 with log set: not
 * known). Publishing is three plain stores, and nothing one (the handler
 * runs on the same thread).
 */
typedef struct {
    uint64_t       request;
    uint64_t       log;             /* 0: nothing executes */
    uint64_t       object;
} prof_running_t;

/*
 * The handler and the sampled thread share these, on one thread:
 * - running: written by the thread (prof_publish), read by the handler.
 * - pending: the first sample that finds something running takes a new
 *   tag (epoch + 1) and copies running into pending, with the stamp of
 *   its object when the object is one of the array below (a word at
 *   stamp_offset, e.g. a connection's number: is it still the same one?),
 *   then stores pending_tag. Later samples of the same running words
 *   carry the same tag; others, while a tag is pending, carry none. The
 *   thread resolves the pending tag into labels, off the signal path, and
 *   clears it (prof_pending_clear); a pending that names a request must be
 *   taken before that request is freed (the server unpublishes it first).
 * - wait_start, wait_ticks: the event wait (prof_wait_begin). wait_ticks
 *   is the TSC ticks waited in all, from PROF_WAIT_TICKS_ORIGIN, less the
 *   TSC at the wait's start while a wait runs (then below zero as an
 *   int64_t: the TSC at any start is past the origin plus the ticks
 *   waited before it): one word, read whole, says both whether the thread
 *   waits (prof_waiting) and how long it waited (prof_waited_ticks), and
 *   a wait's start and end each add to it once.
 * - watcher_asleep: set by the profiler process's sampler thread before it
 *   sleeps through a long wait, cleared by either side; the wait's end
 *   wakes that thread when it finds it set (prof_wait_end, whose add to
 *   wait_ticks is a full barrier for it). The one word the sampled thread
 *   and the sampler thread both write.
 * - turn_start, phase, turns: the loop's turn, from the end of a wait to
 *   the start of the next (the first from the sampler's start), what it
 *   runs, and how long turns last (a log2 histogram of TSC ticks).
 * - stall_ns, stall_threshold_ticks: a turn that long is a stall (0: off),
 *   in ns and in TSC ticks (0: not known yet; UINT64_MAX: off);
 *   stall_ticks: a turn longer ends on the loop's slow path, the threshold
 *   but 0 (every turn) until it is known, and 0 when the handler met code
 *   outside the unwind table (unknown_pcs counted): the slow path looks at
 *   the table, then sets it back (prof_sampler_turn_slow), so the loop
 *   looks at nothing else for the table;
 *   calib_tsc, calib_ns: a TSC reading and the monotonic clock then, for
 *   ticks to nanoseconds (prof_ticks_ns); ns_per_tick, once measured
 *   (for the profiler process's status page).
 * - stall_turn, stall_tag, stall_phase, stall_past: what the turn's
 *   first sample taken past stall_ns into it saw (stall_past), else its
 *   last one, written by the handler while stall_ns is set.
 */
typedef struct {
    uint32_t       watcher_asleep;  /* the sampler thread sleeps until the
                                       wait ends (prof_wait_end wakes
                                       it) */
    prof_running_t running;
    prof_running_t pending;
    uint64_t       pending_stamp;   /* the object's stamp, 0: not known */
    uint64_t       pending_tag;     /* 0: none */
    uint64_t       epoch;           /* the last tag issued */
    uint64_t       objects;         /* the array of stamped objects */
    uint64_t       objects_end;
    uint64_t       object_size;
    uint64_t       stamp_offset;
    uint64_t       wait_start;      /* TSC when the wait began */
    uint64_t       wait_ticks;      /* TSC ticks spent waiting, all (see
                                       above) */
    uint32_t       unknown_pcs;     /* walks that left the unwind table */
    uint32_t       unknown_pcs_seen;    /* by prof_sampler_maintain_table */

    uint64_t       turn_start;      /* TSC */
    uint32_t       phase;           /* PROF_PHASE_* */
    uint32_t       stall_phase;
    uint32_t       stall_past;
    uint64_t       stall_ticks;     /* the loop's comparison, see above */
    uint64_t       stall_threshold_ticks;
    int64_t        stall_ns;
    uint64_t       stall_turn;
    uint64_t       stall_tag;
    uint64_t       calib_tsc;
    int64_t        calib_ns;
    double         ns_per_tick;     /* known with stall_threshold_ticks,
                                       else 0 */
    uint64_t       turns[PROF_TURN_BUCKETS];
} prof_sampled_thread_t;


/*
 * wait_ticks' value when nothing was waited yet. A TSC behind on another
 * core at a wait's end (by less than this in all) leaves the count above
 * zero; a sampler starts with the TSC past it (2^20 ticks: well under a
 * second after boot).
 */
#define PROF_WAIT_TICKS_ORIGIN  (1ULL << 20)


/*
 * An add to a word only this thread writes and the profiler process reads
 * whole (an aligned word: its store is never torn): one add to memory,
 * where a relaxed atomic load and store take two instructions more. Under
 * ThreadSanitizer, whose unit tests read the words from another thread of
 * the same process, the relaxed atomic that says so (word is named twice
 * there: an lvalue without side effects).
 */
#ifdef __SANITIZE_THREAD__
#define prof_own_add(word, n)                                              \
    __atomic_store_n(&(word),                                              \
                     __atomic_load_n(&(word), __ATOMIC_RELAXED) + (n),     \
                     __ATOMIC_RELAXED)
#else
#define prof_own_add(word, n)  ((word) += (n))
#endif


/* Whether the thread is in its event wait, from wait_ticks as read. */
static inline int
prof_waiting(uint64_t wait_ticks)
{
    return (int64_t) wait_ticks < 0;
}


/*
 * The ticks waited by now_tsc (from PROF_WAIT_TICKS_ORIGIN), the wait in
 * progress counted, from wait_ticks as read (one load). Either process,
 * the handler too.
 */
static inline uint64_t
prof_waited_ticks(uint64_t wait_ticks, uint64_t now_tsc)
{
    return prof_waiting(wait_ticks) ? wait_ticks + now_tsc : wait_ticks;
}


/*
 * Nanoseconds in ticks of the TSC, from the calibration pair to a reading
 * of both clocks (now_ns, now_tsc); 0 before any time passed. Either
 * process, the handler too (no lock, no call).
 */
static inline int64_t
prof_ticks_ns(const prof_sampled_thread_t *h, uint64_t ticks,
    int64_t now_ns, uint64_t now_tsc)
{
    /* A TSC behind on another core counts as no time. */
    if (now_tsc <= h->calib_tsc || now_ns <= h->calib_ns
        || ticks > UINT64_MAX / 2)
    {
        return 0;
    }

    return (int64_t) ((double) ticks * (double) (now_ns - h->calib_ns)
                      / (double) (now_tsc - h->calib_tsc));
}


#endif /* PROF_SAMPLED_THREAD_H */
