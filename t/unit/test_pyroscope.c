/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of Pyroscope's push request (shared/profiler/pyroscope.h): the
 * request is read back with a small protobuf reader of the test's own
 * (the published field numbers of push.proto and profile.proto) and
 * zlib's gunzip; every value pushed must be the profile's, split within
 * the limits, labelled as Pyroscope takes labels.
 */

#include <stdio.h>
#include <zlib.h>

#include "unit.h"
#include "profiler/pyroscope.h"


#define KEYS_MAX      4096
#define STRINGS_MAX   8192


/* A length-delimited field or a varint, in bytes [p, end). */
typedef struct {
    unsigned              field;
    unsigned              wire;
    uint64_t              value;            /* varint */
    const unsigned char  *data;             /* length-delimited */
    size_t                length;
} pb_field_t;


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

    if (f->wire == 0) {
        return pb_varint(p, end, &f->value);
    }

    assert_int_equal(f->wire, 2);
    p = pb_varint(p, end, &n);
    assert_true(n <= (uint64_t) (end - p));
    f->data = p;
    f->length = (size_t) n;

    return p + n;
}


/* What a pprof says, as the test reads it. */
typedef struct {
    size_t         uncompressed;
    size_t         samples;
    size_t         types;
    char          *strings[STRINGS_MAX];
    size_t         nstrings;
    int64_t        type_name[4];
    int64_t        period_type;
    int64_t        sum[4];                  /* by sample type */
    size_t         labelled_span;           /* samples with span_id */
    char           span[KEYS_MAX][17];      /* span_id values seen */
    char           trace[33];               /* the last trace_id seen */
    char           endpoints[16][64];       /* distinct endpoint values */
    size_t         nendpoints;
} pprof_t;


typedef struct {
    uint64_t       key, str;
} label_t;


static void
read_sample(pprof_t *pp, const unsigned char *p, size_t length,
    label_t *labels, size_t *nlabels, int64_t *values, size_t *nvalues)
{
    const unsigned char  *end = p + length, *q, *qend;
    pb_field_t            f, g;
    uint64_t              v;

    *nlabels = 0;
    *nvalues = 0;

    while ((p = pb_next(p, end, &f)) != NULL) {
        if (f.field == 2 && f.wire == 2) {             /* packed values */
            for (q = f.data, qend = q + f.length; q < qend; ) {
                q = pb_varint(q, qend, &v);
                values[(*nvalues)++] = (int64_t) v;
            }

        } else if (f.field == 3) {                      /* Label */
            labels[*nlabels].key = 0;
            labels[*nlabels].str = 0;
            for (q = f.data, qend = q + f.length;
                 (q = pb_next(q, qend, &g)) != NULL; )
            {
                if (g.field == 1) {
                    labels[*nlabels].key = g.value;
                } else if (g.field == 2) {
                    labels[*nlabels].str = g.value;
                }
            }
            (*nlabels)++;
        }
    }
}


static void
gunzip(const unsigned char *in, size_t length, unsigned char **out,
    size_t *out_length)
{
    z_stream   zs;
    size_t     cap;
    int        rc;

    memset(&zs, 0, sizeof(zs));
    assert_int_equal(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);

    cap = 1 << 20;
    *out = malloc(cap);
    assert_non_null(*out);

    zs.next_in = (unsigned char *) in;
    zs.avail_in = (uInt) length;

    do {
        if (zs.total_out == cap) {
            cap *= 2;
            *out = realloc(*out, cap);
            assert_non_null(*out);
        }
        zs.next_out = *out + zs.total_out;
        zs.avail_out = (uInt) (cap - zs.total_out);
        rc = inflate(&zs, Z_NO_FLUSH);
    } while (rc == Z_OK);

    assert_int_equal(rc, Z_STREAM_END);
    *out_length = zs.total_out;
    inflateEnd(&zs);
}


