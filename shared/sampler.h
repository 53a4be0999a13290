/*
 * Sampler: records where the worker's main thread burns CPU and where it
 * spends wall time, into batches for the aggregator. One per process.
 *
 * - CPU: a timer on the thread's own CPU clock sends it SIGPROF every
 *   interval of CPU time it uses; the handler walks its native stack with
 *   the unwind table (unwind.h) the sampler thread built from the loaded
 *   objects' .eh_frame, or with libunwind for what the table cannot walk,
 *   into a preallocated ring. A thread that uses no CPU gets
 *   no signal. Each such sample weighs interval * (1 + timer overruns).
 * - Wall: the sampler thread ticks every interval of wall time, reads the
 *   thread's CPU clock, and records a wall sample (wall time, off-CPU time
 *   = max(0, wall - cpu)) at the stack of the tick's last CPU sample; with
 *   none, at the idle stack when the thread is in its event wait, else at
 *   a stack it asks the handler for (tgkill).
 *
 * Threading contract:
 * - prof_sampler_start, _stop, _request_flush, _set_waiting,
 *   _capture_idle_stack, _request_enter/_leave/_keep are called by the sampled
 *   thread (the nginx worker's main thread) only. None of them blocks,
 *   except _stop, which joins the sampler thread (at most one interval).
 * - The sampler thread is created with every signal blocked. It takes the
 *   queue mutex only; it waits for the signal handler through a futex word.
 *   It builds the unwind table at start and rebuilds it when the handler
 *   met code outside it and objects were loaded since (dlopen).
 * - The SIGPROF handler runs on the sampled thread and is async-signal-safe:
 *   a table walk (or unw_backtrace) into a preallocated slot, a copy of
 *   the published request context (the sampled thread, interrupted, does
 *   not change it meanwhile), clock_gettime and a futex wake. No malloc,
 *   no locks, no I/O.
 * - An idle thread (inside the event wait, no CPU sample in the tick) gets
 *   no signal: its wall time goes to the stack recorded by
 *   _capture_idle_stack, and the sampler thread then ticks less often
 *   (an idle wall sample counts the intervals it covers).
 * Memory: the sampler owns its slot and current batch; batches belong to
 * the queue.
 */

#ifndef PROF_SAMPLER_H
#define PROF_SAMPLER_H

#include <stdint.h>

#include "diagnostics.h"
#include "sample_queue.h"
#include "unwind.h"


typedef struct prof_sampler_s  prof_sampler_t;

typedef struct {
    int64_t        interval_ns;
    unsigned       max_frames;      /* 8 .. PROF_MAX_FRAMES_LIMIT */
    int64_t        push_every_ns;   /* hand partial batches over this often */
    prof_queue_t  *queue;
    prof_diagnostics_t  *diagnostics;
    void         (*notify)(void *data);   /* a batch was queued */
    void          *notify_data;
    int64_t        start_monotonic_ns;    /* when the first profile started,
                                             and the thread's CPU clock
                                             then (0: at prof_sampler_start) */
    int64_t        start_cpu_ns;
    prof_unwind_table_t  *unwind_table;   /* the caller's (kept by it), or
                                             NULL: the sampler builds one */
} prof_sampler_conf_t;


/* Samples the calling thread. 0 or -errno (-EBUSY: one is running). */
int prof_sampler_start(prof_sampler_t **sampler,
    const prof_sampler_conf_t *conf);

/*
 * Stops sampling: a last sample, the last batch with a final flush barrier
 * (carrying counts, may be NULL), then the thread is joined and SIGPROF
 * restored.
 */
void prof_sampler_stop(prof_sampler_t *s, prof_endpoint_counts_t *counts);

/*
 * The sampler closes the profile at once (its thread is woken): never
 * blocks. counts (may be NULL) go with the barrier, owned by the sampler.
 */
void prof_sampler_request_flush(prof_sampler_t *s,
    prof_endpoint_counts_t *counts);

/* The sampled thread enters (1) or leaves (0) its event wait. */
void prof_sampler_set_waiting(prof_sampler_t *s, int waiting);

/*
 * Records the stack idle ticks are attributed to: the caller's callers
 * (skip_frames of them dropped), below the given leaf frames (innermost
 * first, e.g. the wait function and the event loop's poll function).
 */
void prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames);

/*
 * The request the sampled thread now executes, or none. The context is
 * not copied: it must stay unchanged and alive until _leave, another
 * _enter, or _keep.
 */
void prof_sampler_request_enter(prof_sampler_t *s,
    const prof_request_context_t *ctx);
void prof_sampler_request_leave(prof_sampler_t *s);

/* The published context is about to change or be freed: samples go on
   with a copy of it until _leave or the next _enter. */
void prof_sampler_request_keep(prof_sampler_t *s);


#endif /* PROF_SAMPLER_H */
