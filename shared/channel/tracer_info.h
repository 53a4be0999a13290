/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What a Datadog tracer in this process says of itself: Datadog's tracers
 * (dd-trace-cpp, in nginx-datadog, among them) publish a sealed memory
 * file named "datadog-tracer-info-*" holding a MessagePack map with their
 * runtime_id, service_name, service_env and service_version. Profiles that
 * carry the same runtime-id (and service, env, version) as the tracer's
 * spans are linked to them.
 *
 * Threading: the worker's thread, outside the handler, once
 * (prof_take_tracer_identity, worker/profiler.h): reads the worker's
 * /proc/self/fd and the file. The profiler process reads only channel.h's
 * copy. Memory: the result is copied into the caller's struct.
 */

#ifndef PROF_TRACER_INFO_H
#define PROF_TRACER_INFO_H

#include <stddef.h>


#define PROF_TRACER_INFO_VALUE_MAX  256


typedef struct {
    char    runtime_id[PROF_TRACER_INFO_VALUE_MAX];     /* "": none */
    char    service[PROF_TRACER_INFO_VALUE_MAX];
    char    env[PROF_TRACER_INFO_VALUE_MAX];
    char    version[PROF_TRACER_INFO_VALUE_MAX];
} prof_tracer_info_t;


/* 0 when a tracer's file was found and read (runtime_id set), else -1. */
int prof_tracer_info_read(prof_tracer_info_t *info);

/* Parses the file's content (tests). 0, or -1 when it is not a map with
   a runtime_id. */
int prof_tracer_info_parse(prof_tracer_info_t *info, const void *data,
    size_t size);


#endif /* PROF_TRACER_INFO_H */
