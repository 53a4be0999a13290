/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Diagnostics: counters of what the profiler did and lost, and
 * histograms of the cost of one sample in the worker.
 *
 * Threading: every field is written with relaxed atomics by the thread that
 * owns the event (the worker's thread; the sampler, loop and fetch threads
 * of its profiler process) and may be read by any thread of either
 * process at any time.
 * Memory: a plain struct in the channel (channel/channel.h), shared by the
 * worker and its profiler process.
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


/*
 * An uploader's counters (profiler loop thread), defined in upload.h:
 * once the uploader is closed, each profile submitted has ended once,
 * submitted = succeeded + failed_* + dropped.
 */
typedef struct {
    uint64_t          submitted;            /* profiles meant for it */
    uint64_t          attempted;            /* tries started, retries too */
    uint64_t          succeeded;            /* answered 2xx */
    uint64_t          retried;              /* second tries started */
    uint64_t          failed_connect;       /* last try: no server, or
                                               the connection lost */
    uint64_t          failed_timeout;       /* last try timed out */
    uint64_t          failed_4xx;           /* never retried */
    uint64_t          failed_5xx;           /* last try answered 5xx */
    uint64_t          failed_other;         /* other status or error */
    uint64_t          dropped;              /* given up unanswered:
                                               replaced while waiting, or
                                               pending at the close
                                               deadline, or no memory for
                                               its documents */
    uint64_t          bytes_sent;           /* request bodies of every
                                               try, answered or not */
} prof_upload_counters_t;


