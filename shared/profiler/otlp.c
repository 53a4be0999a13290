/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * OTLP profiles: a profile's pprof tables (pprof_tables.c) written as the
 * request's dictionary, its samples merged again per (stack, endpoint,
 * link) into a Profile per sample type, the whole request gzip'd.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/utf8.h"
#include "profiler/gzip_stream.h"
#include "profiler/otlp.h"
#include "profiler/pprof_tables.h"
#include "profiler/pprof_wire.h"


/* profiles_service.proto, profiles.proto, common.proto, resource.proto
   (v1.10.0): field numbers */
#define PROF_OTLP_REQUEST_RESOURCE_PROFILES  1
#define PROF_OTLP_REQUEST_DICTIONARY         2
#define PROF_OTLP_RESOURCE_PROFILES_RESOURCE 1
#define PROF_OTLP_RESOURCE_PROFILES_SCOPE    2
#define PROF_OTLP_RESOURCE_ATTRIBUTES        1
#define PROF_OTLP_SCOPE_PROFILES_SCOPE       1
#define PROF_OTLP_SCOPE_PROFILES_PROFILES    2
#define PROF_OTLP_SCOPE_NAME                 1
#define PROF_OTLP_SCOPE_VERSION              2
#define PROF_OTLP_KEY_VALUE_KEY              1
#define PROF_OTLP_KEY_VALUE_VALUE            2
#define PROF_OTLP_ANY_STRING                 1
#define PROF_OTLP_ANY_INT                    3

#define PROF_OTLP_DICT_MAPPINGS              1
#define PROF_OTLP_DICT_LOCATIONS             2
#define PROF_OTLP_DICT_FUNCTIONS             3
#define PROF_OTLP_DICT_LINKS                 4
#define PROF_OTLP_DICT_STRINGS               5
#define PROF_OTLP_DICT_ATTRIBUTES            6
#define PROF_OTLP_DICT_STACKS                7

#define PROF_OTLP_PROFILE_SAMPLE_TYPE        1
#define PROF_OTLP_PROFILE_SAMPLES            2
#define PROF_OTLP_PROFILE_TIME               3      /* fixed64 */
#define PROF_OTLP_PROFILE_DURATION           4
#define PROF_OTLP_PROFILE_PERIOD_TYPE        5
#define PROF_OTLP_PROFILE_PERIOD             6
#define PROF_OTLP_PROFILE_ID                 7
#define PROF_OTLP_VALUE_TYPE_TYPE            1
#define PROF_OTLP_VALUE_TYPE_UNIT            2
#define PROF_OTLP_SAMPLE_STACK               1
#define PROF_OTLP_SAMPLE_ATTRIBUTES          2
#define PROF_OTLP_SAMPLE_LINK                3
#define PROF_OTLP_SAMPLE_VALUES              4
#define PROF_OTLP_LINK_TRACE_ID              1
#define PROF_OTLP_LINK_SPAN_ID               2
#define PROF_OTLP_STACK_LOCATIONS            1
#define PROF_OTLP_MAPPING_START              1
#define PROF_OTLP_MAPPING_LIMIT              2
#define PROF_OTLP_MAPPING_OFFSET             3
#define PROF_OTLP_MAPPING_FILENAME           4
#define PROF_OTLP_MAPPING_ATTRIBUTES         5
#define PROF_OTLP_LOCATION_MAPPING           1
#define PROF_OTLP_LOCATION_ADDRESS           2
#define PROF_OTLP_LOCATION_LINES             3
#define PROF_OTLP_LINE_FUNCTION              1
#define PROF_OTLP_LINE_LINE                  2
#define PROF_OTLP_FUNCTION_NAME              1
#define PROF_OTLP_FUNCTION_SYSTEM_NAME       2
#define PROF_OTLP_FUNCTION_FILENAME          3
#define PROF_OTLP_FUNCTION_START_LINE        4
#define PROF_OTLP_ATTRIBUTE_KEY              1
#define PROF_OTLP_ATTRIBUTE_VALUE            2

#define PROF_OTLP_RESPONSE_PARTIAL           1
#define PROF_OTLP_PARTIAL_REJECTED           1
#define PROF_OTLP_PARTIAL_MESSAGE            2
#define PROF_OTLP_STATUS_MESSAGE             2      /* google.rpc.Status */

