/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Profiler: wires the sampler to the profiler loop thread, where batches
 * are aggregated and closed profiles are encoded and exported; carries
 * the server's request labels and endpoint logs to that thread.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <curl/curl.h>

#include "aggregator.h"
#include "container.h"
#include "endpoint_counts.h"
#include "file_export.h"
#include "spsc.h"
#include "status.h"
#include "intake.h"
#include "pprof.h"
#include "profiler.h"
#include "symbolizer.h"
#include "thread.h"
#include "tracer_info.h"
#include "upload.h"


#define PROF_BATCH_BYTES        (64 * 1024)
#define PROF_POOL_BATCHES       4
#define PROF_PUSH_EVERY_NS      (1000 * 1000 * 1000LL)
#define PROF_LOOP_NICE          10

/* Request labels waiting for the loop thread (a power of two). */
#define PROF_LABELS_RING        256

/* Endpoint log chunks waiting for the loop thread (a power of two). */
#define PROF_CHUNKS_RING        64

/* How often the status slot is written. */
#define PROF_STATUS_EVERY_MS    1000


struct prof_s {
    prof_conf_t          conf;
    char                *dump_dir;
    char                *agent_url;
    char                *service;
    char                *env;
    char                *version;
    char                *runtime_version;
    char               **tags;
    char                 host[256];
    char                 arch[sizeof(((struct utsname *) 0)->machine)];
    prof_container_t     container;
    char                 runtime_id[PROF_TRACER_INFO_VALUE_MAX];
    char                 thread_name[32];
    pid_t                pid;
    int64_t              start_monotonic_ns;    /* of the first profile */
    prof_log_t           log;
    prof_intake_conf_t   intake;

    prof_diagnostics_t   diagnostics;
    prof_queue_t         queue;
    prof_sampler_t      *sampler;
    prof_dump_dir_t     *dump;

    /* the server's thread to the loop thread */
    prof_spsc_t          labels;                /* prof_labels_t */
    prof_spsc_t          chunks;                /* prof_endpoint_log_t * */

    /* the server's thread only */
    prof_endpoint_writer_t  endpoints;
    uint64_t             flushes;               /* the period now */

    /* profiler loop thread only */
    prof_symbolizer_t   *symbolizer;
    prof_aggregator_t   *aggregator;
    prof_uploader_t     *uploader;
    uint64_t             open_period;           /* barriers taken */
    prof_endpoint_counts_t  *period_counts;     /* of open_period */
    prof_endpoint_log_t *early_chunks;          /* of later periods */

    int64_t              stop_upload_ms;        /* set before stop */
    int                  identity_done;         /* loop thread */
    int                  identified;            /* loop thread: the line
                                                   of prof_identify() */
    prof_tracer_info_t   tracer_info;           /* the server's thread */
    int                  tracer_info_state;     /* 0: not read, 1: read,
                                                   2: none; release */

    uv_loop_t            loop;
    uv_async_t           batches_ready;
    uv_async_t           stop_requested;
    uv_timer_t           status_timer;          /* with a status slot */
    int                  status_due;            /* publish it now */
    int64_t              started_ns;            /* unix ns */
    uv_thread_t          loop_thread;

    /* done is protected by done_mutex */
    uv_mutex_t           done_mutex;
    uv_cond_t            done_cond;
    int                  done;
};


/* The upload of an encoded profile: event.json, pprof, provenance. */
static void
prof_upload(prof_t *p, prof_profile_t *profile, prof_buffer_t *pprof,
    int remote_symbols)
{
    int                     rc;
    size_t                  i, n;
    prof_upload_t          *up;
    const char            **names;
    prof_intake_profile_t   ip;
    const prof_object_t   **objects;
    static const char      *attachments[] = {
        "profile.pprof", "code-provenance.json"
    };

    /* Every profile meant for the agent ends in one outcome (upload.h). */
    prof_counter_add(p->diagnostics.uploads_submitted, 1);

    up = calloc(1, sizeof(prof_upload_t));
    if (up == NULL) {
        prof_counter_add(p->diagnostics.uploads_dropped, 1);
        return;
    }

    up->sequence = profile->sequence;
    up->pprof = *pprof;                     /* moved */
    memset(pprof, 0, sizeof(prof_buffer_t));

    memset(&ip, 0, sizeof(ip));
    ip.sequence = profile->sequence;
    ip.start_realtime_ns = profile->start_realtime_ns;
    ip.duration_ns = profile->duration_ns;
    ip.remote_symbols = remote_symbols;

    n = prof_endpoint_counts_size(profile->endpoint_counts);
    names = calloc(n + 1, sizeof(char *));

    if (names == NULL) {
        rc = -ENOMEM;

    } else {
        for (i = 0; i < n; i++) {
            names[i] = prof_endpoint_counts_name(profile->endpoint_counts, i);
        }

        ip.endpoints = names;
        ip.endpoint_counts = n ? profile->endpoint_counts->counts : NULL;
        ip.endpoint_count = n;

        rc = prof_intake_event_json(&up->event, &p->intake, &ip,
                                    attachments, 2);
        free(names);
    }

    n = prof_symbolizer_object_count(p->symbolizer);
    objects = calloc(n + 1, sizeof(prof_object_t *));

    if (rc == 0 && objects != NULL) {
        for (i = 0; i < n; i++) {
            objects[i] = prof_symbolizer_object(p->symbolizer, i);
        }
        rc = prof_intake_provenance_json(&up->provenance, objects, n);

    } else {
        rc = -ENOMEM;
    }

    free(objects);

    if (rc != 0) {
        prof_counter_add(p->diagnostics.uploads_dropped, 1);
        prof_log_limited(&p->log, PROF_CAUSE_MEMORY, PROF_LOG_ERR,
                         "profiling: out of memory, profile %llu not "
                         "uploaded", (unsigned long long) up->sequence);
        prof_upload_free(up);
        return;
    }

    prof_uploader_submit(p->uploader, up);
}


