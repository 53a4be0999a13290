/*
 * Sampler: the SIGPROF handler that unwinds the sampled thread into a ring
 * of preallocated slots, and the sampler thread that turns slots and clock
 * readings into CPU and wall samples.
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
#include <ucontext.h>
#include <unistd.h>

#include "endpoint_counts.h"
#include "sampler.h"
#include "thread.h"
#include "unwind.h"


/* The handler's own frames (handler, signal trampoline) come first. */
#define PROF_HANDLER_FRAMES_MAX   8

/* Slots between the handler and the sampler thread (a power of two). */
#define PROF_SLOTS                32

/*
 * While the thread is parked in its event wait, the sampler ticks less
 * often (each idle sample then covers several intervals), at most this
 * long and at most PROF_IDLE_TICKS intervals: should the thread run
 * meanwhile, its CPU timer fills at most one slot an interval, and the
 * ring holds more than that.
 */
#define PROF_IDLE_TICK_NS         (250 * 1000 * 1000LL)
#define PROF_IDLE_TICKS           (PROF_SLOTS - 7)

/* How often the sampler looks for objects loaded after its unwind table. */
#define PROF_TABLE_CHECK_NS       (1000 * 1000 * 1000LL)

/* How long the sampler waits for a stack it asked for. */
#define PROF_REQUEST_WAIT_NS      (1000 * 1000 * 1000LL)
#define PROF_REQUEST_WAIT_STEP_NS (10 * 1000 * 1000LL)

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id    _sigev_un._tid
#endif


enum {
    PROF_SLOT_FREE = 0,
    PROF_SLOT_READY
};


/* Written by the handler while FREE, read by the sampler once READY. */
typedef struct {
    uint32_t                state;
    uint32_t                requested;      /* 0: CPU timer, 1: tgkill */
    uint32_t                weight;         /* 1 + timer overruns */
    int                     frame_count;
    int64_t                 entry_ns;
    int64_t                 handler_ns;
    prof_request_context_t  request;
    void                   *frames[PROF_MAX_FRAMES_LIMIT
                                   + PROF_HANDLER_FRAMES_MAX + 1];
} prof_slot_t;


/* A stack kept by the sampler thread for wall samples. */
typedef struct {
    unsigned                frame_count;
    prof_request_context_t  request;
    uint64_t                frames[PROF_MAX_FRAMES_LIMIT];
} prof_stack_t;


struct prof_sampler_s {
    prof_sampler_conf_t     conf;
    pid_t                   pid;
    pid_t                   tid;            /* the sampled thread */
    clockid_t               cpu_clock;      /* its CPU clock */
    timer_t                 cpu_timer;
    uv_thread_t             thread;
    struct sigaction        saved_action;
    uintptr_t               stack_low;      /* the sampled thread's stack */
    uintptr_t               stack_high;

    /* built and replaced by the sampler thread, read by the handler;
       in_handler tells when an old table may be freed */
    prof_unwind_table_t    *table;
    prof_unwind_table_t    *borrowed;       /* conf's table: not freed */
    uint32_t                in_handler;
    uint32_t                unknown_pcs;    /* handler: walks that left
                                               every object of the table */

    /* written by the sampled thread, read by the sampler thread */
    uint32_t                wake;           /* futex word: stop, flush */
    int                     stop;
    uint32_t                flush_requests;
    prof_endpoint_counts_t *flush_counts;   /* for the next barrier */
    int                     waiting;
    int                     idle_stack_ready;
    prof_stack_t            idle_stack;

    /* the published request context (NULL: none), owned by the sampled
       thread and left unchanged while published; the handler copies it.
       kept: a copy the sampler owns, for a context about to be freed */
    const prof_request_context_t  *published;
    prof_request_context_t  kept;

    /* the ring: the handler writes slots[write_index], the sampler thread
       reads slots[read_index]; requests/served count tgkill requests */
    prof_slot_t             slots[PROF_SLOTS];
    uint32_t                write_index;    /* handler only */
    uint32_t                read_index;     /* sampler thread only */
    uint32_t                requests;       /* sampler thread writes */
    uint32_t                served;         /* futex word, handler writes */
    uint64_t                ring_full;      /* samples lost, handler */

