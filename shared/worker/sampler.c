/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Sampler, the sampled thread's side: arms the CPU timer and the SIGPROF
 * handler (signal_path.c), adds the flushes that close profiles, records
 * the event wait's stack, and rebuilds the unwind table after objects
 * were loaded. The sampler thread that drains the ring is the profiler
 * process's (profiler/ring_drain.c).
 */

#define _GNU_SOURCE
#define UNW_LOCAL_ONLY

#include <errno.h>
#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "channel/channel.h"
#include "channel/sampler_state.h"
#include "worker/lua_guard.h"
#include "worker/sampler.h"
#include "worker/signal_path.h"


/* How often the sampler looks for objects loaded after its unwind table. */
#define PROF_TABLE_CHECK_NS       (1000 * 1000 * 1000LL)

/* The frames of the capturing code above an idle stack, at most. */
#define PROF_CAPTURE_SKIP_MAX     8

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id    _sigev_un._tid
#endif


/* A slot's unwind_stop is the walk's status (channel/sampler_state.h). */
_Static_assert(PROF_SLOT_STOP_NO_OBJECT == PROF_UNWIND_NO_OBJECT,
               "a slot's unwind_stop is a prof_unwind_status_e");


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


/*
 * On the sampled thread, SIGPROF blocked: the wall time since the last
 * sample, and a flush after the slots filled so far.
 */
static void
prof_sampler_add_flush(prof_sampler_t *s, uint64_t period, int final)
{
    int64_t  now_ns, cpu_ns, wall_ns, off_cpu_ns, idle_ns;

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    wall_ns = 0;
    off_cpu_ns = 0;
    idle_ns = 0;

    cpu_ns = prof_clock_ns(s->cpu_clock);
    prof_signal_account(s, now_ns, prof_arch_ticks(),
                        (cpu_ns >= 0) ? cpu_ns - s->point_cpu_ns : 0,
                        &wall_ns, &off_cpu_ns, &idle_ns);

    prof_sampler_post_flush(s, period, final, now_ns, wall_ns, off_cpu_ns,
                            idle_ns);
}


/*
 * The TSC's rate, once some time passed since the calibration pair: the
 * ticks a stall needs, less an eighth (the slow path measures the turn
 * in ns: a rate a preemption between the two readings skewed must not
 * hide a stall just over the threshold). Before, every turn ends on the
 * slow path.
 */
#define PROF_CALIBRATION_NS  (10 * 1000 * 1000LL)

/*
 * stall_ticks back to the threshold, or 0 while walks left the table since
 * it was looked at: a handler that ran before the store counted them, one
 * after it stored 0 itself.
 */
static void
prof_sampler_rearm(prof_sampled_thread_t *h)
{
    h->stall_ticks = h->stall_threshold_ticks;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (prof_sampler_left_table(h)) {
        h->stall_ticks = 0;
    }
}


static void
prof_sampler_calibrate(prof_sampled_thread_t *h, int64_t now_ns,
    uint64_t now_tsc)
{
    double  rate;

    if (now_ns - h->calib_ns < PROF_CALIBRATION_NS
        || now_tsc <= h->calib_tsc)
    {
        return;
    }

    rate = (double) (now_ns - h->calib_ns) / (double) (now_tsc - h->calib_tsc);

    /* Read by the profiler process. */
    __atomic_store(&h->ns_per_tick, &rate, __ATOMIC_RELAXED);

    if (h->stall_ns > 0) {
        h->stall_threshold_ticks = (uint64_t) ((double) h->stall_ns / rate
                                               * 7 / 8);
        prof_sampler_rearm(h);
    }
}


static void
prof_sampler_flush_now(prof_sampler_t *s, uint64_t period, int final)
{
    sigset_t  prof, saved;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    prof_sampler_add_flush(s, period, final);

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    prof_sampler_wake(s);
}


void
prof_sampler_flush(prof_sampler_t *s, uint64_t period)
{
    prof_sampled_thread_t  *h = &s->sampled;

    __atomic_store_n(&s->period, period + 1, __ATOMIC_RELAXED);
    prof_sampler_flush_now(s, period, 0);

    /* The TSC's rate, for the turns' lengths, however long the turns:
       measured again over the longer baseline. */
    prof_sampler_calibrate(h, prof_clock_ns(CLOCK_MONOTONIC),
                           prof_arch_ticks());
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
    s->interval_now_ns = s->conf.interval_ns;
    s->interval_wanted_ns = s->conf.interval_ns;
    s->conf.diagnostics->interval_ns = (uint64_t) s->conf.interval_ns;

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

    return s;
}


