/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * ngx_http_profiling_module: the modules' definitions, their directives,
 * and the configuration created, merged and completed; each concern's
 * code is in the file named after it (ngx_http_profiling_module.h).
 */

#include "ngx_http_profiling_module.h"
#include "profiler/file_export.h"


static void *ngx_http_profiling_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_profiling_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_profiling_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_profiling_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_profiling_postconfiguration(ngx_conf_t *cf);


static ngx_http_profiling_time_bounds_t  ngx_http_profiling_period_bounds = {
    1000, 600000, "between 1s and 10m", 0
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_interval_bounds =
{
    1, 1000, "between 1ms and 1s", 0
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_upload_bounds = {
    100, 600000, "between 100ms and 10m", 0
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_stall_bounds = {
    1, 3600000, "between 1ms and 1h, or \"off\"", 1
};


static ngx_command_t  ngx_http_profiling_commands[] = {

    { ngx_string("profiling"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_profiling,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, enable),
      NULL },

    { ngx_string("profiling_trace_id"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, trace_id),
      NULL },

    { ngx_string("profiling_span_id"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, span_id),
      NULL },

    { ngx_string("profiling_root_span_id"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, root_span_id),
      NULL },

    { ngx_string("profiling_endpoint"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, endpoint),
      NULL },

    { ngx_string("profiling_dump_dir"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_dump_dir,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, dump_dir),
      NULL },

    { ngx_string("profiling_dump_keep"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_profiling_dump_keep,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("profiling_agent_url"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_agent_url,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, agent_url),
      NULL },

    { ngx_string("profiling_pyroscope_url"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_push_url,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, pyroscope),
      NULL },

    { ngx_string("profiling_pyroscope_endpoints"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_pyroscope_endpoints,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("profiling_pyroscope_basic_auth"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_profiling_push_basic_auth,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, pyroscope),
      NULL },

    { ngx_string("profiling_pyroscope_bearer_token"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_push_bearer_token,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, pyroscope),
      NULL },

    { ngx_string("profiling_pyroscope_tenant"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_push_tenant,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, pyroscope),
      NULL },

    { ngx_string("profiling_pyroscope_header"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_profiling_push_header_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, pyroscope),
      NULL },

    { ngx_string("profiling_otlp_url"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_push_url,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, otlp),
      NULL },

    { ngx_string("profiling_otlp_basic_auth"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_profiling_push_basic_auth,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, otlp),
      NULL },

    { ngx_string("profiling_otlp_bearer_token"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_push_bearer_token,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, otlp),
      NULL },

    { ngx_string("profiling_otlp_tenant"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_push_tenant,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, otlp),
      NULL },

    { ngx_string("profiling_otlp_header"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_profiling_push_header_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, otlp),
      NULL },

    { ngx_string("profiling_debuginfod"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_profiling_debuginfod,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("profiling_debuginfod_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_profiling_debuginfod_cache,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("profiling_upload_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, upload_timeout),
      &ngx_http_profiling_upload_bounds },

    { ngx_string("profiling_period"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, period),
      &ngx_http_profiling_period_bounds },

    { ngx_string("profiling_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, interval),
      &ngx_http_profiling_interval_bounds },

    { ngx_string("profiling_stall_threshold"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, stall_threshold),
      &ngx_http_profiling_stall_bounds },

    { ngx_string("profiling_max_cpu"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_max_cpu,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, max_cpu_ppm),
      NULL },

    { ngx_string("profiling_timeline"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, timeline),
      NULL },

    { ngx_string("profiling_lua"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, lua),
      NULL },

    { ngx_string("profiling_max_frames"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_max_frames,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, max_frames),
      NULL },

    { ngx_string("profiling_memory_limit"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_memory_limit,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, memory_limit),
      NULL },

    { ngx_string("profiling_service"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, service),
      NULL },

    { ngx_string("profiling_env"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, env),
      NULL },

    { ngx_string("profiling_version"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, version),
      NULL },

    { ngx_string("profiling_tags"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_profiling_tags,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("profiling_status"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_profiling_status,
      0,
      0,
      NULL },

    { ngx_string("profiling_ui"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_profiling_ui,
      0,
      0,
      NULL },

    { ngx_string("profiling_ui_store"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_ui_store_size,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_profiling_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_profiling_postconfiguration,  /* postconfiguration */

    ngx_http_profiling_create_main_conf,   /* create main configuration */
    ngx_http_profiling_init_main_conf,     /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_profiling_create_loc_conf,    /* create location configuration */
    ngx_http_profiling_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_profiling_module = {
    NGX_MODULE_V1,
    &ngx_http_profiling_module_ctx,        /* module context */
    ngx_http_profiling_commands,           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_profiling_init_module,        /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_profiling_exit_process,       /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/*
 * Starts the profiler in a worker. A module of its own, so that it can be
 * placed before the lua module (config: ngx_module_order): their
 * init_process run in that order, and the lua module's runs
 * init_worker_by_lua, sampled only if the sampler already runs.
 */
static ngx_http_module_t  ngx_http_profiling_worker_module_ctx = {
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};


ngx_module_t  ngx_http_profiling_worker_module = {
    NGX_MODULE_V1,
    &ngx_http_profiling_worker_module_ctx, /* module context */
    NULL,                                  /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_profiling_init_process,       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_profiling_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_profiling_main_conf_t  *pmcf;

    pmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_profiling_main_conf_t));
    if (pmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     pmcf->enabled_anywhere = 0;
     *     pmcf->dump_dir = { 0, NULL };
     *     pmcf->agent_url = { 0, NULL };
     *     pmcf->service = { 0, NULL };
     *     pmcf->env = { 0, NULL };
     *     pmcf->version = { 0, NULL };
     *     pmcf->tags = NULL;
     *     pmcf->debuginfod = { 0, NULL };
     *     pmcf->debuginfod_cache = { 0, NULL };
     */

    pmcf->dump_keep_files = NGX_CONF_UNSET_UINT;
    pmcf->dump_keep_bytes = NGX_CONF_UNSET;
    pmcf->upload_timeout = NGX_CONF_UNSET_MSEC;
    pmcf->pyroscope_endpoints = NGX_CONF_UNSET;
    pmcf->timeline = NGX_CONF_UNSET;
    pmcf->lua = NGX_CONF_UNSET;
    pmcf->period = NGX_CONF_UNSET_MSEC;
    pmcf->interval = NGX_CONF_UNSET_MSEC;
    pmcf->stall_threshold = NGX_CONF_UNSET_MSEC;
    pmcf->max_cpu_ppm = NGX_CONF_UNSET_UINT;
    pmcf->max_frames = NGX_CONF_UNSET_UINT;
    pmcf->memory_limit = NGX_CONF_UNSET_SIZE;
    pmcf->debuginfod_cache_max = NGX_CONF_UNSET;
    pmcf->ui_store_size = NGX_CONF_UNSET_SIZE;

    return pmcf;
}


static char *
ngx_http_profiling_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_conf_init_msec_value(pmcf->period, 60000);
    ngx_conf_init_msec_value(pmcf->interval, 10);
    ngx_conf_init_msec_value(pmcf->stall_threshold, 100);
    ngx_conf_init_uint_value(pmcf->max_cpu_ppm, 20000);
    ngx_conf_init_uint_value(pmcf->max_frames, 64);
    ngx_conf_init_size_value(pmcf->memory_limit, 8 * 1024 * 1024);
    ngx_conf_init_size_value(pmcf->ui_store_size, 4 * 1024 * 1024);

    ngx_conf_init_msec_value(pmcf->upload_timeout, 10000);
    ngx_conf_init_value(pmcf->pyroscope_endpoints, 0);
    ngx_conf_init_value(pmcf->timeline, 1);

    if (ngx_http_profiling_push_check(cf, &pmcf->pyroscope,
                                      "profiling_pyroscope_url", "Pyroscope")
        != NGX_CONF_OK
        || ngx_http_profiling_push_check(cf, &pmcf->otlp,
                                         "profiling_otlp_url",
                                         "the OTLP receiver")
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }
    ngx_conf_init_value(pmcf->lua, 1);

    /* The directives' values win over the environment and a tracer's. */
    pmcf->service_set = (pmcf->service.data != NULL);
    pmcf->env_set = (pmcf->env.data != NULL);
    pmcf->version_set = (pmcf->version.data != NULL);

    if (pmcf->dump_keep_files == NGX_CONF_UNSET_UINT) {
        pmcf->dump_keep_files = PROF_DUMP_KEEP_FILES_DEFAULT;
        pmcf->dump_keep_bytes = PROF_DUMP_KEEP_BYTES_DEFAULT;
    }

    /* Read here, in the master: workers lose the environment. */
    if (ngx_http_profiling_environment_defaults(cf, pmcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (pmcf->service.data == NULL) {
        ngx_str_set(&pmcf->service, "nginx");
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_profiling_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_profiling_loc_conf_t  *plcf;

    plcf = ngx_palloc(cf->pool, sizeof(ngx_http_profiling_loc_conf_t));
    if (plcf == NULL) {
        return NULL;
    }

    plcf->enable = NGX_CONF_UNSET;
    plcf->trace_id = NGX_CONF_UNSET_PTR;
    plcf->span_id = NGX_CONF_UNSET_PTR;
    plcf->root_span_id = NGX_CONF_UNSET_PTR;
    plcf->endpoint = NGX_CONF_UNSET_PTR;
    plcf->default_endpoint = 0;

    return plcf;
}


static char *
ngx_http_profiling_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_profiling_loc_conf_t  *prev = parent;
    ngx_http_profiling_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_ptr_value(conf->trace_id, prev->trace_id, NULL);
    ngx_conf_merge_ptr_value(conf->span_id, prev->span_id, NULL);
    ngx_conf_merge_ptr_value(conf->root_span_id, prev->root_span_id, NULL);
    ngx_conf_merge_ptr_value(conf->endpoint, prev->endpoint, NULL);

    conf->default_endpoint = (conf->enable && conf->endpoint == NULL);

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_profiling_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_profiling_main_conf_t  *pmcf;

    if (ngx_http_profiling_request_vars(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_profiling_module);

    if ((pmcf->enabled_anywhere || pmcf->status_used)
        && ngx_http_profiling_status_init(cf, pmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (pmcf->ui_used && ngx_http_profiling_ui_init(cf, pmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    /* Off everywhere: no hook at all. */
    if (!pmcf->enabled_anywhere) {
        return NGX_OK;
    }

    if (ngx_http_profiling_debuginfod_path(cf, pmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    pmcf->tracer = ngx_http_profiling_tracer_create(cf);
    if (pmcf->tracer == NULL) {
        return NGX_ERROR;
    }

    return ngx_http_profiling_request_init(cf,
                              ngx_http_profiling_tracer_found(pmcf->tracer));
}
