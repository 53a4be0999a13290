/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Sample queue: a mutex-protected FIFO of batches with a pool and a ceiling.
 * A batch of samples is a mapping of its own: its pages are touched only
 * as samples fill them, and those of a burst's batches go back to the
 * system when they are released (malloc's arenas would keep them).
 */

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "profiler/sample_queue.h"


static size_t
prof_batch_total_bytes(prof_queue_t *q)
{
    return sizeof(prof_batch_t) + q->batch_bytes;
}


/* A batch mapped; its bytes are counted by the caller. */
static prof_batch_t *
prof_batch_alloc(prof_queue_t *q, unsigned overflow)
{
    prof_batch_t  *b;

    b = mmap(NULL, prof_batch_total_bytes(q), PROT_READ|PROT_WRITE,
             MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        return NULL;
    }

    b->next = NULL;
    b->flush_period = 0;
    b->capacity = q->batch_bytes;
    b->overflow = overflow;

    return b;
}


static void
prof_batch_reset(prof_batch_t *b)
{
    b->flush_period = 0;
    b->next = NULL;
    b->used = 0;
    b->sample_count = 0;
    b->flush_after = 0;
    b->flush_realtime_ns = 0;
    b->flush_monotonic_ns = 0;
    b->flush_last_tag = 0;
}


int
prof_queue_init(prof_queue_t *q, size_t batch_bytes, size_t max_bytes,
    unsigned pool_batches)
{
    unsigned       i;
    prof_batch_t  *b;

    q->free = NULL;
    q->head = NULL;
    q->tail = &q->head;
    q->batch_bytes = batch_bytes;
    q->max_bytes = max_bytes;
    q->allocated_bytes = 0;
    q->queued_batches = 0;

    if (pthread_mutex_init(&q->mutex, NULL) != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < pool_batches; i++) {
        if (q->allocated_bytes + prof_batch_total_bytes(q) > max_bytes) {
            break;
        }

        b = prof_batch_alloc(q, 0);
        if (b == NULL) {
            prof_queue_destroy(q);
            return -ENOMEM;
        }

        q->allocated_bytes += prof_batch_total_bytes(q);

        b->next = q->free;
        q->free = b;
    }

    if (q->free == NULL) {
        /* The ceiling must hold at least one batch. */
        prof_queue_destroy(q);
        return -EINVAL;
    }

    return 0;
}


/* A batch's memory back: a barrier-only batch's (malloc'd), a mapping. */
static void
prof_batch_free(prof_queue_t *q, prof_batch_t *b)
{
    if (b->capacity == 0) {
        free(b);
        return;
    }

    (void) munmap(b, prof_batch_total_bytes(q));
}


static void
prof_batch_list_free(prof_queue_t *q, prof_batch_t *b)
{
    prof_batch_t  *next;

    for ( /* void */ ; b != NULL; b = next) {
        next = b->next;
        prof_batch_free(q, b);
    }
}


void
prof_queue_destroy(prof_queue_t *q)
{
    prof_batch_list_free(q, q->free);
    prof_batch_list_free(q, q->head);
    q->free = NULL;
    q->head = NULL;
    q->tail = &q->head;
    q->allocated_bytes = 0;
    pthread_mutex_destroy(&q->mutex);
}


prof_batch_t *
prof_queue_acquire(prof_queue_t *q)
{
    int            reserved;
    prof_batch_t  *b;

    reserved = 0;

    pthread_mutex_lock(&q->mutex);

    b = q->free;

    if (b != NULL) {
        q->free = b->next;

    } else if (q->allocated_bytes + prof_batch_total_bytes(q)
               <= q->max_bytes)
    {
        /* Its bytes reserved; mapped without the lock. */
        q->allocated_bytes += prof_batch_total_bytes(q);
        reserved = 1;
    }

    pthread_mutex_unlock(&q->mutex);

    if (reserved) {
        b = prof_batch_alloc(q, 1);

        if (b == NULL) {
            pthread_mutex_lock(&q->mutex);
            q->allocated_bytes -= prof_batch_total_bytes(q);
            pthread_mutex_unlock(&q->mutex);
        }
    }

    if (b != NULL) {
        prof_batch_reset(b);
    }

    return b;
}


prof_batch_t *
prof_queue_acquire_barrier(prof_queue_t *q)
{
    prof_batch_t  *b;

    b = malloc(sizeof(prof_batch_t));
    if (b == NULL) {
        return NULL;
    }

    b->flush_period = 0;
    prof_batch_reset(b);
    b->capacity = 0;
    b->overflow = 1;

    return b;
}


void
prof_queue_push(prof_queue_t *q, prof_batch_t *b)
{
    b->next = NULL;

    pthread_mutex_lock(&q->mutex);
    *q->tail = b;
    q->tail = &b->next;
    q->queued_batches++;
    pthread_mutex_unlock(&q->mutex);
}


prof_batch_t *
prof_queue_pop_all(prof_queue_t *q)
{
    prof_batch_t  *list;

    pthread_mutex_lock(&q->mutex);
    list = q->head;
    q->head = NULL;
    q->tail = &q->head;
    q->queued_batches = 0;
    pthread_mutex_unlock(&q->mutex);

    return list;
}


void
prof_queue_release(prof_queue_t *q, prof_batch_t *b)
{
    if (b->capacity == 0) {
        prof_batch_free(q, b);              /* a barrier-only batch */
        return;
    }

    pthread_mutex_lock(&q->mutex);

    if (b->overflow) {
        q->allocated_bytes -= prof_batch_total_bytes(q);

    } else {
        b->next = q->free;
        q->free = b;
        b = NULL;
    }

    pthread_mutex_unlock(&q->mutex);

    /* Unmapped without the lock the sampler thread takes. */
    if (b != NULL) {
        prof_batch_free(q, b);
    }
}


size_t
prof_queue_allocated_bytes(prof_queue_t *q)
{
    size_t  n;

    pthread_mutex_lock(&q->mutex);
    n = q->allocated_bytes;
    pthread_mutex_unlock(&q->mutex);

    return n;
}
