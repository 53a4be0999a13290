/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * ngx_http_profiling_module: directives, and the profiler's life in a
 * worker process: started in init_process, a profile closed every period
 * (by the event loop wrapper), the last one written in exit_process within
 * nginx's deadlines; the profiler's messages logged from the event loop.
 */

#include "ngx_http_profiling_module.h"
#include "profiler/file_export.h"
#include "channel/status.h"

#include <sys/eventfd.h>


/* After a worker's exit, its profiler process gets this long to write the
   last profile to the dump directory (on TERM: nothing is uploaded). */
#define NGX_HTTP_PROFILING_TERM_WAIT_MS    300

/* After a worker's graceful exit (QUIT, reload), its last upload gets no
   longer than this. */
#define NGX_HTTP_PROFILING_EXIT_UPLOAD_MS  1000


static void *ngx_http_profiling_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_profiling_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_profiling_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_profiling_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_profiling_postconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_profiling_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_profiling_init_process(ngx_cycle_t *cycle);
static void ngx_http_profiling_exit_process(ngx_cycle_t *cycle);


static ngx_http_profiling_time_bounds_t  ngx_http_profiling_period_bounds = {
    1000, 600000, "between 1s and 10m"
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_interval_bounds =
{
    1, 1000, "between 1ms and 1s"
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_upload_bounds = {
    100, 600000, "between 100ms and 10m"
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


prof_t                          *ngx_http_profiling_profiler;

static ngx_msec_t                ngx_http_profiling_upload_ms;
static ngx_cycle_t              *ngx_http_profiling_cycle;
static prof_status_slot_t       *ngx_http_profiling_status_slot;



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
    pmcf->timeline = NGX_CONF_UNSET;
    pmcf->lua = NGX_CONF_UNSET;
    pmcf->period = NGX_CONF_UNSET_MSEC;
    pmcf->interval = NGX_CONF_UNSET_MSEC;
    pmcf->max_frames = NGX_CONF_UNSET_UINT;
    pmcf->memory_limit = NGX_CONF_UNSET_SIZE;
    pmcf->debuginfod_cache_max = NGX_CONF_UNSET;

    return pmcf;
}


static char *
ngx_http_profiling_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_conf_init_msec_value(pmcf->period, 60000);
    ngx_conf_init_msec_value(pmcf->interval, 10);
    ngx_conf_init_uint_value(pmcf->max_frames, 64);
    ngx_conf_init_size_value(pmcf->memory_limit, 8 * 1024 * 1024);

    ngx_conf_init_msec_value(pmcf->upload_timeout, 10000);
    ngx_conf_init_value(pmcf->timeline, 1);
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


static ngx_int_t ngx_http_profiling_start(ngx_cycle_t *cycle);
static void ngx_http_profiling_stop(void);
static void ngx_http_profiling_cycle_gone(void *data);

/* init_process ran without a master: reloads reach init_module only. */
static ngx_uint_t                ngx_http_profiling_single;


/*
 * In the master, as root: build the unwind tables, create the dump
 * directory for the workers' user. Without a master, a new cycle (a
 * reload) restarts the profiler with its settings.
 */
static ngx_int_t
ngx_http_profiling_init_module(ngx_cycle_t *cycle)
{
    u_char                          *path;
    ngx_uint_t                       reload;
    ngx_pool_cleanup_t              *cln;
    ngx_http_profiling_main_conf_t  *pmcf;

    ngx_http_profiling_request_init_cycle(cycle);

    pmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_profiling_module);

    if (pmcf == NULL || ngx_test_config) {
        return NGX_OK;
    }

    reload = 0;

    if (ngx_process == NGX_PROCESS_SINGLE) {
        /* A cycle's pool goes before the module may be unloaded with it. */
        cln = ngx_pool_cleanup_add(cycle->pool, 0);
        if (cln == NULL) {
            return NGX_ERROR;
        }
        cln->handler = ngx_http_profiling_cycle_gone;
        cln->data = cycle;

        if (ngx_http_profiling_single) {
            ngx_http_profiling_stop();
            reload = 1;
        }
    }

    if (!pmcf->enabled_anywhere) {
        return NGX_OK;
    }

    ngx_http_profiling_share_unwind_table(cycle);

    if (pmcf->dump_dir.len > 0) {
        path = ngx_pnalloc(cycle->pool, pmcf->dump_dir.len + 1);
        if (path == NULL) {
            return NGX_ERROR;
        }

        ngx_cpystrn(path, pmcf->dump_dir.data, pmcf->dump_dir.len + 1);

        ngx_http_profiling_make_dump_dir(cycle, path);
    }

    if (reload) {
        (void) ngx_http_profiling_start(cycle);
    }

    return NGX_OK;
}


/* A NUL-terminated copy, NULL for an empty or unset string. */
static char *
ngx_http_profiling_cstr(ngx_pool_t *pool, ngx_str_t *s)
{
    u_char  *p;

    if (s->len == 0) {
        return NULL;
    }

    p = ngx_pnalloc(pool, s->len + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_cpystrn(p, s->data, s->len + 1);

    return (char *) p;
}


static ngx_int_t
ngx_http_profiling_start(ngx_cycle_t *cycle)
{
    int                              rc;
    char                           **tags;
    ngx_str_t                       *tag, service, env, version;
    ngx_uint_t                       i, traced;
    prof_conf_t                      conf;
    ngx_http_profiling_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_profiling_module);

    if (pmcf == NULL || !pmcf->enabled_anywhere) {
        return NGX_OK;
    }

    ngx_memzero(&conf, sizeof(prof_conf_t));

    if (pmcf->tags != NULL && pmcf->tags->nelts > 0) {
        tags = ngx_pcalloc(cycle->pool, pmcf->tags->nelts * sizeof(char *));
        if (tags == NULL) {
            return NGX_OK;
        }

        tag = pmcf->tags->elts;
        for (i = 0; i < pmcf->tags->nelts; i++) {
            tags[i] = ngx_http_profiling_cstr(cycle->pool, &tag[i]);
            if (tags[i] == NULL) {
                return NGX_OK;
            }
        }

        conf.tags = (const char * const *) tags;
        conf.tag_count = pmcf->tags->nelts;
    }

    /*
     * The identity: the directives', else what a tracer beside is
     * configured with (its spans carry it), else what the tracer says at
     * run time (prof_conf_t), else the environment's.
     */
    traced = ngx_http_profiling_tracer_use(pmcf->tracer);

    service = pmcf->service;
    env = pmcf->env;
    version = pmcf->version;

    conf.service_explicit = pmcf->service_set;
    conf.env_explicit = pmcf->env_set;
    conf.version_explicit = pmcf->version_set;

    if (traced) {
        ngx_str_null(&service);
        ngx_str_null(&env);
        ngx_str_null(&version);

        (void) ngx_http_profiling_tracer_identity(cycle, &service, &env,
                                                  &version);

        if (pmcf->service_set || service.len == 0) {
            service = pmcf->service;
        } else {
            conf.service_explicit = 1;
        }

        if (pmcf->env_set || env.len == 0) {
            env = pmcf->env;
        } else {
            conf.env_explicit = 1;
        }

        if (pmcf->version_set || version.len == 0) {
            version = pmcf->version;
        } else {
            conf.version_explicit = 1;
        }
    }

    conf.interval_ns = (int64_t) pmcf->interval * 1000000;
    conf.max_frames = pmcf->max_frames;
    conf.memory_limit = pmcf->memory_limit;
    conf.timeline = pmcf->timeline;
    conf.dump_dir = ngx_http_profiling_cstr(cycle->pool, &pmcf->dump_dir);
    conf.dump_keep_files = pmcf->dump_keep_files;
    conf.dump_keep_bytes = pmcf->dump_keep_bytes;
    conf.service = ngx_http_profiling_cstr(cycle->pool, &service);
    conf.env = ngx_http_profiling_cstr(cycle->pool, &env);
    conf.version = ngx_http_profiling_cstr(cycle->pool, &version);
    conf.tracer_identity = 1;
    conf.runtime_version = NGINX_VERSION;
    conf.upload_timeout_ms = pmcf->upload_timeout;
    conf.log = ngx_http_profiling_log_message;
    conf.unwind_table = ngx_http_profiling_inherited_unwind_table();

    /* The line for a bug report: from one worker, not from every one. */
    conf.identify = (ngx_process == NGX_PROCESS_SINGLE || ngx_worker == 0);

    if (ngx_strcmp(pmcf->agent_url.data, "off") != 0) {
        conf.agent_url = ngx_http_profiling_cstr(cycle->pool,
                                                 &pmcf->agent_url);
    }

    conf.child_init = ngx_http_profiling_profiler_process_init;

    if (ngx_strcmp(pmcf->debuginfod.data, "off") != 0) {
        conf.debuginfod = 1;
        conf.debuginfod_urls = (pmcf->debuginfod.len > 0)
                               ? (char *) pmcf->debuginfod.data : NULL;
        conf.debuginfod_cache = ngx_http_profiling_cstr(cycle->pool,
                                                  &pmcf->debuginfod_cache);
        conf.debuginfod_cache_bytes = pmcf->debuginfod_cache_max;
        conf.debuginfod_retry_ms = pmcf->period;
    }

    conf.lua = pmcf->lua && ngx_http_profiling_lua_state(cycle) != NULL;

    ngx_http_profiling_status_slot = ngx_http_profiling_status_claim(pmcf);
    conf.status_slot = ngx_http_profiling_status_slot;

    rc = prof_start(&ngx_http_profiling_profiler, &conf);

    if (rc != 0) {
        /* Never fail the worker: it serves without the profiler. */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, -rc,
                      "profiling: the sampler could not start, "
                      "profiling is disabled in this process");

        if (ngx_http_profiling_status_slot != NULL) {
            prof_status_publish_stopped(ngx_http_profiling_status_slot,
                                        "the sampler could not start",
                                        -rc);
        }

        ngx_http_profiling_profiler = NULL;
        return NGX_OK;
    }

    ngx_http_profiling_cycle = cycle;
    ngx_http_profiling_sampler = prof_get_sampler(ngx_http_profiling_profiler);
    ngx_http_profiling_sampled =
        prof_sampler_sampled_thread(ngx_http_profiling_sampler);
    ngx_http_profiling_endpoints =
                   prof_get_endpoint_table(ngx_http_profiling_profiler);

    ngx_http_profiling_upload_ms = pmcf->upload_timeout;

    /* From now: the profile started in prof_start, nginx's clock earlier. */
    ngx_time_update();

    ngx_http_profiling_request_start(cycle, traced);
    ngx_http_profiling_events_start(cycle, pmcf->period);
    ngx_http_profiling_find_lua(cycle, ngx_http_profiling_profiler);

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "profiling: sampling every %Mms, a profile every %Mms, "
                  "to %s%s%s", pmcf->interval, pmcf->period,
                  conf.dump_dir ? conf.dump_dir : "",
                  (conf.dump_dir && conf.agent_url) ? " and " : "",
                  conf.agent_url ? conf.agent_url : "");

    return NGX_OK;
}


