/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Status slots: claimed by pid, written under a seqlock, read without
 * waiting, rendered as JSON or text.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "channel/status.h"
#include "common/utf8.h"


/* A reader tries this many times before it calls a slot busy. */
#define PROF_STATUS_READS  64


/* Words of a slot, read while another process may write them. */
typedef uint64_t  prof_status_word_t __attribute__((may_alias));


static int
prof_status_alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}


/*
 * A slot's content after its first word (seq and pid), stored word by word
 * between the two steps of the sequence count. Each word's store is a
 * release (a plain store on x86-64): a reader that sees it sees the odd
 * count before it. No fences: ThreadSanitizer understands this form.
 */
static void
prof_status_store(prof_status_slot_t *slot, const prof_status_slot_t *content)
{
    size_t                     i;
    uint32_t                   seq;
    prof_status_word_t        *to;
    const prof_status_word_t  *from;

    to = (prof_status_word_t *) slot;
    from = (const prof_status_word_t *) content;

    seq = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->seq, seq + 1, __ATOMIC_RELAXED);

    for (i = 1; i < sizeof(prof_status_slot_t) / sizeof(uint64_t); i++) {
        __atomic_store_n(&to[i], from[i], __ATOMIC_RELEASE);
    }

    __atomic_store_n(&slot->seq, seq + 2, __ATOMIC_RELEASE);
}


/* What a process before left in the slot goes. */
static prof_status_slot_t *
prof_status_reset(prof_status_slot_t *slot)
{
    static const prof_status_slot_t  empty;

    prof_status_store(slot, &empty);

    return slot;
}


prof_status_slot_t *
prof_status_claim(prof_status_slot_t *slots, size_t count, pid_t pid)
{
    size_t   i, pass;
    int32_t  owner;

    /* A free slot first; then one whose process died without release. */
    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < count; i++) {
            owner = __atomic_load_n(&slots[i].pid, __ATOMIC_ACQUIRE);

            if (owner == pid) {
                return prof_status_reset(&slots[i]);
            }

            if ((pass == 0 && owner == 0)
                || (pass == 1 && owner != 0 && !prof_status_alive(owner)))
            {
                if (__atomic_compare_exchange_n(&slots[i].pid, &owner, pid,
                                                0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE))
                {
                    return prof_status_reset(&slots[i]);
                }
            }
        }
    }

    return NULL;
}


