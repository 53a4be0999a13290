/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Profiler, the worker's end: one per worker, in two processes. The worker
 * (the nginx worker, one thread, as nginx made it) arms the sampler and
 * forks its profiler process at prof_start; they share only the channel
 * (channel.h) and the sampler's ring (sampler_state.h), and the child
 * starts from what the worker handed it (handover.h). The profiler process
 * (profiler/process.h) runs its main thread (its log's lines, the wait for
 * its worker, the end), the sampler thread (the ring), the profiler loop
 * thread (libuv: aggregation, symbols, pprof encoding, the dump directory
 * and uploads) and, with debuginfod, a fetch thread (profiler/debuginfod.h).
 * It closes every descriptor it inherited but those the server names
 * (conf.child_init), blocks every signal, and exits once its worker has
 * gone and its last profile is out.
 *
 * What the worker does per request costs no lock, no allocation and no
 * copy: it counts the request's endpoint in a shared table, hashed where
 * it lies (prof_count_endpoint), and, only for the requests a sample
 * carried, resolves their labels into a shared ring (prof_label); a full
 * table or ring drops what does not fit (counted).
 *
 * Threading: everything here is called by the worker's thread and waits
 * for nothing of the profiler process. prof_start forks it and, when no
 * table was inherited (conf.unwind_table), builds the unwind table
 * (milliseconds); prof_take_tracer_identity reads a file, once; the rest
 * never blocks. The log handler is called on the worker's thread for the
 * worker's messages, and on the profiler process's main thread for its
 * own (after conf.child_init).
 * A process has at most one profiler.
 * Memory: prof_t is the worker's, freed by prof_stop. The configuration
 * is copied, its strings and tags read during prof_start only (the
 * profiler process copies them from the fork's image of the worker).
 */

#ifndef PROF_PROFILER_H
#define PROF_PROFILER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/diagnostics.h"
#include "channel/endpoint_counts.h"
#include "channel/handover.h"
#include "channel/labels.h"
#include "common/log.h"
#include "worker/sampler.h"
#include "worker/unwind.h"


typedef struct prof_s  prof_t;
struct prof_lua_vm_s;


/*
 * Starts sampling the calling thread and forks its profiler process. 0 or
 * -errno; a dump directory that cannot be used is logged once by the
 * profiler process, which runs without it.
 */
int prof_start(prof_t **profiler, const prof_conf_t *conf);

/* Closes the current profile now; never blocks. A profiler process that
   exited unexpectedly is noticed here: sampling stops, logged, and the
   status slot says so. */
void prof_flush(prof_t *p);

/*
 * Takes the last sample and closes the last profile, then frees all
 * without waiting: the profiler process finishes it after the worker.
 * Its upload (and any in flight) gets at most upload_ms more (0: none,
 * dropped and counted; the dump directory still gets the profile); the
 * profiler process exits at most wait_ms after the worker. 0.
 */
int prof_stop(prof_t *p, int64_t upload_ms, int64_t wait_ms);

/* The labels of a request tag a sample carried (sampled_thread.h). -ENOSPC:
   dropped, counted. */
int prof_label(prof_t *p, const prof_labels_t *labels);

/*
 * What prof_lua_find said of the worker's LuaJIT (conf.lua), once every
 * module is initialized: vm, its frames in the samples from now (frames
 * 0: only its C frames, for the native walk through its JIT code, nothing
 * said of it); or NULL, and why (the status page and identification line
 * say it, unless frames is 0); or NULL and NULL: the worker has none. The
 * identification line waits for it (at most 5 s, profiler/identify.c).
 */
void prof_set_lua_vm(prof_t *p, const struct prof_lua_vm_s *vm,
    const char *why, int frames);

/*
 * Once every module of the server is initialized (a tracer's included),
 * before the first profile is closed: reads what a Datadog tracer in the
 * process says of itself (tracer_info.h), for the profiles to carry its
 * identity (conf.tracer_identity). A file read, once.
 */
void prof_take_tracer_identity(prof_t *p);

prof_sampler_t *prof_get_sampler(prof_t *p);

/* Where the worker counts endpoints (see prof_count_endpoint). */
prof_endpoint_table_t **prof_get_endpoint_table(prof_t *p);

void prof_count_endpoint_slow(prof_t *p, uint64_t seed, const void *a,
    size_t alen, const void *b, size_t blen);

/*
 * One request more for the endpoint "a b" (just b when alen is 0; a known
 * by seed, if not 0: see prof_endpoint_hash).
 */
static inline void
prof_count_endpoint(prof_t *p, prof_endpoint_table_t **counting,
    uint64_t seed, const void *a, size_t alen, const void *b, size_t blen)
{
    if (*counting != NULL) {
        prof_endpoint_table_count(*counting, seed, a, alen, b, blen);

    } else {
        prof_count_endpoint_slow(p, seed, a, alen, b, blen);
    }
}


#endif /* PROF_PROFILER_H */
