/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What the files of ngx_http_profiling_module share, a section for each:
 * what it offers, which process calls it, and when (once, at each cycle,
 * for each request or for each event).
 */

#ifndef _NGX_HTTP_PROFILING_MODULE_H_INCLUDED_
#define _NGX_HTTP_PROFILING_MODULE_H_INCLUDED_

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "worker/profiler.h"
#include "profiler/symbol_store.h"


extern ngx_module_t             ngx_http_profiling_module;


/*
 * What follows is the module's own, not nginx's: no other object sees it,
 * so its functions are called directly, not through the procedure linkage
 * table (the request path calls some of them).
 */
#pragma GCC visibility push(hidden)


/*
 * The tracer in the same worker, if any (nginx-datadog, nginx-otel): found
 * in each configuration by ngx_http_profiling_tracer.c, copied into the
 * worker's state when its profiler starts.
 */
typedef enum {
    NGX_HTTP_PROFILING_NO_TRACER = 0,
    NGX_HTTP_PROFILING_DATADOG,
    NGX_HTTP_PROFILING_OTEL
} ngx_http_profiling_tracer_e;


typedef struct {
    ngx_http_profiling_tracer_e   kind;
    ngx_module_t                 *module;
    ngx_int_t                     span_id;        /* variable indexes */
    ngx_int_t                     trace_id;
    ngx_int_t                     locations;      /* offsets in its loc
                                                     conf, or -1 */
    ngx_int_t                     resource;
    ngx_int_t                     service;
    ngx_int_t                     env;
    ngx_int_t                     version;
    ngx_int_t                     main_service;   /* in its main conf */
} ngx_http_profiling_tracer_t;


/*
 * The configuration: created and merged in ngx_http_profiling_module.c,
 * set by the directives' handlers and completed with the environment's
 * defaults, in the process that reads it.
 */

/* A server profiles are pushed to (Pyroscope, OTLP): its URL and
   headers. */
typedef struct {
    ngx_str_t      url;                 /* unset, "off": none */
    ngx_array_t   *headers;             /* of ngx_str_t "Name: value",
                                           NUL-terminated (secrets) */
    ngx_array_t   *header_directives;   /* of ngx_str_t: the directive
                                           that set each */
    ngx_str_t      needs_url;           /* the first directive set that
                                           needs the URL */
} ngx_http_profiling_push_conf_t;


typedef struct {
    ngx_flag_t     enabled_anywhere;
    ngx_str_t      dump_dir;
    ngx_uint_t     dump_keep_files;     /* 0: no bound */
    off_t          dump_keep_bytes;     /* 0: no bound */
    ngx_str_t      agent_url;           /* "off": none */
    ngx_http_profiling_push_conf_t  pyroscope;
    ngx_http_profiling_push_conf_t  otlp;
    ngx_int_t      pyroscope_endpoints; /* 0: no endpoint label */
    ngx_msec_t     upload_timeout;
    ngx_flag_t     timeline;
    ngx_flag_t     lua;                 /* LuaJIT's frames (unset: on) */
    ngx_msec_t     period;
    ngx_msec_t     interval;
    ngx_msec_t     stall_threshold;     /* 0: off */
    ngx_uint_t     max_cpu_ppm;         /* millionths, 0: off */
    ngx_uint_t     max_frames;
    size_t         memory_limit;
    ngx_str_t      service;             /* set: by directive or DD_* */
    ngx_str_t      env;
    ngx_str_t      version;
    ngx_flag_t     service_set;         /* by a directive */
    ngx_flag_t     env_set;
    ngx_flag_t     version_set;
    ngx_array_t   *tags;                /* of ngx_str_t "key:value" */
    ngx_http_profiling_tracer_t  *tracer;   /* the configuration's */
    ngx_flag_t     status_used;         /* a location has profiling_status */
    ngx_shm_zone_t  *status_zone;       /* ngx_http_profiling_status.c */
    ngx_flag_t     ui_used;             /* a location has profiling_ui */
    size_t         ui_store_size;       /* profiling_ui_store */
    ngx_shm_zone_t  *ui_zone;           /* ngx_http_profiling_ui.c */
    ngx_str_t      debuginfod;          /* URLs; "off"; unset: the
                                           workers' DEBUGINFOD_URLS */
    ngx_str_t      debuginfod_cache;    /* unset: beside the client body
                                           temporary files */
    off_t          debuginfod_cache_max;
} ngx_http_profiling_main_conf_t;


typedef struct {
    ngx_flag_t                 enable;
    ngx_http_complex_value_t  *trace_id;
    ngx_http_complex_value_t  *span_id;
    ngx_http_complex_value_t  *root_span_id;
    ngx_http_complex_value_t  *endpoint;

    /* enable, and no endpoint of its own: the log phase's common case
       looks at this alone (set when merged; 0 elsewhere) */
    ngx_flag_t                 default_endpoint;
} ngx_http_profiling_loc_conf_t;


