/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Pyroscope's push request: a profile's samples merged again for
 * Pyroscope's labels, encoded as pprofs of at most its limits (pprof.c's
 * encoder in Pyroscope's style), wrapped in a PushRequest.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "profiler/aggregator.h"
#include "profiler/intake.h"
#include "profiler/pprof.h"
#include "profiler/pprof_wire.h"
#include "profiler/pyroscope.h"


/* push.proto and types.proto's field numbers */
#define PROF_PUSH_REQUEST_SERIES    1
#define PROF_SERIES_LABELS          1
#define PROF_SERIES_SAMPLES         2
#define PROF_LABEL_NAME             1
#define PROF_LABEL_VALUE            2
#define PROF_RAW_SAMPLE_PROFILE     1
#define PROF_RAW_SAMPLE_ID          2


typedef struct {
    char                *name;
    char                *value;             /* valid UTF-8, bounded */
    size_t               value_length;
} prof_push_label_t;


typedef struct {
    const prof_profile_t        *profile;
    prof_aggregator_t           *agg;
    const prof_pyroscope_conf_t *conf;
    prof_pyroscope_info_t       *info;
    size_t                       max_samples;
    size_t                       max_bytes;

    prof_intern_t                keys;          /* prof_sample_key_t */
    int64_t                     *values;        /* by key */
    size_t                       values_capacity;
    prof_intern_t                endpoints;     /* folded names */
    uint32_t                    *folded;        /* by profile endpoint:
                                                   1 + a name, 0 none */

    prof_push_label_t            labels[PROF_PYROSCOPE_MAX_LABELS];
    size_t                       label_count;
} prof_push_t;


static const prof_pprof_style_t  prof_push_styles[2] = {
    { 2, { PROF_VALUE_CPU_TIME, PROF_VALUE_CPU_SAMPLES },
      { { "cpu", "nanoseconds" }, { "samples", "count" } },
      { "cpu", "nanoseconds" }, "endpoint" },
    { 2, { PROF_VALUE_WALL_TIME, PROF_VALUE_WALL_SAMPLES },
      { { "wall", "nanoseconds" }, { "samples", "count" } },
      { "wall", "nanoseconds" }, "endpoint" }
};

static const char  *prof_push_names[2] = { "process_cpu", "wall" };


/* A length-delimited field's key and length. */
static int
prof_push_field(prof_buffer_t *b, unsigned field, size_t length)
{
    unsigned char  head[16], *p;

    p = head;
    *p++ = PROF_PB_KEY(field, PROF_PB_LEN);
    p = prof_pb_varint(p, length);

    return prof_buffer_append(b, head, p - head);
}


static int
prof_push_bytes(prof_buffer_t *b, unsigned field, const void *data,
    size_t length)
{
    if (prof_push_field(b, field, length) != 0
        || prof_buffer_append(b, data, length) != 0)
    {
        return -ENOMEM;
    }

    return 0;
}


/* Whether endpoint a ranks below b: less time, or as much and later. */
static int
prof_push_ranks_below(const int64_t *total, size_t a, size_t b,
    prof_pyroscope_info_t *info)
{
    info->rank_comparisons++;

    return total[a] < total[b] || (total[a] == total[b] && a > b);
}


/* The heap's entry at i moved down to its place (its lowest at 0). */
static void
prof_push_sift_down(size_t *heap, size_t count, size_t i,
    const int64_t *total, prof_pyroscope_info_t *info)
{
    size_t  low, child, swap;

    for ( ;; ) {
        low = i;

        for (child = 2 * i + 1; child <= 2 * i + 2; child++) {
            if (child < count
                && prof_push_ranks_below(total, heap[child], heap[low], info))
            {
                low = child;
            }
        }

        if (low == i) {
            return;
        }

        swap = heap[i];
        heap[i] = heap[low];
        heap[low] = swap;
        i = low;
    }
}


/*
 * The k endpoints of most time (ties: the first), marked in top: a heap
 * of the k best so far, its lowest on top, O(n log k) comparisons.
 */
static int
prof_push_top_endpoints(const int64_t *total, size_t n, size_t k,
    unsigned char *top, prof_pyroscope_info_t *info)
{
    size_t   i, j, *heap;

    heap = malloc(k * sizeof(size_t));
    if (heap == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < k; i++) {
        heap[i] = i;
    }

    for (j = k / 2; j-- > 0; ) {
        prof_push_sift_down(heap, k, j, total, info);
    }

    for (i = k; i < n; i++) {
        if (prof_push_ranks_below(total, heap[0], i, info)) {
            heap[0] = i;
            prof_push_sift_down(heap, k, 0, total, info);
        }
    }

    for (i = 0; i < k; i++) {
        top[heap[i]] = 1;
    }

    free(heap);

    return 0;
}


