/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Helpers shared by the unit tests of the aggregator and the pprof encoder:
 * batches built by hand in the layout of profiler/sample_batch.h, and an
 * aggregator whose closed profiles are collected for the test to
 * inspect.
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

#include "profiler/aggregator.h"
#include "channel/labels.h"
#include "common/diagnostics.h"
#include "channel/sample.h"
#include "profiler/sample_batch.h"
#include "profiler/symbolizer.h"


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
 * A sample as the tests write it: values, and the labels its request
 * resolves to (channel/sampled_thread.h: a tag in the sample, the labels
 * apart).
 */
typedef struct {
    int64_t       cpu_ns;
    int64_t       wall_ns;
    int64_t       off_cpu_ns;
    uint64_t      span_id;
    uint64_t      local_root_span_id;
    uint32_t      cpu_samples;
    uint32_t      wall_samples;
    uint64_t      request;          /* a tag of the test's: no labels */
} unit_sample_t;


/* Labels of the samples added, given to the aggregator by unit_consume. */
#define UNIT_LABELS_MAX  256

static prof_labels_t  unit_labels[UNIT_LABELS_MAX];
static unsigned       unit_label_count;
static uint64_t       unit_last_tag;


/*
 * Appends a sample: the values of *values, then the frames; a sample with
 * ids or an endpoint (NULL: none) gets a tag of its own and the labels.
 */

static inline void
unit_batch_add(prof_batch_t *b, const unit_sample_t *values,
    const uint64_t *frames, unsigned frame_count, const char *endpoint)
{
    size_t          size;
    prof_labels_t  *l;
    prof_sample_t   header;
    unsigned char  *p;

    size = prof_sample_size(frame_count);
    assert_true(b->used + size <= b->capacity);

    memset(&header, 0, sizeof(header));
    header.cpu_ns = values->cpu_ns;
    header.wall_ns = values->wall_ns;
    header.off_cpu_ns = values->off_cpu_ns;
    header.cpu_samples = values->cpu_samples;
    header.wall_samples = values->wall_samples;
    header.frame_count = frame_count;
    header.request = values->request;

    if (values->request == 0 && (values->span_id != 0 || endpoint != NULL)) {
        assert_true(unit_label_count < UNIT_LABELS_MAX);
        l = &unit_labels[unit_label_count++];
        memset(l, 0, sizeof(prof_labels_t));
        l->tag = ++unit_last_tag;
        l->request = l->tag;
        l->span_id = values->span_id;
        l->local_root_span_id = values->local_root_span_id;
        if (endpoint != NULL) {
            l->endpoint_length = strlen(endpoint);
            assert_true(l->endpoint_length <= PROF_ENDPOINT_MAX);
            memcpy(l->endpoint, endpoint, l->endpoint_length);
        }
        header.request = l->tag;
    }

    p = b->data + b->used;
    memset(p, 0, size);
    memcpy(p, &header, sizeof(header));
    memcpy(p + sizeof(header), frames, frame_count * sizeof(uint64_t));

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
    b->flush_last_tag = UINT64_MAX;
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


/* Consumes a batch that must succeed (labels first), and frees it. */

static inline void
unit_consume(unit_agg_t *u, prof_batch_t *b)
{
    unsigned  i;

    for (i = 0; i < unit_label_count; i++) {
        assert_int_equal(prof_aggregator_add_labels(u->agg, &unit_labels[i]),
                         0);
    }
    unit_label_count = 0;

    assert_int_equal(prof_aggregator_consume(u->agg, b, NULL), 0);
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
