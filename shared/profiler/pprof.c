/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * pprof encoder: builds the string, mapping, location and function tables
 * of a profile, then writes the protobuf encoding itself, a record at a
 * time, through gzip.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.pb.h"
#include "profiler/pprof.h"
#include "common/utf8.h"


/*
 * zlib's fastest level, as profilers' exporters use (the profile is
 * compressed once, on the profiler's thread): ~3.5% larger than the
 * default level, and deflate takes ~45% fewer instructions.
 */
#define PROF_GZIP_LEVEL  1
#define PROF_GZIP_CHUNK  (64 * 1024)

/*
 * Records are written here, then deflated a block at a time: room for
 * the largest record but a string (strings are written in pieces), a
 * sample of PROF_MAX_FRAMES_LIMIT location ids (at most 10 bytes each),
 * its values and labels.
 */
#define PROF_STAGE_SIZE  (64 * 1024)

/* At most this many locations of the pcs seen last (direct-mapped). */
#define PROF_PC_CACHE_MAX  16384

/* Protobuf wire types; every field number here is below 16: one byte. */
#define PROF_PB_VARINT   0
#define PROF_PB_LEN      2
#define PROF_PB_KEY(field, type)  ((unsigned char) (((field) << 3) | (type)))


static const char  *prof_value_types[PROF_VALUE_COUNT][2] = {
    { "cpu-time", "nanoseconds" },
    { "cpu-samples", "count" },
    { "wall-time", "nanoseconds" },
    { "wall-samples", "count" },
    { "off-cpu-time", "nanoseconds" },
};


typedef struct {
    uint64_t   mapping_id;      /* 0: none */
    uint64_t   function_id;     /* 0: none */
    uint64_t   address;         /* ELF virtual address when mapped */
    const prof_address_t  *symbol;  /* its line and inlined functions,
                                       with a function */
} prof_pprof_location_t;


typedef struct {
    int64_t    filename;        /* string indices */
    int64_t    build_id;
    size_t     unnamed;         /* locations without a function */
} prof_pprof_mapping_t;


typedef struct {
    uint64_t   pc;
    uint64_t   index;           /* location index + 1, 0: empty */
} prof_pprof_cached_t;


typedef struct {
    int64_t    name;            /* string indices */
    int64_t    filename;        /* 0: none */
    int64_t    start_line;      /* 0: unknown */
} prof_pprof_function_t;


typedef struct {
    const prof_profile_t    *profile;
    prof_aggregator_t       *agg;
    prof_pprof_info_t        info;

    prof_intern_t            strings;           /* the string table */
    int64_t                  value_type[PROF_VALUE_COUNT][2];
    int64_t                  label_root_span_id;
    int64_t                  label_span_id;
    int64_t                  label_endpoint;
    int64_t                  label_end_timestamp;

    prof_intern_t            locations;         /* uint64_t pc */
    prof_pprof_location_t   *location;          /* by location index */
    prof_intern_t            functions;         /* prof_pprof_function_t */
    prof_intern_t            mappings;          /* const prof_object_t * */
    prof_pprof_mapping_t    *mapping;           /* by mapping index */
    prof_pprof_cached_t     *pc_cache;          /* a power of two */
    unsigned                 pc_cache_shift;    /* 64 - log2(its size) */

    /* every stack's location ids, encoded (packed varints) */
    prof_buffer_t            stack_ids;
    size_t                  *stack_offset;      /* by stack index, then
                                                   the end */
    int64_t                 *endpoint_string;   /* by endpoint index */

    /* the labels every sample has (thread id and name), encoded */
    unsigned char            thread_labels[2 * 40];
    size_t                   thread_labels_length;

    prof_buffer_t            sanitized;         /* a string being fixed */

    z_stream                 zs;
    prof_buffer_t           *out;
    int                      error;             /* the first, or 0 */

    size_t                   staged_length;
    unsigned char            staged[PROF_STAGE_SIZE];
} prof_pprof_t;


/* Protobuf encoding: the writers return where the next byte goes. */

static inline unsigned char *
prof_pb_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char) (v | 0x80);
        v >>= 7;
    }

    *p++ = (unsigned char) v;

    return p;
}


static inline size_t
prof_pb_varint_size(uint64_t v)
{
    size_t  n;

    for (n = 1; v >= 0x80; n++) {
        v >>= 7;
    }

    return n;
}


