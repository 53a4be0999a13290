/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The page's view of the store's records: chosen, checked, merged, and
 * rendered as JSON or pprof.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "channel/ui_record.h"
#include "channel/ui_view.h"
#include "common/intern.h"
#include "common/utf8.h"


#define PROF_UI_WORKERS_MAX    256
#define PROF_UI_ENDPOINTS_MAX  200


typedef struct {
    int32_t      pid;
    uint32_t     profiles;
    int64_t      latest_ns;         /* its latest record's end */
} prof_ui_worker_t;


/* A record, its parts found and checked. */
typedef struct {
    prof_ui_record_t         head;
    const prof_ui_frame_t   *frames;
    const prof_ui_sample_t  *samples;
    const uint32_t          *words;
    const char              *strings;
} prof_ui_parsed_t;


struct prof_ui_view_s {
    prof_intern_t     frames;       /* name NUL file NUL line flags */
    prof_intern_t     stacks;       /* uint32_t view frames, leaf first */
    int64_t          *values;       /* stacks' PROF_UI_VALUES */
    size_t            values_cap;
    prof_intern_t     endpoints;    /* names, in the window */
    prof_ui_worker_t  workers[PROF_UI_WORKERS_MAX];
    size_t            worker_count;
    int64_t           at_ns;        /* as of (the records stored by) */
    int64_t           from_ns;      /* of the records read */
    int64_t           to_ns;
    uint64_t          records;      /* read */
    uint64_t          stall_samples;
    int64_t           totals[PROF_UI_VALUES];
};


static int
prof_ui_parse(const unsigned char *p, size_t length, prof_ui_parsed_t *r)
{
    uint64_t  need, frames, samples, words;

    if (length < sizeof(prof_ui_record_t)) {
        return -1;
    }

    memcpy(&r->head, p, sizeof(prof_ui_record_t));

    if (r->head.version != PROF_UI_RECORD_VERSION
        || r->head.strings_bytes == 0)
    {
        return -1;
    }

    frames = (uint64_t) r->head.frame_count * sizeof(prof_ui_frame_t);
    samples = (uint64_t) r->head.sample_count * sizeof(prof_ui_sample_t);
    words = ((uint64_t) r->head.stack_words * sizeof(uint32_t) + 7) & ~7ULL;
    need = sizeof(prof_ui_record_t) + frames + samples + words
           + r->head.strings_bytes;

    if (need > length) {
        return -1;
    }

    p += sizeof(prof_ui_record_t);
    r->frames = (const prof_ui_frame_t *) p;
    r->samples = (const prof_ui_sample_t *) (p + frames);
    r->words = (const uint32_t *) (p + frames + samples);
    r->strings = (const char *) (p + frames + samples + words);

    if (r->strings[r->head.strings_bytes - 1] != '\0') {
        return -1;
    }

    return 0;
}


static const char *
prof_ui_string(const prof_ui_parsed_t *r, uint32_t offset)
{
    return (offset < r->head.strings_bytes) ? r->strings + offset : "";
}


/* The view's frame for the record's frame f: its index, or -1. */
static int64_t
prof_ui_view_frame(prof_ui_view_t *v, const prof_ui_parsed_t *r, uint32_t f,
    int64_t *map, prof_buffer_t *key)
{
    int                      inserted;
    int64_t                  index;
    const char              *name, *file;
    const prof_ui_frame_t   *frame;

    if (f >= r->head.frame_count) {
        return -1;
    }

    if (map[f] >= 0) {
        return map[f];
    }

    frame = &r->frames[f];
    name = prof_ui_string(r, frame->name);
    file = prof_ui_string(r, frame->file);

    key->length = 0;
    if (prof_buffer_append(key, name, strlen(name) + 1) != 0
        || prof_buffer_append(key, file, strlen(file) + 1) != 0
        || prof_buffer_append(key, &frame->line, sizeof(frame->line)) != 0
        || prof_buffer_append(key, &frame->flags, sizeof(frame->flags))
           != 0)
    {
        return -2;
    }

    index = prof_intern(&v->frames, key->data, key->length, &inserted);
    if (index < 0) {
        return -2;
    }

    map[f] = index;

    return index;
}


