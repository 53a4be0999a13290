/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the sampler (shared/worker/sampler.h and
 * shared/profiler/ring_drain.h) with real signals and threads: CPU
 * samples where the thread burns CPU, wall time accounted on the thread
 * itself (the event wait's without a wake-up, a blocked thread's asked
 * for), flush barriers, and SIGPROF signals the sampler did not arm.
 */

#define _GNU_SOURCE

#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <cmocka.h>

#include "common/clock.h"
#include "channel/endpoint_counts.h"
#include "channel/lua_frames.h"
#include "channel/sampler_state.h"
#include "worker/lua_guard.h"
#include "worker/sampler.h"
#include "profiler/remote_stack.h"
#include "profiler/ring_drain.h"
#include "profiler/symbolizer.h"


#define INTERVAL_NS  (10 * 1000 * 1000LL)
#define IDLE_LEAF    0x1234         /* the idle stack's made-up leaf */


typedef struct {
    prof_queue_t        queue;
    prof_diagnostics_t  diagnostics;
    prof_sampler_t     *sampler;
    prof_ring_drain_t  *drain;
    int64_t             started_ns;     /* before prof_sampler_start */
} fixture_t;


typedef struct {
    int64_t   cpu_ns;
    int64_t   wall_ns;
    unsigned  cpu_samples;
    unsigned  wall_samples;
    unsigned  cpu_samples_in_burn;  /* of cpu_samples: intervals, as a
                                       sample stands for every expiration
                                       of the timer since the last one
                                       (several on a busy machine) */
    unsigned  barriers;
    unsigned  samples_after_last_barrier;
    int64_t   wall_ns_idle;         /* at the IDLE_LEAF stack */
    int64_t   wall_ns_in_burn;
    int64_t   wall_ns_in_sleep;     /* stacks through test_sampler_sleep */
    uint64_t   periods[8];          /* closed by each barrier */
} totals_t;


__attribute__((noinline)) uint64_t
test_sampler_burn(int64_t ns)
{
    int64_t   end;
    uint64_t  x = 88172645463325252ULL;

    end = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;

    while (prof_clock_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    }

    return x;
}


/*
 * Burns CPU time until a sample takes a tag for what runs, at most 2 s of
 * it (the timer's expirations may come late on a busy machine): the tag.
 */
static uint64_t
burn_until_pending(prof_sampled_thread_t *sampled)
{
    int64_t  deadline;

    deadline = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID) + 2000 * 1000 * 1000LL;

    do {
        (void) test_sampler_burn(10 * 1000 * 1000LL);
    } while (prof_pending_tag(sampled) == 0
             && prof_clock_ns(CLOCK_THREAD_CPUTIME_ID) < deadline);

    return prof_pending_tag(sampled);
}


static int
setup(void **state)
{
    fixture_t               *f;
    prof_sampler_conf_t      conf;
    prof_ring_drain_conf_t   dc;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);
    assert_int_equal(prof_queue_init(&f->queue, 64 * 1024, 4 * 1024 * 1024,
                                     4), 0);

    memset(&conf, 0, sizeof(conf));
    conf.interval_ns = INTERVAL_NS;
    conf.max_frames = 64;
    conf.diagnostics = &f->diagnostics;

    memset(&dc, 0, sizeof(dc));
    dc.push_every_ns = 50 * 1000 * 1000LL;
    dc.queue = &f->queue;

    f->started_ns = prof_clock_ns(CLOCK_MONOTONIC);
    assert_int_equal(prof_sampler_start(&f->sampler, &conf), 0);
    assert_int_equal(prof_ring_drain_start(&f->drain, f->sampler, &dc), 0);

    *state = f;
    return 0;
}


/* Both sides' ends, in this process. */
static void
stop_sampler(fixture_t *f, uint64_t period)
{
    prof_sampler_stop(f->sampler, period);
    prof_ring_drain_finish(f->drain);
    prof_sampler_release(f->sampler);
    f->sampler = NULL;
    f->drain = NULL;
}


static int
teardown(void **state)
{
    fixture_t  *f = *state;

    if (f->sampler != NULL) {
        stop_sampler(f, 0);
    }

    prof_queue_destroy(&f->queue);
    free(f);
    return 0;
}


