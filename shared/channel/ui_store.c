/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The page's store: a ring of records in shared memory, written by the
 * profiler processes in turn and copied by readers without a lock.
 */

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel/ui_store.h"


#define PROF_UI_ALIGN(n)  (((n) + 7) & ~(uint64_t) 7)


prof_ui_store_t *
prof_ui_store_init(void *memory, size_t bytes)
{
    prof_ui_store_t  *s = memory;

    if (bytes < sizeof(prof_ui_store_t) + 4096) {
        return NULL;
    }

    memset(s, 0, sizeof(prof_ui_store_t));
    s->size = (bytes - sizeof(prof_ui_store_t)) & ~(uint64_t) 7;
    __atomic_store_n(&s->magic, PROF_UI_STORE_MAGIC, __ATOMIC_RELEASE);

    return s;
}


/*
 * The writers' turn. The lock word holds its holder's pid: a holder that
 * died with it (killed in the middle of a copy) leaves it to the next.
 */
static void
prof_ui_store_lock(prof_ui_store_t *s)
{
    uint32_t  expected, self;

    self = (uint32_t) getpid();

    for ( ;; ) {
        expected = 0;
        if (__atomic_compare_exchange_n(&s->lock, &expected, self, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        {
            return;
        }

        if (expected != self && kill((pid_t) expected, 0) == -1
            && errno == ESRCH
            && __atomic_compare_exchange_n(&s->lock, &expected, self, 0,
                                           __ATOMIC_ACQUIRE,
                                           __ATOMIC_RELAXED))
        {
            return;
        }

        sched_yield();
    }
}


static void
prof_ui_store_unlock(prof_ui_store_t *s)
{
    __atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}


int
prof_ui_store_write(prof_ui_store_t *s, const void *record, size_t length)
{
    uint64_t         len, pos, off, end, tail, head;
    prof_ui_chunk_t  chunk;

    len = PROF_UI_ALIGN(length + sizeof(prof_ui_chunk_t));

    if (len > s->size || len > UINT32_MAX) {
        __atomic_add_fetch(&s->too_large, 1, __ATOMIC_RELAXED);
        return -E2BIG;
    }

    prof_ui_store_lock(s);

    head = s->head;
    tail = s->tail;
    pos = head;
    off = pos % s->size;

    if (off + len > s->size) {
        pos += s->size - off;                   /* past a wrap marker */
    }

    end = pos + len;

    /* Room: the oldest chunks dropped until the new one fits. */
    while (end - tail > s->size) {
        if (tail >= head) {
            tail = pos;
            break;
        }

        memcpy(&chunk, &s->data[tail % s->size], sizeof(chunk));

        if (chunk.magic == PROF_UI_CHUNK_RECORD && chunk.length >= 8) {
            tail += chunk.length;
            s->dropped++;

        } else {
            tail += s->size - tail % s->size;
        }
    }

    /* The readers learn of the bytes overwritten before they change. */
    __atomic_store_n(&s->tail, tail, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);

    if (pos != head) {
        chunk.magic = PROF_UI_CHUNK_WRAP;
        chunk.length = 8;
        memcpy(&s->data[off], &chunk, sizeof(chunk));
    }

    chunk.magic = PROF_UI_CHUNK_RECORD;
    chunk.length = (uint32_t) len;
    memcpy(&s->data[pos % s->size], &chunk, sizeof(chunk));
    memcpy(&s->data[pos % s->size + sizeof(chunk)], record, length);

    __atomic_store_n(&s->head, end, __ATOMIC_RELEASE);
    s->records++;

    prof_ui_store_unlock(s);

    return 0;
}


int
prof_ui_store_copy(const prof_ui_store_t *s, unsigned char **copy,
    size_t *length)
{
    size_t            n, first, out;
    uint64_t          head, tail, start, p, size;
    unsigned char    *buf;
    prof_ui_chunk_t   chunk;

    *copy = NULL;
    *length = 0;
    size = s->size;

    head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
    tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);

    if (tail >= head || head - tail > size) {
        return 0;
    }

    n = head - tail;

    buf = malloc(n);
    if (buf == NULL) {
        return -ENOMEM;
    }

    first = size - tail % size;
    if (first > n) {
        first = n;
    }

    memcpy(buf, &s->data[tail % size], first);
    memcpy(buf + first, &s->data[0], n - first);

    /* What a writer overwrote meanwhile is before the tail it set. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    start = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);

    if (start < tail) {
        start = tail;
    }

    out = 0;
    p = start;

    while (p + sizeof(chunk) <= head) {
        memcpy(&chunk, buf + (p - tail), sizeof(chunk));

        if (chunk.magic == PROF_UI_CHUNK_WRAP) {
            p += size - p % size;
            continue;
        }

        if (chunk.magic != PROF_UI_CHUNK_RECORD
            || chunk.length < sizeof(chunk) || chunk.length % 8 != 0
            || p + chunk.length > head)
        {
            break;
        }

        memmove(buf + out, buf + (p - tail), chunk.length);
        out += chunk.length;
        p += chunk.length;
    }

    *copy = buf;
    *length = out;

    return 0;
}


void
prof_ui_store_stats(const prof_ui_store_t *s, prof_ui_store_stats_t *st)
{
    uint64_t  head, tail, p;

    memset(st, 0, sizeof(*st));

    if (s == NULL) {
        return;
    }

    st->size = s->size;
    head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
    tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
    st->records = __atomic_load_n(&s->records, __ATOMIC_RELAXED);
    st->dropped = __atomic_load_n(&s->dropped, __ATOMIC_RELAXED);
    st->too_large = __atomic_load_n(&s->too_large, __ATOMIC_RELAXED);

    if (tail <= head && head - tail <= s->size) {
        st->used = head - tail;
    }

    p = st->records - st->dropped;
    st->records_held = (p <= st->records) ? p : 0;
}
