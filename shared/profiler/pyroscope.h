/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Pyroscope's push request (push.v1.PusherService/Push, api/push/v1
 * push.proto): a closed profile as two series, CPU (__name__ process_cpu:
 * cpu/nanoseconds and samples/count, period cpu/nanoseconds) and wall
 * time (__name__ wall: wall/nanoseconds and samples/count), each labelled
 * with service_name, environment, version and the user's tags (values
 * valid UTF-8 of at most PROF_PYROSCOPE_MAX_VALUE bytes; a tag named as
 * a sample label, endpoint, span_id or trace_id, dropped), and each
 * a pprof or several: split so that none has more than
 * PROF_PYROSCOPE_MAX_SAMPLES samples or PROF_PYROSCOPE_MAX_BYTES bytes
 * before compression (Pyroscope's default limits, over which it rejects
 * a profile).
 *
 * Samples carry the string labels span_id (the request's local root
 * span, 16 hex digits) and trace_id (32), which Pyroscope keeps out of
 * its series, and, when conf.max_endpoints is not 0, endpoint: the
 * max_endpoints endpoints of most time a profile, every other folded into
 * PROF_PYROSCOPE_OTHER_ENDPOINT (a series each: a bound on them).
 *
 * Threading: the profiler loop thread (it reads the aggregator's address
 * cache). Memory: the request is appended to a caller-owned buffer.
 */

#ifndef PROF_PYROSCOPE_H
#define PROF_PYROSCOPE_H

#include <stddef.h>

#include "common/buffer.h"
#include "profiler/aggregator.h"


#define PROF_PYROSCOPE_PATH            "/push.v1.PusherService/Push"
#define PROF_PYROSCOPE_MAX_SAMPLES     16000
#define PROF_PYROSCOPE_MAX_BYTES       (4 * 1024 * 1024)
#define PROF_PYROSCOPE_MAX_LABELS      30       /* names a series */
#define PROF_PYROSCOPE_MAX_NAME        1024     /* bytes a label name */
#define PROF_PYROSCOPE_MAX_VALUE       2048     /* bytes a label value */
#define PROF_PYROSCOPE_OTHER_ENDPOINT  "other"


typedef struct {
    const char          *service;           /* service_name */
    const char          *env;               /* NULL or "": no label */
    const char          *version;
    const char * const  *tags;              /* "key:value" */
    size_t               tag_count;
    size_t               max_endpoints;     /* 0: no endpoint label */
    size_t               max_samples;       /* 0: the default limits */
    size_t               max_bytes;
} prof_pyroscope_conf_t;


typedef struct {
    size_t               profiles;          /* pprofs in the request */
    size_t               samples;
    size_t               endpoints_folded;  /* distinct, into "other" */
    size_t               tags_dropped;      /* past the label bound, or
                                               with no valid name: over
                                               PROF_PYROSCOPE_MAX_NAME, or
                                               a sample label's */
    size_t               samples_dropped;   /* a sample alone over the
                                               size bound */
    size_t               rank_comparisons;  /* the endpoints' ranking: at
                                               most some 2 n log2(k) for n
                                               endpoints past a bound k */
} prof_pyroscope_info_t;


/* The PushRequest of profile p into out. 0, -ENOMEM or -EIO. */
int prof_pyroscope_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    const prof_pyroscope_conf_t *conf, prof_buffer_t *out,
    prof_pyroscope_info_t *info);


#endif /* PROF_PYROSCOPE_H */
