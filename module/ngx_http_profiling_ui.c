/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * profiling_ui: a flame graph page of the workers' recent profiles, its
 * script, style and data, served from the page's store (a shared zone the
 * profiler processes write, channel/ui_store.h) without waiting for them.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_profiling_module.h"
#include "channel/ui_record.h"
#include "channel/ui_store.h"
#include "channel/ui_view.h"


/* The page's files, embedded at build time (module/ui/embed). */
typedef struct {
    const char           *name;
    const char           *type;
    const unsigned char  *data;
    size_t                length;
} ngx_http_profiling_ui_asset_t;

extern const ngx_http_profiling_ui_asset_t  ngx_http_profiling_ui_assets[];


typedef struct {
    prof_ui_store_t  *store;
    size_t            size;             /* profiling_ui_store */
} ngx_http_profiling_ui_zone_t;


#define NGX_HTTP_PROFILING_UI_MIN  (64 * 1024)
#define NGX_HTTP_PROFILING_UI_MAX  (256 * 1024 * 1024)

/* What the store holds at least, whatever the period and the profiles
   (when each record may take at least the minimum below). */
#define NGX_HTTP_PROFILING_UI_KEPT_MS     (15 * 60 * 1000)
#define NGX_HTTP_PROFILING_UI_RECORD_MIN  (4 * 1024)

/* The latest time a query may ask a view as of (unix ms: the year 2100) */
#define NGX_HTTP_PROFILING_UI_AT_MAX      4102444800000LL

/* The page's own rules: its files only, no inline code. */
#define NGX_HTTP_PROFILING_UI_CSP                                            \
    "default-src 'none'; script-src 'self'; style-src 'self'; "              \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "            \
    "form-action 'self'; frame-ancestors 'self'"


static ngx_int_t ngx_http_profiling_ui_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_profiling_ui_zone_init(ngx_shm_zone_t *zone,
    void *data);


char *
ngx_http_profiling_ui(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t        *clcf;
    ngx_http_profiling_main_conf_t  *pmcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_ui_handler;

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_profiling_module);
    pmcf->ui_used = 1;

    return NGX_CONF_OK;
}


char *
ngx_http_profiling_ui_store_size(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ssize_t     size;
    ngx_str_t  *value;

    if (pmcf->ui_store_size != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;
    size = ngx_parse_size(&value[1]);

    if (size == NGX_ERROR || size < NGX_HTTP_PROFILING_UI_MIN
        || size > NGX_HTTP_PROFILING_UI_MAX)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a size between 64k and 256m",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->ui_store_size = size;

    return NGX_CONF_OK;
}


/* The zone, when a location shows the page. */
ngx_int_t
ngx_http_profiling_ui_init(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf)
{
    size_t                         size;
    ngx_str_t                      name = ngx_string("profiling_ui");
    ngx_shm_zone_t                *zone;
    ngx_http_profiling_ui_zone_t  *ctx;

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_profiling_ui_zone_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    /* The store, and the slab pool's pages and page descriptors. */
    size = ngx_align(pmcf->ui_store_size, ngx_pagesize)
           + pmcf->ui_store_size / 64 + 16 * ngx_pagesize;

    zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_profiling_module);
    if (zone == NULL) {
        return NGX_ERROR;
    }

    ctx->size = pmcf->ui_store_size;

    zone->init = ngx_http_profiling_ui_zone_init;
    zone->data = ctx;

    pmcf->ui_zone = zone;

    return NGX_OK;
}


/* A reload of the same size keeps the store and what it holds. */
static ngx_int_t
ngx_http_profiling_ui_zone_init(ngx_shm_zone_t *zone, void *data)
{
    void                          *memory;
    ngx_slab_pool_t               *shpool;
    ngx_http_profiling_ui_zone_t  *ctx, *octx;

    ctx = zone->data;

    if (data != NULL) {
        octx = data;
        ctx->store = octx->store;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) zone->shm.addr;

    memory = ngx_slab_alloc(shpool, ctx->size);
    if (memory == NULL) {
        return NGX_ERROR;
    }

    ctx->store = prof_ui_store_init(memory, ctx->size);

    return (ctx->store != NULL) ? NGX_OK : NGX_ERROR;
}


prof_ui_store_t *
ngx_http_profiling_ui_store(ngx_http_profiling_main_conf_t *pmcf)
{
    ngx_http_profiling_ui_zone_t  *ctx;

    if (pmcf->ui_zone == NULL) {
        return NULL;
    }

    ctx = pmcf->ui_zone->data;

    return ctx->store;
}


