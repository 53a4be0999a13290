/*
 * Profiler-owned threads: every signal blocked from their first instruction.
 */

#include <signal.h>

#include "thread.h"


int
prof_thread_create(uv_thread_t *tid, void (*entry)(void *arg), void *arg)
{
    int       rc;
    sigset_t  all, saved;

    sigfillset(&all);

    rc = pthread_sigmask(SIG_SETMASK, &all, &saved);
    if (rc != 0) {
        return -rc;
    }

    rc = uv_thread_create(tid, entry, arg);

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    return rc;
}