/* The sampler's SIGPROF action; the one before it into *old. */
static int
prof_sampler_install_handler(struct sigaction *old)
{
    struct sigaction  sa;

    /*
     * Every signal waits for the handler to end, but a fault's: a
     * SIGSEGV blocked when a read of the Lua walk faults would kill the
     * process at once instead of running the guard's action, which
     * returns into the walk (lua_guard.h).
     */
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = prof_signal_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    sigdelset(&sa.sa_mask, SIGSEGV);
    sigdelset(&sa.sa_mask, SIGBUS);

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
    s->point.wall_ns = conf->start_monotonic_ns
                       ? conf->start_monotonic_ns
                       : prof_clock_ns(CLOCK_MONOTONIC);
    s->point.tsc = prof_arch_ticks();
    s->point.wait_ticks = PROF_WAIT_TICKS_ORIGIN;
    s->sampled.wait_ticks = PROF_WAIT_TICKS_ORIGIN;

    /* The first turn: from here to the first wait. */
    s->sampled.calib_ns = prof_clock_ns(CLOCK_MONOTONIC);
    s->sampled.calib_tsc = prof_arch_ticks();
    s->sampled.turn_start = s->sampled.calib_tsc;
    s->sampled.phase = PROF_PHASE_START;
    s->sampled.stall_ns = conf->stall_ns;
    s->sampled.stall_threshold_ticks = (conf->stall_ns > 0) ? 0 : UINT64_MAX;
    s->sampled.stall_ticks = s->sampled.stall_threshold_ticks;

    prof_signal_prepare(s);

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


void
prof_sampler_stop(prof_sampler_t *s, uint64_t period)
{
    sigset_t              prof, saved;
    prof_unwind_table_t  *old;

    /*
     * SIGPROF stays blocked until the action before ours is back: a timer
     * signal still pending goes there (or nowhere), not into a slot after
     * the final barrier.
     */
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    (void) timer_delete(s->cpu_timer);

    prof_sampler_add_flush(s, period, 1);

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

    /* Gone for the profiler process before it is freed. */
    old = s->table;
    __atomic_store_n(&s->table, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&s->forked_table, NULL, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->table_swaps, 1, __ATOMIC_RELEASE);

    if (old != s->borrowed) {
        prof_unwind_table_free(old);
    }
}


void
prof_sampler_release(prof_sampler_t *s)
{
    prof_sampler_free(s);
}


void
prof_sampler_wake_watcher(prof_sampled_thread_t *h)
{
    /* sampled is the sampler's first member (sampler_state.h). */
    __atomic_store_n(&h->watcher_asleep, 0, __ATOMIC_RELAXED);
    prof_sampler_wake((prof_sampler_t *) h);
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

    /* The master's objects taken from its table, which stays. */
    t = prof_unwind_table_build_over(s->borrowed);
    if (t == NULL) {
        return;
    }

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    old = s->table;
    __atomic_store_n(&s->table, t, __ATOMIC_RELEASE);
    __atomic_store_n(&s->forked_table, NULL, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->table_swaps, 1, __ATOMIC_RELEASE);

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    if (old != s->borrowed) {
        prof_unwind_table_free(old);
    }

    prof_counter_add(s->conf.diagnostics->unwind_tables, 1);
    prof_sampler_table_counters(s, t);
}


/*
 * libunwind outside the handler, with SIGPROF blocked meanwhile: a step
 * at a time, not unw_backtrace(), whose cache of frames would cost the
 * worker 256 kB written at its first call, for this one walk.
 */
void
prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames)
{
    int            n;
    unsigned       i, count, max;
    sigset_t       prof, saved;
    unw_word_t     ip;
    unw_cursor_t   cursor;
    unw_context_t  context;
    uint64_t       frames[PROF_MAX_FRAMES_LIMIT + 1 + PROF_CAPTURE_SKIP_MAX];

    max = s->conf.max_frames;
    if (leaf_count >= max || skip_frames > PROF_CAPTURE_SKIP_MAX) {
        return;
    }

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    (void) pthread_sigmask(SIG_BLOCK, &prof, &saved);

    n = 0;

    if (unw_getcontext(&context) == 0
        && unw_init_local(&cursor, &context) == 0)
    {
        do {
            if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) {
                break;
            }
            frames[n++] = (uint64_t) ip;
        } while (n < (int) (max + 1 + skip_frames) && unw_step(&cursor) > 0);
    }

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);

    if (n <= (int) skip_frames) {
        return;
    }

    count = 0;

    for (i = 0; i < leaf_count; i++) {
        s->idle_frames[count++] = leaf_frames[i];
    }

    for (i = skip_frames; i < (unsigned) n && count < max; i++) {
        s->idle_frames[count++] = frames[i];
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
        prof_signal_prepare_lua(lua);
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


uint32_t
prof_sampler_write_index(prof_sampler_t *s)
{
    /* The handler, on this thread, writes it. */
    return __atomic_load_n(&s->write_index, __ATOMIC_RELAXED);
}


prof_sampled_thread_t *
prof_sampler_sampled_thread(prof_sampler_t *s)
{
    return &s->sampled;
}



int
prof_sampler_turn_slow(prof_sampler_t *s, uint64_t ticks, int64_t now_ns)
{
    prof_sampled_thread_t  *h = &s->sampled;

    if (prof_sampler_left_table(h)) {
        prof_sampler_maintain_table(s, now_ns);
    }

    prof_sampler_rearm(h);

    return ticks > h->stall_threshold_ticks;
}


int64_t
prof_sampler_turn_ended(prof_sampler_t *s, uint64_t ticks)
{
    int64_t                 now_ns, length_ns;
    uint64_t                now_tsc;
    prof_sampled_thread_t  *h = &s->sampled;

    /* A TSC behind on another core: no turn to speak of. */
    if (h->stall_ns <= 0 || ticks > UINT64_MAX / 2) {
        return 0;
    }

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    now_tsc = prof_arch_ticks();

    length_ns = prof_ticks_ns(h, ticks, now_ns, now_tsc);

    if (h->stall_threshold_ticks == 0) {
        prof_sampler_calibrate(h, now_ns, now_tsc);
    }

    return (length_ns >= h->stall_ns) ? length_ns : 0;
}
