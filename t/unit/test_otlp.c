/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the OTLP profiles request (shared/profiler/otlp.h): read back
 * with a small protobuf reader of the test's own (opentelemetry-proto
 * v1.10.0's published field numbers) and zlib's gunzip; and the
 * receiver's answers read.
 */

#include <errno.h>
#include <stdio.h>
#include <zlib.h>

#include "unit.h"
#include "profiler/otlp.h"
#include "profiler/otlp_answer.h"


/* A field of a message: a varint's value, or a length-delimited's bytes. */
typedef struct {
    unsigned              field;
    unsigned              wire;
    uint64_t              value;
    const unsigned char  *data;
    size_t                length;
} pb_field_t;


typedef struct {
    const unsigned char  *data;
    size_t                length;
} pb_msg_t;


static const unsigned char *
pb_varint(const unsigned char *p, const unsigned char *end, uint64_t *v)
{
    unsigned  shift;

    *v = 0;
    for (shift = 0; p < end && shift < 64; shift += 7) {
        *v |= (uint64_t) (*p & 0x7f) << shift;
        if ((*p++ & 0x80) == 0) {
            return p;
        }
    }

    fail_msg("a varint runs past its message");
    return end;
}


/* The next field of a message: NULL at its end. */
static const unsigned char *
pb_next(const unsigned char *p, const unsigned char *end, pb_field_t *f)
{
    uint64_t  key, n;

    if (p >= end) {
        return NULL;
    }

    p = pb_varint(p, end, &key);
    f->field = (unsigned) (key >> 3);
    f->wire = (unsigned) (key & 7);
    f->data = NULL;

    switch (f->wire) {
    case 0:
        return pb_varint(p, end, &f->value);
    case 1:
        assert_true(end - p >= 8);
        memcpy(&f->value, p, 8);
        return p + 8;
    default:
        assert_int_equal(f->wire, 2);
        p = pb_varint(p, end, &n);
        assert_true(n <= (uint64_t) (end - p));
        f->data = p;
        f->length = (size_t) n;
        return p + n;
    }
}


/* How many times field is in m. */
static size_t
pb_count(pb_msg_t m, unsigned field)
{
    size_t                n;
    pb_field_t            f;
    const unsigned char  *p, *end = m.data + m.length;

    for (n = 0, p = m.data; (p = pb_next(p, end, &f)) != NULL; ) {
        n += (f.field == field);
    }

    return n;
}


/* The i-th field's (a varint's value, or 0 when absent). */
static uint64_t
pb_uint(pb_msg_t m, unsigned field, size_t i)
{
    pb_field_t            f;
    const unsigned char  *p, *end = m.data + m.length;

    for (p = m.data; (p = pb_next(p, end, &f)) != NULL; ) {
        if (f.field == field && f.data == NULL && i-- == 0) {
            return f.value;
        }
    }

    return 0;
}


/* The i-th field's bytes (a message, a string); empty when absent. */
static pb_msg_t
pb_sub(pb_msg_t m, unsigned field, size_t i)
{
    pb_field_t            f;
    pb_msg_t              sub = { NULL, 0 };
    const unsigned char  *p, *end = m.data + m.length;

    for (p = m.data; (p = pb_next(p, end, &f)) != NULL; ) {
        if (f.field == field && f.data != NULL && i-- == 0) {
            sub.data = f.data;
            sub.length = f.length;
            return sub;
        }
    }

    return sub;
}


/* A packed field of one varint (Sample.values, attribute_indices). */
static uint64_t
pb_packed1(pb_msg_t m, unsigned field)
{
    uint64_t  v;
    pb_msg_t  s;

    s = pb_sub(m, field, 0);
    if (s.length == 0) {
        return 0;
    }

    assert_true(pb_varint(s.data, s.data + s.length, &v)
                == s.data + s.length);

    return v;
}


typedef struct {
    unsigned char  *body;
    size_t          length;
    pb_msg_t        request;
    pb_msg_t        dict;
    pb_msg_t        scope;              /* the one ScopeProfiles */
} request_t;


