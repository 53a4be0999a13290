/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The labels of a request: its span ids (a tracer's, the configured
 * values, or the caller's trace headers) and its endpoint, resolved for
 * the profiler only when a sample carried the request, and, for a stall's
 * samples, the request described for its line; an endpoint other than the
 * default, counted for every request.
 */

#include "ngx_http_profiling_module.h"

#include "worker/trace_context.h"


/* The request a stall's samples carried, described when its tag was
   resolved (before the request could be freed). */
static uint64_t  ngx_http_profiling_stall_tag;
static size_t    ngx_http_profiling_stall_length;
static u_char    ngx_http_profiling_stall_text[PROF_STALL_SUBJECT_MAX];


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


/*
 * A request's span ids: the configured values (profiling_span_id and its
 * kin) where set, else a tracer's when one runs (never a caller's then),
 * else the caller's headers. 0: none.
 */
void
ngx_http_profiling_resolve_ids(ngx_http_profiling_tracer_t *tracer,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf,
    uint64_t *span_id, uint64_t *root_id)
{
    uint64_t   trace, span, root;
    ngx_int_t  rc;

    span = 0;
    root = 0;

    if (plcf->trace_id != NULL || plcf->span_id != NULL
        || plcf->root_span_id != NULL)
    {
        /* The configured values: any invalid one means no ids. */
        if (ngx_http_profiling_eval_id(r, plcf->trace_id, &trace) < 0
            || (rc = ngx_http_profiling_eval_id(r, plcf->span_id, &span)) < 0
            || ngx_http_profiling_eval_id(r, plcf->root_span_id, &root) < 0
            || rc == 0)
        {
            span = 0;
            root = 0;

        } else if (root == 0) {
            root = span;
        }

    } else if (ngx_http_profiling_tracer_ids(tracer, r, &span, &root)
               != NGX_OK)
    {
        ngx_http_profiling_header_ids(r, &span);
        root = span;
    }

    *span_id = span;
    *root_id = (span != 0) ? root : 0;
}


/*
 * A request's trace id, from where its span ids come (the configured
 * value, a tracer's, the caller's headers): 0 and 0 when none. Only for
 * the labels of a sampled request (Pyroscope's trace_id).
 */
static void
ngx_http_profiling_resolve_trace_id(ngx_http_profiling_tracer_t *tracer,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf,
    uint64_t *high, uint64_t *low)
{
    uint64_t          parent;
    ngx_str_t         value;
    ngx_table_elt_t  *h;

    *high = 0;
    *low = 0;

    if (plcf->trace_id != NULL || plcf->span_id != NULL
        || plcf->root_span_id != NULL)
    {
        if (plcf->trace_id != NULL
            && ngx_http_complex_value(r, plcf->trace_id, &value) == NGX_OK
            && prof_parse_trace_id((char *) value.data, value.len, high, low)
               != 0)
        {
            *high = 0;
            *low = 0;
        }

        return;
    }

    if (ngx_http_profiling_tracer_trace_id(tracer, r, high, low) == NGX_OK) {
        return;
    }

    h = ngx_http_profiling_header(r, "traceparent");

    if (h != NULL
        && prof_parse_traceparent((char *) h->value.data, h->value.len,
                                  high, low, &parent) == 0)
    {
        return;
    }

    *high = 0;
    *low = 0;

    h = ngx_http_profiling_header(r, "x-datadog-trace-id");

    if (h != NULL
        && prof_parse_datadog_id((char *) h->value.data, h->value.len, low)
           != 0)
    {
        *low = 0;
    }
}


/* The endpoint's formula when it is not "$request_method $uri". */
static ngx_http_complex_value_t *
ngx_http_profiling_endpoint_value(ngx_http_profiling_tracer_t *tracer,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf)
{
    if (plcf->endpoint != NULL) {
        return plcf->endpoint;
    }

    /* The resource name of the tracer's spans. */
    return ngx_http_profiling_tracer_resource(tracer, r);
}


/*
 * The endpoint: profiling_endpoint, else the tracer's resource name, else
 * "$request_method $uri".
 */
static size_t
ngx_http_profiling_endpoint(ngx_http_profiling_tracer_t *tracer,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf, u_char *buf)
{
    u_char                    *p, *last;
    ngx_str_t                  value;
    ngx_http_complex_value_t  *cv;

    p = buf;
    last = buf + PROF_ENDPOINT_MAX;

    cv = ngx_http_profiling_endpoint_value(tracer, r, plcf);

    if (cv != NULL) {
        if (ngx_http_complex_value(r, cv, &value) != NGX_OK) {
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

    return p - buf;
}


/*
 * A request's endpoint other than the default, counted in its log phase:
 * static, or evaluated. A function of its own, not inlined: its buffer
 * would make every request's log handler save and set up more.
 */
__attribute__((noinline)) void
ngx_http_profiling_count_endpoint(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf)
{
    u_char                     buf[PROF_ENDPOINT_MAX];
    ngx_str_t                  value;
    ngx_http_complex_value_t  *cv;

    cv = ngx_http_profiling_endpoint_value(&w->tracer, r, plcf);

    if (cv == NULL) {
        value.len = ngx_http_profiling_endpoint(&w->tracer, r, plcf, buf);
        value.data = buf;

    } else if (cv->lengths == NULL) {
        value = cv->value;

    } else if (ngx_http_complex_value(r, cv, &value) != NGX_OK) {
        value.len = 0;
    }

    prof_count_endpoint(w->profiler, w->endpoints, 0, NULL, 0,
                        value.data, value.len);
}


/*
 * The labels of a request a sample carried under tag, for the profiler's
 * thread: never on the signal path, never for a request freed.
 */
void
ngx_http_profiling_resolve_labels(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, uint64_t tag)
{
    ngx_connection_t               *c;
    prof_labels_t                   labels;
    ngx_http_profiling_loc_conf_t  *plcf;

    /*
     * Still reading its header (no phase has run): its location, which
     * may say "profiling off", is not known yet. Its samples until then
     * stay unlabelled.
     */
    if (!r->valid_location) {
        return;
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_module);

    /* "profiling off" there: its samples are counted, not labelled. */
    if (!plcf->enable || w->profiler == NULL) {
        return;
    }

    c = r->connection;

    labels.tag = tag;
    labels.request = ((uint64_t) c->number << 32) | (uint32_t) c->requests;
    ngx_http_profiling_resolve_ids(&w->tracer, r, plcf, &labels.span_id,
                                   &labels.local_root_span_id);
    ngx_http_profiling_resolve_trace_id(&w->tracer, r, plcf,
                                        &labels.trace_id_high,
                                        &labels.trace_id_low);
    labels.endpoint_length = ngx_http_profiling_endpoint(&w->tracer, r, plcf,
                                                 (u_char *) labels.endpoint);

    (void) prof_label(w->profiler, &labels);
}


/*
 * The tag of a stall's samples resolved, for r (NULL: its connection had
 * no request): described as nginx's error log describes a request.
 */
void
ngx_http_profiling_describe_stall(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, uint64_t tag)
{
    u_char                         *p, *last;
    uint64_t                        span, root;
    ngx_http_core_srv_conf_t       *cscf;
    ngx_http_profiling_loc_conf_t  *plcf;

    p = ngx_http_profiling_stall_text;
    last = p + sizeof(ngx_http_profiling_stall_text);

    if (r == NULL) {
        p = ngx_slprintf(p, last, "a connection with no request");
        goto done;
    }

    if (r->request_line.len > 0) {
        p = ngx_slprintf(p, last, "request: \"%V\"", &r->request_line);

    } else {
        p = ngx_slprintf(p, last, "a request being read");
    }

    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);
    if (cscf != NULL && cscf->server_name.len > 0) {
        p = ngx_slprintf(p, last, ", server: %V", &cscf->server_name);
    }

    if (r->headers_in.host != NULL) {
        p = ngx_slprintf(p, last, ", host: \"%V\"",
                         &r->headers_in.host->value);
    }

    if (r->connection->addr_text.len > 0) {
        p = ngx_slprintf(p, last, ", client: %V", &r->connection->addr_text);
    }

    if (r->valid_location) {
        plcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_module);
        ngx_http_profiling_resolve_ids(&w->tracer, r, plcf, &span, &root);

        if (span != 0) {
            p = ngx_slprintf(p, last, ", span id: %uL", span);
        }
    }

done:

    ngx_http_profiling_stall_tag = tag;
    ngx_http_profiling_stall_length = p - ngx_http_profiling_stall_text;
}


/* What a stall's tag was described as: its length, 0 when it was not. */
size_t
ngx_http_profiling_stall_subject(uint64_t tag, u_char **text)
{
    *text = ngx_http_profiling_stall_text;

    return (tag == ngx_http_profiling_stall_tag)
           ? ngx_http_profiling_stall_length : 0;
}