    /* sampler thread only */
    uint32_t                flushes_done;
    uint32_t                unknown_pcs_seen;
    int64_t                 table_checked_ns;
    prof_batch_t           *batch;
    int64_t                 last_wall_ns;
    int64_t                 last_cpu_ns;
    int64_t                 pending_wall_ns;
    int64_t                 pending_off_cpu_ns;
    int64_t                 last_push_ns;
    int                     stretched;      /* this tick began idle */
    prof_stack_t            last_stack;     /* of the last CPU sample */
    prof_stack_t            requested_stack;
};


static prof_sampler_t  *prof_sampler_active;


static int64_t
prof_clock_ns(clockid_t clock)
{
    struct timespec  ts;

    if (clock_gettime(clock, &ts) != 0) {
        return -1;
    }

    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}


static long
prof_futex(uint32_t *word, int op, uint32_t value,
    const struct timespec *timeout)
{
    return syscall(SYS_futex, word, op, value, timeout, NULL,
                   FUTEX_BITSET_MATCH_ANY);
}


/*
 * libunwind's unw_backtrace from inside the handler: slower (a DWARF step
 * for frames its cache does not know, a loader lock for code it has not
 * seen), for the stacks the table cannot walk. Its frames start with the
 * handler's own: they are dropped.
 */
static int
prof_sampler_unwind_slow(ucontext_t *uc, void **frames, int max)
{
    int    i, n, first, count;
    void  *pc;

    n = unw_backtrace(frames, max + PROF_HANDLER_FRAMES_MAX);

    pc = (void *) uc->uc_mcontext.gregs[REG_RIP];
    first = (n > 2) ? 2 : n;

    for (i = 0; i < n && i < PROF_HANDLER_FRAMES_MAX; i++) {
        if (frames[i] == pc) {
            first = i;
            break;
        }
    }

    count = n - first;
    if (count > max) {
        count = max;
    }

    if (count > 0 && first > 0) {
        memmove(frames, frames + first, count * sizeof(void *));
    }

    return (count > 0) ? count : 0;
}


/* The interrupted thread's stack, at most max frames. Signal-safe. */
static int
prof_sampler_unwind(prof_sampler_t *s, ucontext_t *uc, void **frames,
    int max)
{
    int                   count;
    prof_unwind_regs_t    regs;
    prof_unwind_table_t  *t;
    prof_unwind_status_e  status;

    __atomic_store_n(&s->in_handler, 1, __ATOMIC_SEQ_CST);
    t = __atomic_load_n(&s->table, __ATOMIC_SEQ_CST);

    status = PROF_UNWIND_NO_RULE;

    if (t != NULL) {
        regs.pc = uc->uc_mcontext.gregs[REG_RIP];
        regs.sp = uc->uc_mcontext.gregs[REG_RSP];
        regs.fp = uc->uc_mcontext.gregs[REG_RBP];
        regs.stack_low = s->stack_low;
        regs.stack_high = s->stack_high;

        status = prof_unwind(t, &regs, frames, max, &count);
    }

    __atomic_store_n(&s->in_handler, 0, __ATOMIC_RELEASE);

    if (status == PROF_UNWIND_END || status == PROF_UNWIND_FULL) {
        return count;
    }

    if (status == PROF_UNWIND_NO_OBJECT) {
        __atomic_fetch_add(&s->unknown_pcs, 1, __ATOMIC_RELAXED);
    }

    prof_counter_add(s->conf.diagnostics->slow_unwinds, 1);

    return prof_sampler_unwind_slow(uc, frames, max);
}