/* A gzip'd pprof, read: samples' values summed, labels collected. */
static void
read_pprof(pprof_t *pp, const unsigned char *gz, size_t gz_length)
{
    size_t                i, k, nlabels, nvalues, length;
    int64_t               values[8];
    label_t               labels[8];
    unsigned char        *raw;
    const unsigned char  *p, *end, *q;
    pb_field_t            f, g;
    const char           *key, *value;

    memset(pp, 0, sizeof(pprof_t));
    gunzip(gz, gz_length, &raw, &length);
    pp->uncompressed = length;

    /* the string table first (written last) */
    for (p = raw, end = raw + length; (p = pb_next(p, end, &f)) != NULL; ) {
        if (f.field == 6) {
            assert_true(pp->nstrings < STRINGS_MAX);
            pp->strings[pp->nstrings] = strndup((const char *) f.data,
                                                f.length);
            pp->nstrings++;
        }
    }

    assert_true(pp->nstrings > 0);
    assert_string_equal(pp->strings[0], "");

    for (p = raw; (p = pb_next(p, end, &f)) != NULL; ) {
        if (f.field == 1) {                             /* sample_type */
            for (q = f.data; (q = pb_next(q, f.data + f.length, &g)); ) {
                if (g.field == 1) {
                    pp->type_name[pp->types] = (int64_t) g.value;
                }
            }
            pp->types++;

        } else if (f.field == 11) {                     /* period_type */
            for (q = f.data; (q = pb_next(q, f.data + f.length, &g)); ) {
                if (g.field == 1) {
                    pp->period_type = (int64_t) g.value;
                }
            }

        } else if (f.field == 2) {                      /* Sample */
            read_sample(pp, f.data, f.length, labels, &nlabels, values,
                        &nvalues);
            assert_int_equal(nvalues, pp->types);

            for (i = 0; i < nvalues; i++) {
                pp->sum[i] += values[i];
            }

            for (i = 0; i < nlabels; i++) {
                key = pp->strings[labels[i].key];
                value = pp->strings[labels[i].str];
                assert_true(labels[i].str != 0);    /* string labels only */

                if (strcmp(key, "span_id") == 0) {
                    assert_int_equal(strlen(value), 16);
                    snprintf(pp->span[pp->labelled_span++], 17, "%s",
                             value);

                } else if (strcmp(key, "trace_id") == 0) {
                    assert_int_equal(strlen(value), 32);
                    snprintf(pp->trace, sizeof(pp->trace), "%s", value);

                } else {
                    assert_string_equal(key, "endpoint");
                    for (k = 0; k < pp->nendpoints; k++) {
                        if (strcmp(pp->endpoints[k], value) == 0) {
                            break;
                        }
                    }
                    if (k == pp->nendpoints) {
                        assert_true(k < 16);
                        snprintf(pp->endpoints[pp->nendpoints++], 64, "%s",
                                 value);
                    }
                }
            }

            pp->samples++;
        }
    }

    free(raw);
}


static void
pprof_free(pprof_t *pp)
{
    size_t  i;

    for (i = 0; i < pp->nstrings; i++) {
        free(pp->strings[i]);
    }
}


/* A series of the request: its labels as "name=value;...", in order. */
typedef struct {
    char       labels[1024];            /* values of at most 255 bytes */
    char       names[32][64];
    size_t     value_length[32];        /* by name */
    size_t     nnames;
    size_t     nprofiles;
    int64_t    sum[2];
    size_t     samples, max_samples, max_bytes, labelled_span;
    char       endpoints[16][64];
    size_t     nendpoints;
    char       span[17], trace[33];
} series_t;