static ngx_int_t
ngx_http_profiling_init_process(ngx_cycle_t *cycle)
{
    if (ngx_process == NGX_PROCESS_SINGLE) {
        ngx_http_profiling_single = 1;

    } else if (ngx_process != NGX_PROCESS_WORKER) {
        return NGX_OK;
    }

    return ngx_http_profiling_start(cycle);
}


/*
 * Stops the profiler within nginx's deadlines: on TERM/INT (nginx kills a
 * worker that lingers) the last profile is written to the dump directory
 * and uploads are given up at once; on a graceful exit (QUIT, reload) the
 * last upload gets at most a second, whatever profiling_upload_timeout.
 */
static void
ngx_http_profiling_stop(void)
{
    int64_t  upload_ms, wait_ms;

    if (ngx_http_profiling_profiler == NULL) {
        ngx_http_profiling_status_release(ngx_http_profiling_status_slot);
        ngx_http_profiling_status_slot = NULL;
        return;
    }

    ngx_http_profiling_request_stop();
    ngx_http_profiling_events_stop();
    ngx_http_profiling_sampled = NULL;
    ngx_http_profiling_sampler = NULL;
    ngx_http_profiling_endpoints = NULL;

    if (ngx_terminate) {
        upload_ms = 0;
        wait_ms = NGX_HTTP_PROFILING_TERM_WAIT_MS;

    } else {
        upload_ms = ngx_min(ngx_http_profiling_upload_ms,
                            NGX_HTTP_PROFILING_EXIT_UPLOAD_MS);
        wait_ms = upload_ms + NGX_HTTP_PROFILING_TERM_WAIT_MS;
    }

    (void) prof_stop(ngx_http_profiling_profiler, upload_ms, wait_ms);
    ngx_http_profiling_status_release(ngx_http_profiling_status_slot);

    ngx_http_profiling_profiler = NULL;
    ngx_http_profiling_status_slot = NULL;
}


static void
ngx_http_profiling_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_profiling_stop();
}


/* The cycle the profiler was started with goes: so does the profiler. */
static void
ngx_http_profiling_cycle_gone(void *data)
{
    if (data == ngx_http_profiling_cycle) {
        ngx_http_profiling_stop();
        ngx_http_profiling_cycle = NULL;
    }
}
