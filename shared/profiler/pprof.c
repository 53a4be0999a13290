/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * pprof encoder: builds the string, mapping, location and function tables
 * of a profile (pprof_tables.c), then writes the protobuf encoding itself,
 * a record at a time, through gzip (gzip_stream.c).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profile.pb.h"
#include "profiler/gzip_stream.h"
#include "profiler/pprof.h"
#include "profiler/pprof_tables.h"
#include "profiler/pprof_wire.h"


typedef struct {
    prof_pprof_tables_t      tables;
    prof_gzip_stream_t       gz;
    const prof_pprof_style_t *style;            /* NULL: Datadog's */
    int64_t                  style_type[PROF_PPROF_STYLE_VALUES_MAX][2];
    int64_t                  style_period[2];
    int64_t                  label_span_id;     /* the style's labels */
    int64_t                  label_trace_id;
    int64_t                  label_endpoint;
    size_t                   samples;
} prof_pprof_t;


static int64_t
prof_pprof_style_string(prof_pprof_t *pp, const char *s)
{
    return prof_pprof_tables_string(&pp->tables, s, strlen(s));
}


/* The style's names in the string table. */
static int
prof_pprof_style_strings(prof_pprof_t *pp)
{
    unsigned                   i;
    const prof_pprof_style_t  *st = pp->style;

    for (i = 0; i < st->value_count; i++) {
        pp->style_type[i][0] = prof_pprof_style_string(pp, st->types[i][0]);
        pp->style_type[i][1] = prof_pprof_style_string(pp, st->types[i][1]);
        if (pp->style_type[i][0] < 0 || pp->style_type[i][1] < 0) {
            return -ENOMEM;
        }
    }

    pp->style_period[0] = prof_pprof_style_string(pp, st->period_type[0]);
    pp->style_period[1] = prof_pprof_style_string(pp, st->period_type[1]);
    pp->label_span_id = prof_pprof_style_string(pp, "span_id");
    pp->label_trace_id = prof_pprof_style_string(pp, "trace_id");
    pp->label_endpoint = prof_pprof_style_string(pp, st->endpoint_label);

    if (pp->style_period[0] < 0 || pp->style_period[1] < 0
        || pp->label_span_id < 0 || pp->label_trace_id < 0
        || pp->label_endpoint < 0)
    {
        return -ENOMEM;
    }

    return 0;
}


static int
prof_pprof_write_sample_types(prof_pprof_t *pp)
{
    unsigned              i;
    unsigned char        *p;
    prof_pprof_tables_t  *t = &pp->tables;

    p = prof_gzip_stream_room(&pp->gz, PROF_VALUE_COUNT * 32);
    if (p == NULL) {
        return -ENOMEM;
    }

    if (pp->style != NULL) {
        for (i = 0; i < pp->style->value_count; i++) {
            p = prof_pb_value_type(p,
                                   perftools_profiles_Profile_sample_type_tag,
                                   pp->style_type[i]);
        }

    } else {
        for (i = 0; i < PROF_VALUE_COUNT; i++) {
            p = prof_pb_value_type(p,
                                   perftools_profiles_Profile_sample_type_tag,
                                   t->value_type[i]);
        }
    }

    prof_gzip_stream_wrote(&pp->gz, p);

    return 0;
}


/* Lowercase hex digits of an id, n of them (16 a half). */
static void
prof_pprof_hex(char *out, uint64_t v, unsigned n)
{
    static const char  digits[] = "0123456789abcdef";

    while (n-- > 0) {
        out[n] = digits[v & 0xf];
        v >>= 4;
    }
}


/*
 * A sample's labels in the style (span_id, trace_id, the endpoint), into
 * end: their strings interned now. NULL: no memory. Not inlined: GCC's
 * object size checks (with -fsanitize=address) misread the label
 * records' lengths once it is.
 */
