/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Diagnostics: histogram arithmetic and the one-line summary for the log.
 */

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/diagnostics.h"


void
prof_histogram_add(prof_histogram_t *h, uint64_t value_ns)
{
    uint64_t  i;

    i = value_ns / PROF_HISTOGRAM_BUCKET_NS;
    if (i >= PROF_HISTOGRAM_BUCKETS) {
        i = PROF_HISTOGRAM_BUCKETS - 1;
    }

    prof_counter_add(h->buckets[i], 1);
    prof_counter_add(h->count, 1);
}


uint64_t
prof_histogram_quantile(const prof_histogram_t *h, double q)
{
    uint64_t  total, rank, seen, i;

    total = prof_counter_get(h->count);
    if (total == 0) {
        return 0;
    }

    rank = (uint64_t) (q * (double) total);
    if (rank >= total) {
        rank = total - 1;
    }

    seen = 0;

    for (i = 0; i < PROF_HISTOGRAM_BUCKETS; i++) {
        seen += prof_counter_get(h->buckets[i]);
        if (seen > rank) {
            return (i + 1) * PROF_HISTOGRAM_BUCKET_NS;
        }
    }

    return PROF_HISTOGRAM_BUCKETS * PROF_HISTOGRAM_BUCKET_NS;
}


const prof_diagnostics_field_t  prof_diagnostics_fields[] = {
    { "cpu_samples", offsetof(prof_diagnostics_t, cpu_samples) },
    { "blocked_samples", offsetof(prof_diagnostics_t, blocked_samples) },
    { "idle_samples", offsetof(prof_diagnostics_t, idle_samples) },
    { "samples_recorded", offsetof(prof_diagnostics_t, samples_recorded) },
    { "wall_dropped", offsetof(prof_diagnostics_t, wall_dropped) },
    { "wall_dropped_ns", offsetof(prof_diagnostics_t, wall_dropped_ns) },
    { "signals_sent", offsetof(prof_diagnostics_t, signals_sent) },
    { "signal_failures", offsetof(prof_diagnostics_t, signal_failures) },
    { "stacks_read", offsetof(prof_diagnostics_t, stacks_read) },
    { "stack_reads_refused", offsetof(prof_diagnostics_t, stack_reads_refused) },
    { "truncated_stacks", offsetof(prof_diagnostics_t, truncated_stacks) },
    { "dropped_samples", offsetof(prof_diagnostics_t, dropped_samples) },
    { "dropped_batches", offsetof(prof_diagnostics_t, dropped_batches) },
    { "ring_full", offsetof(prof_diagnostics_t, ring_full) },
    { "flushes_merged", offsetof(prof_diagnostics_t, flushes_merged) },
    { "unwind_stops", offsetof(prof_diagnostics_t, unwind_stops) },
    { "unwind_stops_unknown_code", offsetof(prof_diagnostics_t, unwind_stops_unknown_code) },
    { "scanned_frames", offsetof(prof_diagnostics_t, scanned_frames) },
    { "unwind_tables", offsetof(prof_diagnostics_t, unwind_tables) },
    { "unwind_table_bytes", offsetof(prof_diagnostics_t, unwind_table_bytes) },
    { "unwind_objects", offsetof(prof_diagnostics_t, unwind_objects) },
    { "unwind_objects_skipped", offsetof(prof_diagnostics_t, unwind_objects_skipped) },
    { "endpoints_dropped", offsetof(prof_diagnostics_t, endpoints_dropped) },
    { "labels_dropped", offsetof(prof_diagnostics_t, labels_dropped) },
    { "samples_aggregated", offsetof(prof_diagnostics_t, samples_aggregated) },
    { "profiles_closed", offsetof(prof_diagnostics_t, profiles_closed) },
    { "profiles_exported", offsetof(prof_diagnostics_t, profiles_exported) },
    { "export_failures", offsetof(prof_diagnostics_t, export_failures) },
    { "encode_failures", offsetof(prof_diagnostics_t, encode_failures) },
    { "bytes_exported", offsetof(prof_diagnostics_t, bytes_exported) },
    { "dump_files_deleted", offsetof(prof_diagnostics_t, dump_files_deleted) },
    { "dump_temps_removed", offsetof(prof_diagnostics_t, dump_temps_removed) },
    { "addresses_evicted", offsetof(prof_diagnostics_t, addresses_evicted) },
    { "requests_evicted", offsetof(prof_diagnostics_t, requests_evicted) },
    { "debuginfod_asked", offsetof(prof_diagnostics_t, debuginfod_asked) },
    { "debuginfod_found", offsetof(prof_diagnostics_t, debuginfod_found) },
    { "debuginfod_failed", offsetof(prof_diagnostics_t, debuginfod_failed) },
    { "debuginfod_evicted", offsetof(prof_diagnostics_t, debuginfod_evicted) },
    { "uploads_submitted", offsetof(prof_diagnostics_t, uploads.submitted) },
    { "uploads_attempted", offsetof(prof_diagnostics_t, uploads.attempted) },
    { "uploads_succeeded", offsetof(prof_diagnostics_t, uploads.succeeded) },
    { "uploads_retried", offsetof(prof_diagnostics_t, uploads.retried) },
    { "uploads_failed_connect", offsetof(prof_diagnostics_t, uploads.failed_connect) },
    { "uploads_failed_timeout", offsetof(prof_diagnostics_t, uploads.failed_timeout) },
    { "uploads_failed_4xx", offsetof(prof_diagnostics_t, uploads.failed_4xx) },
    { "uploads_failed_5xx", offsetof(prof_diagnostics_t, uploads.failed_5xx) },
    { "uploads_failed_other", offsetof(prof_diagnostics_t, uploads.failed_other) },
    { "uploads_dropped", offsetof(prof_diagnostics_t, uploads.dropped) },
    { "bytes_sent", offsetof(prof_diagnostics_t, uploads.bytes_sent) },
    { "pyroscope_submitted", offsetof(prof_diagnostics_t, pyroscope.submitted) },
    { "pyroscope_attempted", offsetof(prof_diagnostics_t, pyroscope.attempted) },
    { "pyroscope_succeeded", offsetof(prof_diagnostics_t, pyroscope.succeeded) },
    { "pyroscope_retried", offsetof(prof_diagnostics_t, pyroscope.retried) },
    { "pyroscope_failed_connect", offsetof(prof_diagnostics_t, pyroscope.failed_connect) },
    { "pyroscope_failed_timeout", offsetof(prof_diagnostics_t, pyroscope.failed_timeout) },
    { "pyroscope_failed_4xx", offsetof(prof_diagnostics_t, pyroscope.failed_4xx) },
    { "pyroscope_failed_5xx", offsetof(prof_diagnostics_t, pyroscope.failed_5xx) },
    { "pyroscope_failed_other", offsetof(prof_diagnostics_t, pyroscope.failed_other) },
    { "pyroscope_dropped", offsetof(prof_diagnostics_t, pyroscope.dropped) },
    { "pyroscope_bytes_sent", offsetof(prof_diagnostics_t, pyroscope.bytes_sent) },
    { "pyroscope_endpoints_folded",
      offsetof(prof_diagnostics_t, pyroscope_endpoints_folded) },
    { "pyroscope_samples_dropped",
      offsetof(prof_diagnostics_t, pyroscope_samples_dropped) },
    { "otlp_submitted", offsetof(prof_diagnostics_t, otlp.submitted) },
    { "otlp_attempted", offsetof(prof_diagnostics_t, otlp.attempted) },
    { "otlp_succeeded", offsetof(prof_diagnostics_t, otlp.succeeded) },
    { "otlp_retried", offsetof(prof_diagnostics_t, otlp.retried) },
    { "otlp_failed_connect", offsetof(prof_diagnostics_t, otlp.failed_connect) },
    { "otlp_failed_timeout", offsetof(prof_diagnostics_t, otlp.failed_timeout) },
    { "otlp_failed_4xx", offsetof(prof_diagnostics_t, otlp.failed_4xx) },
    { "otlp_failed_5xx", offsetof(prof_diagnostics_t, otlp.failed_5xx) },
    { "otlp_failed_other", offsetof(prof_diagnostics_t, otlp.failed_other) },
    { "otlp_dropped", offsetof(prof_diagnostics_t, otlp.dropped) },
    { "otlp_bytes_sent", offsetof(prof_diagnostics_t, otlp.bytes_sent) },
    { "otlp_partial", offsetof(prof_diagnostics_t, otlp_partial) },
    { "otlp_rejected_profiles",
      offsetof(prof_diagnostics_t, otlp_rejected_profiles) },
    { "handler_total_ns", offsetof(prof_diagnostics_t, handler_total_ns) },
    { "profiler_cpu_ns", offsetof(prof_diagnostics_t, profiler_cpu_ns) },
    { "interval_ns", offsetof(prof_diagnostics_t, interval_ns) },
    { "throttled_ns", offsetof(prof_diagnostics_t, throttled_ns) },
    { "naming_cpu_ns", offsetof(prof_diagnostics_t, naming_cpu_ns) },
    { "handler_preempted", offsetof(prof_diagnostics_t, handler_preempted) },
    { "handler_preempted_ns",
      offsetof(prof_diagnostics_t, handler_preempted_ns) },
    { NULL, 0 }
};


