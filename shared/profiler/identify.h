/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The identification line (conf.identify: one worker's profiler process):
 * once, at NOTICE, in one line for a bug report, the module's version,
 * the unwind tables' objects, where each object's names come from, the
 * LuaJIT found, and the agent's first answer. With an agent, it waits for
 * that answer (prof_identify from the upload's outcome); without, for the
 * worker to say whether it runs LuaJIT (at most 5 s); at the loop's close
 * it goes with what is known.
 *
 * Threading: the profiler loop thread only. It reads the symbolizer's
 * objects (their files, the first time) and /proc/self/exe.
 */

#ifndef PROF_IDENTIFY_H
#define PROF_IDENTIFY_H

#include "profiler/process.h"


/* On the loop thread's start: the wait for what the line says. */
void prof_identify_start(prof_process_t *p);

/* The line, unless it went already; agent: the agent's first outcome
   (NULL: none yet). */
void prof_identify(prof_process_t *p, const char *agent);

/* At the loop's close: the line if it has not gone, the wait ended. */
void prof_identify_close(prof_process_t *p);


#endif /* PROF_IDENTIFY_H */
