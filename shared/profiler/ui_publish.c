/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A closed profile, named and merged, written as one record of the
 * page's store.
 */

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel/ui_record.h"
#include "common/buffer.h"
#include "common/clock.h"
#include "common/intern.h"
#include "profiler/ui_publish.h"


/* A sample's labels: what it is merged by. */
typedef struct {
    uint32_t     stack;
    uint32_t     endpoint;
    uint32_t     stall_ms;
    uint32_t     pad;
    uint64_t     span_id;
    uint64_t     root_span_id;
    uint64_t     trace_id_high;
    uint64_t     trace_id_low;
} prof_ui_key_t;


typedef struct {
    prof_intern_t   strings;        /* bytes with their NUL */
    uint32_t       *string_offset;  /* by string index */
    size_t          string_cap;
    prof_buffer_t   string_bytes;
    prof_intern_t   frames;         /* prof_ui_frame_t */
    prof_buffer_t   words;          /* uint32_t */
    uint32_t       *stack_word;     /* by the profile's stack, + 1 */
    prof_intern_t   keys;           /* prof_ui_key_t */
    int64_t        *values;         /* keys' PROF_UI_VALUES */
    size_t          values_cap;     /* in keys */
} prof_ui_build_t;


/* The offset of string s in the record's strings, or -ENOMEM. */
static int64_t
prof_ui_string(prof_ui_build_t *b, const char *s)
{
    int        inserted;
    size_t     length, cap;
    int64_t    index;
    uint32_t  *offsets;

    if (s == NULL || *s == '\0') {
        return 0;
    }

    length = strlen(s) + 1;

    index = prof_intern(&b->strings, s, length, &inserted);
    if (index < 0) {
        return -ENOMEM;
    }

    if (!inserted) {
        return b->string_offset[index];
    }

    if ((size_t) index >= b->string_cap) {
        cap = b->string_cap ? b->string_cap * 2 : 256;
        offsets = realloc(b->string_offset, cap * sizeof(uint32_t));
        if (offsets == NULL) {
            return -ENOMEM;
        }
        b->string_offset = offsets;
        b->string_cap = cap;
    }

    b->string_offset[index] = (uint32_t) b->string_bytes.length;

    if (prof_buffer_append(&b->string_bytes, s, length) != 0) {
        return -ENOMEM;
    }

    return b->string_offset[index];
}


/* The index of a frame named so, or -ENOMEM. */
static int64_t
prof_ui_frame(prof_ui_build_t *b, const char *name, const char *file,
    int64_t line)
{
    int              inserted;
    int64_t          n, f;
    prof_ui_frame_t  frame;

    memset(&frame, 0, sizeof(frame));

    n = prof_ui_string(b, name);
    f = prof_ui_string(b, file);
    if (n < 0 || f < 0) {
        return -ENOMEM;
    }

    frame.name = (uint32_t) n;
    frame.file = (uint32_t) f;
    frame.line = (line > 0 && line < UINT32_MAX) ? (uint32_t) line : 0;
    frame.flags = (file != NULL) ? PROF_UI_FRAME_LUA : 0;

    f = prof_intern(&b->frames, &frame, sizeof(frame), &inserted);

    return (f < 0) ? -ENOMEM : f;
}


/* An address without a function: its object's name, as [libc.so.6]. */
static const char *
prof_ui_unnamed(const prof_address_t *a, char *buf, size_t size)
{
    const char  *base;

    if (a == NULL || a->object == NULL || a->object->path == NULL) {
        return "[unknown]";
    }

    base = strrchr(a->object->path, '/');
    base = (base != NULL) ? base + 1 : a->object->path;

    if (snprintf(buf, size, "[%s]", base) < 0) {
        return "[unknown]";
    }

    return buf;
}


