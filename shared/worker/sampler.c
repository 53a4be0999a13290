/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Sampler: arms the CPU timer and the SIGPROF handler (signal_path.c) on
 * the sampled thread, and runs the sampler thread, which turns the ring's
 * slots into samples, closes profiles at the flushes the sampled thread
 * asks for, asks a thread blocked outside its event loop for its stack,
 * and rebuilds the unwind table after objects were loaded.
 */

#define _GNU_SOURCE
#define UNW_LOCAL_ONLY

#include <errno.h>
#include <libunwind.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "channel/channel.h"
#include "channel/sampler_state.h"
#include "profiler/thread.h"


/*
 * How often the sampler thread looks at the sampled thread: while it runs
 * (to find it blocked outside its event loop), and while it waits there.
 */
#define PROF_WATCH_BUSY_NS        (100 * 1000 * 1000LL)
#define PROF_WATCH_IDLE_NS        (250 * 1000 * 1000LL)

/* How often the sampler looks for objects loaded after its unwind table. */
#define PROF_TABLE_CHECK_NS       (1000 * 1000 * 1000LL)

/* How long the sampler waits for a stack it asked for. */
#define PROF_REQUEST_WAIT_NS      (1000 * 1000 * 1000LL)
#define PROF_REQUEST_WAIT_STEP_NS (10 * 1000 * 1000LL)

/* The frames of the capturing code above an idle stack, at most. */
#define PROF_CAPTURE_SKIP_MAX     8

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id    _sigev_un._tid
#endif


static long
prof_futex(uint32_t *word, int op, uint32_t value,
    const struct timespec *timeout)
{
    return syscall(SYS_futex, word, op, value, timeout, NULL,
                   FUTEX_BITSET_MATCH_ANY);
}


static void
prof_sampler_notify(prof_sampler_t *s)
{
    if (s->conf.notify != NULL) {
        s->conf.notify(s->conf.notify_data);
    }
}


static void
prof_sampler_push(prof_sampler_t *s, int64_t now_ns)
{
    prof_queue_push(s->conf.queue, s->batch);
    s->batch = NULL;
    s->last_push_ns = now_ns;
    prof_sampler_notify(s);
}


/* Room for a sample of size bytes in the current batch, or NULL. */
static unsigned char *
prof_sampler_reserve(prof_sampler_t *s, size_t size, int64_t now_ns)
{
    prof_batch_t        *next;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    if (s->batch == NULL) {
        s->batch = prof_queue_acquire(s->conf.queue);
        if (s->batch == NULL) {
            return NULL;
        }
    }

    if (s->batch->used + size > s->batch->capacity) {
        next = prof_queue_acquire(s->conf.queue);

        if (next == NULL) {
            /* The ceiling: drop this whole batch and reuse it. */
            prof_counter_add(d->dropped_batches, 1);
            prof_counter_add(d->dropped_samples, s->batch->sample_count);
            s->batch->used = 0;
            s->batch->sample_count = 0;

        } else {
            prof_sampler_push(s, now_ns);
            s->batch = next;
        }
    }

    if (s->batch->used + size > s->batch->capacity) {
        return NULL;
    }

    return s->batch->data + s->batch->used;
}


/* The sampling intervals a wall time covers. */
static uint32_t
prof_sampler_intervals(prof_sampler_t *s, int64_t wall_ns)
{
    int64_t  n;

    n = (wall_ns + s->conf.interval_ns / 2) / s->conf.interval_ns;

    return (n > UINT32_MAX) ? UINT32_MAX : (uint32_t) n;
}


/* 0: recorded; -1: dropped (and counted). */
static int
prof_sampler_append(prof_sampler_t *s, const prof_sample_t *values,
    const uint64_t *frames, int64_t now_ns)
{
    size_t               size;
    unsigned char       *p;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    size = prof_sample_size(values->frame_count);

    p = prof_sampler_reserve(s, size, now_ns);
    if (p == NULL) {
        prof_counter_add(d->dropped_samples, 1);
        return -1;
    }

    memcpy(p, values, sizeof(prof_sample_t));
    memcpy(p + sizeof(prof_sample_t), frames,
           values->frame_count * sizeof(uint64_t));

    s->batch->used += size;
    s->batch->sample_count++;

    prof_counter_add(d->samples_recorded, 1);

    return 0;
}


