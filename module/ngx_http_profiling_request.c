/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Code hotspots: which request the worker executes, published to the
 * sampler at the cost of a few stores an event; the request a sample
 * carried found for its labels (ngx_http_profiling_labels.c); the
 * endpoint of every request counted in the table shared with the profiler
 * process; $profiling_span_id and $profiling_request_cpu.
 */

#include "ngx_http_profiling_module.h"


static ngx_int_t ngx_http_profiling_post_read_handler(ngx_http_request_t *r);
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


/*
 * The worker's state, handed at each cycle's init_module: for the handlers
 * and variables nginx calls with a request only.
 */
static ngx_http_profiling_worker_t  *ngx_http_profiling_request_worker;

/*
 * The module's ctx_index, kept at each cycle's init_module: the log
 * phase's common case finds its location's configuration with it without
 * loading the module's address first (it is nginx's symbol, in the global
 * offset table).
 */
static ngx_uint_t                    ngx_http_profiling_loc_index;

/* The handlers are timed: since when what is published runs. */
static ngx_uint_t                    ngx_http_profiling_account;
static uint64_t                      ngx_http_profiling_since_ns;

static ngx_http_output_body_filter_pt  ngx_http_next_body_filter;


/* The worker's CPU time: what its handlers cost, however busy the
   machine. */
static uint64_t
ngx_http_profiling_now_ns(void)
{
    return (uint64_t) prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}


#if (NGX_QUIC)

/*
 * HTTP/3: the events of a QUIC connection itself (its packets' output,
 * its timers) run for the request that last ran on one of its streams,
 * while that request lives, as HTTP/2's output runs in its streams'
 * handlers. One entry per connection of the worker, by the QUIC
 * connection's place among them; allocated when a listen has "quic".
 */
typedef struct {
    ngx_http_request_t       *request;
    ngx_connection_t         *stream;
    ngx_atomic_uint_t         number;       /* the stream's connection's */
} ngx_http_profiling_quic_last_t;

static ngx_http_profiling_quic_last_t  *ngx_http_profiling_quic_last;


/* r (alive) runs on a stream of a QUIC connection. */
static void
ngx_http_profiling_quic_ran(ngx_http_request_t *r)
{
    ngx_uint_t                       i;
    ngx_connection_t                *c;
    ngx_http_profiling_quic_last_t  *last;

    c = r->connection;
    i = c->quic->parent - ngx_cycle->connections;

    if (i >= ngx_cycle->connection_n) {
        return;
    }

    last = &ngx_http_profiling_quic_last[i];
    last->request = r;
    last->stream = c;
    last->number = c->number;
}


/*
 * The request an event of a QUIC connection itself runs for: the last
 * that ran on one of its streams if it still lives (its stream is open
 * and its log still names it), else NULL.
 */
ngx_http_request_t *
ngx_http_profiling_quic_request(ngx_http_profiling_worker_t *w,
    ngx_event_t *ev)
{
    ngx_uint_t                       i;
    ngx_connection_t                *c, *sc;
    ngx_http_profiling_quic_last_t  *last;

    if (ngx_http_profiling_quic_last == NULL) {
        return NULL;
    }

    c = ev->data;
    i = c - ngx_cycle->connections;

    if (c < ngx_cycle->connections || i >= ngx_cycle->connection_n
        || c->quic != NULL)
    {
        return NULL;
    }

    last = &ngx_http_profiling_quic_last[i];
    sc = last->stream;

    if (sc == NULL || sc->number != last->number
        || sc->fd == (ngx_socket_t) -1 || sc->destroyed
        || sc->log->handler != w->http_log
        || ((ngx_http_log_ctx_t *) sc->log->data)->request != last->request)
    {
        return NULL;
    }

    return last->request;
}

#endif


/*
 * The main request the connection c of an event logged in log has now,
 * if c is still the connection numbered number and open (then its log
 * and the request are alive), else NULL.
 */
static ngx_http_request_t *
ngx_http_profiling_connection_request(ngx_http_profiling_worker_t *w,
    ngx_log_t *log, ngx_connection_t *c, ngx_atomic_uint_t number)
{
    ngx_http_request_t  *r;

    if (log == NULL || number == 0 || !ngx_http_profiling_real_connection(c)
        || c->number != number || c->fd == (ngx_socket_t) -1 || c->destroyed
        || c->log != log || log->handler != w->http_log)
    {
        return NULL;
    }

    r = ((ngx_http_log_ctx_t *) log->data)->request;

    if (r == NULL || r != r->main) {
        return NULL;
    }

    return r;
}


