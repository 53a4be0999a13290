/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the status slots (shared/channel/status.h): claimed by live
 * processes only, read consistently while written, rendered as JSON and
 * text.
 */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "channel/status.h"


#define SLOTS  4


static prof_status_slot_t  slots[SLOTS];


static int
setup(void **state)
{
    memset(slots, 0, sizeof(slots));
    return 0;
}


/* The pid of a process that has exited and been reaped. */
static pid_t
dead_pid(void)
{
    pid_t  pid;

    pid = fork();
    assert_true(pid >= 0);

    if (pid == 0) {
        _exit(0);
    }

    assert_int_equal(waitpid(pid, NULL, 0), pid);

    return pid;
}


static const char *
render_json(prof_buffer_t *out)
{
    out->length = 0;
    assert_int_equal(prof_status_json(out, slots, SLOTS), 0);
    assert_int_equal(prof_buffer_append(out, "", 1), 0);
    return (const char *) out->data;
}


static void
test_claim_takes_free_slots_then_those_of_exited_processes(void **state)
{
    pid_t                self, parent, gone;
    prof_status_slot_t  *a, *b, *c;

    self = getpid();
    parent = getppid();
    gone = dead_pid();

    a = prof_status_claim(slots, 2, self);
    b = prof_status_claim(slots, 2, parent);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);

    /* Both live: no room for a third. */
    assert_null(prof_status_claim(slots, 2, 999999));

    /* A slot left by a process that died without releasing it. */
    b->pid = gone;
    c = prof_status_claim(slots, 2, parent);
    assert_ptr_equal(c, b);

    /* Released: free again, and nobody's. */
    prof_status_release(a, self);
    assert_int_equal(a->pid, 0);
    assert_ptr_equal(prof_status_claim(slots, 2, self), a);

    /* Only its owner releases it. */
    prof_status_release(c, self);
    assert_int_equal(c->pid, parent);
}


static void
test_claim_forgets_what_the_process_before_left(void **state)
{
    prof_diagnostics_t   d;
    prof_status_info_t   info;
    prof_status_slot_t  *slot, copy;

    memset(&d, 0, sizeof(d));
    memset(&info, 0, sizeof(info));
    d.cpu_samples = 42;
    info.running = 1;
    info.last_error_ns = 1;
    info.last_error = "old news";

    slot = prof_status_claim(slots, SLOTS, dead_pid());
    assert_non_null(slot);
    prof_status_publish(slot, &d, &info);

    /* Its process is gone: nobody reads it any more, and a new one
       starts from nothing. */
    assert_int_equal(prof_status_read(slot, &copy), -1);

    slot = prof_status_claim(slots, 1, getpid());
    assert_non_null(slot);
    assert_int_equal(prof_status_read(slot, &copy), 0);
    assert_int_equal(copy.running, 0);
    assert_int_equal(copy.last_error_ns, 0);
    assert_int_equal(copy.counters[0], 0);
}


static void
test_published_state_reads_back_and_renders(void **state)
{
    const char          *page;
    prof_buffer_t        out = { NULL, 0, 0 };
    prof_diagnostics_t   d;
    prof_status_info_t   info;
    prof_status_slot_t  *slot, copy;

    memset(&d, 0, sizeof(d));
    memset(&info, 0, sizeof(info));

    d.cpu_samples = 1234;
    d.uploads.failed_connect = 3;
    prof_histogram_add(&d.handler_ns, 5000);
    info.running = 1;
    info.started_ns = 1700000000000000000LL;
    info.last_upload_ns = 1700000060000000000LL;
    info.last_upload = "failed: cannot connect (Connection refused)";
    info.last_error_ns = 1700000060000000000LL;
    info.last_error = "quote \" backslash \\ bad \xff byte";

    slot = prof_status_claim(slots, SLOTS, getpid());
    prof_status_publish(slot, &d, &info);

    assert_int_equal(prof_status_read(slot, &copy), 0);
    assert_int_equal(copy.pid, getpid());
    assert_int_equal(copy.running, 1);
    assert_true(copy.handler_p50_ns >= 5000 && copy.handler_p50_ns < 5200);

    page = render_json(&out);
    assert_non_null(strstr(page, "\"running\":true"));
    assert_non_null(strstr(page, "\"cpu_samples\":1234"));
    assert_non_null(strstr(page, "\"uploads_failed_connect\":3"));
    assert_non_null(strstr(page, "\"outcome\":\"failed: cannot connect "
                                 "(Connection refused)\""));
    assert_non_null(strstr(page, "\"time\":\"2023-11-14T22:14:20"));
    /* escaped, and the bad byte replaced: still JSON */
    assert_non_null(strstr(page, "quote \\\" backslash \\\\ bad "));
    assert_null(strchr(page, '\xff'));
    assert_non_null(strstr(page, "\"totals\":{\"workers\":1,\"running\":1,"
                                 "\"counters\":{\"cpu_samples\":1234"));

    out.length = 0;
    assert_int_equal(prof_status_text(&out, slots, SLOTS), 0);
    assert_int_equal(prof_buffer_append(&out, "", 1), 0);
    page = (const char *) out.data;
    assert_non_null(strstr(page, "profiling"));
    assert_non_null(strstr(page, " cpu_samples=1234"));
    assert_non_null(strstr(page, "last upload: 2023-11-14T22:14:20"));
    assert_non_null(strstr(page, "workers: 1\n"));

    prof_buffer_free(&out);
}