/* The bounds of a time directive (its command's post). */
typedef struct {
    ngx_msec_t     min;
    ngx_msec_t     max;
    const char    *range;
    ngx_uint_t     off;             /* "off" is 0 */
} ngx_http_profiling_time_bounds_t;


/*
 * The worker's state: one, owned by ngx_http_profiling_worker.c, which
 * hands it to the others (they keep the pointer where nginx calls them
 * without it). The profiler's part is NULL while it does not sample.
 */
typedef struct {
    prof_t                       *profiler;
    prof_sampler_t               *sampler;
    prof_sampled_thread_t        *sampled;      /* the words the worker
                                                   publishes what runs to */
    prof_endpoint_table_t       **endpoints;

    /* Publications do more (see ngx_http_profiling_publish). */
    ngx_uint_t                    slow;

    /* A tracer runs beside: its resource names, its callers' contexts. */
    ngx_uint_t                    traced;

    /* The running tracer: the configuration's, copied when the profiler
       starts (kind 0: none). */
    ngx_http_profiling_tracer_t   tracer;

    /*
     * nginx's HTTP log handler (static in nginx), learned by the event
     * loop wrapper from the first client connection's first event: an
     * event whose log has it works for the HTTP request the log names, if
     * any.
     */
    ngx_log_handler_pt            http_log;

    /* init_process ran with master_process off: a reload reaches
       init_module only, which restarts the profiler. */
    ngx_uint_t                    master_process_off;

    ngx_cycle_t                  *cycle;        /* the profiler's */
    ngx_msec_t                    upload_ms;    /* its upload timeout */
    struct prof_status_slot_s    *status_slot;  /* its status, NULL: none */
} ngx_http_profiling_worker_t;


/*
 * ngx_http_profiling_directives.c: the directives' handlers, called while
 * nginx reads the configuration (the master, nginx without one, nginx -t).
 */