static __attribute__((noinline)) unsigned char *
prof_pprof_style_labels(prof_pprof_t *pp, const prof_sample_key_t *key,
    unsigned char *end)
{
    char                  hex[32];
    int64_t               s;
    prof_pprof_tables_t  *t = &pp->tables;

    if (key->span_id != 0) {
        prof_pprof_hex(hex, key->span_id, 16);
        s = prof_pprof_tables_string(t, hex, 16);
        if (s < 0) {
            return NULL;
        }
        end = prof_pb_label(end, pp->label_span_id, s, 0);
    }

    if (key->trace_id_high != 0 || key->trace_id_low != 0) {
        prof_pprof_hex(hex, key->trace_id_high, 16);
        prof_pprof_hex(hex + 16, key->trace_id_low, 16);
        s = prof_pprof_tables_string(t, hex, 32);
        if (s < 0) {
            return NULL;
        }
        end = prof_pb_label(end, pp->label_trace_id, s, 0);
    }

    if (key->endpoint != 0) {
        end = prof_pb_label(end, pp->label_endpoint,
                            t->endpoint_string[key->endpoint - 1], 0);
    }

    return end;
}


/*
 * A Sample: its stack's location ids (encoded once per stack), its
 * values, the thread's labels (encoded once) and the request's.
 */
static int
prof_pprof_write_sample(prof_pprof_t *pp, const prof_sample_key_t *key,
    const int64_t *values)
{
    int                   nonzero;
    size_t                ids_length, values_length, labels_length, length,
                          thread_labels_length;
    unsigned              i;
    unsigned char        *p, *end, value_bytes[PROF_VALUE_COUNT * 10];
    unsigned char         labels[5 * 40];
    const unsigned char  *ids;
    prof_pprof_tables_t  *t = &pp->tables;

    ids = t->stack_ids.data + t->stack_offset[key->stack];
    ids_length = t->stack_offset[key->stack + 1]
                 - t->stack_offset[key->stack];

    end = value_bytes;

    if (pp->style != NULL) {
        thread_labels_length = 0;
        nonzero = 0;

        for (i = 0; i < pp->style->value_count; i++) {
            nonzero |= (values[pp->style->values[i]] != 0);
            end = prof_pb_varint(end,
                                 (uint64_t) values[pp->style->values[i]]);
        }

        if (!nonzero) {
            return 0;
        }

    } else {
        thread_labels_length = t->thread_labels_length;

        for (i = 0; i < PROF_VALUE_COUNT; i++) {
            end = prof_pb_varint(end, (uint64_t) values[i]);
        }
    }

    values_length = end - value_bytes;

    end = labels;

    if (pp->style != NULL) {
        end = prof_pprof_style_labels(pp, key, end);
        if (end == NULL) {
            return -ENOMEM;
        }
        goto written;
    }

    /* A root the tracer does not tell (0) is left out, not guessed. */
    if (key->span_id != 0) {
        if (key->local_root_span_id != 0) {
            end = prof_pb_label(end, t->label_root_span_id, 0,
                                (int64_t) key->local_root_span_id);
        }
        end = prof_pb_label(end, t->label_span_id, 0,
                            (int64_t) key->span_id);
    }

    if (key->endpoint != 0) {
        end = prof_pb_label(end, t->label_endpoint,
                            t->endpoint_string[key->endpoint - 1], 0);
    }

    /* The timeline: when the sample's time ended (unix ns). */
    if (key->end_timestamp_ns != 0) {
        end = prof_pb_label(end, t->label_end_timestamp, 0,
                            key->end_timestamp_ns);
    }

    /* A stall of the server's loop: how far into it. */
    if (key->stall_ms != 0) {
        end = prof_pb_label(end, t->label_stall, 0, key->stall_ms);
    }

written:

    labels_length = end - labels;

    length = (ids_length ? 1 + prof_pb_varint_size(ids_length) : 0)
             + ids_length
             + 1 + prof_pb_varint_size(values_length) + values_length
             + thread_labels_length + labels_length;

    p = prof_gzip_stream_room(&pp->gz, 1 + 10 + length);
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

    memcpy(p, t->thread_labels, thread_labels_length);
    p += thread_labels_length;
    memcpy(p, labels, labels_length);
    p += labels_length;

    prof_gzip_stream_wrote(&pp->gz, p);
    pp->samples++;

    return 0;
}