/* Wall time without CPU at a stack: the wait's, or where it last ran. */
static void
prof_sampler_append_wall(prof_sampler_t *s, int idle, int64_t wall_ns,
    int64_t off_cpu_ns, int64_t time_ns, int64_t now_ns)
{
    prof_sample_t        values;
    const uint64_t      *frames;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    if (wall_ns <= 0) {
        return;
    }

    memset(&values, 0, sizeof(values));
    values.wall_ns = wall_ns;
    values.off_cpu_ns = off_cpu_ns;
    values.wall_samples = prof_sampler_intervals(s, wall_ns);
    values.time_ns = time_ns;

    if (idle && __atomic_load_n(&s->idle_stack_ready, __ATOMIC_ACQUIRE)) {
        values.frame_count = s->idle_frame_count;
        frames = s->idle_frames;
        prof_counter_add(d->idle_samples, 1);

    } else if (s->last_frame_count > 0) {
        values.frame_count = s->last_frame_count;
        frames = s->last_frames;

    } else {
        prof_counter_add(d->wall_dropped, 1);
        prof_counter_add(d->wall_dropped_ns, wall_ns);
        return;
    }

    (void) prof_sampler_append(s, &values, frames, now_ns);
}


/* A slot the handler filled: its samples. */
static void
prof_sampler_take_slot(prof_sampler_t *s, prof_slot_t *slot, int64_t now_ns)
{
    prof_sample_t        values;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    prof_histogram_add(&d->handler_ns, slot->handler_ns);

    if (slot->frame_count > 0
        && slot->frames[slot->frame_count - 1] == PROF_FRAME_TRUNCATED)
    {
        prof_counter_add(d->truncated_stacks, 1);
    }

    if (slot->unwind_stop != 0) {
        prof_counter_add(d->unwind_stops, 1);
        if (slot->unwind_stop == PROF_UNWIND_NO_OBJECT) {
            prof_counter_add(d->unwind_stops_unknown_code, 1);
        }
    }

    prof_counter_add(d->scanned_frames, slot->scanned);

    memset(&values, 0, sizeof(values));
    values.wall_ns = slot->wall_ns;
    values.off_cpu_ns = slot->off_cpu_ns;
    values.wall_samples = prof_sampler_intervals(s, slot->wall_ns);
    values.request = slot->request;
    values.time_ns = slot->time_ns;
    values.frame_count = slot->frame_count;

    if (slot->kind == PROF_SLOT_CPU) {
        values.cpu_ns = s->conf.interval_ns * slot->weight;
        values.cpu_samples = slot->weight;
        prof_counter_add(d->cpu_samples, 1);

        memcpy(s->last_frames, slot->frames,
               slot->frame_count * sizeof(uint64_t));
        s->last_frame_count = slot->frame_count;

    } else {
        prof_counter_add(d->blocked_samples, 1);
    }

    (void) prof_sampler_append(s, &values, slot->frames, now_ns);

    prof_sampler_append_wall(s, 1, slot->idle_ns, slot->idle_ns,
                             slot->time_ns, now_ns);
}


/* A barrier closes the profile after every sample taken before it. */
static void
prof_sampler_barrier(prof_sampler_t *s, prof_flush_t *f, int64_t now_ns)
{
    prof_batch_t  *b;

    prof_sampler_append_wall(s, 0, f->wall_ns, f->off_cpu_ns,
                             f->monotonic_ns, now_ns);
    prof_sampler_append_wall(s, 1, f->idle_ns, f->idle_ns, f->monotonic_ns,
                             now_ns);

    b = s->batch;
    if (b == NULL) {
        b = prof_queue_acquire(s->conf.queue);
    }
    if (b == NULL) {
        b = prof_queue_acquire_barrier(s->conf.queue);
    }
    if (b == NULL) {
        /* No memory at all: the next barrier closes both. */
        return;
    }

    b->flush_after = 1;
    b->flush_monotonic_ns = f->monotonic_ns;
    b->flush_realtime_ns = f->realtime_ns;
    b->flush_last_tag = f->last_tag;
    b->flush_period = f->period;

    s->batch = b;
    prof_sampler_push(s, now_ns);
}