/* Objects whose ELF data is malformed: one warning each. */
static void
prof_warn_corrupt(prof_t *p)
{
    const prof_object_t  *o;

    while ((o = prof_symbolizer_corrupt_object(p->symbolizer)) != NULL) {
        prof_log(&p->log, PROF_LOG_WARN, "profiling: \"%s\" has malformed "
                 "ELF data, its functions are not named", o->path);
    }
}


/* A string of the identity replaced by the tracer's (loop thread). */
static void
prof_take_value(char **field, const char *value, int explicit)
{
    char  *copy;

    if (explicit || value[0] == '\0') {
        return;
    }

    copy = strdup(value);
    if (copy == NULL) {
        return;
    }

    free(*field);
    *field = copy;
}


/*
 * Before the first profile leaves: the identity of a Datadog tracer in
 * the process (its runtime-id, and its service, env and version unless
 * configured), so that Datadog links the profiles to its spans. Decided
 * once: every profile of the process says the same.
 */
static void
prof_resolve_identity(prof_t *p)
{
    prof_tracer_info_t  info;

    if (p->identity_done) {
        return;
    }

    p->identity_done = 1;

    if (!p->conf.tracer_identity) {
        return;
    }

    /* Read by the server when its modules were all initialized, or now. */
    switch (__atomic_load_n(&p->tracer_info_state, __ATOMIC_ACQUIRE)) {
    case 1:
        info = p->tracer_info;
        break;
    case 2:
        return;
    default:
        if (prof_tracer_info_read(&info) != 0) {
            return;
        }
    }

    snprintf(p->runtime_id, sizeof(p->runtime_id), "%s", info.runtime_id);

    prof_take_value(&p->service, info.service, p->conf.service_explicit);
    prof_take_value(&p->env, info.env, p->conf.env_explicit);
    prof_take_value(&p->version, info.version, p->conf.version_explicit);

    p->intake.service = p->service;
    p->intake.env = p->env;
    p->intake.version = p->version;

    prof_log(&p->log, PROF_LOG_INFO, "profiling: the profiles carry the "
             "identity of the tracer in this process (runtime-id %s)",
             p->runtime_id);
}


static void
prof_export(void *data, prof_profile_t *profile)
{
    int                 rc;
    prof_t             *p = data;
    prof_buffer_t       out = { NULL, 0, 0 };
    prof_pprof_info_t   info;

    rc = prof_pprof_encode_info(profile, p->aggregator, &out, &info);

    if (rc != 0) {
        prof_counter_add(p->diagnostics.encode_failures, 1);
        prof_log_limited(&p->log, PROF_CAUSE_ENCODE, PROF_LOG_ERR,
                         "profiling: encoding profile %llu failed (%s), "
                         "profile dropped",
                         (unsigned long long) profile->sequence,
                         strerror(-rc));
        goto done;
    }

    if (p->dump != NULL) {
        rc = prof_dump_dir_write(p->dump, p->pid, profile->sequence,
                                 out.data, out.length);
        if (rc != 0) {
            prof_counter_add(p->diagnostics.export_failures, 1);
            prof_log_limited(&p->log, PROF_CAUSE_FILE, PROF_LOG_ERR,
                             "profiling: writing profile to \"%s\" failed "
                             "(%s), profile dropped", p->dump_dir,
                             strerror(-rc));

        } else {
            prof_counter_add(p->diagnostics.profiles_exported, 1);
            prof_counter_add(p->diagnostics.bytes_exported, out.length);
        }
    }

    if (p->uploader != NULL) {
        prof_resolve_identity(p);
        /* A frame in an object but without a name: the backend may have
           the object's symbols (by its build id). */
        prof_upload(p, profile, &out, info.unnamed_locations > 0);
    }

done:

    prof_buffer_free(&out);
    prof_profile_free(profile);

    prof_warn_corrupt(p);
}