/* A varint field; left out when 0 (proto3). */
static inline unsigned char *
prof_pb_uint(unsigned char *p, unsigned field, uint64_t v)
{
    if (v == 0) {
        return p;
    }

    *p++ = PROF_PB_KEY(field, PROF_PB_VARINT);

    return prof_pb_varint(p, v);
}


static inline unsigned char *
prof_pb_bytes(unsigned char *p, unsigned field, const void *data,
    size_t length)
{
    *p++ = PROF_PB_KEY(field, PROF_PB_LEN);
    p = prof_pb_varint(p, length);
    memcpy(p, data, length);

    return p + length;
}


/* A Label: a string or a number under a key. */
static unsigned char *
prof_pb_label(unsigned char *p, int64_t key, int64_t str, int64_t num)
{
    unsigned char  *end, body[3 * 11];

    end = prof_pb_uint(body, perftools_profiles_Label_key_tag, key);
    end = prof_pb_uint(end, perftools_profiles_Label_str_tag, str);
    end = prof_pb_uint(end, perftools_profiles_Label_num_tag, num);

    return prof_pb_bytes(p, perftools_profiles_Sample_label_tag, body,
                         end - body);
}


/*
 * The index of a string of the table: pprof strings are proto3 strings,
 * valid UTF-8 or the whole profile is refused, and they come from symbol
 * tables, file names, the configuration and clients' URIs. They are
 * interned as prof_utf8_sanitize() makes them (names differing only in
 * invalid bytes share an entry); nearly all of them are valid, and then
 * interned as they are.
 */
static int64_t
prof_pprof_string_n(prof_pprof_t *pp, const char *s, size_t length)
{
    int  inserted;

    if (prof_utf8_valid(s, length)) {
        return prof_intern(&pp->strings, s, length, &inserted);
    }

    pp->sanitized.length = 0;

    if (prof_utf8_append(&pp->sanitized, s, length) != 0) {
        return -ENOMEM;
    }

    return prof_intern(&pp->strings, pp->sanitized.data,
                       pp->sanitized.length, &inserted);
}


static int64_t
prof_pprof_string(prof_pprof_t *pp, const char *s)
{
    return prof_pprof_string_n(pp, s, strlen(s));
}


static int
prof_pprof_deflate(prof_pprof_t *pp, int flush)
{
    int             rc;
    size_t          cap;
    unsigned char  *data;
    prof_buffer_t  *out = pp->out;

    if (out->capacity - out->length < PROF_GZIP_CHUNK) {
        cap = out->capacity ? out->capacity * 2 : 4 * PROF_GZIP_CHUNK;
        data = realloc(out->data, cap);
        if (data == NULL) {
            return -ENOMEM;
        }
        out->data = data;
        out->capacity = cap;
    }

    pp->zs.next_out = out->data + out->length;
    pp->zs.avail_out = out->capacity - out->length;

    rc = deflate(&pp->zs, flush);

    out->length = out->capacity - pp->zs.avail_out;

    if (rc == Z_STREAM_ERROR) {
        return -EIO;
    }

    return rc;
}


/* Deflates what is staged. */
static int
prof_pprof_flush_staged(prof_pprof_t *pp)
{
    int  rc;

    pp->zs.next_in = pp->staged;
    pp->zs.avail_in = pp->staged_length;

    while (pp->zs.avail_in > 0) {
        rc = prof_pprof_deflate(pp, Z_NO_FLUSH);
        if (rc < 0) {
            pp->error = rc;
            return rc;
        }
    }

    pp->staged_length = 0;

    return 0;
}


/* Where a record of at most n bytes goes (n <= PROF_STAGE_SIZE). */
static unsigned char *
prof_pprof_room(prof_pprof_t *pp, size_t n)
{
    if (n > PROF_STAGE_SIZE) {
        pp->error = -EIO;
        return NULL;
    }

    if (PROF_STAGE_SIZE - pp->staged_length < n
        && prof_pprof_flush_staged(pp) != 0)
    {
        return NULL;
    }

    return pp->staged + pp->staged_length;
}


static void
prof_pprof_wrote(prof_pprof_t *pp, const unsigned char *end)
{
    pp->staged_length = end - pp->staged;
}