int64_t
prof_diagnostics_add_handler(prof_diagnostics_t *d, int64_t cpu_ns,
    int64_t wall_ns)
{
    if (wall_ns < 0) {
        wall_ns = 0;
    }

    prof_histogram_add(&d->handler_wall_ns, (uint64_t) wall_ns);

    if (cpu_ns < 0) {
        prof_counter_add(d->handler_preempted, 1);
        prof_counter_add(d->handler_preempted_ns, (uint64_t) wall_ns);
        cpu_ns = wall_ns;

    } else {
        prof_histogram_add(&d->handler_ns, (uint64_t) cpu_ns);
    }

    prof_counter_add(d->handler_total_ns, (uint64_t) cpu_ns);

    return cpu_ns;
}


uint64_t
prof_diagnostics_get(const prof_diagnostics_t *d,
    const prof_diagnostics_field_t *f)
{
    const uint64_t  *p;

    p = (const uint64_t *) ((const char *) d + f->offset);

    return __atomic_load_n(p, __ATOMIC_RELAXED);
}


size_t
prof_diagnostics_format(const prof_diagnostics_t *d, char *buf, size_t size)
{
    int                              n;
    size_t                           len;
    const prof_diagnostics_field_t  *f;

    if (size == 0) {
        return 0;
    }

    n = snprintf(buf, size, "handler_ns_p50=%llu handler_ns_p99=%llu "
                 "handler_wall_ns_p50=%llu handler_wall_ns_p99=%llu",
                 (unsigned long long)
                     prof_histogram_quantile(&d->handler_ns, 0.5),
                 (unsigned long long)
                     prof_histogram_quantile(&d->handler_ns, 0.99),
                 (unsigned long long)
                     prof_histogram_quantile(&d->handler_wall_ns, 0.5),
                 (unsigned long long)
                     prof_histogram_quantile(&d->handler_wall_ns, 0.99));

    len = (n < 0) ? 0 : ((size_t) n < size ? (size_t) n : size - 1);

    for (f = prof_diagnostics_fields; f->name != NULL && len + 1 < size;
         f++)
    {
        /* Pyroscope's and OTLP's counters only where they are sent
           to: the line stays under the server's log line length
           otherwise. */
        if ((strncmp(f->name, "pyroscope_", 10) == 0
             || strncmp(f->name, "otlp_", 5) == 0)
            && prof_diagnostics_get(d, f) == 0)
        {
            continue;
        }

        n = snprintf(buf + len, size - len, " %s=%llu", f->name,
                     (unsigned long long) prof_diagnostics_get(d, f));
        if (n < 0) {
            break;
        }

        len += ((size_t) n < size - len) ? (size_t) n : size - len - 1;
    }

    return len;
}
