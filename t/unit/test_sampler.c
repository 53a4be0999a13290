/*
 * Tests of the sampler (shared/sampler.h) with real signals and threads:
 * CPU samples where the thread burns CPU, idle ticks without a signal,
 * flush barriers on request and at stop.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "endpoint_counts.h"
#include "sampler.h"
#include "symbolizer.h"


#define INTERVAL_NS  (10 * 1000 * 1000LL)
#define IDLE_LEAF    0x1234         /* the idle stack's made-up leaf */


typedef struct {
    prof_queue_t        queue;
    prof_diagnostics_t  diagnostics;
    prof_sampler_t     *sampler;
} fixture_t;


typedef struct {
    int64_t   cpu_ns;
    int64_t   wall_ns;
    unsigned  cpu_samples;
    unsigned  wall_samples;
    unsigned  cpu_samples_in_burn;
    unsigned  barriers;
    unsigned  samples_after_last_barrier;
    int64_t   wall_ns_idle;         /* at the IDLE_LEAF stack */
    int64_t   wall_ns_in_burn;
} totals_t;


static int64_t
clock_ns(clockid_t clock)
{
    struct timespec  ts;

    clock_gettime(clock, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}


__attribute__((noinline)) uint64_t
test_sampler_burn(int64_t ns)
{
    int64_t   end;
    uint64_t  x = 88172645463325252ULL;

    end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;

    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    }

    return x;
}


static int
setup(void **state)
{
    fixture_t            *f;
    prof_sampler_conf_t   conf;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);
    assert_int_equal(prof_queue_init(&f->queue, 64 * 1024, 4 * 1024 * 1024,
                                     4), 0);

    memset(&conf, 0, sizeof(conf));
    conf.interval_ns = INTERVAL_NS;
    conf.max_frames = 64;
    conf.push_every_ns = 50 * 1000 * 1000LL;
    conf.queue = &f->queue;
    conf.diagnostics = &f->diagnostics;

    assert_int_equal(prof_sampler_start(&f->sampler, &conf), 0);

    *state = f;
    return 0;
}


static int
teardown(void **state)
{
    fixture_t  *f = *state;

    if (f->sampler != NULL) {
        prof_sampler_stop(f->sampler, NULL);
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
            offset += prof_sample_size(s->frame_count, s->endpoint_length);

            t->cpu_ns += s->cpu_ns;
            t->wall_ns += s->wall_ns;
            t->cpu_samples += s->cpu_samples;
            t->wall_samples += s->wall_samples;
            t->samples_after_last_barrier++;

            if (s->frame_count > 0 && prof_sample_frames(s)[0] == IDLE_LEAF) {
                t->wall_ns_idle += s->wall_ns;

            } else if (in_range(s, burn_start, burn_end)) {
                t->wall_ns_in_burn += s->wall_ns;
            }

            if (s->cpu_samples && in_range(s, burn_start, burn_end)) {
                t->cpu_samples_in_burn++;
            }
        }

        if (b->flush_after) {
            t->barriers++;
            t->samples_after_last_barrier = 0;
        }

        prof_queue_release(&f->queue, b);
    }
}


/* The address range of test_sampler_burn, from the symbolizer. */
static void
burn_range(uint64_t *start, uint64_t *end)
{
    uint64_t              pc;
    const char           *name;
    prof_symbolizer_t    *sym;
    const prof_object_t  *obj;

    sym = prof_symbolizer_create();
    assert_non_null(sym);

    pc = (uint64_t) (uintptr_t) test_sampler_burn;
    obj = prof_symbolize(sym, pc, &name);
    assert_non_null(obj);
    assert_string_equal(name, "test_sampler_burn");

    /* Scan forward to where the symbol ends. */
    *start = pc;
    *end = pc;
    while (prof_symbolize(sym, *end, &name) != NULL && name != NULL
           && strcmp(name, "test_sampler_burn") == 0)
    {
        (*end)++;
    }

    prof_symbolizer_destroy(sym);
}


static void
test_cpu_samples_land_where_cpu_is_burned(void **state)
{
    fixture_t  *f = *state;
    totals_t    t;
    int64_t     cpu0, cpu1, used;
    uint64_t    start, end;

    burn_range(&start, &end);

    cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    (void) test_sampler_burn(400 * 1000 * 1000LL);
    cpu1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    used = cpu1 - cpu0;

    prof_sampler_stop(f->sampler, NULL);
    f->sampler = NULL;

    memset(&t, 0, sizeof(t));
    collect(f, &t, start, end);

    /* 400 ms at 10 ms of CPU each: about 40 samples, most in the burn. */
    assert_true(t.cpu_samples >= 30);
    assert_true(t.cpu_samples_in_burn * 10 >= t.cpu_samples * 8);

    /* CPU time is interval * expirations: within two intervals. */
    assert_true(t.cpu_ns >= used - 2 * INTERVAL_NS);
    assert_true(t.cpu_ns <= cpu1 - cpu0 + 3 * INTERVAL_NS);

    /* The stop closes the stream with a barrier after the last sample. */
    assert_true(t.barriers >= 1);
    assert_int_equal(t.samples_after_last_barrier, 0);
}


