/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler's life in a worker process: started in init_process, a
 * profile closed every period (by the event loop wrapper), the last one
 * written in exit_process within nginx's deadlines; without a master,
 * restarted with each new cycle (init_module). The worker's state is
 * this file's, handed to the files that need it.
 */

#include "ngx_http_profiling_module.h"
#include "channel/status.h"


/* After a worker's exit, its profiler process gets this long to write the
   last profile to the dump directory (on TERM: nothing is uploaded). */
#define NGX_HTTP_PROFILING_TERM_WAIT_MS    300

/* After a worker's graceful exit (QUIT, reload), its last upload gets no
   longer than this. */
#define NGX_HTTP_PROFILING_EXIT_UPLOAD_MS  1000


static ngx_int_t ngx_http_profiling_start(ngx_cycle_t *cycle);
static void ngx_http_profiling_stop(void);
static void ngx_http_profiling_cycle_gone(void *data);


/*
 * The worker's state: this file's, handed to the others (the request
 * hooks at init_module, the event loop wrapper when it starts, the tracer
 * and the labels through their callers).
 */
static ngx_http_profiling_worker_t  ngx_http_profiling_worker;


/*
 * In the master, as root: hand the worker's state to the request hooks
 * (the workers inherit it), build the unwind tables, create the dump
 * directory for the workers' user. Without a master, a new cycle (a
 * reload) restarts the profiler with its settings.
 */
ngx_int_t
ngx_http_profiling_init_module(ngx_cycle_t *cycle)
{
    u_char                          *path;
    ngx_uint_t                       reload;
    ngx_pool_cleanup_t              *cln;
    ngx_http_profiling_main_conf_t  *pmcf;

    ngx_http_profiling_request_init_cycle(cycle, &ngx_http_profiling_worker);

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

        if (ngx_http_profiling_worker.master_process_off) {
            ngx_http_profiling_stop();
            reload = 1;
        }
    }

    if (!pmcf->enabled_anywhere) {
        return NGX_OK;
    }

    ngx_http_profiling_share_unwind_table(cycle);
    ngx_http_profiling_make_symbol_store(cycle);

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


/* The configuration could not be copied: the worker serves without the
   profiler, and says so. */
static ngx_int_t
ngx_http_profiling_no_memory(ngx_cycle_t *cycle, const char *what)
{
    ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "profiling: no memory for "
                  "%s, profiling is disabled in this process", what);

    return NGX_OK;
}


/* A destination of the profiles, for the start's line: " and " after
   another one (the line's start at start). */
static u_char *
ngx_http_profiling_destination(u_char *p, u_char *last, u_char *start,
    const char *what, const char *where)
{
    if (where == NULL) {
        return p;
    }

    return ngx_slprintf(p, last, "%s%s%s", (p > start) ? " and " : "",
                        what, where);
}


/* Whether profiles are pushed to the server (its URL set, not off). */
static ngx_uint_t
ngx_http_profiling_push_on(ngx_http_profiling_push_conf_t *push)
{
    return push->url.data != NULL
           && ngx_strcmp(push->url.data, "off") != 0;
}


/* The server's headers as C strings ("Name: value"), their count in n;
   NULL: none, or no memory (n > 0). */
static const char * const *
ngx_http_profiling_push_headers(ngx_cycle_t *cycle,
    ngx_http_profiling_push_conf_t *push, size_t *n)
{
    char       **headers;
    ngx_str_t   *h;
    ngx_uint_t   i;

    *n = 0;

    if (push->headers == NULL || push->headers->nelts == 0) {
        return NULL;
    }

    *n = push->headers->nelts;

    headers = ngx_pcalloc(cycle->pool, *n * sizeof(char *));
    if (headers == NULL) {
        return NULL;
    }

    h = push->headers->elts;
    for (i = 0; i < *n; i++) {
        headers[i] = (char *) h[i].data;
    }

    return (const char * const *) headers;
}


