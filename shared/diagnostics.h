/*
 * Diagnostics: counters of what the profiler did and lost, and histograms
 * of the cost of one sample in the worker.
 *
 * Threading: every field is written with relaxed atomics by the thread that
 * owns the event (sampler, loop) and may be read by any thread at any time.
 * Memory: a plain struct owned by the profiler.
 */

#ifndef PROF_DIAGNOSTICS_H
#define PROF_DIAGNOSTICS_H

#include <stddef.h>
#include <stdint.h>


#define PROF_HISTOGRAM_BUCKET_NS   100
#define PROF_HISTOGRAM_BUCKETS     1024    /* the last one is "and more" */


typedef struct {
    uint64_t   count;
    uint64_t   buckets[PROF_HISTOGRAM_BUCKETS];
} prof_histogram_t;


typedef struct {
    /* sampler thread */
    uint64_t          ticks;                /* each ends as one of: */
    uint64_t          wall_samples;         /*   a wall sample recorded */
    uint64_t          wall_dropped;         /*   one dropped (ceiling) */
    uint64_t          ticks_merged;         /*   stack late: wall time
                                                 merged into the next tick */
    uint64_t          clock_failures;       /*   CPU clock unreadable */
    uint64_t          samples_recorded;     /* CPU and wall, in a batch */
    uint64_t          idle_samples;         /* of them, without a signal */
    uint64_t          signals_sent;         /* stacks asked by tgkill */
    uint64_t          signal_failures;      /* tgkill failed */
    uint64_t          truncated_stacks;
    uint64_t          dropped_samples;      /* past the byte ceiling */
    uint64_t          dropped_batches;
    uint64_t          endpoints_dropped;    /* requests not in the endpoint
                                               counts: table full, or the
                                               loop thread behind */
    prof_histogram_t  handler_ns;           /* unwind + copy, in handler */
    uint64_t          slow_unwinds;         /* handler: libunwind, not the
                                               unwind table */
    uint64_t          unwind_tables;        /* built by the sampler (0: the
                                               caller's, e.g. inherited) */
    uint64_t          unwind_table_bytes;   /* of the current one */

    /* profiler loop thread */
    uint64_t          samples_aggregated;
    uint64_t          profiles_closed;
    uint64_t          profiles_exported;    /* by every sink that worked */
    uint64_t          export_failures;
    uint64_t          encode_failures;
    uint64_t          bytes_exported;       /* written to files */

    /* agent uploads (profiler loop thread) */
    uint64_t          uploads_attempted;    /* requests sent, retries too */
    uint64_t          uploads_succeeded;
    uint64_t          uploads_retried;
    uint64_t          uploads_failed_connect;
    uint64_t          uploads_failed_timeout;
    uint64_t          uploads_failed_4xx;
    uint64_t          uploads_failed_5xx;
    uint64_t          uploads_failed_other;
    uint64_t          uploads_dropped;      /* replaced while waiting, or
                                               aborted at exit */
    uint64_t          bytes_sent;
} prof_diagnostics_t;


#define prof_counter_add(field, n)                                            \
    __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)

#define prof_counter_get(field)                                               \
    __atomic_load_n(&(field), __ATOMIC_RELAXED)


void prof_histogram_add(prof_histogram_t *h, uint64_t value_ns);

/* The value below which a fraction q (0..1) of the recorded values lie. */
uint64_t prof_histogram_quantile(const prof_histogram_t *h, double q);

/* One line "key=value ..." for the log; returns its length. */
size_t prof_diagnostics_format(const prof_diagnostics_t *d, char *buf,
    size_t size);


#endif /* PROF_DIAGNOSTICS_H */
