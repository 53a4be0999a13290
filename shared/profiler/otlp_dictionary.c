/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The OTLP request's dictionary: the pprof tables (mappings, locations,
 * functions, strings, stacks) as OTLP's, the links and attributes the
 * samples point at; each table its zero value first.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/otlp_internal.h"


/* A table into the dictionary: its zero value first, then o->part. */
static int
prof_otlp_table(prof_otlp_t *o, unsigned field)
{
    int  rc;

    rc = prof_otlp_field(&o->dictionary, field, 0);
    if (rc == 0 && o->part.length > 0) {
        rc = prof_buffer_append(&o->dictionary, o->part.data,
                                o->part.length);
    }

    o->part.length = 0;

    return rc;
}


static int
prof_otlp_mappings(prof_otlp_t *o)
{
    int                   rc;
    uint32_t              i;
    const prof_object_t  *obj;
    prof_buffer_t        *m = &o->item;
    prof_pprof_tables_t  *t = &o->tables;

    for (i = 0; i < t->mappings.count; i++) {
        memcpy(&obj, prof_intern_key(&t->mappings, i, NULL), sizeof(obj));

        rc = prof_otlp_uint(m, PROF_OTLP_MAPPING_START, obj->start);
        rc |= prof_otlp_uint(m, PROF_OTLP_MAPPING_LIMIT, obj->end);
        rc |= prof_otlp_uint(m, PROF_OTLP_MAPPING_OFFSET, obj->file_offset);
        rc |= prof_otlp_uint(m, PROF_OTLP_MAPPING_FILENAME,
                             t->mapping[i].filename);
        if (o->mapping_attribute[i] != 0) {
            rc |= prof_otlp_packed1(m, PROF_OTLP_MAPPING_ATTRIBUTES,
                                    o->mapping_attribute[i]);
        }

        if (rc != 0
            || prof_otlp_put_item(o, &o->part, PROF_OTLP_DICT_MAPPINGS) != 0)
        {
            return -ENOMEM;
        }
    }

    return prof_otlp_table(o, PROF_OTLP_DICT_MAPPINGS);
}


/* A Line of a location: a function index and its line (0: unknown). */
static int
prof_otlp_line(prof_buffer_t *b, uint64_t function, uint32_t line)
{
    unsigned char  body[32], *end;

    end = prof_pb_uint(body, PROF_OTLP_LINE_FUNCTION, function);
    end = prof_pb_uint(end, PROF_OTLP_LINE_LINE, line);

    return prof_otlp_bytes(b, PROF_OTLP_LOCATION_LINES, body, end - body);
}


/*
 * Locations: with a function, its Lines, the functions inlined there
 * first (innermost first), the function around them last. The pprof ids
 * are the table's indices: its zero value comes first.
 */
static int
prof_otlp_locations(prof_otlp_t *o)
{
    int                           rc;
    int64_t                       id;
    uint32_t                      i, k;
    const prof_address_t         *a;
    const prof_pprof_location_t  *loc;
    prof_buffer_t                *l = &o->item;
    prof_pprof_tables_t          *t = &o->tables;

    for (i = 0; i < t->locations.count; i++) {
        loc = &t->location[i];

        rc = prof_otlp_uint(l, PROF_OTLP_LOCATION_MAPPING, loc->mapping_id);
        rc |= prof_otlp_uint(l, PROF_OTLP_LOCATION_ADDRESS, loc->address);

        if (rc == 0 && loc->function_id != 0) {
            a = loc->symbol;

            for (k = 0; k < a->ninlines && k < PROF_INLINES_MAX; k++) {
                id = prof_pprof_tables_function(t, a->inlines[k].function);
                if (id < 0) {
                    return -ENOMEM;
                }

                rc |= prof_otlp_line(l, (uint64_t) id, a->inlines[k].line);
            }

            rc |= prof_otlp_line(l, loc->function_id, a->line);
        }

        if (rc != 0
            || prof_otlp_put_item(o, &o->part, PROF_OTLP_DICT_LOCATIONS) != 0)
        {
            return -ENOMEM;
        }
    }

    return prof_otlp_table(o, PROF_OTLP_DICT_LOCATIONS);
}


