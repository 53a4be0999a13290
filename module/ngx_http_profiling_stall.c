/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Stalls: a turn of the event loop (from the end of one event wait to the
 * start of the next) longer than profiling_stall_threshold. The loop
 * (ngx_http_profiling_events.c) sees a long turn end; here, still on the
 * loop, it becomes a record for the profiler process (which names the
 * code its samples held and writes the line): its length, and what it ran
 * for, described while that was alive (ngx_http_profiling_labels.c, as
 * its tag was resolved): the request its first sample past the threshold
 * carried, a connection with no request, else the turn's phase (the
 * worker's start, the timers, the posted events).
 */

#include "ngx_http_profiling_module.h"


/*
 * A turn of ticks past the sampled thread's stall_ticks ended (the wait
 * begins), or the handler asked for this turn's end (walks left the
 * unwind table: rebuilt if objects were loaded): a stall, when it lasted
 * the threshold, goes to the profiler process.
 */
void
ngx_http_profiling_stalled(ngx_http_profiling_worker_t *w, uint64_t ticks)
{
    size_t                  length;
    u_char                 *subject;
    int64_t                 length_ns;
    prof_stall_t           *st;
    prof_sampled_thread_t  *sampled;

    if (w->sampler == NULL
        || !prof_sampler_turn_slow(w->sampler, ticks,
                                   (int64_t) ngx_current_msec * 1000000))
    {
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

    if (st->tag != 0) {
        length = ngx_http_profiling_stall_subject(st->tag, &subject);
        ngx_memcpy(st->subject, subject, length);
        st->subject_length = length;
    }

    prof_sampler_post_stall(w->sampler);
}
