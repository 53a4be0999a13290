/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Profiler-owned threads: created with every signal blocked, so that they
 * never run a handler of the process (SIGPROF, nginx's SIGHUP, SIGQUIT...).
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
