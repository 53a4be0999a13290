/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unit tests of shared/profiler/aggregator.c: stacks are deduplicated, request
 * labels make separate samples, caller frames are moved back into the call,
 * flush barriers split profiles exactly, values are summed per key, and
 * addresses are symbolized once. Batches are built by hand (t/unit/unit.h).
 */

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "unit.h"


/* Functions of the test binary, for the symbolizer. */

int __attribute__((noinline))
unit_agg_leaf(int x)
{
    volatile int  v;

    v = x;

    return v * 5 + 3;
}


int __attribute__((noinline))
unit_agg_caller(int x)
{
    volatile int  v;

    v = unit_agg_leaf(x);

    return v * 7 - 1;
}


/*
 * The values of a sample key of profile p, or NULL when the key is absent.
 * stack holds the pcs as the profile stores them (callers already moved).
 */

static const int64_t *
key_values(const prof_profile_t *p, const uint64_t *stack, unsigned n,
    const char *endpoint, uint64_t span_id, uint64_t local_root_span_id)
{
    int64_t            index;
    prof_sample_key_t  key;

    memset(&key, 0, sizeof(key));

    index = prof_intern_find(&p->stacks, stack, n * sizeof(uint64_t));
    if (index < 0) {
        return NULL;
    }

    key.stack = index;

    if (endpoint != NULL) {
        index = prof_intern_find(&p->endpoints, endpoint, strlen(endpoint));
        if (index < 0) {
            return NULL;
        }

        key.endpoint = index + 1;
    }

    key.span_id = span_id;
    key.local_root_span_id = local_root_span_id;

    index = prof_intern_find(&p->keys, &key, sizeof(key));
    if (index < 0) {
        return NULL;
    }

    return &p->values[index * PROF_VALUE_COUNT];
}


/* The sum of one value over every key of a profile. */

static int64_t
total(const prof_profile_t *p, unsigned value)
{
    int64_t   sum;
    uint32_t  i;

    sum = 0;

    for (i = 0; i < p->keys.count; i++) {
        sum += p->values[i * PROF_VALUE_COUNT + value];
    }

    return sum;
}


static int
setup(void **state)
{
    *state = unit_agg_create(0);

    return 0;
}


static int
setup_symbolized(void **state)
{
    *state = unit_agg_create(1);

    return 0;
}


static int
teardown(void **state)
{
    unit_agg_destroy(*state);

    return 0;
}


static void
test_identical_stacks_are_deduplicated(void **state)
{
    uint64_t         a[] = { 0x401000, 0x402000, 0x403000 };
    uint64_t         b[] = { 0x401000, 0x402000, 0x404000 };
    uint64_t         a_stored[] = { 0x401000, 0x401fff, 0x402fff };
    unit_agg_t      *u = *state;
    prof_batch_t    *batch;
    const int64_t   *v;
    prof_profile_t  *p;

    batch = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(batch, &(unit_sample_t) { .cpu_ns = 100,
                   .cpu_samples = 1 }, a, 3, NULL);
    unit_batch_add(batch, &(unit_sample_t) { .cpu_ns = 20,
                   .cpu_samples = 1 }, b, 3, NULL);
    unit_batch_add(batch, &(unit_sample_t) { .cpu_ns = 3,
                   .cpu_samples = 1 }, a, 3, NULL);
    unit_consume(u, batch);

    p = unit_flush(u, UNIT_START_REALTIME_NS + 1, UNIT_START_MONOTONIC_NS + 1);

    assert_int_equal(p->sample_count, 3);
    assert_int_equal(p->stacks.count, 2);
    assert_int_equal(p->keys.count, 2);

    v = key_values(p, a_stored, 3, NULL, 0, 0);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 103);
    assert_int_equal(v[PROF_VALUE_CPU_SAMPLES], 2);

    assert_int_equal(total(p, PROF_VALUE_CPU_TIME), 123);
}


