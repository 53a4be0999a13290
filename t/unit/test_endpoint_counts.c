/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the endpoint counts (shared/channel/endpoint_counts.h): bounded
 * tables, whatever the number of distinct endpoints a server sees, and the
 * shared tables a worker counts into and its profiler process takes.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "channel/channel.h"
#include "channel/endpoint_counts.h"


static void
test_distinct_endpoints_are_bounded(void **state)
{
    int                      i, n;
    char                     name[64];
    prof_endpoint_counts_t  *c;

    c = prof_endpoint_counts_create();
    assert_non_null(c);

    for (i = 0; i < PROF_ENDPOINT_COUNTS_MAX + 1000; i++) {
        n = snprintf(name, sizeof(name), "GET /item/%d", i);
        assert_int_equal(prof_endpoint_counts_add(c, name, n), 0);
    }

    /* A known endpoint is still counted once the table is full. */
    assert_int_equal(prof_endpoint_counts_add(c, "GET /item/7", 11), 0);

    assert_int_equal(prof_endpoint_counts_size(c), PROF_ENDPOINT_COUNTS_MAX);
    assert_int_equal(c->dropped, 1000);
    assert_int_equal(c->requests, PROF_ENDPOINT_COUNTS_MAX + 1001);
    assert_string_equal(prof_endpoint_counts_name(c, 7), "GET /item/7");
    assert_int_equal(c->counts[7], 2);

    prof_endpoint_counts_free(c);
}


/* The count of name in c, 0 when absent. */
static uint64_t
count_of(prof_endpoint_counts_t *c, const char *name)
{
    size_t  i;

    for (i = 0; i < prof_endpoint_counts_size(c); i++) {
        if (strcmp(prof_endpoint_counts_name(c, i), name) == 0) {
            return c->counts[i];
        }
    }

    return 0;
}


/*
 * A worker counts "method uri" where they lie; the profiler side takes
 * the period's table into counts: the same names and numbers, the split
 * between the two parts irrelevant to the name, a cut at
 * PROF_ENDPOINT_MAX.
 */
static void
test_shared_table_counts_in_place(void **state)
{
    int                      i;
    char                     uri[400];
    size_t                   n, longest;
    prof_channel_t          *ch;
    prof_endpoint_table_t   *t;
    prof_endpoint_counts_t  *c;

    ch = prof_channel_create();
    assert_non_null(ch);
    t = &ch->endpoints[0];

    for (i = 0; i < 5; i++) {
        prof_endpoint_table_count(t, 0, "GET", 3, "/a", 2);
    }
    /* Known by a seed: a slot of its own, the same name. */
    prof_endpoint_table_count(t, 2, "GET", 3, "/a", 2);
    prof_endpoint_table_count(t, 2, "GET", 3, "/a", 2);
    prof_endpoint_table_count(t, 0, "POST", 4, "/a", 2);
    prof_endpoint_table_count(t, 0, NULL, 0, "custom name", 11);
    /* Lengths of every tail (1 to 7 bytes past the words). */
    for (i = 1; i <= 15; i++) {
        prof_endpoint_table_count(t, 0, "GET", 3, "/abcdefghijklmno", i);
        prof_endpoint_table_count(t, 0, "GET", 3, "/abcdefghijklmno", i);
    }
    memset(uri, 'x', sizeof(uri));
    uri[0] = '/';
    prof_endpoint_table_count(t, 0, "GET", 3, uri, sizeof(uri));

    c = prof_endpoint_counts_create();
    assert_non_null(c);
    assert_int_equal(prof_endpoint_table_take(t, 0, c), 0);

    assert_int_equal(count_of(c, "GET /a"), 5 + 2 + 2);   /* i == 2 too */
    assert_int_equal(count_of(c, "POST /a"), 1);
    assert_int_equal(count_of(c, "custom name"), 1);
    assert_int_equal(count_of(c, "GET /abcdefg"), 2);
    assert_int_equal(count_of(c, "GET /"), 2);
    assert_int_equal(prof_endpoint_counts_size(c), 3 + 14 + 1);
    longest = 0;
    for (i = 0; i < (int) prof_endpoint_counts_size(c); i++) {
        n = strlen(prof_endpoint_counts_name(c, i));
        longest = (n > longest) ? n : longest;
    }
    assert_int_equal(longest, PROF_ENDPOINT_MAX);
    assert_int_equal(c->requests, 5 + 2 + 1 + 1 + 30 + 1);
    assert_int_equal(c->dropped, 0);

    /* Given back, empty, for the period after next; not for period 0. */
    assert_int_equal(t->period, 2);
    assert_int_equal(t->used, 0);
    assert_int_equal(prof_endpoint_table_take(t, 0, c), -1);

    prof_endpoint_counts_free(c);
    prof_channel_free(ch);
}


/* Past PROF_ENDPOINT_COUNTS_MAX names, new ones are counted as dropped
   (known ones still count), and the table never fills its slots. */
static void
test_shared_table_is_bounded(void **state)
{
    int                      i, n;
    char                     name[64];
    prof_channel_t          *ch;
    prof_endpoint_table_t   *t;
    prof_endpoint_counts_t  *c;

    ch = prof_channel_create();
    assert_non_null(ch);
    t = &ch->endpoints[1];

    for (i = 0; i < PROF_ENDPOINT_COUNTS_MAX + 1000; i++) {
        n = snprintf(name, sizeof(name), "/item/%d", i);
        prof_endpoint_table_count(t, 0, "GET", 3, name, n);
    }
    prof_endpoint_table_count(t, 0, "GET", 3, "/item/7", 7);

    assert_int_equal(t->used, PROF_ENDPOINT_COUNTS_MAX);
    assert_int_equal(t->dropped, 1000);

    c = prof_endpoint_counts_create();
    assert_non_null(c);
    assert_int_equal(prof_endpoint_table_take(t, 1, c), 0);
    assert_int_equal(count_of(c, "GET /item/7"), 2);
    assert_int_equal(c->dropped, 1000);
    assert_int_equal(c->requests, PROF_ENDPOINT_COUNTS_MAX + 1001);
    assert_int_equal(t->period, 3);

    prof_endpoint_counts_free(c);
    prof_channel_free(ch);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_endpoints_are_bounded),
        cmocka_unit_test(test_shared_table_counts_in_place),
        cmocka_unit_test(test_shared_table_is_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
