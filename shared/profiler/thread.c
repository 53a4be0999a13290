/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler process's threads: every signal blocked from their first
 * instruction, and a stack of their own size whatever the C library's
 * default (musl's is 128 KiB; libuv takes RLIMIT_STACK's, or the C
 * library's when it is unlimited): naming walks DWARF, which can go deep.
 * Only the pages used count.
 */

#define _GNU_SOURCE

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "profiler/thread.h"


#define PROF_THREAD_STACK_SIZE   (8 * 1024 * 1024)


int
prof_thread_create(uv_thread_t *tid, void (*entry)(void *arg), void *arg)
{
    int                  rc;
    sigset_t             all, saved;
    uv_thread_options_t  options;

    sigfillset(&all);

    rc = pthread_sigmask(SIG_SETMASK, &all, &saved);
    if (rc != 0) {
        return -rc;
    }

    options.flags = UV_THREAD_HAS_STACK_SIZE;
    options.stack_size = PROF_THREAD_STACK_SIZE;

    rc = uv_thread_create_ex(tid, &options, entry, arg);

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    return rc;
}


void
prof_thread_settle(const char *name, int nice)
{
    long       i, n;
    cpu_set_t  all;

    (void) pthread_setname_np(pthread_self(), name);

    n = sysconf(_SC_NPROCESSORS_CONF);

    CPU_ZERO(&all);
    for (i = 0; i < n && i < CPU_SETSIZE; i++) {
        CPU_SET(i, &all);
    }

    /* The kernel keeps the CPUs the cgroup allows. Best effort. */
    (void) sched_setaffinity(0, sizeof(all), &all);

    if (nice > 0) {
        (void) setpriority(PRIO_PROCESS, (id_t) syscall(SYS_gettid), nice);
    }
}
