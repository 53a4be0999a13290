/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler process, from its fork to its exit: its signals and
 * inherited descriptors, its log, the dump directory, the queue, the loop
 * and sampler threads started; then the wait for its worker to go, and
 * its last profile finished within what the worker allowed.
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define PROF_HAVE_VALGRIND_H  1
#endif
#endif

#include "common/clock.h"
#include "channel/handover.h"
#include "profiler/loop.h"
#include "profiler/process.h"
#include "profiler/process_conf.h"


#define PROF_BATCH_BYTES        (64 * 1024)
#define PROF_POOL_BATCHES       2
#define PROF_PUSH_EVERY_NS      (1000 * 1000 * 1000LL)

/* The allocator's pages: kept up to this much free at the heap's top,
   and blocks this large mapped on their own (glibc). */
#define PROF_TRIM_BYTES         (1024 * 1024)
#define PROF_MMAP_BYTES         (1024 * 1024)

/* How long the profiler process finishes after a worker that crashed:
   the last upload, then the file. */
#define PROF_CRASH_UPLOAD_MS    1000
#define PROF_CRASH_WAIT_MS      300

/* Descriptors the server may ask the profiler process to keep. */
#define PROF_KEEP_FDS_MAX       16

/* How long the last profile is awaited under valgrind. */
#define PROF_VALGRIND_WAIT_MS   120000


/* One per process: the child of a worker's fork. */
static prof_process_t  prof_process;


/* Whether this process runs under valgrind (its client request: a few
   instructions natively); 0 where its header was not there to build with. */
static int
prof_under_valgrind(void)
{
#ifdef PROF_HAVE_VALGRIND_H
    return RUNNING_ON_VALGRIND != 0;
#else
    return 0;
#endif
}


/* At the start: the dump directory, once; its problem logged once. */
static void
prof_open_dump_dir(prof_process_t *p)
{
    char              error[1024];
    prof_dump_conf_t  dc;

    if (p->dump_dir == NULL) {
        return;
    }

    memset(&dc, 0, sizeof(dc));
    dc.service = p->service;
    dc.keep_files = p->conf.dump_keep_files;
    dc.keep_bytes = p->conf.dump_keep_bytes;
    dc.files_deleted = &p->channel->diagnostics.dump_files_deleted;
    dc.temps_removed = &p->channel->diagnostics.dump_temps_removed;

    p->dump = prof_dump_dir_open(p->dump_dir, &dc, error, sizeof(error));

    if (p->dump == NULL) {
        prof_log(&p->log, PROF_LOG_ERR, "profiling: %s, profiles will not "
                 "be written to it", error);
    }
}


/* The profiler process's log: a message from its loop thread waits. */
static void
prof_child_log_notify(void *data)
{
    uint64_t         one = 1;
    prof_process_t  *p = data;

    (void) write(p->log_fd, &one, sizeof(one));
}


static void
prof_child_close_listed(const int *keep, int n)
{
    int             fd, i;
    DIR            *dir;
    struct dirent  *de;

    dir = opendir("/proc/self/fd");
    if (dir == NULL) {
        return;
    }

    while ((de = readdir(dir)) != NULL) {
        fd = atoi(de->d_name);

        if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd < 3
            || fd == dirfd(dir))
        {
            continue;
        }

        for (i = 0; i < n && keep[i] != fd; i++) {
            /* void */
        }

        if (i == n) {
            (void) close(fd);
        }
    }

    (void) closedir(dir);
}


/*
 * Every descriptor from 3 up closed but the n of keep (sorted here).
 * Those below the highest kept go one by one, not by close_range's
 * bounded form: under qemu-user (arm64 images run on x86-64) such a range
 * leaves its last number registered as what it was, and a pipe or socket
 * given it later is taken for that (an eventfd's: a one-byte write
 * refused, which libuv's start-up answers with abort()).
 */
