/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The signal path's entry points (signal_path.c), for the worker's side
 * only: the SIGPROF handler, its wall accounting, and the sampler it
 * samples for.
 *
 * Threading: prof_signal_handler runs in signal context on the sampled
 * thread and is async-signal-safe (ci/check-signal-path checks its
 * objects). prof_signal_account is the handler's, and the sampled
 * thread's outside it with SIGPROF blocked (prof_sampler_flush, _stop).
 * prof_signal_sampler is set and cleared by the sampled thread
 * (prof_sampler_start, _stop) and read by the handler (atomics).
 *
 * The handler's cost goes into its slot: its wall time (TSC, from its
 * first instruction to its slot's last field) and its CPU time, the same
 * when the kernel did not switch the thread out meanwhile. The kernel
 * says so without a system call: it clears the thread's rseq area's
 * critical-section pointer (rseq(2)) when it preempts or migrates the
 * thread, or delivers it a signal, outside that section, and the handler
 * points it at a section that holds no code while it runs. Where glibc
 * registered no rseq area (musl; glibc.pthread.rseq=0; glibc before
 * 2.35), the CPU time is the wall time.
 */

#ifndef PROF_SIGNAL_PATH_H
#define PROF_SIGNAL_PATH_H

#include <signal.h>
#include <stdint.h>

#include "channel/sampler_state.h"


/* Hidden from other objects: reached directly, not through the GOT. */
#pragma GCC visibility push(hidden)


/* The SIGPROF action the sampler installs (sa_sigaction). */
void prof_signal_handler(int signo, siginfo_t *info, void *context);

/* The wall time since the last account, split (worker/sampler.h says
   how); on the sampled thread, with SIGPROF blocked outside the
   handler. */
void prof_signal_account(prof_sampler_t *s, int64_t now_ns, uint64_t now_tsc,
    int64_t cpu_ns, int64_t *wall_ns, int64_t *off_cpu_ns, int64_t *idle_ns);

/* The sampler running in this process, NULL: none (the handler then
   returns at once). */
extern prof_sampler_t  *prof_signal_sampler;

/*
 * What the handler needs before it runs (signal_prepare.c): the memory
 * it writes backed (a first write is a page fault in a sample), the
 * sampled thread's rseq area found (the handler's CPU time, below). On
 * the sampled thread, not async-signal-safe: before its timer runs, and
 * before the Lua table is the sampler's.
 */
void prof_signal_prepare(prof_sampler_t *s);
void prof_signal_prepare_lua(prof_lua_t *lua);


#pragma GCC visibility pop


#endif /* PROF_SIGNAL_PATH_H */