char *ngx_http_profiling(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_time(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_max_cpu(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_max_frames(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_memory_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_dump_dir(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_dump_keep(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_tags(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_agent_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_debuginfod(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_debuginfod_cache(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);

/* ngx_http_profiling_push.c: the Pyroscope and OTLP directives (cmd's
   offset: the ngx_http_profiling_push_conf_t in the main conf). */
char *ngx_http_profiling_push_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_profiling_pyroscope_endpoints(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_push_basic_auth(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_push_bearer_token(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_push_tenant(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_push_header_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_push_check(ngx_conf_t *cf,
    ngx_http_profiling_push_conf_t *push, const char *url_directive,
    const char *server);

/* A server's URL (http, https, and unix: when unix_ok): NULL when valid,
   else why not. */
const char *ngx_http_profiling_check_url(ngx_pool_t *pool, ngx_str_t *url,
    ngx_uint_t unix_ok);


/*
 * ngx_http_profiling_environment.c: the defaults the environment gives,
 * read in the master when the http block's configuration is complete
 * (init_main_conf, postconfiguration).
 */
ngx_int_t ngx_http_profiling_environment_defaults(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf);
ngx_int_t ngx_http_profiling_debuginfod_path(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf);


/*
 * ngx_http_profiling_master.c: in the master at each cycle's init_module
 * (or in nginx without one), and the table read by a worker at its start.
 */
void ngx_http_profiling_share_unwind_table(ngx_cycle_t *cycle);
void ngx_http_profiling_make_dump_dir(ngx_cycle_t *cycle, u_char *path);
void ngx_http_profiling_make_symbol_store(ngx_cycle_t *cycle);
prof_unwind_table_t *ngx_http_profiling_inherited_unwind_table(void);
int ngx_http_profiling_symbol_store(void);


/*
 * ngx_http_profiling_worker.c: the modules' init_module (in the master, or
 * in nginx without one, at each cycle), init_process and exit_process (in
 * a worker, or in nginx without a master).
 */
ngx_int_t ngx_http_profiling_init_module(ngx_cycle_t *cycle);
ngx_int_t ngx_http_profiling_init_process(ngx_cycle_t *cycle);
void ngx_http_profiling_exit_process(ngx_cycle_t *cycle);


/*
 * ngx_http_profiling_log.c: the profiler's log handler (prof_conf_t's log),
 * called in the worker and in its profiler process, and the first call in
 * that process (prof_conf_t's child_init).
 */
void ngx_http_profiling_log_message(void *data, int level,
    const char *message);
int ngx_http_profiling_profiler_process_init(void *data, int *keep, int max);


/*
 * ngx_http_profiling_lua.c: in a worker (or nginx without a master), when
 * its profiler starts.
 */
void *ngx_http_profiling_lua_state(ngx_cycle_t *cycle);
void ngx_http_profiling_find_lua(ngx_cycle_t *cycle, prof_t *profiler,
    ngx_flag_t frames);


/*
 * ngx_http_profiling_status.c: the profiling_status directive, and its
 * zone added at postconfiguration, while nginx reads the configuration;
 * a slot taken when a worker's profiler starts, released when it stops.
 */
char *ngx_http_profiling_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_profiling_status_init(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf);
struct prof_status_slot_s *ngx_http_profiling_status_take_slot(
    ngx_http_profiling_main_conf_t *pmcf);
void ngx_http_profiling_status_release_slot(struct prof_status_slot_s *slot);


/*
 * ngx_http_profiling_ui.c: the profiling_ui directive and the page's
 * store (a zone added at postconfiguration), handed to each worker's
 * profiler when it starts; the store's figures for the status page.
 */
char *ngx_http_profiling_ui(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_profiling_ui_store_size(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_profiling_ui_init(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf);
struct prof_ui_store_s *ngx_http_profiling_ui_store(
    ngx_http_profiling_main_conf_t *pmcf);
size_t ngx_http_profiling_ui_record_max(ngx_cycle_t *cycle,
    ngx_http_profiling_main_conf_t *pmcf);
ngx_int_t ngx_http_profiling_ui_status(ngx_http_profiling_main_conf_t *pmcf,
    prof_buffer_t *page, ngx_uint_t text);


/*
 * ngx_http_profiling_tracer.c: the configuration's tracer found at
 * postconfiguration; the running one copied into the worker's state when
 * its profiler starts; then read for a request (in its first phase, for
 * its labels and endpoint).
 */
ngx_http_profiling_tracer_t *ngx_http_profiling_tracer_create(
    ngx_conf_t *cf);
ngx_uint_t ngx_http_profiling_tracer_found(
    ngx_http_profiling_tracer_t *tracer);
ngx_uint_t ngx_http_profiling_tracer_use(
    ngx_http_profiling_tracer_t *running,
    ngx_http_profiling_tracer_t *configured);
ngx_uint_t ngx_http_profiling_tracer_identity(ngx_http_profiling_tracer_t *t,
    ngx_cycle_t *cycle, ngx_str_t *service, ngx_str_t *env,
    ngx_str_t *version);
ngx_uint_t ngx_http_profiling_tracer_continues_trace(
    ngx_http_profiling_tracer_t *t, ngx_http_request_t *r);
ngx_int_t ngx_http_profiling_tracer_ids(ngx_http_profiling_tracer_t *t,
    ngx_http_request_t *r, uint64_t *span_id, uint64_t *root_id);
ngx_int_t ngx_http_profiling_tracer_trace_id(ngx_http_profiling_tracer_t *t,
    ngx_http_request_t *r, uint64_t *high, uint64_t *low);
ngx_http_complex_value_t *ngx_http_profiling_tracer_resource(
    ngx_http_profiling_tracer_t *t, ngx_http_request_t *r);


/*
 * ngx_http_profiling_request_ctx.c: a main request's context, created in
 * its handlers (only when the handlers are timed or a tracer runs beside).
 */
typedef struct {
    uint64_t                 cpu_ns;            /* its handlers' CPU time */
    ngx_uint_t               continues_trace;   /* a caller's trace */
} ngx_http_profiling_ctx_t;

ngx_http_profiling_ctx_t *ngx_http_profiling_find_ctx(ngx_http_request_t *r,
    ngx_uint_t create);
ngx_uint_t ngx_http_profiling_request_continues_trace(ngx_http_request_t *r);


/*
 * ngx_http_profiling_labels.c: in a worker, for the request a sample
 * carried (its labels; described, when it is a stall's, until the stall is
 * posted: ngx_http_profiling_stall.c), for a request's endpoint counted in
 * its log phase, and for $profiling_span_id.
 */
void ngx_http_profiling_resolve_ids(ngx_http_profiling_tracer_t *tracer,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf,
    uint64_t *span_id, uint64_t *root_id);
void ngx_http_profiling_count_endpoint(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, ngx_http_profiling_loc_conf_t *plcf);
void ngx_http_profiling_resolve_labels(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, uint64_t tag);
void ngx_http_profiling_describe_stall(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, uint64_t tag);
size_t ngx_http_profiling_stall_subject(uint64_t tag, u_char **text);


/*
 * ngx_http_profiling_events.c: the wrapper of the event module, which also
 * closes a profile every period (no timer of ours in nginx's tree):
 * installed when a worker's profiler starts, removed when it stops (or
 * left to pass through, when another module wrapped it since); it runs
 * every turn of the event loop, and publishes for every event.
 */
void ngx_http_profiling_events_start(ngx_cycle_t *cycle,
    ngx_http_profiling_worker_t *w, ngx_msec_t period);
void ngx_http_profiling_events_stop(void);


/*
 * ngx_http_profiling_request.c: the variables (added at postconfiguration
 * in any case) and the request hooks (registered there when profiling is
 * on somewhere), the worker's state handed at each cycle's init_module,
 * the publication set up when a worker's profiler starts (traced: a
 * tracer runs beside). Then, in the worker, what runs for each event and
 * each request: the hooks, and the publication below.
 */
ngx_int_t ngx_http_profiling_request_vars(ngx_conf_t *cf);
ngx_int_t ngx_http_profiling_request_init(ngx_conf_t *cf, ngx_uint_t traced);
void ngx_http_profiling_request_init_cycle(ngx_cycle_t *cycle,
    ngx_http_profiling_worker_t *w);
void ngx_http_profiling_request_start(ngx_cycle_t *cycle, ngx_uint_t traced);

#if (NGX_QUIC)
/* The request a QUIC connection's own event runs for, or NULL. */
ngx_http_request_t *ngx_http_profiling_quic_request(
    ngx_http_profiling_worker_t *w, ngx_event_t *ev);
#endif


/* Whether c is one of nginx's connections (not an HTTP/2 stream's). */
static ngx_inline ngx_uint_t
ngx_http_profiling_real_connection(ngx_connection_t *c)
{
    return ngx_cycle->connections != NULL
           && c >= ngx_cycle->connections
           && c < ngx_cycle->connections + ngx_cycle->connection_n;
}


/*
 * What executes is published to the sampler as three words (sampler.h):
 * the main request when the event's log names one (alive: its log phase
 * unpublishes it before it is freed; not for the events epoll returns in a
 * plain turn, whose connection names it, see
 * ngx_http_profiling_dispatch_io), the log of the event's connection (an
 * HTTP one, else nothing executes), the event's data (a connection, for
 * most events). A sample takes a tag for them; once something else is
 * published the worker resolves that tag: the request, or the one the
 * connection has then if it is still the same connection.
 *
 * Slow (w->slow): the handlers of each request are timed
 * ($profiling_request_cpu), or HTTP/3 (a QUIC connection's own events run
 * for its last request): then every publication does more.
 *
 * The publication (ngx_http_profiling_request.c, and the two functions
 * below) is called by the event loop wrapper for every event and by the
 * request hooks: the request path, whose cost is counted in instructions
 * (ci/bench-instructions).
 */
void ngx_http_profiling_publish_slow(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, ngx_log_t *log, void *object);
void ngx_http_profiling_resolve_pending(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r);
void ngx_http_profiling_request_stop(ngx_http_profiling_worker_t *w);

/*
 * ngx_http_profiling_stall.c: called by the event loop wrapper when a turn
 * past the sampled thread's stall_ticks ends (its wait begins).
 */
void ngx_http_profiling_stalled(ngx_http_profiling_worker_t *w,
    uint64_t ticks);


/*
 * ngx_http_profiling_publish() where nothing is slow. sampled: w->sampled,
 * which the caller holds.
 */
static ngx_inline void
ngx_http_profiling_publish_fast(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_http_request_t *r, ngx_log_t *log,
    void *object)
{
    /* Published first: a sample meanwhile loses its tag, not the next. */
    prof_publish(sampled, r, log, object);

    if (prof_pending_tag(sampled) != 0) {
        ngx_http_profiling_resolve_pending(w, NULL);
    }
}


/*
 * Nothing known runs from now: ngx_http_profiling_publish(w, sampled, NULL,
 * NULL, NULL), with one store where nothing is slow.
 */
static ngx_inline void
ngx_http_profiling_unpublish(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled)
{
    if (w->slow) {
        ngx_http_profiling_publish_slow(w, NULL, NULL, NULL);
        return;
    }

    prof_unpublish(sampled);

    if (prof_pending_tag(sampled) != 0) {
        ngx_http_profiling_resolve_pending(w, NULL);
    }
}


/*
 * What runs from now (r and log NULL: nothing that is known). sampled:
 * w->sampled, which the caller holds.
 */
static ngx_inline void
ngx_http_profiling_publish(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_http_request_t *r, ngx_log_t *log,
    void *object)
{
    if (w->slow) {
        ngx_http_profiling_publish_slow(w, r, log, object);
        return;
    }

    ngx_http_profiling_publish_fast(w, sampled, r, log, object);
}


#pragma GCC visibility pop


#endif /* _NGX_HTTP_PROFILING_MODULE_H_INCLUDED_ */