/* The words of the profile's stack s: its frames, leaf first. */
static int64_t
prof_ui_stack(prof_ui_build_t *b, const prof_profile_t *profile,
    prof_aggregator_t *agg, uint32_t s)
{
    char                   buf[256];
    size_t                 length, i, k, start;
    int64_t                f;
    uint32_t               word, count;
    const uint64_t        *pcs;
    const prof_address_t  *a;

    if (b->stack_word[s] != 0) {
        return b->stack_word[s] - 1;
    }

    pcs = prof_intern_key(&profile->stacks, s, &length);
    length /= sizeof(uint64_t);

    start = b->words.length / sizeof(uint32_t);
    count = 0;

    if (prof_buffer_append(&b->words, &count, sizeof(count)) != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < length; i++) {
        a = prof_aggregator_address(agg, pcs[i]);

        if (a != NULL && a->function != NULL) {
            for (k = 0; k < a->ninlines && k < PROF_INLINES_MAX; k++) {
                f = prof_ui_frame(b, a->inlines[k].function, NULL, 0);
                word = (uint32_t) f;
                if (f < 0 || prof_buffer_append(&b->words, &word,
                                                sizeof(word)) != 0)
                {
                    return -ENOMEM;
                }
                count++;
            }

            f = prof_ui_frame(b, a->function, a->file, a->start_line);

        } else {
            f = prof_ui_frame(b, prof_ui_unnamed(a, buf, sizeof(buf)),
                              NULL, 0);
        }

        word = (uint32_t) f;
        if (f < 0
            || prof_buffer_append(&b->words, &word, sizeof(word)) != 0)
        {
            return -ENOMEM;
        }
        count++;
    }

    memcpy(b->words.data + start * sizeof(uint32_t), &count, sizeof(count));
    b->stack_word[s] = (uint32_t) start + 1;

    return start;
}


static int
prof_ui_add(prof_ui_build_t *b, const prof_profile_t *profile,
    prof_aggregator_t *agg, const prof_sample_key_t *key,
    const int64_t *values)
{
    int             inserted;
    size_t          length, cap;
    int64_t         index, stack, endpoint, *v;
    const char     *name;
    prof_ui_key_t   k;

    if (values[PROF_VALUE_CPU_TIME] == 0 && values[PROF_VALUE_WALL_TIME] == 0
        && values[PROF_VALUE_OFF_CPU_TIME] == 0)
    {
        return 0;
    }

    stack = prof_ui_stack(b, profile, agg, key->stack);
    if (stack < 0) {
        return -ENOMEM;
    }

    endpoint = 0;

    if (key->endpoint > 0 && key->endpoint <= profile->endpoints.count) {
        name = prof_intern_key(&profile->endpoints, key->endpoint - 1,
                               &length);
        /* A client's bytes: up to a NUL, and not over 200. */
        if (length > 200) {
            length = 200;
        }

        if (length > 0) {
            char  copy[201];

            memcpy(copy, name, length);
            copy[length] = '\0';
            endpoint = prof_ui_string(b, copy);
            if (endpoint < 0) {
                return -ENOMEM;
            }
        }
    }

    memset(&k, 0, sizeof(k));
    k.stack = (uint32_t) stack;
    k.endpoint = (uint32_t) endpoint;
    k.stall_ms = key->stall_ms;
    k.span_id = key->span_id;
    k.root_span_id = key->local_root_span_id;
    k.trace_id_high = key->trace_id_high;
    k.trace_id_low = key->trace_id_low;

    index = prof_intern(&b->keys, &k, sizeof(k), &inserted);
    if (index < 0) {
        return -ENOMEM;
    }

    if ((size_t) index >= b->values_cap) {
        cap = b->values_cap ? b->values_cap * 2 : 256;
        v = realloc(b->values, cap * PROF_UI_VALUES * sizeof(int64_t));
        if (v == NULL) {
            return -ENOMEM;
        }
        b->values = v;
        b->values_cap = cap;
    }

    v = &b->values[index * PROF_UI_VALUES];

    if (inserted) {
        memset(v, 0, PROF_UI_VALUES * sizeof(int64_t));
    }

    v[PROF_UI_CPU] += values[PROF_VALUE_CPU_TIME];
    v[PROF_UI_WALL] += values[PROF_VALUE_WALL_TIME];
    v[PROF_UI_OFF_CPU] += values[PROF_VALUE_OFF_CPU_TIME];

    return 0;
}