void
prof_status_release(prof_status_slot_t *slot, pid_t pid)
{
    int32_t  owner = pid;

    (void) __atomic_compare_exchange_n(&slot->pid, &owner, 0, 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}


/* A string into a slot's field, cut at its size (NUL-terminated). */
static void
prof_status_copy_text(char *dst, const char *src)
{
    size_t  n;

    if (src == NULL) {
        dst[0] = '\0';
        return;
    }

    n = strlen(src);
    if (n >= PROF_STATUS_TEXT_MAX) {
        n = PROF_STATUS_TEXT_MAX - 1;
    }

    memcpy(dst, src, n);
    dst[n] = '\0';
}


/* Whole lines of src, as many as fit. */
static void
prof_status_copy_symbols(char *dst, const char *src)
{
    size_t  n;

    dst[0] = '\0';

    if (src == NULL) {
        return;
    }

    n = strlen(src);

    if (n >= PROF_STATUS_SYMBOLS_MAX) {
        n = PROF_STATUS_SYMBOLS_MAX - 1;
        while (n > 0 && src[n - 1] != '\n') {
            n--;
        }
    }

    memcpy(dst, src, n);
    dst[n] = '\0';
}


void
prof_status_publish(prof_status_slot_t *slot, const prof_diagnostics_t *d,
    const prof_status_info_t *info)
{
    uint32_t                         n;
    prof_status_slot_t               s;
    const prof_diagnostics_field_t  *f;

    memset(&s, 0, sizeof(s));

    s.running = info->running;
    s.profiler_pid = info->profiler_pid;
    s.started_ns = info->started_ns;
    s.updated_ns = prof_clock_ns(CLOCK_REALTIME);
    s.handler_p50_ns = prof_histogram_quantile(&d->handler_ns, 0.5);
    s.handler_p99_ns = prof_histogram_quantile(&d->handler_ns, 0.99);
    s.handler_wall_p50_ns = prof_histogram_quantile(&d->handler_wall_ns, 0.5);
    s.handler_wall_p99_ns = prof_histogram_quantile(&d->handler_wall_ns,
                                                    0.99);
    s.last_upload_ns = info->last_upload_ns;
    prof_status_copy_text(s.last_upload, info->last_upload);
    s.last_push_ns = info->last_push_ns;
    prof_status_copy_text(s.last_push, info->last_push);
    s.last_export_ns = info->last_export_ns;
    prof_status_copy_text(s.last_export, info->last_export);
    s.last_error_ns = info->last_error_ns;
    prof_status_copy_text(s.last_error, info->last_error);
    prof_status_copy_symbols(s.symbols, info->symbols);
    prof_status_copy_text(s.lua, info->lua);
    s.memory = info->memory;
    s.loop = info->loop;

    n = 0;
    for (f = prof_diagnostics_fields;
         f->name != NULL && n < PROF_STATUS_COUNTERS; f++)
    {
        s.counters[n++] = prof_diagnostics_get(d, f);
    }
    s.counter_count = n;

    prof_status_store(slot, &s);
}


void
prof_status_publish_stopped(prof_status_slot_t *slot, const char *message,
    int err)
{
    char                text[PROF_STATUS_TEXT_MAX];
    prof_status_slot_t  s;

    snprintf(text, sizeof(text), "%s (%s)", message, strerror(err));

    memset(&s, 0, sizeof(s));
    s.updated_ns = prof_clock_ns(CLOCK_REALTIME);
    s.last_error_ns = s.updated_ns;
    prof_status_copy_text(s.last_error, text);

    prof_status_store(slot, &s);
}


void
prof_status_publish_lost(prof_status_slot_t *slot, const char *message)
{
    prof_status_slot_t  s;
    uint32_t            seq;

    if (prof_status_read(slot, &s) != 0) {
        memset(&s, 0, sizeof(s));
    }

    /* Its writer may have died in the middle of a store: the count made
       even again, so that this store reads as whole. */
    seq = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED);
    if (seq & 1) {
        __atomic_store_n(&slot->seq, seq + 1, __ATOMIC_RELEASE);
    }

    s.running = 0;
    s.profiler_crashes++;
    s.updated_ns = prof_clock_ns(CLOCK_REALTIME);
    s.last_error_ns = s.updated_ns;
    prof_status_copy_text(s.last_error, message);

    prof_status_store(slot, &s);
}


/*
 * The copy is made with acquire loads of its words (plain loads on
 * x86-64): the writer may change them meanwhile; the sequence count read
 * after them says whether it did.
 */
static void
prof_status_copy(prof_status_slot_t *copy, const prof_status_slot_t *slot)
{
    size_t                     i;
    prof_status_word_t        *to;
    const prof_status_word_t  *from;

    to = (prof_status_word_t *) copy;
    from = (const prof_status_word_t *) slot;

    for (i = 0; i < sizeof(prof_status_slot_t) / sizeof(uint64_t); i++) {
        to[i] = __atomic_load_n(&from[i], __ATOMIC_ACQUIRE);
    }
}


int
prof_status_read(const prof_status_slot_t *slot, prof_status_slot_t *copy)
{
    unsigned  i;
    uint32_t  before, after;

    for (i = 0; i < PROF_STATUS_READS; i++) {
        before = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
        if (before & 1) {
            continue;
        }

        prof_status_copy(copy, slot);

        after = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED);

        if (before == after) {
            if (copy->pid == 0 || !prof_status_alive(copy->pid)) {
                return -1;
            }
            copy->last_upload[PROF_STATUS_TEXT_MAX - 1] = '\0';
            copy->last_push[PROF_STATUS_TEXT_MAX - 1] = '\0';
            copy->last_export[PROF_STATUS_TEXT_MAX - 1] = '\0';
            copy->last_error[PROF_STATUS_TEXT_MAX - 1] = '\0';
            copy->symbols[PROF_STATUS_SYMBOLS_MAX - 1] = '\0';
            copy->lua[PROF_STATUS_TEXT_MAX - 1] = '\0';
            if (copy->counter_count > PROF_STATUS_COUNTERS) {
                copy->counter_count = PROF_STATUS_COUNTERS;
            }
            return 0;
        }
    }

    return -1;
}