static size_t
read_push(const prof_buffer_t *body, series_t *series, size_t max)
{
    size_t                n, k, e;
    char                  name[256], value[256];
    pprof_t              *pp;
    const unsigned char  *p, *q, *r;
    pb_field_t            f, g, h;

    pp = malloc(sizeof(pprof_t));
    assert_non_null(pp);

    n = 0;
    for (p = body->data; (p = pb_next(p, body->data + body->length, &f)); ) {
        assert_int_equal(f.field, 1);
        assert_true(n < max);
        memset(&series[n], 0, sizeof(series_t));

        for (q = f.data; (q = pb_next(q, f.data + f.length, &g)); ) {
            if (g.field == 1) {                         /* LabelPair */
                name[0] = value[0] = '\0';
                for (r = g.data; (r = pb_next(r, g.data + g.length, &h)); ) {
                    snprintf(h.field == 1 ? name : value, 256, "%.*s",
                             (int) h.length, (const char *) h.data);
                    if (h.field == 2 && series[n].nnames < 32) {
                        snprintf(series[n].names[series[n].nnames], 64,
                                 "%s", name);
                        series[n].value_length[series[n].nnames++] =
                            h.length;
                    }
                }
                snprintf(series[n].labels + strlen(series[n].labels),
                         sizeof(series[n].labels)
                         - strlen(series[n].labels), "%s=%s;", name, value);

            } else if (g.field == 2) {                  /* RawSample */
                for (r = g.data; (r = pb_next(r, g.data + g.length, &h)); ) {
                    if (h.field == 2) {
                        assert_int_equal(h.length, 36);     /* a UUID */
                        continue;
                    }

                    read_pprof(pp, h.data, h.length);
                    series[n].nprofiles++;
                    series[n].sum[0] += pp->sum[0];
                    series[n].sum[1] += pp->sum[1];
                    series[n].samples += pp->samples;
                    series[n].labelled_span += pp->labelled_span;
                    if (pp->samples > series[n].max_samples) {
                        series[n].max_samples = pp->samples;
                    }
                    if (pp->uncompressed > series[n].max_bytes) {
                        series[n].max_bytes = pp->uncompressed;
                    }
                    if (pp->labelled_span > 0) {
                        memcpy(series[n].span, pp->span[0], 17);
                    }
                    memcpy(series[n].trace, pp->trace, 33);

                    for (k = 0; k < pp->nendpoints; k++) {
                        for (e = 0; e < series[n].nendpoints; e++) {
                            if (strcmp(series[n].endpoints[e],
                                       pp->endpoints[k]) == 0)
                            {
                                break;
                            }
                        }
                        if (e == series[n].nendpoints) {
                            memcpy(series[n].endpoints[e], pp->endpoints[k],
                                   64);
                            series[n].nendpoints++;
                        }
                    }

                    pprof_free(pp);
                }
            }
        }

        n++;
    }

    free(pp);

    return n;
}


/* A profile of one stack and n samples: each its own span (and
   endpoint i % endpoints), CPU i + 1 ns, no wall time. */
static prof_profile_t *
profile_of(unit_agg_t *u, size_t n, size_t endpoints)
{
    int                 inserted;
    char                name[32];
    size_t              i;
    int64_t             index, endpoint;
    uint64_t            pcs[1];
    prof_batch_t       *b;
    prof_profile_t     *p;
    prof_sample_key_t   key;

    pcs[0] = 0x1234;

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .cpu_samples = 1 },
                   pcs, 1, NULL);
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
        key.span_id = 1000 + i;
        key.local_root_span_id = 0x00f067aa0ba90000ULL + i;
        key.trace_id_high = 0x4bf92f3577b34da6ULL;
        key.trace_id_low = 0xa3ce929d0e0e4736ULL;
        key.end_timestamp_ns = (int64_t) i;     /* not Pyroscope's */

        index = prof_intern(&p->keys, &key, sizeof(key), &inserted);
        assert_true(index >= 0 && inserted);

        p->values = realloc(p->values, p->keys.count * PROF_VALUE_COUNT
                                       * sizeof(int64_t));
        assert_non_null(p->values);
        p->values_capacity = p->keys.count;
        memset(&p->values[index * PROF_VALUE_COUNT], 0,
               PROF_VALUE_COUNT * sizeof(int64_t));
        p->values[index * PROF_VALUE_COUNT + PROF_VALUE_CPU_TIME] =
            (int64_t) i + 1;
        p->values[index * PROF_VALUE_COUNT + PROF_VALUE_CPU_SAMPLES] = 1;
    }

    return p;
}


