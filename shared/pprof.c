/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * pprof encoder: builds the string, mapping, location and function tables
 * of a profile, then streams the nanopb encoding through gzip.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <pb_encode.h>

#include "profile.pb.h"
#include "pprof.h"
#include "utf8.h"


#define PROF_GZIP_CHUNK  (64 * 1024)
#define PROF_STAGE_SIZE  (16 * 1024)

/* Larger than a sample of PROF_MAX_FRAMES_LIMIT locations and its labels. */
#define PROF_SCRATCH_SIZE  (PROF_MAX_FRAMES_LIMIT * 10 + 1024)


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
} prof_pprof_location_t;


typedef struct {
    int64_t    filename;        /* string indices */
    int64_t    build_id;
} prof_pprof_mapping_t;


typedef struct {
    const prof_profile_t    *profile;
    prof_aggregator_t       *agg;

    prof_intern_t            strings;           /* the string table */
    int64_t                  value_type[PROF_VALUE_COUNT][2];
    int64_t                  label_thread_id;
    int64_t                  label_thread_name;
    int64_t                  label_root_span_id;
    int64_t                  label_span_id;
    int64_t                  label_endpoint;
    int64_t                  label_end_timestamp;
    int64_t                  thread_name;

    prof_intern_t            locations;         /* uint64_t pc */
    prof_pprof_location_t   *location;          /* by location index */
    prof_intern_t            functions;         /* int64_t name string */
    prof_intern_t            mappings;          /* const prof_object_t * */
    prof_pprof_mapping_t    *mapping;           /* by mapping index */

    uint64_t                *stack_locations;   /* ids, every stack */
    size_t                  *stack_offset;      /* by stack index */
    int64_t                 *endpoint_string;   /* by endpoint index */

    const prof_sample_key_t *key;               /* the sample encoded */
    const int64_t           *values;

    prof_buffer_t            sanitized;         /* a string being fixed */

    z_stream                 zs;
    prof_buffer_t           *out;

    /* a sample or location, encoded once (see prof_encode_once) */
    unsigned char            scratch[PROF_SCRATCH_SIZE];

    /* nanopb writes a few bytes at a time: deflate them in blocks */
    size_t                   staged_length;
    unsigned char            staged[PROF_STAGE_SIZE];
} prof_pprof_t;


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
    pp->zs.next_in = pp->staged;
    pp->zs.avail_in = pp->staged_length;

    while (pp->zs.avail_in > 0) {
        if (prof_pprof_deflate(pp, Z_NO_FLUSH) < 0) {
            return -1;
        }
    }

    pp->staged_length = 0;

    return 0;
}


static bool
prof_pprof_write(pb_ostream_t *stream, const pb_byte_t *buf, size_t count)
{
    size_t         n;
    prof_pprof_t  *pp = stream->state;

    while (count > 0) {
        if (pp->staged_length == PROF_STAGE_SIZE
            && prof_pprof_flush_staged(pp) != 0)
        {
            return false;
        }

        n = PROF_STAGE_SIZE - pp->staged_length;
        if (n > count) {
            n = count;
        }

        memcpy(pp->staged + pp->staged_length, buf, n);
        pp->staged_length += n;
        buf += n;
        count -= n;
    }

    return true;
}


/*
 * A repeated submessage field: pb_encode_submessage runs the message's
 * encoders twice (to size it first, then to write it), and nested ones
 * four times. Samples and locations, the bulk of a profile, are encoded
 * once into scratch memory and copied.
 */
static bool
prof_encode_once(pb_ostream_t *stream, const pb_field_t *field,
    prof_pprof_t *pp, const pb_msgdesc_t *fields, const void *msg)
{
    pb_ostream_t  mem;

    mem = pb_ostream_from_buffer(pp->scratch, sizeof(pp->scratch));

    if (!pb_encode(&mem, fields, msg)) {
        return pb_encode_tag_for_field(stream, field)
               && pb_encode_submessage(stream, fields, msg);
    }

    return pb_encode_tag_for_field(stream, field)
           && pb_encode_string(stream, pp->scratch, mem.bytes_written);
}


