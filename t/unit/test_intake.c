/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the intake documents (shared/profiler/intake.h): tags, event.json,
 * code-provenance.json, runtime id, timestamps; and JSON escaping
 * (shared/common/buffer.h). Documents made from invalid UTF-8 are read back by
 * Python: decode("utf-8", "strict"), then json.loads.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "common/buffer.h"
#include "profiler/intake.h"
#include "common/utf8.h"


#define FFFD  "\xef\xbf\xbd"


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
        "runtime_version:1.22.1,format:pprof,"
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
    assert_non_null(strstr((char *) b.data,
                           "\"tags_profiler\":\"service:web,"));
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


/*
 * Reads a document as the intake would: strict UTF-8, then JSON; prints
 * json.dumps(expr) with ASCII escapes and sorted keys, where expr is a
 * Python expression of the document d, into out. The exit status.
 */

static const char  *python_read =
    "import sys, json\n"
    "d = json.loads(open(sys.argv[1], 'rb').read().decode('utf-8',"
    " 'strict'))\n"
    "print(json.dumps(eval(sys.argv[2]), sort_keys=True), end='')\n";


static int
python_reads(const prof_buffer_t *doc, const char *expr, char *out,
    size_t size)
{
    int     fd, status;
    FILE   *f;
    char    path[] = "/tmp/test-intake-XXXXXX";
    char    script[] = "/tmp/test-intake-py-XXXXXX";
    char    cmd[256];
    size_t  n;

    fd = mkstemp(path);
    assert_true(fd != -1);
    assert_int_equal(write(fd, doc->data, doc->length), doc->length);
    assert_int_equal(close(fd), 0);

    fd = mkstemp(script);
    assert_true(fd != -1);
    assert_int_equal(write(fd, python_read, strlen(python_read)),
                     strlen(python_read));
    assert_int_equal(close(fd), 0);

    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' \"%s\"", script, path,
             expr);

    f = popen(cmd, "r");
    assert_non_null(f);
    n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    status = pclose(f);

    unlink(path);
    unlink(script);

    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}


static void
test_tags_are_valid_utf8(void **state)
{
    char                out[1024];
    prof_buffer_t       b = { NULL, 0, 0 }, doc = { NULL, 0, 0 };
    prof_intake_conf_t  c;
    const char         *tags[] = {
        "path:/\xff\xfe/a", "cut:caf\xc3", "ctl:a\x01\x1f\x7f" "b",
        "k\xc0\x80y:v\xed\xa0\x80", "ok:caf\xc3\xa9"
    };

    init_conf(&c);
    c.service = "web\xff";
    c.env = "pr\xc3";
    c.version = "1.0\xf4\x90\x80\x80";
    c.user_tags = tags;
    c.user_tag_count = 5;

    assert_int_equal(prof_intake_tags(&b, &c, 7), 0);
    assert_string_equal((char *) b.data,
        "service:web" FFFD ",env:pr" FFFD ",version:1.0" FFFD FFFD FFFD
        FFFD ",host:h1,language:native,runtime:nginx,"
        "runtime_version:1.22.1,format:pprof,"
        "runtime-id:0d9b2f3e-0000-4000-8000-000000000001,process_id:4242,"
        "profiler_version:0.1.0,profile_seq:7,path:/" FFFD FFFD "/a,"
        "cut:caf" FFFD ",ctl:a___b,k" FFFD FFFD "y:v" FFFD FFFD FFFD ","
        "ok:caf\xc3\xa9");

    /* and in event.json, read back strictly */

    assert_int_equal(prof_utf8_append_json(&doc, (char *) b.data, b.length),
                     0);
    assert_int_equal(python_reads(&doc, "d.split(',')[0]", out, sizeof(out)),
                     0);
    assert_string_equal(out, "\"service:web\\ufffd\"");

    prof_buffer_free(&doc);
    prof_buffer_free(&b);
}


static void
test_event_json_is_valid_utf8_json(void **state)
{
    char                   *big, out[4096];
    size_t                  i;
    const char             *endpoints[6];
    const uint64_t          counts[] = { 1, 2, 3, 4, 5, 6 };
    prof_buffer_t           b = { NULL, 0, 0 };
    prof_intake_conf_t      c;
    prof_intake_profile_t   p;

    /* the three URI shapes, two names that read the same, controls, a
       64 KiB name */

    big = malloc(64 * 1024 + 1);
    assert_non_null(big);
    for (i = 0; i < 64 * 1024; i++) {
        big[i] = (i % 1000 == 999) ? '\xfe' : 'a';
    }
    big[i] = '\0';

    endpoints[0] = "GET /\xff\xfe/a";
    endpoints[1] = "GET /caf\xc3";
    endpoints[2] = "GET /\xff\xfe";
    endpoints[3] = "GET /\xfe\xff";
    endpoints[4] = "GET /\x01\x1f\"\\\x7f";
    endpoints[5] = big;

    init_conf(&c);
    c.service = "svc\xc3\x28";
    c.host = "h\x80";
    c.runtime_version = "1.22\xe0\x80\x80";
    memset(&p, 0, sizeof(p));
    p.endpoints = endpoints;
    p.endpoint_counts = counts;
    p.endpoint_count = 6;

    assert_int_equal(prof_intake_event_json(&b, &c, &p, NULL, 0), 0);

    assert_int_equal(python_reads(&b, "[(k[:40], len(k), v) for k, v in"
                                  " sorted(d['endpoint_counts'].items())]",
                                  out, sizeof(out)), 0);
    assert_string_equal(out,
        "[[\"GET /\\u0001\\u001f\\\"\\\\\\u007f\", 10, 5], "
        "[\"GET /caf\\ufffd\", 9, 2], "
        "[\"GET /\\ufffd\\ufffd\", 7, 7], "
        "[\"GET /\\ufffd\\ufffd/a\", 9, 1], "
        "[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", 65536, 6]]");

    assert_int_equal(python_reads(&b, "[d['info']['application'],"
                                  " d['info']['platform']]",
                                  out, sizeof(out)), 0);
    assert_string_equal(out,
        "[{\"service\": \"svc\\ufffd(\"}, {\"hostname\": \"h\\ufffd\", "
        "\"runtime_engine\": \"nginx\", "
        "\"runtime_version\": \"1.22\\ufffd\\ufffd\\ufffd\"}]");

    prof_buffer_free(&b);
    free(big);
}


static void
test_provenance_is_valid_utf8_json(void **state)
{
    char                  out[1024];
    prof_buffer_t         b = { NULL, 0, 0 };
    prof_object_t         obj;
    const prof_object_t  *objects[1];

    memset(&obj, 0, sizeof(obj));
    obj.path = "/opt/\xff\xfe/lib\xe2\x82.so";
    obj.build_id = "ab\x80";
    objects[0] = &obj;

    assert_int_equal(prof_intake_provenance_json(&b, objects, 1), 0);
    assert_int_equal(python_reads(&b, "d['v1'][0]", out, sizeof(out)), 0);
    assert_string_equal(out,
        "{\"build_id\": \"ab\\ufffd\", \"kind\": \"library\", "
        "\"name\": \"lib\\ufffd.so\", "
        "\"paths\": [\"/opt/\\ufffd\\ufffd/lib\\ufffd.so\"], "
        "\"version\": \"\"}");

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
        cmocka_unit_test(test_tags_are_valid_utf8),
        cmocka_unit_test(test_event_json_is_valid_utf8_json),
        cmocka_unit_test(test_provenance_is_valid_utf8_json),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
