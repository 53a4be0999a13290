/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Intake documents: the tags, event.json and code-provenance.json that go
 * with each profile uploaded to a Datadog agent.
 *
 * Every string written is valid UTF-8 whatever bytes it is given (see
 * utf8.h: ill-formed subparts become U+FFFD) and JSON strings escape '"',
 * '\' and every control character.
 *
 * Threading: the profiler loop thread (package lookups read dpkg's files
 * once and are cached). Memory: documents are appended to caller-owned
 * buffers; the conf's strings belong to the caller.
 */

#ifndef PROF_INTAKE_H
#define PROF_INTAKE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buffer.h"
#include "profiler/symbolizer.h"


typedef struct {
    const char          *service;
    const char          *env;               /* NULL or "": not sent */
    const char          *version;
    const char          *host;
    const char          *runtime_version;   /* the server's version */
    const char          *runtime_os;        /* "linux" */
    const char          *runtime_arch;      /* "x86_64" */
    const char          *runtime_id;        /* UUID of this process */
    const char          *profiler_version;
    const char * const  *user_tags;         /* "key:value" */
    size_t               user_tag_count;
    pid_t                pid;
} prof_intake_conf_t;


typedef struct {
    uint64_t             sequence;
    int64_t              start_realtime_ns;
    int64_t              duration_ns;
    int                  remote_symbols;    /* frames left unnamed */
    const char * const  *endpoints;         /* endpoint_counts, may be 0;
                                               names differing only in
                                               invalid bytes are merged */
    const uint64_t      *endpoint_counts;
    size_t               endpoint_count;
} prof_intake_profile_t;


/*
 * "key:value,..." with keys and values valid UTF-8 with no commas and no
 * control characters ('_' instead), no empty tag.
 */
int prof_intake_tags(prof_buffer_t *out, const prof_intake_conf_t *conf,
    uint64_t sequence);

int prof_intake_event_json(prof_buffer_t *out, const prof_intake_conf_t *conf,
    const prof_intake_profile_t *profile, const char * const *attachments,
    size_t attachment_count);

/* {"v1":[...]}: one entry per object, with its package when it has one. */
int prof_intake_provenance_json(prof_buffer_t *out,
    const prof_object_t * const *objects, size_t count);

/* 36-character random UUID (version 4) into uuid[37]. 0 or -errno. */
int prof_intake_uuid(char *uuid);



#endif /* PROF_INTAKE_H */