static int
prof_ui_filter_sample(const prof_ui_filter_t *f, const prof_ui_parsed_t *r,
    const prof_ui_sample_t *s)
{
    const char  *endpoint;

    if (f->stalls_only && s->stall_ms == 0) {
        return 0;
    }

    if (f->has_span && s->span_id != f->span_id
        && s->root_span_id != f->span_id)
    {
        return 0;
    }

    if (f->has_trace && (s->trace_id_low != f->trace_id_low
                         || (f->trace_id_high != 0
                             && s->trace_id_high != f->trace_id_high)))
    {
        return 0;
    }

    if (f->endpoint != NULL) {
        endpoint = prof_ui_string(r, s->endpoint);
        if (strlen(endpoint) != f->endpoint_length
            || memcmp(endpoint, f->endpoint, f->endpoint_length) != 0)
        {
            return 0;
        }
    }

    return 1;
}


/* A record's samples that pass the filter, added. */
static int
prof_ui_view_add(prof_ui_view_t *v, const prof_ui_parsed_t *r,
    const prof_ui_filter_t *f)
{
    int                      inserted, rc;
    size_t                   cap;
    int64_t                 *map, *values, frame, index;
    uint32_t                 i, k, n, at;
    const char              *endpoint;
    prof_buffer_t            key = { NULL, 0, 0 }, stack = { NULL, 0, 0 };
    const prof_ui_sample_t  *s;

    map = malloc(((size_t) r->head.frame_count + 1) * sizeof(int64_t));
    if (map == NULL) {
        return -ENOMEM;
    }

    memset(map, 0xff, ((size_t) r->head.frame_count + 1) * sizeof(int64_t));
    rc = 0;

    for (i = 0; i < r->head.sample_count; i++) {
        s = &r->samples[i];

        endpoint = prof_ui_string(r, s->endpoint);
        if (*endpoint != '\0'
            && v->endpoints.count < PROF_UI_ENDPOINTS_MAX
            && prof_intern(&v->endpoints, endpoint, strlen(endpoint),
                           &inserted) < 0)
        {
            rc = -ENOMEM;
            break;
        }

        if (!prof_ui_filter_sample(f, r, s)) {
            continue;
        }

        at = s->stack;
        if (at >= r->head.stack_words) {
            continue;
        }

        n = r->words[at];
        if (n > r->head.stack_words - at - 1) {
            continue;
        }

        stack.length = 0;

        for (k = 0; k < n; k++) {
            frame = prof_ui_view_frame(v, r, r->words[at + 1 + k], map,
                                       &key);
            if (frame == -2) {
                rc = -ENOMEM;
                goto done;
            }

            if (frame >= 0) {
                uint32_t  w = (uint32_t) frame;

                if (prof_buffer_append(&stack, &w, sizeof(w)) != 0) {
                    rc = -ENOMEM;
                    goto done;
                }
            }
        }

        index = prof_intern(&v->stacks,
                            stack.length ? (const void *) stack.data : "",
                            stack.length, &inserted);
        if (index < 0) {
            rc = -ENOMEM;
            break;
        }

        if ((size_t) index >= v->values_cap) {
            cap = v->values_cap ? v->values_cap * 2 : 1024;
            values = realloc(v->values, cap * PROF_UI_VALUES
                                        * sizeof(int64_t));
            if (values == NULL) {
                rc = -ENOMEM;
                break;
            }
            v->values = values;
            v->values_cap = cap;
        }

        values = &v->values[index * PROF_UI_VALUES];
        if (inserted) {
            memset(values, 0, PROF_UI_VALUES * sizeof(int64_t));
        }

        for (k = 0; k < PROF_UI_VALUES; k++) {
            if (s->values[k] > 0) {
                values[k] += s->values[k];
                v->totals[k] += s->values[k];
            }
        }

        if (s->stall_ms != 0) {
            v->stall_samples++;
        }
    }

done:

    prof_buffer_free(&key);
    prof_buffer_free(&stack);
    free(map);

    return rc;
}


