/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler process's threads (the sampler thread, ring_drain.c; the
 * loop thread, loop.c; debuginfod's fetch thread, debuginfod.c), and
 * those the unit tests start through them: created with every signal
 * blocked, so that they never run a handler of the process. The profiler
 * process blocks every signal anyway, from its start (process.c); in a
 * test's process, this keeps the process's signals (the sampler's
 * SIGPROF among them) off these threads.
 *
 * Threading: any thread; prof_thread_settle on the new thread.
 */

#ifndef PROF_THREAD_H
#define PROF_THREAD_H

#include <uv.h>


/* Like uv_thread_create; the caller's signal mask is left unchanged. */
int prof_thread_create(uv_thread_t *tid, void (*entry)(void *arg),
    void *arg);

/*
 * Called by a profiler thread first: names it (as top -H and
 * /proc/PID/task/TID/comm show it), lets it run on any CPU (not only the
 * one the server pinned its worker to, where it would take the worker's
 * time) and, with nice > 0, makes it yield to the worker when CPU is short.
 */
void prof_thread_settle(const char *name, int nice);


#endif /* PROF_THREAD_H */
