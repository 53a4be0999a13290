/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Endpoint counts: how many requests each endpoint served in a profile's
 * period, sent as event.json's endpoint_counts.
 *
 * The worker counts each request into a shared table per period
 * (prof_endpoint_table_t: no allocation, no lock, no copy but a name's
 * first); the profiler process turns a closed period's table into counts
 * (prof_endpoint_counts_t) for its profile.
 *
 * Threading: a shared table is written by the worker only, read and
 * cleared by the profiler process only once the barrier closing its period
 * is published. A counts table belongs to the profiler loop thread, then
 * to its profile.
 * Memory: names are copied (NUL-terminated) into the counts table.
 */

#ifndef PROF_ENDPOINT_COUNTS_H
#define PROF_ENDPOINT_COUNTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/intern.h"
#include "channel/sample.h"


typedef struct prof_endpoint_counts_s  prof_endpoint_counts_t;

/* Distinct endpoints a table holds: requests of others are only counted
   in dropped (a server with unbounded URIs must not grow the table). */
#define PROF_ENDPOINT_COUNTS_MAX  4096


struct prof_endpoint_counts_s {
    prof_intern_t   names;          /* NUL-terminated names */
    uint64_t       *counts;         /* by name index */
    size_t          capacity;
    uint64_t        requests;       /* all of them, dropped too */
    uint64_t        dropped;        /* past PROF_ENDPOINT_COUNTS_MAX */
};


/*
 * The worker's side: a table per period in memory shared with the
 * profiler process, written by the worker only. A request adds one to its
 * endpoint's count: the name hashed where it lies (64 bits, trusted: no
 * comparison), copied only the first time. The profiler process reads a
 * period's table after the barrier that closes it, clears it and gives it
 * back for the period after next (period += 2); a table not given back in
 * time leaves that period's requests counted as dropped.
 */
#define PROF_ENDPOINT_SLOTS       (2 * PROF_ENDPOINT_COUNTS_MAX)
#define PROF_ENDPOINT_NAME_BYTES  (PROF_ENDPOINT_COUNTS_MAX * 64)

typedef struct {
    uint32_t        offset;         /* in names */
    uint32_t        length;
} prof_endpoint_name_t;

/*
 * A slot i is hashes[i] (0: empty), counts[i] and slot_names[i], in
 * arrays apart: a request's probe reads a word of hashes and adds to a
 * word of counts, each an index scaled by 8.
 */
typedef struct {
    uint64_t        period;         /* the period it counts; the profiler
                                       process stores it, release */
    uint32_t        used;           /* slots */
    uint32_t        names_used;
    uint64_t        dropped;        /* requests not counted: full */
    uint64_t        hashes[PROF_ENDPOINT_SLOTS];
    uint64_t        counts[PROF_ENDPOINT_SLOTS];
    prof_endpoint_name_t  slot_names[PROF_ENDPOINT_SLOTS];
    char            names[PROF_ENDPOINT_NAME_BYTES];
} prof_endpoint_table_t;


static inline uint64_t
prof_endpoint_mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}


/* Bytes in words, the tail without reading past the end. */
static inline uint64_t
prof_endpoint_hash_bytes(uint64_t h, const unsigned char *p, size_t n)
{
    uint32_t  w4;
    uint16_t  w2;
    uint64_t  w, tail;

    for ( /* void */ ; n >= 8; n -= 8, p += 8) {
        memcpy(&w, p, 8);
        h = prof_endpoint_mix(h, w);
    }

    tail = 0;
    if (n & 4) {
        memcpy(&w4, p, 4);
        tail = w4;
        p += 4;
    }
    if (n & 2) {
        memcpy(&w2, p, 2);
        tail = (tail << 16) | w2;
        p += 2;
    }
    if (n & 1) {
        tail = (tail << 8) | *p;
    }

    return prof_endpoint_mix(h, tail ^ ((uint64_t) n << 56));
}


/*
 * The endpoint "a b" (just b when alen is 0), each part up to
 * PROF_ENDPOINT_MAX bytes (the name is cut shorter: two ways to the same
 * name give two slots, merged by name when taken). A caller that knows a
 * by a number (seed, not 0: the same seed for the same a, always) saves
 * hashing it; its name is still copied from a. A seed starts the hash as
 * its product by an odd constant (distinct seeds, distinct words spread
 * over all 64 bits, which b's first word is mixed with).
 */