static void
test_idle_thread_gets_no_signal(void **state)
{
    fixture_t        *f = *state;
    totals_t          t;
    uint64_t          leaf = IDLE_LEAF;
    struct timespec   pause = { 0, 300 * 1000 * 1000 };

    prof_sampler_capture_idle_stack(f->sampler, &leaf, 1, 0);
    prof_sampler_set_waiting(f->sampler, 1);

    /* Blocked, no CPU: every tick is an idle tick, with no signal. */
    nanosleep(&pause, NULL);

    prof_sampler_set_waiting(f->sampler, 0);

    /* Idle ticks are stretched: a few of them cover the pause. */
    assert_int_equal(prof_counter_get(f->diagnostics.signals_sent), 0);
    assert_true(prof_counter_get(f->diagnostics.idle_samples) >= 2);
    assert_true(prof_counter_get(f->diagnostics.ticks) <= 12);

    prof_sampler_stop(f->sampler, NULL);
    f->sampler = NULL;

    memset(&t, 0, sizeof(t));
    collect(f, &t, 0, 0);

    /* The wall time of the pause is all there, in intervals, no CPU. */
    assert_true(t.wall_ns >= 300 * 1000 * 1000LL);
    assert_true(t.cpu_ns <= INTERVAL_NS);
    assert_true(t.wall_samples >= 28 && t.wall_samples <= 45);
}


/*
 * A stretched idle tick that ends with CPU samples: the time before the
 * thread woke goes to the wait, not to where it burned CPU at the end.
 */
static void
test_wake_up_after_idle_splits_the_tick(void **state)
{
    fixture_t        *f = *state;
    totals_t          t;
    uint64_t          leaf = IDLE_LEAF, start, end;
    struct timespec   pause = { 0, 600 * 1000 * 1000 };

    burn_range(&start, &end);

    prof_sampler_capture_idle_stack(f->sampler, &leaf, 1, 0);
    prof_sampler_set_waiting(f->sampler, 1);
    nanosleep(&pause, NULL);
    prof_sampler_set_waiting(f->sampler, 0);

    test_sampler_burn(40 * 1000 * 1000LL);

    prof_sampler_stop(f->sampler, NULL);
    f->sampler = NULL;

    memset(&t, 0, sizeof(t));
    collect(f, &t, start, end);

    print_message("wall: %lld ms in the wait, %lld ms burning 40 ms\n",
                  (long long) t.wall_ns_idle / 1000000,
                  (long long) t.wall_ns_in_burn / 1000000);

    assert_true(t.wall_ns_idle >= 550 * 1000 * 1000LL);
    assert_true(t.wall_ns_in_burn <= 40 * 1000 * 1000LL + 4 * INTERVAL_NS);
}


static size_t
queued_batches(prof_queue_t *q)
{
    size_t  n;

    pthread_mutex_lock(&q->mutex);
    n = q->queued_batches;
    pthread_mutex_unlock(&q->mutex);

    return n;
}


/*
 * At the memory ceiling (the consumer stalled) a barrier carries no
 * endpoint counts: their requests are counted as dropped, once each.
 */
static void
test_counts_dropped_at_the_ceiling(void **state)
{
    fixture_t               *f = *state;
    int                      i, n;
    char                     name[32];
    int64_t                  deadline;
    prof_sampler_conf_t      conf;
    prof_endpoint_counts_t  *first, *second;

    /* A queue that holds one batch, never consumed. */
    prof_sampler_stop(f->sampler, NULL);
    prof_queue_destroy(&f->queue);
    memset(&f->diagnostics, 0, sizeof(f->diagnostics));

    assert_int_equal(prof_queue_init(&f->queue, 64 * 1024, 64 * 1024 + 1024,
                                     1), 0);

    memset(&conf, 0, sizeof(conf));
    conf.interval_ns = INTERVAL_NS;
    conf.max_frames = 64;
    conf.push_every_ns = 3600 * 1000000000LL;
    conf.queue = &f->queue;
    conf.diagnostics = &f->diagnostics;
    assert_int_equal(prof_sampler_start(&f->sampler, &conf), 0);

    first = prof_endpoint_counts_create();
    second = prof_endpoint_counts_create();
    assert_non_null(first);
    assert_non_null(second);

    assert_int_equal(prof_endpoint_counts_add(first, "GET /", 5), 0);

    /* The second has more endpoints than a table keeps: 10 dropped. */
    for (i = 0; i < PROF_ENDPOINT_COUNTS_MAX + 10; i++) {
        n = snprintf(name, sizeof(name), "GET /%d", i);
        assert_int_equal(prof_endpoint_counts_add(second, name, n), 0);
    }

    /* The first barrier takes the queue's only batch, with its counts. */
    prof_sampler_request_flush(f->sampler, first);

    deadline = clock_ns(CLOCK_MONOTONIC) + 5 * 1000000000LL;
    while (queued_batches(&f->queue) == 0
           && clock_ns(CLOCK_MONOTONIC) < deadline)
    {
        struct timespec  pause = { 0, 1000 * 1000 };
        nanosleep(&pause, NULL);
    }
    assert_int_equal(queued_batches(&f->queue), 1);

    /* The next one is past the ceiling. */
    prof_sampler_request_flush(f->sampler, second);
    prof_sampler_stop(f->sampler, NULL);
    f->sampler = NULL;

    assert_int_equal(prof_counter_get(f->diagnostics.endpoints_dropped),
                     PROF_ENDPOINT_COUNTS_MAX + 10);
}


static void
test_flush_request_closes_the_batch_stream(void **state)
{
    fixture_t  *f = *state;
    totals_t    t;
    int64_t     deadline;

    prof_sampler_request_flush(f->sampler, NULL);

    memset(&t, 0, sizeof(t));
    deadline = clock_ns(CLOCK_MONOTONIC) + 2000 * 1000 * 1000LL;

    while (t.barriers == 0 && clock_ns(CLOCK_MONOTONIC) < deadline) {
        collect(f, &t, 0, 0);
        (void) test_sampler_burn(1000 * 1000);
    }

    assert_int_equal(t.barriers, 1);
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
    conf.queue = &f->queue;
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
            test_wake_up_after_idle_splits_the_tick, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_flush_request_closes_the_batch_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_counts_dropped_at_the_ceiling, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_second_sampler_is_refused, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
