/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A closed profile's export: encoded (pprof), written to the dump
 * directory and submitted for upload with its intake documents.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/export.h"
#include "profiler/otlp.h"
#include "profiler/pprof.h"
#include "profiler/process_conf.h"
#include "profiler/pyroscope.h"
#include "profiler/ui_publish.h"


/* The upload of an encoded profile: event.json, pprof, provenance. */
static void
prof_upload(prof_process_t *p, prof_profile_t *profile, prof_buffer_t *pprof,
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
    prof_counter_add(p->channel->diagnostics.uploads.submitted, 1);

    up = calloc(1, sizeof(prof_upload_t));
    if (up == NULL) {
        prof_counter_add(p->channel->diagnostics.uploads.dropped, 1);
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
        prof_counter_add(p->channel->diagnostics.uploads.dropped, 1);
        prof_log_limited(&p->log, PROF_CAUSE_MEMORY, PROF_LOG_ERR,
                         "profiling: out of memory, profile %llu not "
                         "uploaded", (unsigned long long) up->sequence);
        prof_upload_free(up);
        return;
    }

    prof_uploader_submit(p->uploader, up);
}


/* The push of a profile to Pyroscope: its own encoding (pyroscope.h). */
static void
prof_push(prof_process_t *p, prof_profile_t *profile)
{
    int                     rc;
    prof_upload_t          *up;
    prof_diagnostics_t     *d = &p->channel->diagnostics;
    prof_pyroscope_conf_t   pc;
    prof_pyroscope_info_t   info;

    prof_counter_add(d->pyroscope.submitted, 1);

    up = calloc(1, sizeof(prof_upload_t));
    if (up == NULL) {
        prof_counter_add(d->pyroscope.dropped, 1);
        return;
    }

    up->sequence = profile->sequence;

    memset(&pc, 0, sizeof(pc));
    pc.service = p->intake.service;
    pc.env = p->intake.env;
    pc.version = p->intake.version;
    pc.tags = p->intake.user_tags;
    pc.tag_count = p->intake.user_tag_count;
    pc.max_endpoints = p->conf.pyroscope_max_endpoints;

    rc = prof_pyroscope_encode(profile, p->aggregator, &pc, &up->pprof,
                               &info);
    if (rc != 0) {
        prof_counter_add(d->pyroscope.dropped, 1);
        prof_log_limited(&p->log, PROF_CAUSE_ENCODE, PROF_LOG_ERR,
                         "profiling: encoding profile %llu for Pyroscope "
                         "failed (%s), profile dropped",
                         (unsigned long long) profile->sequence,
                         strerror(-rc));
        prof_upload_free(up);
        return;
    }

    if (info.endpoints_folded > 0) {
        prof_counter_add(d->pyroscope_endpoints_folded,
                         info.endpoints_folded);
        prof_log_limited(&p->log, PROF_CAUSE_PUSH_FOLDED, PROF_LOG_NOTICE,
                         "profiling: profile %llu had more endpoints than "
                         "the %zu Pyroscope's label may name: %zu of them "
                         "labelled \"" PROF_PYROSCOPE_OTHER_ENDPOINT "\"",
                         (unsigned long long) profile->sequence,
                         p->conf.pyroscope_max_endpoints,
                         info.endpoints_folded);
    }

    if (info.tags_dropped > 0) {
        prof_log_limited(&p->log, PROF_CAUSE_PUSH_TAGS, PROF_LOG_NOTICE,
                         "profiling: %zu of the tags are no Pyroscope "
                         "label (a name taken, reserved or over %d bytes, "
                         "or past the %d labels a series)",
                         info.tags_dropped, PROF_PYROSCOPE_MAX_NAME,
                         PROF_PYROSCOPE_MAX_LABELS);
    }

    if (info.samples_dropped > 0) {
        prof_counter_add(d->pyroscope_samples_dropped, info.samples_dropped);
    }

    prof_uploader_submit(p->pyroscope, up);
}


/* The export of a profile to an OTLP receiver: its own encoding
   (otlp.h). */