/* Requests of an endpoint log chunk that will not be counted. */
static void
prof_drop_chunk(prof_t *p, prof_endpoint_log_t *chunk)
{
    prof_endpoint_counts_t  *scratch;

    /* Counting its records is the way to know how many requests. */
    scratch = prof_endpoint_counts_create();
    if (scratch != NULL) {
        prof_counter_add(p->diagnostics.endpoints_dropped,
                         prof_endpoint_counts_add_log(scratch, chunk));
        prof_endpoint_counts_free(scratch);
    }

    prof_endpoint_log_free(chunk);
}


/* Counts a chunk into its period's table; 0, or -1 when it is not the
   open period's. */
static int
prof_count_chunk(prof_t *p, prof_endpoint_log_t *chunk)
{
    prof_endpoint_counts_t  *c;

    if (chunk->period != p->open_period) {
        return -1;
    }

    if (p->period_counts == NULL) {
        p->period_counts = prof_endpoint_counts_create();
        if (p->period_counts == NULL) {
            prof_drop_chunk(p, chunk);
            return 0;
        }
    }

    c = p->period_counts;
    (void) prof_endpoint_counts_add_log(c, chunk);
    prof_endpoint_log_free(chunk);

    return 0;
}


/* A chunk handed over before its period's barrier: counted or kept. */
static void
prof_take_chunk(prof_t *p, prof_endpoint_log_t *chunk)
{
    chunk->next = NULL;

    if (prof_count_chunk(p, chunk) == 0) {
        return;
    }

    if (chunk->period < p->open_period) {
        prof_drop_chunk(p, chunk);
        return;
    }

    chunk->next = p->early_chunks;
    p->early_chunks = chunk;
}


/* The endpoint counts of the period a barrier closes; the next opens. */
static prof_endpoint_counts_t *
prof_close_period(prof_t *p, const prof_endpoint_log_t *last)
{
    prof_endpoint_log_t     *chunk, *early;
    prof_endpoint_counts_t  *counts;

    counts = p->period_counts;

    if (last != NULL && last->used > 0) {
        if (counts == NULL) {
            counts = prof_endpoint_counts_create();
        }
        if (counts != NULL) {
            (void) prof_endpoint_counts_add_log(counts, last);
        }
    }

    if (counts != NULL) {
        prof_counter_add(p->diagnostics.endpoints_dropped, counts->dropped);
    }

    p->period_counts = NULL;
    p->open_period++;

    early = p->early_chunks;
    p->early_chunks = NULL;

    while (early != NULL) {
        chunk = early;
        early = early->next;
        prof_take_chunk(p, chunk);
    }

    return counts;
}


static void
prof_drain(prof_t *p)
{
    prof_batch_t            *b, *next;
    prof_labels_t           *l;
    prof_endpoint_log_t    **c;
    prof_endpoint_counts_t  *counts;

    /*
     * The batches first: what the server handed over before it asked
     * for a barrier taken now is in the rings by then.
     */
    b = prof_queue_pop_all(&p->queue);

    while ((l = prof_spsc_peek(&p->labels)) != NULL) {
        (void) prof_aggregator_add_labels(p->aggregator, l);
        prof_spsc_release(&p->labels);
    }

    while ((c = prof_spsc_peek(&p->chunks)) != NULL) {
        prof_take_chunk(p, *c);
        prof_spsc_release(&p->chunks);
    }

    for ( /* void */ ; b != NULL; b = next) {
        next = b->next;

        counts = b->flush_after ? prof_close_period(p, b->endpoints) : NULL;

        if (prof_aggregator_consume(p->aggregator, b, counts) != 0) {
            prof_log_limited(&p->log, PROF_CAUSE_MEMORY, PROF_LOG_ERR,
                             "profiling: out of memory while aggregating, "
                             "samples dropped");
        }

        prof_queue_release(&p->queue, b);
    }
}


static void prof_publish_status(prof_t *p);


static void
prof_on_batches_ready(uv_async_t *handle)
{
    prof_t  *p = handle->data;

    prof_drain(p);

    if (__atomic_exchange_n(&p->status_due, 0, __ATOMIC_ACQ_REL)) {
        prof_publish_status(p);
    }
}


/* The status slot, from the loop thread: counters and the last news. */
static void
prof_publish_status(prof_t *p)
{
    prof_status_info_t  info;

    memset(&info, 0, sizeof(info));
    info.running = 1;
    info.started_ns = p->started_ns;
    info.last_error_ns = p->log.last_error_ns;
    info.last_error = p->log.last_error;

    if (p->uploader != NULL) {
        info.last_upload = prof_uploader_last(p->uploader,
                                              &info.last_upload_ns);
    }

    prof_status_publish(p->conf.status_slot, &p->diagnostics, &info);
}


