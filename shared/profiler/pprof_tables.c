/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The tables of a pprof profile: strings, mappings, locations, functions
 * and every stack's location ids, built from the profile and the
 * aggregator's address cache before the profile is written.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "profiler/pprof_tables.h"
#include "profiler/pprof_wire.h"


/* At most this many locations of the pcs seen last (direct-mapped). */
#define PROF_PC_CACHE_MAX  16384


static const char  *prof_value_types[PROF_VALUE_COUNT][2] = {
    { "cpu-time", "nanoseconds" },
    { "cpu-samples", "count" },
    { "wall-time", "nanoseconds" },
    { "wall-samples", "count" },
    { "off-cpu-time", "nanoseconds" },
};


/*
 * The index of a string of the table: pprof strings are proto3 strings,
 * valid UTF-8 or the whole profile is refused, and they come from symbol
 * tables, file names, the configuration and clients' URIs. They are
 * interned as prof_utf8_sanitize() makes them (names differing only in
 * invalid bytes share an entry); nearly all of them are valid, and then
 * interned as they are.
 */
static int64_t
prof_pprof_string_n(prof_pprof_tables_t *t, const char *s, size_t length)
{
    int  inserted;

    if (prof_utf8_valid(s, length)) {
        return prof_intern(&t->strings, s, length, &inserted);
    }

    t->sanitized.length = 0;

    if (prof_utf8_append(&t->sanitized, s, length) != 0) {
        return -ENOMEM;
    }

    return prof_intern(&t->strings, t->sanitized.data,
                       t->sanitized.length, &inserted);
}


int64_t
prof_pprof_tables_string(prof_pprof_tables_t *t, const char *s,
    size_t length)
{
    return prof_pprof_string_n(t, s, length);
}


static int64_t
prof_pprof_string(prof_pprof_tables_t *t, const char *s)
{
    return prof_pprof_string_n(t, s, strlen(s));
}


/* The id of the function named name (interned now if new), or -ENOMEM. */
int64_t
prof_pprof_tables_function(prof_pprof_tables_t *t, const char *name)
{
    int                    inserted;
    int64_t                function;
    prof_pprof_function_t  f;

    memset(&f, 0, sizeof(f));
    f.name = prof_pprof_string(t, name);
    if (f.name < 0) {
        return -ENOMEM;
    }

    function = prof_intern(&t->functions, &f, sizeof(f), &inserted);

    return (function < 0) ? -ENOMEM : function + 1;
}


/* The location of pc: its mapping, function and ELF address. */
static int64_t
prof_pprof_location(prof_pprof_tables_t *t, uint64_t pc)
{
    int                     inserted;
    size_t                  cap;
    int64_t                 index, mapping, function;
    prof_pprof_function_t   f;
    prof_pprof_mapping_t   *map;
    prof_pprof_location_t  *loc;
    prof_pprof_cached_t    *cached;
    const prof_address_t   *a;

    cached = &t->pc_cache[(pc * 0x9e3779b97f4a7c15ULL)
                          >> t->pc_cache_shift];

    if (cached->index != 0 && cached->pc == pc) {
        return cached->index - 1;
    }

    index = prof_intern(&t->locations, &pc, sizeof(pc), &inserted);
    if (index < 0) {
        return index;
    }

    cached->pc = pc;
    cached->index = index + 1;

    if (!inserted) {
        return index;
    }

    if ((index & (index - 1)) == 0) {
        cap = index ? (size_t) index * 2 : 64;
        if (cap < 64) {
            cap = 64;
        }
        loc = realloc(t->location, cap * sizeof(prof_pprof_location_t));
        if (loc == NULL) {
            return -ENOMEM;
        }
        t->location = loc;
    }

    loc = &t->location[index];
    loc->mapping_id = 0;
    loc->function_id = 0;
    loc->address = pc;
    loc->symbol = NULL;

    map = NULL;
    a = prof_aggregator_address(t->agg, pc);

    if (a != NULL && a->object != NULL) {
        mapping = prof_intern(&t->mappings, &a->object, sizeof(a->object),
                              &inserted);
        if (mapping < 0) {
            return -ENOMEM;
        }

        if (inserted && (mapping & (mapping - 1)) == 0) {
            cap = mapping ? (size_t) mapping * 2 : 16;
            if (cap < 16) {
                cap = 16;
            }
            map = realloc(t->mapping, cap * sizeof(prof_pprof_mapping_t));
            if (map == NULL) {
                return -ENOMEM;
            }
            t->mapping = map;
        }

        map = &t->mapping[mapping];

        if (inserted) {
            map->filename = prof_pprof_string(t, a->object->path);
            map->build_id = t->bare ? 0 : prof_pprof_string(t,
                                                  a->object->build_id);
            map->unnamed = 0;

            if (map->filename < 0 || map->build_id < 0) {
                return -ENOMEM;
            }
        }

        /* Without a function, the address in the object names it. */
        loc->mapping_id = mapping + 1;
        loc->address = pc - a->object->load_bias;
    }

    if (a == NULL || a->function == NULL) {
        if (map != NULL) {
            map->unnamed++;
            t->info.unnamed_locations++;

        } else {
            t->info.unmapped_locations++;
        }

        return index;
    }

    memset(&f, 0, sizeof(f));
    f.name = prof_pprof_string(t, a->function);
    f.filename = (a->file != NULL) ? prof_pprof_string(t, a->file) : 0;
    f.start_line = a->start_line;
    if (f.name < 0 || f.filename < 0) {
        return -ENOMEM;
    }

    function = prof_intern(&t->functions, &f, sizeof(f), &inserted);
    if (function < 0) {
        return -ENOMEM;
    }

    loc->function_id = function + 1;
    loc->symbol = a;

    return index;
}


