/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Profiler, the worker's end: the channel mapped, the sampler armed, the
 * profiler process forked; the periods closed, the labels and endpoint
 * counts written to the channel, and the stop.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "channel/channel.h"
#include "channel/endpoint_counts.h"
#include "channel/handover.h"
#include "channel/lua_frames.h"
#include "channel/status.h"
#include "worker/tracer_info.h"
#include "worker/profiler.h"


struct prof_s {
    prof_conf_t          conf;                  /* the profiler process
                                                   reads its copy too */
    pid_t                pid;
    int64_t              start_monotonic_ns;    /* of the first profile */
    int64_t              start_realtime_ns;
    char                 thread_name[32];
    prof_log_t           log;

    prof_channel_t      *channel;               /* shared (channel.h) */
    prof_sampler_t      *sampler;               /* shared; NULL once
                                                   stopped */
    prof_lua_t          *lua;                   /* LuaJIT's frames
                                                   (lua_frames.h), shared;
                                                   NULL: none */

    pid_t                profiler_pid;
    int                  profiler_pidfd;        /* -1: none */
    int                  profiler_fd;           /* its end of the pipe: the
                                                   profiler process sees it
                                                   close when the worker
                                                   goes */
    uint64_t             period;                /* the period now */
    int                  profiler_lost;
    prof_endpoint_table_t  *counting;           /* its table, NULL: not
                                                   given back yet */
};


static void
prof_read_thread_name(prof_t *p)
{
    int      fd;
    char     path[64];
    ssize_t  n;

    snprintf(path, sizeof(path), "/proc/self/task/%ld/comm",
             (long) syscall(SYS_gettid));

    strcpy(p->thread_name, "main");

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }

    n = read(fd, p->thread_name, sizeof(p->thread_name) - 1);
    close(fd);

    if (n <= 0) {
        strcpy(p->thread_name, "main");
        return;
    }

    while (n > 0 && p->thread_name[n - 1] == '\n') {
        n--;
    }
    p->thread_name[n] = '\0';
}


static void
prof_free(prof_t *p)
{
    prof_log_free(&p->log);
    free(p);
}


/*
 * Lets the profiler process read this process's memory and registers
 * (process_vm_readv, /proc/PID/task/TID/syscall): to take the stack of
 * this thread while it is blocked in a system call without a signal,
 * which would end a sleep early (profiler/remote_stack.h). The kernel
 * lets a process read another of the same user that is dumpable (nginx
 * makes its workers so, for core dumps); Yama's ptrace_scope 1 (Ubuntu's
 * default) lets only an ancestor, or a process the target names: this
 * names the profiler process, this process's own child, running this
 * module's code under its user, and no other; the naming ends with that
 * process. Without Yama the call fails and is not needed; with a scope
 * of 2 or 3, or a worker not dumpable, the read is refused: the profiler
 * process asks for the stack with the signal then, and says so once.
 */
static void
prof_allow_profiler(prof_t *p)
{
#ifdef PR_SET_PTRACER
    (void) prctl(PR_SET_PTRACER, (unsigned long) p->profiler_pid, 0, 0, 0);
#endif
}


/*
 * Forks the profiler process (profiler/process.c), handing it what it
 * starts from; signals blocked across the fork (a timer signal arriving
 * meanwhile would make the kernel start it again).
 */
static int
prof_fork(prof_t *p)
{
    int              fds[2], err;
    pid_t            pid;
    sigset_t         all, saved;
    prof_handover_t  h;

    if (pipe2(fds, O_CLOEXEC) != 0) {
        return -errno;
    }

    /* The table the child has at the same address, in its copy of this
       process's memory (sampler_state.h). */
    p->sampler->forked_table = p->sampler->table;

    memset(&h, 0, sizeof(h));
    h.conf = &p->conf;
    h.worker_pid = p->pid;
    h.channel = p->channel;
    h.sampler = p->sampler;
    h.lua = p->lua;
    h.start_monotonic_ns = p->start_monotonic_ns;
    h.start_realtime_ns = p->start_realtime_ns;
    h.thread_name = p->thread_name;

    sigfillset(&all);
    (void) pthread_sigmask(SIG_SETMASK, &all, &saved);

    pid = fork();

    if (pid == 0) {
        (void) close(fds[1]);
        h.worker_fd = fds[0];
        prof_process_main(&h);
    }

    err = errno;

    (void) pthread_sigmask(SIG_SETMASK, &saved, NULL);
    (void) close(fds[0]);

    if (pid < 0) {
        (void) close(fds[1]);
        return -err;
    }

    p->profiler_pid = pid;
    p->profiler_fd = fds[1];
    p->profiler_pidfd = (int) syscall(SYS_pidfd_open, pid, 0);

    prof_allow_profiler(p);

    return 0;
}