static void
test_different_labels_make_different_samples(void **state)
{
    uint64_t         frames[] = { 0x401000 };
    unit_agg_t      *u = *state;
    prof_batch_t    *b;
    const int64_t   *v;
    prof_profile_t  *p;

    b = unit_batch(UNIT_BATCH_BYTES);

    /* 1: span 11 of root 10 on /a, seen twice */
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .span_id = 11,
                   .local_root_span_id = 10 }, frames, 1, "/a");
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 2, .span_id = 11,
                   .local_root_span_id = 10 }, frames, 1, "/a");
    /* 2: another span */
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 4, .span_id = 12,
                   .local_root_span_id = 10 }, frames, 1, "/a");
    /* 3: another root span */
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 8, .span_id = 11,
                   .local_root_span_id = 13 }, frames, 1, "/a");
    /* 4: another endpoint */
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 16, .span_id = 11,
                   .local_root_span_id = 10 }, frames, 1, "/b");
    /* 5: no request, seen twice */
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 32 }, frames, 1, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 64 }, frames, 1, NULL);
    unit_consume(u, b);

    p = unit_flush(u, UNIT_START_REALTIME_NS + 1, UNIT_START_MONOTONIC_NS + 1);

    assert_int_equal(p->stacks.count, 1);
    assert_int_equal(p->keys.count, 5);
    assert_int_equal(p->endpoints.count, 2);

    v = key_values(p, frames, 1, "/a", 11, 10);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 3);

    v = key_values(p, frames, 1, "/a", 12, 10);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 4);

    v = key_values(p, frames, 1, "/a", 11, 13);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 8);

    v = key_values(p, frames, 1, "/b", 11, 10);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 16);

    v = key_values(p, frames, 1, NULL, 0, 0);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 96);
}


static void
test_caller_frames_move_back_into_the_call(void **state)
{
    size_t                 length;
    uint64_t               frames[] = { 0x401000, 0x402000,
                                        PROF_FRAME_TRUNCATED, 0x403000,
                                        PROF_FRAME_TRUNCATED };
    uint64_t               expected[] = { 0x401000, 0x401fff,
                                          PROF_FRAME_TRUNCATED, 0x402fff,
                                          PROF_FRAME_TRUNCATED };
    unit_agg_t            *u = *state;
    prof_batch_t          *b;
    const void            *stack;
    prof_profile_t        *p;
    const prof_address_t  *marker;

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .wall_ns = 1, .wall_samples = 1 },
                   frames, 5, NULL);
    unit_consume(u, b);

    /* the moved addresses are the ones symbolized (in no object, they are
       kept until their profile closes) */

    assert_non_null(prof_aggregator_address(u->agg, 0x401fff));
    assert_non_null(prof_aggregator_address(u->agg, 0x402fff));
    assert_null(prof_aggregator_address(u->agg, 0x402000));

    p = unit_flush(u, UNIT_START_REALTIME_NS + 1, UNIT_START_MONOTONIC_NS + 1);

    assert_int_equal(p->stacks.count, 1);

    stack = prof_intern_key(&p->stacks, 0, &length);
    assert_int_equal(length, sizeof(expected));
    assert_memory_equal(stack, expected, sizeof(expected));

    marker = prof_aggregator_address(u->agg, PROF_FRAME_TRUNCATED);
    assert_non_null(marker);
    assert_null(marker->object);
    assert_string_equal(marker->function, "[truncated]");
}


