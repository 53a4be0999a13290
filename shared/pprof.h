/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * pprof encoder: writes a closed profile as a gzip-compressed pprof
 * (perftools.profiles.Profile, encoded with nanopb).
 *
 * Threading: the profiler loop thread (it reads the aggregator's address
 * cache). May take milliseconds: never call it on the nginx event loop.
 * Memory: the output buffer is grown with realloc and belongs to the
 * caller (prof_buffer_free).
 *
 * Every string of the table is valid UTF-8 without NUL, whatever the bytes
 * of the names, endpoints and paths it is made from (utf8.h: U+FFFD).
 */

#ifndef PROF_PPROF_H
#define PROF_PPROF_H

#include <stddef.h>

#include "aggregator.h"
#include "buffer.h"


/* 0, -ENOMEM, or -EIO when encoding or compression failed. */
int prof_pprof_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    prof_buffer_t *out);


#endif /* PROF_PPROF_H */
