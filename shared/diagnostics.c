/*
 * Diagnostics: histogram arithmetic and the one-line summary for the log.
 */

#include <stdio.h>

#include "diagnostics.h"


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


size_t
prof_diagnostics_format(const prof_diagnostics_t *d, char *buf, size_t size)
{
    int  n;

    n = snprintf(buf, size,
            "ticks=%llu wall_samples=%llu wall_dropped=%llu "
            "ticks_merged=%llu clock_failures=%llu "
            "samples=%llu idle_samples=%llu signals=%llu "
            "signal_failures=%llu truncated=%llu "
            "dropped_samples=%llu dropped_batches=%llu "
            "endpoints_dropped=%llu "
            "handler_ns_p50=%llu handler_ns_p99=%llu slow_unwinds=%llu "
            "unwind_tables=%llu unwind_table_bytes=%llu "
            "aggregated=%llu profiles=%llu exported=%llu "
            "export_failures=%llu encode_failures=%llu bytes=%llu "
            "uploads=%llu uploaded=%llu retried=%llu failed_connect=%llu "
            "failed_timeout=%llu failed_4xx=%llu failed_5xx=%llu "
            "failed_other=%llu upload_dropped=%llu bytes_sent=%llu",
            (unsigned long long) prof_counter_get(d->ticks),
            (unsigned long long) prof_counter_get(d->wall_samples),
            (unsigned long long) prof_counter_get(d->wall_dropped),
            (unsigned long long) prof_counter_get(d->ticks_merged),
            (unsigned long long) prof_counter_get(d->clock_failures),
            (unsigned long long) prof_counter_get(d->samples_recorded),
            (unsigned long long) prof_counter_get(d->idle_samples),
            (unsigned long long) prof_counter_get(d->signals_sent),
            (unsigned long long) prof_counter_get(d->signal_failures),
            (unsigned long long) prof_counter_get(d->truncated_stacks),
            (unsigned long long) prof_counter_get(d->dropped_samples),
            (unsigned long long) prof_counter_get(d->dropped_batches),
            (unsigned long long) prof_counter_get(d->endpoints_dropped),
            (unsigned long long) prof_histogram_quantile(&d->handler_ns, 0.5),
            (unsigned long long) prof_histogram_quantile(&d->handler_ns,
                                                         0.99),
            (unsigned long long) prof_counter_get(d->slow_unwinds),
            (unsigned long long) prof_counter_get(d->unwind_tables),
            (unsigned long long) prof_counter_get(d->unwind_table_bytes),
            (unsigned long long) prof_counter_get(d->samples_aggregated),
            (unsigned long long) prof_counter_get(d->profiles_closed),
            (unsigned long long) prof_counter_get(d->profiles_exported),
            (unsigned long long) prof_counter_get(d->export_failures),
            (unsigned long long) prof_counter_get(d->encode_failures),
            (unsigned long long) prof_counter_get(d->bytes_exported),
            (unsigned long long) prof_counter_get(d->uploads_attempted),
            (unsigned long long) prof_counter_get(d->uploads_succeeded),
            (unsigned long long) prof_counter_get(d->uploads_retried),
            (unsigned long long) prof_counter_get(d->uploads_failed_connect),
            (unsigned long long) prof_counter_get(d->uploads_failed_timeout),
            (unsigned long long) prof_counter_get(d->uploads_failed_4xx),
            (unsigned long long) prof_counter_get(d->uploads_failed_5xx),
            (unsigned long long) prof_counter_get(d->uploads_failed_other),
            (unsigned long long) prof_counter_get(d->uploads_dropped),
            (unsigned long long) prof_counter_get(d->bytes_sent));

    if (n < 0) {
        return 0;
    }

    return ((size_t) n < size) ? (size_t) n : size - 1;
}