static int
prof_status_json_time(prof_buffer_t *out, const char *key, int64_t ns)
{
    char  t[64];

    if (ns == 0) {
        return prof_buffer_printf(out, "\"%s\":null", key);
    }

    prof_rfc3339(t, ns);

    return prof_buffer_printf(out, "\"%s\":\"%s\"", key, t);
}


/* An upload's last outcome: {"time":...,"outcome":...}, or null. */
static int
prof_status_json_outcome(prof_buffer_t *out, int64_t ns, const char *text)
{
    int  rc;

    if (ns == 0) {
        return prof_buffer_append_str(out, "null");
    }

    rc = prof_buffer_append_str(out, "{");
    rc |= prof_status_json_time(out, "time", ns);
    rc |= prof_buffer_append_str(out, ",\"outcome\":");
    rc |= prof_utf8_append_json(out, text, strlen(text));
    rc |= prof_buffer_append_str(out, "}");

    return rc;
}


static int
prof_status_json_counters(prof_buffer_t *out, const uint64_t *counters,
    uint32_t count)
{
    int                              rc;
    uint32_t                         i;
    const prof_diagnostics_field_t  *f;

    rc = prof_buffer_append_str(out, "{");

    for (i = 0, f = prof_diagnostics_fields;
         i < count && f->name != NULL; i++, f++)
    {
        rc |= prof_buffer_printf(out, "%s\"%s\":%llu", i ? "," : "",
                                 f->name, (unsigned long long) counters[i]);
    }

    return rc | prof_buffer_append_str(out, "}");
}


/* "file\tsource\n"... as {"file":"source",...} */
static int
prof_status_json_symbols(prof_buffer_t *out, const char *symbols)
{
    int          rc;
    const char  *p, *tab, *end;

    rc = prof_buffer_append_str(out, "{");

    for (p = symbols; *p != '\0'; p = end + 1) {
        end = strchr(p, '\n');
        tab = memchr(p, '\t', end ? (size_t) (end - p) : 0);

        if (end == NULL || tab == NULL) {
            break;
        }

        rc |= prof_buffer_append_str(out, p != symbols ? "," : "");
        rc |= prof_utf8_append_json(out, p, tab - p);
        rc |= prof_buffer_append_str(out, ":");
        rc |= prof_utf8_append_json(out, tab + 1, end - tab - 1);
    }

    return rc | prof_buffer_append_str(out, "}");
}


/*
 * The event loop's stalls and turns: "loop":{"stall_threshold_ms", "stalls",
 * "stalls_logged", "longest" (null, or its time, "ms" and "line"),
 * "turns": [{"le_us", "count"}] for the buckets counted (le_us null
 * while the TSC's rate is not known)}.
 */
static int
prof_status_json_loop(prof_buffer_t *out, const prof_status_loop_t *l)
{
    int       rc, first;
    unsigned  i;

    rc = prof_buffer_printf(out, ",\"loop\":{\"stall_threshold_ms\":%lld,"
                            "\"stalls\":%llu,\"stalls_logged\":%llu,"
                            "\"longest\":",
                            (long long) (l->threshold_ns / 1000000),
                            (unsigned long long) l->count,
                            (unsigned long long) l->logged);

    if (l->longest_at_ns == 0) {
        rc |= prof_buffer_append_str(out, "null");

    } else {
        rc |= prof_buffer_append_str(out, "{");
        rc |= prof_status_json_time(out, "time", l->longest_at_ns);
        rc |= prof_buffer_printf(out, ",\"ms\":%lld,\"line\":",
                                 (long long) (l->longest_ns / 1000000));
        rc |= prof_utf8_append_json(out, l->longest, strlen(l->longest));
        rc |= prof_buffer_append_str(out, "}");
    }

    rc |= prof_buffer_append_str(out, ",\"turns\":[");

    for (i = 0, first = 1; i < PROF_STATUS_TURN_BUCKETS; i++) {
        if (l->turns[i] == 0) {
            continue;
        }

        if (l->turn_le_ns[i] == 0) {
            rc |= prof_buffer_printf(out, "%s{\"le_us\":null,\"count\":%llu}",
                                     first ? "" : ",",
                                     (unsigned long long) l->turns[i]);
        } else {
            rc |= prof_buffer_printf(out, "%s{\"le_us\":%.1f,\"count\":%llu}",
                                     first ? "" : ",",
                                     (double) l->turn_le_ns[i] / 1000,
                                     (unsigned long long) l->turns[i]);
        }

        first = 0;
    }

    return rc | prof_buffer_append_str(out, "]}");
}