/* Async-signal-safe: runs on the sampled thread, never reentered. */
static void
prof_sampler_on_signal(int signo, siginfo_t *info, void *context)
{
    int                            saved_errno, max, count, requested;
    ucontext_t                    *uc = context;
    const prof_request_context_t  *published;
    prof_slot_t     *slot;
    prof_sampler_t  *s;

    s = __atomic_load_n(&prof_sampler_active, __ATOMIC_ACQUIRE);
    if (s == NULL) {
        return;
    }

    if (info->si_code == SI_TIMER && info->si_value.sival_ptr == s) {
        requested = 0;

    } else if (info->si_code == SI_TKILL && info->si_pid == s->pid
               && __atomic_load_n(&s->requests, __ATOMIC_ACQUIRE)
                  != s->served)
    {
        requested = 1;

    } else {
        return;
    }

    saved_errno = errno;

    slot = &s->slots[s->write_index & (PROF_SLOTS - 1)];

    if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) != PROF_SLOT_FREE) {
        __atomic_fetch_add(&s->ring_full, 1, __ATOMIC_RELAXED);
        goto done;
    }

    slot->entry_ns = prof_clock_ns(CLOCK_MONOTONIC);
    slot->requested = requested;
    slot->weight = requested ? 0 : 1 + (info->si_overrun > 0
                                        ? info->si_overrun : 0);

    max = s->conf.max_frames;
    count = prof_sampler_unwind(s, uc, slot->frames, max + 1);

    if (count > max) {
        slot->frames[max - 1] = (void *) PROF_FRAME_TRUNCATED;
        count = max;
    }

    slot->frame_count = (count > 0) ? count : 0;

    published = __atomic_load_n(&s->published, __ATOMIC_RELAXED);
    if (published != NULL) {
        slot->request = *published;

    } else {
        slot->request.span_id = 0;
        slot->request.endpoint_length = 0;
    }

    slot->handler_ns = prof_clock_ns(CLOCK_MONOTONIC) - slot->entry_ns;

    __atomic_store_n(&slot->state, PROF_SLOT_READY, __ATOMIC_RELEASE);
    s->write_index++;

done:

    if (requested) {
        __atomic_store_n(&s->served, s->requests, __ATOMIC_RELEASE);
        (void) prof_futex(&s->served, FUTEX_WAKE_PRIVATE, 1, NULL);
    }

    errno = saved_errno;
}


/* Counts that will not be sent: their requests are counted as dropped. */
static void
prof_sampler_drop_counts(prof_sampler_t *s, prof_endpoint_counts_t *counts)
{
    /* Those the table had no room for were counted when handed over. */
    if (counts != NULL) {
        prof_counter_add(s->conf.diagnostics->endpoints_dropped,
                         counts->requests - counts->dropped);
        prof_endpoint_counts_free(counts);
    }
}