/* The file name of a path. */
static const char *
prof_base_name(const char *path)
{
    const char  *slash;

    slash = strrchr(path, '/');

    return slash != NULL ? slash + 1 : path;
}


/*
 * Once, at NOTICE, in one line for a bug report: the version, what the
 * unwinder and the symbolizer found, and whether the agent took the
 * first profile (agent: its first outcome; NULL when there is none yet).
 */
static void
prof_identify(prof_t *p, const char *agent)
{
    int                   rc;
    char                  exe[PATH_MAX];
    size_t                i, n, count[PROF_SYMBOLS_DYNSYM + 1];
    ssize_t               len;
    const char           *main_symbols;
    prof_buffer_t         b = { NULL, 0, 0 },
                          names[PROF_SYMBOLS_DYNSYM + 1];
    prof_symbols_e        kind;
    const prof_object_t  *o;
    static const char    *kinds[] = {
        "none", "all functions (.symtab)", "all functions (debug file)",
        "all functions (MiniDebugInfo)", "exported functions (.dynsym)"
    };
    static const char    *libraries[] = {
        "without", "with .symtab", "with a debug file", "with MiniDebugInfo",
        "with .dynsym only"
    };

    if (p->identified || !p->conf.identify) {
        return;
    }

    p->identified = 1;

    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[len > 0 ? len : 0] = '\0';

    if (prof_symbolizer_object_count(p->symbolizer) == 0) {
        (void) prof_symbolizer_refresh(p->symbolizer);
    }

    memset(count, 0, sizeof(count));
    memset(names, 0, sizeof(names));
    main_symbols = "unknown";
    rc = 0;

    /* Where each object's names come from: the first few by name. */

    n = prof_symbolizer_object_count(p->symbolizer);

    for (i = 0; i < n; i++) {
        o = prof_symbolizer_object(p->symbolizer, i);
        kind = prof_symbolizer_symbols(p->symbolizer, i);

        if (strcmp(o->path, exe) == 0) {
            main_symbols = kinds[kind];
            continue;
        }

        if (count[kind]++ < 8) {
            rc |= prof_buffer_printf(&names[kind], "%s%s",
                                     names[kind].length ? ", " : "",
                                     prof_base_name(o->path));

        } else if (count[kind] == 9) {
            rc |= prof_buffer_append_str(&names[kind], ", ...");
        }
    }

    rc |= prof_buffer_printf(&b, "profiling: ngx_http_profiling_module %s "
        "(nginx %s, %s): unwind tables for %llu objects (%llu KB, %llu left "
        "out); symbols: %s %s; libraries", PROF_VERSION,
        p->runtime_version ? p->runtime_version : "", p->arch,
        (unsigned long long) prof_counter_get(p->diagnostics.unwind_objects),
        (unsigned long long)
            prof_counter_get(p->diagnostics.unwind_table_bytes) / 1024,
        (unsigned long long)
            prof_counter_get(p->diagnostics.unwind_objects_skipped),
        prof_base_name(exe), main_symbols);

    for (i = PROF_SYMBOLS_SYMTAB; i <= PROF_SYMBOLS_DYNSYM + 1; i++) {
        kind = (i <= PROF_SYMBOLS_DYNSYM) ? (prof_symbols_e) i
                                          : PROF_SYMBOLS_NONE;

        rc |= prof_buffer_printf(&b, "%s %zu %s", i > 1 ? "," : ":",
                                 count[kind], libraries[kind]);

        if (names[kind].length > 0) {
            rc |= prof_buffer_printf(&b, " (%.*s)", (int) names[kind].length,
                                     (char *) names[kind].data);
        }

        prof_buffer_free(&names[kind]);
    }

    if (p->agent_url == NULL) {
        rc |= prof_buffer_append_str(&b, "; agent: none");

    } else {
        rc |= prof_buffer_printf(&b, "; agent %s: %s (%s)", p->agent_url,
                                 agent == NULL ? "not tried"
                                 : strncmp(agent, "uploaded", 8) == 0
                                 ? "reachable" : "not reachable",
                                 agent ? agent : "no profile yet");
    }

    if (rc == 0 && prof_buffer_append(&b, "", 1) == 0) {
        prof_log(&p->log, PROF_LOG_NOTICE, "%s", (char *) b.data);
    }

    prof_buffer_free(&b);
}


/* The first profile the agent took or refused completes the line; each
   one shows on the status page at once. */
static void
prof_on_upload_outcome(void *data, const char *text)
{
    prof_t  *p = data;

    prof_identify(p, text);

    if (p->conf.status_slot != NULL) {
        prof_publish_status(p);
    }
}


static void
prof_on_status_timer(uv_timer_t *timer)
{
    prof_publish_status(timer->data);
}