/*
 * Whether the stack goes through [start, end): the leaf is there without
 * sanitizers; ThreadSanitizer delivers signals at its interceptors, so the
 * burn is then a caller.
 */
static int
in_range(const prof_sample_t *s, uint64_t start, uint64_t end)
{
    unsigned  i;

    for (i = 0; i < s->frame_count; i++) {
        if (prof_sample_frames(s)[i] >= start
            && prof_sample_frames(s)[i] <= end)
        {
            return 1;
        }
    }

    return 0;
}


/* The range of test_sampler_sleep, when a test sets it. */
static uint64_t  sleep_start, sleep_end;


static void
collect(fixture_t *f, totals_t *t, uint64_t burn_start, uint64_t burn_end)
{
    size_t                offset;
    uint32_t              i;
    prof_batch_t         *b, *next;
    const prof_sample_t  *s;

    for (b = prof_queue_pop_all(&f->queue); b != NULL; b = next) {
        next = b->next;
        offset = 0;

        for (i = 0; i < b->sample_count; i++) {
            s = (const prof_sample_t *) (b->data + offset);
            offset += prof_sample_size(s->frame_count);

            t->cpu_ns += s->cpu_ns;
            t->wall_ns += s->wall_ns;
            t->cpu_samples += s->cpu_samples;
            t->wall_samples += s->wall_samples;
            t->samples_after_last_barrier++;

            if (s->frame_count > 0 && prof_sample_frames(s)[0] == IDLE_LEAF) {
                t->wall_ns_idle += s->wall_ns;

            } else if (in_range(s, burn_start, burn_end)) {
                t->wall_ns_in_burn += s->wall_ns;

            } else if (in_range(s, sleep_start, sleep_end)) {
                t->wall_ns_in_sleep += s->wall_ns;
            }

            if (in_range(s, burn_start, burn_end)) {
                t->cpu_samples_in_burn += s->cpu_samples;
            }
        }

        if (b->flush_after) {
            if (t->barriers < 8) {
                t->periods[t->barriers] = b->flush_period;
            }
            t->barriers++;
            t->samples_after_last_barrier = 0;
        }

        prof_queue_release(&f->queue, b);
    }
}


/* Sleeps a signal ended early (EINTR), counted. */
static unsigned  sleeps_interrupted;


/* Blocked outside any event wait: off CPU, not waiting. */
__attribute__((noinline)) void
test_sampler_sleep(int64_t ns)
{
    struct timespec  pause;

    pause.tv_sec = ns / 1000000000;
    pause.tv_nsec = ns % 1000000000;

    while (nanosleep(&pause, &pause) != 0) {
        sleeps_interrupted++;       /* interrupted: the rest */
    }

    __asm__ volatile ("" ::: "memory");
}


/* The address range of a function of this program, from the symbolizer. */
static void
function_range(void *f, const char *fname, uint64_t *start, uint64_t *end)
{
    uint64_t              pc;
    const char           *name;
    prof_symbolizer_t    *sym;
    const prof_object_t  *obj;

    sym = prof_symbolizer_create();
    assert_non_null(sym);

    pc = (uint64_t) (uintptr_t) f;
    obj = prof_symbolize(sym, pc, &name);
    assert_non_null(obj);
    assert_string_equal(name, fname);

    /* Scan forward to where the symbol ends. */
    *start = pc;
    *end = pc;
    while (prof_symbolize(sym, *end, &name) != NULL && name != NULL
           && strcmp(name, fname) == 0)
    {
        (*end)++;
    }

    prof_symbolizer_destroy(sym);
}


static void
burn_range(uint64_t *start, uint64_t *end)
{
    function_range(test_sampler_burn, "test_sampler_burn", start, end);
}


