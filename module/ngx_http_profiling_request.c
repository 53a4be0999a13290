/*
 * Code hotspots: which request the worker is executing. The request's ids
 * and endpoint are published to the sampler (a plain-data copy the signal
 * handler reads) while its handlers run; endpoints are counted at the end
 * of each request; $profiling_span_id and $profiling_request_cpu.
 */

#include "ngx_http_profiling_module.h"

#include "trace_context.h"


typedef struct {
    prof_request_context_t   context;       /* what samples carry */
    uint64_t                 cpu_ns;        /* busy in its handlers */
    ngx_uint_t               profiled;      /* its location says on */
    ngx_uint_t               counted;
    ngx_uint_t               located;       /* a location was found */
    ngx_http_profiling_loc_conf_t  *resolved_with;  /* ids' directives */
} ngx_http_profiling_ctx_t;


static ngx_int_t ngx_http_profiling_post_read_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_profiling_preaccess_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_profiling_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_profiling_log_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_profiling_span_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_profiling_request_cpu_variable(
    ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_variable_t  ngx_http_profiling_vars[] = {

    { ngx_string("profiling_span_id"), NULL,
      ngx_http_profiling_span_id_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("profiling_request_cpu"), NULL,
      ngx_http_profiling_request_cpu_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


prof_sampler_t                   *ngx_http_profiling_sampler;

/* The request whose handlers run now, and since when (accounting only). */
static ngx_http_profiling_ctx_t  *ngx_http_profiling_current;
static ngx_uint_t                 ngx_http_profiling_account;
static uint64_t                   ngx_http_profiling_since_ns;

/* nginx's HTTP log handler: how an HTTP connection's log is recognized. */
static ngx_log_handler_pt         ngx_http_profiling_http_log;

static prof_endpoint_counts_t    *ngx_http_profiling_endpoints;

/* The context the sampler sees now (NULL: none; &..._kept: a copy). */
static ngx_http_profiling_ctx_t  *ngx_http_profiling_published;
static ngx_http_profiling_ctx_t   ngx_http_profiling_kept;
static ngx_uint_t                 ngx_http_profiling_freed;  /* contexts */

static ngx_http_output_body_filter_pt  ngx_http_next_body_filter;


static uint64_t
ngx_http_profiling_now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}


static void
ngx_http_profiling_ctx_cleanup(void *data)
{
    ngx_http_profiling_freed++;

    if (ngx_http_profiling_current == data) {
        ngx_http_profiling_current = NULL;
    }

    /* Until the handler returns, the work is still the request's. */
    if (ngx_http_profiling_published == data) {
        prof_sampler_request_keep(ngx_http_profiling_sampler);
        ngx_http_profiling_published = &ngx_http_profiling_kept;
    }
}


/*
 * The main request's context. Internal redirects and error_page zero the
 * module contexts: the pool cleanup finds it again.
 */
static ngx_http_profiling_ctx_t *
ngx_http_profiling_find_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t        *cln;
    ngx_http_profiling_ctx_t  *ctx;

    r = r->main;

    ctx = ngx_http_get_module_ctx(r, ngx_http_profiling_module);
    if (ctx != NULL) {
        return ctx;
    }

    for (cln = r->pool->cleanup; cln != NULL; cln = cln->next) {
        if (cln->handler == ngx_http_profiling_ctx_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_profiling_module);
            return ctx;
        }
    }

    return NULL;
}


/* A request header by (lowercase) name. */
static ngx_table_elt_t *
ngx_http_profiling_header(ngx_http_request_t *r, const char *name)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    len = ngx_strlen(name);
    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }
            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


/* An id from a complex value: -1 when set and invalid, 0 unset, 1 ok. */
static ngx_int_t
ngx_http_profiling_eval_id(ngx_http_request_t *r,
    ngx_http_complex_value_t *cv, uint64_t *id)
{
    ngx_str_t  value;

    if (cv == NULL) {
        return 0;
    }

    if (ngx_http_complex_value(r, cv, &value) != NGX_OK
        || prof_parse_id((char *) value.data, value.len, id) != 0)
    {
        return -1;
    }

    return 1;
}