/*
 * A worker's profile's share of the store: every worker's profiles of
 * the last 15 minutes fit (a profile over it is made smaller, its
 * lightest stacks folded: profiler/ui_publish.h), but never under 4 KB
 * (a store that small for its workers and period holds less time).
 */
size_t
ngx_http_profiling_ui_record_max(ngx_cycle_t *cycle,
    ngx_http_profiling_main_conf_t *pmcf)
{
    size_t            max;
    ngx_int_t         workers;
    ngx_msec_t        periods;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    workers = (ccf->worker_processes > 0) ? ccf->worker_processes : 1;
    periods = (NGX_HTTP_PROFILING_UI_KEPT_MS + pmcf->period - 1)
              / ngx_max(pmcf->period, 1);

    max = pmcf->ui_store_size / (workers * ngx_max(periods, 1));

    /* A smaller record has room for little but its "[other stacks]". */
    return ngx_max(max, NGX_HTTP_PROFILING_UI_RECORD_MIN) - 64;
}


/*
 * The store's figures added to the status page: JSON's "ui_store" (the
 * page's last '}' moved after it), or a line of text.
 */
ngx_int_t
ngx_http_profiling_ui_status(ngx_http_profiling_main_conf_t *pmcf,
    prof_buffer_t *page, ngx_uint_t text)
{
    int                     rc;
    prof_ui_store_t        *store;
    prof_ui_store_stats_t   st;

    store = ngx_http_profiling_ui_store(pmcf);
    if (store == NULL) {
        return NGX_OK;
    }

    prof_ui_store_stats(store, &st);

    if (text) {
        rc = prof_buffer_printf(page, "ui store: %llu of %llu bytes, "
                                "%llu profiles held, %llu dropped for "
                                "room, %llu too large, %llu not "
                                "written (busy)\n",
                                (unsigned long long) st.used,
                                (unsigned long long) st.size,
                                (unsigned long long) st.records_held,
                                (unsigned long long) st.dropped,
                                (unsigned long long) st.too_large,
                                (unsigned long long) st.busy);
        return (rc == 0) ? NGX_OK : NGX_ERROR;
    }

    if (page->length < 2 || page->data[page->length - 2] != '}') {
        return NGX_OK;
    }

    page->length -= 2;

    rc = prof_buffer_printf(page, ",\"ui_store\":{\"size\":%llu,"
                            "\"used\":%llu,\"profiles\":%llu,"
                            "\"dropped\":%llu,\"too_large\":%llu,"
                            "\"busy\":%llu}}\n",
                            (unsigned long long) st.size,
                            (unsigned long long) st.used,
                            (unsigned long long) st.records_held,
                            (unsigned long long) st.dropped,
                            (unsigned long long) st.too_large,
                            (unsigned long long) st.busy);

    return (rc == 0) ? NGX_OK : NGX_ERROR;
}


/* 1 when the argument is there: its value in *value, unescaped. */
static ngx_uint_t
ngx_http_profiling_ui_arg(ngx_http_request_t *r, const char *name,
    ngx_str_t *value)
{
    size_t      i;
    u_char     *dst, *src, *plus;
    ngx_str_t   raw;

    if (ngx_http_arg(r, (u_char *) name, ngx_strlen(name), &raw) != NGX_OK) {
        return 0;
    }

    value->data = ngx_pnalloc(r->pool, raw.len + 1);
    plus = ngx_pnalloc(r->pool, raw.len + 1);
    if (value->data == NULL || plus == NULL) {
        return 0;
    }

    /* '+' is a space in a query string */
    for (i = 0; i < raw.len; i++) {
        plus[i] = (raw.data[i] == '+') ? ' ' : raw.data[i];
    }

    src = plus;
    dst = value->data;
    ngx_unescape_uri(&dst, &src, raw.len, NGX_UNESCAPE_URI);
    value->len = dst - value->data;
    value->data[value->len] = '\0';

    return 1;
}