static void
test_cpu_samples_land_where_cpu_is_burned(void **state)
{
    fixture_t  *f = *state;
    totals_t    t;
    int64_t     cpu0, cpu1, used, wall;
    uint64_t    start, end;

    burn_range(&start, &end);

    wall = prof_clock_ns(CLOCK_MONOTONIC);
    cpu0 = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    (void) test_sampler_burn(400 * 1000 * 1000LL);
    cpu1 = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    wall = prof_clock_ns(CLOCK_MONOTONIC) - wall;
    used = cpu1 - cpu0;

    stop_sampler(f, 0);
    f->sampler = NULL;

    memset(&t, 0, sizeof(t));
    collect(f, &t, start, end);

    /*
     * 400 ms at 10 ms of CPU each: about 40 intervals, most in the burn;
     * CPU time is interval * expirations: within two intervals. A thread
     * that waited for a CPU (other processes on it) gets its timer's
     * expirations late and together, and the kernel loses some of them:
     * then only the upper bound holds.
     */
    if (wall < used * 3 / 2) {
        assert_true(t.cpu_samples >= 30);
        assert_true(t.cpu_ns >= used - 2 * INTERVAL_NS);

    } else {
        print_message("a busy CPU: %lld ms of CPU time in %lld ms, %lld ms "
                      "sampled\n", (long long) used / 1000000,
                      (long long) wall / 1000000,
                      (long long) t.cpu_ns / 1000000);
    }

    assert_true(t.cpu_samples_in_burn * 10 >= t.cpu_samples * 8);
    assert_true(t.cpu_ns <= cpu1 - cpu0 + 3 * INTERVAL_NS);

    /* The stop closes the stream with a barrier after the last sample. */
    assert_true(t.barriers >= 1);
    assert_int_equal(t.samples_after_last_barrier, 0);
}


/*
 * A thread parked in its event wait gets no signal, and the sampler
 * thread takes nothing of it: the time is accounted when it comes back
 * (here, at the stop), at the wait's stack.
 */
static void
test_idle_thread_gets_no_signal(void **state)
{
    fixture_t           *f = *state;
    totals_t             t;
    uint64_t             leaf = IDLE_LEAF, cpu_samples;
    int64_t              start, end, deadline, cpu0, cpu1;
    prof_sampled_thread_t  *sampled;

    sampled = prof_sampler_sampled_thread(f->sampler);
    start = prof_clock_ns(CLOCK_MONOTONIC);
    cpu0 = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    prof_sampler_capture_idle_stack(f->sampler, &leaf, 1, 0);

    /*
     * (The capture may cost an interval of CPU: under an emulator.) What
     * it got drained before counting from here.
     */
    deadline = prof_clock_ns(CLOCK_MONOTONIC) + 5000 * 1000 * 1000LL;
    while (__atomic_load_n(&f->sampler->read_index, __ATOMIC_ACQUIRE)
           != __atomic_load_n(&f->sampler->write_index, __ATOMIC_ACQUIRE))
    {
        assert_true(prof_clock_ns(CLOCK_MONOTONIC) < deadline);
        sched_yield();
    }
    cpu_samples = prof_counter_get(f->diagnostics.cpu_samples);
    cpu1 = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);

    prof_wait_begin(sampled);
    test_sampler_sleep(300 * 1000 * 1000LL);
    prof_wait_end(sampled);

    assert_int_equal(prof_counter_get(f->diagnostics.signals_sent), 0);
    assert_int_equal(prof_counter_get(f->diagnostics.cpu_samples),
                     cpu_samples);

    stop_sampler(f, 0);
    f->sampler = NULL;
    end = prof_clock_ns(CLOCK_MONOTONIC);

    memset(&t, 0, sizeof(t));
    collect(f, &t, 0, 0);

    /* The wall time of the pause is all there, at the wait, no CPU (but
       the capture's, and the sampler's start's). */
    assert_true(t.wall_ns_idle >= 300 * 1000 * 1000LL);
    assert_true(t.wall_ns <= end - start + INTERVAL_NS);
    assert_true(t.cpu_ns <= cpu1 - cpu0 + 2 * INTERVAL_NS);
    assert_true(t.wall_samples >= 28 && t.wall_samples <= 45);
}


/*
 * The thread waited, then burned CPU: the wait's time goes to the wait,
 * not to where it burned CPU when the signal came.
 */
