/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What a Datadog tracer in this process says of itself: Datadog's tracers
 * (dd-trace-cpp, in nginx-datadog, among them) publish a sealed memory
 * file named "datadog-tracer-info-*" holding a MessagePack map with their
 * runtime_id, service_name, service_env and service_version. Profiles that
 * carry the same runtime-id (and service, env, version) as the tracer's
 * spans are linked to them.
 *
 * Threading: the worker reads it (worker/tracer_info.h) into the channel
 * (channel.h's tracer_info, then tracer_info_state, release); the
 * profiler process reads only that copy (acquire).
 */

#ifndef PROF_TRACER_INFO_H
#define PROF_TRACER_INFO_H


#define PROF_TRACER_INFO_VALUE_MAX  256


typedef struct {
    char    runtime_id[PROF_TRACER_INFO_VALUE_MAX];     /* "": none */
    char    service[PROF_TRACER_INFO_VALUE_MAX];
    char    env[PROF_TRACER_INFO_VALUE_MAX];
    char    version[PROF_TRACER_INFO_VALUE_MAX];
} prof_tracer_info_t;


#endif /* PROF_TRACER_INFO_H */