int
prof_start(prof_t **profiler, const prof_conf_t *conf)
{
    int                  rc;
    prof_t              *p;
    prof_sampler_conf_t  sc;

    p = calloc(1, sizeof(prof_t));
    if (p == NULL) {
        return -ENOMEM;
    }

    p->profiler_fd = -1;
    p->profiler_pidfd = -1;

    p->conf = *conf;
    p->pid = getpid();
    p->log.handler = conf->log;
    p->log.data = conf->log_data;

    if (prof_log_init(&p->log) != 0) {
        prof_free(p);
        return -ENOMEM;
    }

    p->channel = prof_channel_create();
    if (p->channel == NULL) {
        prof_free(p);
        return -ENOMEM;
    }

    p->channel->stop_upload_ms = -1;
    p->counting = &p->channel->endpoints[0];

    prof_read_thread_name(p);

    p->start_monotonic_ns = prof_clock_ns(CLOCK_MONOTONIC);
    p->start_realtime_ns = prof_clock_ns(CLOCK_REALTIME);

    memset(&sc, 0, sizeof(sc));
    sc.interval_ns = conf->interval_ns;
    sc.max_frames = conf->max_frames;
    sc.stall_ns = conf->stall_ns;
    sc.diagnostics = &p->channel->diagnostics;
    sc.unwind_table = conf->unwind_table;
    sc.start_monotonic_ns = p->start_monotonic_ns;

    if (conf->lua) {
        p->lua = prof_lua_create();
    }

    rc = prof_sampler_start(&p->sampler, &sc);
    if (rc != 0) {
        prof_channel_free(p->channel);
        prof_free(p);
        return rc;
    }

    rc = prof_fork(p);
    if (rc != 0) {
        prof_sampler_stop(p->sampler, 0);
        prof_sampler_release(p->sampler);
        prof_channel_free(p->channel);
        prof_free(p);
        return rc;
    }

    *profiler = p;
    return 0;
}


void
prof_set_lua_vm(prof_t *p, const prof_lua_vm_t *vm, const char *why,
    int frames)
{
    if (p->lua == NULL || p->sampler == NULL) {
        return;
    }

    if (vm == NULL && (why == NULL || !frames)) {
        __atomic_store_n(&p->lua->state, PROF_LUA_NONE, __ATOMIC_RELEASE);
        return;
    }

    if (vm == NULL) {
        (void) snprintf(p->lua->why, sizeof(p->lua->why), "%s", why);
        __atomic_store_n(&p->lua->state, PROF_LUA_NOT_RECOGNIZED,
                         __ATOMIC_RELEASE);
        return;
    }

    p->lua->vm = *vm;
    __atomic_store_n(&p->lua->state,
                     frames ? PROF_LUA_FOUND : PROF_LUA_WALK_ONLY,
                     __ATOMIC_RELEASE);
    prof_sampler_enable_lua(p->sampler, p->lua);
}


/*
 * The profiler process went without its worker asking: it crashed or was
 * killed. The worker stops sampling (nothing drains the ring) and goes on.
 */
static void
prof_profiler_lost(prof_t *p)
{
    /* Its mapping stays: the server's hooks still write its words
       (prof_sampler_sampled_thread). */
    prof_sampler_stop(p->sampler, p->period);
    p->sampler = NULL;

    p->profiler_lost = 1;

    prof_log(&p->log, PROF_LOG_ERR, "profiling: the profiler process %d "
             "exited unexpectedly, profiling is stopped in this worker",
             (int) p->profiler_pid);

    if (p->conf.status_slot != NULL) {
        prof_status_publish_lost(p->conf.status_slot,
                                 "the profiler process exited unexpectedly");
    }
}