static void
test_wake_up_after_idle_splits_the_time(void **state)
{
    fixture_t           *f = *state;
    totals_t             t;
    uint64_t             leaf = IDLE_LEAF, start, end, burn_start, burn_end;
    prof_sampled_thread_t  *sampled;

    burn_range(&start, &end);

    sampled = prof_sampler_sampled_thread(f->sampler);
    prof_sampler_capture_idle_stack(f->sampler, &leaf, 1, 0);
    prof_wait_begin(sampled);
    test_sampler_sleep(600 * 1000 * 1000LL);
    prof_wait_end(sampled);

    burn_start = prof_clock_ns(CLOCK_MONOTONIC);
    test_sampler_burn(40 * 1000 * 1000LL);

    stop_sampler(f, 0);
    f->sampler = NULL;
    burn_end = prof_clock_ns(CLOCK_MONOTONIC);

    memset(&t, 0, sizeof(t));
    collect(f, &t, start, end);

    print_message("wall: %lld ms in the wait, %lld ms burning 40 ms of CPU "
                  "in %lld ms\n", (long long) t.wall_ns_idle / 1000000,
                  (long long) t.wall_ns_in_burn / 1000000,
                  (long long) (burn_end - burn_start) / 1000000);

    /* On a busy machine the burn takes longer than its CPU time: the wall
       time it may have is its own, never the wait's. */
    assert_true(t.wall_ns_idle >= 550 * 1000 * 1000LL);
    assert_true(t.wall_ns_in_burn
                <= (int64_t) (burn_end - burn_start) + 4 * INTERVAL_NS);
}


/*
 * Whether a thread's system call is read from /proc as the profiler
 * process reads it: the calling thread's own, reading its file, is read(2)
 * on its stack (not under qemu-user, which shows its own).
 */
static int
syscalls_readable(void)
{
    int                  fd, here;
    char                 path[64], buf[256];
    ssize_t              n;
    prof_syscall_regs_t  regs;

    (void) snprintf(path, sizeof(path), "/proc/self/task/%d/syscall",
                    (int) syscall(SYS_gettid));

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }

    n = read(fd, buf, sizeof(buf));
    (void) close(fd);

    return n > 0 && prof_syscall_regs_parse(buf, (size_t) n, &regs) == 0
           && regs.nr == SYS_read && regs.sp > (uintptr_t) &here - 65536
           && regs.sp < (uintptr_t) &here + 65536;
}


/*
 * Blocked outside its event wait (a sleep, a disk read, a lock): no CPU
 * signal, so the sampler thread takes the stack, and the time goes there.
 * Blocked in a system call, the stack is read from outside (this process
 * may read itself): no signal, which would end the sleep early; where
 * the call cannot be read (an emulator), the signal asks for it.
 */
static void
test_blocked_thread_stack_is_read_without_a_signal(void **state)
{
    fixture_t  *f = *state;
    totals_t    t;
    uint64_t    start, end;

    burn_range(&start, &end);
    function_range(test_sampler_sleep, "test_sampler_sleep", &sleep_start,
                   &sleep_end);

    sleeps_interrupted = 0;
    test_sampler_sleep(800 * 1000 * 1000LL);

    stop_sampler(f, 0);
    f->sampler = NULL;

    memset(&t, 0, sizeof(t));
    collect(f, &t, start, end);
    sleep_start = 0;
    sleep_end = 0;

    print_message("wall: %lld ms blocked at the sleep, %llu stacks taken, "
                  "%llu read from outside, %llu signals\n",
                  (long long) t.wall_ns_in_sleep / 1000000,
                  (unsigned long long)
                      prof_counter_get(f->diagnostics.blocked_samples),
                  (unsigned long long)
                      prof_counter_get(f->diagnostics.stacks_read),
                  (unsigned long long)
                      prof_counter_get(f->diagnostics.signals_sent));

    assert_true(prof_counter_get(f->diagnostics.blocked_samples) >= 1);
    assert_true(t.wall_ns_in_sleep >= 500 * 1000 * 1000LL);

    if (syscalls_readable()) {
        assert_true(prof_counter_get(f->diagnostics.stacks_read) >= 1);
        assert_int_equal(prof_counter_get(f->diagnostics.signals_sent), 0);
        assert_int_equal(sleeps_interrupted, 0);

    } else {
        assert_true(prof_counter_get(f->diagnostics.signals_sent) >= 1);
    }
}


/*
 * Whatever the thread did, its wall time from the start to the stop is
 * accounted, once: a burn, a wait, a block, a flush in between.
 */
