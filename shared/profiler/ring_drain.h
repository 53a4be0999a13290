/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The sampler thread: the profiler process's side of a worker's sampler
 * (channel/sampler_state.h). It wakes a few times a second only: it
 * drains the ring's slots into batches for the queue, in order with the
 * flushes the sampled thread asked for (each closes a profile with a
 * barrier batch), and, when the sampled thread neither waited in its
 * event loop nor burned CPU for a while (blocked outside it), asks it for
 * its stack with a queued SIGPROF, to account the blocked time; it tells
 * notify when walks left the unwind tables.
 *
 * Threading: prof_ring_drain_start and _finish are called by one thread
 * of the process that drains (the profiler process, forked by the sampled
 * one; or the sampled one itself, in tests), after prof_sampler_start.
 * The thread is created with every signal blocked. It takes the queue's
 * mutex only; it waits for the handler through process-shared futex
 * words; notify is called on it.
 * Memory: the drain owns its current batch and the copy of the last CPU
 * sample's stack; batches belong to the queue; the sampler's mapping
 * stays the worker's side's (prof_sampler_release).
 */

#ifndef PROF_RING_DRAIN_H
#define PROF_RING_DRAIN_H

#include <stdint.h>

#include "channel/sampler_state.h"
#include "profiler/sample_queue.h"


typedef struct prof_ring_drain_s  prof_ring_drain_t;


typedef struct {
    int64_t        push_every_ns;   /* hand partial batches over this often */
    prof_queue_t  *queue;
    void         (*notify)(void *data);   /* a batch was queued, or
                                           walks left the unwind
                                           tables */
    void          *notify_data;
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


#endif /* PROF_RING_DRAIN_H */