/* Counts handed over: those their table had no room for are dropped. */
static void
prof_sampler_take_counts(prof_sampler_t *s, prof_endpoint_counts_t *counts)
{
    prof_endpoint_counts_t  *stale;

    if (counts != NULL) {
        prof_counter_add(s->conf.diagnostics->endpoints_dropped,
                         counts->dropped);
    }

    /* Counts not taken yet (the sampler is late): the newer replace them. */
    stale = __atomic_exchange_n(&s->flush_counts, counts, __ATOMIC_ACQ_REL);
    prof_sampler_drop_counts(s, stale);
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


/* 0: recorded; -1: dropped (and counted). */
static int
prof_sampler_append(prof_sampler_t *s, const prof_sample_t *values,
    const uint64_t *frames, const prof_request_context_t *request,
    int64_t now_ns)
{
    size_t               size;
    unsigned             endpoint_length;
    unsigned char       *p;
    prof_sample_t       *sample;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    if (request != NULL && request->span_id == 0
        && request->endpoint_length == 0)
    {
        request = NULL;
    }

    endpoint_length = (request != NULL) ? request->endpoint_length : 0;
    if (endpoint_length > PROF_ENDPOINT_MAX) {
        endpoint_length = PROF_ENDPOINT_MAX;
    }

    size = prof_sample_size(values->frame_count, endpoint_length);

    p = prof_sampler_reserve(s, size, now_ns);
    if (p == NULL) {
        prof_counter_add(d->dropped_samples, 1);
        return -1;
    }

    sample = (prof_sample_t *) p;
    *sample = *values;
    sample->endpoint_length = endpoint_length;
    sample->span_id = (request != NULL) ? request->span_id : 0;
    sample->local_root_span_id = (request != NULL)
                                 ? request->local_root_span_id : 0;

    memcpy(p + sizeof(prof_sample_t), frames,
           values->frame_count * sizeof(uint64_t));

    if (endpoint_length > 0) {
        memcpy(p + sizeof(prof_sample_t)
               + values->frame_count * sizeof(uint64_t),
               request->endpoint, endpoint_length);
    }

    s->batch->used += size;
    s->batch->sample_count++;

    prof_counter_add(d->samples_recorded, 1);

    return 0;
}


static void
prof_stack_from_slot(prof_stack_t *stack, const prof_slot_t *slot)
{
    stack->frame_count = slot->frame_count;
    stack->request = slot->request;
    memcpy(stack->frames, slot->frames, slot->frame_count * sizeof(void *));
}


/*
 * Takes the stacks the handler left in the ring: CPU samples, and the
 * stack asked for by tgkill (into requested_stack; returns 1 then).
 */
static int
prof_sampler_drain_ring(prof_sampler_t *s, int64_t now_ns,
    unsigned *cpu_samples)
{
    int                  got_requested;
    prof_slot_t         *slot;
    prof_sample_t        values;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    got_requested = 0;

    for ( ;; ) {
        slot = &s->slots[s->read_index & (PROF_SLOTS - 1)];

        if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE)
            != PROF_SLOT_READY)
        {
            break;
        }

        prof_histogram_add(&d->handler_ns, slot->handler_ns);

        if (slot->frame_count > 0
            && slot->frames[slot->frame_count - 1]
               == (void *) PROF_FRAME_TRUNCATED)
        {
            prof_counter_add(d->truncated_stacks, 1);
        }

        if (slot->requested) {
            prof_stack_from_slot(&s->requested_stack, slot);
            got_requested = 1;

        } else {
            memset(&values, 0, sizeof(values));
            values.cpu_ns = s->conf.interval_ns * slot->weight;
            values.cpu_samples = 1;
            values.frame_count = slot->frame_count;

            (void) prof_sampler_append(s, &values,
                                       (const uint64_t *) slot->frames,
                                       &slot->request, now_ns);
            prof_stack_from_slot(&s->last_stack, slot);
            (*cpu_samples)++;
        }

        __atomic_store_n(&slot->state, PROF_SLOT_FREE, __ATOMIC_RELEASE);
        s->read_index++;
    }

    return got_requested;
}


/*
 * Asks the handler for the sampled thread's stack; 1 when it came. The
 * signal is sent again at every step: a SIGPROF already pending (from the
 * CPU timer) would have absorbed it.
 */
static int
prof_sampler_request_stack(prof_sampler_t *s, int64_t now_ns,
    unsigned *cpu_samples)
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
        if (syscall(SYS_tgkill, s->pid, s->tid, SIGPROF) != 0) {
            __atomic_store_n(&s->served, request, __ATOMIC_RELEASE);
            prof_counter_add(d->signal_failures, 1);
            break;
        }

        prof_counter_add(d->signals_sent, 1);

        served = __atomic_load_n(&s->served, __ATOMIC_ACQUIRE);
        if (served == request) {
            break;
        }

        (void) prof_futex(&s->served, FUTEX_WAIT_PRIVATE, served, &step);

        if (__atomic_load_n(&s->served, __ATOMIC_ACQUIRE) == request
            || __atomic_load_n(&s->stop, __ATOMIC_RELAXED))
        {
            break;
        }
    }

    return prof_sampler_drain_ring(s, now_ns, cpu_samples);
}


/* A wall sample; a stretched tick counts for the intervals it covers. */
static void
prof_sampler_record_wall(prof_sampler_t *s, const prof_stack_t *stack,
    int64_t wall_ns, int64_t off_cpu_ns, int64_t now_ns, int ends_tick)
{
    int64_t              ticks;
    prof_sample_t        values;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    ticks = (wall_ns + s->conf.interval_ns / 2) / s->conf.interval_ns;

    memset(&values, 0, sizeof(values));
    values.wall_ns = wall_ns;
    values.off_cpu_ns = off_cpu_ns;
    values.wall_samples = (ticks > 1) ? (ticks < 0xffff ? ticks : 0xffff) : 1;
    values.frame_count = stack->frame_count;

    /* A tick ends as one wall sample, recorded or dropped. */
    if (prof_sampler_append(s, &values, stack->frames, &stack->request,
                            now_ns) == 0)
    {
        prof_counter_add(d->wall_samples, ends_tick);

    } else {
        prof_counter_add(d->wall_dropped, ends_tick);
    }
}


