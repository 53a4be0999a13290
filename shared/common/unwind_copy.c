/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * An unwind table copied byte for byte from the process that built it
 * (the worker's, read by its profiler process), made usable in this one
 * (unwind_walk.h): its pointers moved into the copy, each checked to lie
 * in it with all it points to, so that a walk with the copy reads nothing
 * outside it, whatever the copy holds.
 *
 * Threading: any thread; the copy is the caller's, who walks with it.
 */

#define _GNU_SOURCE

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/unwind_table.h"


/* Whether n elements of size bytes at p (aligned to align) lie in the
   copy [low, low + bytes). */
static int
prof_unwind_within(uintptr_t p, size_t n, size_t size, size_t align,
    uintptr_t low, size_t bytes)
{
    if (p < low || p - low > bytes || (p & (align - 1)) != 0) {
        return 0;
    }

    return n <= (bytes - (p - low)) / size;
}


/* A pointer into the table at remote, as one into the copy at local; 0
   when it points outside. */
static uintptr_t
prof_unwind_moved(uintptr_t p, uintptr_t remote, uintptr_t local,
    size_t bytes)
{
    if (p < remote || p - remote > bytes) {
        return 0;
    }

    return local + (p - remote);
}


/*
 * An object's arrays moved into the copy and checked: 0, or -1. Arrays
 * that lie in shared (a table this process maps where the other one does:
 * the one it inherited, whose objects the other's table took whole) stay
 * where they are, checked to lie all in it.
 */
static int
prof_unwind_adopt_object(prof_unwind_object_t *o, uintptr_t remote,
    uintptr_t local, size_t bytes, const prof_unwind_table_t *shared)
{
    uint32_t   i;
    uintptr_t  rows, pages, sites, callouts;
    size_t     page_count;

    if (o->start >= o->end || o->start < o->base || o->row_count == 0
        || o->end - o->start > (size_t) UINT32_MAX)
    {
        return -1;
    }

    page_count = ((o->end - o->start) >> PROF_UNWIND_PAGE_SHIFT) + 2;

    if (shared != NULL
        && prof_unwind_within((uintptr_t) o->rows, 0, 1, 1,
                              (uintptr_t) shared->arena, shared->bytes))
    {
        remote = local = (uintptr_t) shared->arena;
        bytes = shared->bytes;
    }

    rows = prof_unwind_moved((uintptr_t) o->rows, remote, local, bytes);
    pages = prof_unwind_moved((uintptr_t) o->pages, remote, local, bytes);

    if (!prof_unwind_within(rows, o->row_count, sizeof(prof_row_t), 4,
                            local, bytes)
        || !prof_unwind_within(pages, page_count, sizeof(uint32_t), 4,
                               local, bytes))
    {
        return -1;
    }

    o->rows = (const prof_row_t *) rows;
    o->pages = (const uint32_t *) pages;

    /* The rows a page's search may look at: all in the object's. */
    for (i = 0; i < page_count; i++) {
        if (o->pages[i] >= o->row_count) {
            return -1;
        }
    }

    sites = 0;
    if (o->site_count > 0) {
        sites = prof_unwind_moved((uintptr_t) o->sites, remote, local, bytes);
        if (!prof_unwind_within(sites, o->site_count, sizeof(uint32_t), 4,
                                local, bytes))
        {
            return -1;
        }
    }

    callouts = 0;
    if (o->callout_count > 0) {
        callouts = prof_unwind_moved((uintptr_t) o->callouts, remote, local,
                                     bytes);
        if (!prof_unwind_within(callouts, o->callout_count,
                                sizeof(uint32_t), 4, local, bytes))
        {
            return -1;
        }
    }

    o->sites = (const uint32_t *) sites;
    o->callouts = (const uint32_t *) callouts;

    return 0;
}


size_t
prof_unwind_table_head_bytes(void)
{
    return sizeof(prof_unwind_table_t);
}


size_t
prof_unwind_table_copy_bytes(const void *head, uintptr_t remote)
{
    const prof_unwind_table_t  *t = head;

    if ((uintptr_t) t->arena != remote || t->bytes < sizeof(*t)
        || t->bytes > t->arena_size)
    {
        return 0;
    }

    return t->bytes;
}


prof_unwind_table_t *
prof_unwind_table_adopt(void *copy, size_t size, uintptr_t remote)
{
    return prof_unwind_table_adopt_over(copy, size, remote, NULL);
}


prof_unwind_table_t *
prof_unwind_table_adopt_over(void *copy, size_t size, uintptr_t remote,
    const prof_unwind_table_t *shared)
{
    unsigned              i;
    uintptr_t             local, cache, objects;
    prof_unwind_table_t  *t = copy;

    local = (uintptr_t) copy;

    if (size < sizeof(prof_unwind_table_t) || (local & 15) != 0
        || (uintptr_t) t->arena != remote || t->bytes != size
        || t->bytes > t->arena_size)
    {
        return NULL;
    }

    cache = prof_unwind_moved((uintptr_t) t->cache, remote, local, size);
    objects = prof_unwind_moved((uintptr_t) t->objects, remote, local, size);

    if (!prof_unwind_within(cache, PROF_UNWIND_CACHE_SIZE,
                            sizeof(prof_unwind_cache_entry_t), 8, local,
                            size)
        || !prof_unwind_within(objects, t->object_count,
                               sizeof(prof_unwind_object_t), 8, local, size))
    {
        return NULL;
    }

    t->cache = (prof_unwind_cache_entry_t *) cache;
    t->objects = (prof_unwind_object_t *) objects;

    for (i = 0; i < t->object_count; i++) {
        if (prof_unwind_adopt_object(&t->objects[i], remote, local, size,
                                     shared) != 0
            || (i > 0 && t->objects[i].start < t->objects[i - 1].end))
        {
            return NULL;
        }
    }

    /* The rows the walk last used, as the other process wrote them: an
       entry may have been caught half written. */
    memset(t->cache, 0, PROF_UNWIND_CACHE_SIZE
                        * sizeof(prof_unwind_cache_entry_t));

    t->arena = copy;
    t->arena_size = size;

    return t;
}
