/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What a worker hands to the profiler process it forks (prof_start,
 * worker/profiler.h): the server's configuration, the shared mappings and
 * what the worker knows of itself. Nothing is copied into a mapping for
 * it: the child of the fork reads them in its copy of the worker's memory
 * (the worker's later writes to its own memory are not seen there), and
 * the mappings, shared, at the same addresses.
 *
 * Threading: prof_process_main is called once, by the only thread of the
 * child of the worker's fork, and never returns: the process exits.
 * Memory: the handover, the configuration and its strings are the
 * worker's (the fork's copy in the child, valid for the child's life).
 */

#ifndef PROF_HANDOVER_H
#define PROF_HANDOVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/log.h"
#include "channel/channel.h"
#include "channel/lua_frames.h"
#include "channel/sampler_state.h"


struct prof_status_slot_s;
struct prof_ui_store_s;
struct prof_unwind_table_s;


typedef struct {
    int64_t              interval_ns;
    unsigned             max_frames;
    int64_t              stall_ns;      /* a turn of the server's loop
                                           this long is a stall, logged
                                           with its request and its code;
                                           0: off */
    uint32_t             max_cpu_ppm;   /* the profiler's share of the
                                           worker's CPU, in millionths
                                           (the interval widens past it);
                                           0: no ceiling */
    size_t               memory_limit;  /* bytes of queued sample batches */
    int                  timeline;      /* every sample with its time */
    const char          *dump_dir;      /* NULL: no file sink */
    uint64_t             dump_keep_files;   /* 0: no bound on the count */
    uint64_t             dump_keep_bytes;   /* 0: no bound on the size */
    const char          *agent_url;     /* NULL: no upload */
    const char          *pyroscope_url; /* NULL: no push (pyroscope.h) */
    const char * const  *pyroscope_headers;     /* "Name: value" (auth:
                                           secrets, never logged) */
    size_t               pyroscope_header_count;
    size_t               pyroscope_max_endpoints;   /* 0: no label */
    const char          *otlp_url;      /* NULL: no OTLP export (otlp.h) */
    const char * const  *otlp_headers;  /* "Name: value" (as Pyroscope's) */
    size_t               otlp_header_count;
    int64_t              upload_timeout_ms;
    const char          *service;       /* NULL: "nginx" */
    const char          *env;           /* NULL: none */
    const char          *version;       /* NULL: none */
    int                  service_explicit;  /* kept whatever a tracer */
    int                  env_explicit;      /* says (see below) */
    int                  version_explicit;
    int                  tracer_identity;   /* a Datadog tracer's in the
                                               process: its runtime-id,
                                               and its service, env and
                                               version where not explicit
                                               (tracer_info.h) */
    const char          *runtime_id;    /* NULL: the tracer's, else a
                                           random UUID */
    const char * const  *tags;          /* "key:value" */
    size_t               tag_count;
    const char          *runtime_version;   /* the server's version */
    prof_log_pt          log;
    void                *log_data;
    struct prof_unwind_table_s  *unwind_table;  /* built before (e.g.
                                           inherited from a parent
                                           process), kept by the caller;
                                           NULL: the sampler builds one
                                           (worker/sampler.c) */
    int                  identify;      /* log the module's version and
                                           what it found, at NOTICE */
    struct prof_status_slot_s  *status_slot;    /* written every second
                                           by the profiler process
                                           (status.h); NULL: none */
    struct prof_ui_store_s  *ui_store;  /* the page's store: each closed
                                           profile written to it by the
                                           profiler process (ui_store.h);
                                           NULL: none */
    size_t               ui_record_max; /* its share of the store: a
                                           record's bytes at most (0: no
                                           bound) */
    int                  debuginfod;    /* fetch debug files for objects
                                           with unnamed frames, in the
                                           profiler process (debuginfod.h)
                                           */
    const char          *debuginfod_urls;   /* NULL: $DEBUGINFOD_URLS */
    const char          *debuginfod_cache;  /* NULL: libdebuginfod's */
    uint64_t             debuginfod_cache_bytes;    /* 0: no bound */
    int64_t              debuginfod_retry_ms;   /* after a failure */
    int                (*child_init)(void *data, int *keep, int max);
                                        /* first thing in the profiler
                                           process: the server's own
                                           (its title, its log), and the
                                           descriptors to keep open (at
                                           most max) in keep: the count */
    void                *child_init_data;
    int                  symbol_store_fd;   /* the instance's symbol
                                           store (profiler/symbol_store.h),
                                           inherited; 0 or -1: none */
    int                  lua;           /* LuaJIT may be found later
                                           (prof_set_lua_vm): room for its
                                           frames' names */
} prof_conf_t;


typedef struct {
    const prof_conf_t   *conf;          /* the worker's copy of it */
    pid_t                worker_pid;
    int                  worker_fd;     /* a pipe's read end: the worker
                                           holds the other, closed when
                                           it goes */
    prof_channel_t      *channel;       /* shared (channel.h) */
    prof_sampler_t      *sampler;       /* shared (sampler_state.h) */
    prof_lua_t          *lua;           /* shared (lua_frames.h); NULL:
                                           conf.lua is off */
    int64_t              start_monotonic_ns;    /* of the first profile */
    int64_t              start_realtime_ns;
    const char          *thread_name;   /* the worker's thread's */
} prof_handover_t;


/* profiler/process.c: the profiler process, from the fork to its exit. */
void prof_process_main(const prof_handover_t *h)
    __attribute__((noreturn));


#endif /* PROF_HANDOVER_H */