/* Returns 1 when the tick found the thread idle in its event wait. */
static int
prof_sampler_tick(prof_sampler_t *s, int64_t now_ns)
{
    int                  idle;
    int64_t              cpu_ns, wall_ns, off_cpu_ns;
    unsigned             cpu_samples;
    prof_stack_t        *stack;
    prof_diagnostics_t  *d = s->conf.diagnostics;

    prof_counter_add(d->ticks, 1);

    cpu_ns = prof_clock_ns(s->cpu_clock);
    if (cpu_ns < 0) {
        prof_counter_add(d->clock_failures, 1);
        return 0;
    }

    idle = 0;
    wall_ns = now_ns - s->last_wall_ns;
    off_cpu_ns = wall_ns - (cpu_ns - s->last_cpu_ns);
    s->pending_wall_ns += wall_ns;
    s->pending_off_cpu_ns += (off_cpu_ns > 0) ? off_cpu_ns : 0;
    s->last_cpu_ns = cpu_ns;
    s->last_wall_ns = now_ns;

    cpu_samples = 0;
    (void) prof_sampler_drain_ring(s, now_ns, &cpu_samples);

    if (cpu_samples > 0) {
        /* It ran in this tick: the wall time goes where it ran last. */
        stack = &s->last_stack;

        /*
         * A stretched tick began in the event wait: its off-CPU time was
         * spent there, not where the thread ran at the end.
         */
        if (s->stretched && s->pending_off_cpu_ns > 0
            && __atomic_load_n(&s->idle_stack_ready, __ATOMIC_ACQUIRE))
        {
            prof_sampler_record_wall(s, &s->idle_stack,
                                     s->pending_off_cpu_ns,
                                     s->pending_off_cpu_ns, now_ns, 0);
            s->pending_wall_ns -= s->pending_off_cpu_ns;
            s->pending_off_cpu_ns = 0;
        }

    } else if (__atomic_load_n(&s->waiting, __ATOMIC_RELAXED)
               && __atomic_load_n(&s->idle_stack_ready, __ATOMIC_ACQUIRE))
    {
        /* Parked in the event wait: no signal, no wake-up. */
        prof_counter_add(d->idle_samples, 1);
        stack = &s->idle_stack;
        idle = 1;

    } else if (prof_sampler_request_stack(s, now_ns, &cpu_samples)) {
        stack = &s->requested_stack;

    } else {
        /* Not scheduled in time: the wall time goes with the next one. */
        prof_counter_add(d->ticks_merged, 1);
        return 0;
    }

    prof_sampler_record_wall(s, stack, s->pending_wall_ns,
                             s->pending_off_cpu_ns, now_ns, 1);

    s->pending_wall_ns = 0;
    s->pending_off_cpu_ns = 0;

    return idle;
}


/*
 * Builds the unwind table again when the handler met code outside it and
 * objects were loaded since (checked at most once a PROF_TABLE_CHECK_NS).
 * The old table is freed once no handler uses it.
 */
static void
prof_sampler_update_table(prof_sampler_t *s, int64_t now_ns)
{
    uint32_t              unknown;
    struct timespec       pause;
    prof_unwind_table_t  *t, *old;

    if (now_ns - s->table_checked_ns < PROF_TABLE_CHECK_NS) {
        return;
    }

    unknown = __atomic_load_n(&s->unknown_pcs, __ATOMIC_RELAXED);
    if (unknown == s->unknown_pcs_seen) {
        return;
    }

    s->unknown_pcs_seen = unknown;
    s->table_checked_ns = now_ns;

    if (s->table != NULL
        && prof_unwind_loads_now() == prof_unwind_table_loads(s->table))
    {
        return;
    }

    t = prof_unwind_table_build();
    if (t == NULL) {
        return;
    }

    old = __atomic_exchange_n(&s->table, t, __ATOMIC_SEQ_CST);

    pause.tv_sec = 0;
    pause.tv_nsec = 100 * 1000;
    while (__atomic_load_n(&s->in_handler, __ATOMIC_SEQ_CST)) {
        (void) nanosleep(&pause, NULL);
    }

    if (old != s->borrowed) {
        prof_unwind_table_free(old);
    }

    prof_counter_add(s->conf.diagnostics->unwind_tables, 1);
    __atomic_store_n(&s->conf.diagnostics->unwind_table_bytes,
                     prof_unwind_table_bytes(t), __ATOMIC_RELAXED);
}


