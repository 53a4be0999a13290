/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The aggregator's own state, shared by the files that implement
 * aggregator.h (aggregator.c: samples, labels, profiles;
 * aggregator_names.c: the names of the addresses) and by no other.
 *
 * Threading, memory: as aggregator.h.
 */

#ifndef PROF_AGGREGATOR_INTERNAL_H
#define PROF_AGGREGATOR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/intern.h"
#include "profiler/aggregator.h"


/* What the open profile sums: a stack while a request executed (and,
   on the timeline, when). */
typedef struct {
    uint32_t     stack;
    uint32_t     stall_ms;          /* sample_batch.h */
    uint64_t     tag;
    int64_t      time_ns;           /* monotonic, 0: not on the timeline */
} prof_raw_key_t;


/*
 * A request tag's labels as held until its profile closes: the endpoint
 * interned (endpoint_names), a request's name is seldom its own. A
 * fourth of prof_labels_t, held for every request a sample caught.
 */
typedef struct {
    uint64_t                 tag;
    uint64_t                 request;
    uint64_t                 span_id;
    uint64_t                 local_root_span_id;
    uint64_t                 trace_id_high;     /* 0 and 0: none */
    uint64_t                 trace_id_low;
    uint32_t                 endpoint;          /* 1 + its index, 0 none */
} prof_tag_labels_t;


struct prof_aggregator_s {
    prof_aggregator_conf_t   conf;
    prof_profile_t          *profile;           /* open */
    uint64_t                 sequence;
    int64_t                  start_monotonic_ns;

    prof_intern_t            raw_keys;          /* prof_raw_key_t */
    int64_t                 *raw_values;        /* by raw key */
    size_t                   raw_capacity;

    prof_intern_t            tags;              /* uint64_t, resolved */
    prof_tag_labels_t       *labels;            /* by tag index */
    size_t                   labels_capacity;
    prof_intern_t            endpoint_names;    /* of the labels held */

    prof_intern_t            addresses;         /* uint64_t pc */
    prof_address_t          *address_info;      /* by address index */
    size_t                   address_capacity;
    size_t                   unknown_addresses; /* in no object: JIT */

    uint64_t                 stack[PROF_MAX_FRAMES_LIMIT];
};


/* aggregator_names.c */

/* The address's name known, found now if it was not: 0, or -ENOMEM. */
int prof_aggregator_symbolize_once(prof_aggregator_t *agg, uint64_t pc);

/* Every address's name forgotten (the table emptied, its memory kept). */
void prof_aggregator_forget_addresses(prof_aggregator_t *agg);

/* Those of addresses in no object (JIT code) forgotten: how many. */
size_t prof_aggregator_forget_unknown(prof_aggregator_t *agg);

/* Names looked up again, the objects' names having changed. */
void prof_aggregator_rename(prof_aggregator_t *agg);


#endif /* PROF_AGGREGATOR_INTERNAL_H */