static void
test_flush_barrier_splits_profiles_exactly(void **state)
{
    int              i;
    int64_t          t1_real, t1_mono, t2_real, t2_mono;
    uint64_t         frames[] = { 0x401000 };
    unit_agg_t      *u = *state;
    prof_batch_t    *b;
    prof_profile_t  *first, *second;

    t1_real = UNIT_START_REALTIME_NS + 60000000000LL;
    t1_mono = UNIT_START_MONOTONIC_NS + 59999000000LL;
    t2_real = t1_real + 61000000000LL;
    t2_mono = t1_mono + 60000000123LL;

    /* N = 3 samples, then the barrier, in the same batch */

    b = unit_batch(UNIT_BATCH_BYTES);
    for (i = 0; i < 3; i++) {
        unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1 << i,
                       .cpu_samples = 1 }, frames, 1, NULL);
    }
    unit_batch_barrier(b, t1_real, t1_mono);
    unit_consume(u, b);

    assert_int_equal(u->nprofiles, 1);

    /* M = 2 samples, in a batch of their own, then a barrier-only batch */

    b = unit_batch(UNIT_BATCH_BYTES);
    for (i = 3; i < 5; i++) {
        unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1 << i,
                       .cpu_samples = 1 }, frames, 1, NULL);
    }
    unit_consume(u, b);

    assert_int_equal(u->nprofiles, 1);

    second = unit_flush(u, t2_real, t2_mono);
    first = u->profiles[0];

    assert_int_equal(first->sequence, 0);
    assert_int_equal(first->sample_count, 3);
    assert_int_equal(total(first, PROF_VALUE_CPU_TIME), 1 + 2 + 4);
    assert_int_equal(total(first, PROF_VALUE_CPU_SAMPLES), 3);
    assert_int_equal(first->start_realtime_ns, UNIT_START_REALTIME_NS);
    assert_int_equal(first->duration_ns, t1_mono - UNIT_START_MONOTONIC_NS);

    assert_int_equal(second->sequence, 1);
    assert_int_equal(second->sample_count, 2);
    assert_int_equal(total(second, PROF_VALUE_CPU_TIME), 8 + 16);
    assert_int_equal(total(second, PROF_VALUE_CPU_SAMPLES), 2);
    /* Contiguous: the second starts where the first ends. */
    assert_int_equal(second->start_realtime_ns,
                     first->start_realtime_ns + first->duration_ns);
    assert_int_equal(second->duration_ns, t2_mono - t1_mono);

    assert_int_equal(u->diag.profiles_closed, 2);
    assert_int_equal(u->diag.samples_aggregated, 5);
}


static void
test_values_are_summed_per_key(void **state)
{
    uint64_t         frames[] = { 0x401000, 0x402000 };
    uint64_t         stored[] = { 0x401000, 0x401fff };
    unit_agg_t      *u = *state;
    prof_batch_t    *b;
    const int64_t   *v;
    prof_profile_t  *p;

    b = unit_batch(UNIT_BATCH_BYTES);

    /* CPU samples */
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 10000123,
                   .cpu_samples = 1 }, frames, 2, "/x");
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 9999877,
                   .cpu_samples = 1 }, frames, 2, "/x");
    /* wall samples with their off-CPU time (and a late CPU share) */
    unit_batch_add(b, &(unit_sample_t) { .wall_ns = 30000000,
                   .wall_samples = 3, .off_cpu_ns = 25000000,
                   .cpu_ns = 5 }, frames, 2, "/x");
    unit_batch_add(b, &(unit_sample_t) { .wall_ns = 4000000000000LL,
                   .wall_samples = 1, .off_cpu_ns = 3999999999999LL },
                   frames, 2, "/x");
    unit_consume(u, b);

    p = unit_flush(u, UNIT_START_REALTIME_NS + 1, UNIT_START_MONOTONIC_NS + 1);

    assert_int_equal(p->keys.count, 1);

    v = key_values(p, stored, 2, "/x", 0, 0);
    assert_non_null(v);
    assert_int_equal(v[PROF_VALUE_CPU_TIME], 10000123 + 9999877 + 5);
    assert_int_equal(v[PROF_VALUE_CPU_SAMPLES], 2);
    assert_int_equal(v[PROF_VALUE_WALL_TIME], 30000000 + 4000000000000LL);
    assert_int_equal(v[PROF_VALUE_WALL_SAMPLES], 4);
    assert_int_equal(v[PROF_VALUE_OFF_CPU_TIME],
                     25000000 + 3999999999999LL);
}


