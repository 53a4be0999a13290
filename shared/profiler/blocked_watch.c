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
 * is not in a system call (it runs) or the read is refused.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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
 * taken in order with the slots and flushes: 0, or -1 when the signal is
 * to ask for it (the thread is not blocked in a system call, or the read
 * failed). A refusal is counted and told once (the loop thread logs it).
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


/* The sampled thread's stack, to account the time it was blocked. */
static void
prof_blocked_watch_take(prof_ring_drain_t *drain, int64_t now_ns)
{
    if (prof_blocked_watch_read(drain, now_ns) != 0) {
        prof_blocked_watch_ask(drain->sampler);
    }
}


/* How often a thread out of its event wait is looked at: a stall's
   stack is asked for within half its threshold of it (10 ms at least). */
#define PROF_WATCH_BUSY_MIN_NS    (10 * 1000 * 1000LL)

int64_t
prof_ring_drain_busy_ns(prof_sampler_t *s)
{
    int64_t  half;

    half = s->sampled.stall_ns / 2;

    if (half <= 0 || half >= PROF_WATCH_BUSY_NS) {
        return PROF_WATCH_BUSY_NS;
    }

    return (half > PROF_WATCH_BUSY_MIN_NS) ? half : PROF_WATCH_BUSY_MIN_NS;
}


/*
 * A turn running past the stall threshold with no sample past it (no CPU
 * time passes: blocked in a system call): its stack asked for, once.
 */
static void
prof_blocked_watch_turn(prof_ring_drain_t *drain, int64_t now_ns)
{
    uint64_t         turn;
    prof_sampler_t  *s = drain->sampler;

    if (s->sampled.stall_ns <= 0) {
        return;
    }

    turn = __atomic_load_n(&s->sampled.turn_start, __ATOMIC_RELAXED);

    if (__atomic_load_n(&s->sampled.waiting, __ATOMIC_RELAXED)) {
        drain->watch_turn = 0;
        return;
    }

    if (turn != drain->watch_turn) {
        drain->watch_turn = turn;
        drain->watch_turn_ns = now_ns;
        return;
    }

    if (now_ns - drain->watch_turn_ns >= s->sampled.stall_ns
        && turn != drain->turn_asked
        && !(drain->turn == turn && drain->turn_past))
    {
        drain->turn_asked = turn;
        prof_blocked_watch_take(drain, now_ns);
    }
}


/*
 * A thread that neither waited in its event loop nor filled a slot since
 * the last look, and used less than half the time on CPU, is blocked
 * outside the loop: its stack is asked for, to account the time there.
 */
void
prof_ring_drain_watch(prof_ring_drain_t *drain, int64_t now_ns)
{
    int              waiting;
    int64_t          cpu_ns;
    uint32_t         index;
    uint64_t         waits;
    prof_sampler_t  *s = drain->sampler;

    waiting = __atomic_load_n(&s->sampled.waiting, __ATOMIC_RELAXED);

    if (now_ns - drain->watch_ns < (waiting ? PROF_WATCH_IDLE_NS
                                            : prof_ring_drain_busy_ns(s)))
    {
        return;
    }

    /* A new wait has a new start. */
    waits = __atomic_load_n(&s->sampled.wait_start, __ATOMIC_RELAXED);
    index = __atomic_load_n(&s->write_index, __ATOMIC_ACQUIRE);
    cpu_ns = waiting ? -1 : prof_clock_ns(s->process_clock);

    if (!waiting && cpu_ns >= 0 && drain->watch_cpu_ns >= 0
        && waits == drain->watch_waits && index == drain->watch_index
        && cpu_ns - drain->watch_cpu_ns < (now_ns - drain->watch_ns) / 2)
    {
        prof_blocked_watch_take(drain, now_ns);

    } else {
        prof_blocked_watch_turn(drain, now_ns);
    }

    drain->watch_ns = now_ns;
    drain->watch_waits = waits;
    drain->watch_waiting = waiting;
    drain->watch_index = index;
    drain->watch_cpu_ns = cpu_ns;
}
