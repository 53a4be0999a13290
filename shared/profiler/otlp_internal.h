/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The OTLP encoder's own state and protobuf writers, shared by the files
 * that implement otlp.h (otlp.c: the samples, Profiles and resource;
 * otlp_dictionary.c: the dictionary) and by no other.
 *
 * Threading, memory: as otlp.h.
 */

#ifndef PROF_OTLP_INTERNAL_H
#define PROF_OTLP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/intern.h"
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


#define PROF_PB_FIXED64  1

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
static inline int
prof_otlp_field(prof_buffer_t *b, unsigned field, size_t length)
{
    unsigned char  head[16], *p;

    p = head;
    *p++ = PROF_PB_KEY(field, PROF_PB_LEN);
    p = prof_pb_varint(p, length);

    return prof_buffer_append(b, head, p - head);
}


static inline int
prof_otlp_bytes(prof_buffer_t *b, unsigned field, const void *data,
    size_t length)
{
    /* (An empty message or string: no bytes, data may be NULL.) */
    if (prof_otlp_field(b, field, length) != 0
        || (length > 0 && prof_buffer_append(b, data, length) != 0))
    {
        return -ENOMEM;
    }

    return 0;
}


static inline int
prof_otlp_str(prof_buffer_t *b, unsigned field, const char *s)
{
    return prof_otlp_bytes(b, field, s, strlen(s));
}


/* A varint field, left out when 0 (proto3). */
static inline int
prof_otlp_uint(prof_buffer_t *b, unsigned field, uint64_t v)
{
    unsigned char  bytes[16];

    if (v == 0) {
        return 0;
    }

    return prof_buffer_append(b, bytes,
                              prof_pb_uint(bytes, field, v) - bytes);
}


static inline int
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
static inline int
prof_otlp_packed1(prof_buffer_t *b, unsigned field, uint64_t v)
{
    unsigned char  bytes[16];

    return prof_otlp_bytes(b, field, bytes, prof_pb_varint(bytes, v) - bytes);
}


/* An item (o->item) appended to b as field, and emptied. */
static inline int
prof_otlp_put_item(prof_otlp_t *o, prof_buffer_t *b, unsigned field)
{
    int  rc;

    rc = prof_otlp_bytes(b, field, o->item.data, o->item.length);
    o->item.length = 0;

    return rc;
}


/* The dictionary (o->dictionary) of the tables built and the samples
   merged. 0 or -ENOMEM. */
int prof_otlp_dictionary(prof_otlp_t *o);


#endif /* PROF_OTLP_INTERNAL_H */
