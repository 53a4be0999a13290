/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The sampler thread's watch over the sampled thread out of its event
 * wait (ring_drain.h): blocked outside it (wall time without CPU), or in
 * a turn past the stall threshold that no sample caught, its stack is
 * taken, to account the time there and to name the stall's code: read
 * from outside while the thread is blocked in a system call
 * (remote_stack.h), else asked for with a queued SIGPROF, which the
 * handler serves as a PROF_SLOT_STACK slot, and which ends a sleep or a
 * poll the thread is in early (EINTR): the signal only where the thread
 * is blocked outside a system call (a page fault, a stop) or the read is
 * refused. A thread that runs, or waits for a CPU, is left to its own
 * CPU samples.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/clock.h"
#include "common/futex.h"
#include "profiler/ring_drain_internal.h"


/* How long the sampler waits for a stack it asked for. */
#define PROF_REQUEST_WAIT_NS      (1000 * 1000 * 1000LL)
#define PROF_REQUEST_WAIT_STEP_NS (10 * 1000 * 1000LL)


/*
 * SIGPROF to the sampled thread, marked as the sampler's (a queued signal
 * carrying the sampler), so that the handler tells it from a tgkill() or
 * raise() of the process's own.
 */
static int
prof_blocked_watch_signal(prof_sampler_t *s)
{
    siginfo_t  si;

    memset(&si, 0, sizeof(si));
    si.si_signo = SIGPROF;
    si.si_code = SI_QUEUE;
    si.si_pid = s->pid;
    si.si_uid = getuid();
    si.si_value.sival_ptr = s;

    return (int) syscall(SYS_rt_tgsigqueueinfo, s->pid, s->tid, SIGPROF, &si);
}


/*
 * Asks the handler for the sampled thread's stack; the slot comes in the
 * ring. The signal is sent again at every step: a SIGPROF already pending
 * (from the CPU timer) would have absorbed it.
 */
static void
prof_blocked_watch_ask(prof_sampler_t *s)
{
    int64_t              waited_ns;
    uint32_t             request, served;
    struct timespec      step;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    request = __atomic_add_fetch(&s->requests, 1, __ATOMIC_RELEASE);

    step.tv_sec = 0;
    step.tv_nsec = PROF_REQUEST_WAIT_STEP_NS;

    for (waited_ns = 0; waited_ns < PROF_REQUEST_WAIT_NS;
         waited_ns += PROF_REQUEST_WAIT_STEP_NS)
    {
        if (prof_blocked_watch_signal(s) != 0) {
            __atomic_store_n(&s->served, request, __ATOMIC_RELEASE);
            prof_counter_add(d->signal_failures, 1);
            return;
        }

        prof_counter_add(d->signals_sent, 1);

        served = __atomic_load_n(&s->served, __ATOMIC_ACQUIRE);
        if (served == request) {
            return;
        }

        (void) prof_sampler_futex(&s->served, FUTEX_WAIT, served, &step);

        if (__atomic_load_n(&s->served, __ATOMIC_ACQUIRE) == request
            || __atomic_load_n(&s->stop, __ATOMIC_RELAXED))
        {
            return;
        }
    }
}

/*
 * The sampled thread's stack read from outside, its time accounted, and
 * taken in order with the slots and flushes: 0; -EAGAIN when the thread
 * runs (on a CPU, or waiting for one), or -1 when it is blocked outside
 * a system call or the read failed: the signal is to ask for it then. A
 * refusal is counted and told once (the loop thread logs it).
 */
static int
prof_blocked_watch_read(prof_ring_drain_t *drain, int64_t now_ns)
{
    int                    rc;
    int64_t                from_ns;
    uint32_t               phase;
    prof_diagnostics_t    *d = drain->sampler->conf.diagnostics;
    prof_stall_mailbox_t  *m = drain->conf.stalls;

    if (drain->outside_pending) {
        return 0;                   /* the last one not taken yet */
    }

    /* The slots filled before: the stack's turn after theirs. */
    prof_ring_drain_slots(drain, now_ns);

    rc = prof_remote_stack_read(drain->remote, drain->outside, &from_ns,
                                &phase);

    switch (rc) {

    case 0:
        prof_counter_add(d->stacks_read, 1);
        drain->outside_pending = 1 + phase;
        drain->outside_from_ns = from_ns;
        prof_ring_drain_slots(drain, prof_clock_ns(CLOCK_MONOTONIC));
        return 0;

    case -EBUSY:
        return 0;                   /* it ran and accounted meanwhile */

    case -EAGAIN:
        return -EAGAIN;             /* it runs, or it moved meanwhile */

    case -EPERM:
    case -EACCES:
        prof_counter_add(d->stack_reads_refused, 1);

        if (!drain->outside_refused && m != NULL) {
            drain->outside_refused = -rc;
            __atomic_store_n(&m->stack_reads_refused, (uint32_t) -rc,
                             __ATOMIC_RELEASE);
            prof_ring_drain_notify(drain);
        }

        return -1;

    default:
        return -1;
    }
}


/*
 * The sampled thread's stack, to account the time it was blocked: read
 * from outside, else asked for with the signal. 1: not taken, it runs
 * (on a CPU, or waiting for one): its own CPU samples account its time
 * and name its code; a signal would be served no sooner.
 */
