/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A tracer in the same worker (nginx-datadog, nginx-otel): found by the
 * directives its module declares, read through its variables and, for
 * values kept in its configuration by nginx's own slot handlers, through
 * the configuration nginx built for it. Gives a request's span ids, the
 * resource name its spans carry, and the service its spans say.
 */

#include "ngx_http_profiling_module.h"

#include "worker/trace_context.h"


/* Where a module keeps a directive's value, when nginx's slot sets it. */
static ngx_int_t
ngx_http_profiling_slot(ngx_module_t *m, const char *name,
    char *(*set)(ngx_conf_t *cf, ngx_command_t *cmd, void *conf),
    ngx_uint_t conf)
{
    ngx_command_t  *cmd;

    if (m->commands == NULL) {
        return -1;
    }

    for (cmd = m->commands; cmd->name.len; cmd++) {
        if (cmd->name.len == ngx_strlen(name)
            && ngx_strncmp(cmd->name.data, name, cmd->name.len) == 0)
        {
            return (cmd->set == set && cmd->conf == conf)
                   ? (ngx_int_t) cmd->offset : -1;
        }
    }

    return -1;
}


static ngx_uint_t
ngx_http_profiling_has_command(ngx_module_t *m, const char *name)
{
    ngx_command_t  *cmd;

    if (m->commands == NULL) {
        return 0;
    }

    for (cmd = m->commands; cmd->name.len; cmd++) {
        if (cmd->name.len == ngx_strlen(name)
            && ngx_strncmp(cmd->name.data, name, cmd->name.len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_profiling_variable(ngx_conf_t *cf, const char *name)
{
    ngx_str_t  s;

    s.data = (u_char *) name;
    s.len = ngx_strlen(name);

    return ngx_http_get_variable_index(cf, &s);
}


/*
 * postconfiguration: the tracer loaded in this configuration (kind 0:
 * none), kept with the configuration: a configuration that fails later
 * must not change what the running one uses.
 */
ngx_http_profiling_tracer_t *
ngx_http_profiling_tracer_create(ngx_conf_t *cf)
{
    ngx_uint_t                    i;
    ngx_module_t                 *m;
    ngx_http_profiling_tracer_t  *t;

    t = ngx_pcalloc(cf->pool, sizeof(ngx_http_profiling_tracer_t));
    if (t == NULL) {
        return NULL;
    }

    for (i = 0; cf->cycle->modules[i]; i++) {
        m = cf->cycle->modules[i];

        if (m->type != NGX_HTTP_MODULE) {
            continue;
        }

        if (ngx_http_profiling_has_command(m, "datadog_trace_locations")) {
            t->kind = NGX_HTTP_PROFILING_DATADOG;
            t->module = m;
            break;
        }

        if (ngx_http_profiling_has_command(m, "otel_trace")) {
            t->kind = NGX_HTTP_PROFILING_OTEL;
            t->module = m;
            break;
        }
    }

    if (t->kind == NGX_HTTP_PROFILING_NO_TRACER) {
        return t;
    }

    m = t->module;

    if (t->kind == NGX_HTTP_PROFILING_DATADOG) {
        t->span_id = ngx_http_profiling_variable(cf, "datadog_span_id");
        t->trace_id = ngx_http_profiling_variable(cf, "datadog_trace_id");
        t->locations = ngx_http_profiling_slot(m, "datadog_trace_locations",
                                               ngx_conf_set_flag_slot,
                                               NGX_HTTP_LOC_CONF_OFFSET);
        t->resource = ngx_http_profiling_slot(m, "datadog_resource_name",
                                              ngx_http_set_complex_value_slot,
                                              NGX_HTTP_LOC_CONF_OFFSET);
        t->service = ngx_http_profiling_slot(m, "datadog_service_name",
                                             ngx_http_set_complex_value_slot,
                                             NGX_HTTP_LOC_CONF_OFFSET);
        t->env = ngx_http_profiling_slot(m, "datadog_environment",
                                         ngx_http_set_complex_value_slot,
                                         NGX_HTTP_LOC_CONF_OFFSET);
        t->version = ngx_http_profiling_slot(m, "datadog_version",
                                             ngx_http_set_complex_value_slot,
                                             NGX_HTTP_LOC_CONF_OFFSET);
        t->main_service = -1;

    } else {
        t->span_id = ngx_http_profiling_variable(cf, "otel_span_id");
        t->trace_id = ngx_http_profiling_variable(cf, "otel_trace_id");
        t->locations = -1;
        t->resource = -1;
        t->service = -1;
        t->env = -1;
        t->version = -1;
        t->main_service = ngx_http_profiling_slot(m, "otel_service_name",
                                                  ngx_conf_set_str_slot,
                                                  NGX_HTTP_MAIN_CONF_OFFSET);
    }

    if (t->span_id == NGX_ERROR || t->trace_id == NGX_ERROR) {
        return NULL;
    }

    return t;
}


/* Whether a tracer is loaded in the configuration of tracer. */
ngx_uint_t
ngx_http_profiling_tracer_found(ngx_http_profiling_tracer_t *tracer)
{
    return tracer->kind != NGX_HTTP_PROFILING_NO_TRACER;
}


/*
 * init_process: the tracer of the cycle this process runs (configured;
 * NULL: none) copied into the worker's state (running). Whether there is
 * one.
 */
ngx_uint_t
ngx_http_profiling_tracer_use(ngx_http_profiling_tracer_t *running,
    ngx_http_profiling_tracer_t *configured)
{
    if (configured == NULL) {
        ngx_memzero(running, sizeof(ngx_http_profiling_tracer_t));
        return 0;
    }

    *running = *configured;

    return running->kind != NGX_HTTP_PROFILING_NO_TRACER;
}


/* A hex id variable: 16 or 32 digits (the low 64 bits), else 0. */
static uint64_t
ngx_http_profiling_hex_variable(ngx_http_request_t *r, ngx_int_t index)
{
    uint64_t                    id;
    ngx_http_variable_value_t  *v;

    v = ngx_http_get_flushed_variable(r, index);

    if (v == NULL || v->not_found || !v->valid
        || prof_parse_id((char *) v->data, v->len, &id) != 0)
    {
        return 0;
    }

    return id;
}


/*
 * In the request's first phase, before the tracer adds its own trace
 * headers for the upstreams: whether it came with a caller's trace context
 * the tracer would continue (Datadog, W3C or B3 headers).
 */
ngx_uint_t
ngx_http_profiling_tracer_continues_trace(ngx_http_profiling_tracer_t *t,
    ngx_http_request_t *r)
{
    static const char  *names[] = {
        "traceparent", "x-datadog-trace-id", "b3", "x-b3-traceid", NULL
    };

    size_t            n;
    ngx_uint_t        i;
    const char      **name;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    if (t->kind != NGX_HTTP_PROFILING_DATADOG) {
        return 0;
    }

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return 0;
            }
            part = part->next;
            h = part->elts;
            i = 0;
        }

        for (name = names; *name != NULL; name++) {
            n = ngx_strlen(*name);
            if (h[i].key.len == n
                && ngx_strncasecmp(h[i].key.data, (u_char *) *name, n) == 0)
            {
                return 1;
            }
        }
    }
}


/*
 * A request's ids from the tracer: NGX_DECLINED when none runs here. The
 * active span, and the local root: the same span unless the tracer traces
 * locations (nginx-datadog); then the request span, whose id is the trace
 * id's low 64 bits when the trace started here, and unknown (0) when it
 * continues a caller's.
 */
ngx_int_t
ngx_http_profiling_tracer_ids(ngx_http_profiling_tracer_t *t,
    ngx_http_request_t *r, uint64_t *span_id, uint64_t *root_id)
{
    uint64_t     trace;
    ngx_flag_t  *locations;

    if (t->kind == NGX_HTTP_PROFILING_NO_TRACER) {
        return NGX_DECLINED;
    }

    *span_id = ngx_http_profiling_hex_variable(r, t->span_id);
    *root_id = *span_id;

    if (*span_id == 0 || t->kind != NGX_HTTP_PROFILING_DATADOG) {
        return NGX_OK;
    }

    if (t->locations >= 0) {
        locations = (ngx_flag_t *) ((u_char *)
                                    r->loc_conf[t->module->ctx_index]
                                    + t->locations);
        if (*locations != 1) {
            return NGX_OK;
        }
    }

    trace = ngx_http_profiling_hex_variable(r, t->trace_id);

    *root_id = (trace != 0 && !ngx_http_profiling_request_continues_trace(r))
               ? trace : 0;

    return NGX_OK;
}


/*
 * A request's trace id from the tracer, both halves: NGX_DECLINED when
 * none runs here; 0 and 0 when it has none.
 */
ngx_int_t
ngx_http_profiling_tracer_trace_id(ngx_http_profiling_tracer_t *t,
    ngx_http_request_t *r, uint64_t *high, uint64_t *low)
{
    ngx_http_variable_value_t  *v;

    if (t->kind == NGX_HTTP_PROFILING_NO_TRACER) {
        return NGX_DECLINED;
    }

    *high = 0;
    *low = 0;

    v = ngx_http_get_flushed_variable(r, t->trace_id);

    if (v != NULL && !v->not_found && v->valid) {
        (void) prof_parse_trace_id((char *) v->data, v->len, high, low);
    }

    return NGX_OK;
}


/* The tracer's resource name formula for the request's spans, or NULL. */
ngx_http_complex_value_t *
ngx_http_profiling_tracer_resource(ngx_http_profiling_tracer_t *t,
    ngx_http_request_t *r)
{
    if (t->kind != NGX_HTTP_PROFILING_DATADOG || t->resource < 0) {
        return NULL;
    }

    return *(ngx_http_complex_value_t **) ((u_char *)
                                           r->loc_conf[t->module->ctx_index]
                                           + t->resource);
}


static ngx_int_t
ngx_http_profiling_static_value(void *conf, ngx_int_t offset, ngx_str_t *s)
{
    ngx_http_complex_value_t  *cv;

    if (conf == NULL || offset < 0) {
        return NGX_DECLINED;
    }

    cv = *(ngx_http_complex_value_t **) ((u_char *) conf + offset);

    if (cv == NULL || cv == NGX_CONF_UNSET_PTR || cv->lengths != NULL
        || cv->value.len == 0)
    {
        return NGX_DECLINED;
    }

    *s = cv->value;

    return NGX_OK;
}


/*
 * The service, env and version the tracer's spans carry by configuration
 * (http level, static values): what is not found is left as it was.
 * Whether a tracer runs at all.
 */
ngx_uint_t
ngx_http_profiling_tracer_identity(ngx_http_profiling_tracer_t *t,
    ngx_cycle_t *cycle, ngx_str_t *service, ngx_str_t *env,
    ngx_str_t *version)
{
    void                 *loc, *main;
    ngx_str_t            *s;
    ngx_http_conf_ctx_t  *ctx;

    if (t->kind == NGX_HTTP_PROFILING_NO_TRACER) {
        return 0;
    }

    ctx = (ngx_http_conf_ctx_t *) cycle->conf_ctx[ngx_http_module.index];
    if (ctx == NULL) {
        return 1;
    }


    loc = ctx->loc_conf[t->module->ctx_index];
    main = ctx->main_conf[t->module->ctx_index];

    (void) ngx_http_profiling_static_value(loc, t->service, service);
    (void) ngx_http_profiling_static_value(loc, t->env, env);
    (void) ngx_http_profiling_static_value(loc, t->version, version);

    if (main != NULL && t->main_service >= 0) {
        s = (ngx_str_t *) ((u_char *) main + t->main_service);
        if (s->len > 0 && s->data != NULL) {
            *service = *s;
        }
    }

    return 1;
}
