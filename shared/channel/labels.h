/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Request labels: what the server resolves, off the signal path, for a
 * request a sample carried (by its tag): which request it is (the same
 * key for every tag of one request), its span ids, its endpoint. The
 * aggregator gives every sample of a request the labels of its latest
 * resolution that has span ids, so that ids known only late in a request
 * (a tracer's span) label its first samples too.
 *
 * Threading: plain data; see prof_label() (worker/profiler.h) for the way
 * from the worker's thread to the profiler loop thread.
 */

#ifndef PROF_LABELS_H
#define PROF_LABELS_H

#include <stdint.h>

#include "channel/sample.h"


typedef struct {
    uint64_t    tag;                    /* sampled_thread.h */
    uint64_t    request;                /* the request's key, nonzero */
    uint64_t    span_id;                /* 0: none */
    uint64_t    local_root_span_id;     /* 0: none (unknown) */
    uint64_t    trace_id_high;          /* 0 and 0: none */
    uint64_t    trace_id_low;
    uint32_t    endpoint_length;        /* 0: none */
    char        endpoint[PROF_ENDPOINT_MAX];
} prof_labels_t;


#endif /* PROF_LABELS_H */