/* The slots filled so far, and the flushes between them, in order. */
static void
prof_sampler_drain(prof_sampler_t *s, int64_t now_ns)
{
    uint32_t      limit, added;
    prof_slot_t  *slot;
    prof_flush_t *f;

    for ( ;; ) {
        added = __atomic_load_n(&s->flushes_added, __ATOMIC_ACQUIRE);
        f = (s->flushes_taken != added)
            ? &s->flushes[s->flushes_taken % PROF_FLUSHES] : NULL;

        limit = f ? f->write_index
                  : __atomic_load_n(&s->write_index, __ATOMIC_ACQUIRE);

        while (s->read_index != limit) {
            slot = prof_sampler_slot(s, s->read_index);

            if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE)
                != PROF_SLOT_READY)
            {
                break;
            }

            prof_sampler_take_slot(s, slot, now_ns);

            __atomic_store_n(&slot->state, PROF_SLOT_FREE, __ATOMIC_RELEASE);
            __atomic_store_n(&s->read_index, s->read_index + 1,
                             __ATOMIC_RELEASE);
        }

        if (f == NULL || s->read_index != f->write_index) {
            return;
        }

        prof_sampler_barrier(s, f, now_ns);
        __atomic_store_n(&s->flushes_taken, s->flushes_taken + 1,
                         __ATOMIC_RELEASE);
    }
}


/*
 * SIGPROF to the sampled thread, marked as the sampler's (a queued signal
 * carrying the sampler), so that the handler tells it from a tgkill() or
 * raise() of the process's own.
 */
static int
prof_sampler_signal(prof_sampler_t *s)
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
prof_sampler_request_stack(prof_sampler_t *s)
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
        if (prof_sampler_signal(s) != 0) {
            __atomic_store_n(&s->served, request, __ATOMIC_RELEASE);
            prof_counter_add(d->signal_failures, 1);
            return;
        }

        prof_counter_add(d->signals_sent, 1);

        served = __atomic_load_n(&s->served, __ATOMIC_ACQUIRE);
        if (served == request) {
            return;
        }

        (void) prof_futex(&s->served, FUTEX_WAIT, served, &step);

        if (__atomic_load_n(&s->served, __ATOMIC_ACQUIRE) == request
            || __atomic_load_n(&s->stop, __ATOMIC_RELAXED))
        {
            return;
        }
    }
}


/*
 * A thread that neither waited in its event loop nor filled a slot since
 * the last look, and used less than half the time on CPU, is blocked
 * outside the loop: its stack is asked for, to account the time there.
 */
static void
prof_sampler_watch(prof_sampler_t *s, int64_t now_ns)
{
    int       waiting;
    int64_t   cpu_ns;
    uint32_t  index;
    uint64_t  waits;

    waiting = __atomic_load_n(&s->sampled.waiting, __ATOMIC_RELAXED);

    if (now_ns - s->watch_ns < (waiting ? PROF_WATCH_IDLE_NS
                                        : PROF_WATCH_BUSY_NS))
    {
        return;
    }

    /* A new wait has a new start. */
    waits = __atomic_load_n(&s->sampled.wait_start, __ATOMIC_RELAXED);
    index = __atomic_load_n(&s->write_index, __ATOMIC_ACQUIRE);
    cpu_ns = waiting ? -1 : prof_clock_ns(s->process_clock);

    if (!waiting && cpu_ns >= 0 && s->watch_cpu_ns >= 0
        && waits == s->watch_waits && index == s->watch_index
        && cpu_ns - s->watch_cpu_ns < (now_ns - s->watch_ns) / 2)
    {
        prof_sampler_request_stack(s);
    }

    s->watch_ns = now_ns;
    s->watch_waits = waits;
    s->watch_index = index;
    s->watch_cpu_ns = cpu_ns;
}


/* What the status page and the log say of the table in use. */
static void
prof_sampler_table_counters(prof_sampler_t *s, prof_unwind_table_t *t)
{
    prof_diagnostics_t  *d = s->conf.diagnostics;

    __atomic_store_n(&d->unwind_table_bytes, prof_unwind_table_bytes(t),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&d->unwind_objects, prof_unwind_table_objects(t),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&d->unwind_objects_skipped,
                     prof_unwind_table_skipped(t), __ATOMIC_RELAXED);
}


