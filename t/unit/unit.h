/*
 * Helpers shared by the unit tests of the aggregator and the pprof encoder:
 * batches built by hand in the layout of sample.h, and an aggregator whose
 * closed profiles are collected for the test to inspect.
 */

#ifndef UNIT_H
#define UNIT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>

#include <cmocka.h>

#include "aggregator.h"
#include "diagnostics.h"
#include "sample.h"
#include "symbolizer.h"


#define UNIT_PERIOD_NS           10000000
#define UNIT_THREAD_ID           4242
#define UNIT_THREAD_NAME         "nginx: worker process"
#define UNIT_START_REALTIME_NS   1700000000000000000LL
#define UNIT_START_MONOTONIC_NS  5000000000LL
#define UNIT_BATCH_BYTES         16384
#define UNIT_PROFILES_MAX        8


typedef struct {
    prof_diagnostics_t   diag;
    prof_symbolizer_t   *sym;           /* NULL: addresses stay unknown */
    prof_aggregator_t   *agg;
    prof_profile_t      *profiles[UNIT_PROFILES_MAX];  /* closed, in order */
    unsigned             nprofiles;
} unit_agg_t;


/* An empty batch with room for capacity bytes of samples. */

static inline prof_batch_t *
unit_batch(size_t capacity)
{
    prof_batch_t  *b;

    b = calloc(1, sizeof(prof_batch_t) + capacity);
    assert_non_null(b);

    b->capacity = capacity;

    return b;
}


/*
 * Appends a sample: the values and request ids of *values, then the frames
 * and the endpoint (NULL: none), padded to 8 bytes as prof_sample_size()
 * says.
 */

static inline void
unit_batch_add(prof_batch_t *b, const prof_sample_t *values,
    const uint64_t *frames, unsigned frame_count, const char *endpoint)
{
    size_t          endpoint_length, size;
    prof_sample_t   header;
    unsigned char  *p;

    endpoint_length = endpoint ? strlen(endpoint) : 0;
    size = prof_sample_size(frame_count, endpoint_length);
    assert_true(b->used + size <= b->capacity);

    header = *values;
    header.frame_count = frame_count;
    header.endpoint_length = endpoint_length;

    p = b->data + b->used;
    memset(p, 0, size);
    memcpy(p, &header, sizeof(header));
    memcpy(p + sizeof(header), frames, frame_count * sizeof(uint64_t));

    if (endpoint_length > 0) {
        memcpy(p + sizeof(header) + frame_count * sizeof(uint64_t), endpoint,
               endpoint_length);
    }

    b->used += size;
    b->sample_count++;
}


static inline void
unit_batch_barrier(prof_batch_t *b, int64_t realtime_ns,
    int64_t monotonic_ns)
{
    b->flush_after = 1;
    b->flush_realtime_ns = realtime_ns;
    b->flush_monotonic_ns = monotonic_ns;
}


static inline void
unit_collect_profile(void *data, prof_profile_t *p)
{
    unit_agg_t  *u = data;

    assert_true(u->nprofiles < UNIT_PROFILES_MAX);
    u->profiles[u->nprofiles++] = p;
}


/* An aggregator with the UNIT_ configuration; symbolized when asked. */

static inline unit_agg_t *
unit_agg_create(int symbolize)
{
    unit_agg_t              *u;
    prof_aggregator_conf_t   conf;

    u = calloc(1, sizeof(unit_agg_t));
    assert_non_null(u);

    if (symbolize) {
        u->sym = prof_symbolizer_create();
        assert_non_null(u->sym);
    }

    memset(&conf, 0, sizeof(conf));
    conf.symbolizer = u->sym;
    conf.diagnostics = &u->diag;
    conf.period_ns = UNIT_PERIOD_NS;
    conf.thread_id = UNIT_THREAD_ID;
    conf.thread_name = UNIT_THREAD_NAME;
    conf.start_realtime_ns = UNIT_START_REALTIME_NS;
    conf.start_monotonic_ns = UNIT_START_MONOTONIC_NS;
    conf.on_profile = unit_collect_profile;
    conf.on_profile_data = u;

    u->agg = prof_aggregator_create(&conf);
    assert_non_null(u->agg);

    return u;
}


static inline void
unit_agg_destroy(unit_agg_t *u)
{
    unsigned  i;

    if (u == NULL) {
        return;
    }

    for (i = 0; i < u->nprofiles; i++) {
        prof_profile_free(u->profiles[i]);
    }

    prof_aggregator_destroy(u->agg);
    prof_symbolizer_destroy(u->sym);
    free(u);
}


/* Consumes a batch that must succeed, and frees it. */

static inline void
unit_consume(unit_agg_t *u, prof_batch_t *b)
{
    assert_int_equal(prof_aggregator_consume(u->agg, b), 0);
    free(b);
}


/*
 * Closes the open profile with a barrier-only batch (as the queue's
 * prof_queue_acquire_barrier() makes them) and returns it.
 */

static inline prof_profile_t *
unit_flush(unit_agg_t *u, int64_t realtime_ns, int64_t monotonic_ns)
{
    unsigned       n;
    prof_batch_t  *b;

    n = u->nprofiles;

    b = unit_batch(0);
    unit_batch_barrier(b, realtime_ns, monotonic_ns);
    unit_consume(u, b);

    assert_int_equal(u->nprofiles, n + 1);

    return u->profiles[n];
}


#endif /* UNIT_H */
