/*
 * Aggregator: interns stacks and sample keys of the open profile, sums the
 * values, and symbolizes each address once, when first seen.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator.h"
#include "endpoint_counts.h"


struct prof_aggregator_s {
    prof_aggregator_conf_t   conf;
    prof_profile_t          *profile;           /* open */
    uint64_t                 sequence;
    int64_t                  start_monotonic_ns;

    prof_intern_t            addresses;         /* uint64_t pc */
    prof_address_t          *address_info;      /* by address index */
    size_t                   address_capacity;

    uint64_t                 stack[PROF_MAX_FRAMES_LIMIT];
};


static const prof_address_t  prof_truncated_address = {
    NULL, "[truncated]"
};


static prof_profile_t *
prof_profile_create(prof_aggregator_t *agg, int64_t start_realtime_ns)
{
    prof_profile_t  *p;

    p = calloc(1, sizeof(prof_profile_t));
    if (p == NULL) {
        return NULL;
    }

    p->sequence = ++agg->sequence;
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
    prof_intern_free(&agg->addresses);
    free(agg->address_info);
    free(agg);
}


/* Symbolizes pc the first time it is seen. */
static int
prof_aggregator_learn_address(prof_aggregator_t *agg, uint64_t pc)
{
    int              inserted;
    size_t           cap;
    int64_t          index;
    prof_address_t  *info;

    if (pc == PROF_FRAME_TRUNCATED) {
        return 0;
    }

    /* Room for its information first: a known pc always has it. */
    if (agg->addresses.count >= agg->address_capacity) {
        cap = agg->address_capacity ? agg->address_capacity * 2 : 1024;
        info = realloc(agg->address_info, cap * sizeof(prof_address_t));
        if (info == NULL) {
            return -ENOMEM;
        }
        agg->address_info = info;
        agg->address_capacity = cap;
    }

    index = prof_intern(&agg->addresses, &pc, sizeof(pc), &inserted);
    if (index < 0) {
        return -ENOMEM;
    }

    if (!inserted) {
        return 0;
    }

    info = &agg->address_info[index];
    info->function = NULL;
    info->object = NULL;

    if (agg->conf.symbolizer != NULL) {
        info->object = prof_symbolize(agg->conf.symbolizer, pc,
                                      &info->function);
    }

    return 0;
}


const prof_address_t *
prof_aggregator_address(prof_aggregator_t *agg, uint64_t pc)
{
    int64_t  index;

    if (pc == PROF_FRAME_TRUNCATED) {
        return &prof_truncated_address;
    }

    index = prof_intern_find(&agg->addresses, &pc, sizeof(pc));
    if (index < 0) {
        return NULL;
    }

    return &agg->address_info[index];
}


static int
prof_profile_reserve_values(prof_profile_t *p, uint32_t keys)
{
    size_t    cap;
    int64_t  *values;

    if (keys <= p->values_capacity) {
        return 0;
    }

    cap = p->values_capacity ? p->values_capacity * 2 : 256;
    while (cap < keys) {
        cap *= 2;
    }

    values = realloc(p->values, cap * PROF_VALUE_COUNT * sizeof(int64_t));
    if (values == NULL) {
        return -ENOMEM;
    }

    memset(values + p->values_capacity * PROF_VALUE_COUNT, 0,
           (cap - p->values_capacity) * PROF_VALUE_COUNT * sizeof(int64_t));

    p->values = values;
    p->values_capacity = cap;

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
    prof_sample_key_t   key;

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
        agg->stack[i] = (i == 0 || frames[i] == PROF_FRAME_TRUNCATED)
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
            if (prof_aggregator_learn_address(agg, agg->stack[i]) != 0) {
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

    if (s->endpoint_length > 0) {
        index = prof_intern(&p->endpoints, prof_sample_endpoint(s),
                            s->endpoint_length, &inserted);
        if (index < 0) {
            return -ENOMEM;
        }
        key.endpoint = (uint32_t) index + 1;
    }

    key.span_id = s->span_id;
    key.local_root_span_id = s->local_root_span_id;

    index = prof_intern(&p->keys, &key, sizeof(key), &inserted);
    if (index < 0 || prof_profile_reserve_values(p, index + 1) != 0) {
        return -ENOMEM;
    }

    v = &p->values[index * PROF_VALUE_COUNT];
    v[PROF_VALUE_CPU_TIME] += s->cpu_ns;
    v[PROF_VALUE_CPU_SAMPLES] += s->cpu_samples;
    v[PROF_VALUE_WALL_TIME] += s->wall_ns;
    v[PROF_VALUE_WALL_SAMPLES] += s->wall_samples;
    v[PROF_VALUE_OFF_CPU_TIME] += s->off_cpu_ns;

    p->sample_count++;

    return 0;
}


static int
prof_aggregator_close(prof_aggregator_t *agg, const prof_batch_t *b)
{
    prof_profile_t  *closed, *next;

    next = prof_profile_create(agg, b->flush_realtime_ns);
    if (next == NULL) {
        return -ENOMEM;
    }

    closed = agg->profile;
    closed->duration_ns = b->flush_monotonic_ns - agg->start_monotonic_ns;
    if (closed->duration_ns < 0) {
        closed->duration_ns = 0;
    }

    /* The barrier's endpoint counts now belong to the profile. */
    closed->endpoint_counts = b->endpoint_counts;
    ((prof_batch_t *) b)->endpoint_counts = NULL;

    agg->profile = next;
    agg->start_monotonic_ns = b->flush_monotonic_ns;

    prof_counter_add(agg->conf.diagnostics->profiles_closed, 1);

    if (agg->conf.on_profile != NULL) {
        agg->conf.on_profile(agg->conf.on_profile_data, closed);

    } else {
        prof_profile_free(closed);
    }

    return 0;
}


int
prof_aggregator_consume(prof_aggregator_t *agg, const prof_batch_t *b)
{
    int                   rc;
    size_t                offset;
    uint32_t              i;
    const prof_sample_t  *s;

    rc = 0;
    offset = 0;

    for (i = 0; i < b->sample_count && offset < b->used; i++) {
        s = (const prof_sample_t *) (b->data + offset);
        offset += prof_sample_size(s->frame_count, s->endpoint_length);

        if (prof_aggregator_add_sample(agg, s) != 0) {
            prof_counter_add(agg->conf.diagnostics->dropped_samples, 1);
            rc = -ENOMEM;
            continue;
        }

        prof_counter_add(agg->conf.diagnostics->samples_aggregated, 1);
    }

    if (b->flush_after && prof_aggregator_close(agg, b) != 0) {
        rc = -ENOMEM;
    }

    return rc;
}