static void
prof_close_loop_handles(void *data)
{
    prof_t  *p = data;

    prof_identify(p, NULL);

    if (p->conf.status_slot != NULL) {
        prof_publish_status(p);
        uv_timer_stop(&p->status_timer);
        uv_close((uv_handle_t *) &p->status_timer, NULL);
    }

    p->uploader = NULL;
    uv_close((uv_handle_t *) &p->batches_ready, NULL);
    uv_close((uv_handle_t *) &p->stop_requested, NULL);
}


static void
prof_on_stop_requested(uv_async_t *handle)
{
    prof_t  *p = handle->data;

    prof_drain(p);

    if (p->uploader == NULL) {
        prof_close_loop_handles(p);
        return;
    }

    /* The last upload gets what the server allows, no more. */
    prof_uploader_close(p->uploader,
                        __atomic_load_n(&p->stop_upload_ms, __ATOMIC_ACQUIRE),
                        prof_close_loop_handles, p);
}


static void
prof_loop_main(void *arg)
{
    prof_t  *p = arg;

    /* Encoding and uploading yield to the workers when CPU is short. */
    prof_thread_settle("prof-loop", PROF_LOOP_NICE);

    /* With an agent, the line waits for its first answer. */
    if (p->uploader == NULL) {
        prof_identify(p, NULL);
    }

    (void) uv_run(&p->loop, UV_RUN_DEFAULT);

    uv_mutex_lock(&p->done_mutex);
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
    uv_cond_signal(&p->done_cond);
    uv_mutex_unlock(&p->done_mutex);
}


static void
prof_notify(void *data)
{
    prof_t  *p = data;

    (void) uv_async_send(&p->batches_ready);
}


static void
prof_read_thread_name(prof_t *p)
{
    int      fd;
    char     path[64];
    ssize_t  n;

    snprintf(path, sizeof(path), "/proc/self/task/%ld/comm",
             (long) syscall(SYS_gettid));

    strcpy(p->thread_name, "main");

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }

    n = read(fd, p->thread_name, sizeof(p->thread_name) - 1);
    close(fd);

    if (n <= 0) {
        strcpy(p->thread_name, "main");
        return;
    }

    while (n > 0 && p->thread_name[n - 1] == '\n') {
        n--;
    }
    p->thread_name[n] = '\0';
}