/* Bytes of any length. */
static int
prof_pprof_put(prof_pprof_t *pp, const void *data, size_t length)
{
    size_t                n;
    const unsigned char  *p = data;

    while (length > 0) {
        if (pp->staged_length == PROF_STAGE_SIZE
            && prof_pprof_flush_staged(pp) != 0)
        {
            return pp->error;
        }

        n = PROF_STAGE_SIZE - pp->staged_length;
        if (n > length) {
            n = length;
        }

        memcpy(pp->staged + pp->staged_length, p, n);
        pp->staged_length += n;
        p += n;
        length -= n;
    }

    return 0;
}


/* ValueType: a type and its unit (string indices). */
static unsigned char *
prof_pb_value_type(unsigned char *p, unsigned field, const int64_t type[2])
{
    unsigned char  *end, body[2 * 11];

    end = prof_pb_uint(body, perftools_profiles_ValueType_type_tag,
                       type[0]);
    end = prof_pb_uint(end, perftools_profiles_ValueType_unit_tag, type[1]);

    return prof_pb_bytes(p, field, body, end - body);
}


static int
prof_pprof_write_sample_types(prof_pprof_t *pp)
{
    unsigned        i;
    unsigned char  *p;

    p = prof_pprof_room(pp, PROF_VALUE_COUNT * 32);
    if (p == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        p = prof_pb_value_type(p, perftools_profiles_Profile_sample_type_tag,
                               pp->value_type[i]);
    }

    prof_pprof_wrote(pp, p);

    return 0;
}


/*
 * A Sample: its stack's location ids (encoded once per stack), its
 * values, the thread's labels (encoded once) and the request's.
 */
static int
prof_pprof_write_sample(prof_pprof_t *pp, const prof_sample_key_t *key,
    const int64_t *values)
{
    size_t          ids_length, values_length, labels_length, length;
    unsigned        i;
    unsigned char  *p, *end, value_bytes[PROF_VALUE_COUNT * 10];
    unsigned char   labels[4 * 40];
    const unsigned char  *ids;

    ids = pp->stack_ids.data + pp->stack_offset[key->stack];
    ids_length = pp->stack_offset[key->stack + 1]
                 - pp->stack_offset[key->stack];

    end = value_bytes;
    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        end = prof_pb_varint(end, (uint64_t) values[i]);
    }
    values_length = end - value_bytes;

    end = labels;

    /* A root the tracer does not tell (0) is left out, not guessed. */
    if (key->span_id != 0) {
        if (key->local_root_span_id != 0) {
            end = prof_pb_label(end, pp->label_root_span_id, 0,
                                (int64_t) key->local_root_span_id);
        }
        end = prof_pb_label(end, pp->label_span_id, 0,
                            (int64_t) key->span_id);
    }

    if (key->endpoint != 0) {
        end = prof_pb_label(end, pp->label_endpoint,
                            pp->endpoint_string[key->endpoint - 1], 0);
    }

    /* The timeline: when the sample's time ended (unix ns). */
    if (key->end_timestamp_ns != 0) {
        end = prof_pb_label(end, pp->label_end_timestamp, 0,
                            key->end_timestamp_ns);
    }

    labels_length = end - labels;

    length = (ids_length ? 1 + prof_pb_varint_size(ids_length) : 0)
             + ids_length
             + 1 + prof_pb_varint_size(values_length) + values_length
             + pp->thread_labels_length + labels_length;

    p = prof_pprof_room(pp, 1 + 10 + length);
    if (p == NULL) {
        return -ENOMEM;
    }

    *p++ = PROF_PB_KEY(perftools_profiles_Profile_sample_tag, PROF_PB_LEN);
    p = prof_pb_varint(p, length);

    if (ids_length != 0) {
        p = prof_pb_bytes(p, perftools_profiles_Sample_location_id_tag, ids,
                          ids_length);
    }

    p = prof_pb_bytes(p, perftools_profiles_Sample_value_tag, value_bytes,
                      values_length);

    memcpy(p, pp->thread_labels, pp->thread_labels_length);
    p += pp->thread_labels_length;
    memcpy(p, labels, labels_length);
    p += labels_length;

    prof_pprof_wrote(pp, p);

    return 0;
}