static inline uint64_t
prof_endpoint_hash(uint64_t seed, const void *a, size_t alen, const void *b,
    size_t blen)
{
    uint64_t  h;

    h = (seed != 0) ? seed * 0xbf58476d1ce4e5b9ULL
                    : prof_endpoint_hash_bytes(0x2545f4914f6cdd1dULL, a,
                                      (alen < PROF_ENDPOINT_MAX) ? alen
                                                         : PROF_ENDPOINT_MAX);
    h = prof_endpoint_hash_bytes(h, b, (blen < PROF_ENDPOINT_MAX) ? blen
                                                         : PROF_ENDPOINT_MAX);

    return h | 1;
}


/*
 * prof_endpoint_hash(seed, a, alen, b, blen) where the caller knows that
 * seed is not 0 and blen at most PROF_ENDPOINT_MAX (a is not read).
 */
static inline uint64_t
prof_endpoint_hash_seeded(uint64_t seed, const void *b, size_t blen)
{
    return prof_endpoint_hash_bytes(seed * 0xbf58476d1ce4e5b9ULL, b, blen)
           | 1;
}


/*
 * The slot of t that holds hash, or the empty one where it goes (the
 * table never fills: PROF_ENDPOINT_COUNTS_MAX names in twice as many
 * slots).
 */
static inline uint32_t
prof_endpoint_table_find(const prof_endpoint_table_t *t, uint64_t hash)
{
    uint32_t  i;

    for (i = (uint32_t) hash; /* void */ ; i++) {
        i &= PROF_ENDPOINT_SLOTS - 1;

        if (t->hashes[i] == hash || t->hashes[i] == 0) {
            return i;
        }
    }
}


/* A name not in the table yet, for the empty slot i: copied, or dropped
   when the table is full. */
void prof_endpoint_table_insert(prof_endpoint_table_t *t, uint64_t hash,
    uint32_t i, const void *a, size_t alen, const void *b, size_t blen);


/*
 * One request more for "a b" in t (a known by seed, if not 0: see
 * prof_endpoint_hash).
 */
static inline void
prof_endpoint_table_count(prof_endpoint_table_t *t, uint64_t seed,
    const void *a, size_t alen, const void *b, size_t blen)
{
    uint64_t  h;
    uint32_t  i;

    h = prof_endpoint_hash(seed, a, alen, b, blen);

    for (i = (uint32_t) h; /* void */ ; i++) {
        i &= PROF_ENDPOINT_SLOTS - 1;

        if (t->hashes[i] == h) {
            /* The profiler process reads it once the period is closed. */
            t->counts[i]++;
            return;
        }

        if (t->hashes[i] == 0) {
            prof_endpoint_table_insert(t, h, i, a, alen, b, blen);
            return;
        }
    }
}


/* Empty tables for periods 0 and 1. */
void prof_endpoint_tables_init(prof_endpoint_table_t tables[2]);

/*
 * The profiler process, after the barrier closing period: its counts
 * added to c (dropped ones too), the table cleared and given back for
 * period + 2. -1 when the table is not period's (then nothing is read).
 */
int prof_endpoint_table_take(prof_endpoint_table_t *t, uint64_t period,
    prof_endpoint_counts_t *c);


prof_endpoint_counts_t *prof_endpoint_counts_create(void);
void prof_endpoint_counts_free(prof_endpoint_counts_t *c);

/* One more request for name. 0, or -ENOMEM (counted as dropped). */
int prof_endpoint_counts_add(prof_endpoint_counts_t *c, const char *name,
    size_t length);

/* n more requests for name. 0, or -ENOMEM (counted as dropped). */
int prof_endpoint_counts_add_n(prof_endpoint_counts_t *c, const char *name,
    size_t length, uint64_t n);

size_t prof_endpoint_counts_size(const prof_endpoint_counts_t *c);
const char *prof_endpoint_counts_name(const prof_endpoint_counts_t *c,
    size_t i);


#endif /* PROF_ENDPOINT_COUNTS_H */
