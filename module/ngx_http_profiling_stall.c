/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Stalls: a turn of the event loop (from the end of one event wait to the
 * start of the next) longer than profiling_stall_threshold. The loop
 * (ngx_http_profiling_events.c) sees a long turn end; here, still on the
 * loop, it becomes a record for the profiler process (which names the
 * code its samples held and writes the line): its length, and what it ran
 * for, described while that was alive: the request its first sample past
 * the threshold carried, a connection with no request, else the turn's
 * phase (the worker's start, the timers, the posted events).
 */

#include "ngx_http_profiling_module.h"


/* The request a stall's samples carried, described when its tag was
   resolved (before the request could be freed). */
static uint64_t  ngx_http_profiling_stall_tag;
static size_t    ngx_http_profiling_stall_length;
static u_char    ngx_http_profiling_stall_text[PROF_STALL_SUBJECT_MAX];


/*
 * The tag of a stall's samples resolved, for r (NULL: its connection had
 * no request): described as nginx's error log describes a request.
 */
void
ngx_http_profiling_stall_subject(ngx_http_profiling_worker_t *w,
    ngx_http_request_t *r, uint64_t tag)
{
    u_char                         *p, *last;
    uint64_t                        span, root;
    ngx_http_core_srv_conf_t       *cscf;
    ngx_http_profiling_loc_conf_t  *plcf;

    p = ngx_http_profiling_stall_text;
    last = p + sizeof(ngx_http_profiling_stall_text);

    if (r == NULL) {
        p = ngx_slprintf(p, last, "a connection with no request");
        goto done;
    }

    if (r->request_line.len > 0) {
        p = ngx_slprintf(p, last, "request: \"%V\"", &r->request_line);

    } else {
        p = ngx_slprintf(p, last, "a request being read");
    }

    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);
    if (cscf != NULL && cscf->server_name.len > 0) {
        p = ngx_slprintf(p, last, ", server: %V", &cscf->server_name);
    }

    if (r->headers_in.host != NULL) {
        p = ngx_slprintf(p, last, ", host: \"%V\"",
                         &r->headers_in.host->value);
    }

    if (r->connection->addr_text.len > 0) {
        p = ngx_slprintf(p, last, ", client: %V", &r->connection->addr_text);
    }

    if (r->valid_location) {
        plcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_module);
        ngx_http_profiling_resolve_ids(&w->tracer, r, plcf, &span, &root);

        if (span != 0) {
            p = ngx_slprintf(p, last, ", span id: %uL", span);
        }
    }

done:

    ngx_http_profiling_stall_tag = tag;
    ngx_http_profiling_stall_length = p - ngx_http_profiling_stall_text;
}


/*
 * A turn of ticks past the sampled thread's stall_ticks ended (the wait
 * begins): a stall, when it lasted the threshold, goes to the profiler
 * process.
 */
void
ngx_http_profiling_stalled(ngx_http_profiling_worker_t *w, uint64_t ticks)
{
    int64_t                 length_ns;
    prof_stall_t           *st;
    prof_sampled_thread_t  *sampled;

    if (w->sampler == NULL) {
        return;
    }

    length_ns = prof_sampler_turn_ended(w->sampler, ticks);
    if (length_ns == 0) {
        return;
    }

    sampled = w->sampled;

    /* Its samples' request, still published: described while it lives. */
    if (sampled->stall_turn == sampled->turn_start
        && sampled->stall_tag != 0
        && prof_pending_tag(sampled) == sampled->stall_tag)
    {
        ngx_http_profiling_resolve_pending(w, NULL);
    }

    st = prof_sampler_next_stall(w->sampler);
    if (st == NULL) {
        return;
    }

    st->turn = sampled->turn_start;
    st->length_ns = length_ns;
    st->end_ns = prof_clock_ns(CLOCK_MONOTONIC);
    st->subject_length = 0;
    st->write_index = prof_sampler_write_index(w->sampler);

    if (sampled->stall_turn == sampled->turn_start) {
        st->tag = sampled->stall_tag;
        st->phase = sampled->stall_phase;
        st->sampled = sampled->stall_past ? 2 : 1;

    } else {
        /* No sample in the turn: only the first turn's phase is known. */
        st->tag = 0;
        st->phase = (sampled->turn_start == sampled->calib_tsc)
                    ? PROF_PHASE_START : sampled->phase;
        st->sampled = 0;
    }

    if (st->tag != 0 && st->tag == ngx_http_profiling_stall_tag) {
        ngx_memcpy(st->subject, ngx_http_profiling_stall_text,
                   ngx_http_profiling_stall_length);
        st->subject_length = ngx_http_profiling_stall_length;
    }

    prof_sampler_post_stall(w->sampler);
}
