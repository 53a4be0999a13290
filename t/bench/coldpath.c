/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Cold-path benchmark: what the profiler loop thread costs, in process, on
 * one core. It measures how many samples a second the aggregator takes in
 * (in steady state, and on a first pass that symbolizes every address),
 * and how long the encoding of a profile of 10,000 distinct stacks to a
 * gzip-compressed pprof takes, and its size.
 *
 * Usage: coldpath [repetitions [file]]   (default 5 repetitions; file:
 *        where to write the encoded profile, e.g. to decode it with protoc)
 *
 * Prints one figure a line, "name median=X min=X max=X" over the
 * repetitions, or "name X" for what does not vary. Exits 1 on any error.
 *
 * Times are CPU time of this thread (CLOCK_THREAD_CPUTIME_ID), not
 * CLOCK_MONOTONIC: the figure of interest is the CPU the loop thread takes
 * from the machine, and on a busy machine the wall time would also count
 * the time the benchmark was preempted. Waits for the disk are not counted
 * (the first pass reads ELF files, normally from the page cache).
 *
 * The samples are made as the sampler thread makes them for a busy worker
 * (a CPU sample and a wall sample of the same stack at each tick, half of
 * them during a request: they carry its tag, and the request's labels
 * reach the aggregator as the server resolves them), in batches as large
 * as the profiler's queue batches, with a flush barrier every 60 s of
 * ticks. Their addresses are
 * real code addresses of this program and of libc, so that symbolization
 * reads the same ELF symbol tables as in production. The random numbers
 * have a fixed seed: every run builds the same stacks and samples.
 */

#define _GNU_SOURCE

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profiler/aggregator.h"
#include "common/buffer.h"
#include "common/diagnostics.h"
#include "common/intern.h"
#include "channel/labels.h"
#include "profiler/pprof.h"
#include "channel/sample.h"
#include "profiler/sample_batch.h"
#include "profiler/symbolizer.h"


#define BENCH_REPETITIONS       5
#define BENCH_BATCH_BYTES       (64 * 1024)     /* PROF_BATCH_BYTES */
#define BENCH_INTERVAL_NS       10000000LL      /* the default 10 ms */
#define BENCH_PROFILE_TICKS     6000            /* the default 60 s */
#define BENCH_PROFILES          10              /* per aggregation pass */
#define BENCH_START_REALTIME_NS 1700000000000000000LL

#define BENCH_ADDRESSES         2048            /* distinct pcs */
#define BENCH_LIBC_SHARE        4               /* 1 pc in 4 is in libc */
#define BENCH_SPINES            8
#define BENCH_SPINE_FRAMES      6
#define BENCH_MIN_FRAMES        20
#define BENCH_MAX_FRAMES        32
#define BENCH_STACKS            10000           /* the encoded profile */
#define BENCH_HOT_STACKS        4096            /* the aggregation passes */
#define BENCH_ENDPOINTS         8


typedef struct {
    unsigned      frame_count;
    uint64_t      frames[BENCH_MAX_FRAMES];     /* leaf first */
} bench_stack_t;


/*
 * Batches in order, as the sampler pushes them to the queue, and the
 * labels of the requests their samples carried: those of a batch reach
 * the aggregator before it (the server resolves a request when it leaves
 * it, the sampler thread pushes a batch later).
 */

typedef struct {
    prof_batch_t   *head;
    prof_batch_t   *last;
    uint64_t        samples;
    uint64_t        epoch;              /* the last request tag */
    prof_labels_t  *labels;
    uint32_t       *labels_batch;       /* the batch each comes before */
    size_t          labels_count;
    size_t          labels_capacity;
    uint32_t        batches;
} bench_batches_t;


typedef struct {
    prof_diagnostics_t   diag;
    prof_symbolizer_t   *sym;
    prof_aggregator_t   *agg;
    unsigned             keep;          /* keep the last closed profile */
    prof_profile_t      *kept;
    unsigned             profiles;      /* closed */
} bench_agg_t;


static const char  *bench_endpoints[BENCH_ENDPOINTS] = {
    "GET /",
    "GET /api/v1/items",
    "GET /api/v1/items/{id}",
    "POST /api/v1/items",
    "GET /static/{path}",
    "GET /healthz",
    "PUT /api/v1/users/{id}/settings",
    "GET /search",
};

