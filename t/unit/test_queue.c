/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unit tests of shared/profiler/sample_queue.c: batches come out in push
 * order, pool batches are reused, the byte ceiling refuses batches and
 * gives their bytes back, barrier batches live outside the ceiling, and a
 * producer and a consumer thread pass batches without losing any.
 */

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>

#include <cmocka.h>

#include "profiler/sample_queue.h"


#define BATCH_BYTES      1024
#define BATCH_TOTAL      (sizeof(prof_batch_t) + BATCH_BYTES)
#define THREAD_BATCHES   20000
#define THREAD_RETRIES   10000000      /* acquire failures in a row before
                                          the producer gives up */


static void
release_list(prof_queue_t *q, prof_batch_t *b)
{
    prof_batch_t  *next;

    for ( /* void */ ; b != NULL; b = next) {
        next = b->next;
        prof_queue_release(q, b);
    }
}


static void
test_batches_come_out_in_push_order(void **state)
{
    unsigned       i;
    prof_queue_t   q;
    prof_batch_t  *b[4], *list;

    assert_int_equal(prof_queue_init(&q, BATCH_BYTES, 64 * BATCH_TOTAL, 8),
                     0);

    for (i = 0; i < 4; i++) {
        b[i] = prof_queue_acquire(&q);
        assert_non_null(b[i]);
        b[i]->sample_count = i;
    }

    /* pushed 2, 0, 3: popped in that order */

    prof_queue_push(&q, b[2]);
    prof_queue_push(&q, b[0]);
    prof_queue_push(&q, b[3]);

    list = prof_queue_pop_all(&q);

    assert_ptr_equal(list, b[2]);
    assert_ptr_equal(list->next, b[0]);
    assert_ptr_equal(list->next->next, b[3]);
    assert_null(list->next->next->next);

    /* the queue is empty after pop_all, and takes new pushes in order */

    assert_null(prof_queue_pop_all(&q));

    prof_queue_push(&q, b[1]);
    assert_ptr_equal(prof_queue_pop_all(&q), b[1]);
    assert_null(b[1]->next);

    release_list(&q, list);
    prof_queue_release(&q, b[1]);
    prof_queue_destroy(&q);
}


static void
test_pool_batches_are_reused(void **state)
{
    size_t         allocated;
    unsigned       round, i, j;
    prof_queue_t   q;
    prof_batch_t  *pool[4], *b[4];

    assert_int_equal(prof_queue_init(&q, BATCH_BYTES, 64 * BATCH_TOTAL, 4),
                     0);

    allocated = prof_queue_allocated_bytes(&q);
    assert_int_equal(allocated, 4 * BATCH_TOTAL);

    for (i = 0; i < 4; i++) {
        pool[i] = prof_queue_acquire(&q);
        assert_non_null(pool[i]);
        assert_false(pool[i]->overflow);
    }

    for (i = 0; i < 4; i++) {
        prof_queue_release(&q, pool[i]);
    }

    for (round = 0; round < 100; round++) {
        for (i = 0; i < 4; i++) {
            b[i] = prof_queue_acquire(&q);
            assert_non_null(b[i]);

            /* one of the pool batches, handed out empty */

            for (j = 0; j < 4 && b[i] != pool[j]; j++) { /* void */ }
            assert_true(j < 4);

            assert_false(b[i]->overflow);
            assert_int_equal(b[i]->used, 0);
            assert_int_equal(b[i]->sample_count, 0);
            assert_false(b[i]->flush_after);
            assert_int_equal(b[i]->capacity, BATCH_BYTES);

            /* dirty it as the sampler would */

            b[i]->used = 100;
            b[i]->sample_count = 3;
            b[i]->flush_after = 1;
            b[i]->flush_realtime_ns = 1;
            prof_queue_push(&q, b[i]);
        }

        assert_int_equal(prof_queue_allocated_bytes(&q), allocated);

        release_list(&q, prof_queue_pop_all(&q));

        assert_int_equal(prof_queue_allocated_bytes(&q), allocated);
    }

    prof_queue_destroy(&q);
}