/* An id: 16 or 32 hex digits, else a decimal number. */
static ngx_int_t
ngx_http_profiling_ui_id(ngx_str_t *s, uint64_t *high, uint64_t *low)
{
    size_t      i;
    uint64_t    n, *word;
    ngx_int_t   digit;

    *high = 0;
    *low = 0;

    if (s->len == 16 || s->len == 32) {
        for (i = 0; i < s->len; i++) {
            digit = ngx_hextoi(&s->data[i], 1);
            if (digit == NGX_ERROR) {
                break;
            }

            word = (s->len == 32 && i < 16) ? high : low;
            *word = (*word << 4) | (uint64_t) digit;
        }

        if (i == s->len) {
            return NGX_OK;
        }

        *high = 0;
        *low = 0;
    }

    if (s->len == 0 || s->len > 20) {
        return NGX_ERROR;
    }

    n = 0;

    for (i = 0; i < s->len; i++) {
        if (s->data[i] < '0' || s->data[i] > '9'
            || n > (UINT64_MAX - (s->data[i] - '0')) / 10)
        {
            return NGX_ERROR;
        }
        n = n * 10 + (s->data[i] - '0');
    }

    *low = n;

    return NGX_OK;
}


/* The filter of the query string; NGX_ERROR: a value makes no sense. */
static ngx_int_t
ngx_http_profiling_ui_filter(ngx_http_request_t *r, prof_ui_filter_t *f)
{
    uint64_t     high;
    ngx_int_t    n;
    ngx_str_t    v;
    int64_t      now_ns;
    ngx_time_t  *tp;

    ngx_memzero(f, sizeof(prof_ui_filter_t));

    /*
     * at: the time the view is as of (unix ms, default now): the records
     * the store held then, so that the page's download asks for what the
     * page showed, whatever was stored since.
     */
    tp = ngx_timeofday();
    now_ns = ((int64_t) tp->sec * 1000 + (int64_t) tp->msec) * 1000000;
    f->now_ns = now_ns;

    if (ngx_http_profiling_ui_arg(r, "at", &v)) {
        n = ngx_atoi(v.data, v.len);
        if (n == NGX_ERROR || n == 0 || n > NGX_HTTP_PROFILING_UI_AT_MAX) {
            return NGX_ERROR;
        }
        now_ns = (int64_t) n * 1000000;
        f->at_ns = now_ns;
    }

    if (ngx_http_profiling_ui_arg(r, "worker", &v)
        && !(v.len == 3 && ngx_strncmp(v.data, "all", 3) == 0))
    {
        n = ngx_atoi(v.data, v.len);
        if (n == NGX_ERROR) {
            return NGX_ERROR;
        }
        f->pid = (pid_t) n;
    }

    /* window: "last" (each worker's last period), or seconds (900). */
    if (!ngx_http_profiling_ui_arg(r, "window", &v)
        || (v.len == 4 && ngx_strncmp(v.data, "last", 4) == 0))
    {
        f->last_only = 1;

    } else {
        n = ngx_atoi(v.data, v.len);
        if (n == NGX_ERROR || n > 7 * 86400) {
            return NGX_ERROR;
        }
        f->since_ns = now_ns - (int64_t) n * 1000000000;
    }

    /* until: seconds ago (a comparison's base window ends then). */
    if (ngx_http_profiling_ui_arg(r, "until", &v)) {
        n = ngx_atoi(v.data, v.len);
        if (n == NGX_ERROR || n > 7 * 86400) {
            return NGX_ERROR;
        }
        f->until_ns = now_ns - (int64_t) n * 1000000000;
        if (f->until_ns <= 0) {
            f->until_ns = 1;            /* before any record */
        }
        if (f->since_ns != 0) {
            f->since_ns -= (int64_t) n * 1000000000;
        }
    }

    if (ngx_http_profiling_ui_arg(r, "span_id", &v) && v.len > 0) {
        if (ngx_http_profiling_ui_id(&v, &high, &f->span_id) != NGX_OK
            || high != 0)
        {
            return NGX_ERROR;
        }
        f->has_span = 1;
    }

    if (ngx_http_profiling_ui_arg(r, "trace_id", &v) && v.len > 0) {
        if (ngx_http_profiling_ui_id(&v, &f->trace_id_high,
                                     &f->trace_id_low) != NGX_OK)
        {
            return NGX_ERROR;
        }
        f->has_trace = 1;
    }

    if (ngx_http_profiling_ui_arg(r, "endpoint", &v) && v.len > 0) {
        f->endpoint = (const char *) v.data;
        f->endpoint_length = v.len;
    }

    if (ngx_http_profiling_ui_arg(r, "stalls", &v)
        && v.len == 1 && v.data[0] == '1')
    {
        f->stalls_only = 1;
    }

    return NGX_OK;
}