static prof_pyroscope_conf_t
conf_of(void)
{
    prof_pyroscope_conf_t  c;

    memset(&c, 0, sizeof(c));
    c.service = "checkout";

    return c;
}


static void
test_pyroscope_splits_profiles_over_the_sample_limit(void **state)
{
    size_t                  n;
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 2500, 0);

    c.max_samples = 1000;
    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);

    n = read_push(&out, s, 4);
    assert_int_equal(n, 2);

    assert_string_equal(s[0].labels,
                        "__name__=process_cpu;service_name=checkout;");
    assert_int_equal(s[0].nprofiles, 3);
    assert_true(s[0].max_samples <= 1000);
    assert_int_equal(s[0].samples, 2500);
    assert_int_equal(s[0].sum[0], 2500 * 2501 / 2);    /* every ns */
    assert_int_equal(s[0].sum[1], 2500);
    assert_int_equal(s[0].labelled_span, 2500);

    /* no wall time: its series has one profile, empty */
    assert_string_equal(s[1].labels, "__name__=wall;service_name=checkout;");
    assert_int_equal(s[1].nprofiles, 1);
    assert_int_equal(s[1].samples, 0);

    assert_int_equal(info.profiles, 4);
    assert_int_equal(info.samples, 2500);
    assert_int_equal(info.samples_dropped, 0);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


static void
test_pyroscope_halves_profiles_over_the_byte_limit(void **state)
{
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 2000, 0);

    c.max_bytes = 16 * 1024;
    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);

    assert_int_equal(read_push(&out, s, 4), 2);
    assert_true(s[0].nprofiles > 2);
    assert_true(s[0].max_bytes <= 16 * 1024);
    assert_int_equal(s[0].samples, 2000);
    assert_int_equal(s[0].sum[0], 2000 * 2001 / 2);
    assert_int_equal(info.samples_dropped, 0);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


/* Once halved to a size that fits, the next pprofs take that size, not
   the whole bound halved again: every pprof but the last as full. */
static void
test_pyroscope_keeps_the_size_that_fitted_after_a_split(void **state)
{
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 5000, 0);

    c.max_bytes = 16 * 1024;
    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);

    assert_int_equal(read_push(&out, s, 4), 2);
    assert_int_equal(s[0].samples, 5000);
    assert_true(s[0].max_bytes <= 16 * 1024);
    assert_int_equal(s[0].nprofiles,
                     (5000 + s[0].max_samples - 1) / s[0].max_samples);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