/* Span ids from traceparent, else x-datadog-*: 0 when there are none. */
static void
ngx_http_profiling_header_ids(ngx_http_request_t *r, uint64_t *span_id)
{
    uint64_t          high, low, parent, trace;
    ngx_table_elt_t  *h, *t;

    h = ngx_http_profiling_header(r, "traceparent");

    if (h != NULL
        && prof_parse_traceparent((char *) h->value.data, h->value.len,
                                  &high, &low, &parent) == 0)
    {
        *span_id = parent;
        return;
    }

    t = ngx_http_profiling_header(r, "x-datadog-trace-id");
    h = ngx_http_profiling_header(r, "x-datadog-parent-id");

    if (t != NULL && h != NULL
        && prof_parse_datadog_id((char *) t->value.data, t->value.len,
                                 &trace) == 0
        && prof_parse_datadog_id((char *) h->value.data, h->value.len,
                                 &parent) == 0)
    {
        *span_id = parent;
    }
}


static void
ngx_http_profiling_resolve_ids(ngx_http_request_t *r,
    ngx_http_profiling_loc_conf_t *plcf, prof_request_context_t *context)
{
    uint64_t   trace, span, root;
    ngx_int_t  rc;

    span = 0;
    root = 0;

    if (plcf->trace_id == NULL && plcf->span_id == NULL
        && plcf->root_span_id == NULL)
    {
        ngx_http_profiling_header_ids(r, &span);

    } else {
        /* The tracer's variables: any invalid one means no ids. */
        if (ngx_http_profiling_eval_id(r, plcf->trace_id, &trace) < 0
            || (rc = ngx_http_profiling_eval_id(r, plcf->span_id, &span)) < 0
            || ngx_http_profiling_eval_id(r, plcf->root_span_id, &root) < 0
            || rc == 0)
        {
            span = 0;
            root = 0;
        }
    }

    context->span_id = span;
    context->local_root_span_id = (span != 0 && root == 0) ? span : root;

    if (span == 0) {
        context->local_root_span_id = 0;
    }
}


static void
ngx_http_profiling_resolve_endpoint(ngx_http_request_t *r,
    ngx_http_profiling_loc_conf_t *plcf, prof_request_context_t *context)
{
    u_char     *p, *last;
    ngx_str_t   value;

    p = (u_char *) context->endpoint;
    last = p + PROF_ENDPOINT_MAX;

    if (plcf->endpoint != NULL) {
        if (ngx_http_complex_value(r, plcf->endpoint, &value) != NGX_OK) {
            value.len = 0;
        }
        p = ngx_cpymem(p, value.data, ngx_min(value.len, (size_t) (last - p)));

    } else {
        /* "$request_method $uri": never the query string. */
        p = ngx_cpymem(p, r->method_name.data,
                       ngx_min(r->method_name.len, (size_t) (last - p)));
        if (p < last) {
            *p++ = ' ';
        }
        p = ngx_cpymem(p, r->uri.data, ngx_min(r->uri.len,
                                               (size_t) (last - p)));
    }

    context->endpoint_length = p - (u_char *) context->endpoint;
}


/* What the sampler's samples carry from now on (NULL or off: nothing). */
static void
ngx_http_profiling_publish(ngx_http_profiling_ctx_t *ctx)
{
    if (ctx != NULL && !ctx->profiled) {
        ctx = NULL;
    }

    if (ctx == ngx_http_profiling_published) {
        return;
    }

    ngx_http_profiling_published = ctx;

    if (ctx != NULL) {
        prof_sampler_request_enter(ngx_http_profiling_sampler,
                                   &ctx->context);
    } else {
        prof_sampler_request_leave(ngx_http_profiling_sampler);
    }
}


static void
ngx_http_profiling_enter(ngx_http_profiling_ctx_t *ctx)
{
    if (ngx_http_profiling_sampler == NULL) {
        return;
    }

    /* "profiling off" there: its CPU is counted, its samples unlabelled. */
    ngx_http_profiling_publish(ctx);

    if (ctx == NULL) {
        ngx_http_profiling_current = NULL;
        return;
    }

    if (ngx_http_profiling_account && ngx_http_profiling_current != ctx) {
        ngx_http_profiling_current = ctx;
        ngx_http_profiling_since_ns = ngx_http_profiling_now_ns();
    }
}


void
ngx_http_profiling_request_leave(void)
{
    uint64_t  now;

    if (ngx_http_profiling_sampler == NULL) {
        return;
    }

    ngx_http_profiling_publish(NULL);

    if (ngx_http_profiling_current != NULL) {
        now = ngx_http_profiling_now_ns();
        ngx_http_profiling_current->cpu_ns += now
                                              - ngx_http_profiling_since_ns;
        ngx_http_profiling_current = NULL;
    }
}


