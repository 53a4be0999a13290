/*
 * Tests of the intake documents (shared/intake.h): tags, event.json,
 * code-provenance.json, runtime id, timestamps; and JSON escaping
 * (shared/buffer.h).
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buffer.h"
#include "intake.h"


static const char  *user_tags[] = { "team:edge", "a:b,c", "k,x:v", "bad" };


static void
init_conf(prof_intake_conf_t *c)
{
    memset(c, 0, sizeof(*c));
    c->service = "web";
    c->env = "prod";
    c->version = "";
    c->host = "h1";
    c->runtime_version = "1.22.1";
    c->runtime_id = "0d9b2f3e-0000-4000-8000-000000000001";
    c->profiler_version = "0.1.0";
    c->user_tags = user_tags;
    c->user_tag_count = 4;
    c->pid = 4242;
}


static void
test_tags_are_sanitized_and_never_empty(void **state)
{
    prof_buffer_t       b = { NULL, 0, 0 };
    prof_intake_conf_t  c;

    init_conf(&c);
    c.service = "my,svc ";

    assert_int_equal(prof_intake_tags(&b, &c, 7), 0);
    assert_string_equal((char *) b.data,
        "service:my_svc,env:prod,host:h1,language:native,runtime:nginx,"
        "runtime_version:1.22.1,"
        "runtime-id:0d9b2f3e-0000-4000-8000-000000000001,process_id:4242,"
        "profiler_version:0.1.0,profile_seq:7,team:edge,a:b_c,k_x:v");

    prof_buffer_free(&b);
}


static void
test_json_strings_are_escaped(void **state)
{
    prof_buffer_t  b = { NULL, 0, 0 };

    assert_int_equal(prof_buffer_append_json(&b, "a\"b\\c\n\x01/", 8), 0);
    assert_string_equal((char *) b.data, "\"a\\\"b\\\\c\\u000a\\u0001/\"");

    prof_buffer_free(&b);
}


static void
test_event_json_has_every_field(void **state)
{
    const char             *endpoints[] = { "GET /a\"b" };
    const uint64_t          counts[] = { 12 };
    const char             *attachments[] = { "profile.pprof" };
    prof_buffer_t           b = { NULL, 0, 0 };
    prof_intake_conf_t      c;
    prof_intake_profile_t   p;

    init_conf(&c);
    memset(&p, 0, sizeof(p));
    p.sequence = 3;
    p.start_realtime_ns = 1795298400123456789LL;     /* 2026-11-21 */
    p.duration_ns = 60000000000LL;
    p.endpoints = endpoints;
    p.endpoint_counts = counts;
    p.endpoint_count = 1;

    assert_int_equal(prof_intake_event_json(&b, &c, &p, attachments, 1), 0);

    assert_non_null(strstr((char *) b.data,
                           "{\"attachments\":[\"profile.pprof\"],"));
    assert_non_null(strstr((char *) b.data, "\"tags_profiler\":\"service:web,"));
    assert_non_null(strstr((char *) b.data, "profile_seq:3,"));
    assert_non_null(strstr((char *) b.data,
                           "\"start\":\"2026-11-21T22:00:00.123456789Z\""));
    assert_non_null(strstr((char *) b.data,
                           "\"end\":\"2026-11-21T22:01:00.123456789Z\""));
    assert_non_null(strstr((char *) b.data, "\"family\":\"native\""));
    assert_non_null(strstr((char *) b.data, "\"version\":\"4\""));
    assert_non_null(strstr((char *) b.data,
                           "\"endpoint_counts\":{\"GET /a\\\"b\":12}"));
    assert_non_null(strstr((char *) b.data, "\"internal\":{}"));
    assert_non_null(strstr((char *) b.data, "\"info\":{"));

    prof_buffer_free(&b);
}


static void
test_no_endpoints_is_null(void **state)
{
    prof_buffer_t           b = { NULL, 0, 0 };
    prof_intake_conf_t      c;
    prof_intake_profile_t   p;

    init_conf(&c);
    memset(&p, 0, sizeof(p));

    assert_int_equal(prof_intake_event_json(&b, &c, &p, NULL, 0), 0);
    assert_non_null(strstr((char *) b.data, "\"endpoint_counts\":null"));

    prof_buffer_free(&b);
}


static void
test_uuid_is_random_version_4(void **state)
{
    char  a[37], b[37];

    assert_int_equal(prof_intake_uuid(a), 0);
    assert_int_equal(prof_intake_uuid(b), 0);

    assert_int_equal(strlen(a), 36);
    assert_int_equal(a[8], '-');
    assert_int_equal(a[14], '4');
    assert_true(strchr("89ab", a[19]) != NULL);
    assert_string_not_equal(a, b);
}


static void
test_provenance_names_the_package(void **state)
{
    prof_buffer_t         b = { NULL, 0, 0 };
    prof_object_t         libc, mine;
    const prof_object_t  *objects[2];

    memset(&libc, 0, sizeof(libc));
    libc.path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    libc.build_id = "abcd";
    memset(&mine, 0, sizeof(mine));
    mine.path = "/nonexistent/libmine.so";
    mine.build_id = "";
    objects[0] = &libc;
    objects[1] = &mine;

    assert_int_equal(prof_intake_provenance_json(&b, objects, 2), 0);

    /* dpkg lists libc as /lib/...: the merged /usr path must match. */
    assert_non_null(strstr((char *) b.data,
        "{\"v1\":[{\"name\":\"libc6\",\"kind\":\"library\",\"paths\":"
        "[\"/usr/lib/x86_64-linux-gnu/libc.so.6\"],\"build_id\":\"abcd\","
        "\"version\":\""));
    assert_null(strstr((char *) b.data, "\"libc6\",\"kind\":\"library\","
                       "\"paths\":[\"/usr/lib/x86_64-linux-gnu/libc.so.6\"],"
                       "\"build_id\":\"abcd\",\"version\":\"\""));
    assert_non_null(strstr((char *) b.data,
        "{\"name\":\"libmine.so\",\"kind\":\"library\",\"paths\":"
        "[\"/nonexistent/libmine.so\"],\"build_id\":\"\",\"version\":\"\"}"));

    prof_buffer_free(&b);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tags_are_sanitized_and_never_empty),
        cmocka_unit_test(test_json_strings_are_escaped),
        cmocka_unit_test(test_event_json_has_every_field),
        cmocka_unit_test(test_no_endpoints_is_null),
        cmocka_unit_test(test_uuid_is_random_version_4),
        cmocka_unit_test(test_provenance_names_the_package),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
