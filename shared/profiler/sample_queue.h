/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Sample queue: batches flow in order from the sampler thread (producer)
 * to the profiler loop thread (consumer), under a hard byte ceiling.
 *
 * Threading: prof_queue_acquire/push are called by the producer only,
 * prof_queue_pop_all/release by the consumer only. One mutex protects the
 * free list, the queue and the byte count; it is never taken by the nginx
 * worker thread or a signal handler, and never held across anything slow.
 * Memory: the queue owns every batch; a pool of reusable batches is
 * preallocated, overflow batches are allocated while the total stays under
 * max_bytes and freed when released. Past the ceiling acquire fails and the
 * producer drops (and counts) what it had.
 */

#ifndef PROF_SAMPLE_QUEUE_H
#define PROF_SAMPLE_QUEUE_H

#include <pthread.h>

#include "profiler/sample_batch.h"


typedef struct {
    pthread_mutex_t   mutex;
    prof_batch_t     *free;             /* reusable pool batches */
    prof_batch_t     *head;             /* queued, oldest first */
    prof_batch_t    **tail;
    size_t            batch_bytes;      /* data bytes of each batch */
    size_t            max_bytes;        /* ceiling on all batch memory */
    size_t            allocated_bytes;  /* pool + overflow, under max */
    size_t            queued_batches;
} prof_queue_t;


/* Preallocates pool_batches batches (fewer if max_bytes says so). */
int prof_queue_init(prof_queue_t *q, size_t batch_bytes, size_t max_bytes,
    unsigned pool_batches);
void prof_queue_destroy(prof_queue_t *q);

/* An empty batch, or NULL when the ceiling is reached. */
prof_batch_t *prof_queue_acquire(prof_queue_t *q);
void prof_queue_push(prof_queue_t *q, prof_batch_t *b);

/*
 * A batch with no room for samples, allocated outside the ceiling, to carry
 * a flush barrier when the ceiling leaves nothing else. NULL without memory.
 */
prof_batch_t *prof_queue_acquire_barrier(prof_queue_t *q);

/* Takes every queued batch, oldest first (a NULL-terminated list). */
prof_batch_t *prof_queue_pop_all(prof_queue_t *q);
void prof_queue_release(prof_queue_t *q, prof_batch_t *b);

size_t prof_queue_allocated_bytes(prof_queue_t *q);


#endif /* PROF_SAMPLE_QUEUE_H */
