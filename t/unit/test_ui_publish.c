/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of a closed profile's record in the page's store
 * (shared/profiler/ui_publish.h): its frames named as the symbolizer
 * names them, its labels kept for the filters, and a record over its
 * bound made to fit by folding its lightest stacks, its totals kept.
 */

#include <dlfcn.h>

#include "unit.h"
#include "channel/ui_record.h"
#include "channel/ui_store.h"
#include "channel/ui_view.h"
#include "common/clock.h"
#include "profiler/ui_publish.h"


#define SPAN_ID      0x1234abcdULL
#define ENDPOINT     "GET /checkout"
#define LIGHT        40             /* stacks of 1 ms each */

static uint64_t  memory[(256 * 1024) / 8];


int __attribute__((noinline))
unit_ui_leaf(int x)
{
    volatile int  v;

    v = x;

    return v * 5 + 1;
}


int __attribute__((noinline))
unit_ui_caller(int x)
{
    volatile int  v;

    v = unit_ui_leaf(x);

    return v + 2;
}


/* A profile: 50 ms in leaf < caller for a span and endpoint, and LIGHT
   stacks of 1 ms each (distinct unknown addresses under the caller). */
static unit_agg_t *
closed_profile(void)
{
    unsigned       i;
    uint64_t       pcs[2];
    unit_agg_t    *u;
    prof_batch_t  *b;

    u = unit_agg_create(1);

    b = unit_batch(0);
    unit_batch_barrier(b, UNIT_START_REALTIME_NS, UNIT_START_MONOTONIC_NS);
    unit_consume(u, b);

    b = unit_batch(UNIT_BATCH_BYTES);
    pcs[0] = (uintptr_t) unit_ui_leaf + 2;
    pcs[1] = (uintptr_t) unit_ui_caller + 5;
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 50000000,
                   .cpu_samples = 5, .span_id = SPAN_ID,
                   .local_root_span_id = SPAN_ID }, pcs, 2, ENDPOINT);

    for (i = 0; i < LIGHT; i++) {
        pcs[0] = 0x1000 + i * 64;
        unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1000000,
                       .cpu_samples = 1 }, pcs, 2, NULL);
    }

    unit_batch_barrier(b, UNIT_START_REALTIME_NS + 1000000000,
                       UNIT_START_MONOTONIC_NS + 1000000000);
    unit_consume(u, b);

    assert_int_equal(u->nprofiles, 2);

    return u;
}


static char *
published_json(unit_agg_t *u, size_t max_bytes, prof_ui_filter_t *f,
    prof_ui_store_stats_t *st)
{
    char              *json;
    size_t             length;
    int64_t            before, after, stored;
    unsigned char     *copy;
    prof_buffer_t      out = { NULL, 0, 0 };
    prof_ui_view_t    *v;
    prof_ui_store_t   *s;

    s = prof_ui_store_init(memory, sizeof(memory));
    before = prof_clock_ns(CLOCK_REALTIME);
    assert_int_equal(prof_ui_publish(s, 77, u->profiles[1], u->agg,
                                     max_bytes), 0);
    after = prof_clock_ns(CLOCK_REALTIME);
    prof_ui_store_stats(s, st);

    assert_int_equal(prof_ui_store_copy(s, &copy, &length), 0);

    /* the record stamped as it was stored */
    assert_true(length >= sizeof(prof_ui_chunk_t) + sizeof(prof_ui_record_t));
    memcpy(&stored, copy + sizeof(prof_ui_chunk_t)
                    + offsetof(prof_ui_record_t, stored_ns), sizeof(stored));
    assert_true(stored >= before && stored <= after);

    assert_int_equal(prof_ui_view_build(&v, copy, length, f), 0);
    assert_int_equal(prof_ui_view_json(v, &out, NULL), 0);
    prof_ui_view_free(v);
    free(copy);

    json = strndup((char *) out.data, out.length);
    prof_buffer_free(&out);

    return json;
}


static void
test_record_names_frames_and_keeps_labels(void **state)
{
    char                  *json;
    unit_agg_t            *u;
    prof_ui_filter_t       f;
    prof_ui_store_stats_t  st;

    u = closed_profile();
    memset(&f, 0, sizeof(f));

    json = published_json(u, 0, &f, &st);
    assert_non_null(strstr(json, "\"unit_ui_leaf\""));
    assert_non_null(strstr(json, "\"unit_ui_caller\""));
    assert_non_null(strstr(json, "\"pid\":77"));
    assert_non_null(strstr(json, "\"endpoints\":[\"" ENDPOINT "\"]"));
    assert_non_null(strstr(json, "\"totals\":[90000000,"));
    assert_null(strstr(json, "[other stacks]"));
    free(json);

    f.has_span = 1;
    f.span_id = SPAN_ID;
    json = published_json(u, 0, &f, &st);
    assert_non_null(strstr(json, "\"totals\":[50000000,"));
    free(json);

    unit_agg_destroy(u);
}


static void
test_record_over_its_bound_folds_the_lightest_stacks(void **state)
{
    char                  *json;
    unit_agg_t            *u;
    prof_ui_filter_t       f;
    prof_ui_store_stats_t  st, full;

    u = closed_profile();
    memset(&f, 0, sizeof(f));

    json = published_json(u, 0, &f, &full);
    free(json);

    json = published_json(u, full.used / 3, &f, &st);
    assert_true(st.used <= full.used / 3 + 8);
    assert_non_null(strstr(json, "[other stacks]"));
    assert_non_null(strstr(json, "\"unit_ui_leaf\""));
    assert_non_null(strstr(json, "\"totals\":[90000000,"));
    free(json);

    unit_agg_destroy(u);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_names_frames_and_keeps_labels),
        cmocka_unit_test(test_record_over_its_bound_folds_the_lightest_stacks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
