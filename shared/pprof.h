/*
 * pprof encoder: writes a closed profile as a gzip-compressed pprof
 * (perftools.profiles.Profile, encoded with nanopb).
 *
 * Threading: the profiler loop thread (it reads the aggregator's address
 * cache). May take milliseconds: never call it on the nginx event loop.
 * Memory: the output buffer is grown with realloc and belongs to the
 * caller (prof_buffer_free).
 */

#ifndef PROF_PPROF_H
#define PROF_PPROF_H

#include <stddef.h>

#include "aggregator.h"


typedef struct {
    unsigned char  *data;
    size_t          length;
    size_t          capacity;
} prof_buffer_t;


/* 0, -ENOMEM, or -EIO when encoding or compression failed. */
int prof_pprof_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    prof_buffer_t *out);

void prof_buffer_free(prof_buffer_t *b);


#endif /* PROF_PPROF_H */