/*
 * The tag a sample took resolved: for r when given (alive), else for the
 * request it names (alive: see ngx_http_profiling_log_handler), else for
 * the one its connection has now.
 */
void
ngx_http_profiling_resolve_pending(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r)
{
    uint64_t                tag;
    prof_sampled_thread_t  *sampled;

    sampled = w->sampled;
    tag = prof_pending_tag(sampled);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (r == NULL) {
        r = (ngx_http_request_t *) (uintptr_t) sampled->pending.request;
    }

    if (r == NULL) {
        r = ngx_http_profiling_connection_request(w,
                (ngx_log_t *) (uintptr_t) sampled->pending.log,
                (ngx_connection_t *) (uintptr_t) sampled->pending.object,
                (ngx_atomic_uint_t) sampled->pending_stamp);
    }

    if (tag == sampled->stall_tag) {
        ngx_http_profiling_describe_stall(w, r, tag);
    }

    if (r != NULL) {
        ngx_http_profiling_resolve_labels(w, r, tag);
    }

    prof_pending_clear(sampled);
}


/*
 * Slow: the handlers of the request published are timed; on HTTP/3, the
 * request that ran on a QUIC connection's stream is remembered for the
 * connection's own events.
 */
static ngx_connection_t   *ngx_http_profiling_slow_connection;
static ngx_atomic_uint_t   ngx_http_profiling_slow_number;


/* What was published ends: its time; an HTTP/3 request made in it. */
static void
ngx_http_profiling_published_end(ngx_http_profiling_worker_t *w)
{
    ngx_connection_t          *c;
    ngx_http_request_t        *r;
    prof_sampled_thread_t     *sampled;
    ngx_http_profiling_ctx_t  *ctx;

    sampled = w->sampled;

    if (sampled->running.log == 0) {
        return;
    }

    r = (ngx_http_request_t *) (uintptr_t) sampled->running.request;

    if (r != NULL) {
        if (ngx_http_profiling_account) {
            ctx = ngx_http_profiling_find_ctx(r, 1);
            if (ctx != NULL) {
                ctx->cpu_ns += ngx_http_profiling_now_ns()
                               - ngx_http_profiling_since_ns;
            }
        }

        return;
    }

#if (NGX_QUIC)
    /* An HTTP/3 request made in this event: its connection's own events
       are its now (ngx_http_profiling_quic_ran). */
    c = ngx_http_profiling_slow_connection;

    if (ngx_http_profiling_quic_last != NULL
        && ngx_http_profiling_real_connection(c) && c->quic != NULL)
    {
        r = ngx_http_profiling_connection_request(w,
                (ngx_log_t *) (uintptr_t) sampled->running.log, c,
                ngx_http_profiling_slow_number);

        if (r != NULL && r->connection == c) {
            ngx_http_profiling_quic_ran(r);
        }
    }
#else
    (void) c;
#endif
}


void
ngx_http_profiling_publish_slow(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, ngx_log_t *log, void *object)
{
    ngx_connection_t       *c;
    prof_sampled_thread_t  *sampled;

    ngx_http_profiling_published_end(w);

    sampled = w->sampled;

    prof_publish(sampled, r, log, object);

    if (prof_pending_tag(sampled) != 0) {
        ngx_http_profiling_resolve_pending(w, NULL);
    }

    if (log == NULL) {
        return;
    }

#if (NGX_QUIC)
    if (r != NULL && ngx_http_profiling_quic_last != NULL
        && r->connection->quic != NULL)
    {
        ngx_http_profiling_quic_ran(r);
    }
#endif

    c = object;
    ngx_http_profiling_slow_connection = c;
    ngx_http_profiling_slow_number =
        ngx_http_profiling_real_connection(c) ? c->number : 0;

    if (ngx_http_profiling_account) {
        ngx_http_profiling_since_ns = ngx_http_profiling_now_ns();
    }
}


/* Nothing executes any more: at the event wait, or when stopping. */
void
ngx_http_profiling_request_stop(ngx_http_profiling_worker_t *w)
{
    if (w->sampled != NULL) {
        ngx_http_profiling_publish(w, w->sampled, NULL, NULL, NULL);
    }
}


