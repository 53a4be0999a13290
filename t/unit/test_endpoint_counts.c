/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the endpoint counts (shared/endpoint_counts.h): a bounded
 * table, whatever the number of distinct endpoints a server sees.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "endpoint_counts.h"


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


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_endpoints_are_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
