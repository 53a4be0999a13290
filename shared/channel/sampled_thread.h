/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The words a sampled thread shares with its SIGPROF handler: what
 * executes (published by the thread's event loop), the tag a sample took
 * for it, and the event wait's timing. They head the sampler's state
 * (sampler_state.h), in memory shared with the profiler process.
 *
 * Who writes what: the sampled thread and its handler only, on one
 * thread (the worker's). The profiler process only reads: its sampler
 * thread waiting, wait_start and unknown_pcs (profiler/ring_drain.h), its
 * loop thread unknown_pcs. The functions that write them are the
 * worker's (worker/sampler.h); none blocks or allocates.
 */

#ifndef PROF_SAMPLED_THREAD_H
#define PROF_SAMPLED_THREAD_H

#include <stdint.h>


/*
 * What executes, as the sampled thread publishes it to the handler: three
 * words the server gives meaning to (nginx: the request, when known; the
 * log of the event's connection; the event's data), all 0 for nothing
 * (a word of them 0 with log set: not known). Publishing is three plain
 * stores (the handler runs on the same thread).
 */
typedef struct {
    uint64_t       request;
    uint64_t       log;             /* 0: nothing executes */
    uint64_t       object;
} prof_running_t;

/*
 * The handler and the sampled thread share these, on one thread:
 * - running: written by the thread (prof_publish), read by the handler.
 * - pending: the first sample that finds something running takes a new
 *   tag (epoch + 1) and copies running into pending, with the stamp of
 *   its object when the object is one of the array below (a word at
 *   stamp_offset, e.g. a connection's number: is it still the same one?),
 *   then stores pending_tag. Later samples of the same running words
 *   carry the same tag; others, while a tag is pending, carry none. The
 *   thread resolves the pending tag into labels, off the signal path, and
 *   clears it (prof_pending_clear); a pending that names a request must be
 *   taken before that request is freed (the server unpublishes it first).
 * - waiting, wait_start, wait_ticks: the event wait (prof_wait_begin).
 */
typedef struct {
    prof_running_t running;
    prof_running_t pending;
    uint64_t       pending_stamp;   /* the object's stamp, 0: not known */
    uint64_t       pending_tag;     /* 0: none */
    uint64_t       epoch;           /* the last tag issued */
    uint64_t       objects;         /* the array of stamped objects */
    uint64_t       objects_end;
    uint64_t       object_size;
    uint64_t       stamp_offset;
    uint32_t       waiting;         /* in the event wait */
    uint64_t       wait_start;      /* TSC when the wait began */
    uint64_t       wait_ticks;      /* TSC ticks spent waiting, all */
    uint32_t       unknown_pcs;     /* walks that left the unwind table */
    uint32_t       unknown_pcs_seen;    /* by prof_sampler_maintain_table */
} prof_sampled_thread_t;


#endif /* PROF_SAMPLED_THREAD_H */