static void
prof_sampler_main(void *arg)
{
    int               stopping;
    uint32_t          unknown;
    prof_sampler_t   *s = arg;
    int64_t           now_ns, next_ns;
    uint32_t          wake;
    struct timespec   deadline;

    prof_thread_settle("prof-sampler", 0);

    s->watch_ns = prof_clock_ns(CLOCK_MONOTONIC);
    s->watch_cpu_ns = -1;

    for ( ;; ) {
        wake = __atomic_load_n(&s->wake, __ATOMIC_ACQUIRE);
        stopping = __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);

        prof_sampler_drain(s, now_ns);

        if (stopping
            && s->flushes_taken
               == __atomic_load_n(&s->flushes_added, __ATOMIC_ACQUIRE))
        {
            break;
        }

        prof_sampler_watch(s, now_ns);

        /* Walks left the tables (new objects, or JIT code): the other
           side reads the worker's maps while it lives. */
        unknown = __atomic_load_n(&s->sampled.unknown_pcs, __ATOMIC_RELAXED);
        if (unknown != s->unknown_pcs_told) {
            s->unknown_pcs_told = unknown;
            prof_sampler_notify(s);
        }

        /* The next look: when prof_sampler_watch() will take it */
        next_ns = s->watch_ns
                  + (__atomic_load_n(&s->sampled.waiting, __ATOMIC_RELAXED)
                     ? PROF_WATCH_IDLE_NS : PROF_WATCH_BUSY_NS);

        if (s->batch != NULL && s->batch->sample_count > 0) {
            if (now_ns - s->last_push_ns >= s->conf.push_every_ns) {
                prof_sampler_push(s, now_ns);

            } else if (s->last_push_ns + s->conf.push_every_ns < next_ns) {
                next_ns = s->last_push_ns + s->conf.push_every_ns;
            }
        }

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);
        if (next_ns <= now_ns) {
            continue;
        }

        deadline.tv_sec = next_ns / 1000000000;
        deadline.tv_nsec = next_ns % 1000000000;
        (void) prof_futex(&s->wake, FUTEX_WAIT_BITSET, wake,
                          &deadline);
    }

    if (s->batch != NULL && s->batch->sample_count > 0) {
        prof_sampler_push(s, prof_clock_ns(CLOCK_MONOTONIC));
    }
}


static void
prof_sampler_wake(prof_sampler_t *s)
{
    __atomic_add_fetch(&s->wake, 1, __ATOMIC_RELEASE);
    (void) prof_futex(&s->wake, FUTEX_WAKE, 1, NULL);
}


/*
 * On the sampled thread, SIGPROF blocked: the wall time since the last
 * sample, and a flush after the slots filled so far.
 */
static void
prof_sampler_add_flush(prof_sampler_t *s, uint64_t period, int final,
    int account)
{
    int64_t              now_ns, cpu_ns, wall_ns, off_cpu_ns, idle_ns;
    uint32_t             added;
    prof_flush_t        *f;

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    wall_ns = 0;
    off_cpu_ns = 0;
    idle_ns = 0;

    if (account) {
        cpu_ns = prof_clock_ns(s->cpu_clock);
        prof_signal_account(s, now_ns, __builtin_ia32_rdtsc(),
                            (cpu_ns >= 0) ? cpu_ns - s->point_cpu_ns : 0,
                            &wall_ns, &off_cpu_ns, &idle_ns);
    }

    added = s->flushes_added;

    if (added - __atomic_load_n(&s->flushes_taken, __ATOMIC_ACQUIRE)
        == PROF_FLUSHES)
    {
        /* The sampler thread is behind: this one extends the last. */
        f = &s->flushes[(added - 1) % PROF_FLUSHES];
        prof_counter_add(s->conf.diagnostics->flushes_merged, 1);

    } else {
        f = &s->flushes[added % PROF_FLUSHES];
        memset(f, 0, sizeof(prof_flush_t));
        added++;
    }

    f->period = period;

    f->wall_ns += wall_ns;
    f->off_cpu_ns += off_cpu_ns;
    f->idle_ns += idle_ns;
    f->write_index = s->write_index;
    f->final = final;
    f->monotonic_ns = now_ns;
    f->realtime_ns = prof_clock_ns(CLOCK_REALTIME);
    f->last_tag = s->sampled.epoch;

    __atomic_store_n(&s->flushes_added, added, __ATOMIC_RELEASE);
}