#define PROF_PB_FIXED64  1
#define PROF_PB_FIXED32  5

#define PROF_OTLP_BUILD_ID_KEY  "process.executable.build_id.gnu"


/* A sample of the request: what identifies it in OTLP. */
typedef struct {
    uint32_t     stack;             /* stack_table index, 0: none */
    uint32_t     attribute;         /* the endpoint's attribute, 0: none */
    uint32_t     link;              /* link_table index, 0: none */
} prof_otlp_key_t;


typedef struct {
    unsigned     value;             /* PROF_VALUE_* */
    const char  *type[2];
    const char  *period_type[2];
} prof_otlp_profile_type_t;


static const prof_otlp_profile_type_t  prof_otlp_types[PROF_OTLP_PROFILES] = {
    { PROF_VALUE_CPU_TIME, { "cpu", "nanoseconds" },
      { "cpu", "nanoseconds" } },
    { PROF_VALUE_CPU_SAMPLES, { "samples", "count" },
      { "cpu", "nanoseconds" } },
    { PROF_VALUE_WALL_TIME, { "wall", "nanoseconds" },
      { "wall", "nanoseconds" } },
    { PROF_VALUE_WALL_SAMPLES, { "samples", "count" },
      { "wall", "nanoseconds" } },
    { PROF_VALUE_OFF_CPU_TIME, { "off_cpu", "nanoseconds" },
      { "wall", "nanoseconds" } }
};


typedef struct {
    prof_pprof_tables_t      tables;
    const prof_otlp_conf_t  *conf;
    prof_otlp_info_t        *info;

    uint32_t                *stack_index;       /* by profile stack */
    uint32_t                *endpoint_attribute;    /* by endpoint */
    uint32_t                *mapping_attribute;     /* by mapping: its
                                                   build id's, 0: none */
    prof_intern_t            attributes;        /* a key's string index
                                                   (int64_t), then the
                                                   value (valid UTF-8) */
    prof_intern_t            links;             /* 16 + 8 bytes */
    prof_intern_t            keys;              /* prof_otlp_key_t */
    int64_t                 *values;            /* PROF_VALUE_COUNT a key */
    size_t                   values_capacity;
    int64_t                  type_string[PROF_OTLP_PROFILES][4];

    prof_buffer_t            dictionary;
    prof_buffer_t            part;              /* a table being written */
    prof_buffer_t            item;              /* an item being written */
    prof_buffer_t            value;             /* a value being made */
    prof_gzip_stream_t       gz;
} prof_otlp_t;


/* A field's key (every field number here is below 16) and its length. */
static int
prof_otlp_field(prof_buffer_t *b, unsigned field, size_t length)
{
    unsigned char  head[16], *p;

    p = head;
    *p++ = PROF_PB_KEY(field, PROF_PB_LEN);
    p = prof_pb_varint(p, length);

    return prof_buffer_append(b, head, p - head);
}


static int
prof_otlp_bytes(prof_buffer_t *b, unsigned field, const void *data,
    size_t length)
{
    if (prof_otlp_field(b, field, length) != 0
        || prof_buffer_append(b, data, length) != 0)
    {
        return -ENOMEM;
    }

    return 0;
}


static int
prof_otlp_str(prof_buffer_t *b, unsigned field, const char *s)
{
    return prof_otlp_bytes(b, field, s, strlen(s));
}


/* A varint field, left out when 0 (proto3). */
static int
prof_otlp_uint(prof_buffer_t *b, unsigned field, uint64_t v)
{
    unsigned char  bytes[16];

    if (v == 0) {
        return 0;
    }

    return prof_buffer_append(b, bytes,
                              prof_pb_uint(bytes, field, v) - bytes);
}


static int
prof_otlp_fixed64(prof_buffer_t *b, unsigned field, uint64_t v)
{
    unsigned       i;
    unsigned char  bytes[9];

    bytes[0] = PROF_PB_KEY(field, PROF_PB_FIXED64);
    for (i = 0; i < 8; i++) {
        bytes[1 + i] = (unsigned char) (v >> (8 * i));
    }

    return prof_buffer_append(b, bytes, sizeof(bytes));
}