static void
test_ceiling_refuses_batches_past_max_bytes(void **state)
{
    size_t         max;
    prof_queue_t   q;
    prof_batch_t  *pool, *b1, *b2, *b3;

    /* room for three batches and a half: one pool batch, two overflow */

    max = 3 * BATCH_TOTAL + BATCH_TOTAL / 2;
    assert_int_equal(prof_queue_init(&q, BATCH_BYTES, max, 1), 0);
    assert_int_equal(prof_queue_allocated_bytes(&q), BATCH_TOTAL);

    pool = prof_queue_acquire(&q);
    assert_non_null(pool);
    assert_false(pool->overflow);

    b1 = prof_queue_acquire(&q);
    assert_non_null(b1);
    assert_true(b1->overflow);
    assert_int_equal(b1->capacity, BATCH_BYTES);

    b2 = prof_queue_acquire(&q);
    assert_non_null(b2);
    assert_true(b2->overflow);
    assert_int_equal(prof_queue_allocated_bytes(&q), 3 * BATCH_TOTAL);

    /* a fourth batch would pass max */

    assert_null(prof_queue_acquire(&q));
    assert_null(prof_queue_acquire(&q));
    assert_true(prof_queue_allocated_bytes(&q) <= max);

    /* releasing an overflow batch gives its bytes back */

    prof_queue_push(&q, b1);
    release_list(&q, prof_queue_pop_all(&q));
    assert_int_equal(prof_queue_allocated_bytes(&q), 2 * BATCH_TOTAL);

    b3 = prof_queue_acquire(&q);
    assert_non_null(b3);
    assert_true(b3->overflow);
    assert_int_equal(prof_queue_allocated_bytes(&q), 3 * BATCH_TOTAL);
    assert_null(prof_queue_acquire(&q));

    /* a released pool batch stays allocated, and is handed out again */

    prof_queue_release(&q, pool);
    assert_int_equal(prof_queue_allocated_bytes(&q), 3 * BATCH_TOTAL);
    assert_ptr_equal(prof_queue_acquire(&q), pool);
    assert_null(prof_queue_acquire(&q));
    assert_true(prof_queue_allocated_bytes(&q) <= max);

    prof_queue_release(&q, pool);
    prof_queue_release(&q, b2);
    prof_queue_release(&q, b3);
    assert_int_equal(prof_queue_allocated_bytes(&q), BATCH_TOTAL);

    prof_queue_destroy(&q);
}


static void
test_barrier_batch_is_outside_the_ceiling(void **state)
{
    size_t         allocated;
    prof_queue_t   q;
    prof_batch_t  *full, *barrier, *list;

    assert_int_equal(prof_queue_init(&q, BATCH_BYTES, BATCH_TOTAL, 1), 0);

    full = prof_queue_acquire(&q);
    assert_non_null(full);
    full->sample_count = 7;
    assert_null(prof_queue_acquire(&q));

    allocated = prof_queue_allocated_bytes(&q);

    /* at the ceiling a barrier batch is still given */

    barrier = prof_queue_acquire_barrier(&q);
    assert_non_null(barrier);
    assert_int_equal(barrier->capacity, 0);
    assert_int_equal(barrier->sample_count, 0);
    assert_int_equal(prof_queue_allocated_bytes(&q), allocated);

    barrier->flush_after = 1;
    barrier->flush_realtime_ns = 1700000000123456789LL;
    barrier->flush_monotonic_ns = 987654321;

    prof_queue_push(&q, full);
    prof_queue_push(&q, barrier);

    list = prof_queue_pop_all(&q);
    assert_ptr_equal(list, full);
    assert_ptr_equal(list->next, barrier);
    assert_null(barrier->next);

    assert_true(barrier->flush_after);
    assert_int_equal(barrier->flush_realtime_ns, 1700000000123456789LL);
    assert_int_equal(barrier->flush_monotonic_ns, 987654321);

    prof_queue_release(&q, barrier);
    assert_int_equal(prof_queue_allocated_bytes(&q), allocated);

    prof_queue_release(&q, full);
    assert_int_equal(prof_queue_allocated_bytes(&q), allocated);

    prof_queue_destroy(&q);
}