/*
 * The endpoints a label may name: the max_endpoints of most time (CPU and
 * wall), every other folded into one name, and counted.
 */
static int
prof_push_fold_endpoints(prof_push_t *ps)
{
    int                      inserted;
    size_t                   n, i, k, length;
    int64_t                 *total, index;
    unsigned char           *top;
    const void              *name;
    const int64_t           *v;
    const prof_profile_t    *p = ps->profile;
    const prof_sample_key_t *key;

    n = p->endpoints.count;
    if (n == 0 || ps->conf->max_endpoints == 0) {
        return 0;
    }

    ps->folded = calloc(n, sizeof(uint32_t));
    total = calloc(n, sizeof(int64_t));
    top = malloc(n);

    if (ps->folded == NULL || total == NULL || top == NULL) {
        free(total);
        free(top);
        return -ENOMEM;
    }

    /* As many endpoints as the bound, or fewer: all named, none ranked. */
    if (n <= ps->conf->max_endpoints) {
        memset(top, 1, n);

    } else {
        memset(top, 0, n);

        for (k = 0; k < p->keys.count; k++) {
            key = prof_intern_key(&p->keys, k, NULL);
            v = &p->values[k * PROF_VALUE_COUNT];

            if (key->endpoint != 0) {
                total[key->endpoint - 1] += v[PROF_VALUE_CPU_TIME]
                                            + v[PROF_VALUE_WALL_TIME];
            }
        }

        if (prof_push_top_endpoints(total, n, ps->conf->max_endpoints, top,
                                    ps->info) != 0)
        {
            free(total);
            free(top);
            return -ENOMEM;
        }
    }

    for (i = 0; i < n; i++) {
        if (top[i]) {
            name = prof_intern_key(&p->endpoints, i, &length);

        } else {
            name = PROF_PYROSCOPE_OTHER_ENDPOINT;
            length = sizeof(PROF_PYROSCOPE_OTHER_ENDPOINT) - 1;
            ps->info->endpoints_folded++;
        }

        index = prof_intern(&ps->endpoints, name, length, &inserted);
        if (index < 0) {
            free(total);
            free(top);
            return -ENOMEM;
        }

        ps->folded[i] = (uint32_t) index + 1;
    }

    free(total);
    free(top);

    return 0;
}


/*
 * The profile's samples summed again per (stack, local root span, trace,
 * folded endpoint): timestamps, stalls and the active span are not
 * Pyroscope's. A sample without a known local root has no span_id.
 */
static int
prof_push_merge(prof_push_t *ps)
{
    int                      inserted;
    unsigned                 i;
    int64_t                  index, *to;
    uint32_t                 k;
    prof_sample_key_t        key;
    const int64_t           *v;
    const prof_profile_t    *p = ps->profile;
    const prof_sample_key_t *from;

    for (k = 0; k < p->keys.count; k++) {
        from = prof_intern_key(&p->keys, k, NULL);
        v = &p->values[k * PROF_VALUE_COUNT];

        memset(&key, 0, sizeof(key));
        key.stack = from->stack;
        key.span_id = (from->span_id != 0) ? from->local_root_span_id : 0;
        key.trace_id_high = from->trace_id_high;
        key.trace_id_low = from->trace_id_low;

        if (from->endpoint != 0 && ps->folded != NULL) {
            key.endpoint = ps->folded[from->endpoint - 1];
        }

        index = prof_intern(&ps->keys, &key, sizeof(key), &inserted);
        if (index < 0
            || prof_aggregator_reserve_values(&ps->values,
                                              &ps->values_capacity, index + 1)
               != 0)
        {
            return -ENOMEM;
        }

        to = &ps->values[index * PROF_VALUE_COUNT];
        for (i = 0; i < PROF_VALUE_COUNT; i++) {
            to[i] += v[i];
        }
    }

    return 0;
}


static void
prof_push_profile_free(prof_profile_t *d)
{
    prof_intern_free(&d->stacks);
    prof_intern_free(&d->keys);
    prof_intern_free(&d->endpoints);
    free(d->values);
}


