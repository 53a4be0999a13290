/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The event loop wrapper: closes a profile every period, brackets the
 * event wait for the sampler, then runs what the wait made ready in
 * nginx's own order, publishing for each event the request it works for.
 */

#include "ngx_http_profiling_module.h"

#if (NGX_HAVE_EPOLL)
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#endif


static ngx_int_t (*ngx_http_profiling_orig_process_events)(
    ngx_cycle_t *cycle, ngx_msec_t timer, ngx_uint_t flags);

static u_char *ngx_http_profiling_no_log_handler(ngx_log_t *log, u_char *buf,
    size_t len);

/* The worker's state, handed when the wrapper starts; the sampler's
   shared words, from the first turn of the loop on. */
static ngx_http_profiling_worker_t  *ngx_http_profiling_events_worker;
static prof_sampled_thread_t        *ngx_http_profiling_loop_sampled;

/* nginx's HTTP log handler, as w->http_log (learned, or
   ngx_http_profiling_no_log_handler): a word of its own that each event's
   dispatch reads without reloading w first. */
static ngx_log_handler_pt            ngx_http_profiling_http_log;

/* When the next profile closes, how often, and the clock after the last
   wait (nginx's clock). */
static ngx_msec_t  ngx_http_profiling_flush_at;
static ngx_msec_t  ngx_http_profiling_period;
static ngx_msec_t  ngx_http_profiling_woke_at;

#if (NGX_HAVE_EPOLL)

extern ngx_module_t  ngx_epoll_module;

/* nginx's epoll instance (static in ngx_epoll_module.c), when it is the
   event module and was found: the wrapper waits and runs the ready events
   itself, as ngx_epoll_process_events() does; else -1, and nginx's
   function posts them for the wrapper to run. */
static int                  ngx_http_profiling_ep = -1;
static struct epoll_event  *ngx_http_profiling_event_list;
static int                  ngx_http_profiling_nevents;

#endif

/*
 * The common case, with a turn of its own (ngx_http_profiling_turn):
 * epoll's instance found, no publication slow and no event logged at
 * debug level, none of which is looked at again for each event; a turn
 * is plain too only when nginx does not hold the accept mutex (no
 * NGX_POST_EVENTS). ngx_http_profiling_plain_sampled: the sampler's
 * shared words from the first turn on when turns may be plain, else NULL.
 */
static ngx_uint_t              ngx_http_profiling_plain;
static prof_sampled_thread_t  *ngx_http_profiling_plain_sampled;


/* Never called: it stands for nginx's HTTP log handler until learned. */
static u_char *
ngx_http_profiling_no_log_handler(ngx_log_t *log, u_char *buf, size_t len)
{
    return buf;
}


/*
 * nginx's HTTP log handler (static in nginx) is learned from the first
 * event of a connection an HTTP listening socket accepted: its log is the
 * one ngx_http_init_connection() made. Whether ev's log is one now.
 */
static ngx_uint_t
ngx_http_profiling_learn(ngx_http_profiling_worker_t *w, ngx_event_t *ev,
    ngx_log_t *log)
{
    ngx_connection_t  *c;

    if (w->http_log != ngx_http_profiling_no_log_handler
        || log->handler == NULL)
    {
        return 0;
    }

    c = ev->data;

    if (!ngx_http_profiling_real_connection(c)
        || (c->read != ev && c->write != ev)
        || c->log != log || c->listening == NULL
        || c->listening->handler != ngx_http_init_connection)
    {
        return 0;
    }

    w->http_log = log->handler;
    ngx_http_profiling_http_log = log->handler;

    return 1;
}


/* ngx_http_profiling_publish(), known not slow when plain. */
static ngx_inline __attribute__((always_inline)) void
ngx_http_profiling_publish_plain(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_http_request_t *r, ngx_log_t *log,
    void *object, ngx_uint_t plain)
{
    if (plain) {
        ngx_http_profiling_publish_fast(w, sampled, r, log, object);

    } else {
        ngx_http_profiling_publish(w, sampled, r, log, object);
    }
}