static prof_ui_worker_t *
prof_ui_view_worker(prof_ui_view_t *v, int32_t pid)
{
    size_t  i;

    for (i = 0; i < v->worker_count; i++) {
        if (v->workers[i].pid == pid) {
            return &v->workers[i];
        }
    }

    if (v->worker_count == PROF_UI_WORKERS_MAX) {
        return NULL;
    }

    v->workers[v->worker_count].pid = pid;
    return &v->workers[v->worker_count++];
}


int
prof_ui_view_build(prof_ui_view_t **view, const unsigned char *records,
    size_t length, const prof_ui_filter_t *f)
{
    int                rc;
    size_t             at;
    int64_t            end;
    prof_ui_view_t    *v;
    prof_ui_chunk_t    chunk;
    prof_ui_parsed_t   r;
    prof_ui_worker_t  *w;

    *view = NULL;

    v = calloc(1, sizeof(prof_ui_view_t));
    if (v == NULL) {
        return -ENOMEM;
    }

    v->at_ns = (f->at_ns != 0) ? f->at_ns : f->now_ns;
    prof_intern_init(&v->frames);
    prof_intern_init(&v->stacks);
    prof_intern_init(&v->endpoints);

    /* First the workers and their latest records. */
    for (at = 0; at + sizeof(chunk) <= length; at += chunk.length) {
        memcpy(&chunk, records + at, sizeof(chunk));
        if (chunk.length < sizeof(chunk) || chunk.length > length - at) {
            break;
        }

        if (prof_ui_parse(records + at + sizeof(chunk),
                          chunk.length - sizeof(chunk), &r) != 0)
        {
            continue;
        }

        if (f->at_ns != 0 && r.head.stored_ns > f->at_ns) {
            continue;                   /* stored after the view's time */
        }

        if (f->at_ns == 0 && r.head.stored_ns > v->at_ns) {
            v->at_ns = r.head.stored_ns;
        }

        end = r.head.start_ns + r.head.duration_ns;
        if (f->until_ns != 0 && end > f->until_ns) {
            continue;
        }

        w = prof_ui_view_worker(v, r.head.pid);
        if (w == NULL) {
            continue;
        }

        w->profiles++;
        if (end > w->latest_ns) {
            w->latest_ns = end;
        }
    }

    for (at = 0; at + sizeof(chunk) <= length; at += chunk.length) {
        memcpy(&chunk, records + at, sizeof(chunk));
        if (chunk.length < sizeof(chunk) || chunk.length > length - at) {
            break;
        }

        if (prof_ui_parse(records + at + sizeof(chunk),
                          chunk.length - sizeof(chunk), &r) != 0)
        {
            continue;
        }

        end = r.head.start_ns + r.head.duration_ns;

        if ((f->pid != 0 && r.head.pid != f->pid)
            || (f->since_ns != 0 && end <= f->since_ns)
            || (f->until_ns != 0 && end > f->until_ns)
            || (f->at_ns != 0 && r.head.stored_ns > f->at_ns))
        {
            continue;
        }

        if (f->last_only) {
            w = prof_ui_view_worker(v, r.head.pid);
            if (w == NULL || w->latest_ns != end) {
                continue;
            }
        }

        rc = prof_ui_view_add(v, &r, f);
        if (rc != 0) {
            prof_ui_view_free(v);
            return rc;
        }

        if (v->records == 0 || r.head.start_ns < v->from_ns) {
            v->from_ns = r.head.start_ns;
        }

        if (end > v->to_ns) {
            v->to_ns = end;
        }

        v->records++;
    }

    *view = v;

    return 0;
}


/* The decimal digits of n at p: the end. */
static char *
prof_ui_digits(char *p, uint64_t n)
{
    char    digits[20];
    size_t  i;

    i = 0;

    do {
        digits[i++] = (char) ('0' + n % 10);
        n /= 10;
    } while (n != 0);

    while (i > 0) {
        *p++ = digits[--i];
    }

    return p;
}


