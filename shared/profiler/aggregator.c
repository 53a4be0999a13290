/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Aggregator: interns stacks and (stack, request tag) keys of the open
 * profile, sums the values, has each address named once, when first seen
 * (aggregator_names.c), and at a barrier turns request tags into labels.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/aggregator.h"
#include "profiler/aggregator_internal.h"
#include "channel/endpoint_counts.h"
#include "channel/lua_frames.h"


/* Keys of a samples' table always kept between periods. */
#define PROF_RAW_KEYS_KEPT  1024


static prof_profile_t *
prof_profile_create(prof_aggregator_t *agg, int64_t start_realtime_ns)
{
    prof_profile_t  *p;

    p = calloc(1, sizeof(prof_profile_t));
    if (p == NULL) {
        return NULL;
    }

    p->sequence = agg->sequence++;
    p->start_realtime_ns = start_realtime_ns;
    p->period_ns = agg->conf.period_ns;
    p->thread_id = agg->conf.thread_id;
    p->thread_name = agg->conf.thread_name;
    prof_intern_init(&p->stacks);
    prof_intern_init(&p->keys);
    prof_intern_init(&p->endpoints);

    return p;
}


void
prof_profile_free(prof_profile_t *p)
{
    if (p == NULL) {
        return;
    }

    prof_intern_free(&p->stacks);
    prof_intern_free(&p->keys);
    prof_intern_free(&p->endpoints);
    prof_endpoint_counts_free(p->endpoint_counts);
    free(p->values);
    free(p);
}


prof_aggregator_t *
prof_aggregator_create(const prof_aggregator_conf_t *conf)
{
    prof_aggregator_t  *agg;

    agg = calloc(1, sizeof(prof_aggregator_t));
    if (agg == NULL) {
        return NULL;
    }

    agg->conf = *conf;
    agg->start_monotonic_ns = conf->start_monotonic_ns;
    prof_intern_init(&agg->addresses);
    prof_intern_init(&agg->raw_keys);
    prof_intern_init(&agg->tags);
    prof_intern_init(&agg->endpoint_names);

    agg->profile = prof_profile_create(agg, conf->start_realtime_ns);
    if (agg->profile == NULL) {
        free(agg);
        return NULL;
    }

    return agg;
}


void
prof_aggregator_destroy(prof_aggregator_t *agg)
{
    prof_profile_free(agg->profile);
    prof_intern_free(&agg->raw_keys);
    prof_intern_free(&agg->tags);
    prof_intern_free(&agg->endpoint_names);
    prof_aggregator_forget_addresses(agg);
    free(agg->raw_values);
    free(agg->labels);
    free(agg->address_info);
    free(agg);
}


int
prof_aggregator_reserve_values(int64_t **values, size_t *capacity,
    size_t keys)
{
    size_t    cap;
    int64_t  *v;

    if (keys <= *capacity) {
        return 0;
    }

    cap = *capacity ? *capacity * 2 : 256;
    while (cap < keys) {
        cap *= 2;
    }

    v = realloc(*values, cap * PROF_VALUE_COUNT * sizeof(int64_t));
    if (v == NULL) {
        return -ENOMEM;
    }

    memset(v + *capacity * PROF_VALUE_COUNT, 0,
           (cap - *capacity) * PROF_VALUE_COUNT * sizeof(int64_t));

    *values = v;
    *capacity = cap;

    return 0;
}


static int
prof_aggregator_add_sample(prof_aggregator_t *agg, const prof_sample_t *s)
{
    int                 inserted;
    int64_t             index, *v;
    unsigned            i, n;
    const uint64_t     *frames;
    prof_profile_t     *p = agg->profile;
    prof_raw_key_t      key;

    n = s->frame_count;
    if (n > PROF_MAX_FRAMES_LIMIT) {
        n = PROF_MAX_FRAMES_LIMIT;
    }

    /*
     * Callers' frames are return addresses: move them back into the call
     * instruction so that they symbolize to the calling function.
     */
    frames = prof_sample_frames(s);

    for (i = 0; i < n; i++) {
        agg->stack[i] = (i == 0 || PROF_FRAME_IS_MARKER(frames[i])
                         || PROF_FRAME_IS_LUA(frames[i]))
                        ? frames[i] : frames[i] - 1;
    }

    memset(&key, 0, sizeof(key));

    /*
     * A stack seen before in this profile has its addresses known; a new
     * one is interned only once they are (or its sample is dropped).
     */
    index = prof_intern_find(&p->stacks, agg->stack, n * sizeof(uint64_t));

    if (index < 0) {
        for (i = 0; i < n; i++) {
            if (prof_aggregator_symbolize_once(agg, agg->stack[i]) != 0) {
                return -ENOMEM;
            }
        }

        index = prof_intern(&p->stacks, agg->stack, n * sizeof(uint64_t),
                            &inserted);
        if (index < 0) {
            return -ENOMEM;
        }
    }

    key.stack = (uint32_t) index;
    key.stall_ms = s->stall_ms;
    key.tag = s->request;
    key.time_ns = agg->conf.timeline ? s->time_ns : 0;

    index = prof_intern(&agg->raw_keys, &key, sizeof(key), &inserted);
    if (index < 0
        || prof_aggregator_reserve_values(&agg->raw_values,
                                          &agg->raw_capacity, index + 1) != 0)
    {
        return -ENOMEM;
    }

    v = &agg->raw_values[index * PROF_VALUE_COUNT];
    v[PROF_VALUE_CPU_TIME] += s->cpu_ns;
    v[PROF_VALUE_CPU_SAMPLES] += s->cpu_samples;
    v[PROF_VALUE_WALL_TIME] += s->wall_ns;
    v[PROF_VALUE_WALL_SAMPLES] += s->wall_samples;
    v[PROF_VALUE_OFF_CPU_TIME] += s->off_cpu_ns;

    p->sample_count++;

    return 0;
}