/*
 * A profile of some of the merged samples (keys[0..n)), with only their
 * stacks and endpoints, for one pprof.
 */
static int
prof_push_subset(prof_push_t *ps, const uint32_t *keys, size_t n,
    prof_profile_t *d)
{
    int                      inserted;
    size_t                   i, length;
    int64_t                  stack, endpoint, index;
    const void              *data;
    prof_sample_key_t        key;
    const prof_profile_t    *p = ps->profile;

    memset(d, 0, sizeof(prof_profile_t));
    d->sequence = p->sequence;
    d->start_realtime_ns = p->start_realtime_ns;
    d->duration_ns = p->duration_ns;
    d->period_ns = p->period_ns;
    d->thread_id = p->thread_id;
    d->thread_name = p->thread_name;
    prof_intern_init(&d->stacks);
    prof_intern_init(&d->keys);
    prof_intern_init(&d->endpoints);

    d->values = calloc(n ? n : 1, PROF_VALUE_COUNT * sizeof(int64_t));
    if (d->values == NULL) {
        return -ENOMEM;
    }

    d->values_capacity = n;

    for (i = 0; i < n; i++) {
        memcpy(&key, prof_intern_key(&ps->keys, keys[i], NULL), sizeof(key));

        data = prof_intern_key(&p->stacks, key.stack, &length);
        stack = prof_intern(&d->stacks, data, length, &inserted);

        endpoint = 0;
        if (key.endpoint != 0) {
            data = prof_intern_key(&ps->endpoints, key.endpoint - 1,
                                   &length);
            endpoint = prof_intern(&d->endpoints, data, length, &inserted)
                       + 1;
        }

        if (stack < 0 || endpoint < 0) {
            return -ENOMEM;
        }

        key.stack = (uint32_t) stack;
        key.endpoint = (uint32_t) endpoint;

        index = prof_intern(&d->keys, &key, sizeof(key), &inserted);
        if (index < 0) {
            return -ENOMEM;
        }

        memcpy(&d->values[index * PROF_VALUE_COUNT],
               &ps->values[(size_t) keys[i] * PROF_VALUE_COUNT],
               PROF_VALUE_COUNT * sizeof(int64_t));
    }

    return 0;
}


/* A RawSample: a pprof and its id (a UUID), into series. */
static int
prof_push_raw_sample(prof_buffer_t *series, const prof_buffer_t *pprof)
{
    char           uuid[37];
    prof_buffer_t  sample = { NULL, 0, 0 };
    int            rc;

    if (prof_intake_uuid(uuid) != 0) {
        return -EIO;
    }

    rc = prof_push_bytes(&sample, PROF_RAW_SAMPLE_PROFILE, pprof->data,
                         pprof->length);
    if (rc == 0) {
        rc = prof_push_bytes(&sample, PROF_RAW_SAMPLE_ID, uuid, 36);
    }
    if (rc == 0) {
        rc = prof_push_bytes(series, PROF_SERIES_SAMPLES, sample.data,
                             sample.length);
    }

    prof_buffer_free(&sample);

    return rc;
}


/*
 * The pprofs of one series (style s) into series: the merged samples
 * with a value of its own, at most max_samples a pprof, and halved while
 * one is over max_bytes (a sample alone over it is dropped, counted);
 * the next ones start from the last size that fitted.
 */
static int
prof_push_series_profiles(prof_push_t *ps, unsigned s, prof_buffer_t *series)
{
    int                  rc;
    size_t               n, i, j, chunk, fitted;
    uint32_t            *keys;
    const int64_t       *v;
    prof_buffer_t        pprof = { NULL, 0, 0 };
    prof_profile_t       d;
    prof_pprof_info_t    info;
    const prof_pprof_style_t  *st = &prof_push_styles[s];

    keys = malloc((ps->keys.count + 1) * sizeof(uint32_t));
    if (keys == NULL) {
        return -ENOMEM;
    }

    for (n = 0, i = 0; i < ps->keys.count; i++) {
        v = &ps->values[i * PROF_VALUE_COUNT];

        for (j = 0; j < st->value_count; j++) {
            if (v[st->values[j]] != 0) {
                keys[n++] = (uint32_t) i;
                break;
            }
        }
    }

    rc = 0;
    chunk = ps->max_samples;
    fitted = chunk;                 /* the last size under max_bytes */
    i = 0;

    /* A series has a pprof even with no sample: the period is known. */
    do {
        if (chunk > n - i) {
            chunk = n - i;
        }

        rc = prof_push_subset(ps, keys + i, chunk, &d);
        if (rc == 0) {
            pprof.length = 0;
            rc = prof_pprof_encode_style(&d, ps->agg, st, &pprof, &info);
        }
        prof_push_profile_free(&d);

        if (rc != 0) {
            break;
        }

        if (info.uncompressed_bytes > ps->max_bytes) {
            if (chunk > 1) {
                chunk /= 2;
                continue;
            }

            ps->info->samples_dropped++;
            i++;
            chunk = fitted;
            continue;
        }

        rc = prof_push_raw_sample(series, &pprof);
        if (rc != 0) {
            break;
        }

        ps->info->profiles++;
        ps->info->samples += info.samples;
        i += chunk;
        fitted = chunk;             /* the next ones alike: not halved
                                       from the bound again */

    } while (i < n);

    prof_buffer_free(&pprof);
    free(keys);

    return rc;
}