static char *
prof_ui_cpy(char *p, const char *s)
{
    while (*s != '\0') {
        *p++ = *s++;
    }

    return p;
}


int
prof_ui_view_json(const prof_ui_view_t *v, prof_buffer_t *out,
    const prof_ui_store_stats_t *st)
{
    char            *p;
    size_t           i, k, length, n, name_length;
    const char      *key;
    const int64_t   *values;
    const uint32_t  *frames;
    uint32_t         line, flags;

    /* at_ms rounded up: every record read was stored by then */
    if (prof_buffer_printf(out, "{\"at_ms\":%lld,"
                           "\"from_ms\":%lld,\"to_ms\":%lld,"
                           "\"profiles\":%llu,\"stall_samples\":%llu,"
                           "\"totals\":[%lld,%lld,%lld],\"workers\":[",
                           (long long) ((v->at_ns + 999999) / 1000000),
                           (long long) (v->from_ns / 1000000),
                           (long long) (v->to_ns / 1000000),
                           (unsigned long long) v->records,
                           (unsigned long long) v->stall_samples,
                           (long long) v->totals[0],
                           (long long) v->totals[1],
                           (long long) v->totals[2]) != 0)
    {
        return -ENOMEM;
    }

    for (i = 0; i < v->worker_count; i++) {
        if (prof_buffer_printf(out, "%s{\"pid\":%d,\"profiles\":%u,"
                               "\"latest_ms\":%lld}", i ? "," : "",
                               (int) v->workers[i].pid,
                               v->workers[i].profiles,
                               (long long) (v->workers[i].latest_ns
                                            / 1000000)) != 0)
        {
            return -ENOMEM;
        }
    }

    if (prof_buffer_append_str(out, "],\"endpoints\":[") != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < v->endpoints.count; i++) {
        key = prof_intern_key(&v->endpoints, i, &length);
        if ((i && prof_buffer_append(out, ",", 1) != 0)
            || prof_utf8_append_json(out, key, length) != 0)
        {
            return -ENOMEM;
        }
    }

    if (st != NULL
        && prof_buffer_printf(out, "],\"store\":{\"size\":%llu,\"used\":%llu,"
                              "\"records\":%llu,\"dropped\":%llu,"
                              "\"too_large\":%llu,\"busy\":%llu",
                              (unsigned long long) st->size,
                              (unsigned long long) st->used,
                              (unsigned long long) st->records_held,
                              (unsigned long long) st->dropped,
                              (unsigned long long) st->too_large,
                              (unsigned long long) st->busy) != 0)
    {
        return -ENOMEM;
    }

    if (prof_buffer_append_str(out, st ? "},\"frames\":[" : "],\"frames\":[")
        != 0)
    {
        return -ENOMEM;
    }

    for (i = 0; i < v->frames.count; i++) {
        key = prof_intern_key(&v->frames, i, &length);
        name_length = strlen(key);
        n = name_length + 1 + strlen(key + name_length + 1) + 1;
        memcpy(&line, key + n, sizeof(line));
        memcpy(&flags, key + n + sizeof(line), sizeof(flags));

        if ((i && prof_buffer_append(out, ",", 1) != 0)
            || prof_buffer_append(out, "[", 1) != 0
            || prof_utf8_append_json(out, key, name_length) != 0
            || prof_buffer_append(out, ",", 1) != 0
            || prof_utf8_append_json(out, key + name_length + 1,
                                     n - name_length - 2) != 0
            || prof_buffer_printf(out, ",%u,%u]", line,
                                  flags & PROF_UI_FRAME_LUA) != 0)
        {
            return -ENOMEM;
        }
    }

    if (prof_buffer_append_str(out, "],\"stacks\":[") != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < v->stacks.count; i++) {
        frames = prof_intern_key(&v->stacks, i, &length);
        length /= sizeof(uint32_t);
        values = &v->values[i * PROF_UI_VALUES];

        /* A stack's line: its frames and values, the digits written here
           (printf's cost, a stack at a time, was most of the page's). */
        if (prof_buffer_reserve(out, 8 + length * 11 + 3 * 21) != 0) {
            return -ENOMEM;
        }

        p = (char *) out->data + out->length;
        p = prof_ui_cpy(p, i ? ",[[" : "[[");

        for (k = 0; k < length; k++) {
            if (k) {
                *p++ = ',';
            }
            p = prof_ui_digits(p, frames[k]);
        }

        *p++ = ']';

        for (k = 0; k < PROF_UI_VALUES; k++) {
            *p++ = ',';
            p = prof_ui_digits(p, values[k] > 0 ? (uint64_t) values[k] : 0);
        }

        *p++ = ']';
        out->length = p - (char *) out->data;
    }

    return prof_buffer_append_str(out, "]}\n");
}


