/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The event loop wrapper: closes a profile every period, brackets the
 * event wait for the sampler, then runs what the wait made ready in
 * nginx's own order, publishing for each event the request it works for.
 */

#include "ngx_http_profiling_module.h"

#include <sys/epoll.h>


static ngx_int_t (*ngx_http_profiling_orig_process_events)(
    ngx_cycle_t *cycle, ngx_msec_t timer, ngx_uint_t flags);

static u_char *ngx_http_profiling_no_log_handler(ngx_log_t *log, u_char *buf,
    size_t len);

ngx_log_handler_pt  ngx_http_profiling_http_log =
                        ngx_http_profiling_no_log_handler;

/* The sampler's shared words, from the first turn of the loop on. */
static prof_sampler_hot_t  *ngx_http_profiling_loop_hot;

/* When the next profile closes, and how often (nginx's clock). */
static ngx_msec_t  ngx_http_profiling_flush_at;
static ngx_msec_t  ngx_http_profiling_period;


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
ngx_http_profiling_learn(ngx_event_t *ev, ngx_log_t *log)
{
    ngx_connection_t  *c;

    if (ngx_http_profiling_http_log != ngx_http_profiling_no_log_handler
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

    ngx_http_profiling_http_log = log->handler;

    return 1;
}


/*
 * Runs an event's handler with what it works for published: the request
 * its log names (client and upstream connections, timers and posted
 * events of modules that give their events the request's log), or, not
 * known yet, its connection (the request it makes takes the samples).
 * It stays published after the handler, until another event or the
 * event loop's wait: a request's log phase unpublishes it before it is
 * freed.
 */
static ngx_inline void
ngx_http_profiling_dispatch(prof_sampler_hot_t *hot, ngx_event_t *ev)
{
    ngx_log_t           *log;
    ngx_http_request_t  *r;

    log = ev->log;
    r = NULL;

    if (log != NULL
        && (log->handler == ngx_http_profiling_http_log
            || (ngx_http_profiling_http_log
                == ngx_http_profiling_no_log_handler
                && ngx_http_profiling_learn(ev, log))))
    {
        r = ((ngx_http_log_ctx_t *) log->data)->request;

#if (NGX_QUIC)
        if (r == NULL && ngx_http_profiling_slow) {
            r = ngx_http_profiling_quic_request(ev);
        }
#endif

    } else {
        log = NULL;
    }

    ngx_http_profiling_publish(hot, r, log, ev->data);

    ev->handler(ev);
}


/* The posted events, as ngx_event_process_posted() runs them. */
static ngx_inline void
ngx_http_profiling_run_posted(prof_sampler_hot_t *hot, ngx_queue_t *posted)
{
    ngx_queue_t  *q;
    ngx_event_t  *ev;

    while (!ngx_queue_empty(posted)) {

        q = ngx_queue_head(posted);
        ev = ngx_queue_data(q, ngx_event_t, queue);

        ngx_delete_posted_event(ev);

        ngx_http_profiling_dispatch(hot, ev);
    }
}


/*
 * The expired timers, as ngx_event_expire_timers() runs them (a request
 * delayed by limit_req, or resumed after ngx.sleep, resumes here).
 */
static void
ngx_http_profiling_run_timers(prof_sampler_hot_t *hot)
{
    ngx_event_t        *ev;
    ngx_rbtree_node_t  *node, *root, *sentinel;

    sentinel = ngx_event_timer_rbtree.sentinel;

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

        ngx_http_profiling_dispatch(hot, ev);
    }
}


static void
ngx_http_profiling_capture_idle(void)
{
    ngx_uint_t  n;
    uint64_t    leaf[2];

    n = 0;

#if (NGX_HAVE_EPOLL)
    if (ngx_event_flags & NGX_USE_EPOLL_EVENT) {
        leaf[n++] = (uint64_t) (uintptr_t) epoll_wait;
    }
#endif

    /* A return address: the aggregator moves it back by one. */
    leaf[n++] = (uint64_t) (uintptr_t)
                ngx_http_profiling_orig_process_events + 1;

    /* Skip the capturing function and this one. */
    prof_sampler_capture_idle_stack(ngx_http_profiling_sampler, leaf, n, 2);
}


/*
 * Wraps the event module's process_events. With NGX_POST_EVENTS the event
 * module only waits and queues what is ready (as nginx does when it holds
 * the accept mutex), so the bracket covers the wait alone. Then, in the
 * order of ngx_process_events_and_timers(): the accept events, the accept
 * mutex released, the expired timers (when one is due), the other posted
 * events; nginx then
 * finds nothing left to run (but what these handlers made ready meanwhile,
 * which it runs as it would have, and OpenResty's delayed posted events,
 * which its nginx runs last). ./configure checks that the nginx it builds
 * against has this order.
 */