/*
 * A main request ends, before it is freed: no longer published (what runs
 * after it is its connection's), its labels if a sample carried it or its
 * connection in this event (then it was made in this event), its
 * endpoint counted. ngx_http_profiling_log_handler's cases but the
 * common one; not inlined, so that one saves and sets up nothing for them
 * (they are its tail calls).
 */
static __attribute__((noinline)) ngx_int_t
ngx_http_profiling_log_slow(ngx_http_request_t *r)
{
    prof_sampled_thread_t          *sampled;
    ngx_http_profiling_worker_t    *w;
    ngx_http_profiling_loc_conf_t  *plcf;

    w = ngx_http_profiling_request_worker;
    sampled = w->sampled;

    if (sampled->running.request == (uintptr_t) r) {
        /*
         * What runs after it in this event is no request's. A tag pending
         * is resolved by the publication, r's while it lives: one taken
         * for the words before r's (its connection's) was resolved when
         * r was published.
         */
        ngx_http_profiling_unpublish(w, sampled);

    } else if (prof_pending_tag(sampled) != 0
               && (sampled->pending.request == (uintptr_t) r
                   || (sampled->pending.request == 0
                       && sampled->pending.log
                          == (uintptr_t) r->connection->log)))
    {
        ngx_http_profiling_resolve_pending(w, r);
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_module);

    if (!plcf->enable) {
        return NGX_OK;
    }

    if (plcf->endpoint == NULL && !w->traced) {
        /* A method nginx knows is known by its bit. */
        prof_count_endpoint(w->profiler, w->endpoints,
                            (r->method != NGX_HTTP_UNKNOWN) ? r->method : 0,
                            r->method_name.data, r->method_name.len,
                            r->uri.data, r->uri.len);

    } else {
        ngx_http_profiling_count_endpoint(w, r, plcf);
    }

    return NGX_OK;
}


/* The first request of r's endpoint in the period: its name copied. */
static __attribute__((noinline)) ngx_int_t
ngx_http_profiling_log_new_endpoint(prof_endpoint_table_t *t, uint64_t hash,
    uint32_t i, ngx_http_request_t *r)
{
    prof_endpoint_table_insert(t, hash, i, r->method_name.data,
                               r->method_name.len, r->uri.data, r->uri.len);
    return NGX_OK;
}


/*
 * The log phase of each request. The common case, a main request with
 * nothing of it published and no tag pending, in a location with the
 * default endpoint ("METHOD URI", the method one nginx knows, the URI at
 * most PROF_ENDPOINT_MAX bytes) and no tracer beside, while the period's
 * table is at hand: its endpoint counted here (the count
 * prof_count_endpoint makes), calling nothing, so that nothing of the
 * caller's is saved; the rest, ngx_http_profiling_log_slow.
 */
static ngx_int_t
ngx_http_profiling_log_handler(ngx_http_request_t *r)
{
    uint32_t                        i;
    uint64_t                        hash;
    prof_endpoint_table_t          *t;
    prof_sampled_thread_t          *sampled;
    ngx_http_profiling_worker_t    *w;
    ngx_http_profiling_loc_conf_t  *plcf;

    w = ngx_http_profiling_request_worker;
    sampled = w->sampled;

    if (r != r->main || sampled == NULL) {
        return NGX_OK;
    }

    /* ngx_http_get_module_loc_conf(r, ngx_http_profiling_module) */
    plcf = r->loc_conf[ngx_http_profiling_loc_index];
    t = *w->endpoints;

    if (sampled->running.request == (uintptr_t) r
        || prof_pending_tag(sampled) != 0
        || !plcf->default_endpoint || w->traced || t == NULL
        || r->method == NGX_HTTP_UNKNOWN || r->uri.len > PROF_ENDPOINT_MAX)
    {
        return ngx_http_profiling_log_slow(r);
    }

    hash = prof_endpoint_hash_seeded(r->method, r->uri.data, r->uri.len);
    i = prof_endpoint_table_find(t, hash);

    if (t->hashes[i] == 0) {
        return ngx_http_profiling_log_new_endpoint(t, hash, i, r);
    }

    /* The profiler process reads it once the period is closed. */
    t->counts[i]++;

    return NGX_OK;
}


