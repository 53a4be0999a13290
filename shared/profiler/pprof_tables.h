/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The tables of a pprof profile, built before it is written: strings
 * (valid UTF-8, interned), mappings, locations and functions, the
 * location ids of every stack (encoded once), and the labels every sample
 * has.
 *
 * For the pprof encoder. Threading: the profiler loop thread (it reads
 * the aggregator's address cache). Memory: the tables own what they hold
 * until prof_pprof_tables_free(); they point into the profile and the
 * aggregator's address cache, which must outlive them.
 */

#ifndef PROF_PPROF_TABLES_H
#define PROF_PPROF_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/intern.h"
#include "profiler/aggregator.h"
#include "profiler/pprof.h"


typedef struct {
    uint64_t   mapping_id;      /* 0: none */
    uint64_t   function_id;     /* 0: none */
    uint64_t   address;         /* ELF virtual address when mapped */
    const prof_address_t  *symbol;  /* its line and inlined functions,
                                       with a function */
} prof_pprof_location_t;


typedef struct {
    int64_t    filename;        /* string indices */
    int64_t    build_id;
    size_t     unnamed;         /* locations without a function */
} prof_pprof_mapping_t;


typedef struct {
    uint64_t   pc;
    uint64_t   index;           /* location index + 1, 0: empty */
} prof_pprof_cached_t;


typedef struct {
    int64_t    name;            /* string indices */
    int64_t    filename;        /* 0: none */
    int64_t    start_line;      /* 0: unknown */
} prof_pprof_function_t;


typedef struct {
    const prof_profile_t    *profile;
    prof_aggregator_t       *agg;
    prof_pprof_info_t        info;
    int                      bare;              /* only the strings the
                                                   stacks name: no value
                                                   types, label keys,
                                                   thread labels, endpoints
                                                   or build ids (another
                                                   encoding's tables) */

    prof_intern_t            strings;           /* the string table */
    int64_t                  value_type[PROF_VALUE_COUNT][2];
    int64_t                  label_root_span_id;
    int64_t                  label_span_id;
    int64_t                  label_endpoint;
    int64_t                  label_end_timestamp;
    int64_t                  label_stall;

    prof_intern_t            locations;         /* uint64_t pc */
    prof_pprof_location_t   *location;          /* by location index */
    prof_intern_t            functions;         /* prof_pprof_function_t */
    prof_intern_t            mappings;          /* const prof_object_t * */
    prof_pprof_mapping_t    *mapping;           /* by mapping index */
    prof_pprof_cached_t     *pc_cache;          /* a power of two */
    unsigned                 pc_cache_shift;    /* 64 - log2(its size) */

    /* every stack's location ids, encoded (packed varints) */
    prof_buffer_t            stack_ids;
    size_t                  *stack_offset;      /* by stack index, then
                                                   the end */
    int64_t                 *endpoint_string;   /* by endpoint index */

    /* the labels every sample has (thread id and name), encoded */
    unsigned char            thread_labels[2 * 40];
    size_t                   thread_labels_length;

    prof_buffer_t            sanitized;         /* a string being fixed */
} prof_pprof_tables_t;


/* Tables of profile p, empty, on zeroed memory (bare may be set then). */
void prof_pprof_tables_init(prof_pprof_tables_t *t, const prof_profile_t *p,
    prof_aggregator_t *agg);

/*
 * Builds the tables of the profile: its value types and label keys, its
 * endpoints, and every stack's locations (with their mappings and
 * functions). 0 or -ENOMEM. info then says what the locations are.
 */
int prof_pprof_tables_build(prof_pprof_tables_t *t);

/*
 * The id of the function named name (interned now if new: met when the
 * locations are written, the functions inlined in them), or -ENOMEM.
 */
int64_t prof_pprof_tables_function(prof_pprof_tables_t *t,
    const char *name);

/* The index of a string (valid UTF-8 made of it), interned now if new:
   before the string table is written. -ENOMEM. */
int64_t prof_pprof_tables_string(prof_pprof_tables_t *t, const char *s,
    size_t length);

void prof_pprof_tables_free(prof_pprof_tables_t *t);


#endif /* PROF_PPROF_TABLES_H */
