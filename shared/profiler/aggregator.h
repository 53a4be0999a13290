/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Aggregator: turns the ordered stream of sample batches into profiles.
 * Stacks are deduplicated, values summed per (stack, request tag),
 * addresses symbolized once, when first seen; a flush barrier closes the
 * current profile exactly between two samples and starts the next one.
 * At the close, each request tag becomes the labels the server resolved
 * for it, or, when those have no ids, the request's latest that have
 * some (labels.h); values are summed per (stack, labels).
 *
 * Bounds: addresses in no loaded object (JIT code, which makes new ones
 * for as long as it compiles) are forgotten once their profile is closed
 * and encoded; the address cache is emptied after a profile is closed
 * once it holds PROF_ADDRESSES_MAX addresses;
 * at most PROF_LABELS_MAX resolutions wait for their profile. What these
 * bounds drop is counted (addresses_evicted, labels_dropped).
 *
 * Threading: the profiler loop thread only (it owns the symbolizer).
 * Memory: the aggregator owns the open profile and the address cache;
 * a closed profile handed to on_profile belongs to the callee, which frees
 * it with prof_profile_free(). A pointer to address information stays
 * valid until on_profile returns.
 */

#ifndef PROF_AGGREGATOR_H
#define PROF_AGGREGATOR_H

#include <stdint.h>

#include "common/diagnostics.h"
#include "channel/endpoint_counts.h"
#include "common/intern.h"
#include "channel/labels.h"
#include "channel/sample.h"
#include "profiler/sample_batch.h"
#include "profiler/symbolizer.h"


#define PROF_ADDRESSES_MAX   (64 * 1024)
#define PROF_LABELS_MAX      (64 * 1024)


enum {
    PROF_VALUE_CPU_TIME = 0,
    PROF_VALUE_CPU_SAMPLES,
    PROF_VALUE_WALL_TIME,
    PROF_VALUE_WALL_SAMPLES,
    PROF_VALUE_OFF_CPU_TIME,
    PROF_VALUE_COUNT
};


typedef struct {
    uint32_t     stack;             /* index in profile->stacks */
    uint32_t     endpoint;          /* index in profile->endpoints + 1,
                                       0: none */
    uint64_t     span_id;           /* 0: no request */
    uint64_t     local_root_span_id;
    uint64_t     trace_id_high;     /* 0 and 0: none */
    uint64_t     trace_id_low;
    int64_t      end_timestamp_ns;  /* unix ns, 0: not on the timeline */
    uint32_t     stall_ms;          /* taken this far into a stall of the
                                       server's loop, 0: not in one */
    uint32_t     pad;
} prof_sample_key_t;


typedef struct {
    uint64_t     sequence;          /* 0, 1, ... per process */
    int64_t      start_realtime_ns;
    int64_t      duration_ns;
    int64_t      period_ns;
    int64_t      thread_id;
    const char  *thread_name;
    uint64_t     sample_count;      /* raw samples added */
    prof_intern_t  stacks;          /* uint64_t pcs, leaf first; callers
                                       already moved back into the call */
    prof_intern_t  keys;            /* prof_sample_key_t */
    prof_intern_t  endpoints;       /* endpoint names */
    int64_t     *values;            /* keys.count * PROF_VALUE_COUNT */
    size_t       values_capacity;   /* in keys */
    prof_endpoint_counts_t  *endpoint_counts;   /* NULL: none */
} prof_profile_t;


typedef struct {
    const prof_object_t  *object;   /* NULL: not mapped (or a marker) */
    const char           *function; /* NULL: no symbol */
    uint32_t              line;     /* in function, 0: unknown */
    uint32_t              ninlines;
    prof_inline_t        *inlines;  /* the functions inlined there,
                                       innermost first (symbolizer.h),
                                       their names after them */
    const char           *file;     /* a Lua function's chunk, else NULL */
    int64_t               start_line;   /* a Lua function's first line */
    char                 *owned;    /* a Lua function's name and chunk */
} prof_address_t;


typedef struct prof_aggregator_s  prof_aggregator_t;

typedef void (*prof_profile_handler_pt)(void *data, prof_profile_t *p);


typedef struct {
    prof_symbolizer_t       *symbolizer;
    prof_diagnostics_t      *diagnostics;
    int64_t                 *naming_since;  /* this thread's CPU when the
                                               naming under way began, -1:
                                               none (atomic); NULL: not
                                               told */
    int64_t                  period_ns;     /* sampling interval */
    int64_t                  thread_id;
    const char              *thread_name;
    const struct prof_lua_s *lua;           /* names of Lua frames
                                               (lua_frames.h), NULL: none */
    int64_t                  start_realtime_ns;
    int64_t                  start_monotonic_ns;
    int                      timeline;      /* a sample per timestamp */
    prof_profile_handler_pt  on_profile;
    void                    *on_profile_data;
} prof_aggregator_conf_t;


prof_aggregator_t *prof_aggregator_create(const prof_aggregator_conf_t *conf);
void prof_aggregator_destroy(prof_aggregator_t *agg);

/* Room for the values of keys (zeroed, PROF_VALUE_COUNT each) in *values
   of *capacity keys, grown by doubling: 0, or -ENOMEM. */
int prof_aggregator_reserve_values(int64_t **values, size_t *capacity,
    size_t keys);

/*
 * Adds the samples of a batch; when the batch carries a flush barrier,
 * closes the profile and passes it to on_profile (with the barrier's
 * endpoint counts: counts, may be NULL, taken). 0 or -ENOMEM (samples
 * that did not fit are counted as dropped).
 */
int prof_aggregator_consume(prof_aggregator_t *agg, const prof_batch_t *b,
    prof_endpoint_counts_t *counts);

/*
 * The bytes its tables hold (allocated): the open profile's stacks, keys
 * and values, the samples and labels awaiting its close, and the names
 * of the addresses known.
 */
size_t prof_aggregator_bytes(const prof_aggregator_t *agg);

/* The labels of a request tag, for the profile its samples are in. */
int prof_aggregator_add_labels(prof_aggregator_t *agg,
    const prof_labels_t *labels);

/* What is known of an address seen in a profile's stacks: from
   on_profile, for the profile being closed; valid until on_profile
   returns (the address cache may be dropped right after, within the
   same consume). */
const prof_address_t *prof_aggregator_address(prof_aggregator_t *agg,
    uint64_t pc);

/* What is known of any address (a caller's already moved back into its
   call), found now if it was not; NULL: out of memory. */
const prof_address_t *prof_aggregator_name(prof_aggregator_t *agg,
    uint64_t pc);

void prof_profile_free(prof_profile_t *p);


#endif /* PROF_AGGREGATOR_H */