/*
 * Where registered (see ngx_http_profiling_request_init): a request made
 * inside an event handler (an HTTP/2 stream's, the next one on a
 * keep-alive or pipelined connection) is published from its first phase.
 */
static ngx_int_t
ngx_http_profiling_post_read_handler(ngx_http_request_t *r)
{
    prof_sampled_thread_t        *sampled;
    ngx_http_profiling_ctx_t     *ctx;
    ngx_http_profiling_worker_t  *w;

    w = ngx_http_profiling_request_worker;

    /* Before a tracer adds its own trace headers for the upstreams. */
    if (w->traced && r == r->main
        && ngx_http_profiling_tracer_continues_trace(&w->tracer, r))
    {
        ctx = ngx_http_profiling_find_ctx(r, 1);
        if (ctx != NULL) {
            ctx->continues_trace = 1;
        }
    }

    sampled = w->sampled;

    /* (The request word means nothing while the log's is 0.) */
    if (sampled == NULL
        || (sampled->running.request == (uintptr_t) r->main
            && sampled->running.log != 0))
    {
        return NGX_DECLINED;
    }

    ngx_http_profiling_publish(w, sampled, r->main, r->main->connection->log,
                               r->main->connection);

    return NGX_DECLINED;
}


/*
 * HTTP/2: a window update resumes a stream's output (gzip, sub...) from
 * the connection's events: the work is the stream's request's.
 */
static ngx_int_t
ngx_http_profiling_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                     rc;
    ngx_http_request_t           *mr;
    prof_sampled_thread_t        *sampled;
    ngx_http_profiling_worker_t  *w;

    w = ngx_http_profiling_request_worker;
    sampled = w->sampled;
    mr = r->main;

    if (sampled == NULL || r->stream == NULL
        || (sampled->running.request == (uintptr_t) mr
            && sampled->running.log != 0))
    {
        return ngx_http_next_body_filter(r, in);
    }

    ngx_http_profiling_publish(w, sampled, mr, mr->connection->log,
                               mr->connection);

    rc = ngx_http_next_body_filter(r, in);

    /* The rest of the connection's event is no request's (one finished
       meanwhile is no longer published). */
    ngx_http_profiling_request_stop(w);

    return rc;
}