static ngx_int_t
ngx_http_profiling_process_events(ngx_cycle_t *cycle, ngx_msec_t timer,
    ngx_uint_t flags)
{
    ngx_int_t            rc;
    ngx_msec_t           left, timers_due;
    prof_sampler_hot_t  *hot;

    hot = ngx_http_profiling_loop_hot;

    if (hot == NULL) {
        hot = ngx_http_profiling_hot;

        if (hot == NULL) {
            /* Stopped, under a wrapper installed after ours. */
            return ngx_http_profiling_orig_process_events(cycle, timer,
                                                          flags);
        }

        /* The first turn. */
        ngx_http_profiling_loop_hot = hot;
        ngx_http_profiling_capture_idle();

        /* Every module's init_process has run: a tracer is there now;
           a module started after the profiler may have installed its own
           action for SIGPROF or SIGSEGV over the profiler's. */
        prof_take_tracer_identity(ngx_http_profiling_profiler);
        prof_sampler_retake_signals(ngx_http_profiling_sampler);
    }

    /* What nginx ran after us (a module's delayed posted events) may have
       published a request: its tag resolved before a profile closes. */
    if (hot->running.log != 0 || prof_pending_tag(hot) != 0) {
        ngx_http_profiling_request_stop();
    }

    /*
     * A profile closes every period, from here rather than from a timer:
     * one more node in nginx's timer tree is a few more comparisons for
     * every timer a request sets. The wait ends in time for it.
     */
    left = ngx_http_profiling_flush_at - ngx_current_msec;

    if ((ngx_msec_int_t) left <= 0) {
        prof_flush(ngx_http_profiling_profiler);
        ngx_http_profiling_flush_at = ngx_current_msec
                                      + ngx_http_profiling_period;
        left = ngx_http_profiling_period;
    }

    /*
     * When nginx's timer tree is looked at: once its first timer is due
     * (the timer nginx found, or earlier: the accept mutex's delay,
     * posted-next events; the accept handlers' timers are later still),
     * or every time when that is not known (no timer, or timer_resolution:
     * no NGX_UPDATE_TIME, the clock moves by signal). nginx's clock never
     * goes back.
     */
    timers_due = ngx_current_msec;

    if (timer != NGX_TIMER_INFINITE && (flags & NGX_UPDATE_TIME)) {
        timers_due += timer;
    }

    prof_wait_begin(hot);
    rc = ngx_http_profiling_orig_process_events(cycle, ngx_min(timer, left),
                                                flags | NGX_POST_EVENTS);
    prof_wait_end(hot);

    /* After a dlopen the handler met code outside its tables: rebuilt. */
    if (prof_sampler_left_table(hot)) {
        prof_sampler_maintain_table(ngx_http_profiling_sampler,
                                    (int64_t) ngx_current_msec * 1000000);
    }

    if (!ngx_queue_empty(&ngx_posted_accept_events)) {
        ngx_http_profiling_run_posted(hot, &ngx_posted_accept_events);
    }

    if (ngx_accept_mutex_held) {
        ngx_shmtx_unlock(&ngx_accept_mutex);
    }

    if ((ngx_msec_int_t) (ngx_current_msec - timers_due) >= 0) {
        ngx_http_profiling_run_timers(hot);
    }

    ngx_http_profiling_run_posted(hot, &ngx_posted_events);

    /* What nginx runs after us (events those handlers posted) is no
       request's that we know of. */
    ngx_http_profiling_publish(hot, NULL, NULL, NULL);

    return rc;
}


/* The first profile closes a period from now (nginx's clock, updated). */
void
ngx_http_profiling_events_start(ngx_msec_t period)
{
    ngx_http_profiling_period = period;
    ngx_http_profiling_http_log = ngx_http_profiling_no_log_handler;
    ngx_http_profiling_loop_hot = NULL;
    ngx_http_profiling_flush_at = ngx_current_msec + period;

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
 * since: then ours stays, and passes through (ngx_http_profiling_hot is
 * NULL by now).
 */
void
ngx_http_profiling_events_stop(void)
{
    ngx_http_profiling_loop_hot = NULL;

    if (ngx_event_actions.process_events
        == ngx_http_profiling_process_events)
    {
        ngx_event_actions.process_events =
                                       ngx_http_profiling_orig_process_events;
    }
}