void
prof_close_fds_except(int *keep, int n)
{
    int  i, j, t, fd;

    for (i = 1; i < n; i++) {
        for (j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    }

    /* 0, 1 and 2 stay: libraries expect them taken (libuv asserts). */
    fd = 3;

    for (i = 0; i < n; i++) {
        if (keep[i] < fd) {
            continue;
        }
        while (fd < keep[i]) {
            (void) close(fd++);
        }
        fd = keep[i] + 1;
    }

    if (syscall(SYS_close_range, fd, ~0U, 0) == 0) {
        return;
    }

    /* Before Linux 5.9: one by one, as /proc/self/fd lists them. */
    prof_child_close_listed(keep, n);
}


/*
 * Every descriptor inherited from the worker closed but 0 to 2, the pipe,
 * the symbol store and what the server asked to keep (its error log): a
 * listening socket held open here would keep its port bound and, with
 * reuseport, take connections.
 */
static void
prof_child_close_fds(prof_process_t *p, int *keep, int n)
{
    keep[n++] = p->worker_fd;

    if (p->conf.symbol_store_fd > 0) {
        keep[n++] = p->conf.symbol_store_fd;
    }

    prof_close_fds_except(keep, n);
}


/*
 * Debug files from debuginfod servers, when there are URLs (the
 * configuration's, or DEBUGINFOD_URLS): nothing is loaded or fetched
 * until a frame is left unnamed.
 */
static void
prof_start_debuginfod(prof_process_t *p)
{
    prof_debuginfod_conf_t  dc;

    memset(&dc, 0, sizeof(dc));
    dc.urls = p->conf.debuginfod_urls;
    dc.cache_dir = p->conf.debuginfod_cache;
    dc.cache_max_bytes = p->conf.debuginfod_cache_bytes;
    dc.timeout_ms = p->conf.upload_timeout_ms;
    dc.retry_ms = p->conf.debuginfod_retry_ms;
    dc.diagnostics = &p->channel->diagnostics;

    if (prof_debuginfod_setenv(&dc) != 0) {
        prof_log(&p->log, PROF_LOG_NOTICE, "profiling: no debuginfod URLs "
                 "in the environment, no debug files are fetched");
        return;
    }

    p->debuginfod = prof_debuginfod_create(&dc);
}


/* The profiler process, from its fork to its exit (handover.h). */
void
prof_process_main(const prof_handover_t *h)
{
    int                     rc, n, nfds, keep[PROF_KEEP_FDS_MAX + 2];
    char                    line[2048];
    int64_t                 upload_ms, wait_ms;
    uint64_t                count;
    sigset_t                all;
    struct pollfd           pfd[2];
    struct timespec         pause = { 0, 100 * 1000 * 1000 };
    struct sigaction        sa;
    prof_channel_t         *ch = h->channel;
    prof_process_t         *p = &prof_process;
    prof_ring_drain_conf_t  dc;

    /* nginx's signals stay blocked: it exits when its worker has gone. */
    sigfillset(&all);
    (void) sigprocmask(SIG_SETMASK, &all, NULL);

    /*
     * Until it watches the pipe, a worker's death kills it: a start-up
     * stuck on a lock another thread of the worker held at the fork
     * leaves no orphan.
     */
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != h->worker_pid) {
        _exit(0);
    }

#ifdef __GLIBC__
    /*
     * One malloc arena for its threads (few, seldom contending): a thread's
     * arena keeps the pages of what it allocated in a burst, which the
     * main one gives back. Pages are reused, not returned and faulted in
     * again each period: the heap's top is given back past
     * PROF_TRIM_BYTES free (a burst's), and blocks are mmapped (and
     * unmapped when freed) only past PROF_MMAP_BYTES (fixed: glibc's
     * threshold would otherwise follow the largest block freed).
     */
    (void) mallopt(M_ARENA_MAX, 1);
    (void) mallopt(M_TRIM_THRESHOLD, PROF_TRIM_BYTES);
    (void) mallopt(M_MMAP_THRESHOLD, PROF_MMAP_BYTES);
#endif

    p->conf = *h->conf;
    p->pid = h->worker_pid;
    p->thread_name = h->thread_name;
    p->start_monotonic_ns = h->start_monotonic_ns;
    p->start_realtime_ns = h->start_realtime_ns;
    p->channel = h->channel;
    p->sampler = h->sampler;
    p->sampled = &h->sampler->sampled;
    p->lua = h->lua;
    p->worker_fd = h->worker_fd;
    p->log_fd = -1;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    (void) sigaction(SIGPROF, &sa, NULL);

    n = 0;
    if (p->conf.child_init != NULL) {
        n = p->conf.child_init(p->conf.child_init_data, keep,
                               PROF_KEEP_FDS_MAX);
        if (n < 0 || n > PROF_KEEP_FDS_MAX) {
            n = 0;
        }
    }

    prof_child_close_fds(p, keep, n);

    (void) prctl(PR_SET_NAME, "nginx-profiler", 0, 0, 0);

    /* Its log, on the server's handler from this thread. */
    p->log.handler = p->conf.log;
    p->log.data = p->conf.log_data;
    rc = prof_log_init(&p->log);
    p->log_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p->log.notify = (p->log_fd >= 0) ? prof_child_log_notify : NULL;
    p->log.notify_data = p;

    if (rc != 0) {
        goto failed;
    }

    rc = prof_process_conf_init(p);
    if (rc != 0) {
        goto failed;
    }

    rc = -ENOMEM;

    if ((p->agent_url != NULL || p->pyroscope_url != NULL
         || p->otlp_url != NULL)
        && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    {
        goto failed;
    }

    prof_open_dump_dir(p);
    prof_container_detect(&p->container);

    rc = prof_queue_init(&p->queue, PROF_BATCH_BYTES, p->conf.memory_limit,
                         PROF_POOL_BATCHES);
    if (rc != 0) {
        goto failed;
    }

    /* Its environment is libdebuginfod's: set before any thread. */
    if (p->conf.debuginfod) {
        prof_start_debuginfod(p);
    }

    rc = prof_start_loop(p);
    if (rc != 0) {
        goto failed;
    }

    memset(&dc, 0, sizeof(dc));
    dc.push_every_ns = PROF_PUSH_EVERY_NS;
    dc.queue = &p->queue;
    dc.notify = prof_loop_notify;
    dc.notify_data = p;
    dc.stalls = &p->stall_mailbox;
    dc.max_cpu_ppm = p->conf.max_cpu_ppm;
    dc.interval_told = &p->interval_told;
    dc.naming_since = &p->naming_since;
    if (pthread_getcpuclockid(p->loop_thread, &dc.naming_clock) != 0) {
        dc.naming_since = NULL;
    }
    p->interval_logged = p->conf.interval_ns;

    rc = prof_ring_drain_start(&p->drain, p->sampler, &dc);
    if (rc != 0) {
        (void) prof_stop_loop(p, 1000);
        goto failed;
    }

    __atomic_store_n(&ch->profiler_state, PROF_PROFILER_RUNNING,
                     __ATOMIC_RELEASE);

    /* The status page shows it now, unwind tables and all. */
    if (p->conf.status_slot != NULL) {
        __atomic_store_n(&p->status_due, 1, __ATOMIC_RELEASE);
        (void) uv_async_send(&p->batches_ready);
    }

    /* From now on the pipe tells: the last profile is finished after. */
    (void) prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);

    /* Its log's messages, until the worker is gone. */
    pfd[0].fd = p->worker_fd;
    pfd[0].events = POLLIN;
    pfd[1].fd = p->log_fd;
    pfd[1].events = POLLIN;
    nfds = (p->log_fd >= 0) ? 2 : 1;

    for ( ;; ) {
        rc = poll(pfd, nfds, -1);

        if (rc < 0) {
            /* EINTR, ENOMEM: the worker is still there. */
            (void) nanosleep(&pause, NULL);
            continue;
        }

        if (nfds == 2 && (pfd[1].revents & POLLIN)) {
            (void) read(p->log_fd, &count, sizeof(count));
            prof_log_deliver(&p->log);

        } else if (nfds == 2 && pfd[1].revents != 0) {
            /* Lost: the messages wait for the end. */
            nfds = 1;
        }

        if (pfd[0].revents != 0) {
            break;
        }
    }

    __atomic_store_n(&p->worker_gone, 1, __ATOMIC_RELEASE);

    /* Its maps are empty, or another process's once its pid is reused. */
    prof_symbolizer_freeze(p->symbolizer);

    /* The worker's last profile, within what it allowed. */
    prof_ring_drain_finish(p->drain);
    p->drain = NULL;
    p->sampler = NULL;

    upload_ms = __atomic_load_n(&ch->stop_upload_ms, __ATOMIC_ACQUIRE);
    wait_ms = __atomic_load_n(&ch->stop_wait_ms, __ATOMIC_ACQUIRE);
    if (upload_ms < 0) {
        /* Gone without prof_stop: it crashed or was killed. */
        upload_ms = (p->conf.upload_timeout_ms < PROF_CRASH_UPLOAD_MS)
                    ? p->conf.upload_timeout_ms : PROF_CRASH_UPLOAD_MS;
        wait_ms = upload_ms + PROF_CRASH_WAIT_MS;
    }

    __atomic_store_n(&p->stop_upload_ms, upload_ms, __ATOMIC_RELEASE);

    /*
     * The last profile waits for debug files under way at most half of
     * what its upload may take, from now (a close waiting already
     * included); its upload gets what is left.
     */
    __atomic_store_n(&p->stop_started_ns, prof_clock_ns(CLOCK_MONOTONIC),
                     __ATOMIC_RELEASE);

    if (p->debuginfod != NULL) {
        prof_debuginfod_end_waits(p->debuginfod,
                                  prof_clock_ns(CLOCK_MONOTONIC)
                                  + upload_ms * 1000000 / 2);
    }

    /*
     * Under valgrind code runs some fifty times slower: a deadline that
     * bounds the last export natively would bound only valgrind's speed
     * (ci/bench-instructions counts what the export costs), so it is
     * awaited there.
     */
    if (prof_under_valgrind()) {
        wait_ms = PROF_VALGRIND_WAIT_MS;
    }

    if (prof_stop_loop(p, wait_ms) != 0) {
        prof_log(&p->log, PROF_LOG_WARN, "profiling: the last profile of "
                 "worker %d was not exported within %lld ms", (int) p->pid,
                 (long long) wait_ms);
        prof_log_deliver(&p->log);
        _exit(0);
    }

    prof_log_deliver(&p->log);

    prof_diagnostics_format(&ch->diagnostics, line, sizeof(line));
    prof_log(&p->log, PROF_LOG_NOTICE, "profiling: stopped: %s", line);

    __atomic_store_n(&ch->profiler_state, PROF_PROFILER_DONE,
                     __ATOMIC_RELEASE);
    _exit(0);

failed:

    prof_log(&p->log, PROF_LOG_ERR, "profiling: the profiler process of "
             "worker %d could not start (%s), profiling is disabled in it",
             (int) p->pid, strerror(rc < 0 ? -rc : rc));
    prof_log_deliver(&p->log);

    __atomic_store_n(&ch->profiler_state, PROF_PROFILER_FAILED,
                     __ATOMIC_RELEASE);
    _exit(1);
}