static ngx_int_t
ngx_http_profiling_span_id_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                         *p;
    uint64_t                        span, root;
    ngx_http_profiling_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r->main, ngx_http_profiling_module);
    ngx_http_profiling_resolve_ids(&ngx_http_profiling_request_worker->tracer,
                                   r->main, plcf, &span, &root);

    if (span == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uL", span) - p;
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
    prof_sampled_thread_t     *sampled;
    ngx_http_profiling_ctx_t  *ctx;

    sampled = ngx_http_profiling_request_worker->sampled;

    if (!ngx_http_profiling_account || sampled == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    ctx = ngx_http_profiling_find_ctx(r, 0);
    ns = (ctx != NULL) ? ctx->cpu_ns : 0;

    if (sampled->running.request == (uintptr_t) r->main
        && sampled->running.log != 0)
    {
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
ngx_http_profiling_request_vars(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_profiling_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/*
 * Whether the configuration speaks HTTP/2: a listen option (every
 * version), or "http2 on" in a server (nginx 1.25.1 and later).
 */
static ngx_uint_t
ngx_http_profiling_http2(ngx_http_core_main_conf_t *cmcf)
{
#if (NGX_HTTP_V2)
    ngx_uint_t                  p, a;
    ngx_http_conf_port_t       *port;
    ngx_http_conf_addr_t       *addr;
#if (nginx_version >= 1025001)
    ngx_uint_t                  s;
    ngx_http_v2_srv_conf_t     *h2scf;
    ngx_http_core_srv_conf_t  **cscfp;

    cscfp = cmcf->servers.elts;

    for (s = 0; s < cmcf->servers.nelts; s++) {
        h2scf = cscfp[s]->ctx->srv_conf[ngx_http_v2_module.ctx_index];

        if (h2scf->enable == 1) {
            return 1;
        }
    }
#endif

    if (cmcf->ports == NULL) {
        return 0;
    }

    port = cmcf->ports->elts;

    for (p = 0; p < cmcf->ports->nelts; p++) {
        addr = port[p].addrs.elts;

        for (a = 0; a < port[p].addrs.nelts; a++) {
            if (addr[a].opt.http2) {
                return 1;
            }
        }
    }
#endif

    return 0;
}


/* Whether $profiling_request_cpu is used (the handlers are timed). */
static ngx_uint_t
ngx_http_profiling_cpu_variable_used(ngx_http_core_main_conf_t *cmcf)
{
    ngx_uint_t            i;
    ngx_http_variable_t  *v;

    v = cmcf->variables.elts;

    for (i = 0; i < cmcf->variables.nelts; i++) {
        if (v[i].name.len == sizeof("profiling_request_cpu") - 1
            && ngx_strncmp(v[i].name.data, "profiling_request_cpu",
                           v[i].name.len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/*
 * postconfiguration, when profiling is on somewhere: the log phase
 * handler (the end of each request). A handler of the first phase (the
 * start of a request made inside an event, for those its connection's
 * pending event cannot tell: HTTP/2 streams; the caller's context a
 * tracer's request came with; the time of its handlers) only when needed.
 * For HTTP/2, whose streams' output resumes from their connection's
 * events, a body filter.
 */
ngx_int_t
ngx_http_profiling_request_init(ngx_conf_t *cf, ngx_uint_t traced)
{
    ngx_uint_t                  http2;
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_profiling_log_handler;

    http2 = ngx_http_profiling_http2(cmcf);

    if (http2 || traced || ngx_http_profiling_cpu_variable_used(cmcf)) {
        h = ngx_array_push(&cmcf->phases[NGX_HTTP_POST_READ_PHASE].handlers);
        if (h == NULL) {
            return NGX_ERROR;
        }
        *h = ngx_http_profiling_post_read_handler;
    }

    if (!http2) {
        return NGX_OK;
    }

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_profiling_body_filter;

    return NGX_OK;
}


void
ngx_http_profiling_request_start(ngx_cycle_t *cycle, ngx_uint_t traced)
{
    ngx_http_profiling_worker_t  *w;
#if (NGX_QUIC)
    ngx_uint_t                    i;
    ngx_listening_t              *ls;
#endif

    w = ngx_http_profiling_request_worker;

#if (NGX_QUIC)
    /* Without it (no memory), QUIC's own events are no request's. */
    ngx_http_profiling_quic_last = NULL;
    ls = cycle->listening.elts;

    for (i = 0; i < cycle->listening.nelts; i++) {
        if (ls[i].quic) {
            ngx_http_profiling_quic_last = ngx_pcalloc(cycle->pool,
                 cycle->connection_n * sizeof(ngx_http_profiling_quic_last_t));

            if (ngx_http_profiling_quic_last == NULL) {
                ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                              "profiling: no memory for HTTP/3: the QUIC "
                              "connections' own events are no request's");
            }

            break;
        }
    }
#endif

    w->traced = traced;
#if (NGX_QUIC)
    w->slow = ngx_http_profiling_account
              || ngx_http_profiling_quic_last != NULL;
#else
    w->slow = ngx_http_profiling_account;
#endif
    ngx_http_profiling_slow_connection = NULL;
    ngx_http_profiling_slow_number = 0;

    /*
     * A sample stamps what runs with its connection's number. Without a
     * master, a reload restarts the profiler with a cycle nginx gives no
     * connections: then nothing is stamped, and as no event's connection
     * is one of that cycle's, nginx's HTTP log handler is never learned
     * and nothing is published.
     */
    if (cycle->connections != NULL) {
        prof_sampler_set_objects(w->sampled, cycle->connections,
                                 sizeof(ngx_connection_t),
                                 cycle->connection_n,
                                 offsetof(ngx_connection_t, number));
    }
}


/*
 * init_module: the worker's state, kept for the handlers. The handlers are
 * timed (the thread's CPU clock) only when $profiling_request_cpu is used,
 * e.g. in a log_format.
 */
void
ngx_http_profiling_request_init_cycle(ngx_cycle_t *cycle,
    ngx_http_profiling_worker_t *w)
{
    ngx_http_core_main_conf_t  *cmcf;

    ngx_http_profiling_request_worker = w;
    ngx_http_profiling_loc_index = ngx_http_profiling_module.ctx_index;

    cmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module);

    ngx_http_profiling_account = (cmcf != NULL)
                                 && ngx_http_profiling_cpu_variable_used(cmcf);
}