int
prof_aggregator_add_labels(prof_aggregator_t *agg,
    const prof_labels_t *labels)
{
    int                 inserted;
    size_t              cap;
    int64_t             index, name;
    uint32_t            length;
    prof_tag_labels_t  *l;

    if (agg->tags.count >= PROF_LABELS_MAX) {
        prof_counter_add(agg->conf.diagnostics->labels_dropped, 1);
        return -ENOSPC;
    }

    if (agg->tags.count >= agg->labels_capacity) {
        cap = agg->labels_capacity ? agg->labels_capacity * 2 : 64;
        l = realloc(agg->labels, cap * sizeof(prof_tag_labels_t));
        if (l == NULL) {
            prof_counter_add(agg->conf.diagnostics->labels_dropped, 1);
            return -ENOMEM;
        }
        agg->labels = l;
        agg->labels_capacity = cap;
    }

    length = (labels->endpoint_length < PROF_ENDPOINT_MAX)
             ? labels->endpoint_length : PROF_ENDPOINT_MAX;
    name = (length > 0) ? prof_intern(&agg->endpoint_names, labels->endpoint,
                                      length, &inserted)
                        : -1;
    index = (length > 0 && name < 0)
            ? -1 : prof_intern(&agg->tags, &labels->tag, sizeof(uint64_t),
                               &inserted);
    if (index < 0) {
        prof_counter_add(agg->conf.diagnostics->labels_dropped, 1);
        return -ENOMEM;
    }

    l = &agg->labels[index];
    l->tag = labels->tag;
    l->request = labels->request;
    l->span_id = labels->span_id;
    l->local_root_span_id = labels->local_root_span_id;
    l->trace_id_high = labels->trace_id_high;
    l->trace_id_low = labels->trace_id_low;
    l->endpoint = (uint32_t) (name + 1);

    return 0;
}


/* Whether a resolution of a request is better than another: ids first,
   then the later one. */
static int
prof_labels_better(const prof_tag_labels_t *a, const prof_tag_labels_t *b)
{
    if ((a->span_id != 0) != (b->span_id != 0)) {
        return a->span_id != 0;
    }

    return a->tag > b->tag;
}


/*
 * The open profile's (stack, tag) sums, summed again per (stack, labels)
 * into its keys. Every tag of a request takes the request's best labels.
 */