static void
prof_sampler_flush_now(prof_sampler_t *s, uint64_t period, int final)
{
    sigset_t  prof, saved;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    prof_sampler_add_flush(s, period, final, 1);

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    prof_sampler_wake(s);
}


void
prof_sampler_flush(prof_sampler_t *s, uint64_t period)
{
    __atomic_store_n(&s->period, period + 1, __ATOMIC_RELAXED);
    prof_sampler_flush_now(s, period, 0);
}


static int
prof_sampler_start_timer(prof_sampler_t *s)
{
    struct sigevent    sev;
    struct itimerspec  its;

    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_value.sival_ptr = s;
    sev.sigev_notify_thread_id = s->tid;

    if (timer_create(s->cpu_clock, &sev, &s->cpu_timer) != 0) {
        return -errno;
    }

    its.it_interval.tv_sec = s->conf.interval_ns / 1000000000;
    its.it_interval.tv_nsec = s->conf.interval_ns % 1000000000;
    its.it_value = its.it_interval;

    s->timer_cpu_ns = prof_clock_ns(s->cpu_clock);
    s->point_cpu_ns = s->timer_cpu_ns;

    if (timer_settime(s->cpu_timer, 0, &its, NULL) != 0) {
        (void) timer_delete(s->cpu_timer);
        return -errno;
    }

    return 0;
}


/*
 * After the timer is gone: the action before ours, or, when that was the
 * default (terminate), ignore, so that a SIGPROF still pending or sent by
 * someone else does not kill the process.
 */
static void
prof_sampler_restore_signal(prof_sampler_t *s)
{
    struct sigaction  sa;

    if (!(s->saved_action.sa_flags & SA_SIGINFO)
        && s->saved_action.sa_handler == SIG_DFL)
    {
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_IGN;
        (void) sigaction(SIGPROF, &sa, NULL);
        return;
    }

    (void) sigaction(SIGPROF, &s->saved_action, NULL);
}


/* The sampled thread's stack, that the handler's walk stays inside. */
static int
prof_sampler_stack_bounds(prof_sampler_t *s)
{
    int             rc;
    void           *addr;
    size_t          size;
    pthread_attr_t  attr;

    rc = pthread_getattr_np(pthread_self(), &attr);
    if (rc != 0) {
        return -rc;
    }

    rc = pthread_attr_getstack(&attr, &addr, &size);
    (void) pthread_attr_destroy(&attr);

    if (rc != 0) {
        return -rc;
    }

    s->stack_low = (uintptr_t) addr;
    s->stack_high = (uintptr_t) addr + size;

    return 0;
}


static void
prof_sampler_free(prof_sampler_t *s)
{
    free(s->last_frames);
    prof_shared_free(s, s->shared_size);
}


static prof_sampler_t *
prof_sampler_create(const prof_sampler_conf_t *conf)
{
    size_t           slot_size, size;
    unsigned char   *m;
    prof_sampler_t  *s;

    slot_size = (sizeof(prof_slot_t)
                 + (conf->max_frames + 1) * sizeof(uint64_t) + 63) & ~63UL;

    /* The struct, the ring and the idle stack: shared with the profiler
       process. */
    size = ((sizeof(prof_sampler_t) + 63) & ~63UL) + PROF_SLOTS * slot_size
           + conf->max_frames * sizeof(uint64_t);

    m = prof_shared_alloc(size);
    if (m == NULL) {
        return NULL;
    }

    s = (prof_sampler_t *) m;
    s->shared_size = size;
    s->conf = *conf;
    s->slot_size = slot_size;
    s->slots = m + ((sizeof(prof_sampler_t) + 63) & ~63UL);
    s->idle_frames = (uint64_t *) (s->slots + PROF_SLOTS * slot_size);

    s->last_frames = calloc(conf->max_frames + 1, sizeof(uint64_t));
    if (s->last_frames == NULL) {
        prof_sampler_free(s);
        return NULL;
    }

    return s;
}


