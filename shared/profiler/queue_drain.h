/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The loop thread's drain: what the sampler thread queued (sample batches
 * and their barriers, sample_queue.h) and the labels the worker wrote to
 * the channel, into the aggregator; a barrier takes the worker's endpoint
 * counts of the periods it closes and gives their tables back.
 *
 * Threading: the profiler loop thread only. It blocks: it takes the
 * queue's mutex (briefly), reads the worker's /proc maps (prof_read_maps,
 * at most every 200 ms while walks leave the unwind tables), reads ELF
 * files for addresses new to the aggregator (their symbols), and at a
 * barrier encodes the closed profile and writes it to the dump directory
 * (export.h).
 */

#ifndef PROF_QUEUE_DRAIN_H
#define PROF_QUEUE_DRAIN_H

#include "profiler/process.h"


/* Everything queued and labelled so far into the aggregator; profiles
   closed on the way are exported (export.h). */
void prof_drain_queue(prof_process_t *p);

/*
 * The worker's maps read again, while it lives, when they may have
 * changed: at the start, when the worker rebuilt its unwind tables (it
 * loaded or unloaded an object), and when its walks left them (at most
 * every 200 ms, backing off to 10 s while reads find nothing new: JIT
 * code).
 */
void prof_read_maps(prof_process_t *p);


#endif /* PROF_QUEUE_DRAIN_H */