/* Whether the profiler process has exited (pidfd readable). */
static int
prof_profiler_exited(prof_t *p)
{
    struct pollfd  pfd;

    if (p->profiler_pidfd < 0) {
        return kill(p->profiler_pid, 0) != 0 && errno == ESRCH;
    }

    pfd.fd = p->profiler_pidfd;
    pfd.events = POLLIN;
    pfd.revents = 0;

    return poll(&pfd, 1, 0) == 1;
}


void
prof_flush(prof_t *p)
{
    uint64_t                closing;
    prof_endpoint_table_t  *next;

    if (p->sampler == NULL) {
        return;
    }

    if (prof_profiler_exited(p)) {
        prof_profiler_lost(p);
        return;
    }

    closing = p->period++;

    /* The next period's table, once the profiler process gave it back. */
    next = &p->channel->endpoints[p->period & 1];
    p->counting = (__atomic_load_n(&next->period, __ATOMIC_ACQUIRE)
                   == p->period) ? next : NULL;

    prof_sampler_flush(p->sampler, closing);
}


int
prof_stop(prof_t *p, int64_t upload_ms, int64_t wait_ms)
{
    if (p->sampler != NULL) {
        __atomic_store_n(&p->channel->stop_wait_ms, wait_ms,
                         __ATOMIC_RELEASE);
        __atomic_store_n(&p->channel->stop_upload_ms, upload_ms,
                         __ATOMIC_RELEASE);

        prof_sampler_stop(p->sampler, p->period);
        prof_sampler_release(p->sampler);
        p->sampler = NULL;
    }

    /* The profiler process sees the pipe close, and finishes alone. */
    (void) close(p->profiler_fd);
    if (p->profiler_pidfd >= 0) {
        (void) close(p->profiler_pidfd);
    }

    prof_log_deliver(&p->log);

    prof_channel_free(p->channel);
    prof_lua_free(p->lua);
    prof_free(p);

    return 0;
}


int
prof_label(prof_t *p, const prof_labels_t *labels)
{
    prof_labels_t  *l;

    l = prof_spsc_reserve(&p->channel->labels);
    if (l == NULL) {
        prof_counter_add(p->channel->diagnostics.labels_dropped, 1);
        return -ENOSPC;
    }

    memcpy(l, labels, offsetof(prof_labels_t, endpoint)
                      + (labels->endpoint_length <= PROF_ENDPOINT_MAX
                         ? labels->endpoint_length : PROF_ENDPOINT_MAX));

    (void) prof_spsc_commit(&p->channel->labels);

    return 0;
}


void
prof_count_endpoint_slow(prof_t *p, uint64_t seed, const void *a,
    size_t alen, const void *b, size_t blen)
{
    prof_endpoint_table_t  *t;

    /* Given back since the flush? */
    t = &p->channel->endpoints[p->period & 1];

    if (__atomic_load_n(&t->period, __ATOMIC_ACQUIRE) != p->period) {
        prof_counter_add(p->channel->diagnostics.endpoints_dropped, 1);
        return;
    }

    p->counting = t;
    prof_endpoint_table_count(t, seed, a, alen, b, blen);
}


void
prof_take_tracer_identity(prof_t *p)
{
    int  state;

    if (!p->conf.tracer_identity
        || __atomic_load_n(&p->channel->tracer_info_state, __ATOMIC_RELAXED)
           != 0)
    {
        return;
    }

    state = (prof_tracer_info_read(&p->channel->tracer_info) == 0) ? 1 : 2;
    __atomic_store_n(&p->channel->tracer_info_state, state, __ATOMIC_RELEASE);
}


prof_endpoint_table_t **
prof_get_endpoint_table(prof_t *p)
{
    return &p->counting;
}


prof_sampler_t *
prof_get_sampler(prof_t *p)
{
    return p->sampler;
}
