/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The channel between a worker and its profiler process: what the two
 * share, in anonymous MAP_SHARED memory mapped by the worker before it
 * forks the profiler process (so at the same address in both). Nothing
 * else passes between them; the profiler process never reads the worker's
 * own memory.
 *
 * Layout rules: fixed-size fields, no pointer one side would follow into
 * the other's memory (the ring's items pointer is into this mapping too),
 * futex words without FUTEX_PRIVATE_FLAG. The sampler's ring and state
 * (sampler_state.h) are a second mapping of the same kind.
 *
 * Who writes what:
 * - diagnostics: each counter by the side that owns its event
 *   (diagnostics.h), read by the profiler process for the status page;
 * - labels: the worker produces, the profiler loop thread consumes (spsc);
 * - endpoints: written by the worker, taken by the profiler process after
 *   the barrier closing their period (endpoint_counts.h);
 * - tracer_info, tracer_info_state, stop_*: the worker (release),
 *   read by the profiler process (acquire);
 * - profiler_state: the profiler process.
 */

#ifndef PROF_CHANNEL_H
#define PROF_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/diagnostics.h"
#include "channel/endpoint_counts.h"
#include "channel/labels.h"
#include "common/spsc.h"
#include "channel/tracer_info.h"


#define PROF_CHANNEL_VERSION    1

/* Request labels waiting for the profiler loop thread (a power of two). */
#define PROF_LABELS_RING        256

enum {
    PROF_PROFILER_STARTING = 0,
    PROF_PROFILER_RUNNING,
    PROF_PROFILER_FAILED,           /* could not start (it exits: its
                                       worker notices that at its next
                                       flush, as any exit) */
    PROF_PROFILER_DONE              /* exited after its worker */
};


typedef struct {
    uint32_t                version;
    uint32_t                profiler_state;
    int64_t                 stop_upload_ms;     /* the last profile's
                                                   upload bound, -1 while
                                                   the worker runs */
    int64_t                 stop_wait_ms;       /* and the profiler
                                                   process's, after it */
    uint32_t                tracer_info_state;  /* 0: not read, 1: read,
                                                   2: none */
    prof_tracer_info_t      tracer_info;
    prof_diagnostics_t      diagnostics;
    prof_spsc_t             labels;
    prof_labels_t           label_items[PROF_LABELS_RING];
    prof_endpoint_table_t   endpoints[2];       /* by period parity */
} prof_channel_t;


/* Zeroed MAP_SHARED anonymous memory, or NULL. */
void *prof_shared_alloc(size_t size);
void prof_shared_free(void *p, size_t size);

/* A new channel, or NULL. */
prof_channel_t *prof_channel_create(void);
void prof_channel_free(prof_channel_t *c);


#endif /* PROF_CHANNEL_H */
