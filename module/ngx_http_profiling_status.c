/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * profiling_status: every worker's profiler state, from a shared memory
 * zone of slots (shared/channel/status.h) that each worker's profiler writes.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_profiling_module.h"
#include "channel/status.h"


/* More than any machine's workers, and those of a reload or two. */
#define NGX_HTTP_PROFILING_STATUS_SLOTS  128


typedef struct {
    prof_status_slot_t  *slots;
    ngx_uint_t           count;
} ngx_http_profiling_status_zone_t;


static ngx_int_t ngx_http_profiling_status_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_profiling_status_zone_init(ngx_shm_zone_t *zone,
    void *data);


char *
ngx_http_profiling_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t        *clcf;
    ngx_http_profiling_main_conf_t  *pmcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_status_handler;

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_profiling_module);
    pmcf->status_used = 1;

    return NGX_CONF_OK;
}


/* The zone, when a location shows it or a worker may write to it. */
ngx_int_t
ngx_http_profiling_status_init(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf)
{
    size_t                             size;
    ngx_str_t                          name = ngx_string("profiling_status");
    ngx_shm_zone_t                    *zone;
    ngx_http_profiling_status_zone_t  *ctx;

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_profiling_status_zone_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    /* The slab pool's own pages, and the slots. */
    size = 8 * ngx_pagesize
           + NGX_HTTP_PROFILING_STATUS_SLOTS * sizeof(prof_status_slot_t);

    zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_profiling_module);
    if (zone == NULL) {
        return NGX_ERROR;
    }

    zone->init = ngx_http_profiling_status_zone_init;
    zone->data = ctx;

    pmcf->status_zone = zone;

    return NGX_OK;
}


/*
 * A reload keeps the zone of the cycle before (same name and size): the
 * old workers' slots stay theirs until they exit.
 */
static ngx_int_t
ngx_http_profiling_status_zone_init(ngx_shm_zone_t *zone, void *data)
{
    ngx_slab_pool_t                   *shpool;
    ngx_http_profiling_status_zone_t  *ctx, *octx;

    ctx = zone->data;

    if (data != NULL) {
        octx = data;
        ctx->slots = octx->slots;
        ctx->count = octx->count;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) zone->shm.addr;

    ctx->slots = ngx_slab_calloc(shpool, NGX_HTTP_PROFILING_STATUS_SLOTS
                                         * sizeof(prof_status_slot_t));
    if (ctx->slots == NULL) {
        return NGX_ERROR;
    }

    ctx->count = NGX_HTTP_PROFILING_STATUS_SLOTS;

    return NGX_OK;
}


/*
 * A slot of the zone taken for this worker (its pid), which its profiler
 * writes its state to; NULL when there is no zone or every slot is another
 * live process's.
 */
prof_status_slot_t *
ngx_http_profiling_status_take_slot(ngx_http_profiling_main_conf_t *pmcf)
{
    ngx_http_profiling_status_zone_t  *ctx;

    if (pmcf->status_zone == NULL) {
        return NULL;
    }

    ctx = pmcf->status_zone->data;

    if (ctx->slots == NULL) {
        return NULL;
    }

    return prof_status_claim(ctx->slots, ctx->count, ngx_pid);
}


/* The worker's slot given back (it exits, or its profiler stops). */
void
ngx_http_profiling_status_release_slot(prof_status_slot_t *slot)
{
    if (slot != NULL) {
        prof_status_release(slot, ngx_pid);
    }
}


static ngx_int_t
ngx_http_profiling_status_handler(ngx_http_request_t *r)
{
    int                                rc;
    ngx_int_t                          ngx_rc;
    ngx_buf_t                         *b;
    ngx_str_t                          format;
    ngx_uint_t                         text;
    ngx_chain_t                        out;
    prof_buffer_t                      page = { NULL, 0, 0 };
    ngx_http_profiling_status_zone_t  *ctx;
    ngx_http_profiling_main_conf_t    *pmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    ngx_rc = ngx_http_discard_request_body(r);
    if (ngx_rc != NGX_OK) {
        return ngx_rc;
    }

    text = (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK
            && format.len == 4 && ngx_strncmp(format.data, "text", 4) == 0);

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_profiling_module);
    ctx = pmcf->status_zone ? pmcf->status_zone->data : NULL;

    if (ctx == NULL || ctx->slots == NULL) {
        rc = text ? prof_status_text(&page, NULL, 0)
                  : prof_status_json(&page, NULL, 0);
    } else {
        rc = text ? prof_status_text(&page, ctx->slots, ctx->count)
                  : prof_status_json(&page, ctx->slots, ctx->count);
    }

    if (rc != 0
        || ngx_http_profiling_ui_status(pmcf, &page, text) != NGX_OK)
    {
        prof_buffer_free(&page);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_create_temp_buf(r->pool, page.length);
    if (b == NULL) {
        prof_buffer_free(&page);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, page.data, page.length);
    prof_buffer_free(&page);

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    if (text) {
        ngx_str_set(&r->headers_out.content_type, "text/plain");
    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }

    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;

    ngx_rc = ngx_http_send_header(r);

    if (ngx_rc == NGX_ERROR || ngx_rc > NGX_OK || r->header_only) {
        return ngx_rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
