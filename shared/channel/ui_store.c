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


/*
 * The ring's bytes are moved a word at a time with atomic stores
 * (release) and loads (acquire), plain moves on x86-64, as the status
 * slots' are: a reader may copy words a writer changes meanwhile, and
 * keeps them only when the tail read after says they were not. A word a
 * writer stored after moving the tail, once loaded, makes that tail
 * visible to the reader's next load of it.
 */
static void
prof_ui_store_put(prof_ui_store_t *s, uint64_t at, const void *from,
    size_t length)
{
    size_t     i;
    uint64_t   word, *to;

    to = (uint64_t *) &s->data[at];

    for (i = 0; i < length / 8; i++) {
        memcpy(&word, (const unsigned char *) from + i * 8, 8);
        __atomic_store_n(&to[i], word, __ATOMIC_RELEASE);
    }

    if (length % 8 != 0) {
        word = 0;
        memcpy(&word, (const unsigned char *) from + i * 8, length % 8);
        __atomic_store_n(&to[i], word, __ATOMIC_RELEASE);
    }
}


/* length a multiple of 8 */
static void
prof_ui_store_get(const prof_ui_store_t *s, uint64_t at, void *into,
    size_t length)
{
    size_t           i;
    uint64_t         word;
    const uint64_t  *from;

    from = (const uint64_t *) &s->data[at];

    for (i = 0; i < length / 8; i++) {
        word = __atomic_load_n(&from[i], __ATOMIC_ACQUIRE);
        memcpy((unsigned char *) into + i * 8, &word, 8);
    }
}


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
 * A copy takes microseconds: a writer gives up after PROF_UI_LOCK_TRIES
 * yields.
 */
#define PROF_UI_LOCK_TRIES  10000

static int
prof_ui_store_lock(prof_ui_store_t *s)
{
    unsigned  tries;
    uint32_t  expected, self;

    self = (uint32_t) getpid();

    for (tries = 0; tries < PROF_UI_LOCK_TRIES; tries++) {
        expected = 0;
        if (__atomic_compare_exchange_n(&s->lock, &expected, self, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        {
            return 0;
        }

        if (expected != self && kill((pid_t) expected, 0) == -1
            && errno == ESRCH
            && __atomic_compare_exchange_n(&s->lock, &expected, self, 0,
                                           __ATOMIC_ACQUIRE,
                                           __ATOMIC_RELAXED))
        {
            return 0;
        }

        sched_yield();
    }

    /* Never a wait without end (a holder's pid taken by another process
       after it died holding it): this record is dropped, counted. */
    __atomic_add_fetch(&s->busy, 1, __ATOMIC_RELAXED);

    return -EBUSY;
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

    if (prof_ui_store_lock(s) != 0) {
        return -EBUSY;
    }

    head = __atomic_load_n(&s->head, __ATOMIC_RELAXED);
    tail = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
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

        prof_ui_store_get(s, tail % s->size, &chunk, sizeof(chunk));

        if (chunk.magic == PROF_UI_CHUNK_RECORD && chunk.length >= 8) {
            tail += chunk.length;
            __atomic_add_fetch(&s->dropped, 1, __ATOMIC_RELAXED);

        } else {
            tail += s->size - tail % s->size;
        }
    }

    /* The readers learn of the bytes overwritten before they change
       (the words' stores are release stores). */
    __atomic_store_n(&s->tail, tail, __ATOMIC_RELEASE);

    if (pos != head) {
        chunk.magic = PROF_UI_CHUNK_WRAP;
        chunk.length = 8;
        prof_ui_store_put(s, off, &chunk, sizeof(chunk));
    }

    chunk.magic = PROF_UI_CHUNK_RECORD;
    chunk.length = (uint32_t) len;
    prof_ui_store_put(s, pos % s->size, &chunk, sizeof(chunk));
    prof_ui_store_put(s, pos % s->size + sizeof(chunk), record, length);

    __atomic_store_n(&s->head, end, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->records, 1, __ATOMIC_RELAXED);

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

    prof_ui_store_get(s, tail % size, buf, first);
    prof_ui_store_get(s, 0, buf + first, n - first);

    /* What a writer overwrote meanwhile is before the tail it set (the
       words' loads are acquire loads: this one comes after them). */
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
    st->busy = __atomic_load_n(&s->busy, __ATOMIC_RELAXED);

    if (tail <= head && head - tail <= s->size) {
        st->used = head - tail;
    }

    p = st->records - st->dropped;
    st->records_held = (p <= st->records) ? p : 0;
}