static void
test_wall_time_is_accounted_once(void **state)
{
    fixture_t           *f = *state;
    totals_t             t;
    int64_t              start, stop, end, burn, dropped;
    uint64_t             leaf = IDLE_LEAF;
    prof_sampled_thread_t  *sampled;

    start = prof_clock_ns(CLOCK_MONOTONIC);

    sampled = prof_sampler_sampled_thread(f->sampler);
    prof_sampler_capture_idle_stack(f->sampler, &leaf, 1, 0);

    burn = prof_clock_ns(CLOCK_MONOTONIC);
    test_sampler_burn(100 * 1000 * 1000LL);
    burn = prof_clock_ns(CLOCK_MONOTONIC) - burn;
    prof_wait_begin(sampled);
    test_sampler_sleep(200 * 1000 * 1000LL);
    prof_wait_end(sampled);
    prof_sampler_flush(f->sampler, 0);
    test_sampler_sleep(300 * 1000 * 1000LL);
    test_sampler_burn(50 * 1000 * 1000LL);

    stop = prof_clock_ns(CLOCK_MONOTONIC);
    stop_sampler(f, 0);
    f->sampler = NULL;
    end = prof_clock_ns(CLOCK_MONOTONIC);

    memset(&t, 0, sizeof(t));
    collect(f, &t, 0, 0);

    print_message("wall %lld ms accounted for %lld ms, %u barriers\n",
                  (long long) t.wall_ns / 1000000,
                  (long long) (end - start) / 1000000, t.barriers);

    /*
     * The account runs from prof_sampler_start to the stop's last look:
     * at least from this test's start to the stop, at most from before
     * the start to after the stop, each instant once (1 ms for rounding).
     * Wall time before the first CPU sample has no stack to go to: it is
     * dropped, and counted, when the burn's CPU samples came late (a busy
     * CPU), and only then.
     */
    dropped = (int64_t) prof_counter_get(f->diagnostics.wall_dropped_ns);
    assert_int_equal(t.barriers, 2);
    assert_true(t.wall_ns + dropped >= stop - start - 1000 * 1000LL);
    assert_true(t.wall_ns + dropped <= end - f->started_ns + 1000 * 1000LL);
    if (burn < 150 * 1000 * 1000LL) {
        assert_int_equal(dropped, 0);
    }
}


/*
 * Each barrier names the last period it closes, for the endpoint tables
 * of those periods; flushes the consumer was too slow for are merged
 * into one that closes them all.
 */
static void
test_barriers_carry_their_periods(void **state)
{
    fixture_t  *f = *state;
    totals_t    t;

    prof_sampler_flush(f->sampler, 0);
    prof_sampler_flush(f->sampler, 1);
    stop_sampler(f, 2);

    memset(&t, 0, sizeof(t));
    collect(f, &t, 0, 0);

    assert_true(t.barriers >= 1 && t.barriers <= 3);
    assert_int_equal(t.periods[t.barriers - 1], 2);
    if (t.barriers == 3) {
        assert_int_equal(t.periods[0], 0);
        assert_int_equal(t.periods[1], 1);
    }
}


static void
test_flush_closes_the_batch_stream(void **state)
{
    fixture_t  *f = *state;
    totals_t    t;
    int64_t     deadline;

    prof_sampler_flush(f->sampler, 0);

    memset(&t, 0, sizeof(t));
    deadline = prof_clock_ns(CLOCK_MONOTONIC) + 2000 * 1000 * 1000LL;

    while (t.barriers == 0 && prof_clock_ns(CLOCK_MONOTONIC) < deadline) {
        collect(f, &t, 0, 0);
        (void) test_sampler_burn(1000 * 1000);
    }

    assert_int_equal(t.barriers, 1);
}


/*
 * Adds up the samples in the queue that carry tag (a CPU sample, or a
 * stack the sampler thread asked for while the thread waited for a CPU)
 * and those after them that carry no request (samples come in the order
 * taken); no sample carries another.
 */
static void
count_tagged(fixture_t *f, uint64_t tag, uint64_t *with, uint64_t *without)
{
    size_t               offset;
    uint32_t             i;
    prof_batch_t        *b, *next;
    const prof_sample_t *s;

    for (b = prof_queue_pop_all(&f->queue); b != NULL; b = next) {
        next = b->next;
        offset = 0;

        for (i = 0; i < b->sample_count; i++) {
            s = (const prof_sample_t *) (b->data + offset);
            offset += prof_sample_size(s->frame_count);

            assert_true(s->request == 0 || s->request == tag);

            if (s->request == tag) {
                (*with)++;
            } else if (*with > 0) {
                (*without)++;
            }
        }

        prof_queue_release(&f->queue, b);
    }
}


