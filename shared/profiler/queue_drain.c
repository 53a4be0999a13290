/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The loop thread's drain: the batches the sampler thread queued and the
 * labels the worker wrote, into the aggregator, with the endpoint counts
 * of the periods each barrier closes; the worker's maps read again when
 * its walks left its unwind tables.
 */

#include <malloc.h>
#include <uv.h>

#include "profiler/queue_drain.h"


/* Reads of the worker's maps for walks that left its unwind tables: at
   most this often, and this seldom once reads find nothing new (JIT
   code). */
#define PROF_MAPS_EVERY_MS      200
#define PROF_MAPS_QUIET_MS      10000



/*
 * The endpoint counts of the periods a barrier closes (up to period):
 * taken from the worker's tables, which go back to it for later periods.
 */
static prof_endpoint_counts_t *
prof_close_periods(prof_process_t *p, uint64_t period)
{
    prof_endpoint_counts_t  *counts;

    counts = prof_endpoint_counts_create();

    for ( /* void */ ; p->open_period <= period; p->open_period++) {
        (void) prof_endpoint_table_take(
                         &p->channel->endpoints[p->open_period & 1],
                         p->open_period, counts);
    }

    if (counts != NULL) {
        prof_counter_add(p->channel->diagnostics.endpoints_dropped,
                         counts->dropped);
    }

    return counts;
}


/*
 * The worker's maps, read while it lives (its maps are empty once it has
 * exited, when its last profile is named): at the start; when it rebuilt
 * its unwind tables (it loaded or unloaded an object); and when its walks
 * left them since the last read (code it loaded a moment ago, before its
 * tables follow: at most every PROF_MAPS_EVERY_MS). JIT code leaves them
 * all the time: a read that found no new object doubles that wait, up to
 * PROF_MAPS_QUIET_MS, and one that found one brings it back. JIT code's
 * pcs themselves, in mappings of no file, read nothing again when they
 * are named (proc_maps.h).
 */
void
prof_read_maps(prof_process_t *p)
{
    size_t    objects;
    uint32_t  unknown;
    uint64_t  tables, now;

    if (__atomic_load_n(&p->worker_gone, __ATOMIC_ACQUIRE)) {
        return;
    }

    tables = prof_counter_get(p->channel->diagnostics.unwind_tables);
    unknown = __atomic_load_n(&p->sampled->unknown_pcs, __ATOMIC_RELAXED);
    now = uv_now(&p->loop);

    if (p->maps_read && tables == p->maps_tables
        && (unknown == p->maps_unknown
            || now - p->maps_read_ms < p->maps_every_ms))
    {
        return;
    }

    objects = prof_symbolizer_object_count(p->symbolizer);

    if (prof_symbolizer_refresh(p->symbolizer) != 0) {
        return;
    }

    if (!p->maps_read || tables != p->maps_tables
        || prof_symbolizer_object_count(p->symbolizer) != objects)
    {
        p->maps_every_ms = PROF_MAPS_EVERY_MS;

    } else if (p->maps_every_ms < PROF_MAPS_QUIET_MS) {
        p->maps_every_ms *= 2;
    }

    p->maps_read = 1;
    p->maps_tables = tables;
    p->maps_unknown = unknown;
    p->maps_read_ms = now;
}


/*
 * The interval profiling_max_cpu set (ring_drain.c): a NOTICE line when
 * it first widens past the configured one, and when it is back.
 */
static void
prof_report_interval(prof_process_t *p)
{
    int64_t  now, conf;

    now = __atomic_load_n(&p->interval_told, __ATOMIC_ACQUIRE);
    conf = p->conf.interval_ns;

    if (now == 0 || now == p->interval_logged) {
        return;
    }

    if (now > conf && p->interval_logged <= conf) {
        prof_log(&p->log, PROF_LOG_NOTICE | PROF_LOG_REPORT,
                 "profiling: sampling every %.1f ms instead of %.1f ms: "
                 "the profiler used more than profiling_max_cpu %.2f%% "
                 "of the worker's CPU", now / 1e6, conf / 1e6,
                 p->conf.max_cpu_ppm / 1e4);

    } else if (now <= conf && p->interval_logged > conf) {
        prof_log(&p->log, PROF_LOG_NOTICE | PROF_LOG_REPORT,
                 "profiling: sampling every %.1f ms again, within "
                 "profiling_max_cpu %.2f%%", conf / 1e6,
                 p->conf.max_cpu_ppm / 1e4);
    }

    p->interval_logged = now;
}


/*
 * What naming new code took for a while (an object's symbols read, its
 * inline tables built: tens of MB in the process that builds libc's)
 * goes back to the kernel once a profile has closed after it: glibc
 * keeps the freed chunks inside its heap otherwise, some 400 kB a
 * profiler process after start-up. Only after naming: in a steady state
 * nothing is returned to be taken back the next period.
 */
static void
prof_trim_after_naming(prof_process_t *p)
{
#ifdef __GLIBC__
    uint64_t  naming;

    naming = prof_counter_get(p->channel->diagnostics.naming_cpu_ns);

    if (naming != p->naming_trimmed) {
        p->naming_trimmed = naming;
        (void) malloc_trim(0);
    }
#else
    (void) p;
#endif
}


void
prof_drain_queue(prof_process_t *p)
{
    int                      closed;
    prof_batch_t            *b, *next;
    prof_labels_t           *l;
    prof_endpoint_counts_t  *counts;

    prof_read_maps(p);

    /*
     * The batches first: what the server handed over before it asked
     * for a barrier taken now is in the rings by then.
     */
    b = prof_queue_pop_all(&p->queue);

    while ((l = prof_spsc_peek(&p->channel->labels)) != NULL) {
        (void) prof_aggregator_add_labels(p->aggregator, l);
        prof_spsc_release(&p->channel->labels);
    }

    closed = 0;

    for ( /* void */ ; b != NULL; b = next) {
        next = b->next;

        counts = b->flush_after ? prof_close_periods(p, b->flush_period)
                                : NULL;
        closed |= b->flush_after;

        if (prof_aggregator_consume(p->aggregator, b, counts) != 0) {
            prof_log_limited(&p->log, PROF_CAUSE_MEMORY, PROF_LOG_ERR,
                             "profiling: out of memory while aggregating, "
                             "samples dropped");
        }

        prof_queue_release(&p->queue, b);
    }

    /* Stalls, named now that their samples' addresses are. */
    prof_stalls_report(p);
    prof_report_interval(p);

    if (closed) {
        prof_trim_after_naming(p);
    }
}