static void
test_addresses_are_symbolized_once(void **state)
{
    int                    fd, i, round;
    char                   self[PATH_MAX];
    void                  *copy;
    size_t                 len;
    uint64_t               frames[2], leaf_pc, caller_pc;
    unit_agg_t            *u = *state;
    prof_batch_t          *b;
    const char            *function, *leaf_function;
    const prof_object_t   *self_obj;
    const prof_address_t  *leaf, *caller;

    assert_non_null(realpath("/proc/self/exe", self));

    /*
     * The leaf pc is in a private executable copy of the test binary's
     * text. Once the copy is made non-executable the symbolizer does not
     * know the pc any more: an aggregator symbolizing it again would lose
     * the function.
     */

    self_obj = prof_symbolize(u->sym, (uintptr_t) unit_agg_leaf, &function);
    assert_non_null(self_obj);
    assert_string_equal(self_obj->path, self);

    len = self_obj->end - self_obj->start;
    fd = open(self, O_RDONLY);
    assert_true(fd != -1);
    copy = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd,
                self_obj->file_offset);
    close(fd);
    assert_true(copy != MAP_FAILED);

    leaf_pc = (uintptr_t) copy + ((uintptr_t) unit_agg_leaf + 2
                                  - self_obj->start);
    caller_pc = (uintptr_t) unit_agg_caller + 4;      /* a return address */

    frames[0] = leaf_pc;
    frames[1] = caller_pc;

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .cpu_samples = 1 },
                   frames, 2, NULL);
    unit_consume(u, b);

    leaf = prof_aggregator_address(u->agg, leaf_pc);
    assert_non_null(leaf);
    assert_non_null(leaf->object);
    assert_int_equal(leaf->object->start, (uintptr_t) copy);
    assert_string_equal(leaf->object->path, self);
    assert_non_null(leaf->function);
    assert_string_equal(leaf->function, "unit_agg_leaf");
    leaf_function = leaf->function;

    caller = prof_aggregator_address(u->agg, caller_pc - 1);
    assert_non_null(caller);
    assert_ptr_equal(caller->object, self_obj);
    assert_non_null(caller->function);
    assert_string_equal(caller->function, "unit_agg_caller");

    /* the same pcs in many samples, over three profiles: symbolized once */

    for (round = 0; round < 3; round++) {
        b = unit_batch(UNIT_BATCH_BYTES);

        for (i = 0; i < 100; i++) {
            unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1,
                           .cpu_samples = 1 }, frames, 2, NULL);
        }

        unit_consume(u, b);
        (void) unit_flush(u, UNIT_START_REALTIME_NS + round + 1,
                          UNIT_START_MONOTONIC_NS + round + 1);
    }

    assert_ptr_equal(prof_aggregator_address(u->agg, leaf_pc), leaf);
    assert_non_null(leaf->object);
    assert_int_equal(leaf->object->start, (uintptr_t) copy);
    assert_ptr_equal(leaf->function, leaf_function);
    assert_string_equal(leaf->function, "unit_agg_leaf");

    assert_ptr_equal(prof_aggregator_address(u->agg, caller_pc - 1), caller);
    assert_string_equal(caller->function, "unit_agg_caller");

    assert_int_equal(u->profiles[u->nprofiles - 1]->stacks.count, 1);
    assert_int_equal(u->diag.samples_aggregated, 301);
    assert_int_equal(u->diag.addresses_evicted, 0);

    /*
     * The object goes (as with dlclose): after the next profile what the
     * symbolizer said of it is forgotten, and its pcs are in no object any
     * more.
     */
    assert_int_equal(mprotect(copy, len, PROT_READ), 0);
    assert_int_equal(prof_symbolizer_refresh(u->sym), 0);
    assert_null(prof_symbolize(u->sym, leaf_pc, &function));

    (void) unit_flush(u, UNIT_START_REALTIME_NS + 10,
                      UNIT_START_MONOTONIC_NS + 10);

    assert_true(u->diag.addresses_evicted >= 2);
    assert_null(prof_aggregator_address(u->agg, leaf_pc));

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .cpu_samples = 1 },
                   frames, 2, NULL);
    unit_consume(u, b);

    leaf = prof_aggregator_address(u->agg, leaf_pc);
    assert_non_null(leaf);
    assert_null(leaf->object);

    munmap(copy, len);
}