static void
read_request(const prof_buffer_t *gz, request_t *r)
{
    int        rc;
    size_t     cap;
    z_stream   zs;
    pb_msg_t   rp;

    assert_true(gz->length > 18);
    assert_int_equal(gz->data[0], 0x1f);
    assert_int_equal(gz->data[1], 0x8b);

    memset(&zs, 0, sizeof(zs));
    assert_int_equal(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);

    cap = 64 * 1024;
    r->body = malloc(cap);
    r->length = 0;
    zs.next_in = gz->data;
    zs.avail_in = (uInt) gz->length;

    do {
        if (r->length == cap) {
            cap *= 2;
            r->body = realloc(r->body, cap);
        }
        assert_non_null(r->body);
        zs.next_out = r->body + r->length;
        zs.avail_out = (uInt) (cap - r->length);
        rc = inflate(&zs, Z_NO_FLUSH);
        assert_true(rc == Z_OK || rc == Z_STREAM_END);
        r->length = cap - zs.avail_out;
    } while (rc != Z_STREAM_END);

    inflateEnd(&zs);

    r->request.data = r->body;
    r->request.length = r->length;
    assert_int_equal(pb_count(r->request, 1), 1);
    r->dict = pb_sub(r->request, 2, 0);
    rp = pb_sub(r->request, 1, 0);
    assert_int_equal(pb_count(rp, 2), 1);
    r->scope = pb_sub(rp, 2, 0);
}


/* A profile of one stack and n samples: each its own span (endpoint
   i % endpoints), of one trace, CPU i + 1 ns and a sample; the
   timestamp i % stamps. */
static prof_profile_t *
profile_of(unit_agg_t *u, size_t n, size_t endpoints, size_t spans,
    size_t stamps)
{
    int                 inserted;
    char                name[32];
    size_t              i;
    int64_t             index, endpoint;
    uint64_t            pcs[2];
    prof_batch_t       *b;
    prof_profile_t     *p;
    prof_sample_key_t   key;

    pcs[0] = 0x1234;
    pcs[1] = 0x5678;

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .cpu_samples = 1 },
                   pcs, 2, NULL);
    unit_consume(u, b);
    p = unit_flush(u, UNIT_START_REALTIME_NS + 60000000000LL,
                   UNIT_START_MONOTONIC_NS + 60000000000LL);

    prof_intern_clear(&p->keys);

    for (i = 0; i < n; i++) {
        endpoint = 0;
        if (endpoints > 0) {
            snprintf(name, sizeof(name), "GET /e%zu", i % endpoints);
            endpoint = prof_intern(&p->endpoints, name, strlen(name),
                                   &inserted) + 1;
        }

        memset(&key, 0, sizeof(key));
        key.stack = 0;
        key.endpoint = (uint32_t) endpoint;
        if (spans > 0) {
            key.span_id = 0x00f067aa0ba90000ULL + i % spans;
            key.local_root_span_id = 0x1111;
            key.trace_id_high = 0x4bf92f3577b34da6ULL;
            key.trace_id_low = 0xa3ce929d0e0e4736ULL;
        }
        key.end_timestamp_ns = (int64_t) (i % (stamps ? stamps : 1)) + 1;

        index = prof_intern(&p->keys, &key, sizeof(key), &inserted);
        assert_true(index >= 0);

        if (inserted) {
            p->values = realloc(p->values, p->keys.count * PROF_VALUE_COUNT
                                           * sizeof(int64_t));
            assert_non_null(p->values);
            p->values_capacity = p->keys.count;
            memset(&p->values[index * PROF_VALUE_COUNT], 0,
                   PROF_VALUE_COUNT * sizeof(int64_t));
        }

        p->values[index * PROF_VALUE_COUNT + PROF_VALUE_CPU_TIME] +=
            (int64_t) i + 1;
        p->values[index * PROF_VALUE_COUNT + PROF_VALUE_CPU_SAMPLES] += 1;
    }

    return p;
}


static prof_otlp_conf_t
conf_of(void)
{
    prof_otlp_conf_t  c;

    memset(&c, 0, sizeof(c));
    c.service = "checkout";
    c.host = "h1";
    c.pid = 1234;
    c.executable = "nginx";

    return c;
}


static void
encode(unit_agg_t *u, prof_profile_t *p, request_t *r, prof_otlp_info_t *info)
{
    prof_buffer_t     out = { NULL, 0, 0 };
    prof_otlp_conf_t  c = conf_of();

    assert_int_equal(prof_otlp_encode(p, u->agg, &c, &out, info), 0);
    read_request(&out, r);
    prof_buffer_free(&out);
}