/*
 * Runs an event's handler with what it works for published: the request
 * its log names (client and upstream connections, timers and posted
 * events of modules that give their events the request's log), or, not
 * known yet, its connection (the request it makes takes the samples).
 * It stays published after the handler, until another event or the
 * event loop's wait: a request's log phase unpublishes it before it is
 * freed. Plain: not slow (see ngx_http_profiling_turn).
 */
static ngx_inline __attribute__((always_inline)) void
ngx_http_profiling_dispatch(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_event_t *ev, ngx_uint_t plain)
{
    ngx_log_t           *log;
    ngx_http_request_t  *r;

    log = ev->log;
    r = NULL;

    /* An HTTP connection's or request's event, the common case: laid out
       to fall through (else a jump more an event). */
    if (log != NULL
        && (__builtin_expect(log->handler == ngx_http_profiling_http_log, 1)
            || (ngx_http_profiling_http_log
                == ngx_http_profiling_no_log_handler
                && ngx_http_profiling_learn(w, ev, log))))
    {
        r = ((ngx_http_log_ctx_t *) log->data)->request;

#if (NGX_QUIC)
        if (r == NULL && w->slow) {
            r = ngx_http_profiling_quic_request(w, ev);
        }
#endif

    } else {
        log = NULL;
    }

    ngx_http_profiling_publish_plain(w, sampled, r, log, ev->data, plain);

    ev->handler(ev);
}


/*
 * An event epoll returned, for connection c, in a plain turn: what it works
 * for is published without its request. Its log is its connection's, which
 * lives as long as c is open, and c is stamped by its number when a sample
 * takes a tag: the tag is resolved to the request c's log names then (at
 * the next publication, as long as c is still the same and open), or, when
 * the request ends first, to that request in its log phase. Nothing of the
 * request is read for the event: two loads fewer. Other events (timers,
 * posted events), whose data may live in a request's memory, publish their
 * request (ngx_http_profiling_dispatch).
 */
static ngx_inline __attribute__((always_inline)) void
ngx_http_profiling_dispatch_io(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_event_t *ev, ngx_connection_t *c,
    ngx_uint_t plain)
{
    ngx_log_t  *log;

    if (!plain) {
        ngx_http_profiling_dispatch(w, sampled, ev, plain);
        return;
    }

    log = ev->log;

    if (log != NULL
        && (__builtin_expect(log->handler == ngx_http_profiling_http_log, 1)
            || (ngx_http_profiling_http_log
                == ngx_http_profiling_no_log_handler
                && ngx_http_profiling_learn(w, ev, log))))
    {
        ngx_http_profiling_publish_fast(w, sampled, NULL, log, c);

    } else {
        /* No request's: the log word cleared alone. */
        prof_unpublish(sampled);

        if (prof_pending_tag(sampled) != 0) {
            ngx_http_profiling_resolve_pending(w, NULL);
        }
    }

    ev->handler(ev);
}


/*
 * The event wait is over: its bracket closed. (After a dlopen the handler
 * met code outside its tables: the turn ends on the slow path,
 * ngx_http_profiling_stalled, which has them rebuilt.)
 */
static ngx_inline void
ngx_http_profiling_waited(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled)
{
    prof_wait_end(sampled);
}


#if (NGX_HAVE_EPOLL)

/*
 * ngx_epoll_process_events() (./configure checks that the nginx it builds
 * against has exactly this), but for the wait's bracket and each event's
 * publication: nginx without the module runs the events as they come, so
 * they are not posted only to be run after. Its code is nginx's
 * (Copyright (C) Igor Sysoev, Copyright (C) Nginx, Inc.; BSD-2-Clause, as
 * this file), as are the loops below that run the timers and the posted
 * events.
 */