/*
 * Burns CPU time, 10 ms at a time, until a sample without tag was taken
 * after one with it (at most 2 s of CPU time).
 */
static void
burn_until_untagged(fixture_t *f, uint64_t tag, uint64_t *with,
    uint64_t *without)
{
    int64_t  deadline;

    deadline = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID) + 2000 * 1000 * 1000LL;

    do {
        (void) test_sampler_burn(10 * 1000 * 1000LL);
        count_tagged(f, tag, with, without);
    } while (*without == 0 && prof_clock_ns(CLOCK_THREAD_CPUTIME_ID) < deadline);
}


/* Objects the handler may read a stamp from. */
typedef struct {
    uint64_t  other;
    uint64_t  stamp;
    uint64_t  more;
} test_object_t;

static test_object_t  test_objects[4];


/* The objects declared to the sampler, object i stamped: its address. */
static test_object_t *
stamp_object(prof_sampled_thread_t *sampled, unsigned i, uint64_t stamp)
{
    test_objects[i].stamp = stamp;
    prof_sampler_set_objects(sampled, test_objects, sizeof(test_object_t), 4,
                             offsetof(test_object_t, stamp));

    return &test_objects[i];
}


/*
 * What runs while a sample is taken gets a tag, which the samples of the
 * same words share until the thread clears it; nothing published, none.
 * (On a busy machine the timer's expirations may come late and together:
 * each part burns until it has its sample, at most 2 s of CPU time.)
 */
static void
test_samples_carry_the_tag_of_what_runs(void **state)
{
    fixture_t           *f = *state;
    uint64_t             tag, with, without;
    test_object_t       *object;
    prof_sampled_thread_t  *sampled;

    sampled = prof_sampler_sampled_thread(f->sampler);
    with = 0;
    without = 0;

    object = stamp_object(sampled, 2, 42);

    prof_publish(sampled, (void *) 0x1000, (void *) 0x2000, object);
    tag = burn_until_pending(sampled);

    assert_true(tag != 0);
    assert_int_equal(sampled->pending.request, 0x1000);
    assert_int_equal(sampled->pending.log, 0x2000);
    assert_int_equal(sampled->pending.object, (uintptr_t) object);
    assert_int_equal(sampled->pending_stamp, 42);

    /* The same words: the same tag, however many samples. */
    (void) test_sampler_burn(30 * 1000 * 1000LL);
    assert_int_equal(prof_pending_tag(sampled), tag);

    prof_publish(sampled, NULL, NULL, NULL);
    prof_pending_clear(sampled);

    burn_until_untagged(f, tag, &with, &without);
    assert_int_equal(prof_pending_tag(sampled), 0);

    stop_sampler(f, 0);
    f->sampler = NULL;
    count_tagged(f, tag, &with, &without);

    assert_true(with >= 1);
    assert_true(without >= 1);
}


/*
 * While a tag is pending, samples of other words carry none and leave it
 * as it is; once cleared, they take a new one. A stamp is read only from
 * an object of the array.
 */
static void
test_a_pending_tag_stays_with_its_words(void **state)
{
    fixture_t           *f = *state;
    uint64_t             tag, next, with, without;
    test_object_t       *object;
    prof_sampled_thread_t  *sampled;

    sampled = prof_sampler_sampled_thread(f->sampler);
    with = 0;
    without = 0;

    object = stamp_object(sampled, 1, 7);

    prof_publish(sampled, NULL, (void *) 0x2000, object);
    tag = burn_until_pending(sampled);
    assert_true(tag != 0);
    assert_int_equal(sampled->pending_stamp, 7);

    /* Other words: not at an object's start (stamp unknown). */
    prof_publish(sampled, NULL, (void *) 0x3000,
                 (char *) object + sizeof(uint64_t));
    burn_until_untagged(f, tag, &with, &without);
    assert_true(without >= 1);
    assert_int_equal(prof_pending_tag(sampled), tag);
    assert_int_equal(sampled->pending.log, 0x2000);

    prof_pending_clear(sampled);
    next = burn_until_pending(sampled);

    assert_true(next > tag);
    assert_int_equal(sampled->pending.log, 0x3000);
    assert_int_equal(sampled->pending_stamp, 0);

    prof_publish(sampled, NULL, NULL, NULL);
    prof_pending_clear(sampled);
    stop_sampler(f, 0);
    f->sampler = NULL;
}