static void
prof_sampler_flush(prof_sampler_t *s, int64_t now_ns)
{
    prof_batch_t  *b;

    b = s->batch;
    if (b == NULL) {
        b = prof_queue_acquire(s->conf.queue);
    }
    if (b == NULL) {
        b = prof_queue_acquire_barrier(s->conf.queue);
    }
    if (b == NULL) {
        return;     /* no memory at all: the next barrier closes both */
    }

    b->flush_after = 1;
    b->flush_monotonic_ns = now_ns;
    b->flush_realtime_ns = prof_clock_ns(CLOCK_REALTIME);
    b->endpoint_counts = __atomic_exchange_n(&s->flush_counts, NULL,
                                             __ATOMIC_ACQ_REL);

    /*
     * At the ceiling (the loop thread is behind, its profiles lose samples
     * anyway) a barrier carries no counts: a stalled loop must not make
     * every period's table pile up.
     */
    if (b->capacity == 0) {
        prof_sampler_drop_counts(s, b->endpoint_counts);
        b->endpoint_counts = NULL;
    }

    s->batch = b;
    prof_sampler_push(s, now_ns);
}


static void
prof_sampler_main(void *arg)
{
    int               idle;
    prof_sampler_t   *s = arg;
    int64_t           next_ns, now_ns, idle_tick_ns;
    uint32_t          wake, flushes;
    struct timespec   deadline;

    prof_thread_settle("prof-sampler", 0);

    next_ns = s->last_wall_ns + s->conf.interval_ns;

    idle_tick_ns = s->conf.interval_ns * PROF_IDLE_TICKS;
    if (idle_tick_ns > PROF_IDLE_TICK_NS) {
        idle_tick_ns = PROF_IDLE_TICK_NS;
    }
    if (idle_tick_ns < s->conf.interval_ns) {
        idle_tick_ns = s->conf.interval_ns;
    }

    for ( ;; ) {
        wake = __atomic_load_n(&s->wake, __ATOMIC_ACQUIRE);

        if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
            break;
        }

        flushes = __atomic_load_n(&s->flush_requests, __ATOMIC_ACQUIRE);
        now_ns = prof_clock_ns(CLOCK_MONOTONIC);

        if (flushes != s->flushes_done) {
            s->flushes_done = flushes;
            s->stretched = prof_sampler_tick(s, now_ns);
            prof_sampler_flush(s, now_ns);
            continue;
        }

        if (now_ns < next_ns) {
            deadline.tv_sec = next_ns / 1000000000;
            deadline.tv_nsec = next_ns % 1000000000;
            (void) prof_futex(&s->wake, FUTEX_WAIT_BITSET_PRIVATE, wake,
                              &deadline);
            continue;
        }

        idle = prof_sampler_tick(s, now_ns);
        s->stretched = idle;
        prof_sampler_update_table(s, now_ns);

        if (s->batch != NULL && s->batch->sample_count > 0
            && now_ns - s->last_push_ns >= s->conf.push_every_ns)
        {
            prof_sampler_push(s, now_ns);
        }

        next_ns += idle ? idle_tick_ns : s->conf.interval_ns;
        if (next_ns <= now_ns) {
            next_ns = now_ns + s->conf.interval_ns;     /* fell behind */
        }
    }

    /* The last partial interval, then the final barrier. */

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    prof_sampler_tick(s, now_ns);
    prof_sampler_flush(s, now_ns);
}