/* The main request's context, created when first seen. */
static ngx_http_profiling_ctx_t *
ngx_http_profiling_create_ctx(ngx_http_request_t *r,
    ngx_http_profiling_loc_conf_t *plcf)
{
    ngx_pool_cleanup_t        *cln;
    ngx_http_profiling_ctx_t  *ctx;

    r = r->main;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_profiling_ctx_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (ctx == NULL || cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_profiling_ctx_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_profiling_module);

    ngx_http_profiling_resolve_ids(r, plcf, &ctx->context);
    ngx_http_profiling_resolve_endpoint(r, plcf, &ctx->context);
    ctx->resolved_with = plcf;
    ctx->profiled = plcf->enable;

    return ctx;
}


/*
 * The first phase of a main request (before rewrites, which may answer it
 * at once): its ids and endpoint, with the server's configuration.
 */
static ngx_int_t
ngx_http_profiling_post_read_handler(ngx_http_request_t *r)
{
    ngx_http_profiling_ctx_t       *ctx;
    ngx_http_profiling_loc_conf_t  *plcf;

    if (ngx_http_profiling_sampler == NULL || r != r->main || r->internal) {
        return NGX_DECLINED;
    }

    if (ngx_http_profiling_http_log == NULL) {
        ngx_http_profiling_http_log = r->connection->log->handler;
    }

    ctx = ngx_http_profiling_find_ctx(r);

    if (ctx == NULL) {
        plcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_module);
        ctx = ngx_http_profiling_create_ctx(r, plcf);
    }

    ngx_http_profiling_enter(ctx);

    return NGX_DECLINED;
}


/*
 * After the location is found: it decides whether the request is
 * profiled, and the first one resolves the ids and endpoint again with
 * its own directives (a tracer's variables are set by then). After
 * internal redirects they stay.
 */
static ngx_int_t
ngx_http_profiling_preaccess_handler(ngx_http_request_t *r)
{
    ngx_http_profiling_ctx_t       *ctx;
    ngx_http_profiling_loc_conf_t  *plcf;

    if (ngx_http_profiling_sampler == NULL) {
        return NGX_DECLINED;
    }

    if (ngx_http_profiling_http_log == NULL) {
        ngx_http_profiling_http_log = r->connection->log->handler;
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_module);
    ctx = ngx_http_profiling_find_ctx(r);

    if (ctx == NULL) {
        ctx = ngx_http_profiling_create_ctx(r, plcf);
        if (ctx == NULL) {
            return NGX_DECLINED;
        }
        ctx->located = 1;

    } else if (!ctx->located && r == r->main) {
        /* The location's directives (and a tracer's variables) win. */
        ctx->located = 1;

        /* The sampler must not see the context half written. */
        ngx_http_profiling_publish(NULL);

        if (plcf->trace_id != ctx->resolved_with->trace_id
            || plcf->span_id != ctx->resolved_with->span_id
            || plcf->root_span_id != ctx->resolved_with->root_span_id
            || plcf->span_id != NULL)
        {
            ngx_http_profiling_resolve_ids(r, plcf, &ctx->context);
        }

        ngx_http_profiling_resolve_endpoint(r, plcf, &ctx->context);
    }

    /* A subrequest works for its main request: it does not decide. */
    if (r == r->main) {
        ctx->profiled = plcf->enable;
    }

    ngx_http_profiling_enter(ctx);

    return NGX_DECLINED;
}


/*
 * Body filters (gzip, sub, ...) run for a request wherever nginx calls
 * them from: an HTTP/2 window update, a timer of limit_rate. Their work
 * is the request's.
 */
static ngx_int_t
ngx_http_profiling_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                  rc;
    ngx_uint_t                 freed;
    ngx_http_profiling_ctx_t  *ctx, *saved;

    if (ngx_http_profiling_sampler == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_profiling_find_ctx(r);
    saved = ngx_http_profiling_published;
    freed = ngx_http_profiling_freed;

    ngx_http_profiling_publish(ctx);
    rc = ngx_http_next_body_filter(r, in);

    /*
     * A context freed meanwhile (the request finished) must not be
     * published again; the copy of the one published then stays.
     */
    if (ngx_http_profiling_published != &ngx_http_profiling_kept) {
        ngx_http_profiling_publish((freed == ngx_http_profiling_freed
                                    && saved != &ngx_http_profiling_kept)
                                   ? saved : NULL);
    }

    return rc;
}


static ngx_int_t
ngx_http_profiling_log_handler(ngx_http_request_t *r)
{
    ngx_http_profiling_ctx_t  *ctx;

    ctx = ngx_http_profiling_find_ctx(r);

    if (ctx == NULL || !ctx->profiled || ctx->counted || r != r->main) {
        return NGX_OK;
    }

    ctx->counted = 1;

    if (ngx_http_profiling_endpoints == NULL) {
        ngx_http_profiling_endpoints = prof_endpoint_counts_create();
        if (ngx_http_profiling_endpoints == NULL) {
            return NGX_OK;
        }
    }

    (void) prof_endpoint_counts_add(ngx_http_profiling_endpoints,
                                    ctx->context.endpoint,
                                    ctx->context.endpoint_length);

    return NGX_OK;
}


