/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The worker's status slot (conf.status_slot, channel/status.h), written
 * by its profiler process while the slot is its worker's: the channel's
 * counters, the process's pid and start, the last upload's outcome and
 * the last error, where each object's names come from, and LuaJIT's
 * state. Written every second and at each upload's outcome.
 *
 * Threading: the profiler loop thread only, with a status slot. Never
 * blocks (the slot's seqlock is never waited on).
 */

#ifndef PROF_STATUS_PUBLISH_H
#define PROF_STATUS_PUBLISH_H

#include "profiler/process.h"


/* The slot written now, unless the worker has gone or the slot is no
   longer its (released). */
void prof_publish_status(prof_process_t *p);


#endif /* PROF_STATUS_PUBLISH_H */
