/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The fault guard over the handler's reads of LuaJIT's memory: a SIGSEGV
 * action that, while a walk reads (prof_lua_guard_reading), jumps back
 * into it (prof_lua_guard_jump, set by sigsetjmp without the signal
 * mask: no system call) and otherwise hands the fault on to the action
 * before it. (Not __builtin_setjmp: GCC's own restores only the frame
 * and stack pointers, which a jump out of a signal handler does not
 * survive once optimized.)
 *
 * - prof_lua_guard_install, _remove, _retake (below, lua_guard.c): the
 *   worker's thread, outside the handler.
 * - prof_lua_guarded and the reads below: the handler's Lua part
 *   (signal_lua.c, signal_lua_walk.c), async-signal-safe; a read may
 *   fault only between prof_lua_guard_reading = 1 and its return to 0.
 * - prof_lua_segv: the SIGSEGV action itself (signal context).
 *
 * Nothing blocks or allocates. The state is this process's, hidden from
 * other objects: the handler reaches it directly, not through the GOT.
 */

#ifndef PROF_LUA_GUARD_H
#define PROF_LUA_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>


/* Walks between two checks of the guard (at 100 Hz: 0.64 s) */
#define PROF_LUA_GUARD_EVERY  64

/* Reads of LuaJIT's memory, each made once, where the walk says. */
#define PROF_LUA_RD64(a)  (*(volatile const uint64_t *) (uintptr_t) (a))
#define PROF_LUA_RD32(a)  (*(volatile const uint32_t *) (uintptr_t) (a))
#define PROF_LUA_RD16(a)  (*(volatile const uint16_t *) (uintptr_t) (a))
#define PROF_LUA_RD8(a)   (*(volatile const uint8_t *) (uintptr_t) (a))


#pragma GCC visibility push(hidden)

extern volatile sig_atomic_t  prof_lua_guard_reading;   /* a walk reads */
extern volatile sig_atomic_t  prof_lua_guard_installed; /* the guard is the
                                                           process's
                                                           action */
extern sigjmp_buf             prof_lua_guard_jump;      /* where a fault
                                                           returns */
extern unsigned int           prof_lua_guard_walks;     /* since the
                                                           start */

void prof_lua_segv(int signo, siginfo_t *info, void *context);

#pragma GCC visibility pop


/* The guard installed as the process's SIGSEGV action, the one before it
   kept to hand faults on to: 0, or -1 (then no Lua frames). */
int prof_lua_guard_install(void);

/* The guard removed, the action before it back, unless another one was
   installed over it since (that one stays). */
void prof_lua_guard_remove(void);

/* The guard over a SIGSEGV action installed since (handed faults on to). */
void prof_lua_guard_retake(void);


/*
 * Whether the guard is still the process's SIGSEGV action: asked of the
 * kernel on the first walk and every PROF_LUA_GUARD_EVERY walks after
 * (a system call is a good part of a walk's cost). An action installed
 * over it since stops the walks from the next check on, for good.
 */
static inline int
prof_lua_guarded(void)
{
    struct sigaction  now;

    if (!prof_lua_guard_installed) {
        return 0;
    }

    if (prof_lua_guard_walks++ % PROF_LUA_GUARD_EVERY != 0) {
        return 1;
    }

    if (sigaction(SIGSEGV, NULL, &now) == 0
        && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == prof_lua_segv)
    {
        return 1;
    }

    prof_lua_guard_installed = 0;
    return 0;
}


#endif /* PROF_LUA_GUARD_H */