static int
prof_pprof_write_samples(prof_pprof_t *pp)
{
    uint32_t               i;
    const prof_profile_t  *p = pp->tables.profile;

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
    prof_pprof_tables_t  *t = &pp->tables;

    for (i = 0; i < t->mappings.count; i++) {
        memcpy(&obj, prof_intern_key(&t->mappings, i, NULL), sizeof(obj));

        end = prof_pb_uint(body, perftools_profiles_Mapping_id_tag, i + 1);
        end = prof_pb_uint(end, perftools_profiles_Mapping_memory_start_tag,
                           obj->start);
        end = prof_pb_uint(end, perftools_profiles_Mapping_memory_limit_tag,
                           obj->end);
        end = prof_pb_uint(end, perftools_profiles_Mapping_file_offset_tag,
                           obj->file_offset);
        end = prof_pb_uint(end, perftools_profiles_Mapping_filename_tag,
                           t->mapping[i].filename);
        end = prof_pb_uint(end, perftools_profiles_Mapping_build_id_tag,
                           t->mapping[i].build_id);
        end = prof_pb_uint(end, perftools_profiles_Mapping_has_functions_tag,
                           t->mapping[i].unnamed == 0);

        p = prof_gzip_stream_room(&pp->gz, 1 + 10 + (end - body));
        if (p == NULL) {
            return -ENOMEM;
        }

        p = prof_pb_bytes(p, perftools_profiles_Profile_mapping_tag, body,
                          end - body);
        prof_gzip_stream_wrote(&pp->gz, p);
    }

    return 0;
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
    prof_pprof_tables_t          *t = &pp->tables;

    for (i = 0; i < t->locations.count; i++) {
        loc = &t->location[i];

        end = prof_pb_uint(body, perftools_profiles_Location_id_tag, i + 1);
        end = prof_pb_uint(end, perftools_profiles_Location_mapping_id_tag,
                           loc->mapping_id);
        end = prof_pb_uint(end, perftools_profiles_Location_address_tag,
                           loc->address);

        if (loc->function_id != 0) {
            a = loc->symbol;

            for (k = 0; k < a->ninlines && k < PROF_INLINES_MAX; k++) {
                id = prof_pprof_tables_function(t, a->inlines[k].function);
                if (id < 0) {
                    return -ENOMEM;
                }

                end = prof_pb_line(end, (uint64_t) id, a->inlines[k].line);
            }

            end = prof_pb_line(end, loc->function_id, a->line);
        }

        p = prof_gzip_stream_room(&pp->gz, 1 + 10 + (end - body));
        if (p == NULL) {
            return -ENOMEM;
        }

        p = prof_pb_bytes(p, perftools_profiles_Profile_location_tag, body,
                          end - body);
        prof_gzip_stream_wrote(&pp->gz, p);
    }

    return 0;
}


static int
prof_pprof_write_functions(prof_pprof_t *pp)
{
    uint32_t               i;
    unsigned char         *p, *end, body[64];
    prof_pprof_function_t  f;
    prof_pprof_tables_t   *t = &pp->tables;

    for (i = 0; i < t->functions.count; i++) {
        memcpy(&f, prof_intern_key(&t->functions, i, NULL), sizeof(f));

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

        p = prof_gzip_stream_room(&pp->gz, 1 + 10 + (end - body));
        if (p == NULL) {
            return -ENOMEM;
        }

        p = prof_pb_bytes(p, perftools_profiles_Profile_function_tag, body,
                          end - body);
        prof_gzip_stream_wrote(&pp->gz, p);
    }

    return 0;
}


