/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler process's configuration: the strings it keeps, and the
 * identity its profiles carry, a Datadog tracer's taken once.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "channel/tracer_info.h"
#include "profiler/intake.h"
#include "profiler/process_conf.h"


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


/* The file name of the program this process runs (the server's: the
   process is forked from it), "nginx" when it cannot be read. */
static void
prof_executable_name(char *name, size_t size)
{
    char     path[4096], *base;
    ssize_t  n;

    n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) {
        snprintf(name, size, "nginx");
        return;
    }

    path[n] = '\0';
    base = strrchr(path, '/');
    base = (base != NULL) ? base + 1 : path;

    n = strlen(base);
    if ((size_t) n >= size) {
        n = size - 1;
    }

    memcpy(name, base, n);
    name[n] = '\0';
}


int
prof_process_conf_init(prof_process_t *p)
{
    int                 failed;
    size_t              i;
    struct utsname      un;
    const prof_conf_t  *conf = &p->conf;

    failed = 0;

    p->service = prof_strdup_or_null(conf->service ? conf->service : "nginx",
                                     &failed);
    p->dump_dir = prof_strdup_or_null(conf->dump_dir, &failed);
    p->agent_url = prof_strdup_or_null(conf->agent_url, &failed);
    p->pyroscope_url = prof_strdup_or_null(conf->pyroscope_url, &failed);
    p->otlp_url = prof_strdup_or_null(conf->otlp_url, &failed);
    p->env = prof_strdup_or_null(conf->env, &failed);
    p->version = prof_strdup_or_null(conf->version, &failed);
    p->runtime_version = prof_strdup_or_null(conf->runtime_version
                                             ? conf->runtime_version : "",
                                             &failed);

    p->tags = calloc(conf->tag_count + 1, sizeof(char *));
    if (p->tags == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < conf->tag_count; i++) {
        p->tags[i] = prof_strdup_or_null(conf->tags[i], &failed);
    }

    p->pyroscope_headers = calloc(conf->pyroscope_header_count + 1,
                                  sizeof(char *));
    if (p->pyroscope_headers == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < conf->pyroscope_header_count; i++) {
        p->pyroscope_headers[i] = prof_strdup_or_null(
                                      conf->pyroscope_headers[i], &failed);
    }

    p->otlp_headers = calloc(conf->otlp_header_count + 1, sizeof(char *));
    if (p->otlp_headers == NULL) {
        return -ENOMEM;
    }

    for (i = 0; i < conf->otlp_header_count; i++) {
        p->otlp_headers[i] = prof_strdup_or_null(conf->otlp_headers[i],
                                                 &failed);
    }

    if (failed) {
        return -ENOMEM;
    }

    if (gethostname(p->host, sizeof(p->host) - 1) != 0) {
        strcpy(p->host, "localhost");
    }

    prof_executable_name(p->executable, sizeof(p->executable));

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
void
prof_resolve_identity(prof_process_t *p)
{
    prof_tracer_info_t  info;

    if (p->tracer_identity_resolved) {
        return;
    }

    p->tracer_identity_resolved = 1;

    if (!p->conf.tracer_identity) {
        return;
    }

    /* Read by the worker when its modules were all initialized. */
    switch (__atomic_load_n(&p->channel->tracer_info_state,
                            __ATOMIC_ACQUIRE))
    {
    case 1:
        info = p->channel->tracer_info;
        break;
    case 2:
        return;
    default:
        p->tracer_identity_resolved = 0;    /* not known yet */
        return;
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
