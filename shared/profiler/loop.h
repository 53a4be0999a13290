/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler loop thread: a libuv loop that drains what the sampler
 * thread queued and the worker labelled into the aggregator, which closes
 * profiles at barriers for export (export.h); it writes the status slot
 * after the drains that change its figures (at most once a second: none
 * while the worker is idle) and logs the identification line.
 *
 * Threading: prof_start_loop and prof_stop_loop are called by the
 * profiler process's main thread, once each (the loop thread is created
 * with every signal blocked, at nice 10); prof_loop_notify by any thread
 * (the sampler thread's notify). The loop thread owns the symbolizer, the
 * aggregator and the uploader; its end is told through done (done_mutex).
 * prof_stop_loop blocks for at most timeout_ms.
 */

#ifndef PROF_LOOP_H
#define PROF_LOOP_H

#include <stdint.h>

#include "profiler/process.h"


/* The symbolizer, aggregator, uploader and timers, and the loop thread
   on them: 0, or -errno (a libuv error) with nothing left running. */
int prof_start_loop(prof_process_t *p);

/* Stops the loop thread; 0 when it finished within timeout_ms (then
   joined), else -ETIMEDOUT and it goes on. */
int prof_stop_loop(prof_process_t *p, int64_t timeout_ms);

/* A batch was queued, or the worker built its unwind tables again: the
   loop drains.
   data: the prof_process_t. */
void prof_loop_notify(void *data);


#endif /* PROF_LOOP_H */
