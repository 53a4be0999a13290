/*
 * Profiler: one per process. Owns the sampler, the sample queue, and the
 * profiler loop thread (libuv) where batches are aggregated and closed
 * profiles encoded and exported. The server embedding it (the nginx module)
 * talks to it only through this header and sampler.h.
 *
 * Threading: prof_start, prof_flush and prof_stop are called by the sampled
 * thread (the nginx worker's main thread). prof_flush never blocks;
 * prof_stop waits for the final export at most final_timeout_ms.
 * The log callback is called from the profiler loop thread (export errors,
 * rate-limited to one line a minute per cause) and from prof_stop.
 * Memory: the profiler copies what it needs from the configuration.
 * A process has at most one profiler; the first prof_start initializes
 * libcurl, so it must run before the process has other threads using it.
 */

#ifndef PROF_PROFILER_H
#define PROF_PROFILER_H

#include <stddef.h>
#include <stdint.h>

#include "diagnostics.h"
#include "endpoint_counts.h"
#include "log.h"
#include "sampler.h"
#include "unwind.h"


#define PROF_VERSION  "0.1.0"
#define PROF_ORIGIN   "nginx-profiling"


typedef struct {
    int64_t              interval_ns;
    unsigned             max_frames;
    size_t               memory_limit;  /* bytes of queued sample batches */
    const char          *dump_dir;      /* NULL: no file sink */
    const char          *agent_url;     /* NULL: no upload */
    int64_t              upload_timeout_ms;
    const char          *service;
    const char          *env;           /* NULL: none */
    const char          *version;       /* NULL: none */
    const char * const  *tags;          /* "key:value" */
    size_t               tag_count;
    const char          *runtime_version;   /* the server's version */
    int64_t              final_timeout_ms;  /* bound on prof_stop's wait */
    prof_log_pt          log;
    void                *log_data;
    prof_unwind_table_t *unwind_table;  /* built before (e.g. inherited
                                           from a parent process), kept by
                                           the caller; NULL: built here */
} prof_conf_t;

typedef struct prof_s  prof_t;


/* Starts sampling the calling thread. 0 or -errno. */
int prof_start(prof_t **profiler, const prof_conf_t *conf);

/*
 * Closes the current profile now; never blocks. counts (may be NULL) are
 * the requests per endpoint of the period; the profiler takes them.
 */
void prof_flush(prof_t *p, prof_endpoint_counts_t *counts);

/*
 * Takes the last sample, exports the last profile (bounded), frees all.
 * counts (may be NULL): the endpoints of the last period, taken.
 */
void prof_stop(prof_t *p, prof_endpoint_counts_t *counts);

prof_sampler_t *prof_get_sampler(prof_t *p);
const prof_diagnostics_t *prof_get_diagnostics(prof_t *p);


#endif /* PROF_PROFILER_H */