/* The sampler's SIGPROF action; the one before it into *old. */
static int
prof_sampler_install_handler(struct sigaction *old)
{
    struct sigaction  sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = prof_signal_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);

    return sigaction(SIGPROF, &sa, old);
}


int
prof_sampler_start(prof_sampler_t **sampler, const prof_sampler_conf_t *conf)
{
    int              rc;
    prof_sampler_t  *s, *expected;

    if (conf->max_frames < 8 || conf->max_frames > PROF_MAX_FRAMES_LIMIT
        || conf->interval_ns <= 0)
    {
        return -EINVAL;
    }

    s = prof_sampler_create(conf);
    if (s == NULL) {
        return -ENOMEM;
    }

    s->pid = getpid();
    s->tid = (pid_t) syscall(SYS_gettid);

    rc = pthread_getcpuclockid(pthread_self(), &s->cpu_clock);
    if (rc == 0) {
        rc = clock_getcpuclockid(s->pid, &s->process_clock);
    }
    if (rc != 0) {
        prof_sampler_free(s);
        return -rc;
    }

    rc = prof_sampler_stack_bounds(s);
    if (rc != 0) {
        prof_sampler_free(s);
        return rc;
    }

    expected = NULL;
    if (!__atomic_compare_exchange_n(&prof_signal_sampler, &expected, s, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    {
        prof_sampler_free(s);
        return -EBUSY;
    }

    /* ~12 ms for nginx with the libraries of Debian's packages. */
    s->borrowed = conf->unwind_table;
    s->table = s->borrowed;

    if (s->table == NULL) {
        s->table = prof_unwind_table_build();
        if (s->table != NULL) {
            prof_counter_add(s->conf.diagnostics->unwind_tables, 1);
        }
    }

    if (s->table != NULL) {
        prof_sampler_table_counters(s, s->table);
    }

    if (prof_sampler_install_handler(&s->saved_action) != 0) {
        rc = -errno;
        goto failed;
    }

    /* The wall clock starts where the caller's profile starts. */
    s->point_wall_ns = conf->start_monotonic_ns
                       ? conf->start_monotonic_ns
                       : prof_clock_ns(CLOCK_MONOTONIC);
    s->point_tsc = __builtin_ia32_rdtsc();
    s->last_push_ns = prof_clock_ns(CLOCK_MONOTONIC);

    rc = prof_sampler_start_timer(s);
    if (rc != 0) {
        prof_sampler_restore_signal(s);
        goto failed;
    }

    *sampler = s;
    return 0;

failed:

    __atomic_store_n(&prof_signal_sampler, NULL, __ATOMIC_RELEASE);
    if (s->lua != NULL) {
        prof_lua_guard_remove();
    }
    if (s->table != s->borrowed) {
        prof_unwind_table_free(s->table);
    }
    prof_sampler_free(s);
    return rc;
}


int
prof_sampler_run(prof_sampler_t *s)
{
    s->last_push_ns = prof_clock_ns(CLOCK_MONOTONIC);

    return prof_thread_create(&s->thread, prof_sampler_main, s);
}


void
prof_sampler_stop(prof_sampler_t *s, uint64_t period)
{
    sigset_t  prof, saved;

    /*
     * SIGPROF stays blocked until the action before ours is back: a timer
     * signal still pending goes there (or nowhere), not into a slot after
     * the final barrier.
     */
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    (void) timer_delete(s->cpu_timer);

    prof_sampler_add_flush(s, period, 1, 1);

    prof_counter_add(s->conf.diagnostics->dropped_samples,
                     __atomic_load_n(&s->ring_full, __ATOMIC_RELAXED));
    prof_counter_add(s->conf.diagnostics->ring_full,
                     __atomic_load_n(&s->ring_full, __ATOMIC_RELAXED));

    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    prof_sampler_wake(s);

    prof_sampler_restore_signal(s);
    __atomic_store_n(&prof_signal_sampler, NULL, __ATOMIC_RELEASE);

    if (s->lua != NULL) {
        s->lua = NULL;
        prof_lua_guard_remove();
    }

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    if (s->table != s->borrowed) {
        prof_unwind_table_free(s->table);
    }
    s->table = NULL;
}


void
prof_sampler_release(prof_sampler_t *s)
{
    prof_sampler_free(s);
}


void
prof_sampler_finish(prof_sampler_t *s)
{
    /* Its sampled thread is gone without a final barrier: one now. */
    if (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        prof_sampler_add_flush(s, __atomic_load_n(&s->period,
                                                  __ATOMIC_RELAXED), 1, 0);
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    }

    prof_sampler_wake(s);
    (void) uv_thread_join(&s->thread);

    if (s->batch != NULL) {
        prof_queue_release(s->conf.queue, s->batch);
        s->batch = NULL;
    }
}


/*
 * Builds the unwind table again when the handler met code outside it and
 * objects were loaded or unloaded since (checked at most once a
 * PROF_TABLE_CHECK_NS). SIGPROF is blocked while the table is replaced:
 * no handler uses the old one when it is freed.
 */
void
prof_sampler_maintain_table(prof_sampler_t *s, int64_t now_ns)
{
    uint32_t              unknown;
    sigset_t              prof, saved;
    prof_unwind_table_t  *t, *old;

    if (now_ns - s->table_checked_ns < PROF_TABLE_CHECK_NS
        || __atomic_load_n(&s->stop, __ATOMIC_RELAXED))
    {
        return;
    }

    unknown = __atomic_load_n(&s->sampled.unknown_pcs, __ATOMIC_RELAXED);
    if (unknown == s->sampled.unknown_pcs_seen) {
        return;
    }

    s->sampled.unknown_pcs_seen = unknown;
    s->table_checked_ns = now_ns;

    if (s->table != NULL
        && prof_unwind_generation_now()
           == prof_unwind_table_generation(s->table))
    {
        return;
    }

    t = prof_unwind_table_build();
    if (t == NULL) {
        return;
    }

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    old = s->table;
    s->table = t;

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    if (old != s->borrowed) {
        prof_unwind_table_free(old);
    }

    prof_counter_add(s->conf.diagnostics->unwind_tables, 1);
    prof_sampler_table_counters(s, t);
}


/* libunwind outside the handler, with SIGPROF blocked meanwhile. */
void
prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames)
{
    int       n;
    unsigned  i, count, max;
    void     *frames[PROF_MAX_FRAMES_LIMIT + 1 + PROF_CAPTURE_SKIP_MAX];
    sigset_t  prof, saved;

    max = s->conf.max_frames;
    if (leaf_count >= max || skip_frames > PROF_CAPTURE_SKIP_MAX) {
        return;
    }

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    n = unw_backtrace(frames, max + 1 + skip_frames);

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    if (n <= (int) skip_frames) {
        return;
    }

    count = 0;

    for (i = 0; i < leaf_count; i++) {
        s->idle_frames[count++] = leaf_frames[i];
    }

    for (i = skip_frames; i < (unsigned) n && count < max; i++) {
        s->idle_frames[count++] = (uint64_t) (uintptr_t) frames[i];
    }

    if (i < (unsigned) n) {
        s->idle_frames[max - 1] = PROF_FRAME_TRUNCATED;
    }

    s->idle_frame_count = count;

    __atomic_store_n(&s->idle_stack_ready, 1, __ATOMIC_RELEASE);
}


void
prof_sampler_enable_lua(prof_sampler_t *s, prof_lua_t *lua)
{
    /* LuaJIT's memory is read under a fault guard (lua_frames.h). */
    if (s->lua == NULL && prof_lua_guard_install() == 0) {
        __atomic_store_n(&s->lua, lua, __ATOMIC_RELEASE);
    }
}


void
prof_sampler_retake_signals(prof_sampler_t *s)
{
    sigset_t          prof, saved;
    struct sigaction  now;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    if (sigaction(SIGPROF, NULL, &now) == 0
        && !((now.sa_flags & SA_SIGINFO)
             && now.sa_sigaction == prof_signal_handler))
    {
        (void) prof_sampler_install_handler(&s->saved_action);
    }

    if (__atomic_load_n(&s->lua, __ATOMIC_ACQUIRE) != NULL) {
        prof_lua_guard_retake();
    }

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);
}


prof_sampled_thread_t *
prof_sampler_sampled_thread(prof_sampler_t *s)
{
    return &s->sampled;
}
