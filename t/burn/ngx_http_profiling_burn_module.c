/*
 * Test-only module:
 *
 * "profiling_burn MS;" makes a location's content handler spin on the CPU
 * for MS milliseconds in ngx_http_profiling_burn_spin(), a function the
 * tests then look for in the profiles.
 *
 * "profiling_burn_stacks N;" makes the handler reach that spin through a
 * chain of 8 to 32 calls among 16 distinct functions, chosen from a stack
 * id: the request's "stack" argument, else a per-worker request counter,
 * modulo N. N ids give about N distinct stacks (16^8 chains per depth), for
 * measuring what many distinct stacks cost the profiler. Without
 * profiling_burn in the location the spin lasts 1 ms.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define NGX_HTTP_PROFILING_BURN_LINKS      16
#define NGX_HTTP_PROFILING_BURN_MIN_DEPTH  8
#define NGX_HTTP_PROFILING_BURN_MAX_DEPTH  32


typedef struct {
    ngx_msec_t  burn;
    ngx_uint_t  stacks;         /* 0: spin called directly */
} ngx_http_profiling_burn_loc_conf_t;


/* A chain being walked: which link comes at each level. */
typedef struct {
    uint64_t    digits[2];      /* 4 bits a level, 32 levels */
    ngx_uint_t  depth;
    ngx_uint_t  level;
    ngx_msec_t  ms;
} ngx_http_profiling_burn_chain_t;


