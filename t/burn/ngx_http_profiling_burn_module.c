/*
 * Test-only module: "profiling_burn MS;" makes a location's content handler
 * spin on the CPU for MS milliseconds in ngx_http_profiling_burn_spin(),
 * a function the tests then look for in the profiles.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


typedef struct {
    ngx_msec_t  burn;
} ngx_http_profiling_burn_loc_conf_t;


static char *ngx_http_profiling_burn(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_profiling_burn_create_loc_conf(ngx_conf_t *cf);

uint64_t ngx_http_profiling_burn_spin(ngx_msec_t ms);


static ngx_command_t  ngx_http_profiling_burn_commands[] = {

    { ngx_string("profiling_burn"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_burn,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, burn),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_profiling_burn_module_ctx = {
    NULL, NULL, NULL, NULL, NULL, NULL,
    ngx_http_profiling_burn_create_loc_conf,
    NULL
};


ngx_module_t  ngx_http_profiling_burn_module = {
    NGX_MODULE_V1,
    &ngx_http_profiling_burn_module_ctx,
    ngx_http_profiling_burn_commands,
    NGX_HTTP_MODULE,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NGX_MODULE_V1_PADDING
};


/* Spins for ms milliseconds of wall time on the CPU. */
__attribute__((noinline)) uint64_t
ngx_http_profiling_burn_spin(ngx_msec_t ms)
{
    uint64_t         x;
    struct timespec  start, now;

    x = 88172645463325252ULL;
    clock_gettime(CLOCK_MONOTONIC, &start);

    do {
        for (int i = 0; i < 10000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000
             + (now.tv_nsec - start.tv_nsec) / 1000000 < (long) ms);

    return x;
}


static ngx_int_t
ngx_http_profiling_burn_handler(ngx_http_request_t *r)
{
    ngx_int_t                            rc;
    ngx_buf_t                           *b;
    ngx_chain_t                          out;
    ngx_http_profiling_burn_loc_conf_t  *blcf;

    blcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_burn_module);

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    b = ngx_create_temp_buf(r->pool, 32);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_sprintf(b->last, "burned %uL\n",
                          ngx_http_profiling_burn_spin(blcf->burn) & 1);
    b->last_buf = 1;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static char *
ngx_http_profiling_burn(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_burn_handler;

    return ngx_conf_set_msec_slot(cf, cmd, conf);
}


static void *
ngx_http_profiling_burn_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_profiling_burn_loc_conf_t  *conf;

    conf = ngx_palloc(cf->pool, sizeof(ngx_http_profiling_burn_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->burn = NGX_CONF_UNSET_MSEC;

    return conf;
}
