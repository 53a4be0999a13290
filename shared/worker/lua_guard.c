/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The fault guard over the handler's reads of LuaJIT's memory
 * (lua_guard.h): its SIGSEGV action, installed, removed and taken back.
 *
 * Async-signal-safe (the action runs in signal context; CI checks this
 * file's object with the handler's, ci/check-signal-path).
 */

#define _GNU_SOURCE

#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "worker/lua_guard.h"


volatile sig_atomic_t  prof_lua_guard_reading;
volatile sig_atomic_t  prof_lua_guard_installed;
sigjmp_buf             prof_lua_guard_jump;
unsigned int           prof_lua_guard_walks;

static struct sigaction  prof_lua_saved_segv;


/*
 * SIGSEGV: a fault of the walk returns into it; any other goes on as if
 * the guard were not there (the action before it, from the faulting
 * instruction again: a crash dumps core where it happened).
 */
void
prof_lua_segv(int signo, siginfo_t *info, void *context)
{
    (void) context;

    if (prof_lua_guard_reading) {
        prof_lua_guard_reading = 0;
        siglongjmp(prof_lua_guard_jump, 1);
    }

    prof_lua_guard_installed = 0;
    (void) sigaction(SIGSEGV, &prof_lua_saved_segv, NULL);

    /*
     * A fault runs its instruction again, under the action put back. A
     * SIGSEGV sent (kill, raise, sigqueue: si_code <= 0) is not sent
     * again by anyone: this thread sends it to itself, to that action
     * (SA_NODEFER: at once).
     */
    if (info != NULL && info->si_code <= 0) {
        (void) syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid),
                       signo);
    }
}


int
prof_lua_guard_install(void)
{
    struct sigaction  sa;

    if (prof_lua_guard_installed) {
        return 0;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = prof_lua_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);

    if (sigaction(SIGSEGV, &sa, &prof_lua_saved_segv) != 0) {
        return -1;
    }

    prof_lua_guard_installed = 1;
    return 0;
}


void
prof_lua_guard_remove(void)
{
    struct sigaction  now;

    if (!prof_lua_guard_installed) {
        return;
    }

    prof_lua_guard_installed = 0;

    /* Only ours goes: one installed after it stays. */
    if (sigaction(SIGSEGV, NULL, &now) == 0
        && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == prof_lua_segv)
    {
        (void) sigaction(SIGSEGV, &prof_lua_saved_segv, NULL);
    }
}


void
prof_lua_guard_retake(void)
{
    struct sigaction  now;

    if (sigaction(SIGSEGV, NULL, &now) != 0
        || ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == prof_lua_segv))
    {
        return;
    }

    prof_lua_guard_installed = 0;
    (void) prof_lua_guard_install();
}
