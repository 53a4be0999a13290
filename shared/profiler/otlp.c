/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * OTLP profiles: a profile's samples merged again per (stack, endpoint,
 * link) into a Profile per sample type, with the resource, and its pprof
 * tables (pprof_tables.c) as the request's dictionary
 * (otlp_dictionary.c); the whole request gzip'd.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/utf8.h"
#include "profiler/otlp_internal.h"


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