/* The record, from the tables built: 0 or -ENOMEM. */
static int
prof_ui_encode(prof_ui_build_t *b, pid_t pid, const prof_profile_t *profile,
    prof_buffer_t *out)
{
    size_t              i, pad;
    uint64_t            zero = 0;
    prof_ui_key_t       k;
    prof_ui_sample_t    s;
    prof_ui_record_t    r;

    memset(&r, 0, sizeof(r));
    r.version = PROF_UI_RECORD_VERSION;
    r.pid = (int32_t) pid;
    r.sequence = profile->sequence;
    r.start_ns = profile->start_realtime_ns;
    r.duration_ns = profile->duration_ns;
    r.frame_count = b->frames.count;
    r.sample_count = b->keys.count;
    r.stack_words = (uint32_t) (b->words.length / sizeof(uint32_t));
    r.strings_bytes = (uint32_t) ((b->string_bytes.length + 7) & ~7);

    if (prof_buffer_append(out, &r, sizeof(r)) != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < b->frames.count; i++) {
        if (prof_buffer_append(out, prof_intern_key(&b->frames, i, NULL),
                               sizeof(prof_ui_frame_t)) != 0)
        {
            return -ENOMEM;
        }
    }

    for (i = 0; i < b->keys.count; i++) {
        memcpy(&k, prof_intern_key(&b->keys, i, NULL), sizeof(k));
        memset(&s, 0, sizeof(s));
        s.stack = k.stack;
        s.endpoint = k.endpoint;
        s.stall_ms = k.stall_ms;
        s.span_id = k.span_id;
        s.root_span_id = k.root_span_id;
        s.trace_id_high = k.trace_id_high;
        s.trace_id_low = k.trace_id_low;
        memcpy(s.values, &b->values[i * PROF_UI_VALUES], sizeof(s.values));

        if (prof_buffer_append(out, &s, sizeof(s)) != 0) {
            return -ENOMEM;
        }
    }

    pad = (8 - b->words.length % 8) % 8;

    if (prof_buffer_append(out, b->words.data, b->words.length) != 0
        || prof_buffer_append(out, &zero, pad) != 0
        || prof_buffer_append(out, b->string_bytes.data,
                              b->string_bytes.length) != 0
        || prof_buffer_append(out, &zero,
                              r.strings_bytes - b->string_bytes.length)
           != 0)
    {
        return -ENOMEM;
    }

    return 0;
}


/* A sample of the stacks left out, their values summed: one frame. */
static int
prof_ui_add_other(prof_ui_build_t *b, const int64_t *other)
{
    int             inserted;
    size_t          cap;
    int64_t         frame, index, *v;
    uint32_t        words[2];
    prof_ui_key_t   k;

    frame = prof_ui_frame(b, "[other stacks]", NULL, 0);
    if (frame < 0) {
        return -ENOMEM;
    }

    memset(&k, 0, sizeof(k));
    k.stack = (uint32_t) (b->words.length / sizeof(uint32_t));
    words[0] = 1;
    words[1] = (uint32_t) frame;

    if (prof_buffer_append(&b->words, words, sizeof(words)) != 0) {
        return -ENOMEM;
    }

    index = prof_intern(&b->keys, &k, sizeof(k), &inserted);
    if (index < 0) {
        return -ENOMEM;
    }

    if ((size_t) index >= b->values_cap) {
        cap = b->values_cap ? b->values_cap * 2 : 256;
        v = realloc(b->values, cap * PROF_UI_VALUES * sizeof(int64_t));
        if (v == NULL) {
            return -ENOMEM;
        }
        b->values = v;
        b->values_cap = cap;
    }

    memcpy(&b->values[index * PROF_UI_VALUES], other,
           PROF_UI_VALUES * sizeof(int64_t));

    return 0;
}


static void
prof_ui_build_free(prof_ui_build_t *b)
{
    prof_buffer_free(&b->string_bytes);
    prof_buffer_free(&b->words);
    prof_intern_free(&b->strings);
    prof_intern_free(&b->frames);
    prof_intern_free(&b->keys);
    free(b->string_offset);
    free(b->stack_word);
    free(b->values);
}


/* A sample's weight: what the page shows of it (CPU and wall time). */
static int64_t
prof_ui_weight(const int64_t *values)
{
    return values[PROF_VALUE_CPU_TIME] + values[PROF_VALUE_WALL_TIME];
}


/*
 * The record of the profile's samples, those not kept (kept[i] 0; kept
 * NULL: all are) folded into one: 0 or -ENOMEM; out empty when nothing
 * is held.
 */