/* A SIGPROF from elsewhere: handed to the action installed before. */
static volatile sig_atomic_t  foreign_signals;

static void
on_foreign_sigprof(int signo)
{
    foreign_signals++;
}


/*
 * A read of the Lua walk that faults (a VM whose state is unmapped) ends
 * that walk, counted, and the thread goes on: the handler leaves SIGSEGV
 * unblocked for the guard's action.
 */
static void
test_a_fault_in_the_lua_walk_is_survived(void **state)
{
    fixture_t   *f = *state;
    prof_lua_t  *lua;

#ifdef __SANITIZE_THREAD__
    /*
     * ThreadSanitizer runs the handler later, from its own code, and
     * takes the fault there for its own: not the worker's case.
     */
    skip();
#endif

    lua = calloc(1, sizeof(prof_lua_t));
    assert_non_null(lua);
    lua->vm.g = 64;                             /* nothing is mapped there */
    lua->state = PROF_LUA_FOUND;                /* its frames read */

    prof_sampler_enable_lua(f->sampler, lua);

    test_sampler_burn(200 * 1000 * 1000LL);

    stop_sampler(f, 0);
    f->sampler = NULL;

    assert_true(__atomic_load_n(&lua->faults, __ATOMIC_RELAXED) > 0);
    print_message("%llu walks faulted, the thread lives on\n",
                  (unsigned long long) lua->faults);

    prof_lua_guard_remove();
    free(lua);
}


static void
test_foreign_sigprof_is_not_a_sample(void **state)
{
    fixture_t              *f = *state;
    prof_sampler_conf_t     conf;
    prof_ring_drain_conf_t  dc;
    struct sigaction        sa, saved;

    /* A SIGPROF sent to the process: ignored, never fatal. */
    assert_int_equal(kill(getpid(), SIGPROF), 0);
    assert_int_equal(raise(SIGPROF), 0);
    assert_int_equal(prof_counter_get(f->diagnostics.cpu_samples), 0);

    stop_sampler(f, 0);
    f->sampler = NULL;

    /* Another handler was there first: it gets the signals not ours. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_foreign_sigprof;
    assert_int_equal(sigaction(SIGPROF, &sa, &saved), 0);

    memset(&conf, 0, sizeof(conf));
    conf.interval_ns = INTERVAL_NS;
    conf.max_frames = 64;
    conf.diagnostics = &f->diagnostics;
    memset(&dc, 0, sizeof(dc));
    dc.push_every_ns = 50 * 1000 * 1000LL;
    dc.queue = &f->queue;
    assert_int_equal(prof_sampler_start(&f->sampler, &conf), 0);
    assert_int_equal(prof_ring_drain_start(&f->drain, f->sampler, &dc), 0);

    foreign_signals = 0;
    assert_int_equal(raise(SIGPROF), 0);
    assert_int_equal(foreign_signals, 1);

    test_sampler_burn(50 * 1000 * 1000LL);
    assert_int_equal(foreign_signals, 1);

    stop_sampler(f, 0);
    f->sampler = NULL;

    /* The stop gives the process its handler back. */
    assert_int_equal(raise(SIGPROF), 0);
    assert_int_equal(foreign_signals, 2);

    (void) sigaction(SIGPROF, &saved, NULL);
}


static void
test_second_sampler_is_refused(void **state)
{
    fixture_t            *f = *state;
    prof_sampler_t       *other;
    prof_sampler_conf_t   conf;

    memset(&conf, 0, sizeof(conf));
    conf.interval_ns = INTERVAL_NS;
    conf.max_frames = 64;
    conf.diagnostics = &f->diagnostics;

    assert_int_equal(prof_sampler_start(&other, &conf), -16 /* EBUSY */);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_cpu_samples_land_where_cpu_is_burned, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_idle_thread_gets_no_signal, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_wake_up_after_idle_splits_the_time, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_blocked_thread_stack_is_read_without_a_signal, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_wall_time_is_accounted_once, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_flush_closes_the_batch_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_samples_carry_the_tag_of_what_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_pending_tag_stays_with_its_words, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_barriers_carry_their_periods, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_foreign_sigprof_is_not_a_sample, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_second_sampler_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_fault_in_the_lua_walk_is_survived, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