static int64_t
prof_clock_ns(clockid_t clock)
{
    struct timespec  ts;

    clock_gettime(clock, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}


static void
prof_free(prof_t *p)
{
    size_t  i;

    if (p->aggregator != NULL) {
        prof_aggregator_destroy(p->aggregator);
    }
    prof_endpoint_counts_free(p->period_counts);
    prof_endpoint_log_free(p->early_chunks);
    prof_endpoint_log_free(prof_endpoint_writer_take(&p->endpoints));

    while (p->chunks.items != NULL
           && prof_spsc_peek(&p->chunks) != NULL)
    {
        prof_endpoint_log_free(*(prof_endpoint_log_t **)
                               prof_spsc_peek(&p->chunks));
        prof_spsc_release(&p->chunks);
    }

    prof_spsc_free(&p->labels);
    prof_spsc_free(&p->chunks);
    prof_dump_dir_close(p->dump);
    prof_log_free(&p->log);
    if (p->symbolizer != NULL) {
        prof_symbolizer_destroy(p->symbolizer);
    }
    if (p->tags != NULL) {
        for (i = 0; i < p->conf.tag_count; i++) {
            free(p->tags[i]);
        }
        free(p->tags);
    }

    free(p->dump_dir);
    free(p->agent_url);
    free(p->service);
    free(p->env);
    free(p->version);
    free(p->runtime_version);
    free(p);
}


static int
prof_start_loop(prof_t *p)
{
    int                     rc;
    prof_upload_conf_t      uc;
    prof_aggregator_conf_t  ac;

    p->symbolizer = prof_symbolizer_create();
    if (p->symbolizer == NULL) {
        return -ENOMEM;
    }

    memset(&ac, 0, sizeof(ac));
    ac.symbolizer = p->symbolizer;
    ac.diagnostics = &p->diagnostics;
    ac.period_ns = p->conf.interval_ns;
    ac.thread_id = (int64_t) syscall(SYS_gettid);
    ac.thread_name = p->thread_name;
    ac.start_realtime_ns = prof_clock_ns(CLOCK_REALTIME);
    ac.start_monotonic_ns = prof_clock_ns(CLOCK_MONOTONIC);
    p->start_monotonic_ns = ac.start_monotonic_ns;
    ac.timeline = p->conf.timeline;
    ac.on_profile = prof_export;
    ac.on_profile_data = p;

    p->aggregator = prof_aggregator_create(&ac);
    if (p->aggregator == NULL) {
        return -ENOMEM;
    }

    rc = uv_loop_init(&p->loop);
    if (rc != 0) {
        return rc;
    }

    p->batches_ready.data = p;
    p->stop_requested.data = p;

    if (uv_mutex_init(&p->done_mutex) != 0) {
        uv_loop_close(&p->loop);
        return -ENOMEM;
    }

    if (uv_cond_init(&p->done_cond) != 0) {
        uv_mutex_destroy(&p->done_mutex);
        uv_loop_close(&p->loop);
        return -ENOMEM;
    }

    if (p->agent_url != NULL) {
        memset(&uc, 0, sizeof(uc));
        uc.url = p->agent_url;
        uc.timeout_ms = p->conf.upload_timeout_ms;
        uc.origin = PROF_ORIGIN;
        uc.origin_version = PROF_VERSION;
        uc.container_id = p->container.container_id;
        uc.entity_id = p->container.entity_id;
        uc.diagnostics = &p->diagnostics;
        uc.log = &p->log;
        uc.outcome = prof_on_upload_outcome;
        uc.outcome_data = p;

        p->uploader = prof_uploader_create(&p->loop, &uc);
        if (p->uploader == NULL) {
            uv_cond_destroy(&p->done_cond);
            uv_mutex_destroy(&p->done_mutex);
            uv_loop_close(&p->loop);
            return -ENOMEM;
        }
    }

    (void) uv_async_init(&p->loop, &p->batches_ready, prof_on_batches_ready);
    (void) uv_async_init(&p->loop, &p->stop_requested,
                         prof_on_stop_requested);

    /* The status page's slot, once a second. */
    p->started_ns = prof_clock_ns(CLOCK_REALTIME);

    if (p->conf.status_slot != NULL) {
        (void) uv_timer_init(&p->loop, &p->status_timer);
        p->status_timer.data = p;
        (void) uv_timer_start(&p->status_timer, prof_on_status_timer,
                              PROF_STATUS_EVERY_MS, PROF_STATUS_EVERY_MS);
    }

    rc = prof_thread_create(&p->loop_thread, prof_loop_main, p);
    if (rc != 0) {
        if (p->uploader != NULL) {
            prof_uploader_close(p->uploader, 0, NULL, NULL);
            p->uploader = NULL;
        }
        uv_close((uv_handle_t *) &p->batches_ready, NULL);
        uv_close((uv_handle_t *) &p->stop_requested, NULL);
        if (p->conf.status_slot != NULL) {
            uv_close((uv_handle_t *) &p->status_timer, NULL);
        }
        (void) uv_run(&p->loop, UV_RUN_DEFAULT);
        uv_loop_close(&p->loop);
        uv_cond_destroy(&p->done_cond);
        uv_mutex_destroy(&p->done_mutex);
        return rc;
    }

    return 0;
}


/* Stops the loop thread; 0 when it finished within timeout_ms. */
static int
prof_stop_loop(prof_t *p, int64_t timeout_ms)
{
    int       rc;
    uint64_t  deadline_ns, now_ns;

    (void) uv_async_send(&p->stop_requested);

    deadline_ns = uv_hrtime() + (uint64_t) timeout_ms * 1000000;
    rc = 0;

    uv_mutex_lock(&p->done_mutex);

    while (!p->done) {
        now_ns = uv_hrtime();
        if (now_ns >= deadline_ns) {
            rc = -ETIMEDOUT;
            break;
        }
        (void) uv_cond_timedwait(&p->done_cond, &p->done_mutex,
                                 deadline_ns - now_ns);
    }

    uv_mutex_unlock(&p->done_mutex);

    if (rc != 0) {
        return rc;
    }

    (void) uv_thread_join(&p->loop_thread);
    uv_loop_close(&p->loop);
    uv_cond_destroy(&p->done_cond);
    uv_mutex_destroy(&p->done_mutex);

    return 0;
}


static char *
prof_strdup_or_null(const char *s, int *failed)
{
    char  *copy;

    if (s == NULL) {
        return NULL;
    }

    copy = strdup(s);
    if (copy == NULL) {
        *failed = 1;
    }

    return copy;
}


/* Copies the configuration and what the intake documents need. */
static int
prof_init_conf(prof_t *p, const prof_conf_t *conf)
{
    int             failed;
    size_t          i;
    struct utsname  un;

    failed = 0;

    p->conf = *conf;
    p->pid = getpid();
    p->log.handler = conf->log;
    p->log.data = conf->log_data;
    p->log.notify = conf->log_notify;
    p->log.notify_data = conf->log_notify_data;

    if (prof_log_init(&p->log) != 0) {
        return -ENOMEM;
    }

    p->service = prof_strdup_or_null(conf->service ? conf->service : "nginx",
                                     &failed);
    p->dump_dir = prof_strdup_or_null(conf->dump_dir, &failed);
    p->agent_url = prof_strdup_or_null(conf->agent_url, &failed);
    p->env = prof_strdup_or_null(conf->env, &failed);
    p->version = prof_strdup_or_null(conf->version, &failed);
    p->runtime_version = prof_strdup_or_null(conf->runtime_version
                                             ? conf->runtime_version : "",
                                             &failed);

    p->tags = calloc(conf->tag_count + 1, sizeof(char *));
    if (p->tags == NULL) {
        p->conf.tag_count = 0;
        return -ENOMEM;
    }

    for (i = 0; i < conf->tag_count; i++) {
        p->tags[i] = prof_strdup_or_null(conf->tags[i], &failed);
    }

    if (failed) {
        return -ENOMEM;
    }

    if (gethostname(p->host, sizeof(p->host) - 1) != 0) {
        strcpy(p->host, "localhost");
    }

    if (conf->runtime_id != NULL && conf->runtime_id[0] != '\0') {
        snprintf(p->runtime_id, sizeof(p->runtime_id), "%s",
                 conf->runtime_id);

    } else if (prof_intake_uuid(p->runtime_id) != 0) {
        return -EIO;
    }

    if (uname(&un) == 0) {
        snprintf(p->arch, sizeof(p->arch), "%s", un.machine);
    }

    p->intake.service = p->service;
    p->intake.env = p->env;
    p->intake.version = p->version;
    p->intake.host = p->host;
    p->intake.runtime_version = p->runtime_version;
    p->intake.runtime_os = "linux";
    p->intake.runtime_arch = p->arch;
    p->intake.runtime_id = p->runtime_id;
    p->intake.profiler_version = PROF_VERSION;
    p->intake.user_tags = (const char * const *) p->tags;
    p->intake.user_tag_count = conf->tag_count;
    p->intake.pid = p->pid;

    return 0;
}


/* In prof_start: the dump directory, once; its problem logged once. */
static void
prof_open_dump_dir(prof_t *p)
{
    char              error[1024];
    prof_dump_conf_t  dc;

    if (p->dump_dir == NULL) {
        return;
    }

    memset(&dc, 0, sizeof(dc));
    dc.service = p->service;
    dc.keep_files = p->conf.dump_keep_files;
    dc.keep_bytes = p->conf.dump_keep_bytes;
    dc.files_deleted = &p->diagnostics.dump_files_deleted;
    dc.temps_removed = &p->diagnostics.dump_temps_removed;

    p->dump = prof_dump_dir_open(p->dump_dir, &dc, error, sizeof(error));

    if (p->dump == NULL) {
        prof_log(&p->log, PROF_LOG_ERR, "profiling: %s, profiles will not "
                 "be written to it", error);
    }
}


int
prof_start(prof_t **profiler, const prof_conf_t *conf)
{
    int                  rc;
    prof_t              *p;
    prof_sampler_conf_t  sc;
    static int           curl_ready;

    p = calloc(1, sizeof(prof_t));
    if (p == NULL) {
        return -ENOMEM;
    }

    rc = prof_init_conf(p, conf);
    if (rc != 0) {
        prof_free(p);
        return rc;
    }

    if (p->agent_url != NULL && !curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            prof_free(p);
            return -ENOMEM;
        }
        curl_ready = 1;
    }

    prof_read_thread_name(p);
    prof_open_dump_dir(p);
    prof_container_detect(&p->container);

    if (prof_spsc_init(&p->labels, PROF_LABELS_RING, sizeof(prof_labels_t))
        != 0
        || prof_spsc_init(&p->chunks, PROF_CHUNKS_RING,
                          sizeof(prof_endpoint_log_t *)) != 0)
    {
        prof_free(p);
        return -ENOMEM;
    }

    rc = prof_queue_init(&p->queue, PROF_BATCH_BYTES, conf->memory_limit,
                         PROF_POOL_BATCHES);
    if (rc != 0) {
        prof_free(p);
        return rc;
    }

    rc = prof_start_loop(p);
    if (rc != 0) {
        prof_queue_destroy(&p->queue);
        prof_free(p);
        return rc;
    }

    memset(&sc, 0, sizeof(sc));
    sc.interval_ns = conf->interval_ns;
    sc.max_frames = conf->max_frames;
    sc.push_every_ns = PROF_PUSH_EVERY_NS;
    sc.queue = &p->queue;
    sc.diagnostics = &p->diagnostics;
    sc.notify = prof_notify;
    sc.notify_data = p;
    sc.unwind_table = conf->unwind_table;
    sc.start_monotonic_ns = p->start_monotonic_ns;

    rc = prof_sampler_start(&p->sampler, &sc);
    if (rc != 0) {
        (void) prof_stop_loop(p, 1000);
        prof_queue_destroy(&p->queue);
        prof_free(p);
        return rc;
    }

    /* The status page shows it now, unwind tables and all. */
    if (p->conf.status_slot != NULL) {
        __atomic_store_n(&p->status_due, 1, __ATOMIC_RELEASE);
        (void) uv_async_send(&p->batches_ready);
    }

    *profiler = p;
    return 0;
}