static prof_labels_t
labels(uint64_t tag, uint64_t request, uint64_t span, const char *endpoint)
{
    prof_labels_t  l;

    memset(&l, 0, sizeof(l));
    l.tag = tag;
    l.request = request;
    l.span_id = span;
    l.local_root_span_id = span;
    l.endpoint_length = endpoint ? strlen(endpoint) : 0;
    memcpy(l.endpoint, endpoint ? endpoint : "", l.endpoint_length);

    return l;
}


/* The key and endpoint (NUL-terminated) of the only sample with cpu_ns. */
static const prof_sample_key_t *
key_with_cpu(prof_profile_t *p, int64_t cpu_ns, const char **endpoint)
{
    uint32_t                  i;
    size_t                    n;
    const char               *e;
    const prof_sample_key_t  *k;
    static char               copy[PROF_ENDPOINT_MAX + 1];

    for (i = 0; i < p->keys.count; i++) {
        if (p->values[i * PROF_VALUE_COUNT + PROF_VALUE_CPU_TIME] != cpu_ns) {
            continue;
        }

        k = prof_intern_key(&p->keys, i, NULL);
        *endpoint = NULL;

        if (k->endpoint) {
            e = prof_intern_key(&p->endpoints, k->endpoint - 1, &n);
            memcpy(copy, e, n);
            copy[n] = '\0';
            *endpoint = copy;
        }

        return k;
    }

    fail();
    return NULL;
}


/*
 * Ids known only late in a request (a tracer's span) label its first
 * samples too; a resolution with ids of its own keeps them; a tag never
 * resolved has no labels.
 */
static void
test_request_labels_reach_every_tag_of_it(void **state)
{
    unit_agg_t               *u = *state;
    prof_batch_t             *b;
    prof_labels_t             l;
    prof_profile_t           *p;
    const char               *ep;
    const prof_sample_key_t  *k;
    uint64_t                  frames[1] = { 0x1000 };

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .request = 1 },
                   frames, 1, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 2, .request = 2 },
                   frames, 1, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 4, .request = 3 },
                   frames, 1, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 8, .request = 4 },
                   frames, 1, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 16, .request = 5 },
                   frames, 1, NULL);
    unit_batch_barrier(b, UNIT_START_REALTIME_NS + 1,
                       UNIT_START_MONOTONIC_NS + 1);

    /* Request 100: tag 1 before the span existed, tags 2 and 3 after,
       the latter in another location span. */
    l = labels(1, 100, 0, "GET /a");
    assert_int_equal(prof_aggregator_add_labels(u->agg, &l), 0);
    l = labels(2, 100, 77, "GET /a");
    assert_int_equal(prof_aggregator_add_labels(u->agg, &l), 0);
    l = labels(3, 100, 78, "GET /a");
    assert_int_equal(prof_aggregator_add_labels(u->agg, &l), 0);

    /* Request 200: no ids at all. Tag 5: never resolved. */
    l = labels(4, 200, 0, "GET /b");
    assert_int_equal(prof_aggregator_add_labels(u->agg, &l), 0);

    unit_consume(u, b);
    assert_int_equal(u->nprofiles, 1);
    p = u->profiles[0];

    /* Tags 1 and 3 both carry span 78: one sample of 1 + 4. */
    k = key_with_cpu(p, 1 + 4, &ep);
    assert_int_equal(k->span_id, 78);
    assert_string_equal(ep, "GET /a");

    k = key_with_cpu(p, 2, &ep);
    assert_int_equal(k->span_id, 77);

    k = key_with_cpu(p, 8, &ep);
    assert_int_equal(k->span_id, 0);
    assert_string_equal(ep, "GET /b");

    k = key_with_cpu(p, 16, &ep);
    assert_int_equal(k->span_id, 0);
    assert_null(ep);
}