typedef struct {
    /* the sampler thread: what the ring's slots became; but the worker's
       thread writes ring_full (and adds it to dropped_samples) at stop,
       flushes_merged (prof_sampler_post_flush) and the unwind table's
       four (worker/sampler.c); the loop thread adds to dropped_samples
       what the aggregator could not keep */
    uint64_t          cpu_samples;          /* CPU timer signals */
    uint64_t          blocked_samples;      /* stacks asked of a thread
                                               blocked outside its loop */
    uint64_t          idle_samples;         /* wall time at the wait */
    uint64_t          samples_recorded;     /* all samples, in a batch */
    uint64_t          wall_dropped;         /* wall time without a stack */
    uint64_t          wall_dropped_ns;
    uint64_t          signals_sent;         /* stacks asked by a queued
                                               SIGPROF */
    uint64_t          signal_failures;      /* its queueing failed */
    uint64_t          stacks_read;          /* read from outside instead,
                                               blocked in a system call */
    uint64_t          stack_reads_refused;  /* the worker did not allow
                                               it (the signal asked) */
    uint64_t          truncated_stacks;
    uint64_t          dropped_samples;      /* past the byte ceiling, or
                                               the ring full */
    uint64_t          dropped_batches;
    uint64_t          ring_full;            /* signals with no free slot */
    uint64_t          flushes_merged;       /* two periods in one profile:
                                               the sampler thread behind */
    uint64_t          unwind_stops;         /* stacks ended by a marker */
    uint64_t          unwind_stops_unknown_code;    /* of them, at code
                                               outside every object */
    uint64_t          scanned_frames;       /* callers found by a scan of
                                               the stack past such code */
    uint64_t          unwind_tables;        /* built by the sampler (0: the
                                               caller's, e.g. inherited) */
    uint64_t          unwind_table_bytes;   /* of the current one */
    uint64_t          unwind_objects;       /* it covers */
    uint64_t          unwind_objects_skipped;   /* corrupt, left out */
    prof_histogram_t  handler_ns;           /* one sample in the handler:
                                               its CPU time, of the samples
                                               whose thread the kernel did
                                               not switch out meanwhile */
    prof_histogram_t  handler_wall_ns;      /* its wall time, all samples */

    /* the worker's thread (no room), and the loop thread (the endpoint
       table's own drops; the aggregator's label bound) */
    uint64_t          endpoints_dropped;    /* requests not in the endpoint
                                               counts: table full, or the
                                               loop thread behind */
    uint64_t          labels_dropped;       /* sampled requests whose labels
                                               found no room */

    /* profiler loop thread */
    uint64_t          samples_aggregated;
    uint64_t          profiles_closed;
    uint64_t          profiles_exported;    /* by every sink that worked */
    uint64_t          export_failures;
    uint64_t          encode_failures;
    uint64_t          bytes_exported;       /* written to files */
    uint64_t          dump_files_deleted;   /* by retention */
    uint64_t          dump_temps_removed;   /* stale temporary files */
    uint64_t          addresses_evicted;    /* address cache bound */
    uint64_t          requests_evicted;     /* stays 0, kept for the
                                               exit line's and the status
                                               page's format (the label
                                               bound counts as
                                               labels_dropped) */

    /* debuginfod (asked by the loop thread, fetched by its fetch
       thread, in the profiler process) */
    uint64_t          debuginfod_asked;     /* build ids queued */
    uint64_t          debuginfod_found;     /* debug files fetched */
    uint64_t          debuginfod_failed;    /* none, a server down, a
                                               timeout */
    uint64_t          debuginfod_evicted;   /* cache entries removed */

    /* agent uploads and Pyroscope pushes (profiler loop thread),
       defined in upload.h */
    prof_upload_counters_t  uploads;
    prof_upload_counters_t  pyroscope;
    uint64_t          pyroscope_endpoints_folded;   /* distinct endpoints
                                               a period past the bound,
                                               labelled "other" */
    uint64_t          pyroscope_samples_dropped;    /* a sample alone over
                                               Pyroscope's size bound */
    prof_upload_counters_t  otlp;           /* OTLP exports (otlp.h) */
    uint64_t          otlp_partial;         /* answered 2xx with a
                                               partial success */
    uint64_t          otlp_rejected_profiles;   /* the Profiles those
                                               said they rejected */

    /* the profiler's own cost (the sampler thread): the handler's time
       in the worker, the profiler process's CPU, the part of it spent
       naming code seen for the first time (the loop thread: symbols,
       inline tables, Lua functions; profiling_max_cpu leaves it out),
       the CPU timer's interval now (profiling_max_cpu widens it) and the
       time it was wider than configured */
    uint64_t          handler_total_ns;
    uint64_t          profiler_cpu_ns;
    uint64_t          naming_cpu_ns;
    uint64_t          interval_ns;
    uint64_t          throttled_ns;

    /* the sampler thread: samples whose thread was switched out while
       the handler ran (preempted, migrated), and their wall time, which
       handler_total_ns counts as their CPU time (at most that) */
    uint64_t          handler_preempted;
    uint64_t          handler_preempted_ns;
} prof_diagnostics_t;


/* The counters by name, for the log and the status page. */
typedef struct {
    const char  *name;
    size_t       offset;                    /* of a uint64_t field */
} prof_diagnostics_field_t;

extern const prof_diagnostics_field_t  prof_diagnostics_fields[];


#define prof_counter_add(field, n)                                            \
    __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)

#define prof_counter_get(field)                                               \
    __atomic_load_n(&(field), __ATOMIC_RELAXED)


void prof_histogram_add(prof_histogram_t *h, uint64_t value_ns);

/* The value below which a fraction q (0..1) of the recorded values lie. */
uint64_t prof_histogram_quantile(const prof_histogram_t *h, double q);

/*
 * One sample's cost in the handler: its CPU time (cpu_ns, -1: not known,
 * the thread was switched out meanwhile) and its wall time. Returns what
 * it adds to handler_total_ns: the CPU time, else the wall time.
 */
int64_t prof_diagnostics_add_handler(prof_diagnostics_t *d, int64_t cpu_ns,
    int64_t wall_ns);

/* A counter's value by its field. */
uint64_t prof_diagnostics_get(const prof_diagnostics_t *d,
    const prof_diagnostics_field_t *f);

/* One line "key=value ..." for the log; returns its length. */
size_t prof_diagnostics_format(const prof_diagnostics_t *d, char *buf,
    size_t size);


#endif /* PROF_DIAGNOSTICS_H */
