/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the page's store and view (shared/channel/ui_store.h,
 * ui_view.h): the newest records kept when full, never a torn record read
 * while written, filters by span and endpoint, and malformed records
 * refused without a crash.
 */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

#include "channel/ui_record.h"
#include "channel/ui_store.h"
#include "channel/ui_view.h"


#define STORE_BYTES  (64 * 1024)

static uint64_t  memory[STORE_BYTES / 8];


/* A record of n bytes, each the low byte of seq, seq in its first 8. */
static void
fill(unsigned char *r, size_t n, uint64_t seq)
{
    memset(r, (int) (seq & 0xff), n);
    memcpy(r, &seq, sizeof(seq));
}


/* The records of a copy, checked whole; their sequences in seqs. */
static size_t
records_of(const unsigned char *copy, size_t length, uint64_t *seqs,
    size_t max)
{
    size_t           at, n, i;
    uint64_t         seq;
    prof_ui_chunk_t  chunk;

    n = 0;

    for (at = 0; at < length; at += chunk.length) {
        memcpy(&chunk, copy + at, sizeof(chunk));
        assert_int_equal(chunk.magic, PROF_UI_CHUNK_RECORD);
        memcpy(&seq, copy + at + sizeof(chunk), sizeof(seq));

        for (i = sizeof(chunk) + 8; i < chunk.length; i++) {
            /* the padding after the record is not the record's */
            if (i >= chunk.length - 8) {
                break;
            }
            assert_int_equal(copy[at + i], seq & 0xff);
        }

        if (n < max) {
            seqs[n] = seq;
        }
        n++;
    }

    return n;
}


static void
test_store_keeps_the_newest_records_when_full(void **state)
{
    size_t            length, n, i;
    uint64_t          seq, seqs[256];
    unsigned char     record[3000], *copy;
    prof_ui_store_t  *s;

    s = prof_ui_store_init(memory, sizeof(memory));
    assert_non_null(s);

    for (seq = 1; seq <= 200; seq++) {
        n = 500 + (seq * 37) % 2400;
        fill(record, n, seq);
        assert_int_equal(prof_ui_store_write(s, record, n), 0);
    }

    assert_int_equal(prof_ui_store_copy(s, &copy, &length), 0);
    n = records_of(copy, length, seqs, 256);
    free(copy);

    assert_true(n > 10);
    assert_int_equal(seqs[n - 1], 200);

    for (i = 1; i < n; i++) {
        assert_int_equal(seqs[i], seqs[i - 1] + 1);
    }

    /* What was dropped is counted; what is held is under the size. */
    prof_ui_store_stats_t  st;
    prof_ui_store_stats(s, &st);
    assert_int_equal(st.records, 200);
    assert_int_equal(st.dropped + n, 200);
    assert_true(st.used <= st.size);
}


static void
test_record_larger_than_the_store_is_refused(void **state)
{
    static unsigned char   big[STORE_BYTES];
    prof_ui_store_t       *s;
    prof_ui_store_stats_t  st;

    s = prof_ui_store_init(memory, sizeof(memory));
    assert_int_equal(prof_ui_store_write(s, big, sizeof(big)), -E2BIG);

    prof_ui_store_stats(s, &st);
    assert_int_equal(st.too_large, 1);
    assert_int_equal(st.records, 0);
}


static volatile int  writing;

static void *
writer(void *arg)
{
    size_t            n;
    uint64_t          seq;
    unsigned char     record[5000];
    prof_ui_store_t  *s = arg;

    for (seq = 1; seq <= 20000; seq++) {
        n = 64 + (seq * 131) % 4900;
        fill(record, n, seq);
        prof_ui_store_write(s, record, n);
    }

    __atomic_store_n(&writing, 0, __ATOMIC_RELEASE);

    return NULL;
}


static void
test_a_reader_never_sees_a_torn_record(void **state)
{
    size_t            length, reads;
    uint64_t          seqs[1];
    pthread_t         t;
    unsigned char    *copy;
    prof_ui_store_t  *s;

    s = prof_ui_store_init(memory, sizeof(memory));
    writing = 1;
    assert_int_equal(pthread_create(&t, NULL, writer, s), 0);

    for (reads = 0; __atomic_load_n(&writing, __ATOMIC_ACQUIRE)
                    || reads < 10; reads++)
    {
        assert_int_equal(prof_ui_store_copy(s, &copy, &length), 0);
        records_of(copy, length, seqs, 1);
        free(copy);
    }

    pthread_join(t, NULL);
}


/* A record of two samples: /a with span 7 in f_a, /b in f_b. */
static size_t
make_record(unsigned char *out)
{
    size_t             at;
    uint32_t           words[6] = { 2, 1, 0, 2, 2, 0 };
    prof_ui_frame_t    frames[3];
    prof_ui_sample_t   samples[2];
    prof_ui_record_t   r;
    static const char  strings[24] = "\0main\0f_a\0f_b\0/a\0/b\0";

    memset(&r, 0, sizeof(r));
    r.version = PROF_UI_RECORD_VERSION;
    r.pid = 42;
    r.start_ns = 1000000000;
    r.duration_ns = 1000000000;
    r.frame_count = 3;
    r.sample_count = 2;
    r.stack_words = 6;
    r.strings_bytes = sizeof(strings);

    memset(frames, 0, sizeof(frames));
    frames[0].name = 1;                 /* main */
    frames[1].name = 6;                 /* f_a */
    frames[2].name = 10;                /* f_b */

    memset(samples, 0, sizeof(samples));
    samples[0].stack = 0;               /* f_a, main */
    samples[0].endpoint = 14;
    samples[0].span_id = 7;
    samples[0].values[PROF_UI_CPU] = 30;
    samples[1].stack = 3;               /* f_b, main */
    samples[1].endpoint = 17;
    samples[1].values[PROF_UI_CPU] = 70;

    at = 0;
    memcpy(out + at, &r, sizeof(r));
    at += sizeof(r);
    memcpy(out + at, frames, sizeof(frames));
    at += sizeof(frames);
    memcpy(out + at, samples, sizeof(samples));
    at += sizeof(samples);
    memcpy(out + at, words, sizeof(words));
    at += sizeof(words);
    memcpy(out + at, strings, sizeof(strings));
    at += sizeof(strings);

    return at;
}


