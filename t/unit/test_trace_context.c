/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of trace context parsing (shared/worker/trace_context.h).
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "worker/trace_context.h"


static int
parse_id(const char *s, uint64_t *id)
{
    return prof_parse_id(s, strlen(s), id);
}


static int
traceparent(const char *s, uint64_t *high, uint64_t *low, uint64_t *parent)
{
    return prof_parse_traceparent(s, strlen(s), high, low, parent);
}


static void
test_ids_in_hex_and_decimal(void **state)
{
    uint64_t  id;

    assert_int_equal(parse_id("00f067aa0ba902b7", &id), 0);
    assert_true(id == 0x00f067aa0ba902b7ULL);

    assert_int_equal(parse_id("FFFFFFFFFFFFFFFF", &id), 0);
    assert_true(id == UINT64_MAX);

    /* 32 hex digits: the low 64 bits. */
    assert_int_equal(parse_id("4bf92f3577b34da6a3ce929d0e0e4736", &id), 0);
    assert_true(id == 0xa3ce929d0e0e4736ULL);

    assert_int_equal(parse_id("18446744073709551615", &id), 0);
    assert_true(id == UINT64_MAX);

    assert_int_equal(parse_id("12345", &id), 0);
    assert_true(id == 12345);
}


static void
test_invalid_ids_are_rejected(void **state)
{
    uint64_t     id;
    size_t       i;
    const char  *bad[] = {
        "", "-", "0", "0000000000000000", "18446744073709551616",
        "99999999999999999999", "12a", " 1", "1 ", "0x1f", "-1",
        "00f067aa0ba902bg", "4bf92f3577b34da6a3ce929d0e0e473",
    };

    id = 77;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_not_equal(parse_id(bad[i], &id), 0);
    }

    assert_true(id == 77);          /* untouched on failure */
}


static void
test_traceparent_gives_trace_and_parent_ids(void **state)
{
    uint64_t  high, low, parent;

    assert_int_equal(traceparent(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        &high, &low, &parent), 0);
    assert_true(high == 0x4bf92f3577b34da6ULL);
    assert_true(low == 0xa3ce929d0e0e4736ULL);
    assert_true(parent == 0x00f067aa0ba902b7ULL);

    /* A later version may carry more fields. */
    assert_int_equal(traceparent(
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        &high, &low, &parent), 0);
}


static void
test_invalid_traceparents_are_rejected(void **state)
{
    size_t       i;
    uint64_t     high, low, parent;
    const char  *bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
    };

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_not_equal(traceparent(bad[i], &high, &low, &parent), 0);
    }
}


static void
test_datadog_ids_are_decimal(void **state)
{
    uint64_t  id;

    assert_int_equal(prof_parse_datadog_id("1234567890123456789", 19, &id),
                     0);
    assert_true(id == 1234567890123456789ULL);

    assert_int_not_equal(prof_parse_datadog_id("00f067aa0ba902b7", 16, &id),
                         0);
    assert_int_not_equal(prof_parse_datadog_id("0", 1, &id), 0);
}


static void
test_lengths_are_respected(void **state)
{
    uint64_t  id;

    /* Bytes past the given length are not read. */
    assert_int_equal(prof_parse_id("123xyz", 3, &id), 0);
    assert_true(id == 123);
}


/* Every byte value at every position of a 16-digit id, both parsers. */
static void
test_every_character_at_every_position(void **state)
{
    int       c, pos, lower, any;
    char      id[17], tp[56];
    uint64_t  v, high, low, parent, want;

    for (pos = 0; pos < 16; pos++) {
        for (c = 0; c < 256; c++) {
            memcpy(id, "0123456789abcdef", 17);
            id[pos] = (char) c;

            lower = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            any = lower || (c >= 'A' && c <= 'F');

            /* The value a reference digit-by-digit conversion gives. */
            want = 0;
            for (int i = 0; i < 16; i++) {
                int  ch = (unsigned char) id[i], d;

                d = (ch >= '0' && ch <= '9') ? ch - '0'
                    : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                    : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : 0;
                want = (want << 4) | (uint64_t) d;
            }

            assert_int_equal(prof_parse_id(id, 16, &v) == 0, any);
            if (any) {
                assert_true(v == want);
            }

            /* traceparent: lowercase only, in the parent id field. */
            memcpy(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                       "0000000000000000-01", 56);
            memcpy(tp + 36, id, 16);
            assert_int_equal(prof_parse_traceparent(tp, 55, &high, &low,
                                                    &parent) == 0, lower);
            if (lower) {
                assert_true(parent == want);
            }
        }
    }
}


/* A trace id keeps both halves of 32 hex digits, the low one else. */
static void
test_trace_ids_keep_both_halves(void **state)
{
    uint64_t  high, low;

    assert_int_equal(prof_parse_trace_id("4bf92f3577b34da6a3ce929d0e0e4736",
                                         32, &high, &low), 0);
    assert_true(high == 0x4bf92f3577b34da6ULL);
    assert_true(low == 0xa3ce929d0e0e4736ULL);

    assert_int_equal(prof_parse_trace_id("00000000000000000000000000000001",
                                         32, &high, &low), 0);
    assert_true(high == 0 && low == 1);

    assert_int_equal(prof_parse_trace_id("a3ce929d0e0e4736", 16, &high,
                                         &low), 0);
    assert_true(high == 0 && low == 0xa3ce929d0e0e4736ULL);

    assert_int_equal(prof_parse_trace_id("1234", 4, &high, &low), 0);
    assert_true(high == 0 && low == 1234);

    assert_int_not_equal(prof_parse_trace_id(
        "00000000000000000000000000000000", 32, &high, &low), 0);
    assert_int_not_equal(prof_parse_trace_id(
        "4bf92f3577b34da6a3ce929d0e0e473g", 32, &high, &low), 0);
    assert_int_not_equal(prof_parse_trace_id("-", 1, &high, &low), 0);
    assert_int_not_equal(prof_parse_trace_id("", 0, &high, &low), 0);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_in_hex_and_decimal),
        cmocka_unit_test(test_invalid_ids_are_rejected),
        cmocka_unit_test(test_traceparent_gives_trace_and_parent_ids),
        cmocka_unit_test(test_invalid_traceparents_are_rejected),
        cmocka_unit_test(test_datadog_ids_are_decimal),
        cmocka_unit_test(test_lengths_are_respected),
        cmocka_unit_test(test_every_character_at_every_position),
        cmocka_unit_test(test_trace_ids_keep_both_halves),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
