/*
 * Endpoint counts: how many requests each endpoint served in a profile's
 * period, sent as event.json's endpoint_counts.
 *
 * Threading: filled by the server's thread, then handed over whole (with a
 * flush) to the profiler loop thread, which frees it with its profile.
 * Memory: names are copied (NUL-terminated) into the table.
 */

#ifndef PROF_ENDPOINT_COUNTS_H
#define PROF_ENDPOINT_COUNTS_H

#include <stddef.h>
#include <stdint.h>

#include "intern.h"


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


prof_endpoint_counts_t *prof_endpoint_counts_create(void);
void prof_endpoint_counts_free(prof_endpoint_counts_t *c);

/* One more request for name. 0, or -ENOMEM (counted as dropped). */
int prof_endpoint_counts_add(prof_endpoint_counts_t *c, const char *name,
    size_t length);

size_t prof_endpoint_counts_size(const prof_endpoint_counts_t *c);
const char *prof_endpoint_counts_name(const prof_endpoint_counts_t *c,
    size_t i);


#endif /* PROF_ENDPOINT_COUNTS_H */