static char *ngx_http_profiling_burn(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_profiling_burn_stacks(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static void *ngx_http_profiling_burn_create_loc_conf(ngx_conf_t *cf);

uint64_t ngx_http_profiling_burn_spin(ngx_msec_t ms);


static ngx_command_t  ngx_http_profiling_burn_commands[] = {

    { ngx_string("profiling_burn"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_burn,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, burn),
      NULL },

    { ngx_string("profiling_burn_stacks"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_burn_stacks,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, stacks),
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


/*
 * Spins for ms milliseconds of the thread's CPU time: on a loaded machine
 * a request still burns what the tests expect, only later.
 */
__attribute__((noinline)) uint64_t
ngx_http_profiling_burn_spin(ngx_msec_t ms)
{
    uint64_t         x;
    struct timespec  start, now;

    x = 88172645463325252ULL;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);

    do {
        for (int i = 0; i < 10000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000
             + (now.tv_nsec - start.tv_nsec) / 1000000 < (long) ms);

    return x;
}


typedef uint64_t (*ngx_http_profiling_burn_link_pt)(
    ngx_http_profiling_burn_chain_t *chain);

static const ngx_http_profiling_burn_link_pt
    ngx_http_profiling_burn_links[NGX_HTTP_PROFILING_BURN_LINKS];


/* The next link of the chain, or the spin at its end. */
static ngx_inline uint64_t
ngx_http_profiling_burn_next(ngx_http_profiling_burn_chain_t *chain)
{
    ngx_uint_t  l, digit;

    l = chain->level++;

    if (l == chain->depth) {
        return ngx_http_profiling_burn_spin(chain->ms);
    }

    digit = (chain->digits[l / 16] >> (4 * (l % 16))) & 0xf;

    return ngx_http_profiling_burn_links[digit](chain);
}


/*
 * The links: distinct functions (each adds its own constant, so identical
 * code folding cannot merge them), never inlined (noinline, and called
 * through a table), and never tail calls (the addition follows the call),
 * so that each keeps its own frame and return address in the stack.
 */
#define NGX_HTTP_PROFILING_BURN_LINK(n)                                      \
    __attribute__((noinline)) uint64_t                                       \
    ngx_http_profiling_burn_link##n(ngx_http_profiling_burn_chain_t *chain)  \
    {                                                                        \
        return ngx_http_profiling_burn_next(chain) + n + 1;                  \
    }

NGX_HTTP_PROFILING_BURN_LINK(0)
NGX_HTTP_PROFILING_BURN_LINK(1)
NGX_HTTP_PROFILING_BURN_LINK(2)
NGX_HTTP_PROFILING_BURN_LINK(3)
NGX_HTTP_PROFILING_BURN_LINK(4)
NGX_HTTP_PROFILING_BURN_LINK(5)
NGX_HTTP_PROFILING_BURN_LINK(6)
NGX_HTTP_PROFILING_BURN_LINK(7)
NGX_HTTP_PROFILING_BURN_LINK(8)
NGX_HTTP_PROFILING_BURN_LINK(9)
NGX_HTTP_PROFILING_BURN_LINK(10)
NGX_HTTP_PROFILING_BURN_LINK(11)
NGX_HTTP_PROFILING_BURN_LINK(12)
NGX_HTTP_PROFILING_BURN_LINK(13)
NGX_HTTP_PROFILING_BURN_LINK(14)
NGX_HTTP_PROFILING_BURN_LINK(15)

static const ngx_http_profiling_burn_link_pt
    ngx_http_profiling_burn_links[NGX_HTTP_PROFILING_BURN_LINKS] =
{
    ngx_http_profiling_burn_link0, ngx_http_profiling_burn_link1,
    ngx_http_profiling_burn_link2, ngx_http_profiling_burn_link3,
    ngx_http_profiling_burn_link4, ngx_http_profiling_burn_link5,
    ngx_http_profiling_burn_link6, ngx_http_profiling_burn_link7,
    ngx_http_profiling_burn_link8, ngx_http_profiling_burn_link9,
    ngx_http_profiling_burn_link10, ngx_http_profiling_burn_link11,
    ngx_http_profiling_burn_link12, ngx_http_profiling_burn_link13,
    ngx_http_profiling_burn_link14, ngx_http_profiling_burn_link15
};


/* splitmix64: neighbouring ids get unrelated chains. */
static uint64_t
ngx_http_profiling_burn_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}


static uint64_t
ngx_http_profiling_burn_chain(ngx_http_request_t *r,
    ngx_http_profiling_burn_loc_conf_t *blcf, ngx_msec_t ms)
{
    ngx_int_t                         n;
    ngx_str_t                         arg;
    uint64_t                          id;
    ngx_http_profiling_burn_chain_t   chain;
    static uint64_t                   requests;

    id = requests++;

    if (ngx_http_arg(r, (u_char *) "stack", 5, &arg) == NGX_OK) {
        n = ngx_atoi(arg.data, arg.len);
        if (n != NGX_ERROR) {
            id = (uint64_t) n;
        }
    }

    id %= blcf->stacks;

    chain.digits[0] = ngx_http_profiling_burn_mix(2 * id);
    chain.digits[1] = ngx_http_profiling_burn_mix(2 * id + 1);
    chain.depth = NGX_HTTP_PROFILING_BURN_MIN_DEPTH
                  + ngx_http_profiling_burn_mix(id ^ 0x5eed)
                    % (NGX_HTTP_PROFILING_BURN_MAX_DEPTH
                       - NGX_HTTP_PROFILING_BURN_MIN_DEPTH + 1);
    chain.level = 0;
    chain.ms = ms;

    return ngx_http_profiling_burn_next(&chain);
}


static ngx_int_t
ngx_http_profiling_burn_handler(ngx_http_request_t *r)
{
    uint64_t                             x;
    ngx_int_t                            rc;
    ngx_msec_t                           ms;
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

    ms = (blcf->burn == NGX_CONF_UNSET_MSEC) ? 1 : blcf->burn;

    if (blcf->stacks == NGX_CONF_UNSET_UINT) {
        x = ngx_http_profiling_burn_spin(ms);

    } else {
        x = ngx_http_profiling_burn_chain(r, blcf, ms);
    }

    b->last = ngx_sprintf(b->last, "burned %uL\n", x & 1);
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


static char *
ngx_http_profiling_burn_stacks(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char                                *rv;
    ngx_http_core_loc_conf_t            *clcf;
    ngx_http_profiling_burn_loc_conf_t  *blcf = conf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_burn_handler;

    rv = ngx_conf_set_num_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (blcf->stacks == 0) {
        return "must be at least 1";
    }

    return NGX_CONF_OK;
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
    conf->stacks = NGX_CONF_UNSET_UINT;

    return conf;
}