static void
test_otlp_tables_start_with_their_zero_value(void **state)
{
    unsigned          t;
    request_t         r;
    prof_otlp_info_t  info;
    unit_agg_t       *u = unit_agg_create(0);
    prof_profile_t   *p = profile_of(u, 10, 3, 10, 1);

    encode(u, p, &r, &info);

    /* mapping, location, function, link, string, attribute, stack */
    for (t = 1; t <= 7; t++) {
        assert_true(pb_count(r.dict, t) >= 1);
        assert_int_equal(pb_sub(r.dict, t, 0).length, 0);
    }

    /* Two frames, one stack, ten links, three endpoints. */
    assert_int_equal(pb_count(r.dict, 2), 1 + 2);
    assert_int_equal(pb_count(r.dict, 7), 1 + 1);
    assert_int_equal(pb_count(r.dict, 4), 1 + 10);
    assert_int_equal(pb_count(r.dict, 6), 1 + 3);
    assert_int_equal(info.links, 10);

    free(r.body);
    unit_agg_destroy(u);
}


static void
test_otlp_links_traced_samples_with_trace_and_span_bytes(void **state)
{
    size_t            i, k, linked;
    uint64_t          link;
    pb_msg_t          profile, sample, l, trace, span;
    request_t         r;
    prof_otlp_info_t  info;
    unit_agg_t       *u = unit_agg_create(0);
    prof_profile_t   *p = profile_of(u, 4, 0, 4, 1);
    static const unsigned char  trace_id[16] = {
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
        0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36
    };

    encode(u, p, &r, &info);

    profile = pb_sub(r.scope, 2, 0);                /* cpu/nanoseconds */
    assert_int_equal(pb_count(profile, 2), 4);

    for (linked = 0, i = 0; i < 4; i++) {
        sample = pb_sub(profile, 2, i);
        link = pb_uint(sample, 3, 0);
        assert_true(link >= 1 && link <= 4);

        l = pb_sub(r.dict, 4, (size_t) link);
        trace = pb_sub(l, 1, 0);
        span = pb_sub(l, 2, 0);
        assert_int_equal(trace.length, 16);
        assert_memory_equal(trace.data, trace_id, 16);
        assert_int_equal(span.length, 8);
        assert_int_equal(span.data[0], 0x00);
        assert_int_equal(span.data[1], 0xf0);

        k = span.data[7];               /* the span i % 4, big-endian */
        assert_true(k < 4);
        linked |= (size_t) 1 << k;
    }

    assert_int_equal(linked, 0xf);

    free(r.body);
    unit_agg_destroy(u);
}


static void
test_otlp_sums_samples_per_stack_endpoint_and_link(void **state)
{
    size_t            i;
    int64_t           sum;
    pb_msg_t          profile, sample;
    request_t         r;
    prof_otlp_info_t  info;
    unit_agg_t       *u = unit_agg_create(0);

    /* 100 samples of 2 endpoints, 5 spans and 10 timestamps: 10 OTLP
       samples (endpoint i % 2 and span i % 5 go together). */
    prof_profile_t   *p = profile_of(u, 100, 2, 5, 10);

    encode(u, p, &r, &info);

    profile = pb_sub(r.scope, 2, 0);
    assert_int_equal(pb_count(profile, 2), 10);

    for (sum = 0, i = 0; i < 10; i++) {
        sample = pb_sub(profile, 2, i);
        sum += (int64_t) pb_packed1(sample, 4);
        assert_true(pb_packed1(sample, 2) > 0);     /* the endpoint */
    }

    assert_int_equal(sum, 100 * 101 / 2);

    free(r.body);
    unit_agg_destroy(u);
}


/* A string of the dictionary. */
static void
dict_string(request_t *r, uint64_t i, char *out, size_t size)
{
    pb_msg_t  s = pb_sub(r->dict, 5, (size_t) i);

    assert_true(s.length < size);
    memcpy(out, s.data, s.length);
    out[s.length] = '\0';
}


