/*
 * What the files of ngx_http_profiling_module share: configuration, the
 * sampler of this worker, and the request hooks (code hotspots).
 */

#ifndef _NGX_HTTP_PROFILING_MODULE_H_INCLUDED_
#define _NGX_HTTP_PROFILING_MODULE_H_INCLUDED_

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "profiler.h"


typedef struct {
    ngx_flag_t                 enable;
    ngx_http_complex_value_t  *trace_id;
    ngx_http_complex_value_t  *span_id;
    ngx_http_complex_value_t  *root_span_id;
    ngx_http_complex_value_t  *endpoint;
} ngx_http_profiling_loc_conf_t;


extern ngx_module_t     ngx_http_profiling_module;

/* The sampler of this worker process, NULL when it does not sample. */
extern prof_sampler_t  *ngx_http_profiling_sampler;


/* postconfiguration: the phase handlers and the variables. */
ngx_int_t ngx_http_profiling_request_init(ngx_conf_t *cf);

/* init_module: per-request CPU accounting when a variable needs it. */
void ngx_http_profiling_request_init_cycle(ngx_cycle_t *cycle);

/* Runs a posted event's handler with its request's context published. */
void ngx_http_profiling_dispatch(ngx_event_t *ev);

/* The expired timers, run with their requests' contexts. */
void ngx_http_profiling_expire_timers(void);

/* No request is executing (back in the event loop). */
void ngx_http_profiling_request_leave(void);

/* The requests per endpoint counted since the last call (NULL: none). */
prof_endpoint_counts_t *ngx_http_profiling_take_endpoint_counts(void);


#endif /* _NGX_HTTP_PROFILING_MODULE_H_INCLUDED_ */