static bool
prof_encode_packed(pb_ostream_t *stream, const pb_field_t *field,
    const uint64_t *v, size_t n)
{
    size_t        i;
    pb_ostream_t  sizing = PB_OSTREAM_SIZING;

    if (n == 0) {
        return true;
    }

    for (i = 0; i < n; i++) {
        if (!pb_encode_varint(&sizing, v[i])) {
            return false;
        }
    }

    if (!pb_encode_tag(stream, PB_WT_STRING, field->tag)
        || !pb_encode_varint(stream, sizing.bytes_written))
    {
        return false;
    }

    for (i = 0; i < n; i++) {
        if (!pb_encode_varint(stream, v[i])) {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_sample_types(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    unsigned                      i;
    prof_pprof_t                 *pp = *arg;
    perftools_profiles_ValueType  vt;

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        vt.type = pp->value_type[i][0];
        vt.unit = pp->value_type[i][1];

        if (!pb_encode_tag_for_field(stream, field)
            || !pb_encode_submessage(stream,
                                     perftools_profiles_ValueType_fields,
                                     &vt))
        {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_location_ids(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    prof_pprof_t  *pp = *arg;
    size_t         first, last;

    first = pp->stack_offset[pp->key->stack];
    last = pp->stack_offset[pp->key->stack + 1];

    return prof_encode_packed(stream, field, pp->stack_locations + first,
                              last - first);
}


static bool
prof_encode_values(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    prof_pprof_t  *pp = *arg;

    return prof_encode_packed(stream, field, (const uint64_t *) pp->values,
                              PROF_VALUE_COUNT);
}


static bool
prof_encode_label(pb_ostream_t *stream, const pb_field_t *field,
    int64_t key, int64_t str, int64_t num)
{
    perftools_profiles_Label  label;

    memset(&label, 0, sizeof(label));
    label.key = key;
    label.str = str;
    label.num = num;

    return pb_encode_tag_for_field(stream, field)
           && pb_encode_submessage(stream, perftools_profiles_Label_fields,
                                   &label);
}


static bool
prof_encode_labels(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    prof_pprof_t             *pp = *arg;
    const prof_sample_key_t  *key = pp->key;

    if (!prof_encode_label(stream, field, pp->label_thread_id, 0,
                           pp->profile->thread_id)
        || !prof_encode_label(stream, field, pp->label_thread_name,
                              pp->thread_name, 0))
    {
        return false;
    }

    /* A root the tracer does not tell (0) is left out, not guessed. */
    if (key->span_id != 0) {
        if ((key->local_root_span_id != 0
             && !prof_encode_label(stream, field, pp->label_root_span_id, 0,
                                   (int64_t) key->local_root_span_id))
            || !prof_encode_label(stream, field, pp->label_span_id, 0,
                                  (int64_t) key->span_id))
        {
            return false;
        }
    }

    if (key->endpoint != 0) {
        if (!prof_encode_label(stream, field, pp->label_endpoint,
                               pp->endpoint_string[key->endpoint - 1], 0))
        {
            return false;
        }
    }

    /* The timeline: when the sample's time ended (unix ns). */
    if (key->end_timestamp_ns != 0) {
        if (!prof_encode_label(stream, field, pp->label_end_timestamp, 0,
                               key->end_timestamp_ns))
        {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_samples(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    uint32_t                   i;
    prof_pprof_t              *pp = *arg;
    const prof_profile_t      *p = pp->profile;
    perftools_profiles_Sample  sample;

    for (i = 0; i < p->keys.count; i++) {
        pp->key = prof_intern_key(&p->keys, i, NULL);
        pp->values = &p->values[i * PROF_VALUE_COUNT];

        sample.location_id.funcs.encode = prof_encode_location_ids;
        sample.location_id.arg = pp;
        sample.value.funcs.encode = prof_encode_values;
        sample.value.arg = pp;
        sample.label.funcs.encode = prof_encode_labels;
        sample.label.arg = pp;

        if (!prof_encode_once(stream, field, pp,
                              perftools_profiles_Sample_fields, &sample))
        {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_mappings(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    uint32_t                    i;
    prof_pprof_t               *pp = *arg;
    const prof_object_t        *obj;
    perftools_profiles_Mapping  m;

    for (i = 0; i < pp->mappings.count; i++) {
        memcpy(&obj, prof_intern_key(&pp->mappings, i, NULL), sizeof(obj));

        memset(&m, 0, sizeof(m));
        m.id = i + 1;
        m.memory_start = obj->start;
        m.memory_limit = obj->end;
        m.file_offset = obj->file_offset;
        m.filename = pp->mapping[i].filename;
        m.build_id = pp->mapping[i].build_id;
        m.has_functions = true;

        if (!pb_encode_tag_for_field(stream, field)
            || !pb_encode_submessage(stream,
                                     perftools_profiles_Mapping_fields, &m))
        {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_line(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    const prof_pprof_location_t  *loc = *arg;
    perftools_profiles_Line       line;

    if (loc->function_id == 0) {
        return true;
    }

    memset(&line, 0, sizeof(line));
    line.function_id = loc->function_id;

    return pb_encode_tag_for_field(stream, field)
           && pb_encode_submessage(stream, perftools_profiles_Line_fields,
                                   &line);
}


static bool
prof_encode_locations(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    uint32_t                     i;
    prof_pprof_t                *pp = *arg;
    perftools_profiles_Location  loc;

    for (i = 0; i < pp->locations.count; i++) {
        memset(&loc, 0, sizeof(loc));
        loc.id = i + 1;
        loc.mapping_id = pp->location[i].mapping_id;
        loc.address = pp->location[i].address;
        loc.line.funcs.encode = prof_encode_line;
        loc.line.arg = &pp->location[i];

        if (!prof_encode_once(stream, field, pp,
                              perftools_profiles_Location_fields, &loc))
        {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_functions(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    uint32_t                     i;
    prof_pprof_t                *pp = *arg;
    perftools_profiles_Function  fn;

    for (i = 0; i < pp->functions.count; i++) {
        memset(&fn, 0, sizeof(fn));
        fn.id = i + 1;
        memcpy(&fn.name, prof_intern_key(&pp->functions, i, NULL),
               sizeof(int64_t));
        fn.system_name = fn.name;

        if (!pb_encode_tag_for_field(stream, field)
            || !pb_encode_submessage(stream,
                                     perftools_profiles_Function_fields,
                                     &fn))
        {
            return false;
        }
    }

    return true;
}


static bool
prof_encode_strings(pb_ostream_t *stream, const pb_field_t *field,
    void * const *arg)
{
    size_t         length;
    uint32_t       i;
    const void    *s;
    prof_pprof_t  *pp = *arg;

    for (i = 0; i < pp->strings.count; i++) {
        s = prof_intern_key(&pp->strings, i, &length);

        if (!pb_encode_tag_for_field(stream, field)
            || !pb_encode_string(stream, s, length))
        {
            return false;
        }
    }

    return true;
}


/* The location of pc: its mapping, function and ELF address. */
static int64_t
prof_pprof_location(prof_pprof_t *pp, uint64_t pc)
{
    int                     inserted;
    size_t                  cap;
    int64_t                 index, mapping, name, function;
    prof_pprof_mapping_t   *map;
    prof_pprof_location_t  *loc;
    const prof_address_t   *a;

    index = prof_intern(&pp->locations, &pc, sizeof(pc), &inserted);
    if (index < 0 || !inserted) {
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

    a = prof_aggregator_address(pp->agg, pc);
    if (a == NULL) {
        return index;
    }

    if (a->object != NULL) {
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

        if (inserted) {
            map = &pp->mapping[mapping];
            map->filename = prof_pprof_string(pp, a->object->path);
            map->build_id = prof_pprof_string(pp, a->object->build_id);

            if (map->filename < 0 || map->build_id < 0) {
                return -ENOMEM;
            }
        }

        loc->mapping_id = mapping + 1;
        loc->address = pc - a->object->load_bias;
    }

    if (a->function != NULL) {
        name = prof_pprof_string(pp, a->function);
        if (name < 0) {
            return -ENOMEM;
        }

        function = prof_intern(&pp->functions, &name, sizeof(name),
                               &inserted);
        if (function < 0) {
            return -ENOMEM;
        }

        loc->function_id = function + 1;
    }

    return index;
}


static int
prof_pprof_prepare(prof_pprof_t *pp)
{
    size_t                 length, total, n, i;
    int64_t                index;
    uint32_t               s;
    const char            *endpoint;
    const uint64_t        *pcs;
    const prof_profile_t  *p = pp->profile;

    if (prof_pprof_string(pp, "") != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        pp->value_type[i][0] = prof_pprof_string(pp, prof_value_types[i][0]);
        pp->value_type[i][1] = prof_pprof_string(pp, prof_value_types[i][1]);
    }

    pp->label_thread_id = prof_pprof_string(pp, "thread id");
    pp->label_thread_name = prof_pprof_string(pp, "thread name");
    pp->label_root_span_id = prof_pprof_string(pp, "local root span id");
    pp->label_span_id = prof_pprof_string(pp, "span id");
    pp->label_endpoint = prof_pprof_string(pp, "trace endpoint");
    pp->label_end_timestamp = prof_pprof_string(pp, "end_timestamp_ns");
    pp->thread_name = prof_pprof_string(pp, p->thread_name
                                            ? p->thread_name : "");

    if (pp->label_thread_id < 0 || pp->label_thread_name < 0
        || pp->label_root_span_id < 0 || pp->label_span_id < 0
        || pp->label_endpoint < 0 || pp->label_end_timestamp < 0
        || pp->thread_name < 0)
    {
        return -ENOMEM;
    }

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        if (pp->value_type[i][0] < 0 || pp->value_type[i][1] < 0) {
            return -ENOMEM;
        }
    }

    pp->endpoint_string = malloc((p->endpoints.count + 1) * sizeof(int64_t));
    pp->stack_offset = malloc((p->stacks.count + 1) * sizeof(size_t));
    total = p->stacks.keys_used / sizeof(uint64_t);
    pp->stack_locations = malloc((total + 1) * sizeof(uint64_t));

    if (pp->endpoint_string == NULL || pp->stack_offset == NULL
        || pp->stack_locations == NULL)
    {
        return -ENOMEM;
    }

    /* Endpoints are a client's bytes, NUL included: lengths, not strlen. */
    for (s = 0; s < p->endpoints.count; s++) {
        endpoint = prof_intern_key(&p->endpoints, s, &length);
        index = prof_pprof_string_n(pp, endpoint, length);
        if (index < 0) {
            return -ENOMEM;
        }
        pp->endpoint_string[s] = index;
    }

    total = 0;

    for (s = 0; s < p->stacks.count; s++) {
        pp->stack_offset[s] = total;
        pcs = prof_intern_key(&p->stacks, s, &length);
        n = length / sizeof(uint64_t);

        for (i = 0; i < n; i++) {
            index = prof_pprof_location(pp, pcs[i]);
            if (index < 0) {
                return -ENOMEM;
            }
            pp->stack_locations[total++] = index + 1;
        }
    }

    pp->stack_offset[p->stacks.count] = total;

    return 0;
}


static int
prof_pprof_write_profile(prof_pprof_t *pp)
{
    int                         rc;
    pb_ostream_t                stream;
    perftools_profiles_Profile  msg;

    memset(&msg, 0, sizeof(msg));

    msg.sample_type.funcs.encode = prof_encode_sample_types;
    msg.sample_type.arg = pp;
    msg.sample.funcs.encode = prof_encode_samples;
    msg.sample.arg = pp;
    msg.mapping.funcs.encode = prof_encode_mappings;
    msg.mapping.arg = pp;
    msg.location.funcs.encode = prof_encode_locations;
    msg.location.arg = pp;
    msg.function.funcs.encode = prof_encode_functions;
    msg.function.arg = pp;
    msg.string_table.funcs.encode = prof_encode_strings;
    msg.string_table.arg = pp;

    msg.time_nanos = pp->profile->start_realtime_ns;
    msg.duration_nanos = pp->profile->duration_ns;
    msg.has_period_type = true;
    msg.period_type.type = pp->value_type[PROF_VALUE_CPU_TIME][0];
    msg.period_type.unit = pp->value_type[PROF_VALUE_CPU_TIME][1];
    msg.period = pp->profile->period_ns;
    msg.default_sample_type = pp->value_type[PROF_VALUE_CPU_TIME][0];

    memset(&stream, 0, sizeof(stream));
    stream.callback = prof_pprof_write;
    stream.state = pp;
    stream.max_size = SIZE_MAX;

    if (!pb_encode(&stream, perftools_profiles_Profile_fields, &msg)
        || prof_pprof_flush_staged(pp) != 0)
    {
        return -EIO;
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
    int            rc;
    prof_pprof_t   pp;

    memset(&pp, 0, sizeof(pp));
    pp.profile = p;
    pp.agg = agg;
    pp.out = out;
    out->length = 0;

    prof_intern_init(&pp.strings);
    prof_intern_init(&pp.locations);
    prof_intern_init(&pp.functions);
    prof_intern_init(&pp.mappings);

    /* windowBits 15 + 16: a gzip header and trailer. */
    if (deflateInit2(&pp.zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
    {
        return -ENOMEM;
    }

    rc = prof_pprof_prepare(&pp);
    if (rc == 0) {
        rc = prof_pprof_write_profile(&pp);
    }

    deflateEnd(&pp.zs);
    prof_intern_free(&pp.strings);
    prof_intern_free(&pp.locations);
    prof_intern_free(&pp.functions);
    prof_intern_free(&pp.mappings);
    free(pp.location);
    free(pp.mapping);
    prof_buffer_free(&pp.sanitized);
    free(pp.stack_locations);
    free(pp.stack_offset);
    free(pp.endpoint_string);

    return rc;
}