static int
prof_pprof_write_samples(prof_pprof_t *pp)
{
    uint32_t               i;
    const prof_profile_t  *p = pp->profile;

    for (i = 0; i < p->keys.count; i++) {
        if (prof_pprof_write_sample(pp, prof_intern_key(&p->keys, i, NULL),
                                    &p->values[i * PROF_VALUE_COUNT])
            != 0)
        {
            return -ENOMEM;
        }
    }

    return 0;
}


/*
 * A mapping says it has functions only when every location in it has
 * one: a backend then names the others from its build id.
 */
static int
prof_pprof_write_mappings(prof_pprof_t *pp)
{
    uint32_t              i;
    unsigned char        *p, *end, body[128];
    const prof_object_t  *obj;

    for (i = 0; i < pp->mappings.count; i++) {
        memcpy(&obj, prof_intern_key(&pp->mappings, i, NULL), sizeof(obj));

        end = prof_pb_uint(body, perftools_profiles_Mapping_id_tag, i + 1);
        end = prof_pb_uint(end, perftools_profiles_Mapping_memory_start_tag,
                           obj->start);
        end = prof_pb_uint(end, perftools_profiles_Mapping_memory_limit_tag,
                           obj->end);
        end = prof_pb_uint(end, perftools_profiles_Mapping_file_offset_tag,
                           obj->file_offset);
        end = prof_pb_uint(end, perftools_profiles_Mapping_filename_tag,
                           pp->mapping[i].filename);
        end = prof_pb_uint(end, perftools_profiles_Mapping_build_id_tag,
                           pp->mapping[i].build_id);
        end = prof_pb_uint(end, perftools_profiles_Mapping_has_functions_tag,
                           pp->mapping[i].unnamed == 0);

        p = prof_pprof_room(pp, 1 + 10 + (end - body));
        if (p == NULL) {
            return -ENOMEM;
        }

        prof_pprof_wrote(pp, prof_pb_bytes(p,
                                       perftools_profiles_Profile_mapping_tag,
                                       body, end - body));
    }

    return 0;
}


/* A Line of a Location: function and line number (0: unknown). */
static unsigned char *
prof_pb_line(unsigned char *p, uint64_t function_id, uint32_t lineno)
{
    unsigned char  *end, line[32];

    end = prof_pb_uint(line, perftools_profiles_Line_function_id_tag,
                       function_id);
    if (lineno != 0) {
        end = prof_pb_uint(end, perftools_profiles_Line_line_tag, lineno);
    }

    return prof_pb_bytes(p, perftools_profiles_Location_line_tag, line,
                         end - line);
}


/* The id of the function named name (interned now if new), or -ENOMEM. */
static int64_t
prof_pprof_function(prof_pprof_t *pp, const char *name)
{
    int                    inserted;
    int64_t                function;
    prof_pprof_function_t  f;

    memset(&f, 0, sizeof(f));
    f.name = prof_pprof_string(pp, name);
    if (f.name < 0) {
        return -ENOMEM;
    }

    function = prof_intern(&pp->functions, &f, sizeof(f), &inserted);

    return (function < 0) ? -ENOMEM : function + 1;
}


/*
 * Locations: with a function, its Lines, the functions inlined there
 * first (innermost first), then the function around them (pprof's order).
 * The functions met here first are interned now: written after.
 */
static int
prof_pprof_write_locations(prof_pprof_t *pp)
{
    int64_t                       id;
    uint32_t                      i, k;
    unsigned char                *p, *end,
                                  body[64 + 40 * (PROF_INLINES_MAX + 1)];
    const prof_address_t         *a;
    const prof_pprof_location_t  *loc;

    for (i = 0; i < pp->locations.count; i++) {
        loc = &pp->location[i];

        end = prof_pb_uint(body, perftools_profiles_Location_id_tag, i + 1);
        end = prof_pb_uint(end, perftools_profiles_Location_mapping_id_tag,
                           loc->mapping_id);
        end = prof_pb_uint(end, perftools_profiles_Location_address_tag,
                           loc->address);

        if (loc->function_id != 0) {
            a = loc->symbol;

            for (k = 0; k < a->ninlines && k < PROF_INLINES_MAX; k++) {
                id = prof_pprof_function(pp, a->inlines[k].function);
                if (id < 0) {
                    return -ENOMEM;
                }

                end = prof_pb_line(end, (uint64_t) id, a->inlines[k].line);
            }

            end = prof_pb_line(end, loc->function_id, a->line);
        }

        p = prof_pprof_room(pp, 1 + 10 + (end - body));
        if (p == NULL) {
            return -ENOMEM;
        }

        prof_pprof_wrote(pp, prof_pb_bytes(p,
                                      perftools_profiles_Profile_location_tag,
                                      body, end - body));
    }

    return 0;
}