static ngx_inline __attribute__((always_inline)) ngx_int_t
ngx_http_profiling_epoll(ngx_cycle_t *cycle, ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_msec_t timer, ngx_uint_t flags,
    ngx_uint_t plain)
{
    int                 events;
    uint32_t            revents;
    uint64_t            turn;
    ngx_int_t           instance;
    ngx_uint_t          level;
    ngx_err_t           err;
    ngx_event_t        *rev, *wev;
    ngx_queue_t        *queue;
    ngx_connection_t   *c;
    struct epoll_event  *event_list, *ee, *last;

    event_list = ngx_http_profiling_event_list;

    if (!plain) {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                       "epoll timer: %M", timer);
    }

    turn = prof_wait_begin(sampled);
    if (turn > sampled->stall_ticks) {
        ngx_http_profiling_stalled(w, turn);
    }

    events = epoll_wait(ngx_http_profiling_ep, event_list,
                        ngx_http_profiling_nevents, (int) timer);

    err = (events == -1) ? ngx_errno : 0;

    if (flags & NGX_UPDATE_TIME || ngx_event_timer_alarm) {
        ngx_time_update();
    }

    ngx_http_profiling_woke_at = ngx_current_msec;
    ngx_http_profiling_waited(w, sampled);

    if (err) {
        if (err == NGX_EINTR) {

            if (ngx_event_timer_alarm) {
                ngx_event_timer_alarm = 0;
                return NGX_OK;
            }

            level = NGX_LOG_INFO;

        } else {
            level = NGX_LOG_ALERT;
        }

        ngx_log_error(level, cycle->log, err, "epoll_wait() failed");
        return NGX_ERROR;
    }

    if (events == 0) {
        if (timer != NGX_TIMER_INFINITE) {
            return NGX_OK;
        }

        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "epoll_wait() returned no events without timeout");
        return NGX_ERROR;
    }

    /* event_list[i] for i < events, with fewer registers kept across the
       handlers (the instance read again after them) */
    last = event_list + events;

    for (ee = event_list; ee < last; ee++) {
        c = ee->data.ptr;

        instance = (uintptr_t) c & 1;
        c = (ngx_connection_t *) ((uintptr_t) c & (uintptr_t) ~1);

        rev = c->read;

        if (c->fd == -1 || rev->instance != instance) {
            /* a stale event: its descriptor was closed in this turn */
            if (!plain) {
                ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                               "epoll: stale event %p", c);
            }

            continue;
        }

        revents = ee->events;

        if (!plain) {
            ngx_log_debug3(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                           "epoll: fd:%d ev:%04XD d:%p",
                           c->fd, revents, ee->data.ptr);
        }

        if (revents & (EPOLLERR|EPOLLHUP)) {
            if (!plain) {
                ngx_log_debug2(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                               "epoll_wait() error on fd:%d ev:%04XD",
                               c->fd, revents);
            }

            /* for an active handler to see the error */
            revents |= EPOLLIN|EPOLLOUT;
        }

        if ((revents & EPOLLIN) && rev->active) {

#if (NGX_HAVE_EPOLLRDHUP)
            if (revents & EPOLLRDHUP) {
                rev->pending_eof = 1;
            }
#endif

            rev->ready = 1;
            rev->available = -1;

            if (!plain && (flags & NGX_POST_EVENTS)) {
                queue = rev->accept ? &ngx_posted_accept_events
                                    : &ngx_posted_events;

                ngx_post_event(rev, queue);

            } else {
                ngx_http_profiling_dispatch_io(w, sampled, rev, c, plain);
            }
        }

        wev = c->write;

        if ((revents & EPOLLOUT) && wev->active) {

            if (c->fd == -1
                || wev->instance != ((uintptr_t) ee->data.ptr & 1))
            {
                if (!plain) {
                    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                                   "epoll: stale event %p", c);
                }

                continue;
            }

            wev->ready = 1;
#if (NGX_THREADS)
            wev->complete = 1;
#endif

            if (!plain && (flags & NGX_POST_EVENTS)) {
                ngx_post_event(wev, &ngx_posted_events);

            } else {
                ngx_http_profiling_dispatch_io(w, sampled, wev, c, plain);
            }
        }
    }

    return NGX_OK;
}