static int
prof_status_json_worker(prof_buffer_t *out, const prof_status_slot_t *s)
{
    int  rc;

    rc = prof_buffer_printf(out, "{\"pid\":%d,\"running\":%s,"
                            "\"profiler_pid\":%d,\"profiler_crashes\":%d,",
                            (int) s->pid, s->running ? "true" : "false",
                            (int) s->profiler_pid, (int) s->profiler_crashes);
    rc |= prof_status_json_time(out, "started", s->started_ns);
    rc |= prof_buffer_append_str(out, ",");
    rc |= prof_status_json_time(out, "updated", s->updated_ns);
    rc |= prof_buffer_printf(out, ",\"handler_ns\":{\"p50\":%llu,"
                             "\"p99\":%llu},\"handler_wall_ns\":"
                             "{\"p50\":%llu,\"p99\":%llu},"
                             "\"last_upload\":",
                             (unsigned long long) s->handler_p50_ns,
                             (unsigned long long) s->handler_p99_ns,
                             (unsigned long long) s->handler_wall_p50_ns,
                             (unsigned long long) s->handler_wall_p99_ns);

    rc |= prof_status_json_outcome(out, s->last_upload_ns, s->last_upload);
    rc |= prof_buffer_append_str(out, ",\"last_push\":");
    rc |= prof_status_json_outcome(out, s->last_push_ns, s->last_push);
    rc |= prof_buffer_append_str(out, ",\"last_otlp_export\":");
    rc |= prof_status_json_outcome(out, s->last_export_ns, s->last_export);

    rc |= prof_buffer_append_str(out, ",\"lua\":");

    if (s->lua[0] == '\0') {
        rc |= prof_buffer_append_str(out, "null");
    } else {
        rc |= prof_utf8_append_json(out, s->lua, strlen(s->lua));
    }

    rc |= prof_buffer_append_str(out, ",\"last_error\":");

    if (s->last_error_ns == 0) {
        rc |= prof_buffer_append_str(out, "null");

    } else {
        rc |= prof_buffer_append_str(out, "{");
        rc |= prof_status_json_time(out, "time", s->last_error_ns);
        rc |= prof_buffer_append_str(out, ",\"message\":");
        rc |= prof_utf8_append_json(out, s->last_error,
                                    strlen(s->last_error));
        rc |= prof_buffer_append_str(out, "}");
    }

    rc |= prof_buffer_printf(out, ",\"memory\":{\"pss\":%llu,\"heap\":%llu,"
                             "\"queued\":%llu,\"queue_limit\":%llu,"
                             "\"tables\":%llu,\"functions\":%llu,"
                             "\"function_bytes\":%llu,\"dwarf_open\":%llu,"
                             "\"symbol_store\":%llu,"
                             "\"symbol_store_images\":%llu,"
                             "\"symbol_store_mapped\":%llu}",
                             (unsigned long long) s->memory.pss,
                             (unsigned long long) s->memory.heap,
                             (unsigned long long) s->memory.queued,
                             (unsigned long long) s->memory.queue_limit,
                             (unsigned long long) s->memory.tables,
                             (unsigned long long) s->memory.functions,
                             (unsigned long long) s->memory.function_bytes,
                             (unsigned long long) s->memory.dwarf_open,
                             (unsigned long long) s->memory.store,
                             (unsigned long long) s->memory.store_images,
                             (unsigned long long) s->memory.store_mapped);
    rc |= prof_status_json_loop(out, &s->loop);
    rc |= prof_buffer_append_str(out, ",\"counters\":");
    rc |= prof_status_json_counters(out, s->counters, s->counter_count);
    rc |= prof_buffer_append_str(out, ",\"symbols\":");
    rc |= prof_status_json_symbols(out, s->symbols);

    return rc | prof_buffer_append_str(out, "}");
}