static int
prof_pprof_write_functions(prof_pprof_t *pp)
{
    uint32_t               i;
    unsigned char         *p, *end, body[64];
    prof_pprof_function_t  f;

    for (i = 0; i < pp->functions.count; i++) {
        memcpy(&f, prof_intern_key(&pp->functions, i, NULL), sizeof(f));

        end = prof_pb_uint(body, perftools_profiles_Function_id_tag, i + 1);
        end = prof_pb_uint(end, perftools_profiles_Function_name_tag, f.name);
        end = prof_pb_uint(end, perftools_profiles_Function_system_name_tag,
                           f.name);
        if (f.filename > 0) {
            end = prof_pb_uint(end, perftools_profiles_Function_filename_tag,
                               f.filename);
        }
        if (f.start_line > 0) {
            end = prof_pb_uint(end,
                               perftools_profiles_Function_start_line_tag,
                               f.start_line);
        }

        p = prof_pprof_room(pp, 1 + 10 + (end - body));
        if (p == NULL) {
            return -ENOMEM;
        }

        prof_pprof_wrote(pp, prof_pb_bytes(p,
                                      perftools_profiles_Profile_function_tag,
                                      body, end - body));
    }

    return 0;
}


static int
prof_pprof_write_strings(prof_pprof_t *pp)
{
    size_t          length;
    uint32_t        i;
    const void     *s;
    unsigned char  *p;

    for (i = 0; i < pp->strings.count; i++) {
        s = prof_intern_key(&pp->strings, i, &length);

        p = prof_pprof_room(pp, 1 + 10);
        if (p == NULL) {
            return -ENOMEM;
        }

        *p++ = PROF_PB_KEY(perftools_profiles_Profile_string_table_tag,
                           PROF_PB_LEN);
        prof_pprof_wrote(pp, prof_pb_varint(p, length));

        if (prof_pprof_put(pp, s, length) != 0) {
            return -ENOMEM;
        }
    }

    return 0;
}


/* The Profile's own fields, after the tables (field number order). */
static int
prof_pprof_write_header(prof_pprof_t *pp)
{
    unsigned char         *p;
    const prof_profile_t  *profile = pp->profile;

    p = prof_pprof_room(pp, 128);
    if (p == NULL) {
        return -ENOMEM;
    }

    p = prof_pb_uint(p, perftools_profiles_Profile_time_nanos_tag,
                     (uint64_t) profile->start_realtime_ns);
    p = prof_pb_uint(p, perftools_profiles_Profile_duration_nanos_tag,
                     (uint64_t) profile->duration_ns);
    p = prof_pb_value_type(p, perftools_profiles_Profile_period_type_tag,
                           pp->value_type[PROF_VALUE_CPU_TIME]);
    p = prof_pb_uint(p, perftools_profiles_Profile_period_tag,
                     (uint64_t) profile->period_ns);
    p = prof_pb_uint(p, perftools_profiles_Profile_default_sample_type_tag,
                     pp->value_type[PROF_VALUE_CPU_TIME][0]);

    prof_pprof_wrote(pp, p);

    return 0;
}


