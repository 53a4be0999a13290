/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The sampler's state: the ring of slots between the SIGPROF handler and
 * the sampler thread, the flush mailbox, the wall accounting and the
 * futex words, in one anonymous MAP_SHARED mapping the worker makes before
 * it forks its profiler process (so at the same address in both). Read
 * and written by the worker's side (worker/sampler.c, the signal path,
 * signal_path.c) and by the profiler process's sampler thread
 * (profiler/ring_drain.c); the server's code uses prof_sampler_t through
 * worker/sampler.h's functions only.
 *
 * Who writes what:
 * - the sampled thread, in its signal handler and in prof_sampler_flush /
 *   _stop (with SIGPROF blocked there): the wall accounting (point), the
 *   ring's slots while FREE and write_index, the flush mailbox, the
 *   unwind table (table, table_swaps, forked_table), and the handler's
 *   own fields (prof_signal_prepare's finds, the rows of its last walk),
 *   meaningless in the profiler process;
 * - the sampler thread: slots back to FREE, read_index, requests,
 *   flushes_taken; and the flush mailbox once the sampled thread is gone
 *   without a last flush (it crashed); claims, when it accounted the wall
 *   time of the sampled thread blocked in a system call, whose stack it
 *   read from outside (account, below);
 * - the struct, its slots and idle frames are in memory shared with the
 *   profiler process (MAP_SHARED, at the same address in both after the
 *   fork): its pointers into mappings made before the fork (slots,
 *   idle_frames, lua, conf.diagnostics, forked_table) are valid in both;
 *   table and borrowed (the unwind tables) point into the worker's own
 *   memory (the profiler process copies table's, table_swaps telling it
 *   which it has). Futex words are process-shared (no
 *   FUTEX_PRIVATE_FLAG).
 * - sampled (prof_sampled_thread_t, sampled_thread.h): written by the
 *   sampled thread only.
 * Cross-thread fields are accessed with atomics; futex words wake.
 */

#ifndef PROF_SAMPLER_STATE_H
#define PROF_SAMPLER_STATE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/diagnostics.h"
#include "common/unwind_walk.h"
#include "channel/lua_frames.h"
#include "channel/sampled_thread.h"


typedef struct prof_sampler_s  prof_sampler_t;
struct prof_unwind_table_s;


/* The sampler of the calling thread, as prof_sampler_start takes it. */
typedef struct {
    int64_t                      interval_ns;
    unsigned                     max_frames;    /* 8 ..
                                                   PROF_MAX_FRAMES_LIMIT */
    prof_diagnostics_t          *diagnostics;   /* shared (channel.h) */
    int64_t                      start_monotonic_ns;    /* when the first
                                                   profile started (0: at
                                                   prof_sampler_start) */
    struct prof_unwind_table_s  *unwind_table;  /* the caller's (kept by
                                                   it), or NULL: the
                                                   sampler builds one */
    int64_t                      stall_ns;      /* a turn this long is a
                                                   stall, 0: off */
} prof_sampler_conf_t;


/* Slots between the handler and the sampler thread (a power of two). */
#define PROF_SLOTS             64

/* Flushes that may wait for the sampler thread. */
#define PROF_FLUSHES           4

/* Stalls that may wait for the sampler thread, and what names them. */
#define PROF_STALLS            8
#define PROF_STALL_SUBJECT_MAX 448

enum {
    PROF_SLOT_FREE = 0,
    PROF_SLOT_READY
};

enum {
    PROF_SLOT_CPU = 0,              /* the CPU timer's signal */
    PROF_SLOT_STACK                 /* asked for by the sampler thread */
};


/*
 * A slot's unwind_stop: why the walk stopped early, the walk's own status
 * (prof_unwind_status_e, worker/unwind.h; worker/sampler.c checks that
 * the values agree), 0 when it did not.
 */
#define PROF_SLOT_STOP_NO_OBJECT   2    /* a pc outside every known object */


/* Written by the handler while FREE, read by the sampler once READY. */
typedef struct {
    uint32_t        state;
    uint16_t        kind;
    uint16_t        frame_count;
    uint32_t        weight;         /* CPU intervals (CPU slots) */
    uint32_t        unwind_stop;    /* why the walk stopped early, or 0 */
    uint32_t        scanned;        /* frames found by scanning */
    uint32_t        interval_ns;    /* the CPU timer's (CPU slots) */
    int64_t         wall_ns;        /* wall time at this stack */
    int64_t         off_cpu_ns;     /*   of which off CPU */
    int64_t         idle_ns;        /* wall time in the event wait */
    int64_t         handler_ns;     /* the handler's CPU time, -1: not
                                       known (the thread was switched
                                       out while it ran) */
    int64_t         time_ns;        /* monotonic, when it was taken */
    uint64_t        request;        /* tag (sampled_thread.h), 0: none */
    uint64_t        turn;           /* its turn's start (TSC), 0: in the
                                       event wait */
    int64_t         turn_ns;        /* how long the turn had run */
    int64_t         handler_wall_ns;    /* the handler's wall time */
    uint64_t        frames[];       /* conf.max_frames + 1 */
} prof_slot_t;


/*
 * A stall, as the sampled thread saw it end: its turn (turn_start, which
 * the slots of the turn carry), its length, and what it ran for: the
 * request the turn's first sample past the threshold (else its last)
 * carried, described while that request lived (subject, e.g.
 * `request: "GET /a HTTP/1.1", ...`), else that sample's phase; the
 * slots before write_index are those taken before it ended.
 */
typedef struct {
    uint64_t        turn;
    int64_t         length_ns;
    int64_t         end_ns;         /* monotonic */
    uint64_t        tag;            /* the samples' tag, 0: none known */
    uint32_t        phase;          /* PROF_PHASE_* of that sample (of
                                       the turn, the first: START) */
    uint32_t        sampled;        /* 0: no sample in the turn, 1: one
                                       before the threshold, 2: past */
    uint32_t        write_index;
    uint32_t        subject_length; /* 0: no request */
    char            subject[PROF_STALL_SUBJECT_MAX];
} prof_stall_t;


/*
 * Where the wall time was accounted up to: the monotonic clock, the TSC
 * then, and the ticks the sampled thread had waited in its event wait by
 * then (prof_waited_ticks, with the wait in progress).
 */
typedef struct {
    int64_t         wall_ns;
    uint64_t        tsc;
    uint64_t        wait_ticks;
} prof_wall_point_t;


/*
 * The wall accounting has two writers: the sampled thread, at each
 * sample and flush (prof_signal_account, worker/signal_path.h), and the
 * profiler process's sampler thread, which accounts the time up to a
 * point of its own when it read the stack of the sampled thread blocked
 * in a system call (profiler/remote_stack.h): a claim, claims[WHICH],
 * that the sampled thread's next account starts from. The word account
 * orders them: the sampled thread sets BUSY as it starts (taking the
 * claim, if one is made) and, as it ends, counts one more account (ONE)
 * and clears BUSY and CLAIM; the sampler thread reads the point (or its
 * last claim) while the word says neither BUSY nor a new account, writes
 * the claim WHICH does not name, and makes it with a compare-and-swap
 * from the word it read: an account started meanwhile makes it fail,
 * and the time stays the sampled thread's to account. Every wall
 * nanosecond is accounted once.
 */
#define PROF_ACCOUNT_BUSY    1
#define PROF_ACCOUNT_CLAIM   2
#define PROF_ACCOUNT_WHICH   4
#define PROF_ACCOUNT_ONE     8


/*
 * The wall time from *point to now_ns, split: the share of TSC ticks
 * spent in the event wait (wait_ticks: the sampled thread's word as read
 * now, sampled_thread.h) goes to the wait (*idle_ns),
 * the rest to the stack sampled (*wall_ns), off CPU for what it did not
 * spend on CPU (cpu_ns, since the point); *point moved to now. Either
 * process, the handler too (no lock, no call).
 */
static inline void
prof_wall_split(prof_wall_point_t *point, int64_t now_ns, uint64_t now_tsc,
    uint64_t wait_ticks, int64_t cpu_ns, int64_t *wall_ns,
    int64_t *off_cpu_ns, int64_t *idle_ns)
{
    int64_t   wall, here, idle;
    uint64_t  waited, elapsed;

    wall = now_ns - point->wall_ns;
    if (wall < 0) {
        wall = 0;
    }

    wait_ticks = prof_waited_ticks(wait_ticks, now_tsc);
    waited = wait_ticks - point->wait_ticks;

    /* Below zero: a TSC behind on another core (sampler.h). */
    if (waited > UINT64_MAX / 2) {
        waited = 0;
    }

    elapsed = now_tsc - point->tsc;

    if (now_tsc <= point->tsc || waited >= elapsed) {
        idle = (waited > 0) ? wall : 0;

    } else {
        idle = (int64_t) ((double) wall * waited / elapsed);
    }

    here = wall - idle;

    if (cpu_ns < 0) {
        cpu_ns = 0;
    }

    *wall_ns = here;
    *off_cpu_ns = (here > cpu_ns) ? here - cpu_ns : 0;
    *idle_ns = idle;

    /* (Stores the other process may read meanwhile: its claim fails.) */
    __atomic_store_n(&point->wall_ns, now_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&point->tsc, now_tsc, __ATOMIC_RELAXED);
    __atomic_store_n(&point->wait_ticks, wait_ticks, __ATOMIC_RELAXED);
}


/* A flush the sampled thread asked for, in order with the slots. */
typedef struct {
    uint32_t        write_index;    /* slots before it: the old profile */
    uint32_t        final;          /* the last one (stop) */
    int64_t         monotonic_ns;
    int64_t         realtime_ns;
    int64_t         wall_ns;        /* since the last sample, split: */
    int64_t         off_cpu_ns;     /*   where it last ran */
    int64_t         idle_ns;        /*   in the event wait */
    uint64_t        last_tag;       /* tags up to it are the old one's */
    uint64_t        period;         /* the last period it closes */
} prof_flush_t;


struct prof_sampler_s {
    prof_sampled_thread_t   sampled;            /* first: the hooks' line */

    prof_sampler_conf_t     conf;
    size_t                  shared_size;    /* of the mapping it heads */
    pid_t                   pid;
    pid_t                   tid;            /* the sampled thread */
    clockid_t               cpu_clock;      /* its CPU clock */
    clockid_t               process_clock;  /* the process's: readable
                                               from the profiler process */
    timer_t                 cpu_timer;
    struct sigaction        saved_action;   /* chained for foreign ones */
    uintptr_t               stack_low;      /* the sampled thread's stack */
    uintptr_t               stack_high;

    /* built and replaced by the sampled thread
       (prof_sampler_maintain_table), read by the handler; table_swaps
       counts the replacements (and the stop's), each made before the
       old table is freed: the profiler process copies the table in force
       from the worker, or uses forked_table, the one in force when it
       was forked (prof_start), at the same address in its copy of the
       worker's memory, until the first replacement (NULL then: a later
       table may be mapped at its address) */
    struct prof_unwind_table_s  *table;
    struct prof_unwind_table_s  *borrowed;  /* conf's table: not freed */
    struct prof_unwind_table_s  *forked_table;
    uint32_t                table_swaps;
    prof_lua_t             *lua;            /* conf's, read by the handler */

    /* wall accounting: the sampled thread (handler, flush, stop), and
       the profiler process's claims (PROF_ACCOUNT_*, above) */
    prof_wall_point_t       point;          /* accounted up to here */
    int64_t                 point_cpu_ns;   /* on the CPU timer's scale */
    int64_t                 timer_cpu_ns;   /* CPU clock when armed */
    uint64_t                cpu_intervals;  /* timer expirations so far */
    uint64_t                account;
    prof_wall_point_t       claims[2];

    /* the ring: the handler writes slots[write_index], the sampler
       thread reads slots[read_index] */
    unsigned char          *slots;
    size_t                  slot_size;
    uint32_t                write_index;
    uint32_t                read_index;
    uint64_t                ring_full;      /* samples lost (handler) */

    /* flushes: the sampled thread adds, the sampler thread takes */
    prof_flush_t            flushes[PROF_FLUSHES];
    uint32_t                flushes_added;
    uint32_t                flushes_taken;
    uint64_t                flushes_merged;

    /* the CPU timer's interval: conf.interval_ns, or wider while the
       profiler's CPU is over its share (profiling_max_cpu): wanted by
       the sampler thread, the timer re-armed by the handler at its next
       CPU sample (interval_now_ns) */
    int64_t                 interval_wanted_ns;
    int64_t                 interval_now_ns;
    uint32_t                rearmed;        /* the handler, since */

    /* stacks asked for by a queued SIGPROF (rt_tgsigqueueinfo): requests
       (sampler thread) and served (futex word, handler) */
    uint32_t                requests;
    uint32_t                served;

    /* the handler's own (signal_path.c), in the struct's first page with
       the rest it reads: the sampled thread's thread pointer and errno's
       address there, its rseq area's critical-section pointer (NULL: none
       registered) and the vDSO's clock_gettime (NULL: not found), all set
       by prof_signal_prepare; the rows of its last walk */
    void                   *thread_pointer;
    int                    *errno_at;
    uint64_t               *rseq_cs;
    int                   (*vdso_clock_gettime)(clockid_t clock,
                                                struct timespec *ts);
    prof_unwind_recent_t    recent;

    /* stalls: the sampled thread adds (from its loop), the sampler
       thread takes; lost: the mailbox was full */
    prof_stall_t            stalls[PROF_STALLS];
    uint32_t                stalls_added;
    uint32_t                stalls_taken;
    uint64_t                stalls_lost;

    /* waking the sampler thread: a futex word, and stop */
    uint32_t                wake;
    uint32_t                stop;

    /* the event wait's stack, recorded once by the sampled thread */
    uint32_t                idle_stack_ready;
    unsigned                idle_frame_count;
    uint64_t               *idle_frames;

    /* the sampled thread only: the unwind table's last check */
    int64_t                 table_checked_ns;
    uint64_t                period;         /* the profile being taken */
};


static inline prof_slot_t *
prof_sampler_slot(prof_sampler_t *s, uint32_t index)
{
    return (prof_slot_t *) (s->slots
                            + (index & (PROF_SLOTS - 1)) * s->slot_size);
}


/*
 * The futex words' wait and wake, process-shared (no FUTEX_PRIVATE_FLAG):
 * syscall(SYS_futex) with FUTEX_BITSET_MATCH_ANY for FUTEX_WAIT_BITSET.
 */
long prof_sampler_futex(uint32_t *word, int op, uint32_t value,
    const struct timespec *timeout);

/* Wakes the sampler thread (the wake word); any thread, either process. */
void prof_sampler_wake(prof_sampler_t *s);

/*
 * Adds to the flush mailbox a flush after the slots filled so far: taken
 * at now_ns (CLOCK_MONOTONIC), closing period, with the wall time since
 * the last sample (split as prof_signal_account, worker/signal_path.h,
 * splits it; 0 when not accounted). A mailbox full of flushes the sampler
 * thread has not taken merges this one into the last (counted). Never
 * blocks. Its one producer: the sampled thread with SIGPROF blocked, or,
 * once that thread is gone without a last flush, the profiler process's
 * side.
 */
void prof_sampler_post_flush(prof_sampler_t *s, uint64_t period, int final,
    int64_t now_ns, int64_t wall_ns, int64_t off_cpu_ns, int64_t idle_ns);

/*
 * The next stall record to fill, or NULL when the sampler thread has not
 * taken the ones before (the stall is counted lost); prof_sampler_post_
 * stall hands it over and wakes the sampler thread. The sampled thread's
 * loop only (never the handler).
 */
prof_stall_t *prof_sampler_next_stall(prof_sampler_t *s);
void prof_sampler_post_stall(prof_sampler_t *s);


#endif /* PROF_SAMPLER_STATE_H */