int
prof_status_json(prof_buffer_t *out, const prof_status_slot_t *slots,
    size_t count)
{
    int                 rc;
    size_t              i, workers, running;
    uint32_t            k, n;
    uint64_t            totals[PROF_STATUS_COUNTERS];
    prof_status_slot_t  s;

    memset(totals, 0, sizeof(totals));
    workers = 0;
    running = 0;
    n = 0;

    rc = prof_buffer_append_str(out, "{\"workers\":[");

    for (i = 0; i < count; i++) {
        if (prof_status_read(&slots[i], &s) != 0) {
            continue;
        }

        rc |= prof_buffer_append_str(out, workers ? "," : "");
        rc |= prof_status_json_worker(out, &s);

        workers++;
        running += (s.running != 0);

        for (k = 0; k < s.counter_count; k++) {
            totals[k] += s.counters[k];
        }
        if (s.counter_count > n) {
            n = s.counter_count;
        }
    }

    rc |= prof_buffer_printf(out, "],\"totals\":{\"workers\":%zu,"
                             "\"running\":%zu,\"counters\":", workers,
                             running);
    rc |= prof_status_json_counters(out, totals, n);

    return rc | prof_buffer_append_str(out, "}}\n");
}


/* "  symbols: file source, file source\n" */
static int
prof_status_text_symbols(prof_buffer_t *out, const char *symbols)
{
    int          rc;
    const char  *p, *tab, *end;

    rc = prof_buffer_append_str(out, "  symbols:");

    for (p = symbols; (end = strchr(p, '\n')) != NULL; p = end + 1) {
        tab = memchr(p, '\t', end - p);
        if (tab == NULL) {
            break;
        }

        rc |= prof_buffer_append_str(out, p != symbols ? ", " : " ");
        rc |= prof_utf8_append(out, p, tab - p);
        rc |= prof_buffer_append_str(out, " ");
        rc |= prof_utf8_append(out, tab + 1, end - tab - 1);
    }

    return rc | prof_buffer_append_str(out, "\n");
}


/* "  loop: ..." and "  turns: ..." lines. */
static int
prof_status_text_loop(prof_buffer_t *out, const prof_status_loop_t *l)
{
    int       rc;
    char      t[64];
    unsigned  i;

    if (l->threshold_ns == 0) {
        rc = prof_buffer_append_str(out, "  loop: stalls not looked for\n");

    } else {
        rc = prof_buffer_printf(out, "  loop: %llu stalls over %lld ms "
                                "(%llu logged)",
                                (unsigned long long) l->count,
                                (long long) (l->threshold_ns / 1000000),
                                (unsigned long long) l->logged);

        if (l->longest_at_ns != 0) {
            prof_rfc3339(t, l->longest_at_ns);
            rc |= prof_buffer_printf(out, ", the longest %lld ms at %s: ",
                                     (long long) (l->longest_ns / 1000000),
                                     t);
            rc |= prof_utf8_append(out, l->longest, strlen(l->longest));
        }

        rc |= prof_buffer_append_str(out, "\n");
    }

    rc |= prof_buffer_append_str(out, "  turns:");

    for (i = 0; i < PROF_STATUS_TURN_BUCKETS; i++) {
        if (l->turns[i] == 0) {
            continue;
        }

        if (l->turn_le_ns[i] == 0) {
            rc |= prof_buffer_printf(out, " %llu",
                                     (unsigned long long) l->turns[i]);
        } else {
            rc |= prof_buffer_printf(out, " <=%.1fus %llu",
                                     (double) l->turn_le_ns[i] / 1000,
                                     (unsigned long long) l->turns[i]);
        }
    }

    return rc | prof_buffer_append_str(out, "\n");
}