/* protobuf: a varint, a tag, a length-delimited field. */
static int
prof_ui_pb_varint(prof_buffer_t *b, uint64_t value)
{
    size_t         n;
    unsigned char  bytes[10];

    for (n = 0; value >= 0x80; n++) {
        bytes[n] = (unsigned char) (value | 0x80);
        value >>= 7;
    }

    bytes[n++] = (unsigned char) value;

    return prof_buffer_append(b, bytes, n);
}


static int
prof_ui_pb_uint(prof_buffer_t *b, uint32_t field, uint64_t value)
{
    if (value == 0) {
        return 0;
    }

    return (prof_ui_pb_varint(b, (uint64_t) field << 3) != 0
            || prof_ui_pb_varint(b, value) != 0) ? -ENOMEM : 0;
}


static int
prof_ui_pb_bytes(prof_buffer_t *b, uint32_t field, const void *data,
    size_t length)
{
    return (prof_ui_pb_varint(b, ((uint64_t) field << 3) | 2) != 0
            || prof_ui_pb_varint(b, length) != 0
            || prof_buffer_append(b, data, length) != 0) ? -ENOMEM : 0;
}


/* A string's index in the table, interned now; or -ENOMEM. */
static int64_t
prof_ui_pb_string(prof_intern_t *strings, prof_buffer_t *table,
    const char *s)
{
    int            inserted;
    size_t         length;
    int64_t        index;
    prof_buffer_t  clean = { NULL, 0, 0 };

    length = strlen(s);

    index = prof_intern(strings, s, length, &inserted);
    if (index < 0) {
        return -ENOMEM;
    }

    if (inserted) {
        /* pprof's strings are UTF-8: the page's names are any bytes. */
        if (prof_utf8_append(&clean, s, length) != 0
            || prof_ui_pb_bytes(table, 6,
                                clean.length ? (const void *) clean.data : "",
                                clean.length) != 0)
        {
            prof_buffer_free(&clean);
            return -ENOMEM;
        }
        prof_buffer_free(&clean);
    }

    return index;
}