static int
prof_pprof_write_strings(prof_pprof_t *pp)
{
    size_t                length;
    uint32_t              i;
    const void           *s;
    unsigned char        *p;
    prof_pprof_tables_t  *t = &pp->tables;

    for (i = 0; i < t->strings.count; i++) {
        s = prof_intern_key(&t->strings, i, &length);

        p = prof_gzip_stream_room(&pp->gz, 1 + 10);
        if (p == NULL) {
            return -ENOMEM;
        }

        *p++ = PROF_PB_KEY(perftools_profiles_Profile_string_table_tag,
                           PROF_PB_LEN);
        prof_gzip_stream_wrote(&pp->gz, prof_pb_varint(p, length));

        if (prof_gzip_stream_put(&pp->gz, s, length) != 0) {
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
    prof_pprof_tables_t   *t = &pp->tables;
    const prof_profile_t  *profile = t->profile;

    p = prof_gzip_stream_room(&pp->gz, 128);
    if (p == NULL) {
        return -ENOMEM;
    }

    p = prof_pb_uint(p, perftools_profiles_Profile_time_nanos_tag,
                     (uint64_t) profile->start_realtime_ns);
    p = prof_pb_uint(p, perftools_profiles_Profile_duration_nanos_tag,
                     (uint64_t) profile->duration_ns);
    p = prof_pb_value_type(p, perftools_profiles_Profile_period_type_tag,
                           pp->style ? pp->style_period
                                     : t->value_type[PROF_VALUE_CPU_TIME]);
    p = prof_pb_uint(p, perftools_profiles_Profile_period_tag,
                     (uint64_t) profile->period_ns);
    p = prof_pb_uint(p, perftools_profiles_Profile_default_sample_type_tag,
                     pp->style ? pp->style_type[0][0]
                               : t->value_type[PROF_VALUE_CPU_TIME][0]);

    prof_gzip_stream_wrote(&pp->gz, p);

    return 0;
}


/* The Profile message, in field number order, then the gzip trailer. */
static int
prof_pprof_write_profile(prof_pprof_t *pp)
{
    if (prof_pprof_write_sample_types(pp) != 0
        || prof_pprof_write_samples(pp) != 0
        || prof_pprof_write_mappings(pp) != 0
        || prof_pprof_write_locations(pp) != 0
        || prof_pprof_write_functions(pp) != 0
        || prof_pprof_write_strings(pp) != 0
        || prof_pprof_write_header(pp) != 0)
    {
        return pp->gz.error ? pp->gz.error : -ENOMEM;
    }

    return prof_gzip_stream_finish(&pp->gz);
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
    return prof_pprof_encode_style(p, agg, NULL, out, info);
}


int
prof_pprof_encode_style(const prof_profile_t *p, prof_aggregator_t *agg,
    const prof_pprof_style_t *style, prof_buffer_t *out,
    prof_pprof_info_t *info)
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

    prof_pprof_tables_init(&pp->tables, p, agg);
    pp->style = style;

    if (prof_gzip_stream_init(&pp->gz, out) != 0) {
        free(pp);
        return -ENOMEM;
    }

    rc = prof_pprof_tables_build(&pp->tables);
    if (rc == 0 && style != NULL) {
        rc = prof_pprof_style_strings(pp);
    }
    if (rc == 0) {
        rc = prof_pprof_write_profile(pp);
    }

    if (rc == 0 && info != NULL) {
        *info = pp->tables.info;
        info->locations = pp->tables.locations.count;
        info->samples = pp->samples;
        info->uncompressed_bytes = pp->gz.zs.total_in;
    }

    prof_gzip_stream_end(&pp->gz);
    prof_pprof_tables_free(&pp->tables);
    free(pp);

    return rc;
}