static int
prof_ui_build(const prof_profile_t *profile, prof_aggregator_t *agg,
    pid_t pid, const unsigned char *kept, prof_buffer_t *out)
{
    int                rc;
    uint32_t           i;
    int64_t            other[PROF_UI_VALUES];
    const int64_t     *values;
    prof_ui_build_t    b;
    prof_sample_key_t  key;

    memset(&b, 0, sizeof(b));
    memset(other, 0, sizeof(other));
    prof_intern_init(&b.strings);
    prof_intern_init(&b.frames);
    prof_intern_init(&b.keys);

    rc = -ENOMEM;
    out->length = 0;

    /* Offset 0: the empty string. */
    if (prof_buffer_append(&b.string_bytes, "", 1) != 0) {
        goto done;
    }

    b.stack_word = calloc(profile->stacks.count + 1, sizeof(uint32_t));
    if (b.stack_word == NULL) {
        goto done;
    }

    for (i = 0; i < profile->keys.count; i++) {
        memcpy(&key, prof_intern_key(&profile->keys, i, NULL), sizeof(key));
        values = &profile->values[(size_t) i * PROF_VALUE_COUNT];

        if (key.stack >= profile->stacks.count) {
            continue;
        }

        if (kept != NULL && !kept[i]) {
            other[PROF_UI_CPU] += values[PROF_VALUE_CPU_TIME];
            other[PROF_UI_WALL] += values[PROF_VALUE_WALL_TIME];
            other[PROF_UI_OFF_CPU] += values[PROF_VALUE_OFF_CPU_TIME];
            continue;
        }

        if (prof_ui_add(&b, profile, agg, &key, values) != 0) {
            goto done;
        }
    }

    if ((other[PROF_UI_CPU] != 0 || other[PROF_UI_WALL] != 0)
        && prof_ui_add_other(&b, other) != 0)
    {
        goto done;
    }

    rc = 0;

    if (b.keys.count > 0) {
        rc = prof_ui_encode(&b, pid, profile, out);
    }

done:

    prof_ui_build_free(&b);

    return rc;
}


/* A sample's weight and index, to be sorted heaviest first. */
typedef struct {
    int64_t      weight;
    uint32_t     key;
    uint32_t     pad;
} prof_ui_rank_t;


static int
prof_ui_compare_ranks(const void *a, const void *b)
{
    const prof_ui_rank_t  *x = a, *y = b;

    if (x->weight != y->weight) {
        return (x->weight < y->weight) ? 1 : -1;
    }

    return (x->key > y->key) - (x->key < y->key);
}


int
prof_ui_publish(prof_ui_store_t *store, pid_t pid,
    const prof_profile_t *profile, prof_aggregator_t *agg, size_t max_bytes)
{
    int             rc, round;
    size_t          keep, n, i, fit;
    int64_t         stored_ns;
    unsigned char  *kept;
    prof_ui_rank_t *order;
    prof_buffer_t   out = { NULL, 0, 0 };

    rc = prof_ui_build(profile, agg, pid, NULL, &out);

    n = profile->keys.count;
    order = NULL;
    kept = NULL;
    keep = n;

    /* Too large for its share of the store: the lightest samples folded,
       fewer kept each round, until it fits (at worst all of them). */
    for (round = 0; rc == 0 && max_bytes > 0 && out.length > max_bytes
                    && round < 8; round++)
    {
        if (order == NULL) {
            order = malloc((n + 1) * sizeof(prof_ui_rank_t));
            kept = malloc(n + 1);
            if (order == NULL || kept == NULL) {
                rc = -ENOMEM;
                break;
            }

            for (i = 0; i < n; i++) {
                order[i].weight = prof_ui_weight(
                                    &profile->values[i * PROF_VALUE_COUNT]);
                order[i].key = (uint32_t) i;
                order[i].pad = 0;
            }

            qsort(order, n, sizeof(prof_ui_rank_t), prof_ui_compare_ranks);
        }

        fit = (size_t) ((double) keep * max_bytes / out.length * 0.9);
        keep = (round == 7 || keep == 0) ? 0
               : (fit < keep) ? fit : keep - 1;

        memset(kept, 0, n + 1);
        for (i = 0; i < keep && i < n; i++) {
            kept[order[i].key] = 1;
        }

        rc = prof_ui_build(profile, agg, pid, kept, &out);
    }

    free(order);
    free(kept);

    if (rc == 0 && out.length > 0) {
        stored_ns = prof_clock_ns(CLOCK_REALTIME);
        memcpy(out.data + offsetof(prof_ui_record_t, stored_ns), &stored_ns,
               sizeof(stored_ns));
        rc = prof_ui_store_write(store, out.data, out.length);
    }

    prof_buffer_free(&out);

    return rc;
}
