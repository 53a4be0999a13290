/*
 * The raw sample record and the batch that carries samples, in order, from
 * the sampler thread to the aggregator (one writer, then one reader).
 */

#ifndef PROF_SAMPLE_H
#define PROF_SAMPLE_H

#include <stddef.h>
#include <stdint.h>


#define PROF_ENDPOINT_MAX       128
#define PROF_MAX_FRAMES_LIMIT   512

/* The marker frame put in place of the frames a truncated stack lost. */
#define PROF_FRAME_TRUNCATED    ((uint64_t) 1)


/*
 * What the worker was executing: plain data published by the request hooks
 * and copied by the signal handler (never a pointer into a request).
 */
typedef struct {
    uint64_t      span_id;              /* 0: no request */
    uint64_t      local_root_span_id;
    uint32_t      endpoint_length;
    char          endpoint[PROF_ENDPOINT_MAX];
} prof_request_context_t;


/*
 * A CPU sample (cpu_samples 1: the worker burned an interval of CPU time
 * there) or a wall sample (wall_samples 1: where the worker was at a wall
 * clock tick, with the wall and off-CPU time of that tick).
 */
typedef struct {
    int64_t       cpu_ns;
    int64_t       wall_ns;
    int64_t       off_cpu_ns;
    uint64_t      span_id;
    uint64_t      local_root_span_id;
    uint16_t      cpu_samples;
    uint16_t      wall_samples;
    uint16_t      frame_count;          /* frames follow the header */
    uint16_t      endpoint_length;      /* endpoint bytes follow frames */
} prof_sample_t;


typedef struct prof_endpoint_counts_s  prof_endpoint_counts_t;

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
    prof_endpoint_counts_t  *endpoint_counts;   /* with the barrier, owned
                                                   by whoever takes it */
    unsigned char  data[];
};


static inline size_t
prof_sample_size(unsigned frame_count, unsigned endpoint_length)
{
    size_t  size;

    size = sizeof(prof_sample_t) + frame_count * sizeof(uint64_t)
           + endpoint_length;

    return (size + 7) & ~(size_t) 7;
}


static inline const uint64_t *
prof_sample_frames(const prof_sample_t *s)
{
    return (const uint64_t *) (s + 1);
}


static inline const char *
prof_sample_endpoint(const prof_sample_t *s)
{
    return (const char *) (prof_sample_frames(s) + s->frame_count);
}


#endif /* PROF_SAMPLE_H */