/* The page's data (JSON) or its pprof, built from a copy of the store. */
static ngx_int_t
ngx_http_profiling_ui_data(ngx_http_request_t *r, prof_buffer_t *out,
    ngx_uint_t pprof)
{
    int                              rc;
    size_t                           length;
    unsigned                         shown;
    ngx_str_t                        type;
    unsigned char                   *copy;
    prof_ui_view_t                  *view;
    prof_ui_filter_t                 filter;
    prof_ui_store_t                 *store;
    prof_ui_store_stats_t            stats;
    ngx_http_profiling_main_conf_t  *pmcf;

    if (ngx_http_profiling_ui_filter(r, &filter) != NGX_OK) {
        return NGX_HTTP_BAD_REQUEST;
    }

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_profiling_module);
    store = ngx_http_profiling_ui_store(pmcf);

    copy = NULL;
    length = 0;

    if (store != NULL && prof_ui_store_copy(store, &copy, &length) != 0) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    prof_ui_store_stats(store, &stats);

    rc = prof_ui_view_build(&view, copy, length, &filter);
    free(copy);

    if (rc != 0) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    shown = PROF_UI_CPU;

    if (ngx_http_profiling_ui_arg(r, "type", &type)) {
        if (type.len == 4 && ngx_strncmp(type.data, "wall", 4) == 0) {
            shown = PROF_UI_WALL;

        } else if (type.len == 3 && ngx_strncmp(type.data, "off", 3) == 0) {
            shown = PROF_UI_OFF_CPU;
        }
    }

    rc = pprof ? prof_ui_view_pprof(view, out, shown)
               : prof_ui_view_json(view, out, &stats);
    prof_ui_view_free(view);

    return (rc == 0) ? NGX_OK : NGX_HTTP_INTERNAL_SERVER_ERROR;
}


static ngx_int_t
ngx_http_profiling_ui_header(ngx_http_request_t *r, const char *name,
    const char *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value.data = (u_char *) value;
    h->value.len = ngx_strlen(value);
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


static ngx_int_t
ngx_http_profiling_ui_handler(ngx_http_request_t *r)
{
    ngx_int_t                             rc;
    ngx_str_t                             v;
    ngx_buf_t                            *b;
    ngx_chain_t                           out;
    const char                           *type;
    const u_char                         *data;
    size_t                                length;
    ngx_uint_t                            pprof;
    prof_buffer_t                         body = { NULL, 0, 0 };
    ngx_pool_cleanup_t                   *cln;
    const ngx_http_profiling_ui_asset_t  *a;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    a = NULL;
    data = NULL;
    length = 0;
    type = NULL;

    pprof = (ngx_http_arg(r, (u_char *) "pprof", 5, &v) == NGX_OK);

    if (pprof || ngx_http_arg(r, (u_char *) "data", 4, &v) == NGX_OK) {
        rc = ngx_http_profiling_ui_data(r, &body, pprof);
        if (rc != NGX_OK) {
            prof_buffer_free(&body);
            return rc;
        }

        /* The answer is sent from the buffer, freed with the request. */
        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln == NULL) {
            prof_buffer_free(&body);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        cln->handler = free;
        cln->data = body.data;

        if (pprof) {
            type = "application/octet-stream";
            if (ngx_http_profiling_ui_header(r, "Content-Disposition",
                    "attachment; filename=\"nginx-profile.pb\"") != NGX_OK)
            {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

        } else {
            type = "application/json";
        }

        data = body.data;
        length = body.length;

    } else {
        if (!ngx_http_profiling_ui_arg(r, "asset", &v)) {
            ngx_str_set(&v, "ui.html");
        }

        for (a = ngx_http_profiling_ui_assets; a->name != NULL; a++) {
            if (ngx_strlen(a->name) == v.len
                && ngx_strncmp(a->name, v.data, v.len) == 0)
            {
                break;
            }
        }

        if (a->name == NULL) {
            return NGX_HTTP_NOT_FOUND;
        }

        type = a->type;
        data = a->data;
        length = a->length;

        if (ngx_http_profiling_ui_header(r, "Content-Security-Policy",
                                         NGX_HTTP_PROFILING_UI_CSP)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (ngx_http_profiling_ui_header(r, "Cache-Control", "no-store")
        != NGX_OK
        || ngx_http_profiling_ui_header(r, "X-Content-Type-Options",
                                        "nosniff") != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = (u_char *) data;
    b->last = (u_char *) data + length;
    b->memory = (length > 0);
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.content_type.data = (u_char *) type;
    r->headers_out.content_type.len = ngx_strlen(type);
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = length;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
