/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * OTLP profiles (opentelemetry-proto v1.10.0, profiles/v1development): a
 * closed profile as one ExportProfilesServiceRequest, gzip-compressed,
 * for POST <base>/v1development/profiles.
 *
 * One ResourceProfiles (service.name, service.version,
 * deployment.environment.name, host.name, process.pid,
 * process.executable.name, container.id when known), one ScopeProfiles,
 * and a Profile per sample type, each with its period type:
 *
 *   cpu/nanoseconds       period cpu/nanoseconds
 *   samples/count         period cpu/nanoseconds
 *   wall/nanoseconds      period wall/nanoseconds
 *   samples/count         period wall/nanoseconds
 *   off_cpu/nanoseconds   period wall/nanoseconds
 *
 * Samples are the profile's summed again per (stack, endpoint, trace and
 * span): timestamps and stalls are not OTLP's; a Profile has only the
 * samples with a value of its own. The endpoint is the sample attribute
 * PROF_OTLP_ENDPOINT_KEY; a sample of a traced request points at a Link
 * with the request's trace id (16 bytes) and span id (8 bytes).
 *
 * The dictionary is shared by the Profiles: every table starts with its
 * zero value (string_table[0] = "", link_table[0] no ids, ...), holds
 * no item twice, and no item nothing points at (the pprof tables are
 * built bare: without pprof's own names; attribute values are their own
 * strings, not the table's).
 *
 * Threading: the profiler loop thread (it reads the aggregator's address
 * cache). Memory: the request is written to a caller-owned buffer.
 */

#ifndef PROF_OTLP_H
#define PROF_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "profiler/aggregator.h"


#define PROF_OTLP_PATH          "/v1development/profiles"
#define PROF_OTLP_ENDPOINT_KEY  "endpoint"
#define PROF_OTLP_SCOPE         "ngx_http_profiling_module"
#define PROF_OTLP_PROFILES      5


typedef struct {
    const char          *service;           /* service.name; NULL: nginx */
    const char          *version;           /* NULL or "": left out */
    const char          *env;               /* deployment.environment.name */
    const char          *host;              /* host.name */
    int64_t              pid;               /* process.pid, the worker's */
    const char          *executable;        /* process.executable.name */
    const char          *container_id;      /* NULL or "": unknown */
    const char          *scope_version;     /* the module's */
} prof_otlp_conf_t;


typedef struct {
    size_t               profiles;
    size_t               samples;           /* over every Profile */
    size_t               links;             /* link_table, the zero one
                                               left out */
    size_t               uncompressed_bytes;
} prof_otlp_info_t;


/* The request of profile p into out (gzip). 0, -ENOMEM or -EIO. */
int prof_otlp_encode(const prof_profile_t *p, prof_aggregator_t *agg,
    const prof_otlp_conf_t *conf, prof_buffer_t *out,
    prof_otlp_info_t *info);

#endif /* PROF_OTLP_H */
