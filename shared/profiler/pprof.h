/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * pprof encoder: writes a closed profile as a gzip-compressed pprof
 * (perftools.profiles.Profile; the field numbers of nanopb's generated
 * profile.pb.h, the encoding written directly, gzip at zlib's level 1).
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

#include "profiler/aggregator.h"
#include "common/buffer.h"


/*
 * What a profile's locations are: a location without a function is
 * written with its mapping (file name and GNU build id) and its ELF
 * virtual address, and the mapping says has_functions only when all of
 * its locations have one, so that a backend can name the others
 * ("remote_symbols:yes" on the upload).
 */
typedef struct {
    size_t    locations;
    size_t    unnamed_locations;    /* in a mapping, without a function */
    size_t    unmapped_locations;   /* in no known object, no function */
    size_t    samples;              /* written */
    size_t    uncompressed_bytes;   /* the Profile message's */
} prof_pprof_info_t;


/*
 * Another backend's form of the same profile (pyroscope.h): the values
 * written (indices of PROF_VALUE_*) under its own names, its period
 * type, samples whose values are all 0 left out, and its labels: no
 * thread labels; the string labels span_id (16 lowercase hex digits of
 * the key's span_id), trace_id (32), and endpoint_label with the key's
 * endpoint (a bounded name, the caller's to bound).
 */
#define PROF_PPROF_STYLE_VALUES_MAX  4

typedef struct {
    unsigned      value_count;
    unsigned      values[PROF_PPROF_STYLE_VALUES_MAX];
    const char   *types[PROF_PPROF_STYLE_VALUES_MAX][2];   /* type, unit */
    const char   *period_type[2];
    const char   *endpoint_label;
} prof_pprof_style_t;


/* 0, -ENOMEM, or -EIO when encoding or compression failed. */
int prof_pprof_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    prof_buffer_t *out);

/* The same, and what its locations are (info, may be NULL). */
int prof_pprof_encode_info(const prof_profile_t *p, prof_aggregator_t *agg,
    prof_buffer_t *out, prof_pprof_info_t *info);


/* In another backend's form (style, NULL: Datadog's). */
int prof_pprof_encode_style(const prof_profile_t *p, prof_aggregator_t *agg,
    const prof_pprof_style_t *style, prof_buffer_t *out,
    prof_pprof_info_t *info);


#endif /* PROF_PPROF_H */
