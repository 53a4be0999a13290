/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the Datadog tracer's self-description
 * (shared/worker/tracer_info.h): the MessagePack map as dd-trace-cpp
 * writes it, found among the process's descriptors; malformed content is
 * refused, never overread.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "worker/tracer_info.h"


typedef struct {
    unsigned char  data[4096];
    size_t         len;
} mp_t;


static void
put(mp_t *m, const void *p, size_t n)
{
    assert_true(m->len + n <= sizeof(m->data));
    memcpy(m->data + m->len, p, n);
    m->len += n;
}


static void
put_byte(mp_t *m, unsigned b)
{
    unsigned char  c = (unsigned char) b;

    put(m, &c, 1);
}


/* A string as MessagePack's str8 or fixstr. */
static void
put_str(mp_t *m, const char *s)
{
    size_t  n = strlen(s);

    if (n < 32) {
        put_byte(m, 0xa0 | n);
    } else {
        put_byte(m, 0xd9);
        put_byte(m, n);
    }
    put(m, s, n);
}


/* What dd-trace-cpp 2.1.1 writes (schema_version 2). */
static void
tracer_map(mp_t *m, const char *runtime_id, const char *service)
{
    memset(m, 0, sizeof(mp_t));

    put_byte(m, 0x88);
    put_str(m, "schema_version");
    put_byte(m, 0x02);
    put_str(m, "runtime_id");
    put_str(m, runtime_id);
    put_str(m, "tracer_version");
    put_str(m, "v2.1.1");
    put_str(m, "tracer_language");
    put_str(m, "cpp");
    put_str(m, "service_name");
    put_str(m, service);
    put_str(m, "service_env");
    put_str(m, "prod");
    put_str(m, "process_tags");
    put_byte(m, 0x92);                  /* an array: skipped */
    put_str(m, "a:b");
    put_byte(m, 0xc0);
    put_str(m, "service_version");
    put_str(m, "1.2.3");
}


static void
test_the_tracers_map_is_read(void **state)
{
    mp_t                m;
    prof_tracer_info_t  info;

    tracer_map(&m, "23d39b75-6a52-4a4e-8a5b-0a1b2c3d4e5f", "web");

    assert_int_equal(prof_tracer_info_parse(&info, m.data, m.len), 0);
    assert_string_equal(info.runtime_id,
                        "23d39b75-6a52-4a4e-8a5b-0a1b2c3d4e5f");
    assert_string_equal(info.service, "web");
    assert_string_equal(info.env, "prod");
    assert_string_equal(info.version, "1.2.3");
}


static void
test_malformed_content_is_refused(void **state)
{
    mp_t                m;
    size_t              cut;
    prof_tracer_info_t  info;
    unsigned char      *copy;

    tracer_map(&m, "23d39b75-6a52-4a4e-8a5b-0a1b2c3d4e5f", "web");

    /* Cut anywhere: refused or read, never read past the end. */
    for (cut = 0; cut < m.len; cut++) {
        copy = malloc(cut ? cut : 1);
        assert_non_null(copy);
        memcpy(copy, m.data, cut);
        (void) prof_tracer_info_parse(&info, copy, cut);
        free(copy);
    }

    /* Not a map; a map without runtime_id; a string length past the end. */
    assert_int_equal(prof_tracer_info_parse(&info, "\x92\x01\x02", 3), -1);
    assert_int_equal(prof_tracer_info_parse(&info,
                     "\x81\xa1k\xa1v", 5), -1);
    assert_int_equal(prof_tracer_info_parse(&info,
                     "\x81\xaaruntime_id\xdb\xff\xff\xff\xff", 16), -1);

    /* Deeply nested values are refused, not recursed into forever. */
    memset(&m, 0, sizeof(m));
    put_byte(&m, 0x81);
    put_str(&m, "x");
    for (cut = 0; cut < 1000; cut++) {
        put_byte(&m, 0x91);
    }
    assert_int_equal(prof_tracer_info_parse(&info, m.data, m.len), -1);
}


/* The file among the process's descriptors, as the tracer makes it. */
static void
test_the_tracers_file_is_found(void **state)
{
    int                 fd;
    mp_t                m;
    prof_tracer_info_t  info;

    assert_int_equal(prof_tracer_info_read(&info), -1);

    tracer_map(&m, "0a1b2c3d-0000-4000-8000-000000000001", "api");

    fd = memfd_create("datadog-tracer-info-Xy12Ab34", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, m.data, m.len), (ssize_t) m.len);

    assert_int_equal(prof_tracer_info_read(&info), 0);
    assert_string_equal(info.runtime_id,
                        "0a1b2c3d-0000-4000-8000-000000000001");
    assert_string_equal(info.service, "api");

    /* Read with pread: the tracer's own offset is left alone. */
    assert_int_equal(lseek(fd, 0, SEEK_CUR), (off_t) m.len);

    close(fd);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_tracers_map_is_read),
        cmocka_unit_test(test_malformed_content_is_refused),
        cmocka_unit_test(test_the_tracers_file_is_found),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