static void
prof_otlp_export(prof_process_t *p, prof_profile_t *profile)
{
    int                  rc;
    prof_upload_t       *up;
    prof_otlp_conf_t     oc;
    prof_otlp_info_t     info;
    prof_diagnostics_t  *d = &p->channel->diagnostics;

    prof_counter_add(d->otlp.submitted, 1);

    up = calloc(1, sizeof(prof_upload_t));
    if (up == NULL) {
        prof_counter_add(d->otlp.dropped, 1);
        return;
    }

    up->sequence = profile->sequence;

    memset(&oc, 0, sizeof(oc));
    oc.service = p->intake.service;
    oc.env = p->intake.env;
    oc.version = p->intake.version;
    oc.host = p->host;
    oc.pid = p->pid;
    oc.executable = p->executable;
    oc.container_id = p->container.container_id;
    oc.scope_version = PROF_VERSION;

    rc = prof_otlp_encode(profile, p->aggregator, &oc, &up->pprof, &info);
    if (rc != 0) {
        prof_counter_add(d->otlp.dropped, 1);
        prof_log_limited(&p->log, PROF_CAUSE_ENCODE, PROF_LOG_ERR,
                         "profiling: encoding profile %llu for OTLP failed "
                         "(%s), profile dropped",
                         (unsigned long long) profile->sequence,
                         strerror(-rc));
        prof_upload_free(up);
        return;
    }

    prof_uploader_submit(p->otlp, up);
}


/* Objects whose ELF data is malformed: one warning each. */
static void
prof_warn_corrupt(prof_process_t *p)
{
    const prof_object_t  *o;

    while ((o = prof_symbolizer_corrupt_object(p->symbolizer)) != NULL) {
        prof_log(&p->log, PROF_LOG_WARN, "profiling: \"%s\" has malformed "
                 "ELF data, its functions are not named", o->path);
    }
}


/* What debuginfod brought, or why it could not: a line each. */
static void
prof_report_debuginfod(prof_process_t *p)
{
    const char           *why;
    const prof_object_t  *o;

    why = prof_debuginfod_load_error(p->debuginfod);
    if (why != NULL) {
        prof_log(&p->log, PROF_LOG_WARN, "profiling: libdebuginfod could "
                 "not be loaded (%s): no debug files are fetched", why);
    }

    while ((o = prof_symbolizer_fetched_object(p->symbolizer)) != NULL) {
        prof_log(&p->log, PROF_LOG_NOTICE, "profiling: \"%s\": all "
                 "functions named by the debug file of build id %s from "
                 "debuginfod", o->path, o->build_id);
    }
}


void
prof_export_profile(void *data, prof_profile_t *profile)
{
    int                 rc;
    prof_process_t     *p = data;
    prof_buffer_t       out = { NULL, 0, 0 };
    prof_pprof_info_t   info;

    if (p->debuginfod != NULL) {
        prof_report_debuginfod(p);
    }

    rc = prof_pprof_encode_info(profile, p->aggregator, &out, &info);

    if (rc != 0) {
        prof_counter_add(p->channel->diagnostics.encode_failures, 1);
        prof_log_limited(&p->log, PROF_CAUSE_ENCODE, PROF_LOG_ERR,
                         "profiling: encoding profile %llu failed (%s), "
                         "profile dropped",
                         (unsigned long long) profile->sequence,
                         strerror(-rc));
        goto done;
    }

    /* The page's store: before any write to a file, which may block. */
    if (p->conf.ui_store != NULL
        && prof_ui_publish(p->conf.ui_store, p->pid, profile, p->aggregator,
                           p->conf.ui_record_max) == -ENOMEM)
    {
        prof_counter_add(p->channel->diagnostics.encode_failures, 1);
    }

    if (p->dump != NULL) {
        rc = prof_dump_dir_write(p->dump, p->pid, profile->sequence,
                                 out.data, out.length);
        if (rc != 0) {
            prof_counter_add(p->channel->diagnostics.export_failures, 1);
            prof_log_limited(&p->log, PROF_CAUSE_FILE, PROF_LOG_ERR,
                             "profiling: writing profile to \"%s\" failed "
                             "(%s), profile dropped", p->dump_dir,
                             strerror(-rc));

        } else {
            prof_counter_add(p->channel->diagnostics.profiles_exported, 1);
            prof_counter_add(p->channel->diagnostics.bytes_exported,
                             out.length);
        }
    }

    if (p->pyroscope != NULL) {
        prof_resolve_identity(p);
        prof_push(p, profile);
    }

    if (p->otlp != NULL) {
        prof_resolve_identity(p);
        prof_otlp_export(p, profile);
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
