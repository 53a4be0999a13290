/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A bounded single-producer single-consumer ring of fixed-size items,
 * without locks: how the worker hands request labels to the profiler
 * loop thread (in memory shared between the two processes, channel.h),
 * and the loop thread hands log messages to the thread that logs.
 *
 * Threading: one producer thread calls _reserve/_commit, one consumer
 * thread _peek/_release; either may call _count. Never blocks.
 * Memory: the ring owns its items' storage; items are copied in place.
 */

#ifndef PROF_SPSC_H
#define PROF_SPSC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>


typedef struct {
    uint32_t        head;           /* consumer: next to read */
    uint32_t        tail;           /* producer: next to write */
    uint32_t        mask;           /* capacity - 1 (a power of two) */
    size_t          item_size;
    unsigned char  *items;
} prof_spsc_t;


static inline int
prof_spsc_init(prof_spsc_t *r, uint32_t capacity, size_t item_size)
{
    r->head = 0;
    r->tail = 0;
    r->mask = capacity - 1;
    r->item_size = (item_size + 7) & ~(size_t) 7;
    r->items = calloc(capacity, r->item_size);

    return (r->items != NULL) ? 0 : -1;
}


/* A ring over the caller's storage of capacity items of item_size (a
   multiple of 8); not freed by prof_spsc_free. */
static inline void
prof_spsc_init_in(prof_spsc_t *r, uint32_t capacity, size_t item_size,
    void *items)
{
    r->head = 0;
    r->tail = 0;
    r->mask = capacity - 1;
    r->item_size = item_size;
    r->items = items;
}


static inline void
prof_spsc_free(prof_spsc_t *r)
{
    free(r->items);
    r->items = NULL;
}


/* Producer: room for the next item, or NULL when full. */
static inline void *
prof_spsc_reserve(prof_spsc_t *r)
{
    uint32_t  head;

    head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);

    if (r->tail - head > r->mask) {
        return NULL;
    }

    return r->items + (r->tail & r->mask) * r->item_size;
}


/* Producer: the reserved item is written; returns the items now queued. */
static inline uint32_t
prof_spsc_commit(prof_spsc_t *r)
{
    uint32_t  tail;

    tail = r->tail + 1;
    __atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);

    return tail - __atomic_load_n(&r->head, __ATOMIC_RELAXED);
}


/* Consumer: the oldest item, or NULL when empty. */
static inline void *
prof_spsc_peek(prof_spsc_t *r)
{
    if (__atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) == r->head) {
        return NULL;
    }

    return r->items + (r->head & r->mask) * r->item_size;
}


/* Consumer: done with the oldest item. */
static inline void
prof_spsc_release(prof_spsc_t *r)
{
    __atomic_store_n(&r->head, r->head + 1, __ATOMIC_RELEASE);
}


static inline uint32_t
prof_spsc_capacity(const prof_spsc_t *r)
{
    return r->mask + 1;
}


#endif /* PROF_SPSC_H */
