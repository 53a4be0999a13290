/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Profiler: one per process. Owns the sampler, the sample queue, and the
 * profiler loop thread (libuv) where batches are aggregated and closed
 * profiles encoded and exported. The server embedding it (the nginx module)
 * talks to it only through this header and sampler.h.
 *
 * What the server does per request costs no lock, no allocation and no
 * hashing: it appends the request's endpoint to a log (prof_count_endpoint)
 * and, only for the requests a sample carried, resolves their labels
 * (prof_label). Both go to the loop thread through lock-free rings; a full
 * ring drops what does not fit (counted).
 *
 * Threading: prof_start, prof_flush, prof_stop, prof_label,
 * prof_count_endpoint and prof_deliver_log are called by the sampled
 * thread (the nginx worker's main thread); none blocks, except prof_stop,
 * which waits for the loop thread at most wait_ms. The log handler is
 * called on that thread only (log.h): the loop thread's messages wait
 * until prof_deliver_log, and conf.log_notify (from the loop thread) says
 * that one waits.
 * Memory: the profiler copies what it needs from the configuration. A
 * loop thread that does not finish within prof_stop's wait keeps the
 * memory it uses (nothing it touches is freed) and logs nothing more.
 * A process has at most one profiler; the first prof_start initializes
 * libcurl, so it must run before the process has other threads using it.
 */

#ifndef PROF_PROFILER_H
#define PROF_PROFILER_H

#include <stddef.h>
#include <stdint.h>

#include "diagnostics.h"
#include "endpoint_counts.h"
#include "labels.h"
#include "log.h"
#include "sampler.h"
#include "unwind.h"


#define PROF_VERSION  "0.1.0"
#define PROF_ORIGIN   "nginx-profiling"


typedef struct {
    int64_t              interval_ns;
    unsigned             max_frames;
    size_t               memory_limit;  /* bytes of queued sample batches */
    int                  timeline;      /* every sample with its time */
    const char          *dump_dir;      /* NULL: no file sink */
    uint64_t             dump_keep_files;   /* 0: no bound on the count */
    uint64_t             dump_keep_bytes;   /* 0: no bound on the size */
    const char          *agent_url;     /* NULL: no upload */
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
    void               (*log_notify)(void *data);
    void                *log_notify_data;
    prof_unwind_table_t *unwind_table;  /* built before (e.g. inherited
                                           from a parent process), kept by
                                           the caller; NULL: built here */
    int                  identify;      /* log the module's version and
                                           what it found, at NOTICE */
    struct prof_status_slot_s  *status_slot;    /* written every second
                                           by the loop thread (status.h);
                                           NULL: none */
} prof_conf_t;

typedef struct prof_s  prof_t;


/*
 * Starts sampling the calling thread. 0 or -errno; a dump directory that
 * cannot be used is logged once here and the profiler runs without it.
 */
int prof_start(prof_t **profiler, const prof_conf_t *conf);

/* Closes the current profile now; never blocks. */
void prof_flush(prof_t *p);

/*
 * Takes the last sample and closes the last profile; its upload (and any
 * upload in flight) gets at most upload_ms more (0: none, dropped and
 * counted; the dump directory still gets the profile). Waits at most
 * wait_ms for the loop thread, then frees all; -ETIMEDOUT: the thread
 * still runs and keeps what it uses (the process is about to exit).
 */
int prof_stop(prof_t *p, int64_t upload_ms, int64_t wait_ms);

/* The labels of a request tag a sample carried (sampler.h). -ENOSPC:
   dropped, counted. */
int prof_label(prof_t *p, const prof_labels_t *labels);

/* The log's messages from the loop thread, to the handler. */
void prof_deliver_log(prof_t *p);

/*
 * Once every module of the server is initialized (a tracer's included),
 * before the first profile is closed: reads what a Datadog tracer in the
 * process says of itself (tracer_info.h), for the profiles to carry its
 * identity (conf.tracer_identity). A file read, once.
 */
void prof_take_tracer_identity(prof_t *p);

prof_sampler_t *prof_get_sampler(prof_t *p);
const prof_diagnostics_t *prof_get_diagnostics(prof_t *p);


/* One request more for an endpoint: see prof_count_endpoint. */
prof_endpoint_writer_t *prof_get_endpoint_writer(prof_t *p);
void prof_count_endpoint_slow(prof_t *p, const void *a, size_t alen,
    const void *b, size_t blen);


/* One request more for the endpoint "a b" (just b when alen is 0). */
static inline void
prof_count_endpoint(prof_t *p, prof_endpoint_writer_t *w, const void *a,
    size_t alen, const void *b, size_t blen)
{
    if (prof_endpoint_write(w, a, alen, b, blen) != 0) {
        prof_count_endpoint_slow(p, a, alen, b, blen);
    }
}


#endif /* PROF_PROFILER_H */