static int
prof_blocked_watch_take(prof_ring_drain_t *drain, int64_t now_ns)
{
    int  rc;

    rc = prof_blocked_watch_read(drain, now_ns);

    if (rc == 0) {
        return 0;
    }

    if (rc == -EAGAIN) {
        return 1;
    }

    prof_blocked_watch_ask(drain->sampler);

    return 0;
}


/* The shortest look distance. */
#define PROF_WATCH_BUSY_MIN_NS    (10 * 1000 * 1000LL)

int64_t
prof_ring_drain_look_ns(prof_sampler_t *s)
{
    int64_t  stall_ns;

    stall_ns = s->sampled.stall_ns;

    if (stall_ns <= 0 || stall_ns >= PROF_WATCH_BUSY_NS) {
        return PROF_WATCH_BUSY_NS;
    }

    return (stall_ns > PROF_WATCH_BUSY_MIN_NS) ? stall_ns
                                               : PROF_WATCH_BUSY_MIN_NS;
}


/*
 * A turn running past the stall threshold (age_ns into it) with no
 * sample past it: its stack taken, once; while the thread runs, its own
 * CPU samples are awaited (a read when it blocks, at a later look).
 */
static void
prof_blocked_watch_turn(prof_ring_drain_t *drain, uint64_t turn,
    int64_t age_ns, int64_t now_ns)
{
    prof_sampler_t  *s = drain->sampler;

    if (s->sampled.stall_ns <= 0 || age_ns < s->sampled.stall_ns
        || turn == drain->turn_asked
        || (drain->turn == turn && drain->turn_past))
    {
        return;
    }

    if (prof_blocked_watch_take(drain, now_ns) == 0) {
        drain->turn_asked = turn;
    }
}


/*
 * A look at the sampled thread (when one is due), and when the next is.
 *
 * Waiting in its event wait: the next look a look distance later (a
 * turn that begins meanwhile passes the threshold no sooner); in the
 * same wait at two looks, it is idle: the sampler thread sleeps until
 * the wait ends (prof_ring_drain_sleep_idle). A busy worker's short
 * waits so cost it no wake-up of the sampler thread (a system call in
 * prof_wait_end) and the sampler thread no look of their own.
 *
 * In a turn of its loop: the next look when the turn will have lasted
 * the look distance (its start read from the TSC word the wait's end
 * left), so turns that end sooner, a busy worker's, cost no look of
 * their own: a look a distance, not two; its CPU samples name their
 * code. A turn found at two looks, in which the thread filled no slot
 * and used less than half the time on CPU, is blocked outside the loop:
 * its stack is taken, to account the time there. A turn past the stall
 * threshold without a sample past it gets its stack taken once.
 */
void
prof_ring_drain_watch(prof_ring_drain_t *drain, int64_t now_ns)
{
    int              waiting;
    int64_t          cpu_ns, look_ns, age_ns;
    uint32_t         index;
    uint64_t         waits, turn, now_tsc;
    prof_sampler_t  *s = drain->sampler;

    if (now_ns < drain->watch_next_ns) {
        return;
    }

    /* A new wait has a new start, and a new turn too. */
    waiting = prof_waiting(__atomic_load_n(&s->sampled.wait_ticks,
                                           __ATOMIC_ACQUIRE));
    waits = __atomic_load_n(&s->sampled.wait_start, __ATOMIC_RELAXED);
    turn = __atomic_load_n(&s->sampled.turn_start, __ATOMIC_RELAXED);
    index = __atomic_load_n(&s->write_index, __ATOMIC_ACQUIRE);

    /* In the same wait as at the last look: idle (the sampler thread
       sleeps until the wait ends, prof_ring_drain_sleep_idle). */
    drain->watch_idle = waiting && drain->watch_waiting
                        && waits == drain->watch_waits;
    drain->watch_waits = waits;
    drain->watch_waiting = waiting;

    look_ns = prof_ring_drain_look_ns(s);

    if (waiting) {
        drain->watch_ns = now_ns;
        drain->watch_next_ns = now_ns + look_ns;
        drain->watch_turn = 0;
        drain->watch_cpu_ns = -1;
        return;
    }

    cpu_ns = prof_clock_ns(s->process_clock);
    now_tsc = prof_arch_ticks();
    age_ns = prof_ticks_ns(&s->sampled, now_tsc - turn, now_ns, now_tsc);

    if (turn == drain->watch_turn) {
        /* (Its start not known in ns yet: from when it was first seen.) */
        if (age_ns < now_ns - drain->watch_turn_ns) {
            age_ns = now_ns - drain->watch_turn_ns;
        }

        if (index == drain->watch_index && cpu_ns >= 0
            && drain->watch_cpu_ns >= 0
            && cpu_ns - drain->watch_cpu_ns < (now_ns - drain->watch_ns) / 2)
        {
            (void) prof_blocked_watch_take(drain, now_ns);

        } else {
            prof_blocked_watch_turn(drain, turn, age_ns, now_ns);
        }

    } else {
        drain->watch_turn = turn;
        drain->watch_turn_ns = now_ns;
        prof_blocked_watch_turn(drain, turn, age_ns, now_ns);
    }

    drain->watch_ns = now_ns;
    drain->watch_next_ns = now_ns + ((age_ns < look_ns) ? look_ns - age_ns
                                                        : look_ns);
    drain->watch_index = index;
    drain->watch_cpu_ns = cpu_ns;
}