static void
test_the_loop_s_stalls_and_turns_render(void **state)
{
    const char          *page;
    prof_buffer_t        out = { NULL, 0, 0 };
    prof_diagnostics_t   d;
    prof_status_info_t   info;
    prof_status_slot_t  *slot;

    memset(&d, 0, sizeof(d));
    memset(&info, 0, sizeof(info));

    info.running = 1;
    info.started_ns = 1700000000000000000LL;
    info.loop.threshold_ns = 100000000;
    info.loop.count = 3;
    info.loop.logged = 2;
    info.loop.longest_ns = 312000000;
    info.loop.longest_at_ns = 1700000060000000000LL;
    strcpy(info.loop.longest, "a stall of 312 ms in worker 1, in request: "
                              "\"GET /x HTTP/1.1\"; code: spin");
    info.loop.turns[4] = 7;
    info.loop.turn_le_ns[4] = 10000;
    info.loop.turns[30] = 2;
    info.loop.turn_le_ns[30] = 400000000;

    slot = prof_status_claim(slots, SLOTS, getpid());
    prof_status_publish(slot, &d, &info);

    page = render_json(&out);
    assert_non_null(strstr(page, "\"loop\":{\"stall_threshold_ms\":100,"
                                 "\"stalls\":3,\"stalls_logged\":2,"
                                 "\"longest\":{\"time\":\"2023-11-14T22:14:20"));
    assert_non_null(strstr(page, "\"ms\":312,\"line\":\"a stall of 312 ms "
                                 "in worker 1, in request: \\\"GET /x "
                                 "HTTP/1.1\\\"; code: spin\"}"));
    assert_non_null(strstr(page, "\"turns\":[{\"le_us\":10.0,\"count\":7},"
                                 "{\"le_us\":400000.0,\"count\":2}]}"));

    out.length = 0;
    assert_int_equal(prof_status_text(&out, slots, SLOTS), 0);
    assert_int_equal(prof_buffer_append(&out, "", 1), 0);
    page = (const char *) out.data;
    assert_non_null(strstr(page, "  loop: 3 stalls over 100 ms (2 logged), "
                                 "the longest 312 ms at 2023-11-14T22:14:20"));
    assert_non_null(strstr(page, "  turns: <=10.0us 7 <=400000.0us 2\n"));

    prof_status_release(slot, getpid());
    prof_buffer_free(&out);
}


static void
test_a_worker_that_could_not_start_says_why(void **state)
{
    const char          *page;
    prof_buffer_t        out = { NULL, 0, 0 };
    prof_status_slot_t  *slot;

    slot = prof_status_claim(slots, SLOTS, getpid());
    prof_status_publish_stopped(slot, "the sampler could not start", EPERM);

    page = render_json(&out);
    assert_non_null(strstr(page, "\"running\":false"));
    assert_non_null(strstr(page, "the sampler could not start (Operation "
                                 "not permitted)"));
    assert_non_null(strstr(page, "\"running\":0"));

    prof_buffer_free(&out);
}


/* A writer that keeps every counter equal to a running count. */
typedef struct {
    prof_status_slot_t  *slot;
    volatile int         stop;
} writer_t;


static void *
writer(void *arg)
{
    uint64_t             i;
    writer_t            *w = arg;
    prof_diagnostics_t   d;
    prof_status_info_t   info;

    memset(&info, 0, sizeof(info));
    info.running = 1;

    for (i = 1; !__atomic_load_n(&w->stop, __ATOMIC_RELAXED); i++) {
        memset(&d, 0, sizeof(d));
        d.cpu_samples = i;
        d.blocked_samples = i;
        d.uploads.succeeded = i;
        d.uploads.bytes_sent = i;
        info.started_ns = (int64_t) i;
        prof_status_publish(w->slot, &d, &info);

        /* Between writes the slot stands still for a moment, as it does
           between a profiler process's writes (a second apart): under an
           emulator (qemu-user) on a busy host, writes back to back kept
           every one of the reads below busy. */
        (void) sched_yield();
    }

    return NULL;
}


static void
test_readers_never_see_half_a_write(void **state)
{
    int                  reads, consistent;
    pthread_t            thread;
    writer_t             w;
    prof_status_slot_t   copy;

    w.slot = prof_status_claim(slots, SLOTS, getpid());
    w.stop = 0;
    assert_int_equal(pthread_create(&thread, NULL, writer, &w), 0);

    consistent = 0;

    for (reads = 0; reads < 20000; reads++) {
        if (prof_status_read(w.slot, &copy) != 0) {
            continue;       /* kept busy: given up, never waited */
        }

        assert_int_equal(copy.counters[0], copy.counters[1]);
        assert_int_equal((int64_t) copy.counters[0], copy.started_ns);
        consistent++;
    }

    __atomic_store_n(&w.stop, 1, __ATOMIC_RELAXED);
    assert_int_equal(pthread_join(thread, NULL), 0);

    assert_true(consistent > 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup(
            test_claim_takes_free_slots_then_those_of_exited_processes,
            setup),
        cmocka_unit_test_setup(
            test_claim_forgets_what_the_process_before_left, setup),
        cmocka_unit_test_setup(
            test_published_state_reads_back_and_renders, setup),
        cmocka_unit_test_setup(test_the_loop_s_stalls_and_turns_render,
                               setup),
        cmocka_unit_test_setup(test_a_worker_that_could_not_start_says_why,
                               setup),
        cmocka_unit_test_setup(test_readers_never_see_half_a_write, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