static int
prof_otlp_functions(prof_otlp_t *o)
{
    int                    rc;
    uint32_t               i;
    prof_pprof_function_t  f;
    prof_buffer_t         *b = &o->item;
    prof_pprof_tables_t   *t = &o->tables;

    for (i = 0; i < t->functions.count; i++) {
        memcpy(&f, prof_intern_key(&t->functions, i, NULL), sizeof(f));

        rc = prof_otlp_uint(b, PROF_OTLP_FUNCTION_NAME, f.name);
        rc |= prof_otlp_uint(b, PROF_OTLP_FUNCTION_SYSTEM_NAME, f.name);
        rc |= prof_otlp_uint(b, PROF_OTLP_FUNCTION_FILENAME,
                             f.filename > 0 ? f.filename : 0);
        rc |= prof_otlp_uint(b, PROF_OTLP_FUNCTION_START_LINE,
                             f.start_line > 0 ? f.start_line : 0);

        if (rc != 0
            || prof_otlp_put_item(o, &o->part, PROF_OTLP_DICT_FUNCTIONS) != 0)
        {
            return -ENOMEM;
        }
    }

    return prof_otlp_table(o, PROF_OTLP_DICT_FUNCTIONS);
}


static int
prof_otlp_links(prof_otlp_t *o)
{
    int                   rc;
    uint32_t              i;
    const unsigned char  *ids;

    for (i = 0; i < o->links.count; i++) {
        ids = prof_intern_key(&o->links, i, NULL);

        rc = prof_otlp_bytes(&o->item, PROF_OTLP_LINK_TRACE_ID, ids, 16);
        rc |= prof_otlp_bytes(&o->item, PROF_OTLP_LINK_SPAN_ID, ids + 16, 8);

        if (rc != 0
            || prof_otlp_put_item(o, &o->part, PROF_OTLP_DICT_LINKS) != 0)
        {
            return -ENOMEM;
        }
    }

    return prof_otlp_table(o, PROF_OTLP_DICT_LINKS);
}


/* Attributes: a string key (an index) and an AnyValue string. */
static int
prof_otlp_attributes(prof_otlp_t *o)
{
    int                   rc;
    size_t                length;
    int64_t               key;
    uint32_t              i;
    const unsigned char  *a;

    rc = 0;

    for (i = 0; rc == 0 && i < o->attributes.count; i++) {
        a = prof_intern_key(&o->attributes, i, &length);
        memcpy(&key, a, sizeof(key));

        o->value.length = 0;
        rc = prof_otlp_bytes(&o->value, PROF_OTLP_ANY_STRING,
                             a + sizeof(key), length - sizeof(key));
        rc |= prof_otlp_uint(&o->item, PROF_OTLP_ATTRIBUTE_KEY, key);
        rc |= prof_otlp_bytes(&o->item, PROF_OTLP_ATTRIBUTE_VALUE,
                              o->value.data, o->value.length);
        rc |= prof_otlp_put_item(o, &o->part, PROF_OTLP_DICT_ATTRIBUTES);
    }

    return (rc == 0) ? prof_otlp_table(o, PROF_OTLP_DICT_ATTRIBUTES)
                     : -ENOMEM;
}


/* Stacks: the location ids pprof packed are the indices; no empty one. */
static int
prof_otlp_stacks(prof_otlp_t *o)
{
    size_t                 length;
    uint32_t               s;
    prof_pprof_tables_t   *t = &o->tables;
    const prof_profile_t  *p = t->profile;

    for (s = 0; s < p->stacks.count; s++) {
        if (o->stack_index[s] == 0) {
            continue;
        }

        length = t->stack_offset[s + 1] - t->stack_offset[s];

        if (prof_otlp_bytes(&o->item, PROF_OTLP_STACK_LOCATIONS,
                            t->stack_ids.data + t->stack_offset[s], length)
            != 0
            || prof_otlp_put_item(o, &o->part, PROF_OTLP_DICT_STACKS) != 0)
        {
            return -ENOMEM;
        }
    }

    return prof_otlp_table(o, PROF_OTLP_DICT_STACKS);
}


/* The strings, last: every table above may have added some. */
static int
prof_otlp_strings(prof_otlp_t *o)
{
    size_t       length;
    uint32_t     i;
    const void  *s;

    for (i = 0; i < o->tables.strings.count; i++) {
        s = prof_intern_key(&o->tables.strings, i, &length);

        if (prof_otlp_bytes(&o->dictionary, PROF_OTLP_DICT_STRINGS, s,
                            length)
            != 0)
        {
            return -ENOMEM;
        }
    }

    return 0;
}


/*
 * The dictionary, in field number order but the strings, last (a key's
 * order is free in protobuf): the locations interned the functions they
 * inline, every table its strings.
 */
int
prof_otlp_dictionary(prof_otlp_t *o)
{
    if (prof_otlp_mappings(o) != 0
        || prof_otlp_locations(o) != 0
        || prof_otlp_functions(o) != 0
        || prof_otlp_links(o) != 0
        || prof_otlp_attributes(o) != 0
        || prof_otlp_stacks(o) != 0
        || prof_otlp_strings(o) != 0)
    {
        return -ENOMEM;
    }

    return 0;
}