int
prof_ui_view_pprof(const prof_ui_view_t *v, prof_buffer_t *out,
    unsigned shown)
{
    int              rc;
    size_t           i, k, length, n;
    int64_t          name, file, s[6];
    const char      *key;
    const int64_t   *values;
    const uint32_t  *frames;
    uint32_t         line;
    prof_buffer_t    table = { NULL, 0, 0 }, msg = { NULL, 0, 0 },
                     packed = { NULL, 0, 0 }, inner = { NULL, 0, 0 };
    prof_intern_t    strings;
    static const char  *names[6] = {
        "cpu-time", "nanoseconds", "wall-time", "nanoseconds",
        "off-cpu-time", "nanoseconds"
    };

    prof_intern_init(&strings);
    rc = -ENOMEM;

    if (prof_ui_pb_string(&strings, &table, "") < 0) {
        goto done;
    }

    for (i = 0; i < 6; i++) {
        s[i] = prof_ui_pb_string(&strings, &table, names[i]);
        if (s[i] < 0) {
            goto done;
        }
    }

    /* sample_type (1) */
    for (i = 0; i < 3; i++) {
        msg.length = 0;
        if (prof_ui_pb_uint(&msg, 1, s[2 * i]) != 0
            || prof_ui_pb_uint(&msg, 2, s[2 * i + 1]) != 0
            || prof_ui_pb_bytes(out, 1, msg.data, msg.length) != 0)
        {
            goto done;
        }
    }

    /* sample (2): location ids (a frame's index + 1), leaf first */
    for (i = 0; i < v->stacks.count; i++) {
        frames = prof_intern_key(&v->stacks, i, &length);
        length /= sizeof(uint32_t);
        values = &v->values[i * PROF_UI_VALUES];

        msg.length = 0;
        packed.length = 0;

        for (k = 0; k < length; k++) {
            if (prof_ui_pb_varint(&packed, (uint64_t) frames[k] + 1) != 0) {
                goto done;
            }
        }

        if (prof_ui_pb_bytes(&msg, 1, packed.data, packed.length) != 0) {
            goto done;
        }

        packed.length = 0;
        for (k = 0; k < PROF_UI_VALUES; k++) {
            if (prof_ui_pb_varint(&packed, (uint64_t) values[k]) != 0) {
                goto done;
            }
        }

        if (prof_ui_pb_bytes(&msg, 2, packed.data, packed.length) != 0
            || prof_ui_pb_bytes(out, 2, msg.data, msg.length) != 0)
        {
            goto done;
        }
    }

    /* location (4) and function (5): one each a frame */
    for (i = 0; i < v->frames.count; i++) {
        key = prof_intern_key(&v->frames, i, &length);
        n = strlen(key) + 1;
        name = prof_ui_pb_string(&strings, &table, key);
        file = prof_ui_pb_string(&strings, &table, key + n);
        n += strlen(key + n) + 1;
        memcpy(&line, key + n, sizeof(line));

        if (name < 0 || file < 0) {
            goto done;
        }

        msg.length = 0;
        inner.length = 0;

        if (prof_ui_pb_uint(&inner, 1, i + 1) != 0
            || prof_ui_pb_uint(&msg, 1, i + 1) != 0
            || prof_ui_pb_bytes(&msg, 4, inner.data, inner.length) != 0
            || prof_ui_pb_bytes(out, 4, msg.data, msg.length) != 0)
        {
            goto done;
        }

        msg.length = 0;

        if (prof_ui_pb_uint(&msg, 1, i + 1) != 0
            || prof_ui_pb_uint(&msg, 2, (uint64_t) name) != 0
            || prof_ui_pb_uint(&msg, 3, (uint64_t) name) != 0
            || prof_ui_pb_uint(&msg, 4, (uint64_t) file) != 0
            || prof_ui_pb_uint(&msg, 5, line) != 0
            || prof_ui_pb_bytes(out, 5, msg.data, msg.length) != 0)
        {
            goto done;
        }
    }

    /* string_table (6), time_nanos (9), duration_nanos (10),
       default_sample_type (14) */
    if (prof_buffer_append(out, table.data, table.length) != 0
        || prof_ui_pb_uint(out, 9, (uint64_t) v->from_ns) != 0
        || prof_ui_pb_uint(out, 10, (uint64_t) (v->to_ns - v->from_ns))
           != 0
        || prof_ui_pb_uint(out, 14,
                           (uint64_t) s[2 * (shown % PROF_UI_VALUES)]) != 0)
    {
        goto done;
    }

    rc = 0;

done:

    prof_intern_free(&strings);
    prof_buffer_free(&table);
    prof_buffer_free(&msg);
    prof_buffer_free(&packed);
    prof_buffer_free(&inner);

    return rc;
}


void
prof_ui_view_free(prof_ui_view_t *v)
{
    if (v == NULL) {
        return;
    }

    prof_intern_free(&v->frames);
    prof_intern_free(&v->stacks);
    prof_intern_free(&v->endpoints);
    free(v->values);
    free(v);
}
