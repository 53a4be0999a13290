/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The event loop wrapper: brackets the event wait for the sampler, then
 * runs what the wait made ready in nginx's own order, publishing for each
 * event the request it works for.
 */

#include "ngx_http_profiling_module.h"

#include <sys/epoll.h>


static ngx_int_t (*ngx_http_profiling_orig_process_events)(
    ngx_cycle_t *cycle, ngx_msec_t timer, ngx_uint_t flags);

static ngx_uint_t  ngx_http_profiling_idle_captured;


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
 * The expired timers, as ngx_event_expire_timers() runs them, each with
 * its request published (a request delayed by limit_req, or resumed after
 * ngx.sleep, resumes here).
 */
static void
ngx_http_profiling_expire_timers(void)
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

        ngx_http_profiling_dispatch(ev);
    }
}


static void
ngx_http_profiling_process_posted(ngx_queue_t *posted)
{
    ngx_queue_t  *q;
    ngx_event_t  *ev;

    while (!ngx_queue_empty(posted)) {

        q = ngx_queue_head(posted);
        ev = ngx_queue_data(q, ngx_event_t, queue);

        ngx_delete_posted_event(ev);

        ngx_http_profiling_dispatch(ev);
    }
}


/*
 * Wraps the event module's process_events. With NGX_POST_EVENTS the event
 * module only waits and queues what is ready (as nginx does when it holds
 * the accept mutex), so the bracket covers the wait alone. Then, in the
 * order of ngx_process_events_and_timers(): the accept events, the accept
 * mutex released, the expired timers, the other posted events; nginx then
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
    prof_sampler_hot_t  *hot;

    hot = ngx_http_profiling_hot;

    if (hot == NULL) {
        /* Stopped, under a wrapper installed after ours. */
        return ngx_http_profiling_orig_process_events(cycle, timer, flags);
    }

    if (!ngx_http_profiling_idle_captured) {
        ngx_http_profiling_idle_captured = 1;
        ngx_http_profiling_capture_idle();

        /* Every module's init_process has run: a tracer is there now. */
        prof_take_tracer_identity(ngx_http_profiling_profiler);
    }

    ngx_http_profiling_request_leave();

    prof_wait_begin(hot);
    rc = ngx_http_profiling_orig_process_events(cycle, timer,
                                                flags | NGX_POST_EVENTS);
    prof_wait_end(hot);

    /* After a dlopen the handler met code outside its tables: rebuilt. */
    prof_sampler_maintain(ngx_http_profiling_sampler, hot,
                          (int64_t) ngx_current_msec * 1000000);

    ngx_http_profiling_process_posted(&ngx_posted_accept_events);

    if (ngx_accept_mutex_held) {
        ngx_shmtx_unlock(&ngx_accept_mutex);
    }

    ngx_http_profiling_expire_timers();

    ngx_http_profiling_process_posted(&ngx_posted_events);

    /* What nginx runs after us (events those handlers posted) is no
       request's that we know of. */
    ngx_http_profiling_request_leave();

    return rc;
}


void
ngx_http_profiling_events_start(void)
{
    if (ngx_event_actions.process_events
        == ngx_http_profiling_process_events)
    {
        return;
    }

    ngx_http_profiling_orig_process_events = ngx_event_actions.process_events;
    ngx_event_actions.process_events = ngx_http_profiling_process_events;
    ngx_http_profiling_idle_captured = 0;
}


/*
 * Restores the event module's function unless another module wrapped ours
 * since: then ours stays, and passes through (ngx_http_profiling_hot is
 * NULL by now).
 */
void
ngx_http_profiling_events_stop(void)
{
    if (ngx_event_actions.process_events
        == ngx_http_profiling_process_events)
    {
        ngx_event_actions.process_events =
                                       ngx_http_profiling_orig_process_events;
    }
}