/* The location of pc: its mapping, function and ELF address. */
static int64_t
prof_pprof_location(prof_pprof_t *pp, uint64_t pc)
{
    int                     inserted;
    size_t                  cap;
    int64_t                 index, mapping, function;
    prof_pprof_function_t   f;
    prof_pprof_mapping_t   *map;
    prof_pprof_location_t  *loc;
    prof_pprof_cached_t    *cached;
    const prof_address_t   *a;

    cached = &pp->pc_cache[(pc * 0x9e3779b97f4a7c15ULL)
                           >> pp->pc_cache_shift];

    if (cached->index != 0 && cached->pc == pc) {
        return cached->index - 1;
    }

    index = prof_intern(&pp->locations, &pc, sizeof(pc), &inserted);
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
        loc = realloc(pp->location, cap * sizeof(prof_pprof_location_t));
        if (loc == NULL) {
            return -ENOMEM;
        }
        pp->location = loc;
    }

    loc = &pp->location[index];
    loc->mapping_id = 0;
    loc->function_id = 0;
    loc->address = pc;
    loc->symbol = NULL;

    map = NULL;
    a = prof_aggregator_address(pp->agg, pc);

    if (a != NULL && a->object != NULL) {
        mapping = prof_intern(&pp->mappings, &a->object, sizeof(a->object),
                              &inserted);
        if (mapping < 0) {
            return -ENOMEM;
        }

        if (inserted && (mapping & (mapping - 1)) == 0) {
            cap = mapping ? (size_t) mapping * 2 : 16;
            if (cap < 16) {
                cap = 16;
            }
            map = realloc(pp->mapping, cap * sizeof(prof_pprof_mapping_t));
            if (map == NULL) {
                return -ENOMEM;
            }
            pp->mapping = map;
        }

        map = &pp->mapping[mapping];

        if (inserted) {
            map->filename = prof_pprof_string(pp, a->object->path);
            map->build_id = prof_pprof_string(pp, a->object->build_id);
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
            pp->info.unnamed_locations++;

        } else {
            pp->info.unmapped_locations++;
        }

        return index;
    }

    memset(&f, 0, sizeof(f));
    f.name = prof_pprof_string(pp, a->function);
    f.filename = (a->file != NULL) ? prof_pprof_string(pp, a->file) : 0;
    f.start_line = a->start_line;
    if (f.name < 0 || f.filename < 0) {
        return -ENOMEM;
    }

    function = prof_intern(&pp->functions, &f, sizeof(f), &inserted);
    if (function < 0) {
        return -ENOMEM;
    }

    loc->function_id = function + 1;
    loc->symbol = a;

    return index;
}


/* Every stack's location ids, as the packed field of its samples. */
static int
prof_pprof_stack_ids(prof_pprof_t *pp)
{
    size_t                 length, n, i;
    int64_t                index;
    uint32_t               s;
    unsigned char         *w;
    const uint64_t        *pcs;
    const prof_profile_t  *p = pp->profile;
    prof_buffer_t         *ids = &pp->stack_ids;

    pp->stack_offset = malloc((p->stacks.count + 1) * sizeof(size_t));
    if (pp->stack_offset == NULL) {
        return -ENOMEM;
    }

    /* Twice as many entries as frames, within bounds. */
    n = p->stacks.keys_used / sizeof(uint64_t);
    for (i = 16, pp->pc_cache_shift = 60;
         i < 2 * n && i < PROF_PC_CACHE_MAX;
         i *= 2)
    {
        pp->pc_cache_shift--;
    }

    pp->pc_cache = calloc(i, sizeof(prof_pprof_cached_t));
    if (pp->pc_cache == NULL) {
        return -ENOMEM;
    }

    for (s = 0; s < p->stacks.count; s++) {
        pp->stack_offset[s] = ids->length;
        pcs = prof_intern_key(&p->stacks, s, &length);
        n = length / sizeof(uint64_t);

        if (prof_buffer_reserve(ids, n * 10) != 0) {
            return -ENOMEM;
        }

        w = ids->data + ids->length;

        for (i = 0; i < n; i++) {
            index = prof_pprof_location(pp, pcs[i]);
            if (index < 0) {
                return -ENOMEM;
            }
            w = prof_pb_varint(w, index + 1);
        }

        ids->length = w - ids->data;
    }

    pp->stack_offset[p->stacks.count] = ids->length;

    return 0;
}


