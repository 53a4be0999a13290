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


#endif /* PROF_THREAD_H */
