/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The raw sample record and the batch that carries samples, in order, from
 * the sampler thread to the aggregator (one writer, then one reader), in
 * the profiler process; the frames' limits and markers are the channel's
 * (channel/sample.h).
 */

#ifndef PROF_SAMPLE_BATCH_H
#define PROF_SAMPLE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "channel/sample.h"


/*
 * A sample: CPU time (cpu_samples: the intervals the CPU timer counted
 * there) and wall time (wall_samples: the intervals it covers) at a
 * stack, while the request whose tag it carries executed (0: none). The
 * request's labels are resolved later (labels.h), from the tag.
 */
typedef struct {
    int64_t       cpu_ns;
    int64_t       wall_ns;
    int64_t       off_cpu_ns;
    uint64_t      request;              /* tag, 0: none */
    int64_t       time_ns;              /* monotonic, when it ended */
    uint32_t      cpu_samples;
    uint32_t      wall_samples;
    uint16_t      frame_count;          /* frames follow the header */
    uint16_t      pad;
    uint32_t      stall_ms;             /* taken this far (ms) into a
                                           stall, 0: not in one */
} prof_sample_t;


/* One item of the queue: samples, and maybe a flush barrier after them. */
typedef struct prof_batch_s  prof_batch_t;

struct prof_batch_s {
    prof_batch_t  *next;
    size_t         capacity;            /* bytes of data */
    size_t         used;
    uint32_t       sample_count;
    unsigned       overflow:1;          /* allocated past the pool */
    unsigned       flush_after:1;       /* a flush barrier follows */
    int64_t        flush_realtime_ns;   /* when the barrier was taken */
    int64_t        flush_monotonic_ns;
    uint64_t       flush_last_tag;      /* requests up to it: closing */
    uint64_t       flush_period;        /* the last period it closes */
    unsigned char  data[];
};


static inline size_t
prof_sample_size(unsigned frame_count)
{
    return sizeof(prof_sample_t) + frame_count * sizeof(uint64_t);
}


static inline const uint64_t *
prof_sample_frames(const prof_sample_t *s)
{
    return (const uint64_t *) (s + 1);
}


#endif /* PROF_SAMPLE_BATCH_H */