/* Names the samples' labels take: a series label of one of them would
   meet them in every sample. */
static const char  *prof_push_sample_label_names[] = {
    "endpoint", "span_id", "trace_id", NULL
};


/*
 * A name Pyroscope takes, [a-zA-Z_][a-zA-Z0-9_]* of at most
 * PROF_PYROSCOPE_MAX_NAME bytes, of a tag's key; NULL: none (reserved,
 * too long, or no memory).
 */
static char *
prof_push_label_name(const char *key, size_t length)
{
    char         *name, c;
    size_t        i;
    const char  **taken;

    if (length == 0 || length > PROF_PYROSCOPE_MAX_NAME) {
        return NULL;
    }

    name = malloc(length + 1);
    if (name == NULL) {
        return NULL;
    }

    for (i = 0; i < length; i++) {
        c = key[i];
        name[i] = ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                   || c == '_' || (i > 0 && c >= '0' && c <= '9'))
                  ? c : '_';
    }

    name[length] = '\0';

    if (name[0] == '_' && name[1] == '_') {
        free(name);                     /* reserved */
        return NULL;
    }

    for (taken = prof_push_sample_label_names; *taken != NULL; taken++) {
        if (strcmp(name, *taken) == 0) {
            free(name);
            return NULL;
        }
    }

    return name;
}


/*
 * A label's value as Pyroscope takes it: valid UTF-8 (ill-formed bytes
 * and NUL become U+FFFD), at most PROF_PYROSCOPE_MAX_VALUE bytes (cut
 * between characters). NULL: no memory.
 */
static char *
prof_push_label_value(const char *value, size_t *length)
{
    char    *out;
    size_t   n;

    out = malloc(PROF_UTF8_SANITIZED_MAX(*length) + 1);
    if (out == NULL) {
        return NULL;
    }

    n = prof_utf8_sanitize(out, value, *length);

    if (n > PROF_PYROSCOPE_MAX_VALUE) {
        n = PROF_PYROSCOPE_MAX_VALUE;
        while (n > 0 && ((unsigned char) out[n] & 0xc0) == 0x80) {
            n--;
        }
        out[n] = '\0';
    }

    *length = n;

    return out;
}


/* A series label, unless its name is taken or there is no room. */
static int
prof_push_label(prof_push_t *ps, char *name, const char *raw,
    size_t length, size_t room)
{
    char    *value;
    size_t   i;

    if (name == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < ps->label_count; i++) {
        if (strcmp(ps->labels[i].name, name) == 0) {
            break;
        }
    }

    if (length == 0 || i < ps->label_count || ps->label_count >= room) {
        free(name);
        return -EEXIST;
    }

    value = prof_push_label_value(raw, &length);
    if (value == NULL) {
        free(name);
        return -ENOMEM;
    }

    ps->labels[ps->label_count].name = name;
    ps->labels[ps->label_count].value = value;
    ps->labels[ps->label_count].value_length = length;
    ps->label_count++;

    return 0;
}


static int
prof_push_label_cmp(const void *a, const void *b)
{
    return strcmp(((const prof_push_label_t *) a)->name,
                  ((const prof_push_label_t *) b)->name);
}


/*
 * The series' labels but __name__: service_name, environment, version,
 * then the tags while there is room (an endpoint label takes one).
 */
