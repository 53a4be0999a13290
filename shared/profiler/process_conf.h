/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler process's configuration: the strings it keeps of the
 * worker's (copied, never freed: the process exits), and the identity its
 * profiles carry to the intake (service, env, version, host, runtime,
 * tags), a Datadog tracer's taken once before the first upload.
 *
 * Threading: prof_process_conf_init on the main thread at the start,
 * before any other thread; prof_resolve_identity on the loop thread only,
 * which owns service, env, version, runtime_id and intake from then on.
 * Neither blocks (a hostname and a random UUID read).
 */

#ifndef PROF_PROCESS_CONF_H
#define PROF_PROCESS_CONF_H

#include "profiler/process.h"


/*
 * p->conf's strings copied (dump_dir, agent_url, service, env, version,
 * runtime_version, tags), the host, runtime-id and architecture found,
 * and p->intake set from them. 0, -ENOMEM, or -EIO when no random
 * runtime-id could be made.
 */
int prof_process_conf_init(prof_process_t *p);

/*
 * Before the first profile leaves: the identity of a Datadog tracer in
 * the worker (channel.h's tracer_info, conf.tracer_identity), once it is
 * known; until then, nothing (called again).
 */
void prof_resolve_identity(prof_process_t *p);


#endif /* PROF_PROCESS_CONF_H */