/*
 * nginx's epoll instance: an eventfd is added to it by nginx's own
 * function, then removed from each descriptor in turn until one had it
 * (closed, it leaves the instance anyway). -1: not found.
 */
static int
ngx_http_profiling_find_epoll(ngx_cycle_t *cycle)
{
    int                fd, ep;
    rlim_t             n, max;
    ngx_event_t        rev, wev;
    struct rlimit      rlim;
    ngx_connection_t   c;

    if (getrlimit(RLIMIT_NOFILE, &rlim) == -1) {
        return -1;
    }

    fd = eventfd(0, EFD_NONBLOCK|EFD_CLOEXEC);
    if (fd == -1) {
        return -1;
    }

    ngx_memzero(&c, sizeof(ngx_connection_t));
    ngx_memzero(&rev, sizeof(ngx_event_t));
    ngx_memzero(&wev, sizeof(ngx_event_t));

    c.fd = fd;
    c.read = &rev;
    c.write = &wev;
    c.log = cycle->log;
    rev.data = &c;
    rev.log = cycle->log;
    wev.data = &c;
    wev.write = 1;
    wev.log = cycle->log;

    ep = -1;

    if (ngx_add_event(&rev, NGX_READ_EVENT, NGX_CLEAR_EVENT) == NGX_OK) {
        max = (rlim.rlim_cur == RLIM_INFINITY) ? 1048576 : rlim.rlim_cur;

        for (n = 0; n < max; n++) {
            if ((int) n != fd
                && epoll_ctl((int) n, EPOLL_CTL_DEL, fd, NULL) == 0)
            {
                ep = (int) n;
                break;
            }
        }
    }

    (void) close(fd);

    return ep;
}

#endif


/* The posted events, as ngx_event_process_posted() runs them. */
static ngx_inline __attribute__((always_inline)) void
ngx_http_profiling_run_posted(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_queue_t *posted, ngx_uint_t plain)
{
    ngx_queue_t  *q;
    ngx_event_t  *ev;

    if (ngx_queue_empty(posted)) {
        return;
    }

    prof_turn_phase(sampled, PROF_PHASE_POSTED);

    while (!ngx_queue_empty(posted)) {

        q = ngx_queue_head(posted);
        ev = ngx_queue_data(q, ngx_event_t, queue);

        ngx_delete_posted_event(ev);

        ngx_http_profiling_dispatch(w, sampled, ev, plain);
    }
}


/*
 * The expired timers, as ngx_event_expire_timers() runs them (a request
 * delayed by limit_req, or resumed after ngx.sleep, resumes here).
 */
static void
ngx_http_profiling_run_timers(ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled)
{
    ngx_event_t        *ev;
    ngx_rbtree_node_t  *node, *root, *sentinel;

    sentinel = ngx_event_timer_rbtree.sentinel;

    prof_turn_phase(sampled, PROF_PHASE_TIMERS);

    for ( ;; ) {
        root = ngx_event_timer_rbtree.root;

        if (root == sentinel) {
            return;
        }

        node = ngx_rbtree_min(root, sentinel);

        /* node->key > ngx_current_msec */

        if ((ngx_msec_int_t) (node->key - ngx_current_msec) > 0) {
            return;
        }

        ev = ngx_rbtree_data(node, ngx_event_t, timer);

        ngx_rbtree_delete(&ngx_event_timer_rbtree, &ev->timer);

#if (NGX_DEBUG)
        ev->timer.left = NULL;
        ev->timer.right = NULL;
        ev->timer.parent = NULL;
#endif

        ev->timer_set = 0;

        ev->timedout = 1;

        ngx_http_profiling_dispatch(w, sampled, ev, 0);
    }
}


static void
ngx_http_profiling_capture_idle(ngx_http_profiling_worker_t *w)
{
    ngx_uint_t  n;
    uint64_t    leaf[2];

    n = 0;

#if (NGX_HAVE_EPOLL)
    if (ngx_event_flags & NGX_USE_EPOLL_EVENT) {
        leaf[n++] = (uint64_t) (uintptr_t) epoll_wait;
    }

    if (ngx_http_profiling_ep == -1)
#endif
    {
        /* A return address: the aggregator moves it back by one. */
        leaf[n++] = (uint64_t) (uintptr_t)
                    ngx_http_profiling_orig_process_events + 1;
    }

    /* Skip the capturing function and this one. */
    prof_sampler_capture_idle_stack(w->sampler, leaf, n, 2);
}