static void
prof_sampler_wake(prof_sampler_t *s)
{
    __atomic_add_fetch(&s->wake, 1, __ATOMIC_RELEASE);
    (void) prof_futex(&s->wake, FUTEX_WAKE_PRIVATE, 1, NULL);
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

    if (timer_settime(s->cpu_timer, 0, &its, NULL) != 0) {
        (void) timer_delete(s->cpu_timer);
        return -errno;
    }

    return 0;
}


/* After the timer is gone: a SIGPROF still pending must not kill us. */
static void
prof_sampler_restore_signal(prof_sampler_t *s)
{
    struct sigaction  sa;

    if (s->saved_action.sa_handler == SIG_DFL
        && !(s->saved_action.sa_flags & SA_SIGINFO))
    {
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_IGN;
        (void) sigaction(SIGPROF, &sa, NULL);
        return;
    }

    (void) sigaction(SIGPROF, &s->saved_action, NULL);
}


/*
 * The stepping unwinder (libunwind's fallback when its fast trace cannot
 * follow a frame) keeps its per-thread cache in thread-local storage of a
 * dlopen()ed library, allocated on first use: touch it here, not in the
 * handler.
 */
static void
prof_sampler_warm_step(void)
{
    int           i;
    unw_cursor_t  cursor;
    unw_context_t context;

    if (unw_getcontext(&context) != 0
        || unw_init_local(&cursor, &context) != 0)
    {
        return;
    }

    for (i = 0; i < PROF_HANDLER_FRAMES_MAX && unw_step(&cursor) > 0; i++) {
        /* void */
    }
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


int
prof_sampler_start(prof_sampler_t **sampler, const prof_sampler_conf_t *conf)
{
    int               rc;
    void             *warm[PROF_HANDLER_FRAMES_MAX];
    prof_sampler_t   *s, *expected;
    struct sigaction  sa;

    if (conf->max_frames < 8 || conf->max_frames > PROF_MAX_FRAMES_LIMIT
        || conf->interval_ns <= 0)
    {
        return -EINVAL;
    }

    s = calloc(1, sizeof(prof_sampler_t));
    if (s == NULL) {
        return -ENOMEM;
    }

    s->conf = *conf;
    s->pid = getpid();
    s->tid = (pid_t) syscall(SYS_gettid);

    rc = pthread_getcpuclockid(pthread_self(), &s->cpu_clock);
    if (rc != 0) {
        free(s);
        return -rc;
    }

    rc = prof_sampler_stack_bounds(s);
    if (rc != 0) {
        free(s);
        return rc;
    }

    expected = NULL;
    if (!__atomic_compare_exchange_n(&prof_sampler_active, &expected, s, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    {
        free(s);
        return -EBUSY;
    }

    /*
     * A per-thread cache takes no lock and masks no signal in the handler;
     * libunwind sets it up on first use: do that here, outside the handler.
     */
    (void) unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    (void) unw_backtrace(warm, PROF_HANDLER_FRAMES_MAX);
    prof_sampler_warm_step();

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = prof_sampler_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);

    if (sigaction(SIGPROF, &sa, &s->saved_action) != 0) {
        rc = -errno;
        goto failed;
    }

    /* ~12 ms for nginx with the libraries of Debian's packages (its wall
       time goes to the first tick when the caller gave the start). */
    s->borrowed = conf->unwind_table;
    s->table = s->borrowed;

    if (s->table == NULL) {
        s->table = prof_unwind_table_build();
        if (s->table != NULL) {
            prof_counter_add(s->conf.diagnostics->unwind_tables, 1);
        }
    }

    if (s->table != NULL) {
        prof_counter_add(s->conf.diagnostics->unwind_table_bytes,
                         prof_unwind_table_bytes(s->table));
    }

    /* The clocks start where the caller's profile starts, if it says. */
    s->last_wall_ns = conf->start_monotonic_ns ? conf->start_monotonic_ns
                                               : prof_clock_ns(CLOCK_MONOTONIC);
    s->last_push_ns = prof_clock_ns(CLOCK_MONOTONIC);
    s->last_cpu_ns = conf->start_cpu_ns ? conf->start_cpu_ns
                                        : prof_clock_ns(s->cpu_clock);

    rc = prof_thread_create(&s->thread, prof_sampler_main, s);
    if (rc != 0) {
        prof_sampler_restore_signal(s);
        goto failed;
    }

    rc = prof_sampler_start_timer(s);
    if (rc != 0) {
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        prof_sampler_wake(s);
        (void) uv_thread_join(&s->thread);
        prof_sampler_restore_signal(s);
        if (s->batch != NULL) {
            prof_queue_release(s->conf.queue, s->batch);
        }
        goto failed;
    }

    *sampler = s;
    return 0;

failed:

    __atomic_store_n(&prof_sampler_active, NULL, __ATOMIC_RELEASE);
    if (s->table != s->borrowed) {
        prof_unwind_table_free(s->table);
    }
    free(s);
    return rc;
}


void
prof_sampler_stop(prof_sampler_t *s, prof_endpoint_counts_t *counts)
{
    (void) timer_delete(s->cpu_timer);

    /* They go with the final barrier. */
    prof_sampler_take_counts(s, counts);

    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    prof_sampler_wake(s);

    (void) uv_thread_join(&s->thread);

    prof_sampler_restore_signal(s);
    __atomic_store_n(&prof_sampler_active, NULL, __ATOMIC_RELEASE);

    prof_counter_add(s->conf.diagnostics->dropped_samples,
                     __atomic_load_n(&s->ring_full, __ATOMIC_RELAXED));

    if (s->batch != NULL) {
        prof_queue_release(s->conf.queue, s->batch);
    }

    prof_sampler_drop_counts(s, s->flush_counts);
    if (s->table != s->borrowed) {
        prof_unwind_table_free(s->table);
    }
    free(s);
}


void
prof_sampler_request_flush(prof_sampler_t *s,
    prof_endpoint_counts_t *counts)
{
    prof_sampler_take_counts(s, counts);

    __atomic_add_fetch(&s->flush_requests, 1, __ATOMIC_RELEASE);
    prof_sampler_wake(s);
}


void
prof_sampler_set_waiting(prof_sampler_t *s, int waiting)
{
    __atomic_store_n(&s->waiting, waiting, __ATOMIC_RELAXED);
}


void
prof_sampler_capture_idle_stack(prof_sampler_t *s,
    const uint64_t *leaf_frames, unsigned leaf_count, unsigned skip_frames)
{
    int       n;
    unsigned  i, count, max;
    void     *frames[PROF_MAX_FRAMES_LIMIT + 1 + PROF_HANDLER_FRAMES_MAX];

    max = s->conf.max_frames;
    if (leaf_count >= max || skip_frames > PROF_HANDLER_FRAMES_MAX) {
        return;
    }

    n = unw_backtrace(frames, max + 1 + skip_frames);
    if (n <= (int) skip_frames) {
        return;
    }

    count = 0;

    for (i = 0; i < leaf_count; i++) {
        s->idle_stack.frames[count++] = leaf_frames[i];
    }

    for (i = skip_frames; i < (unsigned) n && count < max; i++) {
        s->idle_stack.frames[count++] = (uint64_t) (uintptr_t) frames[i];
    }

    if (i < (unsigned) n) {
        s->idle_stack.frames[max - 1] = PROF_FRAME_TRUNCATED;
    }

    s->idle_stack.frame_count = count;
    s->idle_stack.request.span_id = 0;
    s->idle_stack.request.endpoint_length = 0;

    __atomic_store_n(&s->idle_stack_ready, 1, __ATOMIC_RELEASE);
}


void
prof_sampler_request_enter(prof_sampler_t *s,
    const prof_request_context_t *ctx)
{
    /* The handler runs on this thread: a compiler fence is enough. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&s->published, ctx, __ATOMIC_RELAXED);
}


void
prof_sampler_request_keep(prof_sampler_t *s)
{
    const prof_request_context_t  *ctx;

    ctx = __atomic_load_n(&s->published, __ATOMIC_RELAXED);
    if (ctx == NULL || ctx == &s->kept) {
        return;
    }

    s->kept = *ctx;
    prof_sampler_request_enter(s, &s->kept);
}


void
prof_sampler_request_leave(prof_sampler_t *s)
{
    __atomic_store_n(&s->published, NULL, __ATOMIC_RELAXED);
}
