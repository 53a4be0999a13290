/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The sampler thread's state, shared by its files: the drain of the ring
 * (ring_drain.c) and the watch over a sampled thread out of its event
 * wait, whose stack it reads or asks for (blocked_watch.c). Not a public
 * interface: see ring_drain.h.
 *
 * Threading: the sampler thread only, but for conf and sampler (set
 * before it starts).
 */

#ifndef PROF_RING_DRAIN_INTERNAL_H
#define PROF_RING_DRAIN_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "channel/sampler_state.h"
#include "profiler/remote_stack.h"
#include "profiler/ring_drain.h"


/*
 * When the sampler thread looks at the sampled thread (the look
 * distance): out of its event wait, once a turn of its loop lasted
 * PROF_WATCH_BUSY_NS (or the stall threshold, when shorter), then that
 * often while the turn lasts (to find it blocked outside its event loop,
 * or stalled); after a look found it waiting, as long later.
 */
#define PROF_WATCH_BUSY_NS        (100 * 1000 * 1000LL)

/* How often walks that left the unwind tables are told, at most. */
#define PROF_UNKNOWN_TOLD_NS      (200 * 1000 * 1000LL)


struct prof_ring_drain_s {
    prof_sampler_t          *sampler;       /* the shared state drained */
    prof_ring_drain_conf_t   conf;
    uv_thread_t              thread;

    /* the sampler thread only */
    prof_batch_t            *batch;
    int64_t                  last_push_ns;
    unsigned                 last_frame_count;  /* of the last CPU sample */
    uint64_t                *last_frames;
    int64_t                  watch_ns;          /* the watchdog's last look */
    int64_t                  watch_next_ns;     /*   and its next */
    uint32_t                 watch_index;
    uint64_t                 watch_waits;
    int                      watch_waiting;     /* at the last look */
    int                      watch_idle;        /*   in the same wait as
                                                   at the one before */
    int64_t                  watch_cpu_ns;
    uint64_t                 tables_told;       /* unwind tables built,
                                                   told to conf.notify */
    uint32_t                 unknown_told;      /* walks that left them, */
    int64_t                  unknown_told_ns;   /*   told then */

    /* a stack read from outside (remote_stack.h) and accounted: taken in
       order with the flushes, before the first whose account came after
       the one it starts from (from_ns) */
    prof_remote_stack_t     *remote;        /* NULL: none (no memory) */
    prof_slot_t             *outside;       /* a slot's size */
    uint32_t                 outside_pending;   /* 0: none; else 1 +
                                                   the turn's phase */
    int64_t                  outside_from_ns;
    int                      outside_refused;   /* told (errno) */

    /* stalls: the stack of the turn running's first sample past the
       threshold (turn_past), else of its last; turn_outside: that stack
       read from outside (prof_stall_report_t's outside) */
    uint64_t                 turn;
    uint32_t                 turn_past;
    uint32_t                 turn_outside;
    unsigned                 turn_frame_count;
    uint64_t                 turn_frames[PROF_STALL_FRAMES];
    uint64_t                 watch_turn;        /* running at a look */
    int64_t                  watch_turn_ns;     /* first seen then */
    uint64_t                 turn_asked;        /* its stack asked for */
    uint64_t                 cpu_turn;          /* the last CPU sample's */
    int64_t                  cpu_turn_ns;       /*   CPU its turn's
                                                   samples stand for */
    uint64_t                 stalls_lost;       /* the sampler's, told */

    /* the profiler's share of the worker's CPU, by window */
    int64_t                  window_ns;         /* its start */
    int64_t                  window_handler_ns;
    int64_t                  window_worker_ns;  /* the worker's CPU then */
    int64_t                  window_own_ns;     /* this process's */
    int64_t                  window_naming_ns;  /* its naming's (the
                                                   loop thread's) */
    unsigned                 windows_over;      /* in a row */
};


/* ring_drain.c */
void prof_ring_drain_notify(prof_ring_drain_t *drain);

/* The slots filled so far, and the flushes between them, in order (and a
   stack read from outside, pending, in its place). */
void prof_ring_drain_slots(prof_ring_drain_t *drain, int64_t now_ns);

/* A stack slot's samples: the handler's (outside 0), or one read from
   outside (outside: prof_stall_report_t's). */
void prof_ring_drain_take_stack(prof_ring_drain_t *drain, prof_slot_t *slot,
    uint32_t outside, int64_t now_ns);


/* blocked_watch.c */

/* How long a turn of the sampled thread's loop lasts before a look. */
int64_t prof_ring_drain_look_ns(prof_sampler_t *s);

/* A look at the sampled thread, when one is due (watch_next_ns): its
   stack read or asked for when it is blocked outside its event wait, or
   a stall no sample caught; and when the next look is (watch_next_ns). */
void prof_ring_drain_watch(prof_ring_drain_t *drain, int64_t now_ns);


#endif /* PROF_RING_DRAIN_INTERNAL_H */