/*
 * A turn of the loop, from the profile's period to the posted events.
 */
static ngx_inline __attribute__((always_inline)) ngx_int_t
ngx_http_profiling_turn(ngx_cycle_t *cycle, ngx_http_profiling_worker_t *w,
    prof_sampled_thread_t *sampled, ngx_msec_t timer, ngx_uint_t flags,
    ngx_uint_t plain)
{
    ngx_int_t   rc;
    uint64_t    turn;
    ngx_msec_t  now, left, timers_due;

    /* What nginx ran after the last turn (OpenResty's delayed posted
       events, timers due meanwhile) may have published a request: in a
       slow turn its handlers' CPU time must not run on through the wait.
       (A plain turn's publication is only words the next event replaces;
       a tag is resolved before a profile closes, below.) */
    if (!plain
        && (sampled->running.log != 0 || prof_pending_tag(sampled) != 0))
    {
        ngx_http_profiling_request_stop(w);
    }

    /*
     * A profile closes every period, from here rather than from a timer:
     * one more node in nginx's timer tree is a few more comparisons for
     * every timer a request sets. The wait ends in time for it.
     */
    now = ngx_current_msec;
    left = ngx_http_profiling_flush_at - now;

    if ((ngx_msec_int_t) left <= 0) {
        /* What nginx ran after the last turn (OpenResty's delayed posted
           events) may have published a request: its tag resolved first
           (else the next event's publication resolves it). */
        ngx_http_profiling_request_stop(w);

        prof_flush(w->profiler);
        ngx_http_profiling_flush_at = now + ngx_http_profiling_period;
        left = ngx_http_profiling_period;
    }

    /*
     * When nginx's timer tree is looked at: once its first timer is due
     * (the timer nginx found, or earlier: the accept mutex's delay,
     * posted-next events; the accept handlers' timers are later still),
     * or every time when that is not known: no timer (NGX_TIMER_INFINITE
     * makes the sum a millisecond ago), or timer_resolution (no
     * NGX_UPDATE_TIME: the clock moves by signal, and the timeout may be
     * the accept mutex's delay). nginx's clock never goes back.
     */
    timers_due = now;

    if (flags & NGX_UPDATE_TIME) {
        timers_due += timer;
    }

    /* Kept as one word across the wait (not as now and timer apart, two
       more to keep). */
    __asm__ ("" : "+r" (timers_due));

#if (NGX_HAVE_EPOLL)
    if (plain || ngx_http_profiling_ep != -1) {
        rc = ngx_http_profiling_epoll(cycle, w, sampled, ngx_min(timer, left),
                                      flags, plain);
    } else
#endif
    {
        turn = prof_wait_begin(sampled);
        if (turn > sampled->stall_ticks) {
            ngx_http_profiling_stalled(w, turn);
        }

        rc = ngx_http_profiling_orig_process_events(cycle,
                                                    ngx_min(timer, left),
                                                    flags | NGX_POST_EVENTS);
        ngx_http_profiling_woke_at = ngx_current_msec;
        ngx_http_profiling_waited(w, sampled);
    }

    /* Accept events are queued, and the accept mutex held, only with
       NGX_POST_EVENTS (nginx's, or the wrapper's for another module),
       never in a plain turn. */
    if (!plain) {
        if (!ngx_queue_empty(&ngx_posted_accept_events)) {
            ngx_http_profiling_run_posted(w, sampled,
                                          &ngx_posted_accept_events, plain);
        }

        if (ngx_accept_mutex_held) {
            ngx_shmtx_unlock(&ngx_accept_mutex);
        }
    }

    if ((ngx_msec_int_t) (ngx_current_msec - timers_due) >= 0) {
        ngx_http_profiling_run_timers(w, sampled);
    }

    ngx_http_profiling_run_posted(w, sampled, &ngx_posted_events, plain);

    /* A handler moved the clock on (as Lua's ngx.update_time() does):
       timers due now, which nginx would run next, run here. */
    if (ngx_current_msec != ngx_http_profiling_woke_at) {
        ngx_http_profiling_run_timers(w, sampled);
        ngx_http_profiling_run_posted(w, sampled, &ngx_posted_events, plain);
    }

    /*
     * What nginx runs after us is no request's that we know of. In a
     * plain turn a tag pending is left to the next publication that looks
     * (the next event's, the profile's close, the log phase of the request
     * it names): nothing is tagged meanwhile, and what it names stays
     * alive or is checked then.
     */
    if (plain) {
        prof_unpublish(sampled);

    } else {
        ngx_http_profiling_publish(w, sampled, NULL, NULL, NULL);
    }

    prof_turn_phase(sampled, PROF_PHASE_NGINX);

    return rc;
}