static int
prof_aggregator_resolve(prof_aggregator_t *agg)
{
    int                      inserted;
    size_t                   length;
    int64_t                  index, t, r, *v, *to;
    uint32_t                 i, k, *best;
    const void              *name;
    prof_intern_t            requests;
    prof_profile_t          *p = agg->profile;
    prof_sample_key_t        key;
    const prof_raw_key_t    *raw;
    const prof_tag_labels_t *l;

    prof_intern_init(&requests);

    best = malloc((agg->tags.count + 1) * sizeof(uint32_t));
    if (best == NULL) {
        return -ENOMEM;
    }

    /* The best resolution of each request, among all known. */
    for (i = 0; i < agg->tags.count; i++) {
        r = prof_intern(&requests, &agg->labels[i].request, sizeof(uint64_t),
                        &inserted);
        if (r < 0) {
            goto failed;
        }

        if (inserted
            || prof_labels_better(&agg->labels[i], &agg->labels[best[r]]))
        {
            best[r] = i;
        }
    }

    for (k = 0; k < agg->raw_keys.count; k++) {
        raw = prof_intern_key(&agg->raw_keys, k, NULL);
        v = &agg->raw_values[k * PROF_VALUE_COUNT];

        memset(&key, 0, sizeof(key));
        key.stack = raw->stack;
        key.stall_ms = raw->stall_ms;

        if (raw->time_ns != 0) {
            key.end_timestamp_ns = p->start_realtime_ns
                                   + (raw->time_ns - agg->start_monotonic_ns);
        }

        t = (raw->tag != 0)
            ? prof_intern_find(&agg->tags, &raw->tag, sizeof(uint64_t)) : -1;

        if (t >= 0) {
            /* Its own ids, else the request's, known later. */
            l = &agg->labels[t];

            if (l->span_id == 0) {
                r = prof_intern_find(&requests, &l->request,
                                     sizeof(uint64_t));
                l = &agg->labels[best[r]];
            }

            key.span_id = l->span_id;
            key.local_root_span_id = l->local_root_span_id;
            key.trace_id_high = l->trace_id_high;
            key.trace_id_low = l->trace_id_low;

            if (l->endpoint > 0) {
                name = prof_intern_key(&agg->endpoint_names,
                                       l->endpoint - 1, &length);
                index = prof_intern(&p->endpoints, name, length, &inserted);
                if (index < 0) {
                    goto failed;
                }
                key.endpoint = (uint32_t) index + 1;
            }
        }

        index = prof_intern(&p->keys, &key, sizeof(key), &inserted);
        if (index < 0
            || prof_aggregator_reserve_values(&p->values,
                                              &p->values_capacity, index + 1)
               != 0)
        {
            goto failed;
        }

        to = &p->values[index * PROF_VALUE_COUNT];
        for (i = 0; i < PROF_VALUE_COUNT; i++) {
            to[i] += v[i];
        }
    }

    free(best);
    prof_intern_free(&requests);

    return 0;

failed:

    free(best);
    prof_intern_free(&requests);

    return -ENOMEM;
}


/*
 * Resolutions of the tags up to last_tag are done with: the rest stay,
 * with their endpoints' names (interned again; on a failure, a name is
 * lost, not a resolution). The memory of tables that outgrew what stays
 * is given back.
 */
static void
prof_aggregator_forget_labels(prof_aggregator_t *agg, uint64_t last_tag)
{
    int                 inserted;
    size_t              length;
    int64_t             name;
    uint32_t            i, kept;
    const void         *old;
    prof_intern_t       names;
    prof_tag_labels_t  *l;

    kept = 0;
    prof_intern_init(&names);

    for (i = 0; i < agg->tags.count; i++) {
        l = &agg->labels[i];

        if (l->tag <= last_tag) {
            continue;
        }

        if (l->endpoint > 0) {
            old = prof_intern_key(&agg->endpoint_names, l->endpoint - 1,
                                  &length);
            name = prof_intern(&names, old, length, &inserted);
            l->endpoint = (uint32_t) (name + 1);
        }

        agg->labels[kept++] = *l;
    }

    prof_intern_free(&agg->endpoint_names);
    agg->endpoint_names = names;

    if (kept >= agg->labels_capacity / 4) {
        prof_intern_clear(&agg->tags);

    } else {
        l = (kept > 0) ? malloc(kept * sizeof(prof_tag_labels_t)) : NULL;

        if (l != NULL || kept == 0) {
            if (kept > 0) {
                memcpy(l, agg->labels, kept * sizeof(prof_tag_labels_t));
            }
            free(agg->labels);
            agg->labels = l;
            agg->labels_capacity = kept;
        }

        prof_intern_free(&agg->tags);
        prof_intern_init(&agg->tags);
    }

    /*
     * Kept by a clear, the table's memory has room; a table made again
     * may fail to grow: the resolutions past that are lost, not shifted.
     */
    for (i = 0; i < kept; i++) {
        if (prof_intern(&agg->tags, &agg->labels[i].tag, sizeof(uint64_t),
                        &inserted) < 0)
        {
            prof_counter_add(agg->conf.diagnostics->labels_dropped,
                             kept - i);
            break;
        }
    }
}