static ngx_int_t
ngx_http_profiling_start(ngx_cycle_t *cycle)
{
    int                              rc;
    char                           **tags;
    u_char                           to[1024], *p;
    ngx_str_t                       *tag, service, env, version;
    ngx_uint_t                       i, traced;
    prof_conf_t                      conf;
    ngx_http_profiling_worker_t     *w;
    ngx_http_profiling_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_profiling_module);

    if (pmcf == NULL || !pmcf->enabled_anywhere) {
        return NGX_OK;
    }

    w = &ngx_http_profiling_worker;

    ngx_memzero(&conf, sizeof(prof_conf_t));

    if (pmcf->tags != NULL && pmcf->tags->nelts > 0) {
        tags = ngx_pcalloc(cycle->pool, pmcf->tags->nelts * sizeof(char *));
        if (tags == NULL) {
            return ngx_http_profiling_no_memory(cycle, "the tags");
        }

        tag = pmcf->tags->elts;
        for (i = 0; i < pmcf->tags->nelts; i++) {
            tags[i] = ngx_http_profiling_cstr(cycle->pool, &tag[i]);
            if (tags[i] == NULL) {
                return ngx_http_profiling_no_memory(cycle, "the tags");
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
    traced = ngx_http_profiling_tracer_use(&w->tracer, pmcf->tracer);

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

        (void) ngx_http_profiling_tracer_identity(&w->tracer, cycle, &service,
                                                  &env, &version);

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
    conf.stall_ns = (int64_t) pmcf->stall_threshold * 1000000;
    conf.max_cpu_ppm = (uint32_t) pmcf->max_cpu_ppm;
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
    conf.symbol_store_fd = ngx_http_profiling_symbol_store();

    /* The line for a bug report: from one worker, not from every one. */
    conf.identify = (ngx_process == NGX_PROCESS_SINGLE || ngx_worker == 0);

    if (ngx_strcmp(pmcf->agent_url.data, "off") != 0) {
        conf.agent_url = ngx_http_profiling_cstr(cycle->pool,
                                                 &pmcf->agent_url);
    }

    if (ngx_http_profiling_push_on(&pmcf->pyroscope)) {
        conf.pyroscope_url = ngx_http_profiling_cstr(cycle->pool,
                                                     &pmcf->pyroscope.url);
        conf.pyroscope_max_endpoints = pmcf->pyroscope_endpoints;
        conf.pyroscope_headers = ngx_http_profiling_push_headers(cycle,
                                          &pmcf->pyroscope,
                                          &conf.pyroscope_header_count);
        if (conf.pyroscope_header_count > 0
            && conf.pyroscope_headers == NULL)
        {
            return ngx_http_profiling_no_memory(cycle, "Pyroscope's headers");
        }
    }

    if (ngx_http_profiling_push_on(&pmcf->otlp)) {
        conf.otlp_url = ngx_http_profiling_cstr(cycle->pool, &pmcf->otlp.url);
        conf.otlp_headers = ngx_http_profiling_push_headers(cycle,
                                          &pmcf->otlp,
                                          &conf.otlp_header_count);
        if (conf.otlp_header_count > 0 && conf.otlp_headers == NULL) {
            return ngx_http_profiling_no_memory(cycle, "OTLP's headers");
        }
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

    /* (profiling_lua off: LuaJIT's C frames still guide the walk) */
    conf.lua = ngx_http_profiling_lua_state(cycle) != NULL;

    w->status_slot = ngx_http_profiling_status_take_slot(pmcf);
    conf.status_slot = w->status_slot;
    conf.ui_store = ngx_http_profiling_ui_store(pmcf);
    conf.ui_record_max = ngx_http_profiling_ui_record_max(cycle, pmcf);

    rc = prof_start(&w->profiler, &conf);

    if (rc != 0) {
        /* Never fail the worker: it serves without the profiler. */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, -rc,
                      "profiling: the sampler could not start, "
                      "profiling is disabled in this process");

        if (w->status_slot != NULL) {
            prof_status_publish_stopped(w->status_slot,
                                        "the sampler could not start",
                                        -rc);
        }

        w->profiler = NULL;
        return NGX_OK;
    }

    w->cycle = cycle;
    w->sampler = prof_get_sampler(w->profiler);
    w->sampled = prof_sampler_sampled_thread(w->sampler);
    w->endpoints = prof_get_endpoint_table(w->profiler);

    w->upload_ms = pmcf->upload_timeout;

    /* From now: the profile started in prof_start, nginx's clock earlier. */
    ngx_time_update();

    ngx_http_profiling_request_start(cycle, traced);
    ngx_http_profiling_events_start(cycle, w, pmcf->period);
    ngx_http_profiling_find_lua(cycle, w->profiler, pmcf->lua);

    p = ngx_http_profiling_destination(to, to + sizeof(to), to, "",
                                       conf.dump_dir);
    p = ngx_http_profiling_destination(p, to + sizeof(to), to, "",
                                       conf.agent_url);
    p = ngx_http_profiling_destination(p, to + sizeof(to), to,
                                       "Pyroscope at ", conf.pyroscope_url);
    p = ngx_http_profiling_destination(p, to + sizeof(to), to, "OTLP at ",
                                       conf.otlp_url);

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "profiling: sampling every %Mms, a profile every %Mms, "
                  "to %*s", pmcf->interval, pmcf->period, p - to, to);

    return NGX_OK;
}


ngx_int_t
ngx_http_profiling_init_process(ngx_cycle_t *cycle)
{
    if (ngx_process == NGX_PROCESS_SINGLE) {
        ngx_http_profiling_worker.master_process_off = 1;

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
    int64_t                       upload_ms, wait_ms;
    ngx_http_profiling_worker_t  *w;

    w = &ngx_http_profiling_worker;

    if (w->profiler == NULL) {
        ngx_http_profiling_status_release_slot(w->status_slot);
        w->status_slot = NULL;
        return;
    }

    ngx_http_profiling_request_stop(w);
    ngx_http_profiling_events_stop();
    w->sampled = NULL;
    w->sampler = NULL;
    w->endpoints = NULL;

    if (ngx_terminate) {
        upload_ms = 0;
        wait_ms = NGX_HTTP_PROFILING_TERM_WAIT_MS;

    } else {
        upload_ms = ngx_min(w->upload_ms, NGX_HTTP_PROFILING_EXIT_UPLOAD_MS);
        wait_ms = upload_ms + NGX_HTTP_PROFILING_TERM_WAIT_MS;
    }

    (void) prof_stop(w->profiler, upload_ms, wait_ms);
    ngx_http_profiling_status_release_slot(w->status_slot);

    w->profiler = NULL;
    w->status_slot = NULL;
}


void
ngx_http_profiling_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_profiling_stop();
}


/* The cycle the profiler was started with goes: so does the profiler. */
static void
ngx_http_profiling_cycle_gone(void *data)
{
    if (data == ngx_http_profiling_worker.cycle) {
        ngx_http_profiling_stop();
        ngx_http_profiling_worker.cycle = NULL;
    }
}