int
prof_status_text(prof_buffer_t *out, const prof_status_slot_t *slots,
    size_t count)
{
    int                              rc;
    char                             t[64];
    size_t                           i, workers;
    uint32_t                         k;
    prof_status_slot_t               s;
    const prof_diagnostics_field_t  *f;

    rc = 0;
    workers = 0;

    for (i = 0; i < count; i++) {
        if (prof_status_read(&slots[i], &s) != 0) {
            continue;
        }

        workers++;

        rc |= prof_buffer_printf(out, "worker %d: %s, profiler process %d, "
                                 "profiler crashes %d, handler_ns p50 %llu "
                                 "p99 %llu (wall p50 %llu p99 %llu)\n",
                                 (int) s.pid,
                                 s.running ? "profiling" : "not profiling",
                                 (int) s.profiler_pid,
                                 (int) s.profiler_crashes,
                                 (unsigned long long) s.handler_p50_ns,
                                 (unsigned long long) s.handler_p99_ns,
                                 (unsigned long long) s.handler_wall_p50_ns,
                                 (unsigned long long) s.handler_wall_p99_ns);

        if (s.last_upload_ns != 0) {
            prof_rfc3339(t, s.last_upload_ns);
            rc |= prof_buffer_printf(out, "  last upload: %s %s\n", t,
                                     s.last_upload);
        }

        if (s.last_push_ns != 0) {
            prof_rfc3339(t, s.last_push_ns);
            rc |= prof_buffer_printf(out, "  last push to Pyroscope: %s %s\n",
                                     t, s.last_push);
        }

        if (s.last_export_ns != 0) {
            prof_rfc3339(t, s.last_export_ns);
            rc |= prof_buffer_printf(out, "  last OTLP export: %s %s\n",
                                     t, s.last_export);
        }

        if (s.lua[0] != '\0') {
            rc |= prof_buffer_append_str(out, "  lua: ");
            rc |= prof_utf8_append(out, s.lua, strlen(s.lua));
            rc |= prof_buffer_append_str(out, "\n");
        }

        if (s.last_error_ns != 0) {
            prof_rfc3339(t, s.last_error_ns);
            rc |= prof_buffer_printf(out, "  last error: %s ", t);
            rc |= prof_utf8_append(out, s.last_error, strlen(s.last_error));
            rc |= prof_buffer_append_str(out, "\n");
        }

        if (s.symbols[0] != '\0') {
            rc |= prof_status_text_symbols(out, s.symbols);
        }

        if (s.running) {
            rc |= prof_buffer_printf(out, "  memory: pss %llu, heap %llu, "
                      "queued %llu of %llu, tables %llu, functions %llu "
                      "(%llu bytes), dwarf open %llu, symbol store %llu "
                      "(%llu images, %llu mapped here)\n",
                      (unsigned long long) s.memory.pss,
                      (unsigned long long) s.memory.heap,
                      (unsigned long long) s.memory.queued,
                      (unsigned long long) s.memory.queue_limit,
                      (unsigned long long) s.memory.tables,
                      (unsigned long long) s.memory.functions,
                      (unsigned long long) s.memory.function_bytes,
                      (unsigned long long) s.memory.dwarf_open,
                      (unsigned long long) s.memory.store,
                      (unsigned long long) s.memory.store_images,
                      (unsigned long long) s.memory.store_mapped);
        }

        if (s.running) {
            rc |= prof_status_text_loop(out, &s.loop);
        }

        rc |= prof_buffer_append_str(out, " ");

        for (k = 0, f = prof_diagnostics_fields;
             k < s.counter_count && f->name != NULL; k++, f++)
        {
            rc |= prof_buffer_printf(out, " %s=%llu", f->name,
                                     (unsigned long long) s.counters[k]);
        }

        rc |= prof_buffer_append_str(out, "\n");
    }

    return rc | prof_buffer_printf(out, "workers: %zu\n", workers);
}
