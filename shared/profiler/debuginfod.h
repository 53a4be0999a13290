/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Debug files fetched by build id from debuginfod servers (the URLs in
 * DEBUGINFOD_URLS), for objects whose functions the files at hand do not
 * all name. The client is the libdebuginfod elfutils ships, loaded with
 * dlopen() by the first fetch: a process that never asks never loads it.
 *
 * Threading: the prof_debuginfod_* functions are called by one thread (the
 * profiler loop thread), prof_debuginfod_end_waits() by any (the profiler
 * process's main thread); fetches run one at a time on a thread of this
 * component (the fetch thread), started by the first ask. The mutex
 * protects the records (records, nrecords and each record's state), the
 * count of those pending (the queue), down_until_ns, waits_end_ns, the
 * stop flag, done (the fetch thread ended) and load_failed/load_error
 * (libdebuginfod could not be loaded); a record's build id never changes.
 *
 * Bounds: at most PROF_DEBUGINFOD_RECORDS build ids are asked in a process
 * (past that, an ask fails). A fetch is one try given timeout_ms
 * rounded up to whole seconds (libdebuginfod's bound, checked once a
 * second: two seconds more at worst), then abandoned. A failure (no
 * such file, a server down, a timeout) is remembered: the build id is not
 * asked again for retry_ms, and after a server was unreachable or too
 * slow no other build id is asked for as long. Files larger than the
 * cache's bound are not fetched; after each file fetched the cache is
 * trimmed to its bound, the least recently fetched first (entries holding
 * only what libdebuginfod writes: the cache is a directory of its own).
 *
 * Environment: libdebuginfod reads DEBUGINFOD_URLS and its other settings
 * from the environment: prof_debuginfod_setenv() writes them, before the
 * process starts any thread.
 *
 * Memory: the component owns its records and keeps each file fetched
 * open (the cache may be trimmed by another process); a descriptor taken
 * with prof_debuginfod_take() belongs to the caller.
 */

#ifndef PROF_DEBUGINFOD_H
#define PROF_DEBUGINFOD_H

#include <stdint.h>

#include "common/diagnostics.h"


#define PROF_DEBUGINFOD_RECORDS  1024


typedef struct prof_debuginfod_s  prof_debuginfod_t;

typedef struct {
    const char          *urls;              /* NULL: $DEBUGINFOD_URLS */
    const char          *cache_dir;         /* NULL: libdebuginfod's */
    uint64_t             cache_max_bytes;   /* 0: no bound */
    int64_t              timeout_ms;        /* a fetch, all of it */
    int64_t              retry_ms;          /* after a failure */
    prof_diagnostics_t  *diagnostics;
} prof_debuginfod_conf_t;

typedef enum {
    PROF_DEBUGINFOD_PENDING = 0,    /* queued or being fetched */
    PROF_DEBUGINFOD_FOUND,          /* fetched: prof_debuginfod_take() */
    PROF_DEBUGINFOD_FAILED          /* not asked again before retry_ms */
} prof_debuginfod_state_e;


/*
 * Before any thread of the process runs: the environment libdebuginfod
 * reads (the URLs, the cache, its timeouts and size bound; no progress
 * or verbose output). 0, -EINVAL when there are no URLs (neither
 * conf->urls nor DEBUGINFOD_URLS), -errno.
 */
int prof_debuginfod_setenv(const prof_debuginfod_conf_t *conf);

/* NULL when out of memory. Nothing is loaded or started yet. */
prof_debuginfod_t *prof_debuginfod_create(const prof_debuginfod_conf_t *conf);

/* Abandons the fetch under way, waits at most a second for its thread. */
void prof_debuginfod_destroy(prof_debuginfod_t *d);

/*
 * Asks for the debug file of build_id (lowercase hex): its state. A build
 * id asked before answers what it became; one that failed is queued again
 * once retry_ms have passed.
 */
prof_debuginfod_state_e prof_debuginfod_ask(prof_debuginfod_t *d,
    const char *build_id);

/* Waits until nothing is pending, or until deadline_ns (CLOCK_MONOTONIC)
   or the end prof_debuginfod_end_waits() set: how many are still
   pending. */
unsigned prof_debuginfod_wait(prof_debuginfod_t *d, int64_t deadline_ns);

/* From any thread: no wait, under way or to come, goes past deadline_ns
   (the process is finishing). */
void prof_debuginfod_end_waits(prof_debuginfod_t *d, int64_t deadline_ns);

/*
 * The state of build_id (FAILED when it was never asked), and when FOUND
 * a new descriptor of its debug file in *fd, which the caller closes.
 */
prof_debuginfod_state_e prof_debuginfod_take(prof_debuginfod_t *d,
    const char *build_id, int *fd);

/* Why libdebuginfod could not be loaded, once; else NULL. */
const char *prof_debuginfod_load_error(prof_debuginfod_t *d);


#endif /* PROF_DEBUGINFOD_H */