static uint64_t  bench_rng = 0x9e3779b97f4a7c15ULL;


static void __attribute__((noreturn))
bench_fail(const char *what)
{
    fprintf(stderr, "coldpath: %s\n", what);
    exit(1);
}


/* xorshift64*: cheap, and the same sequence on every run. */

static uint64_t
bench_random(void)
{
    bench_rng ^= bench_rng >> 12;
    bench_rng ^= bench_rng << 25;
    bench_rng ^= bench_rng >> 27;

    return bench_rng * 0x2545f4914f6cdd1dULL;
}


static double
bench_cpu_seconds(void)
{
    struct timespec  ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        bench_fail("clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    }

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/*
 * Distinct pcs inside functions of this program and of libc. They are
 * found with a symbolizer of their own: the aggregator's symbolizer starts
 * cold, as in a new worker.
 */

static void
bench_addresses(uint64_t *pcs, unsigned n)
{
    int                   inserted;
    void                 *libc_pc;
    uint64_t              pc, tries;
    unsigned              i;
    const char           *function;
    prof_intern_t         seen;
    prof_symbolizer_t    *sym;
    const prof_object_t  *self, *libc, *obj;

    sym = prof_symbolizer_create();
    if (sym == NULL) {
        bench_fail("no memory for a symbolizer");
    }

    libc_pc = dlsym(RTLD_DEFAULT, "getpid");
    self = prof_symbolize(sym, (uintptr_t) bench_addresses, NULL);
    libc = libc_pc ? prof_symbolize(sym, (uintptr_t) libc_pc, NULL) : NULL;

    if (self == NULL || libc == NULL || self == libc) {
        bench_fail("the program's or libc's code is not found");
    }

    prof_intern_init(&seen);

    for (i = 0, tries = 0; i < n; tries++) {
        if (tries > 100 * (uint64_t) n) {
            bench_fail("too few addresses in functions");
        }

        obj = (i % BENCH_LIBC_SHARE == 0) ? libc : self;
        pc = obj->start + bench_random() % (obj->end - obj->start);

        /* Sampled pcs are in functions, not in padding or the PLT. */
        if (prof_symbolize(sym, pc, &function) == NULL || function == NULL) {
            continue;
        }

        if (prof_intern(&seen, &pc, sizeof(pc), &inserted) < 0) {
            bench_fail("no memory for the addresses");
        }

        if (inserted) {
            pcs[i++] = pc;
        }
    }

    prof_intern_free(&seen);
    prof_symbolizer_destroy(sym);
}


/*
 * Stacks of 20 to 32 frames. A worker's stacks start in a few ways (main,
 * the worker cycle, the event loop, ...): the outermost frames are one of
 * a few spines; the others are any of the pcs.
 */

static void
bench_stacks(bench_stack_t *stacks, unsigned n, const uint64_t *pcs)
{
    unsigned  i, j, k, spine, inner;
    uint64_t  spines[BENCH_SPINES][BENCH_SPINE_FRAMES];

    for (i = 0; i < BENCH_SPINES; i++) {
        for (j = 0; j < BENCH_SPINE_FRAMES; j++) {
            spines[i][j] = pcs[bench_random() % BENCH_ADDRESSES];
        }
    }

    for (i = 0; i < n; i++) {
        stacks[i].frame_count = BENCH_MIN_FRAMES + bench_random()
                                % (BENCH_MAX_FRAMES - BENCH_MIN_FRAMES + 1);
        inner = stacks[i].frame_count - BENCH_SPINE_FRAMES;
        spine = bench_random() % BENCH_SPINES;

        for (j = 0; j < inner; j++) {
            stacks[i].frames[j] = pcs[bench_random() % BENCH_ADDRESSES];
        }

        for (k = 0; k < BENCH_SPINE_FRAMES; k++) {
            stacks[i].frames[j + k] = spines[spine][k];
        }
    }
}


static prof_batch_t *
bench_batch_new(bench_batches_t *l)
{
    prof_batch_t  *b;

    b = calloc(1, sizeof(prof_batch_t) + BENCH_BATCH_BYTES);
    if (b == NULL) {
        bench_fail("no memory for a batch");
    }

    b->capacity = BENCH_BATCH_BYTES;
    l->batches++;

    if (l->last == NULL) {
        l->head = b;

    } else {
        l->last->next = b;
    }

    l->last = b;

    return b;
}


/* Appends a sample laid out as the sampler thread lays it out. */

static void
bench_append(bench_batches_t *l, const prof_sample_t *values,
    const bench_stack_t *stack, uint64_t tag)
{
    size_t          size;
    prof_batch_t   *b;
    prof_sample_t  *s;
    unsigned char  *p;

    size = prof_sample_size(stack->frame_count);

    b = l->last;

    if (b == NULL || b->flush_after || b->used + size > b->capacity) {
        b = bench_batch_new(l);
    }

    p = b->data + b->used;
    s = (prof_sample_t *) p;
    *s = *values;
    s->frame_count = stack->frame_count;
    s->request = tag;

    memcpy(p + sizeof(prof_sample_t), stack->frames,
           stack->frame_count * sizeof(uint64_t));

    b->used += size;
    b->sample_count++;
    l->samples++;
}


/* A new request: its tag, and its labels (resolved: a sample carried it). */

static uint64_t
bench_request(bench_batches_t *l, uint64_t span_id, const char *endpoint)
{
    size_t          cap;
    uint32_t       *batch;
    prof_labels_t  *labels, *r;

    if (l->labels_count == l->labels_capacity) {
        cap = l->labels_capacity ? l->labels_capacity * 2 : 1024;
        labels = realloc(l->labels, cap * sizeof(prof_labels_t));
        if (labels == NULL) {
            bench_fail("no memory for labels");
        }
        l->labels = labels;

        batch = realloc(l->labels_batch, cap * sizeof(uint32_t));
        if (batch == NULL) {
            bench_fail("no memory for labels");
        }
        l->labels_batch = batch;
        l->labels_capacity = cap;
    }

    l->epoch++;

    r = &l->labels[l->labels_count];
    memset(r, 0, offsetof(prof_labels_t, endpoint));
    r->tag = l->epoch;
    r->request = l->epoch;
    r->span_id = span_id;
    r->local_root_span_id = span_id;
    r->endpoint_length = strlen(endpoint);
    memcpy(r->endpoint, endpoint, r->endpoint_length);

    /* The batch its samples go to: the last one, or a new one. */
    l->labels_batch[l->labels_count++] =
        (l->last == NULL || l->last->flush_after) ? l->batches
                                                  : l->batches - 1;

    return l->epoch;
}


/*
 * The samples of ticks ticks of a busy worker, with a flush barrier after
 * every profile_ticks. The stack of a tick is drawn from stacks[0..n - 1],
 * a few of them far more often than the others as in real profiles, or,
 * when !skewed, is stacks[tick % n].
 */

static void
bench_ticks(bench_batches_t *l, const bench_stack_t *stacks, unsigned n,
    unsigned ticks, unsigned profile_ticks, unsigned skewed)
{
    double                u;
    int64_t               now_ns;
    uint64_t              tag;
    unsigned              t;
    prof_sample_t         cpu, wall;
    const bench_stack_t  *stack;

    memset(l, 0, sizeof(bench_batches_t));
    memset(&cpu, 0, sizeof(prof_sample_t));
    memset(&wall, 0, sizeof(prof_sample_t));

    cpu.cpu_ns = BENCH_INTERVAL_NS;
    cpu.cpu_samples = 1;
    wall.wall_ns = BENCH_INTERVAL_NS;
    wall.wall_samples = 1;

    for (t = 1; t <= ticks; t++) {
        if (skewed) {
            u = (bench_random() >> 11) * 0x1.0p-53;
            stack = &stacks[(unsigned) (n * u * u)];

        } else {
            stack = &stacks[(t - 1) % n];
        }

        /*
         * Half the ticks land in a request; requests are far shorter than
         * a tick, so each has a span of its own.
         */
        tag = 0;

        if (bench_random() & 1) {
            tag = bench_request(l, bench_random() | 1,
                          bench_endpoints[bench_random() % BENCH_ENDPOINTS]);
        }

        wall.off_cpu_ns = bench_random() % (BENCH_INTERVAL_NS / 10);

        bench_append(l, &cpu, stack, tag);
        bench_append(l, &wall, stack, tag);

        if (t % profile_ticks == 0) {
            now_ns = t * BENCH_INTERVAL_NS;
            l->last->flush_after = 1;
            l->last->flush_last_tag = l->epoch;
            l->last->flush_monotonic_ns = now_ns;
            l->last->flush_realtime_ns = BENCH_START_REALTIME_NS + now_ns;
        }
    }
}


static void
bench_batches_free(bench_batches_t *l)
{
    prof_batch_t  *b, *next;

    for (b = l->head; b != NULL; b = next) {
        next = b->next;
        free(b);
    }

    free(l->labels);
    free(l->labels_batch);
    memset(l, 0, sizeof(bench_batches_t));
}


static void
bench_on_profile(void *data, prof_profile_t *p)
{
    bench_agg_t  *b = data;

    b->profiles++;

    if (b->keep) {
        prof_profile_free(b->kept);
        b->kept = p;
        return;
    }

    /* The loop thread frees every profile it exported: part of the cost. */
    prof_profile_free(p);
}


/* An aggregator as the profiler makes it, with a new symbolizer. */

static bench_agg_t *
bench_agg_create(unsigned keep)
{
    bench_agg_t             *b;
    prof_aggregator_conf_t   conf;

    b = calloc(1, sizeof(bench_agg_t));
    if (b == NULL) {
        bench_fail("no memory for an aggregator");
    }

    b->keep = keep;

    b->sym = prof_symbolizer_create();
    if (b->sym == NULL) {
        bench_fail("no memory for a symbolizer");
    }

    memset(&conf, 0, sizeof(conf));
    conf.symbolizer = b->sym;
    conf.diagnostics = &b->diag;
    conf.period_ns = BENCH_INTERVAL_NS;
    conf.thread_id = 4242;
    conf.thread_name = "nginx: worker process";
    conf.start_realtime_ns = BENCH_START_REALTIME_NS;
    conf.start_monotonic_ns = 0;
    conf.on_profile = bench_on_profile;
    conf.on_profile_data = b;

    b->agg = prof_aggregator_create(&conf);
    if (b->agg == NULL) {
        bench_fail("no memory for an aggregator");
    }

    return b;
}


static void
bench_agg_destroy(bench_agg_t *b)
{
    prof_profile_free(b->kept);
    prof_aggregator_destroy(b->agg);
    prof_symbolizer_destroy(b->sym);
    free(b);
}


/* CPU seconds to consume every batch of l. */

static double
bench_consume(bench_agg_t *b, const bench_batches_t *l)
{
    size_t               next;
    double               start;
    uint32_t             i;
    const prof_batch_t  *batch;

    start = bench_cpu_seconds();
    next = 0;

    for (batch = l->head, i = 0; batch != NULL; batch = batch->next, i++) {
        while (next < l->labels_count && l->labels_batch[next] <= i) {
            if (prof_aggregator_add_labels(b->agg, &l->labels[next++])
                != 0)
            {
                bench_fail("labels dropped");
            }
        }

        if (prof_aggregator_consume(b->agg, batch, NULL) != 0) {
            bench_fail("aggregation failed");
        }
    }

    return bench_cpu_seconds() - start;
}


static void
bench_write(const char *path, const prof_buffer_t *out)
{
    FILE  *f;

    f = fopen(path, "w");
    if (f == NULL
        || fwrite(out->data, 1, out->length, f) != out->length
        || fclose(f) != 0)
    {
        bench_fail("cannot write the profile");
    }
}


static int
bench_cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* Sorts v. */

static void
bench_print(const char *name, double *v, unsigned n, int decimals)
{
    double  median;

    qsort(v, n, sizeof(double), bench_cmp);

    median = (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;

    printf("%s median=%.*f min=%.*f max=%.*f\n", name, decimals, median,
           decimals, v[0], decimals, v[n - 1]);
}


int
main(int argc, char **argv)
{
    int               rc;
    char             *end;
    long              n;
    size_t            size;
    double           *first, *steady, *encode, start, seconds;
    unsigned          r, reps;
    uint64_t         *pcs;
    bench_agg_t      *b;
    prof_buffer_t     out;
    bench_stack_t    *stacks;
    prof_profile_t   *p;
    bench_batches_t   batches;

    reps = BENCH_REPETITIONS;

    if (argc > 3) {
        bench_fail("usage: coldpath [repetitions [file]]");
    }

    if (argc >= 2) {
        n = strtol(argv[1], &end, 10);
        if (*argv[1] == '\0' || *end != '\0' || n < 1 || n > 1000) {
            bench_fail("repetitions: a number from 1 to 1000");
        }
        reps = n;
    }

    pcs = calloc(BENCH_ADDRESSES, sizeof(uint64_t));
    stacks = calloc(BENCH_STACKS, sizeof(bench_stack_t));
    first = calloc(reps, sizeof(double));
    steady = calloc(reps, sizeof(double));
    encode = calloc(reps, sizeof(double));

    if (pcs == NULL || stacks == NULL || first == NULL || steady == NULL
        || encode == NULL)
    {
        bench_fail("no memory");
    }

    bench_addresses(pcs, BENCH_ADDRESSES);
    bench_stacks(stacks, BENCH_STACKS, pcs);

    /*
     * Aggregation. Each repetition starts as a new worker: a new symbolizer
     * and aggregator. The first pass symbolizes every address (and reads
     * the symbol tables); the second pass over the same batches knows them
     * all, as the loop thread does after its first profiles.
     */

    bench_ticks(&batches, stacks, BENCH_HOT_STACKS,
                BENCH_PROFILES * BENCH_PROFILE_TICKS, BENCH_PROFILE_TICKS, 1);

    for (r = 0; r < reps; r++) {
        b = bench_agg_create(0);

        first[r] = batches.samples / bench_consume(b, &batches);
        steady[r] = batches.samples / bench_consume(b, &batches);

        if (b->profiles != 2 * BENCH_PROFILES
            || b->diag.samples_aggregated != 2 * batches.samples
            || b->diag.dropped_samples != 0)
        {
            bench_fail("samples or profiles lost in aggregation");
        }

        bench_agg_destroy(b);
    }

    printf("repetitions %u\n", reps);
    printf("aggregation_pass_samples %llu\n",
           (unsigned long long) batches.samples);
    bench_print("aggregation_samples_per_s", steady, reps, 0);
    bench_print("aggregation_first_pass_samples_per_s", first, reps, 0);

    bench_batches_free(&batches);

    /*
     * Encoding: one tick for each of the 10,000 stacks makes one profile,
     * encoded as prof_export_profile() (profiler/export.c) encodes it, into
     * an empty buffer each time.
     */

    bench_ticks(&batches, stacks, BENCH_STACKS, BENCH_STACKS, BENCH_STACKS,
                0);

    b = bench_agg_create(1);
    (void) bench_consume(b, &batches);
    bench_batches_free(&batches);

    p = b->kept;

    if (p == NULL || p->stacks.count != BENCH_STACKS) {
        bench_fail("the profile does not have 10,000 distinct stacks");
    }

    size = 0;

    for (r = 0; r < reps; r++) {
        memset(&out, 0, sizeof(prof_buffer_t));

        start = bench_cpu_seconds();
        rc = prof_pprof_encode(p, b->agg, &out);
        seconds = bench_cpu_seconds() - start;

        if (rc != 0 || out.length < 2 || out.data[0] != 0x1f
            || out.data[1] != 0x8b)
        {
            bench_fail("encoding failed");
        }

        if (r > 0 && out.length != size) {
            bench_fail("the same profile encoded to different sizes");
        }

        size = out.length;
        encode[r] = seconds * 1000;

        if (r == reps - 1 && argc == 3) {
            bench_write(argv[2], &out);
        }

        prof_buffer_free(&out);
    }

    /*
     * The size varies by a few bytes between runs: the mappings carry
     * their runtime addresses, which ASLR changes, and gzip compresses
     * them differently.
     */
    bench_print("encode_10k_stacks_ms", encode, reps, 3);
    printf("profile_10k_stacks_keys %u\n", p->keys.count);
    printf("profile_10k_stacks_bytes %zu\n", size);

    bench_agg_destroy(b);
    free(pcs);
    free(stacks);
    free(first);
    free(steady);
    free(encode);

    return 0;
}