/* Every stack's location ids, as the packed field of its samples. */
static int
prof_pprof_stack_ids(prof_pprof_tables_t *t)
{
    size_t                 length, n, i;
    int64_t                index;
    uint32_t               s;
    unsigned char         *w;
    const uint64_t        *pcs;
    const prof_profile_t  *p = t->profile;
    prof_buffer_t         *ids = &t->stack_ids;

    t->stack_offset = malloc((p->stacks.count + 1) * sizeof(size_t));
    if (t->stack_offset == NULL) {
        return -ENOMEM;
    }

    /* Twice as many entries as frames, within bounds. */
    n = p->stacks.keys_used / sizeof(uint64_t);
    for (i = 16, t->pc_cache_shift = 60;
         i < 2 * n && i < PROF_PC_CACHE_MAX;
         i *= 2)
    {
        t->pc_cache_shift--;
    }

    t->pc_cache = calloc(i, sizeof(prof_pprof_cached_t));
    if (t->pc_cache == NULL) {
        return -ENOMEM;
    }

    for (s = 0; s < p->stacks.count; s++) {
        t->stack_offset[s] = ids->length;
        pcs = prof_intern_key(&p->stacks, s, &length);
        n = length / sizeof(uint64_t);

        if (prof_buffer_reserve(ids, n * 10) != 0) {
            return -ENOMEM;
        }

        w = ids->data + ids->length;

        for (i = 0; i < n; i++) {
            index = prof_pprof_location(t, pcs[i]);
            if (index < 0) {
                return -ENOMEM;
            }
            w = prof_pb_varint(w, index + 1);
        }

        ids->length = w - ids->data;
    }

    t->stack_offset[p->stacks.count] = ids->length;

    return 0;
}


int
prof_pprof_tables_build(prof_pprof_tables_t *t)
{
    size_t                 length, i;
    int64_t                index, thread_id, thread_name;
    uint32_t               s;
    unsigned char         *end;
    const char            *endpoint;
    const prof_profile_t  *p = t->profile;

    if (prof_pprof_string(t, "") != 0) {
        return -ENOMEM;
    }

    if (t->bare) {
        t->endpoint_string = calloc(p->endpoints.count + 1, sizeof(int64_t));
        if (t->endpoint_string == NULL) {
            return -ENOMEM;
        }

        return prof_pprof_stack_ids(t);
    }

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        t->value_type[i][0] = prof_pprof_string(t, prof_value_types[i][0]);
        t->value_type[i][1] = prof_pprof_string(t, prof_value_types[i][1]);

        if (t->value_type[i][0] < 0 || t->value_type[i][1] < 0) {
            return -ENOMEM;
        }
    }

    thread_id = prof_pprof_string(t, "thread id");
    thread_name = prof_pprof_string(t, "thread name");
    t->label_root_span_id = prof_pprof_string(t, "local root span id");
    t->label_span_id = prof_pprof_string(t, "span id");
    t->label_endpoint = prof_pprof_string(t, "trace endpoint");
    t->label_end_timestamp = prof_pprof_string(t, "end_timestamp_ns");
    t->label_stall = prof_pprof_string(t, "stall_ms");
    index = prof_pprof_string(t, p->thread_name ? p->thread_name : "");

    if (thread_id < 0 || thread_name < 0 || t->label_root_span_id < 0
        || t->label_span_id < 0 || t->label_endpoint < 0
        || t->label_end_timestamp < 0 || t->label_stall < 0 || index < 0)
    {
        return -ENOMEM;
    }

    /* Every sample is labelled with the thread. */
    end = prof_pb_label(t->thread_labels, thread_id, 0, p->thread_id);
    end = prof_pb_label(end, thread_name, index, 0);
    t->thread_labels_length = end - t->thread_labels;

    /* Endpoints are a client's bytes, NUL included: lengths, not strlen. */
    t->endpoint_string = malloc((p->endpoints.count + 1) * sizeof(int64_t));
    if (t->endpoint_string == NULL) {
        return -ENOMEM;
    }

    for (s = 0; s < p->endpoints.count; s++) {
        endpoint = prof_intern_key(&p->endpoints, s, &length);
        index = prof_pprof_string_n(t, endpoint, length);
        if (index < 0) {
            return -ENOMEM;
        }
        t->endpoint_string[s] = index;
    }

    return prof_pprof_stack_ids(t);
}


void
prof_pprof_tables_init(prof_pprof_tables_t *t, const prof_profile_t *p,
    prof_aggregator_t *agg)
{
    t->profile = p;
    t->agg = agg;

    prof_intern_init(&t->strings);
    prof_intern_init(&t->locations);
    prof_intern_init(&t->functions);
    prof_intern_init(&t->mappings);
}


void
prof_pprof_tables_free(prof_pprof_tables_t *t)
{
    prof_intern_free(&t->strings);
    prof_intern_free(&t->locations);
    prof_intern_free(&t->functions);
    prof_intern_free(&t->mappings);
    free(t->location);
    free(t->mapping);
    prof_buffer_free(&t->sanitized);
    prof_buffer_free(&t->stack_ids);
    free(t->stack_offset);
    free(t->pc_cache);
    free(t->endpoint_string);
}
