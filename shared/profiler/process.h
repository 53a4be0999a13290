/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler process: one per worker, forked by it (channel/handover.h,
 * prof_process_main). Its state, shared by the files that run in it:
 * process.c (its start and exit, on its main thread), loop.c (the
 * profiler loop thread, libuv), queue_drain.c, export.c, identify.c,
 * status_publish.c (on the loop thread) and process_conf.c; the
 * sampler thread is ring_drain.c's, with state of its own.
 *
 * Threads and fields:
 * - main thread: the process's start, the wait for its worker's exit (the
 *   pipe) and for its log's messages, which it delivers to the server's
 *   handler, and the end (the last profile, within the worker's bounds);
 * - loop thread: the fields marked so below; it may block (files,
 *   uploads), never the worker, which waits for nothing of this process.
 * Fields set before the threads start and not written after are read by
 * any of them; the few both threads write are atomics. done is protected
 * by done_mutex (with done_cond).
 * Memory: the state is the process's own (a static: one per process, for
 * its life); the channel and the sampler's mapping are shared with the
 * worker (channel.h, sampler_state.h).
 */

#ifndef PROF_PROCESS_H
#define PROF_PROCESS_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <uv.h>

#include "common/log.h"
#include "channel/channel.h"
#include "channel/handover.h"
#include "channel/lua_frames.h"
#include "channel/sampled_thread.h"
#include "channel/sampler_state.h"
#include "channel/tracer_info.h"
#include "profiler/aggregator.h"
#include "profiler/container.h"
#include "profiler/debuginfod.h"
#include "profiler/file_export.h"
#include "profiler/intake.h"
#include "profiler/ring_drain.h"
#include "profiler/sample_queue.h"
#include "profiler/stall_report.h"
#include "profiler/symbolizer.h"
#include "profiler/upload.h"


#define PROF_VERSION  "0.1.0"
#define PROF_ORIGIN   "nginx-profiling"


typedef struct prof_process_s  prof_process_t;

struct prof_process_s {
    prof_conf_t          conf;                  /* the worker's */
    pid_t                pid;                   /* the worker's */
    const char          *thread_name;           /* the worker's thread's */
    int64_t              start_monotonic_ns;    /* of the first profile */
    int64_t              start_realtime_ns;
    prof_log_t           log;

    prof_channel_t      *channel;               /* shared (channel.h) */
    prof_sampler_t      *sampler;               /* shared */
    prof_sampled_thread_t  *sampled;            /* the words its thread
                                                   and handler share */
    prof_lua_t          *lua;                   /* LuaJIT's frames
                                                   (lua_frames.h), shared;
                                                   NULL: none */

    /* the configuration's strings and the profiles' identity
       (process_conf.c): set at the start, the tracer's taken by the loop
       thread before the first upload */
    char                *dump_dir;
    char                *agent_url;
    char                *pyroscope_url;
    char               **pyroscope_headers;
    char                *otlp_url;
    char               **otlp_headers;
    char                *service;
    char                *env;
    char                *version;
    char                *runtime_version;
    char               **tags;
    char                 host[256];
    char                 executable[256];       /* the server's file name
                                                   (OTLP's resource) */
    char                 arch[sizeof(((struct utsname *) 0)->machine)];
    prof_container_t     container;
    char                 runtime_id[PROF_TRACER_INFO_VALUE_MAX];
    prof_intake_conf_t   intake;
    int                  tracer_identity_resolved;  /* loop thread
                                                   (prof_resolve_identity) */

    /* the main thread; worker_gone, stop_* and status_due read by the
       loop thread too (atomics) */
    int                  worker_fd;             /* the pipe's read end */
    int                  log_fd;                /* eventfd: a message */
    int                  worker_gone;
    int64_t              stop_upload_ms;        /* set before stop */
    int64_t              stop_started_ns;       /* CLOCK_MONOTONIC */
    prof_ring_drain_t   *drain;                 /* its sampler thread,
                                                   started and finished
                                                   here */

    /* the sampler thread fills it, the loop thread empties it, under its
       own mutex (sample_queue.h) */
    prof_queue_t         queue;

    /* opened by the main thread before any thread starts, then written
       by the loop thread only */
    prof_dump_dir_t     *dump;

    /* profiler loop thread only */
    prof_debuginfod_t   *debuginfod;            /* NULL: none */
    prof_symbolizer_t   *symbolizer;
    prof_symbol_store_t *store;                 /* NULL: none */
    prof_aggregator_t   *aggregator;
    prof_uploader_t     *uploader;              /* NULL: none, or closed */
    prof_uploader_t     *pyroscope;             /* NULL: none, or closed */
    prof_uploader_t     *otlp;                  /* NULL: none, or closed */
    uint64_t             open_period;           /* not closed yet */
    uint64_t             maps_tables;           /* unwind tables the worker
                                                   had built at the last
                                                   read of its maps */
    uint32_t             maps_unknown;          /* and walks that had left
                                                   them */
    uint64_t             maps_read_ms;          /* when (uv_now) */
    uint64_t             maps_every_ms;         /* the wait for the next
                                                   read for such walks */
    int                  maps_read;
    int                  identify_logged;       /* the line of
                                                   prof_identify() */
    prof_stalls_t        stalls;
    int64_t              interval_told;         /* by the sampler thread
                                                   (atomic) */
    int64_t              interval_logged;       /* by the loop thread */
    uint64_t             naming_trimmed;        /* naming_cpu_ns at the
                                                   last malloc_trim() */
    int64_t              naming_since;          /* the loop thread's CPU
                                                   when the naming under
                                                   way began, -1: none
                                                   (atomic) */
    prof_stall_mailbox_t  stall_mailbox;        /* from the sampler
                                                   thread */

    uv_loop_t            loop;
    uv_async_t           batches_ready;
    uv_async_t           stop_requested;
    uv_timer_t           status_timer;          /* with a status slot:
                                                   the write a drain left
                                                   due */
    uint64_t             status_published_ms;   /* last written (uv_now) */
    uint64_t             pss;                   /* this process's, bytes */
    int64_t              pss_read_ns;           /*   read then
                                                   (CLOCK_MONOTONIC) */
    uint64_t             pss_resident;          /*   its resident pages
                                                   then */
    uint64_t             heap;                  /*   its malloc's bytes in
                                                   use then */
    uv_timer_t           identify_timer;        /* the line waits for
                                                   lua's state */
    uint64_t             identify_from_ms;      /* since (uv_now) */
    int                  status_due;            /* publish it now */
    int64_t              started_ns;            /* unix ns */
    uv_thread_t          loop_thread;

    /* done is protected by done_mutex */
    uv_mutex_t           done_mutex;
    uv_cond_t            done_cond;
    int                  done;
};


/*
 * Closes every descriptor from 3 up but the n of keep, which it sorts: the
 * profiler process's start (process.c) and its unit test.
 */
void prof_close_fds_except(int *keep, int n);


#endif /* PROF_PROCESS_H */