/*
 * Wraps the event module's process_events. With epoll the wrapper waits
 * and runs the ready events itself, as nginx does; with another event
 * module (or epoll's instance not found) that module is asked with
 * NGX_POST_EVENTS only to wait and queue what is ready (as nginx does when
 * it holds the accept mutex), so the bracket covers the wait alone. Then,
 * in the order of ngx_process_events_and_timers(): the accept events, the
 * accept mutex released, the expired timers (when one is due), the other
 * posted events, and again the timers and posted events when a handler
 * moved the clock on; nginx then finds nothing left to run (but OpenResty's
 * delayed posted events, which its nginx runs last). ./configure checks
 * that the nginx it builds against has this order.
 */
static ngx_int_t
ngx_http_profiling_process_events(ngx_cycle_t *cycle, ngx_msec_t timer,
    ngx_uint_t flags)
{
    prof_sampled_thread_t        *sampled;
    ngx_http_profiling_worker_t  *w;

    w = ngx_http_profiling_events_worker;
    sampled = ngx_http_profiling_plain_sampled;

    if (sampled != NULL) {
        /* Each with its flags known: nginx updates its clock itself (no
           timer_resolution), or the wait is left to the alarm. */
        if (flags == NGX_UPDATE_TIME) {
            return ngx_http_profiling_turn(cycle, w, sampled, timer,
                                           NGX_UPDATE_TIME, 1);
        }

        if (flags == 0) {
            return ngx_http_profiling_turn(cycle, w, sampled, timer, 0, 1);
        }
    }

    sampled = ngx_http_profiling_loop_sampled;

    if (sampled == NULL) {
        sampled = w->sampled;

        if (sampled == NULL) {
            /* Stopped, under a wrapper installed after ours. */
            return ngx_http_profiling_orig_process_events(cycle, timer,
                                                          flags);
        }

        /* The first turn. */
        ngx_http_profiling_loop_sampled = sampled;
        ngx_http_profiling_capture_idle(w);

        /* Every module's init_process has run: a tracer is there now;
           a module started after the profiler may have installed its own
           action for SIGPROF or SIGSEGV over the profiler's. */
        prof_take_tracer_identity(w->profiler);
        prof_sampler_retake_signals(w->sampler);

        if (ngx_http_profiling_plain) {
            ngx_http_profiling_plain_sampled = sampled;
        }
    }

    return ngx_http_profiling_turn(cycle, w, sampled, timer, flags, 0);
}


#if (NGX_HAVE_EPOLL)

/*
 * Whether the wrapper runs epoll's events itself: epoll is the event
 * module, its functions are nginx's own (no other module wraps them), and
 * its instance is found. Else nginx's function posts them.
 */