void
prof_flush(prof_t *p)
{
    prof_endpoint_log_t  *chunk;

    chunk = prof_endpoint_writer_take(&p->endpoints);
    p->flushes++;

    prof_sampler_flush(p->sampler, chunk);
}


/*
 * At exit, after prof_stop() gave up waiting for the loop thread: if it
 * still runs (libcurl, OpenSSL), the exit handlers registered before this
 * one (OpenSSL's cleanup, libraries' destructors) would free what it is
 * using. The process ends as exit() would, without them.
 */
static void
prof_exit_abandoned(int status, void *arg)
{
    prof_t  *p = arg;

    if (!__atomic_load_n(&p->done, __ATOMIC_ACQUIRE)) {
        _exit(status);
    }
}


int
prof_stop(prof_t *p, int64_t upload_ms, int64_t wait_ms)
{
    char  line[2048];

    prof_sampler_stop(p->sampler, prof_endpoint_writer_take(&p->endpoints));
    p->sampler = NULL;

    __atomic_store_n(&p->stop_upload_ms, upload_ms, __ATOMIC_RELEASE);

    if (prof_stop_loop(p, wait_ms) != 0) {
        /*
         * The process is exiting: the thread keeps what it uses, and its
         * messages are not delivered any more.
         */
        prof_log(&p->log, PROF_LOG_WARN, "profiling: the last profile was "
                 "not exported within %lld ms", (long long) wait_ms);
        (void) on_exit(prof_exit_abandoned, p);
        return -ETIMEDOUT;
    }

    prof_log_deliver(&p->log);

    prof_diagnostics_format(&p->diagnostics, line, sizeof(line));
    prof_log(&p->log, PROF_LOG_NOTICE, "profiling: stopped: %s", line);

    prof_queue_destroy(&p->queue);
    prof_free(p);

    return 0;
}