static void
test_otlp_writes_a_profile_per_sample_type_with_its_period_type(void **state)
{
    char              type[32], unit[32], period[32];
    size_t            i;
    pb_msg_t          profile, vt, id;
    request_t         r;
    prof_otlp_info_t  info;
    unit_agg_t       *u = unit_agg_create(0);
    prof_profile_t   *p = profile_of(u, 3, 3, 0, 1);
    static const char  *expect[5][3] = {
        { "cpu", "nanoseconds", "cpu" },
        { "samples", "count", "cpu" },
        { "wall", "nanoseconds", "wall" },
        { "samples", "count", "wall" },
        { "off_cpu", "nanoseconds", "wall" },
    };

    encode(u, p, &r, &info);

    assert_int_equal(pb_count(r.scope, 2), PROF_OTLP_PROFILES);
    assert_int_equal(info.profiles, PROF_OTLP_PROFILES);
    assert_int_equal(info.links, 0);

    for (i = 0; i < PROF_OTLP_PROFILES; i++) {
        profile = pb_sub(r.scope, 2, i);

        vt = pb_sub(profile, 1, 0);
        dict_string(&r, pb_uint(vt, 1, 0), type, sizeof(type));
        dict_string(&r, pb_uint(vt, 2, 0), unit, sizeof(unit));
        vt = pb_sub(profile, 5, 0);
        dict_string(&r, pb_uint(vt, 1, 0), period, sizeof(period));

        assert_string_equal(type, expect[i][0]);
        assert_string_equal(unit, expect[i][1]);
        assert_string_equal(period, expect[i][2]);
        assert_int_equal(pb_uint(profile, 6, 0), UNIT_PERIOD_NS);
        assert_int_equal(pb_uint(profile, 3, 0), UNIT_START_REALTIME_NS);

        id = pb_sub(profile, 7, 0);
        assert_int_equal(id.length, 16);

        /* no wall time: only the CPU Profiles have samples */
        assert_int_equal(pb_count(profile, 2), i < 2 ? 3 : 0);
    }

    free(r.body);
    unit_agg_destroy(u);
}


static void
test_otlp_reads_a_partial_success(void **state)
{
    char     message[16];
    int64_t  rejected;
    static const unsigned char  answer[] = {
        0x0a, 0x0c,                             /* partial_success */
        0x08, 0x03,                             /* rejected_profiles 3 */
        0x12, 0x08, 'r', 'a', 't', 'e', ' ', 'c', 'a', 'p'
    };

    assert_int_equal(prof_otlp_response(answer, sizeof(answer), &rejected,
                                        message, sizeof(message)), 0);
    assert_int_equal(rejected, 3);
    assert_string_equal(message, "rate cap");

    /* Cut to fit, between characters. */
    assert_int_equal(prof_otlp_response(answer, sizeof(answer), &rejected,
                                        message, 5), 0);
    assert_string_equal(message, "rate");

    /* An empty answer: a full success. */
    assert_int_equal(prof_otlp_response("", 0, &rejected, message,
                                        sizeof(message)), 0);
    assert_int_equal(rejected, 0);
    assert_string_equal(message, "");

    /* No such message. */
    assert_int_equal(prof_otlp_response("\x0a\xff", 2, &rejected, message,
                                        sizeof(message)), -EINVAL);
}


static void
test_otlp_reads_a_refusals_reason(void **state)
{
    char  message[32];
    static const unsigned char  status[] = {
        0x08, 0x03,                             /* code 3 */
        0x12, 0x07, 'b', 'a', 'd', ' ', 'p', 'i', 'd'
    };

    assert_int_equal(prof_otlp_status_message(status, sizeof(status),
                                              message, sizeof(message)), 0);
    assert_string_equal(message, "bad pid");

    assert_int_equal(prof_otlp_status_message("too many\n", 9, message,
                                              sizeof(message)), 0);
    assert_string_equal(message, "too many");

    assert_int_equal(prof_otlp_status_message("\x01\x02\xff", 3, message,
                                              sizeof(message)), -EINVAL);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_otlp_tables_start_with_their_zero_value),
        cmocka_unit_test(
            test_otlp_links_traced_samples_with_trace_and_span_bytes),
        cmocka_unit_test(test_otlp_sums_samples_per_stack_endpoint_and_link),
        cmocka_unit_test(
            test_otlp_writes_a_profile_per_sample_type_with_its_period_type),
        cmocka_unit_test(test_otlp_reads_a_partial_success),
        cmocka_unit_test(test_otlp_reads_a_refusals_reason),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