static int
prof_aggregator_close(prof_aggregator_t *agg, const prof_batch_t *b,
    prof_endpoint_counts_t *counts)
{
    int              rc;
    size_t           evicted;
    prof_profile_t  *closed, *next;

    next = prof_profile_create(agg, 0);
    if (next == NULL) {
        prof_endpoint_counts_free(counts);
        return -ENOMEM;
    }

    rc = prof_aggregator_resolve(agg);
    if (rc != 0) {
        prof_counter_add(agg->conf.diagnostics->dropped_samples,
                         agg->raw_keys.count);
    }

    prof_aggregator_forget_labels(agg, b->flush_last_tag);

    /*
     * The samples' table is reused period after period, but given back
     * when it is four times what this period used: after a burst, at the
     * close of the period after it.
     */
    if (agg->raw_keys.entries_capacity
        > 4 * (size_t) agg->raw_keys.count + PROF_RAW_KEYS_KEPT)
    {
        prof_intern_free(&agg->raw_keys);
        prof_intern_init(&agg->raw_keys);
        free(agg->raw_values);
        agg->raw_values = NULL;
        agg->raw_capacity = 0;

    } else {
        prof_intern_clear(&agg->raw_keys);

        if (agg->raw_values != NULL) {
            memset(agg->raw_values, 0,
                   agg->raw_capacity * PROF_VALUE_COUNT * sizeof(int64_t));
        }
    }

    closed = agg->profile;
    closed->duration_ns = b->flush_monotonic_ns - agg->start_monotonic_ns;
    if (closed->duration_ns < 0) {
        closed->duration_ns = 0;
    }

    /* Windows are contiguous: the next starts where this one ends. */
    next->start_realtime_ns = closed->start_realtime_ns + closed->duration_ns;

    closed->endpoint_counts = counts;

    agg->profile = next;
    agg->start_monotonic_ns = b->flush_monotonic_ns;

    prof_counter_add(agg->conf.diagnostics->profiles_closed, 1);

    /* Debug files fetched meanwhile name the profile being closed. */
    if (agg->conf.symbolizer != NULL
        && prof_symbolizer_take_fetched(agg->conf.symbolizer, 1) > 0)
    {
        prof_aggregator_rename(agg);
    }

    if (agg->conf.on_profile != NULL) {
        agg->conf.on_profile(agg->conf.on_profile_data, closed);

    } else {
        prof_profile_free(closed);
    }

    /*
     * JIT code makes new addresses forever: start again past a bound. The
     * objects unloaded (dlclose) go now, and with them the cache of their
     * addresses.
     */
    if (agg->addresses.count >= PROF_ADDRESSES_MAX
        || (agg->conf.symbolizer != NULL
            && prof_symbolizer_collect(agg->conf.symbolizer) > 0))
    {
        evicted = agg->addresses.count;
        prof_aggregator_forget_addresses(agg);
        prof_intern_init(&agg->addresses);
        agg->unknown_addresses = 0;
        prof_counter_add(agg->conf.diagnostics->addresses_evicted, evicted);

    } else if (agg->unknown_addresses > 0) {
        evicted = prof_aggregator_forget_unknown(agg);
        prof_counter_add(agg->conf.diagnostics->addresses_evicted, evicted);
    }

    /* The DWARF no new address needed this period is not held. */
    if (agg->conf.symbolizer != NULL) {
        (void) prof_symbolizer_release_dwarf(agg->conf.symbolizer);
    }

    return rc;
}


int
prof_aggregator_consume(prof_aggregator_t *agg, const prof_batch_t *b,
    prof_endpoint_counts_t *counts)
{
    int                   rc;
    size_t                offset;
    uint32_t              i;
    const prof_sample_t  *s;

    rc = 0;
    offset = 0;

    /* Debug files fetched meanwhile: their names from now on. */
    if (agg->conf.symbolizer != NULL
        && prof_symbolizer_take_fetched(agg->conf.symbolizer, 0) > 0)
    {
        prof_aggregator_rename(agg);
    }

    for (i = 0; i < b->sample_count && offset < b->used; i++) {
        s = (const prof_sample_t *) (b->data + offset);
        offset += prof_sample_size(s->frame_count);

        if (prof_aggregator_add_sample(agg, s) != 0) {
            prof_counter_add(agg->conf.diagnostics->dropped_samples, 1);
            rc = -ENOMEM;
            continue;
        }

        prof_counter_add(agg->conf.diagnostics->samples_aggregated, 1);
    }

    if (b->flush_after) {
        if (prof_aggregator_close(agg, b, counts) != 0) {
            rc = -ENOMEM;
        }

    } else {
        prof_endpoint_counts_free(counts);
    }

    return rc;
}


size_t
prof_aggregator_bytes(const prof_aggregator_t *agg)
{
    size_t                 n;
    const prof_profile_t  *p = agg->profile;

    n = prof_intern_bytes(&agg->raw_keys)
        + agg->raw_capacity * PROF_VALUE_COUNT * sizeof(int64_t)
        + prof_intern_bytes(&agg->tags)
        + agg->labels_capacity * sizeof(prof_tag_labels_t)
        + prof_intern_bytes(&agg->endpoint_names)
        + prof_intern_bytes(&agg->addresses)
        + agg->address_capacity * sizeof(prof_address_t);

    if (p != NULL) {
        n += prof_intern_bytes(&p->stacks) + prof_intern_bytes(&p->keys)
             + prof_intern_bytes(&p->endpoints)
             + p->values_capacity * PROF_VALUE_COUNT * sizeof(int64_t);
    }

    return n;
}
