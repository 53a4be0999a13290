/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What both sides know of a sample's frames: their limits and the marker
 * frames a walk puts in place of frames it lost. The sample record and
 * its batches are the profiler process's (profiler/sample_batch.h).
 */

#ifndef PROF_SAMPLE_H
#define PROF_SAMPLE_H

#include <stdint.h>


#define PROF_ENDPOINT_MAX       128
#define PROF_MAX_FRAMES_LIMIT   512

/* The marker frame put in place of the frames a truncated stack lost. */
#define PROF_FRAME_TRUNCATED    ((uint64_t) 1)

/* The marker frame ending a stack the walk could not step further. */
#define PROF_FRAME_UNWIND_STOP  ((uint64_t) 2)

#define PROF_FRAME_IS_MARKER(pc)  ((pc) < 16)


#endif /* PROF_SAMPLE_H */