/*
 * A resolution of a tag after the barrier's last one waits for the next
 * profile; those of the closed one are forgotten.
 */
static void
test_labels_wait_for_their_profile(void **state)
{
    unit_agg_t               *u = *state;
    prof_batch_t             *b;
    prof_labels_t             l;
    prof_profile_t           *p;
    const char               *ep;
    const prof_sample_key_t  *k;
    uint64_t                  frames[1] = { 0x1000 };

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .request = 7 },
                   frames, 1, NULL);
    unit_batch_barrier(b, UNIT_START_REALTIME_NS + 1,
                       UNIT_START_MONOTONIC_NS + 1);
    b->flush_last_tag = 7;

    l = labels(7, 1, 70, "GET /x");
    assert_int_equal(prof_aggregator_add_labels(u->agg, &l), 0);
    l = labels(8, 2, 80, "GET /y");
    assert_int_equal(prof_aggregator_add_labels(u->agg, &l), 0);

    unit_consume(u, b);

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 2, .request = 8 },
                   frames, 1, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 4, .request = 7 },
                   frames, 1, NULL);
    unit_batch_barrier(b, UNIT_START_REALTIME_NS + 2,
                       UNIT_START_MONOTONIC_NS + 2);
    unit_consume(u, b);

    assert_int_equal(u->nprofiles, 2);

    k = key_with_cpu(u->profiles[0], 1, &ep);
    assert_int_equal(k->span_id, 70);

    p = u->profiles[1];
    k = key_with_cpu(p, 2, &ep);
    assert_int_equal(k->span_id, 80);
    assert_string_equal(ep, "GET /y");

    k = key_with_cpu(p, 4, &ep);
    assert_int_equal(k->span_id, 0);
}


/*
 * JIT code: addresses in no object are forgotten with their profile (new
 * ones come forever), the others keep what the symbolizer said of them.
 */
static void
test_addresses_of_no_object_go_with_their_profile(void **state)
{
    int                    round;
    uint64_t               frames[2], known_pc;
    unit_agg_t            *u = *state;
    prof_batch_t          *b;
    const prof_address_t  *known;

    known_pc = (uintptr_t) unit_agg_leaf + 2;

    for (round = 0; round < 3; round++) {
        frames[0] = 0x10000 + 0x100 * round;    /* no object: "JIT" */
        frames[1] = known_pc + 1;               /* a return address */

        b = unit_batch(UNIT_BATCH_BYTES);
        unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1, .cpu_samples = 1 },
                       frames, 2, NULL);
        unit_consume(u, b);

        assert_non_null(prof_aggregator_address(u->agg, frames[0]));
        known = prof_aggregator_address(u->agg, known_pc);
        assert_non_null(known);
        assert_non_null(known->object);

        (void) unit_flush(u, UNIT_START_REALTIME_NS + round + 1,
                          UNIT_START_MONOTONIC_NS + round + 1);

        assert_null(prof_aggregator_address(u->agg, frames[0]));
        known = prof_aggregator_address(u->agg, known_pc);
        assert_non_null(known);
        assert_string_equal(known->function, "unit_agg_leaf");
    }

    assert_int_equal(u->diag.addresses_evicted, 3);
    assert_int_equal(u->profiles[u->nprofiles - 1]->stacks.count, 1);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup_teardown(
            test_identical_stacks_are_deduplicated, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_different_labels_make_different_samples, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_caller_frames_move_back_into_the_call, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_flush_barrier_splits_profiles_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_values_are_summed_per_key, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_addresses_are_symbolized_once, setup_symbolized, teardown),
        cmocka_unit_test_setup_teardown(
            test_addresses_of_no_object_go_with_their_profile,
            setup_symbolized, teardown),
        cmocka_unit_test_setup_teardown(
            test_request_labels_reach_every_tag_of_it, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_labels_wait_for_their_profile, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
