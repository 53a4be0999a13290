/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The module's context of a main request, kept only when needed: the time
 * its handlers took, whether it continues a caller's trace.
 */

#include "ngx_http_profiling_module.h"


/* Does nothing: it marks the pool cleanup that holds the context. */
static void
ngx_http_profiling_ctx_cleanup(void *data)
{
}


/*
 * The main request's accounting context. Internal redirects and
 * error_page zero the module contexts: the pool cleanup finds it again.
 */
ngx_http_profiling_ctx_t *
ngx_http_profiling_find_ctx(ngx_http_request_t *r, ngx_uint_t create)
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

    if (!create) {
        return NULL;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_profiling_ctx_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (ctx == NULL || cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_profiling_ctx_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_profiling_module);

    return ctx;
}


/*
 * Whether the request continues a caller's trace: it came with a caller's
 * trace context, which the tracer running beside continues.
 */
ngx_uint_t
ngx_http_profiling_request_continues_trace(ngx_http_request_t *r)
{
    ngx_http_profiling_ctx_t  *ctx;

    ctx = ngx_http_profiling_find_ctx(r, 0);

    return ctx != NULL && ctx->continues_trace;
}