static char *
view_json(const unsigned char *copy, size_t length, prof_ui_filter_t *f)
{
    char            *json;
    prof_buffer_t    out = { NULL, 0, 0 };
    prof_ui_view_t  *v;

    assert_int_equal(prof_ui_view_build(&v, copy, length, f), 0);
    assert_int_equal(prof_ui_view_json(v, &out, NULL), 0);
    prof_ui_view_free(v);

    json = strndup((char *) out.data, out.length);
    prof_buffer_free(&out);

    return json;
}


static void
test_view_filters_by_span_and_endpoint(void **state)
{
    char              *json;
    size_t             n, length;
    unsigned char      record[1024], *copy;
    prof_ui_store_t   *s;
    prof_ui_filter_t   f;

    s = prof_ui_store_init(memory, sizeof(memory));
    n = make_record(record);
    assert_int_equal(prof_ui_store_write(s, record, n), 0);
    assert_int_equal(prof_ui_store_copy(s, &copy, &length), 0);

    memset(&f, 0, sizeof(f));
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "\"totals\":[100,0,0]"));
    assert_non_null(strstr(json, "\"endpoints\":[\"/a\",\"/b\"]"));
    free(json);

    f.has_span = 1;
    f.span_id = 7;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "\"totals\":[30,0,0]"));
    assert_non_null(strstr(json, "\"f_a\""));
    assert_null(strstr(json, "\"f_b\""));
    free(json);

    memset(&f, 0, sizeof(f));
    f.endpoint = "/b";
    f.endpoint_length = 2;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "\"totals\":[70,0,0]"));
    free(json);

    free(copy);
}


/*
 * A view as of a time reads the records stored by then, whatever their
 * periods' ends: a period that ended before the page was read but was
 * stored after it (its profile being named) is not in the page's
 * download. Without a time, the view is as of the later of now and the
 * newest record's storing, in milliseconds rounded up.
 */
static void
test_view_at_reads_the_records_stored_by_then(void **state)
{
    char              *json;
    size_t             n, length;
    int32_t            pid;
    int64_t            stored_ns;
    unsigned char      record[1024], *copy;
    prof_ui_store_t   *s;
    prof_ui_filter_t   f;

    s = prof_ui_store_init(memory, sizeof(memory));
    n = make_record(record);            /* ends at 2 s */

    stored_ns = 2500000000;
    memcpy(record + offsetof(prof_ui_record_t, stored_ns), &stored_ns,
           sizeof(stored_ns));
    assert_int_equal(prof_ui_store_write(s, record, n), 0);

    pid = 43;
    stored_ns = 3200000001;
    memcpy(record + offsetof(prof_ui_record_t, pid), &pid, sizeof(pid));
    memcpy(record + offsetof(prof_ui_record_t, stored_ns), &stored_ns,
           sizeof(stored_ns));
    assert_int_equal(prof_ui_store_write(s, record, n), 0);
    assert_int_equal(prof_ui_store_copy(s, &copy, &length), 0);

    memset(&f, 0, sizeof(f));
    f.now_ns = 3000000000;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "{\"at_ms\":3201,"));
    assert_non_null(strstr(json, "\"totals\":[200,0,0]"));
    free(json);

    f.now_ns = 5000000000;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "{\"at_ms\":5000,"));
    free(json);

    f.at_ns = 3000000000;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "{\"at_ms\":3000,"));
    assert_non_null(strstr(json, "\"profiles\":1,"));
    assert_non_null(strstr(json, "\"totals\":[100,0,0]"));
    free(json);

    f.at_ns = 3200000001;
    f.last_only = 1;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "\"profiles\":2,"));
    free(json);

    f.at_ns = 2000000000;
    json = view_json(copy, length, &f);
    assert_non_null(strstr(json, "\"profiles\":0,"));
    free(json);

    free(copy);
}


static void
test_malformed_records_are_refused(void **state)
{
    char             *json;
    size_t            n, length, i, k;
    unsigned char     record[1024], bad[1024], *copy;
    prof_ui_store_t  *s;
    prof_ui_filter_t  f;

    n = make_record(record);
    memset(&f, 0, sizeof(f));
    srand(1);

    /* Bytes flipped anywhere: a view, never a crash (ASan checks). */
    for (i = 0; i < 2000; i++) {
        memcpy(bad, record, n);
        for (k = 0; k < 4; k++) {
            bad[rand() % n] = (unsigned char) rand();
        }

        s = prof_ui_store_init(memory, sizeof(memory));
        assert_int_equal(prof_ui_store_write(s, bad, n - (i % 7) * 8), 0);
        assert_int_equal(prof_ui_store_copy(s, &copy, &length), 0);
        json = view_json(copy, length, &f);
        free(json);
        free(copy);
    }
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_keeps_the_newest_records_when_full),
        cmocka_unit_test(test_record_larger_than_the_store_is_refused),
        cmocka_unit_test(test_a_reader_never_sees_a_torn_record),
        cmocka_unit_test(test_view_filters_by_span_and_endpoint),
        cmocka_unit_test(test_view_at_reads_the_records_stored_by_then),
        cmocka_unit_test(test_malformed_records_are_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