prof_endpoint_counts_t *
ngx_http_profiling_take_endpoint_counts(void)
{
    prof_endpoint_counts_t  *counts;

    counts = ngx_http_profiling_endpoints;
    ngx_http_profiling_endpoints = NULL;

    return counts;
}


/* The request an event works for, from its connection's log context. */
static ngx_http_request_t *
ngx_http_profiling_event_request(ngx_event_t *ev)
{
    ngx_connection_t    *c;
    ngx_http_log_ctx_t  *lctx;

    c = ev->data;

    if (c == NULL || (c->read != ev && c->write != ev) || c->log == NULL
        || ngx_http_profiling_http_log == NULL
        || c->log->handler != ngx_http_profiling_http_log)
    {
        return NULL;
    }

    /* Upstream connections share their client connection's log. */
    lctx = c->log->data;

    return (lctx != NULL) ? lctx->request : NULL;
}


/*
 * The expired timers, as ngx_event_expire_timers() runs them, each with
 * its request's context (a request delayed by limit_req resumes here).
 */
void
ngx_http_profiling_expire_timers(void)
{
    ngx_event_t        *ev;
    ngx_rbtree_node_t  *node, *root, *sentinel;

    sentinel = ngx_event_timer_rbtree.sentinel;

    for ( ;; ) {
        root = ngx_event_timer_rbtree.root;

        if (root == sentinel) {
            return;
        }

        node = ngx_rbtree_min(root, sentinel);

        if ((ngx_msec_int_t) (node->key - ngx_current_msec) > 0) {
            return;
        }

        ev = ngx_rbtree_data(node, ngx_event_t, timer);

        ngx_rbtree_delete(&ngx_event_timer_rbtree, &ev->timer);

        ev->timer_set = 0;
        ev->timedout = 1;

        ngx_http_profiling_dispatch(ev);
    }
}


void
ngx_http_profiling_dispatch(ngx_event_t *ev)
{
    ngx_http_request_t  *r;

    r = ngx_http_profiling_event_request(ev);

    ngx_http_profiling_enter(r ? ngx_http_profiling_find_ctx(r) : NULL);

    ev->handler(ev);

    ngx_http_profiling_request_leave();
}


static ngx_int_t
ngx_http_profiling_span_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    ngx_http_profiling_ctx_t  *ctx;

    ctx = ngx_http_profiling_find_ctx(r);

    if (ctx == NULL || ctx->context.span_id == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uL", ctx->context.span_id) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


static ngx_int_t
ngx_http_profiling_request_cpu_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    uint64_t                   ns;
    ngx_http_profiling_ctx_t  *ctx;

    ctx = ngx_http_profiling_find_ctx(r);

    if (ctx == NULL || !ngx_http_profiling_account) {
        v->not_found = 1;
        return NGX_OK;
    }

    ns = ctx->cpu_ns;
    if (ngx_http_profiling_current == ctx) {
        ns += ngx_http_profiling_now_ns() - ngx_http_profiling_since_ns;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uL", ns / 1000) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


ngx_int_t
ngx_http_profiling_request_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_variable_t        *var, *v;
    ngx_http_core_main_conf_t  *cmcf;

    for (v = ngx_http_profiling_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_POST_READ_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_profiling_post_read_handler;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_profiling_preaccess_handler;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_profiling_log_handler;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_profiling_body_filter;

    return NGX_OK;
}


/*
 * The handlers are timed (vDSO clock, tens of nanoseconds) only when
 * $profiling_request_cpu is used, e.g. in a log_format.
 */
void
ngx_http_profiling_request_init_cycle(ngx_cycle_t *cycle)
{
    ngx_uint_t                  i;
    ngx_http_variable_t        *v;
    ngx_http_core_main_conf_t  *cmcf;

    ngx_http_profiling_account = 0;

    cmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module);
    if (cmcf == NULL) {
        return;
    }

    v = cmcf->variables.elts;

    for (i = 0; i < cmcf->variables.nelts; i++) {
        if (v[i].name.len == sizeof("profiling_request_cpu") - 1
            && ngx_strncmp(v[i].name.data, "profiling_request_cpu",
                           v[i].name.len) == 0)
        {
            ngx_http_profiling_account = 1;
        }
    }
}