static void
test_pyroscope_labels_spans_with_the_local_root_in_hex(void **state)
{
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 1, 0);

    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

    assert_string_equal(s[0].span, "00f067aa0ba90000");
    assert_string_equal(s[0].trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_int_equal(s[0].nendpoints, 0);       /* no endpoint label */

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


static void
test_pyroscope_folds_endpoints_past_the_bound(void **state)
{
    size_t                  i;
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 100, 10);      /* /e9 has the most CPU, then /e8 */

    c.max_endpoints = 3;
    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

    assert_int_equal(info.endpoints_folded, 7);
    assert_int_equal(s[0].nendpoints, 4);
    for (i = 0; i < s[0].nendpoints; i++) {
        assert_true(strcmp(s[0].endpoints[i], "GET /e9") == 0
                    || strcmp(s[0].endpoints[i], "GET /e8") == 0
                    || strcmp(s[0].endpoints[i], "GET /e7") == 0
                    || strcmp(s[0].endpoints[i], "other") == 0);
    }
    assert_int_equal(s[0].sum[0], 100 * 101 / 2);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


/* Many endpoints a period: the bound's worth of most time named, found
   in O(n log k) comparisons (n^2 took seconds on the loop thread); none
   ranked when they are fewer than the bound. */
static void
test_pyroscope_ranks_many_endpoints_in_n_log_k(void **state)
{
    char                    name[32];
    size_t                  i, j, n = 60000, k = 10;
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, n, n);        /* /e<i>: i + 1 ns, the last the most */

    c.max_endpoints = k;
    c.max_samples = 2000;           /* within the reader's tables */
    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

    assert_int_equal(info.endpoints_folded, n - k);
    assert_int_equal(s[0].nendpoints, k + 1);
    for (i = n - k; i < n; i++) {
        snprintf(name, sizeof(name), "GET /e%zu", i);
        for (j = 0; j < s[0].nendpoints; j++) {
            if (strcmp(s[0].endpoints[j], name) == 0) {
                break;
            }
        }
        assert_true(j < s[0].nendpoints);
    }
    assert_int_equal(s[0].sum[0], (int64_t) n * (n + 1) / 2);

    /* each of the n - k entering the heap: two comparisons a level */
    assert_true(info.rank_comparisons > 0);
    assert_true(info.rank_comparisons <= 2 * n * 5);     /* log2(10) < 4 */

    prof_buffer_free(&out);
    unit_agg_destroy(u);

    u = unit_agg_create(0);
    p = profile_of(u, 100, 100);

    c.max_endpoints = 1000;
    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(info.endpoints_folded, 0);
    assert_int_equal(info.rank_comparisons, 0);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


static void
test_pyroscope_series_labels_are_valid_sorted_and_bounded(void **state)
{
    char                    tag[64][32];
    const char             *tags[64];
    size_t                  i, n;
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 1, 0);

    tags[0] = "team:edge";
    tags[1] = "9lives.x:yes";
    tags[2] = "__name__:forged";        /* reserved */
    tags[3] = "team:again";             /* taken */
    tags[4] = "service_name:forged";    /* taken */
    tags[5] = "empty:";                 /* no value */
    for (i = 6; i < 64; i++) {
        snprintf(tag[i], sizeof(tag[i]), "t%02zu:v", i);
        tags[i] = tag[i];
    }

    c.env = "prod";
    c.version = "1.2";
    c.tags = tags;
    c.tag_count = 64;

    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

#define FIRST_LABELS  "__name__=process_cpu;_lives_x=yes;environment=prod;" \
                      "service_name=checkout;t06=v;"
    assert_true(strncmp(s[0].labels, FIRST_LABELS, strlen(FIRST_LABELS))
                == 0);
    assert_non_null(strstr(s[0].labels, ";team=edge;version=1.2;"));

    /* 30 names: __name__ and 29 of ours */
    for (n = 0, i = 0; s[0].labels[i]; i++) {
        n += (s[0].labels[i] == ';');
    }
    assert_int_equal(n, 30);
    assert_int_equal(info.tags_dropped, 4 + (64 - 6) - (29 - 5));

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


static size_t
value_length(const series_t *s, const char *name)
{
    size_t  i;

    for (i = 0; i < s->nnames; i++) {
        if (strcmp(s->names[i], name) == 0) {
            return s->value_length[i];
        }
    }

    fail_msg("no label %s", name);
    return 0;
}


/* Values Pyroscope would refuse are made valid: UTF-8, 2,048 bytes. */
static void
test_pyroscope_label_values_are_valid_utf8_and_bounded(void **state)
{
    char                    big[3000], cut[2100];
    const char             *tags[3];
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 1, 0);

    memcpy(big, "big:", 4);
    memset(big + 4, 'a', sizeof(big) - 5);
    big[sizeof(big) - 1] = '\0';

    /* "cut:" then 2,047 bytes and a two-byte character across 2,048 */
    memcpy(cut, "cut:", 4);
    memset(cut + 4, 'b', 2047);
    memcpy(cut + 4 + 2047, "\xc3\xa9", 3);

    tags[0] = "bad:x\xff";
    tags[1] = big;
    tags[2] = cut;

    c.service = "";
    c.tags = tags;
    c.tag_count = 3;

    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

    assert_non_null(strstr(s[0].labels, ";bad=x\xef\xbf\xbd;"));
    assert_non_null(strstr(s[0].labels, ";service_name=nginx;"));
    assert_int_equal(value_length(&s[0], "big"), 2048);
    assert_int_equal(value_length(&s[0], "cut"), 2047);     /* not in é */
    assert_int_equal(info.tags_dropped, 0);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


/* A tag's name over Pyroscope's 1,024 bytes would have every push
   refused: the tag is dropped, counted; one of 1,024 is kept. */
static void
test_pyroscope_drops_tags_named_past_the_name_limit(void **state)
{
    char                    longest[1024 + 3], over[1025 + 3];
    const char             *tags[3];
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 1, 0);

    memset(longest, 'k', 1024);
    memcpy(longest + 1024, ":v", 3);
    memset(over, 'o', 1025);
    memcpy(over + 1025, ":v", 3);

    tags[0] = over;
    tags[1] = longest;
    tags[2] = "team:edge";

    c.tags = tags;
    c.tag_count = 3;

    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

    assert_int_equal(info.tags_dropped, 1);
    assert_null(strstr(s[0].labels, "ooo"));
    assert_non_null(strstr(s[0].labels, "kkk"));   /* names read cut */
    assert_non_null(strstr(s[0].labels, ";team=edge;"));

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


/* A tag named as a sample label would meet it in every sample: not a
   series label, dropped, counted. */
static void
test_pyroscope_drops_tags_named_as_sample_labels(void **state)
{
    const char             *tags[4];
    series_t                s[4];
    unit_agg_t             *u;
    prof_buffer_t           out = { NULL, 0, 0 };
    prof_profile_t         *p;
    prof_pyroscope_conf_t   c = conf_of();
    prof_pyroscope_info_t   info;

    u = unit_agg_create(0);
    p = profile_of(u, 10, 2);

    tags[0] = "endpoint:forged";
    tags[1] = "span_id:forged";
    tags[2] = "trace_id:forged";
    tags[3] = "team:edge";

    c.tags = tags;
    c.tag_count = 4;
    c.max_endpoints = 5;

    assert_int_equal(prof_pyroscope_encode(p, u->agg, &c, &out, &info), 0);
    assert_int_equal(read_push(&out, s, 4), 2);

    assert_int_equal(info.tags_dropped, 3);
    assert_string_equal(s[0].labels, "__name__=process_cpu;"
                        "service_name=checkout;team=edge;");
    assert_int_equal(s[0].nendpoints, 2);           /* the samples' own */
    assert_int_equal(s[0].labelled_span, 10);

    prof_buffer_free(&out);
    unit_agg_destroy(u);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_pyroscope_splits_profiles_over_the_sample_limit),
        cmocka_unit_test(test_pyroscope_halves_profiles_over_the_byte_limit),
        cmocka_unit_test(
            test_pyroscope_keeps_the_size_that_fitted_after_a_split),
        cmocka_unit_test(
            test_pyroscope_labels_spans_with_the_local_root_in_hex),
        cmocka_unit_test(test_pyroscope_folds_endpoints_past_the_bound),
        cmocka_unit_test(test_pyroscope_ranks_many_endpoints_in_n_log_k),
        cmocka_unit_test(
            test_pyroscope_series_labels_are_valid_sorted_and_bounded),
        cmocka_unit_test(
            test_pyroscope_label_values_are_valid_utf8_and_bounded),
        cmocka_unit_test(
            test_pyroscope_drops_tags_named_past_the_name_limit),
        cmocka_unit_test(test_pyroscope_drops_tags_named_as_sample_labels),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