/* A packed repeated varint field of one value (indices, values). */
static int
prof_otlp_packed1(prof_buffer_t *b, unsigned field, uint64_t v)
{
    unsigned char  bytes[16];

    return prof_otlp_bytes(b, field, bytes, prof_pb_varint(bytes, v) - bytes);
}


/* An item (o->item) appended to b as field, and emptied. */
static int
prof_otlp_put_item(prof_otlp_t *o, prof_buffer_t *b, unsigned field)
{
    int  rc;

    rc = prof_otlp_bytes(b, field, o->item.data, o->item.length);
    o->item.length = 0;

    return rc;
}


/* Big-endian bytes of v, n of them. */
static void
prof_otlp_be(unsigned char *out, uint64_t v, unsigned n)
{
    while (n-- > 0) {
        out[n] = (unsigned char) v;
        v >>= 8;
    }
}


static int64_t
prof_otlp_string(prof_otlp_t *o, const char *s)
{
    return prof_pprof_tables_string(&o->tables, s, strlen(s));
}


/*
 * An attribute with a string value (made valid UTF-8): its
 * attribute_table index (> 0). The value is the attribute's own, not in
 * the string table (where no item may be left unreferenced).
 */
static int64_t
prof_otlp_attribute(prof_otlp_t *o, int64_t key, const char *value,
    size_t length)
{
    int       inserted;
    int64_t   index;

    o->value.length = 0;

    if (prof_buffer_append(&o->value, &key, sizeof(key)) != 0
        || prof_utf8_append(&o->value, value, length) != 0)
    {
        return -ENOMEM;
    }

    index = prof_intern(&o->attributes, o->value.data, o->value.length,
                        &inserted);

    return (index < 0) ? -ENOMEM : index + 1;
}


/*
 * What the tables do not hold yet: the stacks' indices (an empty stack
 * is the zero one), the endpoints' and build ids' attributes, and the
 * sample types' names.
 */
static int
prof_otlp_prepare(prof_otlp_t *o)
{
    size_t                 i, n, length;
    int64_t                key, index;
    uint32_t               s;
    const char            *endpoint;
    const prof_object_t   *obj;
    const prof_profile_t  *p = o->tables.profile;
    prof_pprof_tables_t   *t = &o->tables;

    o->stack_index = malloc((p->stacks.count + 1) * sizeof(uint32_t));
    o->endpoint_attribute = malloc((p->endpoints.count + 1)
                                   * sizeof(uint32_t));
    o->mapping_attribute = calloc(t->mappings.count + 1, sizeof(uint32_t));

    if (o->stack_index == NULL || o->endpoint_attribute == NULL
        || o->mapping_attribute == NULL)
    {
        return -ENOMEM;
    }

    for (n = 0, s = 0; s < p->stacks.count; s++) {
        o->stack_index[s] = (t->stack_offset[s + 1] > t->stack_offset[s])
                            ? (uint32_t) ++n : 0;
    }

    if (p->endpoints.count > 0) {
        key = prof_otlp_string(o, PROF_OTLP_ENDPOINT_KEY);
        if (key < 0) {
            return -ENOMEM;
        }

        for (s = 0; s < p->endpoints.count; s++) {
            endpoint = prof_intern_key(&p->endpoints, s, &length);
            index = prof_otlp_attribute(o, key, endpoint, length);
            if (index < 0) {
                return -ENOMEM;
            }
            o->endpoint_attribute[s] = (uint32_t) index;
        }
    }

    for (key = 0, s = 0; s < t->mappings.count; s++) {
        memcpy(&obj, prof_intern_key(&t->mappings, s, NULL), sizeof(obj));

        if (obj->build_id[0] == '\0') {
            continue;
        }

        if (key == 0) {
            key = prof_otlp_string(o, PROF_OTLP_BUILD_ID_KEY);
            if (key < 0) {
                return -ENOMEM;
            }
        }

        index = prof_otlp_attribute(o, key, obj->build_id,
                                    strlen(obj->build_id));
        if (index < 0) {
            return -ENOMEM;
        }

        o->mapping_attribute[s] = (uint32_t) index;
    }

    for (i = 0; i < PROF_OTLP_PROFILES; i++) {
        o->type_string[i][0] = prof_otlp_string(o, prof_otlp_types[i].type[0]);
        o->type_string[i][1] = prof_otlp_string(o, prof_otlp_types[i].type[1]);
        o->type_string[i][2] = prof_otlp_string(o,
                                          prof_otlp_types[i].period_type[0]);
        o->type_string[i][3] = prof_otlp_string(o,
                                          prof_otlp_types[i].period_type[1]);

        if (o->type_string[i][0] < 0 || o->type_string[i][1] < 0
            || o->type_string[i][2] < 0 || o->type_string[i][3] < 0)
        {
            return -ENOMEM;
        }
    }

    return 0;
}