static void
ngx_http_profiling_use_epoll(ngx_cycle_t *cycle)
{
    char                *why;
    ngx_uint_t          *nevents;
    ngx_event_module_t  *epoll;
    ngx_int_t          (*process)(ngx_cycle_t *cycle, ngx_msec_t timer,
                                  ngx_uint_t flags);

    if (!(ngx_event_flags & NGX_USE_EPOLL_EVENT)) {
        return;
    }

    epoll = ngx_epoll_module.ctx;
    process = ngx_event_actions.process_events;

    if (process == ngx_http_profiling_process_events) {
        process = ngx_http_profiling_orig_process_events;
    }

    /* epoll_events: the first field of ngx_epoll_module's configuration. */
    nevents = ngx_event_get_conf(cycle->conf_ctx, ngx_epoll_module);

#if !(NGX_HAVE_EPOLLRDHUP)
    why = "the module was built without EPOLLRDHUP";
#else
    why = NULL;
#endif

    if (why == NULL
        && (process != epoll->actions.process_events
            || ngx_event_actions.add != epoll->actions.add))
    {
        why = "another module wraps the event module's functions";
    }

    if (why == NULL
        && (nevents == NULL || *nevents == 0
            || *nevents > NGX_MAX_INT32_VALUE))
    {
        why = "epoll_events is not known";
    }

    if (why == NULL) {
        ngx_http_profiling_event_list = ngx_alloc(sizeof(struct epoll_event)
                                                  * *nevents, cycle->log);
        if (ngx_http_profiling_event_list == NULL) {
            return;
        }

        ngx_http_profiling_nevents = (int) *nevents;
        ngx_http_profiling_ep = ngx_http_profiling_find_epoll(cycle);

        if (ngx_http_profiling_ep != -1) {
            return;
        }

        ngx_free(ngx_http_profiling_event_list);
        ngx_http_profiling_event_list = NULL;
        why = "nginx's epoll instance was not found";
    }

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "profiling: epoll's ready events are posted and run after "
                  "the wait (more instructions an event): %s", why);
}

#endif


/*
 * The first profile closes a period from now (nginx's clock, updated);
 * nginx's HTTP log handler is learned again.
 */
void
ngx_http_profiling_events_start(ngx_cycle_t *cycle,
    ngx_http_profiling_worker_t *w, ngx_msec_t period)
{
    ngx_http_profiling_events_worker = w;
    ngx_http_profiling_period = period;
    w->http_log = ngx_http_profiling_no_log_handler;
    ngx_http_profiling_http_log = ngx_http_profiling_no_log_handler;
    ngx_http_profiling_loop_sampled = NULL;
    ngx_http_profiling_plain_sampled = NULL;
    ngx_http_profiling_flush_at = ngx_current_msec + period;

#if (NGX_HAVE_EPOLL)
    if (ngx_http_profiling_ep == -1) {
        ngx_http_profiling_use_epoll(cycle);
    }

    ngx_http_profiling_plain = (ngx_http_profiling_ep != -1
                                && !w->slow
#if (NGX_DEBUG)
                                && !(cycle->log->log_level
                                     & NGX_LOG_DEBUG_EVENT)
#endif
                                );
#endif

    if (ngx_event_actions.process_events
        == ngx_http_profiling_process_events)
    {
        return;
    }

    ngx_http_profiling_orig_process_events = ngx_event_actions.process_events;
    ngx_event_actions.process_events = ngx_http_profiling_process_events;
}


/*
 * Restores the event module's function unless another module wrapped ours
 * since: then ours stays, and passes through (the worker's sampled words
 * are NULL by now).
 */
void
ngx_http_profiling_events_stop(void)
{
    ngx_http_profiling_loop_sampled = NULL;
    ngx_http_profiling_plain_sampled = NULL;
    ngx_http_profiling_plain = 0;

#if (NGX_HAVE_EPOLL)
    if (ngx_http_profiling_ep != -1) {
        ngx_http_profiling_ep = -1;
        ngx_free(ngx_http_profiling_event_list);
        ngx_http_profiling_event_list = NULL;
    }
#endif

    if (ngx_event_actions.process_events
        == ngx_http_profiling_process_events)
    {
        ngx_event_actions.process_events =
                                       ngx_http_profiling_orig_process_events;
    }
}
