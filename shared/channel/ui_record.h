/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A record of the page's store (ui_store.h): one closed profile of one
 * worker, its frames named, in a compact pointer-free form that the
 * profiler process writes (profiler/ui_publish.c) and a worker serving
 * the page reads (channel/ui_view.c).
 *
 * Layout, each part 8-byte aligned: prof_ui_record_t, then frame_count
 * prof_ui_frame_t, sample_count prof_ui_sample_t, stack_words uint32_t
 * (each stack: its frame count, then its frames' indexes, leaf first),
 * then strings_bytes of NUL-terminated strings (offset 0 is "").
 * A reader checks every index and offset against these counts: a record
 * is data, never trusted.
 */

#ifndef PROF_UI_RECORD_H
#define PROF_UI_RECORD_H

#include <stdint.h>


#define PROF_UI_RECORD_VERSION  2

enum {
    PROF_UI_CPU = 0,
    PROF_UI_WALL,
    PROF_UI_OFF_CPU,
    PROF_UI_VALUES
};


typedef struct {
    uint32_t     version;
    int32_t      pid;               /* the worker's */
    uint64_t     sequence;          /* its profile's */
    int64_t      start_ns;          /* unix ns */
    int64_t      duration_ns;
    int64_t      stored_ns;         /* unix ns: when the profiler process
                                       wrote it into the store (a view
                                       "as of" a time reads the records
                                       stored by then) */
    uint32_t     frame_count;
    uint32_t     sample_count;
    uint32_t     stack_words;
    uint32_t     strings_bytes;
} prof_ui_record_t;


typedef struct {
    uint32_t     name;              /* string offset */
    uint32_t     file;              /* a Lua function's chunk, 0: none */
    uint32_t     line;              /* a Lua function's first line */
    uint32_t     flags;             /* PROF_UI_FRAME_* */
} prof_ui_frame_t;

#define PROF_UI_FRAME_LUA   0x1     /* a Lua function */


typedef struct {
    uint32_t     stack;             /* its first word's index */
    uint32_t     endpoint;          /* string offset, 0: none */
    uint32_t     stall_ms;          /* 0: not in a stall */
    uint32_t     pad;
    uint64_t     span_id;           /* 0: no request */
    uint64_t     root_span_id;
    uint64_t     trace_id_high;
    uint64_t     trace_id_low;
    int64_t      values[PROF_UI_VALUES];    /* ns */
} prof_ui_sample_t;


#endif /* PROF_UI_RECORD_H */