int
prof_label(prof_t *p, const prof_labels_t *labels)
{
    prof_labels_t  *l;

    l = prof_spsc_reserve(&p->labels);
    if (l == NULL) {
        prof_counter_add(p->diagnostics.labels_dropped, 1);
        return -ENOSPC;
    }

    memcpy(l, labels, offsetof(prof_labels_t, endpoint)
                      + (labels->endpoint_length <= PROF_ENDPOINT_MAX
                         ? labels->endpoint_length : PROF_ENDPOINT_MAX));

    /* Half full: the loop thread takes them before the ring is. */
    if (prof_spsc_commit(&p->labels) == PROF_LABELS_RING / 2) {
        (void) uv_async_send(&p->batches_ready);
    }

    return 0;
}


void
prof_count_endpoint_slow(prof_t *p, const void *a, size_t alen,
    const void *b, size_t blen)
{
    prof_endpoint_log_t   *chunk, **slot;

    chunk = prof_endpoint_writer_take(&p->endpoints);

    if (chunk != NULL && chunk->used > 0) {
        slot = prof_spsc_reserve(&p->chunks);

        if (slot == NULL) {
            /* The loop thread is behind: these requests are not counted. */
            prof_drop_chunk(p, chunk);

        } else {
            *slot = chunk;
            (void) prof_spsc_commit(&p->chunks);
            (void) uv_async_send(&p->batches_ready);
        }

        chunk = NULL;
    }

    if (chunk == NULL) {
        chunk = prof_endpoint_log_create(p->flushes);
        if (chunk == NULL) {
            prof_counter_add(p->diagnostics.endpoints_dropped, 1);
            return;
        }
    }

    prof_endpoint_writer_start(&p->endpoints, chunk);

    (void) prof_endpoint_write(&p->endpoints, a, alen, b, blen);
}


void
prof_take_tracer_identity(prof_t *p)
{
    int  state;

    if (!p->conf.tracer_identity
        || __atomic_load_n(&p->tracer_info_state, __ATOMIC_RELAXED) != 0)
    {
        return;
    }

    state = (prof_tracer_info_read(&p->tracer_info) == 0) ? 1 : 2;
    __atomic_store_n(&p->tracer_info_state, state, __ATOMIC_RELEASE);
}


void
prof_deliver_log(prof_t *p)
{
    prof_log_deliver(&p->log);
}


prof_endpoint_writer_t *
prof_get_endpoint_writer(prof_t *p)
{
    return &p->endpoints;
}


prof_sampler_t *
prof_get_sampler(prof_t *p)
{
    return p->sampler;
}


const prof_diagnostics_t *
prof_get_diagnostics(prof_t *p)
{
    return &p->diagnostics;
}
