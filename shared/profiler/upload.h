/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Uploader: POSTs each profile to a server, driving libcurl's
 * multi-socket API with the profiler loop's libuv handles. To a Datadog
 * agent, <agent>/profiling/v1/input as multipart (event.json,
 * profile.pprof, code-provenance.json); to another server (Pyroscope,
 * pyroscope.h; OTLP, otlp.h), conf.path and a body of conf.content_type
 * as it is.
 *
 * Threading: the profiler loop thread only; never blocks it.
 * Policy: at most one upload in flight; a profile ready meanwhile waits,
 * and a newer one replaces it (the older is dropped). Timeouts, failed
 * connections and 5xx are retried once, 4xx never; a failure is logged
 * (one line a minute per cause).
 * Memory: the uploader owns what is submitted; the conf's strings are the
 * caller's and must outlive the uploader; curl_global_init must have run
 * in the process before.
 *
 * Counters (prof_upload_counters_t, named uploads_* on the status page
 * for the agent, pyroscope_* for Pyroscope, otlp_* for OTLP). Every profile submitted ends
 * in exactly one outcome, counted once, when its fate is known:
 *
 *   uploads_succeeded       the agent answered 2xx (first try or retry);
 *   uploads_failed_connect  the last try could not reach the agent or
 *                           lost it: connection refused, host unresolved,
 *                           a send or receive error, no answer or a cut
 *                           one (a connect timeout is a timeout);
 *   uploads_failed_timeout  the last try ran out of timeout_ms;
 *   uploads_failed_4xx      the agent answered 4xx (never retried);
 *   uploads_failed_5xx      the last try was answered 5xx;
 *   uploads_failed_other    anything else: another status (1xx, 3xx),
 *                           another curl error, a transfer that could not
 *                           be set up (no memory);
 *   uploads_dropped         never answered because the uploader gave it
 *                           up: replaced while waiting by a newer one,
 *                           still waiting or in flight at the close
 *                           deadline, submitted after the close.
 *
 * so that, once the uploader is closed (before, minus the one in flight
 * and the one waiting):
 *
 *   uploads_submitted = succeeded + failed_connect + failed_timeout
 *                       + failed_4xx + failed_5xx + failed_other + dropped
 *
 * where uploads_submitted, counted by the caller, is every profile it
 * meant to upload: those passed to prof_uploader_submit(), and those it
 * could not build the documents of (which it counts as dropped). And for
 * the tries:
 *
 *   uploads_attempted       transfers started: first tries and retries,
 *                           whatever became of them (a refused connection
 *                           is an attempt);
 *   uploads_retried         second tries started; such a profile still
 *                           ends in one outcome above (500 then 200:
 *                           succeeded, 500 twice: failed_5xx), so
 *                           attempted - retried <= submitted;
 *   bytes_sent              request body bytes sent
 *                           (CURLINFO_SIZE_UPLOAD_T) by every try: answered
 *                           or not, retried, timed out or aborted at the
 *                           close.
 */

#ifndef PROF_UPLOAD_H
#define PROF_UPLOAD_H

#include <stdint.h>
#include <uv.h>

#include "common/buffer.h"
#include "common/diagnostics.h"
#include "common/log.h"


typedef struct {
    const char          *url;       /* http://h:p, https://h:p, unix:/path,
                                       a prefix path after h:p */
    const char          *path;      /* appended; NULL: the agent's */
    const char          *content_type;  /* a body as it is; NULL: the
                                       agent's multipart */
    const char          *content_encoding;  /* of that body; NULL: none */
    const char          *server;    /* in the log: NULL, "the agent" */
    const char * const  *headers;   /* "Name: value" more (secrets: never
                                       logged) */
    size_t               header_count;
    unsigned             cause;     /* log causes: PROF_CAUSE_UPLOAD_CONNECT
                                       or PROF_CAUSE_PUSH_CONNECT and the
                                       six after */
    int64_t              timeout_ms;
    const char          *origin;            /* DD-EVP-ORIGIN */
    const char          *origin_version;    /* DD-EVP-ORIGIN-VERSION */
    const char          *container_id;      /* Datadog-Container-ID, */
    const char          *entity_id;         /* -Entity-ID; NULL/"": none */
    prof_upload_counters_t  *counters;
    prof_log_t          *log;
    void               (*outcome)(void *data, const char *text);
    void                *outcome_data;      /* each profile's end, as
                                               prof_uploader_last() says */
    void               (*answer)(void *data, uint64_t sequence,
                                 long status, const void *body,
                                 size_t length);    /* NULL: none; else
                                               every answer (its first 4
                                               KiB) before its outcome,
                                               with outcome_data */
} prof_upload_conf_t;


typedef struct prof_upload_s  prof_upload_t;

struct prof_upload_s {
    prof_upload_t   *next;
    uint64_t         sequence;
    prof_buffer_t    event;             /* event.json */
    prof_buffer_t    pprof;             /* gzip pprof, or the body (with
                                           conf.content_type) */
    prof_buffer_t    provenance;        /* code-provenance.json */
    unsigned         attempts;          /* tries started */
};


typedef struct prof_uploader_s  prof_uploader_t;


prof_uploader_t *prof_uploader_create(uv_loop_t *loop,
    const prof_upload_conf_t *conf);

/* Takes up (allocated with malloc) whatever happens: it ends in one of
   the outcomes above. */
void prof_uploader_submit(prof_uploader_t *u, prof_upload_t *up);

/*
 * No retry from now on; what still runs after deadline_ms is aborted.
 * closed(data) runs once every handle is closed; the uploader is freed.
 */
void prof_uploader_close(prof_uploader_t *u, int64_t deadline_ms,
    void (*closed)(void *data), void *data);

void prof_upload_free(prof_upload_t *up);

/* What the last profile became ("uploaded", "failed: ...", "dropped:
   ..."), and when (unix ns; 0: none yet). */
const char *prof_uploader_last(prof_uploader_t *u, int64_t *at_ns);


#endif /* PROF_UPLOAD_H */
