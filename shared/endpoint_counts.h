/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Endpoint counts: how many requests each endpoint served in a profile's
 * period, sent as event.json's endpoint_counts.
 *
 * The server's thread only appends each request's endpoint to a log (a
 * chunk of raw records: no hashing, no allocation but one a chunk); the
 * profiler loop thread counts the logs' records into tables.
 *
 * Threading: a log is written by the server's thread, then handed over
 * whole to the profiler loop thread, which counts and frees it. A table
 * belongs to the loop thread, then to its profile.
 * Memory: names are copied (NUL-terminated) into the table.
 */

#ifndef PROF_ENDPOINT_COUNTS_H
#define PROF_ENDPOINT_COUNTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "intern.h"
#include "sample.h"


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


/* Chunks of PROF_ENDPOINT_LOG_BYTES, records of 2 bytes of length then
   the name's bytes. */
#define PROF_ENDPOINT_LOG_BYTES   (64 * 1024)

struct prof_endpoint_log_s {
    prof_endpoint_log_t  *next;     /* more of the same period */
    uint64_t              period;   /* the server's flushes before it */
    uint32_t              used;
    uint32_t              capacity;
    unsigned char         data[];
};


/* The server's end of the log: where the next record goes. */
typedef struct {
    unsigned char        *pos;
    unsigned char        *end;
    prof_endpoint_log_t  *chunk;
} prof_endpoint_writer_t;


/*
 * Appends the endpoint "a b" (just b when alen is 0), cut at
 * PROF_ENDPOINT_MAX bytes; -1 when the chunk has no room (then nothing
 * is written).
 */
static inline int
prof_endpoint_write(prof_endpoint_writer_t *w, const void *a, size_t alen,
    const void *b, size_t blen)
{
    size_t          n;
    unsigned char  *p;

    if (alen > PROF_ENDPOINT_MAX / 2) {
        alen = PROF_ENDPOINT_MAX / 2;
    }

    n = alen + (alen != 0);
    if (blen > PROF_ENDPOINT_MAX - n) {
        blen = PROF_ENDPOINT_MAX - n;
    }
    n += blen;

    p = w->pos;
    if ((size_t) (w->end - p) < n + 2) {
        return -1;
    }

    p[0] = (unsigned char) n;
    p[1] = (unsigned char) (n >> 8);
    p += 2;

    if (alen != 0) {
        memcpy(p, a, alen);
        p += alen;
        *p++ = ' ';
    }

    memcpy(p, b, blen);
    w->pos = p + blen;

    return 0;
}


/* A new chunk, empty, of the given period; NULL without memory. */
prof_endpoint_log_t *prof_endpoint_log_create(uint64_t period);

/* Frees a list of chunks. */
void prof_endpoint_log_free(prof_endpoint_log_t *log);

/* The writer's chunk, closed (its used bytes set) and taken, or NULL. */
prof_endpoint_log_t *prof_endpoint_writer_take(prof_endpoint_writer_t *w);

/* Starts writing into a chunk. */
void prof_endpoint_writer_start(prof_endpoint_writer_t *w,
    prof_endpoint_log_t *chunk);

/* The records of a list of chunks (requests). */
uint64_t prof_endpoint_log_records(const prof_endpoint_log_t *log);

/* Counts a list of chunks' records: the number of records. */
uint64_t prof_endpoint_counts_add_log(prof_endpoint_counts_t *c,
    const prof_endpoint_log_t *log);


prof_endpoint_counts_t *prof_endpoint_counts_create(void);
void prof_endpoint_counts_free(prof_endpoint_counts_t *c);

/* One more request for name. 0, or -ENOMEM (counted as dropped). */
int prof_endpoint_counts_add(prof_endpoint_counts_t *c, const char *name,
    size_t length);

size_t prof_endpoint_counts_size(const prof_endpoint_counts_t *c);
const char *prof_endpoint_counts_name(const prof_endpoint_counts_t *c,
    size_t i);


#endif /* PROF_ENDPOINT_COUNTS_H */
