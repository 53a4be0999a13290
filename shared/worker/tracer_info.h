/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A Datadog tracer's self-description (channel/tracer_info.h), read from
 * the worker: the sealed memory file found among the process's file
 * descriptors, its MessagePack map parsed.
 *
 * Threading: the worker's thread, outside the handler, once
 * (prof_take_tracer_identity, worker/profiler.h): reads the worker's
 * /proc/self/fd and the file. The profiler process reads only channel.h's
 * copy. Memory: the result is copied into the caller's struct.
 */

#ifndef PROF_WORKER_TRACER_INFO_H
#define PROF_WORKER_TRACER_INFO_H

#include <stddef.h>

#include "channel/tracer_info.h"


/* 0 when a tracer's file was found and read (runtime_id set), else -1. */
int prof_tracer_info_read(prof_tracer_info_t *info);

/* Parses the file's content (tests). 0, or -1 when it is not a map with
   a runtime_id. */
int prof_tracer_info_parse(prof_tracer_info_t *info, const void *data,
    size_t size);


#endif /* PROF_WORKER_TRACER_INFO_H */