/*
 * The profile's samples summed per (stack, endpoint, link): a sample of
 * a traced request (a trace id and a span) links to them.
 */
static int
prof_otlp_merge(prof_otlp_t *o)
{
    int                      inserted;
    unsigned                 i;
    int64_t                  index, *to;
    uint32_t                 k;
    unsigned char            ids[24];
    prof_otlp_key_t          key;
    const int64_t           *v;
    const prof_profile_t    *p = o->tables.profile;
    const prof_sample_key_t *from;

    for (k = 0; k < p->keys.count; k++) {
        from = prof_intern_key(&p->keys, k, NULL);
        v = &p->values[k * PROF_VALUE_COUNT];

        memset(&key, 0, sizeof(key));
        key.stack = o->stack_index[from->stack];

        if (from->endpoint != 0) {
            key.attribute = o->endpoint_attribute[from->endpoint - 1];
        }

        if (from->span_id != 0
            && (from->trace_id_high != 0 || from->trace_id_low != 0))
        {
            prof_otlp_be(ids, from->trace_id_high, 8);
            prof_otlp_be(ids + 8, from->trace_id_low, 8);
            prof_otlp_be(ids + 16, from->span_id, 8);

            index = prof_intern(&o->links, ids, sizeof(ids), &inserted);
            if (index < 0) {
                return -ENOMEM;
            }
            key.link = (uint32_t) index + 1;
        }

        index = prof_intern(&o->keys, &key, sizeof(key), &inserted);
        if (index < 0
            || prof_aggregator_reserve_values(&o->values, &o->values_capacity,
                                              index + 1)
               != 0)
        {
            return -ENOMEM;
        }

        to = &o->values[index * PROF_VALUE_COUNT];
        for (i = 0; i < PROF_VALUE_COUNT; i++) {
            to[i] += v[i];
        }
    }

    o->info->links = o->links.count;

    return 0;
}


