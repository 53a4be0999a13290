/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The sampler thread: the profiler process's side of a worker's sampler
 * (channel/sampler_state.h). It wakes once a turn of the sampled
 * thread's loop lasted the look distance (ring_drain_internal.h: 100 ms,
 * or the stall threshold when shorter; a busy thread's turns are
 * shorter: a wake a distance), and not at all while it waits in its
 * event loop once two looks found it in the same wait (the wait's end
 * wakes it): it drains the ring's slots into batches for the queue, in
 * order with the flushes the sampled thread asked for (each closes a
 * profile with a barrier batch), and, when the sampled thread
 * neither waited in its event loop nor burned CPU for a while (blocked
 * outside it), or a turn of its loop ran past the stall threshold with no
 * sample, takes its stack to account the blocked time: read from outside
 * while the thread is blocked in a system call (remote_stack.h), else
 * asked for with a queued SIGPROF, which ends a sleep early; it tells
 * notify when the worker built its unwind tables again (it loaded or
 * unloaded objects).
 *
 * Threading: prof_ring_drain_start and _finish are called by one thread
 * of the process that drains (the profiler process, forked by the sampled
 * one; or the sampled one itself, in tests), after prof_sampler_start.
 * The thread is created with every signal blocked. It takes the queue's
 * mutex only; it waits for the handler through process-shared futex
 * words; notify is called on it.
 * Memory: the drain owns its current batch, the copy of the last CPU
 * sample's stack and its reader of stacks from outside; batches belong to
 * the queue; the sampler's mapping stays the worker's side's
 * (prof_sampler_release).
 */

#ifndef PROF_RING_DRAIN_H
#define PROF_RING_DRAIN_H

#include <stdint.h>

#include "channel/sampler_state.h"
#include "profiler/sample_queue.h"


typedef struct prof_ring_drain_s  prof_ring_drain_t;


/* The frames a stall's report keeps (leaf first), and the reports that
   may wait for the loop thread. */
#define PROF_STALL_FRAMES    24
#define PROF_STALL_REPORTS   8

/*
 * A stall the sampled thread posted, with the stack of its turn's first
 * sample taken past the threshold (past = 1), else of its last one, else
 * none (frame_count 0). outside: 0, or that stack was read from outside
 * the worker, blocked in a system call (remote_stack.h): 1 + the turn's
 * phase then (PROF_PHASE_*); what ran, only the worker's own samples
 * name. cpu_ns: the CPU the turn's samples stand for (to within one
 * sampling interval: a stall the worker spent waiting for a CPU, or
 * blocked, has little).
 */
typedef struct {
    prof_stall_t   stall;
    int64_t        cpu_ns;
    uint32_t       past;
    uint32_t       outside;
    uint32_t       frame_count;
    uint64_t       frames[PROF_STALL_FRAMES];
} prof_stall_report_t;

/*
 * Reports from the sampler thread (adds) to the loop thread (takes); lost:
 * stalls that found this or the sampler's mailbox full. stack_reads_refused:
 * why the worker's stack could not be read from outside (errno, set once
 * by the sampler thread), for the loop thread to say once: the signal
 * asks for it instead.
 */
typedef struct {
    prof_stall_report_t  reports[PROF_STALL_REPORTS];
    uint32_t             added;
    uint32_t             taken;
    uint64_t             lost;
    uint32_t             stack_reads_refused;
} prof_stall_mailbox_t;


typedef struct {
    int64_t        push_every_ns;   /* hand partial batches over this often */
    prof_queue_t  *queue;
    void         (*notify)(void *data);   /* a batch was queued, or
                                           the worker built its unwind
                                           tables again */
    void          *notify_data;
    prof_stall_mailbox_t  *stalls;  /* NULL: stalls taken, not reported */
    uint32_t       max_cpu_ppm;     /* the profiler's share of the worker's
                                       CPU (handler + this process), in
                                       millionths; 0: no ceiling */
    int64_t       *interval_told;   /* the interval, for the loop thread
                                       (atomic); NULL: none */
    const int64_t *naming_since;    /* the naming thread's CPU when its
                                       naming under way began, -1: none
                                       (atomic); NULL: not told */
    clockid_t      naming_clock;    /* that thread's CPU clock */
} prof_ring_drain_conf_t;


/* The sampler thread for s, in the calling process: 0 or -errno. */
int prof_ring_drain_start(prof_ring_drain_t **drain, prof_sampler_t *s,
    const prof_ring_drain_conf_t *conf);

/*
 * Once the sampled thread stopped or is gone: a final barrier when it
 * went without one (it crashed), then the thread joined and the drain
 * freed. The sampler's mapping stays (prof_sampler_release): other
 * threads may still read its fields.
 */
void prof_ring_drain_finish(prof_ring_drain_t *d);

/*
 * The next stall report, copied into r: 1, or 0 when none waits; *lost:
 * the stalls lost so far. The loop thread only (the sampler thread adds,
 * then calls notify); the mailbox outlives the drain.
 */
int prof_stall_mailbox_take(prof_stall_mailbox_t *m, prof_stall_report_t *r,
    uint64_t *lost);


#endif /* PROF_RING_DRAIN_H */
