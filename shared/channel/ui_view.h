/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What the page shows: the records of the page's store (ui_record.h)
 * chosen by a filter (a worker, a window, an endpoint, a trace or span,
 * stalls), their stacks merged across records, and rendered as the JSON
 * the page draws or as a pprof profile (uncompressed protobuf, the same
 * data: go tool pprof opens it).
 *
 * Threading: any thread; no lock, no I/O. It reads a copy of the store
 * (prof_ui_store_copy), never the store itself.
 * Memory: a view is malloc()ed and freed by prof_ui_view_free; rendering
 * appends to the caller's buffer. Its size grows with the distinct
 * frames and stacks of the records read, at most a few times the bytes
 * read.
 */

#ifndef PROF_UI_VIEW_H
#define PROF_UI_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buffer.h"
#include "channel/ui_store.h"


typedef struct {
    pid_t        pid;               /* 0: every worker */
    int64_t      since_ns;          /* records ending after it (unix ns);
                                       0: every record */
    int          last_only;         /* each worker's latest record only */
    int          has_span;
    uint64_t     span_id;           /* the span or its local root */
    int          has_trace;
    uint64_t     trace_id_high;
    uint64_t     trace_id_low;
    const char  *endpoint;          /* NULL: any */
    size_t       endpoint_length;
    int          stalls_only;       /* samples taken in a stall */
    int64_t      until_ns;          /* records ending at or before it
                                       (a comparison's base); 0: every
                                       record */
    int64_t      at_ns;             /* records stored at or before it
                                       (unix ns: the view as of then);
                                       0: every record */
    int64_t      now_ns;            /* without at_ns, the view's time:
                                       the later of it and the newest
                                       record's storing */
} prof_ui_filter_t;


typedef struct prof_ui_view_s  prof_ui_view_t;


/* The view of records[0, length) (prof_ui_store_copy's): 0, or -ENOMEM. */
int prof_ui_view_build(prof_ui_view_t **view, const unsigned char *records,
    size_t length, const prof_ui_filter_t *filter);

/* The page's data; stats, when not NULL, as its "store". */
int prof_ui_view_json(const prof_ui_view_t *v, prof_buffer_t *out,
    const prof_ui_store_stats_t *stats);

/* pprof: sample types cpu-time, wall-time, off-cpu-time (nanoseconds),
   the default (what go tool pprof shows first) shown (PROF_UI_CPU, ...). */
int prof_ui_view_pprof(const prof_ui_view_t *v, prof_buffer_t *out,
    unsigned shown);

void prof_ui_view_free(prof_ui_view_t *v);


#endif /* PROF_UI_VIEW_H */