static int
prof_pprof_prepare(prof_pprof_t *pp)
{
    size_t                 length, i;
    int64_t                index, thread_id, thread_name;
    uint32_t               s;
    unsigned char         *end;
    const char            *endpoint;
    const prof_profile_t  *p = pp->profile;

    if (prof_pprof_string(pp, "") != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        pp->value_type[i][0] = prof_pprof_string(pp, prof_value_types[i][0]);
        pp->value_type[i][1] = prof_pprof_string(pp, prof_value_types[i][1]);

        if (pp->value_type[i][0] < 0 || pp->value_type[i][1] < 0) {
            return -ENOMEM;
        }
    }

    thread_id = prof_pprof_string(pp, "thread id");
    thread_name = prof_pprof_string(pp, "thread name");
    pp->label_root_span_id = prof_pprof_string(pp, "local root span id");
    pp->label_span_id = prof_pprof_string(pp, "span id");
    pp->label_endpoint = prof_pprof_string(pp, "trace endpoint");
    pp->label_end_timestamp = prof_pprof_string(pp, "end_timestamp_ns");
    index = prof_pprof_string(pp, p->thread_name ? p->thread_name : "");

    if (thread_id < 0 || thread_name < 0 || pp->label_root_span_id < 0
        || pp->label_span_id < 0 || pp->label_endpoint < 0
        || pp->label_end_timestamp < 0 || index < 0)
    {
        return -ENOMEM;
    }

    /* Every sample is labelled with the thread. */
    end = prof_pb_label(pp->thread_labels, thread_id, 0, p->thread_id);
    end = prof_pb_label(end, thread_name, index, 0);
    pp->thread_labels_length = end - pp->thread_labels;

    /* Endpoints are a client's bytes, NUL included: lengths, not strlen. */
    pp->endpoint_string = malloc((p->endpoints.count + 1) * sizeof(int64_t));
    if (pp->endpoint_string == NULL) {
        return -ENOMEM;
    }

    for (s = 0; s < p->endpoints.count; s++) {
        endpoint = prof_intern_key(&p->endpoints, s, &length);
        index = prof_pprof_string_n(pp, endpoint, length);
        if (index < 0) {
            return -ENOMEM;
        }
        pp->endpoint_string[s] = index;
    }

    return prof_pprof_stack_ids(pp);
}


/* The Profile message, in field number order, then the gzip trailer. */
static int
prof_pprof_write_profile(prof_pprof_t *pp)
{
    int  rc;

    if (prof_pprof_write_sample_types(pp) != 0
        || prof_pprof_write_samples(pp) != 0
        || prof_pprof_write_mappings(pp) != 0
        || prof_pprof_write_locations(pp) != 0
        || prof_pprof_write_functions(pp) != 0
        || prof_pprof_write_strings(pp) != 0
        || prof_pprof_write_header(pp) != 0)
    {
        return pp->error ? pp->error : -ENOMEM;
    }

    rc = prof_pprof_flush_staged(pp);
    if (rc != 0) {
        return rc;
    }

    do {
        rc = prof_pprof_deflate(pp, Z_FINISH);
        if (rc < 0) {
            return rc;
        }
    } while (rc != Z_STREAM_END);

    return 0;
}


int
prof_pprof_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    prof_buffer_t *out)
{
    return prof_pprof_encode_info(p, agg, out, NULL);
}


int
prof_pprof_encode_info(const prof_profile_t *p, prof_aggregator_t *agg,
    prof_buffer_t *out, prof_pprof_info_t *info)
{
    int            rc;
    prof_pprof_t  *pp;

    out->length = 0;

    if (info != NULL) {
        memset(info, 0, sizeof(prof_pprof_info_t));
    }

    pp = calloc(1, sizeof(prof_pprof_t));
    if (pp == NULL) {
        return -ENOMEM;
    }

    pp->profile = p;
    pp->agg = agg;
    pp->out = out;

    prof_intern_init(&pp->strings);
    prof_intern_init(&pp->locations);
    prof_intern_init(&pp->functions);
    prof_intern_init(&pp->mappings);

    /* windowBits 15 + 16: a gzip header and trailer. */
    if (deflateInit2(&pp->zs, PROF_GZIP_LEVEL, Z_DEFLATED, 15 + 16, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
    {
        free(pp);
        return -ENOMEM;
    }

    rc = prof_pprof_prepare(pp);
    if (rc == 0) {
        rc = prof_pprof_write_profile(pp);
    }

    if (rc == 0 && info != NULL) {
        *info = pp->info;
        info->locations = pp->locations.count;
    }

    deflateEnd(&pp->zs);
    prof_intern_free(&pp->strings);
    prof_intern_free(&pp->locations);
    prof_intern_free(&pp->functions);
    prof_intern_free(&pp->mappings);
    free(pp->location);
    free(pp->mapping);
    prof_buffer_free(&pp->sanitized);
    prof_buffer_free(&pp->stack_ids);
    free(pp->stack_offset);
    free(pp->pc_cache);
    free(pp->endpoint_string);
    free(pp);

    return rc;
}