static int
prof_push_labels(prof_push_t *ps)
{
    size_t                        i, room;
    const char                   *tag, *colon, *service;
    const prof_pyroscope_conf_t  *c = ps->conf;

    room = PROF_PYROSCOPE_MAX_LABELS - 1 - (c->max_endpoints ? 1 : 0);

    service = (c->service != NULL && c->service[0] != '\0') ? c->service
                                                            : "nginx";

    if (prof_push_label(ps, strdup("service_name"), service,
                        strlen(service), room) == -ENOMEM)
    {
        return -ENOMEM;
    }

    if (c->env != NULL
        && prof_push_label(ps, strdup("environment"), c->env,
                           strlen(c->env), room) == -ENOMEM)
    {
        return -ENOMEM;
    }

    if (c->version != NULL
        && prof_push_label(ps, strdup("version"), c->version,
                           strlen(c->version), room) == -ENOMEM)
    {
        return -ENOMEM;
    }

    for (i = 0; i < c->tag_count; i++) {
        tag = c->tags[i];
        colon = strchr(tag, ':');

        if (colon == NULL
            || prof_push_label(ps, prof_push_label_name(tag, colon - tag),
                               colon + 1, strlen(colon + 1), room) != 0)
        {
            ps->info->tags_dropped++;
        }
    }

    qsort(ps->labels, ps->label_count, sizeof(prof_push_label_t),
          prof_push_label_cmp);

    return 0;
}


/* A LabelPair into b. */
static int
prof_push_label_pair(prof_buffer_t *b, const char *name, const char *value,
    size_t length)
{
    int            rc;
    prof_buffer_t  pair = { NULL, 0, 0 };

    rc = prof_push_bytes(&pair, PROF_LABEL_NAME, name, strlen(name));
    if (rc == 0) {
        rc = prof_push_bytes(&pair, PROF_LABEL_VALUE, value, length);
    }
    if (rc == 0) {
        rc = prof_push_bytes(b, PROF_SERIES_LABELS, pair.data, pair.length);
    }

    prof_buffer_free(&pair);

    return rc;
}


/* One series (style s): its labels in name order, then its pprofs. */
static int
prof_push_series(prof_push_t *ps, unsigned s, prof_buffer_t *out)
{
    int            rc;
    size_t         i;
    const char    *name = prof_push_names[s];
    prof_buffer_t  series = { NULL, 0, 0 };

    /* "__name__" sorts before every other name ('_' < 'a'; no other
       begins with "__"). */
    rc = prof_push_label_pair(&series, "__name__", name, strlen(name));

    for (i = 0; rc == 0 && i < ps->label_count; i++) {
        rc = prof_push_label_pair(&series, ps->labels[i].name,
                                  ps->labels[i].value,
                                  ps->labels[i].value_length);
    }

    if (rc == 0) {
        rc = prof_push_series_profiles(ps, s, &series);
    }

    if (rc == 0) {
        rc = prof_push_bytes(out, PROF_PUSH_REQUEST_SERIES, series.data,
                             series.length);
    }

    prof_buffer_free(&series);

    return rc;
}


int
prof_pyroscope_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    const prof_pyroscope_conf_t *conf, prof_buffer_t *out,
    prof_pyroscope_info_t *info)
{
    int           rc;
    size_t        i;
    prof_push_t  *ps;

    memset(info, 0, sizeof(prof_pyroscope_info_t));
    out->length = 0;

    ps = calloc(1, sizeof(prof_push_t));
    if (ps == NULL) {
        return -ENOMEM;
    }

    ps->profile = p;
    ps->agg = agg;
    ps->conf = conf;
    ps->info = info;
    ps->max_samples = conf->max_samples ? conf->max_samples
                                        : PROF_PYROSCOPE_MAX_SAMPLES;
    ps->max_bytes = conf->max_bytes ? conf->max_bytes
                                    : PROF_PYROSCOPE_MAX_BYTES;
    prof_intern_init(&ps->keys);
    prof_intern_init(&ps->endpoints);

    rc = prof_push_labels(ps);
    if (rc == 0) {
        rc = prof_push_fold_endpoints(ps);
    }
    if (rc == 0) {
        rc = prof_push_merge(ps);
    }
    if (rc == 0) {
        rc = prof_push_series(ps, 0, out);
    }
    if (rc == 0) {
        rc = prof_push_series(ps, 1, out);
    }

    for (i = 0; i < ps->label_count; i++) {
        free(ps->labels[i].name);
        free(ps->labels[i].value);
    }

    prof_intern_free(&ps->keys);
    prof_intern_free(&ps->endpoints);
    free(ps->values);
    free(ps->folded);
    free(ps);

    return rc;
}