static void
test_init_fails_when_ceiling_cannot_hold_one_batch(void **state)
{
    prof_queue_t  q;

    assert_true(prof_queue_init(&q, BATCH_BYTES, BATCH_BYTES / 2, 4) < 0);
    assert_true(prof_queue_init(&q, BATCH_BYTES, 0, 4) < 0);

    /* control: a ceiling of one batch and a half gives a pool of one */

    assert_int_equal(prof_queue_init(&q, BATCH_BYTES,
                                     BATCH_TOTAL + BATCH_TOTAL / 2, 4),
                     0);
    assert_int_equal(prof_queue_allocated_bytes(&q), BATCH_TOTAL);
    prof_queue_destroy(&q);
}


/* the producer thread: batches numbered 0, 1, ... in data and sample_count */

typedef struct {
    prof_queue_t  *queue;
    unsigned       batches;
    unsigned       pushed;
    int            done;            /* the producer has finished */
} producer_t;


static void *
producer(void *data)
{
    unsigned       i, retries;
    uint64_t       n;
    producer_t    *pr = data;
    prof_batch_t  *b;

    for (i = 0; i < pr->batches; i++) {

        /*
         * At the ceiling: wait for the consumer to release a batch. Lost
         * batches are never released: give up rather than hang.
         */

        retries = 0;

        while ((b = prof_queue_acquire(pr->queue)) == NULL) {
            if (++retries == THREAD_RETRIES) {
                goto done;
            }

            sched_yield();
        }

        n = i;
        memcpy(b->data, &n, sizeof(n));
        b->used = sizeof(n);
        b->sample_count = i;

        prof_queue_push(pr->queue, b);
        pr->pushed++;
    }

done:

    __atomic_store_n(&pr->done, 1, __ATOMIC_RELEASE);

    return NULL;
}


static void
test_two_threads_pass_every_batch_in_order(void **state)
{
    int            done;
    size_t         max, allocated, max_seen;
    uint64_t       n;
    unsigned       received, misordered;
    pthread_t      thread;
    producer_t     pr;
    prof_queue_t   q;
    prof_batch_t  *b, *next;

    /* a small pool and ceiling, so that batches are reused and refused */

    max = 16 * BATCH_TOTAL;
    assert_int_equal(prof_queue_init(&q, BATCH_BYTES, max, 4), 0);

    pr.queue = &q;
    pr.batches = THREAD_BATCHES;
    pr.pushed = 0;
    pr.done = 0;

    assert_int_equal(pthread_create(&thread, NULL, producer, &pr), 0);

    /*
     * No assertion until the producer is joined: the consumer keeps
     * draining (so the producer never waits forever) and counts.
     */

    received = 0;
    misordered = 0;
    max_seen = 0;

    for ( ;; ) {
        done = __atomic_load_n(&pr.done, __ATOMIC_ACQUIRE);

        b = prof_queue_pop_all(&q);

        if (b == NULL) {
            if (done) {
                break;
            }

            sched_yield();
            continue;
        }

        for ( /* void */ ; b != NULL; b = next) {
            next = b->next;

            memcpy(&n, b->data, sizeof(n));
            if (n != received || b->sample_count != received
                || b->used != sizeof(n))
            {
                misordered++;
            }

            received++;
            prof_queue_release(&q, b);
        }

        allocated = prof_queue_allocated_bytes(&q);
        if (allocated > max_seen) {
            max_seen = allocated;
        }
    }

    assert_int_equal(pthread_join(thread, NULL), 0);

    assert_int_equal(pr.pushed, THREAD_BATCHES);
    assert_int_equal(received, THREAD_BATCHES);
    assert_int_equal(misordered, 0);
    assert_true(max_seen <= max);

    /* every overflow batch was freed, the pool is left */

    assert_int_equal(prof_queue_allocated_bytes(&q), 4 * BATCH_TOTAL);

    prof_queue_destroy(&q);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_batches_come_out_in_push_order),
        cmocka_unit_test(test_pool_batches_are_reused),
        cmocka_unit_test(test_ceiling_refuses_batches_past_max_bytes),
        cmocka_unit_test(test_barrier_batch_is_outside_the_ceiling),
        cmocka_unit_test(test_init_fails_when_ceiling_cannot_hold_one_batch),
        cmocka_unit_test(test_two_threads_pass_every_batch_in_order),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