/* A table into the dictionary: its zero value first, then o->part. */
static int
prof_otlp_table(prof_otlp_t *o, unsigned field)
{
    int  rc;

    rc = prof_otlp_field(&o->dictionary, field, 0);
    if (rc == 0) {
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
static int
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


static int
prof_otlp_value_type(prof_buffer_t *b, unsigned field, const int64_t *type)
{
    unsigned char  body[32], *end;

    end = prof_pb_uint(body, PROF_OTLP_VALUE_TYPE_TYPE, type[0]);
    end = prof_pb_uint(end, PROF_OTLP_VALUE_TYPE_UNIT, type[1]);

    return prof_otlp_bytes(b, field, body, end - body);
}


/* The Profile of sample type i into b: the samples with a value of it. */
static int
prof_otlp_profile(prof_otlp_t *o, unsigned i, prof_buffer_t *b)
{
    int                    rc;
    int64_t                v;
    uint32_t               k;
    unsigned char          id[16];
    const prof_otlp_key_t *key;
    const prof_profile_t  *p = o->tables.profile;
    prof_buffer_t         *s = &o->item;

    if (getrandom(id, sizeof(id), 0) != (ssize_t) sizeof(id)) {
        return -EIO;
    }

    id[0] |= 1;                             /* never all zeroes */

    rc = prof_otlp_value_type(b, PROF_OTLP_PROFILE_SAMPLE_TYPE,
                              o->type_string[i]);

    for (k = 0; rc == 0 && k < o->keys.count; k++) {
        v = o->values[(size_t) k * PROF_VALUE_COUNT + prof_otlp_types[i].value];
        if (v == 0) {
            continue;
        }

        key = prof_intern_key(&o->keys, k, NULL);

        rc = prof_otlp_uint(s, PROF_OTLP_SAMPLE_STACK, key->stack);
        if (key->attribute != 0) {
            rc |= prof_otlp_packed1(s, PROF_OTLP_SAMPLE_ATTRIBUTES,
                                    key->attribute);
        }
        rc |= prof_otlp_uint(s, PROF_OTLP_SAMPLE_LINK, key->link);
        rc |= prof_otlp_packed1(s, PROF_OTLP_SAMPLE_VALUES, (uint64_t) v);
        rc |= prof_otlp_put_item(o, b, PROF_OTLP_PROFILE_SAMPLES);

        o->info->samples++;
    }

    if (rc != 0
        || prof_otlp_fixed64(b, PROF_OTLP_PROFILE_TIME,
                             (uint64_t) p->start_realtime_ns) != 0
        || prof_otlp_uint(b, PROF_OTLP_PROFILE_DURATION,
                          (uint64_t) p->duration_ns) != 0
        || prof_otlp_value_type(b, PROF_OTLP_PROFILE_PERIOD_TYPE,
                                &o->type_string[i][2]) != 0
        || prof_otlp_uint(b, PROF_OTLP_PROFILE_PERIOD,
                          (uint64_t) p->period_ns) != 0
        || prof_otlp_bytes(b, PROF_OTLP_PROFILE_ID, id, sizeof(id)) != 0)
    {
        return rc ? rc : -ENOMEM;
    }

    return 0;
}


/* A resource attribute: a KeyValue with a string (valid UTF-8, made so)
   or an int value. */
static int
prof_otlp_resource_attribute(prof_buffer_t *b, const char *key,
    const char *s, int64_t n)
{
    int            rc;
    prof_buffer_t  value = { NULL, 0, 0 }, kv = { NULL, 0, 0 },
                   text = { NULL, 0, 0 };

    if (s == NULL) {
        rc = prof_otlp_uint(&value, PROF_OTLP_ANY_INT, (uint64_t) n);

    } else {
        rc = prof_utf8_append(&text, s, strlen(s));
        rc |= prof_otlp_bytes(&value, PROF_OTLP_ANY_STRING, text.data,
                              text.length);
    }

    rc |= prof_otlp_str(&kv, PROF_OTLP_KEY_VALUE_KEY, key);
    rc |= prof_otlp_bytes(&kv, PROF_OTLP_KEY_VALUE_VALUE, value.data,
                          value.length);
    rc |= prof_otlp_bytes(b, PROF_OTLP_RESOURCE_ATTRIBUTES, kv.data,
                          kv.length);

    prof_buffer_free(&value);
    prof_buffer_free(&kv);
    prof_buffer_free(&text);

    return rc ? -ENOMEM : 0;
}


static int
prof_otlp_resource(prof_otlp_t *o, prof_buffer_t *b)
{
    int                      rc;
    const prof_otlp_conf_t  *c = o->conf;

    rc = prof_otlp_resource_attribute(b, "service.name",
                                      (c->service && c->service[0])
                                      ? c->service : "nginx", 0);

    if (c->version != NULL && c->version[0] != '\0') {
        rc |= prof_otlp_resource_attribute(b, "service.version", c->version,
                                           0);
    }

    if (c->env != NULL && c->env[0] != '\0') {
        rc |= prof_otlp_resource_attribute(b, "deployment.environment.name",
                                           c->env, 0);
    }

    if (c->host != NULL && c->host[0] != '\0') {
        rc |= prof_otlp_resource_attribute(b, "host.name", c->host, 0);
    }

    rc |= prof_otlp_resource_attribute(b, "process.pid", NULL, c->pid);

    if (c->executable != NULL && c->executable[0] != '\0') {
        rc |= prof_otlp_resource_attribute(b, "process.executable.name",
                                           c->executable, 0);
    }

    if (c->container_id != NULL && c->container_id[0] != '\0') {
        rc |= prof_otlp_resource_attribute(b, "container.id",
                                           c->container_id, 0);
    }

    return rc ? -ENOMEM : 0;
}


/* ResourceProfiles: the resource, one scope, its Profiles. */
static int
prof_otlp_resource_profiles(prof_otlp_t *o, prof_buffer_t *out)
{
    int            rc;
    unsigned       i;
    prof_buffer_t  resource = { NULL, 0, 0 }, scope = { NULL, 0, 0 },
                   profile = { NULL, 0, 0 }, rp = { NULL, 0, 0 };

    rc = prof_otlp_resource(o, &resource);

    rc |= prof_otlp_str(&profile, PROF_OTLP_SCOPE_NAME, PROF_OTLP_SCOPE);
    if (o->conf->scope_version != NULL) {
        rc |= prof_otlp_str(&profile, PROF_OTLP_SCOPE_VERSION,
                            o->conf->scope_version);
    }
    rc |= prof_otlp_bytes(&scope, PROF_OTLP_SCOPE_PROFILES_SCOPE,
                          profile.data, profile.length);

    for (i = 0; rc == 0 && i < PROF_OTLP_PROFILES; i++) {
        profile.length = 0;
        rc = prof_otlp_profile(o, i, &profile);
        if (rc == 0) {
            rc = prof_otlp_bytes(&scope, PROF_OTLP_SCOPE_PROFILES_PROFILES,
                                 profile.data, profile.length);
            o->info->profiles++;
        }
    }

    if (rc == 0) {
        rc = prof_otlp_bytes(&rp, PROF_OTLP_RESOURCE_PROFILES_RESOURCE,
                             resource.data, resource.length);
        rc |= prof_otlp_bytes(&rp, PROF_OTLP_RESOURCE_PROFILES_SCOPE,
                              scope.data, scope.length);
        rc |= prof_otlp_bytes(out, PROF_OTLP_REQUEST_RESOURCE_PROFILES,
                              rp.data, rp.length);
        rc = rc ? -ENOMEM : 0;
    }

    prof_buffer_free(&resource);
    prof_buffer_free(&scope);
    prof_buffer_free(&profile);
    prof_buffer_free(&rp);

    return rc;
}


/* The whole request, uncompressed, into body. */
static int
prof_otlp_request(prof_otlp_t *o, prof_buffer_t *body)
{
    int  rc;

    rc = prof_pprof_tables_build(&o->tables);
    if (rc == 0) {
        rc = prof_otlp_prepare(o);
    }
    if (rc == 0) {
        rc = prof_otlp_merge(o);
    }
    if (rc == 0) {
        rc = prof_otlp_resource_profiles(o, body);
    }
    if (rc == 0) {
        rc = prof_otlp_dictionary(o);
    }
    if (rc == 0) {
        rc = prof_otlp_bytes(body, PROF_OTLP_REQUEST_DICTIONARY,
                             o->dictionary.data, o->dictionary.length);
    }

    return rc;
}


int
prof_otlp_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    const prof_otlp_conf_t *conf, prof_buffer_t *out, prof_otlp_info_t *info)
{
    int            rc;
    prof_otlp_t   *o;
    prof_buffer_t  body = { NULL, 0, 0 };

    memset(info, 0, sizeof(prof_otlp_info_t));
    out->length = 0;

    o = calloc(1, sizeof(prof_otlp_t));
    if (o == NULL) {
        return -ENOMEM;
    }

    o->conf = conf;
    o->info = info;
    prof_pprof_tables_init(&o->tables, p, agg);
    o->tables.bare = 1;
    prof_intern_init(&o->attributes);
    prof_intern_init(&o->links);
    prof_intern_init(&o->keys);

    rc = prof_otlp_request(o, &body);

    if (rc == 0) {
        info->uncompressed_bytes = body.length;

        rc = prof_gzip_stream_init(&o->gz, out);
        if (rc == 0) {
            rc = prof_gzip_stream_put(&o->gz, body.data, body.length);
            if (rc == 0) {
                rc = prof_gzip_stream_finish(&o->gz);
            }
            prof_gzip_stream_end(&o->gz);
        }
    }

    prof_buffer_free(&body);
    prof_buffer_free(&o->dictionary);
    prof_buffer_free(&o->part);
    prof_buffer_free(&o->item);
    prof_buffer_free(&o->value);
    prof_intern_free(&o->attributes);
    prof_intern_free(&o->links);
    prof_intern_free(&o->keys);
    prof_pprof_tables_free(&o->tables);
    free(o->values);
    free(o->stack_index);
    free(o->endpoint_attribute);
    free(o->mapping_attribute);
    free(o);

    return rc;
}


/* A varint at *p (before end). 0, or -EINVAL. */
static int
prof_otlp_read_varint(const unsigned char **p, const unsigned char *end,
    uint64_t *v)
{
    unsigned  shift;

    *v = 0;

    for (shift = 0; *p < end && shift < 64; shift += 7) {
        *v |= (uint64_t) (**p & 0x7f) << shift;
        if ((*(*p)++ & 0x80) == 0) {
            return 0;
        }
    }

    return -EINVAL;
}


/*
 * The next field of a message in [*p, end): its number, and its value
 * (a varint's) or its bytes (a length-delimited one's); others skipped.
 */
static int
prof_otlp_read_field(const unsigned char **p, const unsigned char *end,
    unsigned *field, uint64_t *v, const unsigned char **data)
{
    uint64_t  key;

    if (prof_otlp_read_varint(p, end, &key) != 0) {
        return -EINVAL;
    }

    *field = (unsigned) (key >> 3);
    *data = NULL;

    switch (key & 7) {

    case PROF_PB_VARINT:
        return prof_otlp_read_varint(p, end, v);

    case PROF_PB_LEN:
        if (prof_otlp_read_varint(p, end, v) != 0
            || *v > (uint64_t) (end - *p))
        {
            return -EINVAL;
        }
        *data = *p;
        *p += *v;
        return 0;

    case PROF_PB_FIXED64:
    case PROF_PB_FIXED32:
        *v = ((key & 7) == PROF_PB_FIXED64) ? 8 : 4;
        if (*v > (uint64_t) (end - *p)) {
            return -EINVAL;
        }
        *p += *v;
        *v = 0;
        return 0;

    default:
        return -EINVAL;
    }
}


/* At most message_size - 1 bytes of text, cut between characters. */
static void
prof_otlp_copy_text(char *message, size_t message_size,
    const unsigned char *text, uint64_t length)
{
    size_t  n;

    n = (length < message_size - 1) ? (size_t) length : message_size - 1;
    while (n > 0 && !prof_utf8_valid((const char *) text, n)) {
        n--;
    }

    memcpy(message, text, n);
    message[n] = '\0';
}


int
prof_otlp_response(const void *data, size_t length, int64_t *rejected,
    char *message, size_t message_size)
{
    uint64_t              v, w;
    unsigned              field, inner;
    const unsigned char  *p, *end, *bytes, *q, *qend, *text;

    *rejected = 0;
    message[0] = '\0';

    p = data;
    end = p + length;

    while (p < end) {
        if (prof_otlp_read_field(&p, end, &field, &v, &bytes) != 0) {
            return -EINVAL;
        }

        if (field != PROF_OTLP_RESPONSE_PARTIAL || bytes == NULL) {
            continue;
        }

        q = bytes;
        qend = bytes + v;

        while (q < qend) {
            if (prof_otlp_read_field(&q, qend, &inner, &w, &text) != 0) {
                return -EINVAL;
            }

            if (inner == PROF_OTLP_PARTIAL_REJECTED && text == NULL) {
                *rejected = (int64_t) w;

            } else if (inner == PROF_OTLP_PARTIAL_MESSAGE && text != NULL) {
                prof_otlp_copy_text(message, message_size, text, w);
            }
        }
    }

    return 0;
}


int
prof_otlp_status_message(const void *data, size_t length, char *message,
    size_t message_size)
{
    size_t                i;
    uint64_t              v;
    unsigned              field;
    const unsigned char  *p, *end, *text;

    message[0] = '\0';
    p = data;
    end = p + length;

    while (p < end) {
        if (prof_otlp_read_field(&p, end, &field, &v, &text) != 0) {
            break;
        }

        if (field == PROF_OTLP_STATUS_MESSAGE && text != NULL && v > 0) {
            prof_otlp_copy_text(message, message_size, text, v);
            return 0;
        }
    }

    /* Not a Status: the body, when it is printable text. */
    p = data;
    for (i = 0; i < length; i++) {
        if (p[i] < 0x20 && p[i] != '\n' && p[i] != '\t' && p[i] != '\r') {
            return -EINVAL;
        }
    }

    if (length == 0 || !prof_utf8_valid(data, length)) {
        return -EINVAL;
    }

    prof_otlp_copy_text(message, message_size, p, length);

    while ((i = strlen(message)) > 0
           && (message[i - 1] == '\n' || message[i - 1] == '\r'))
    {
        message[i - 1] = '\0';
    }

    return 0;
}
