/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Status slots: what each worker's profiler says of itself, in memory
 * shared by the workers, so that any worker can answer for all of them
 * without asking the others.
 *
 * A slot belongs to one worker (its pid, claimed and released with
 * compare-and-swap). The worker's profiler process writes it, from its
 * loop thread (profiler/status_publish.c), under a seqlock (odd while
 * writing): a reader copies it and retries a few times while the count is
 * odd or changed, never waits on a lock, and gives up (the slot is then
 * "busy") rather than block. Writers never wait either. The profiler
 * process writes it while the worker runs; the worker itself only when no
 * profiler process does (it could not start, or was lost).
 *
 * Threading: prof_status_claim/release by the owning worker's thread;
 * prof_status_publish by its profiler process's loop thread;
 * prof_status_publish_stopped/_lost by the worker's thread;
 * prof_status_read and the renderers by any thread of any process sharing
 * the slots.
 * Memory: the slots are the caller's (shared memory); rendering appends to
 * a caller's buffer.
 */

#ifndef PROF_STATUS_H
#define PROF_STATUS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buffer.h"
#include "common/diagnostics.h"


#define PROF_STATUS_COUNTERS     96
#define PROF_STATUS_TEXT_MAX     256
#define PROF_STATUS_SYMBOLS_MAX  2048


/* What a profiler process holds: bytes, but where a count is said. */
typedef struct {
    uint64_t     pss;                   /* its proportional set size */
    uint64_t     heap;                  /* malloc's, in use (glibc) */
    uint64_t     queued;                /* sample batches allocated */
    uint64_t     queue_limit;           /* their ceiling */
    uint64_t     tables;                /* the open profile's, the labels
                                           awaiting it, the addresses
                                           named */
    uint64_t     functions;             /* count: in its symbol tables */
    uint64_t     function_bytes;        /* their entries */
    uint64_t     dwarf_open;            /* count: objects whose DWARF is
                                           held */
    uint64_t     store;                 /* the instance's symbol store,
                                           every process's images */
    uint64_t     store_images;          /* count */
    uint64_t     store_mapped;          /* count: images it maps now */
} prof_status_memory_t;


/*
 * The worker's event loop: its stalls (turns longer than the threshold)
 * and how long its turns last, in buckets of powers of two of the TSC's
 * ticks, each bucket's upper bound in ns.
 */
#define PROF_STATUS_TURN_BUCKETS  64

typedef struct {
    int64_t      threshold_ns;          /* 0: stalls not looked for */
    uint64_t     count;                 /* stalls */
    uint64_t     logged;                /* of them, with their line */
    int64_t      longest_ns;
    int64_t      longest_at_ns;         /* unix ns, 0: none */
    char         longest[PROF_STATUS_TEXT_MAX * 2];     /* its line */
    uint64_t     turns[PROF_STATUS_TURN_BUCKETS];
    uint64_t     turn_le_ns[PROF_STATUS_TURN_BUCKETS];  /* 0: the TSC's
                                           rate not known yet */
} prof_status_loop_t;


typedef struct prof_status_slot_s {
    uint32_t     seq;                   /* odd while written */
    int32_t      pid;                   /* 0: free */
    int32_t      running;               /* the profiler samples */
    int32_t      profiler_crashes;      /* its profiler process exited
                                           unexpectedly (then it stops) */
    int32_t      profiler_pid;          /* 0: none */
    int32_t      pad;
    int64_t      started_ns;            /* unix ns */
    int64_t      updated_ns;
    uint64_t     handler_p50_ns;        /* its CPU time (diagnostics.h) */
    uint64_t     handler_p99_ns;
    uint64_t     handler_wall_p50_ns;   /* its wall time */
    uint64_t     handler_wall_p99_ns;
    int64_t      last_upload_ns;        /* 0: none yet */
    char         last_upload[PROF_STATUS_TEXT_MAX];     /* its outcome */
    int64_t      last_push_ns;          /* to Pyroscope; 0: none yet */
    char         last_push[PROF_STATUS_TEXT_MAX];
    int64_t      last_export_ns;        /* to OTLP; 0: none yet */
    char         last_export[PROF_STATUS_TEXT_MAX];
    int64_t      last_error_ns;
    char         last_error[PROF_STATUS_TEXT_MAX];
    uint32_t     counter_count;
    uint64_t     counters[PROF_STATUS_COUNTERS];    /* prof_diagnostics_
                                                       fields' order */
    char         symbols[PROF_STATUS_SYMBOLS_MAX];  /* where the names of
                                           the objects in its profiles come
                                           from: "path\tsource\n"... */
    char         lua[PROF_STATUS_TEXT_MAX];     /* the LuaJIT whose frames
                                           its samples carry, "": none */
    prof_status_memory_t  memory;
    prof_status_loop_t    loop;
} prof_status_slot_t;


/* What the profiler adds to its counters. */
typedef struct {
    int          running;
    pid_t        profiler_pid;
    int64_t      started_ns;
    int64_t      last_upload_ns;
    const char  *last_upload;
    int64_t      last_push_ns;
    const char  *last_push;
    int64_t      last_export_ns;
    const char  *last_export;
    int64_t      last_error_ns;
    const char  *last_error;
    const char  *symbols;               /* as the slot's, NULL: none */
    const char  *lua;                   /* as the slot's, NULL: none */
    prof_status_memory_t  memory;
    prof_status_loop_t    loop;
} prof_status_info_t;


/* A slot for pid among count (a free one, or one whose process is gone),
   or NULL. */
prof_status_slot_t *prof_status_claim(prof_status_slot_t *slots,
    size_t count, pid_t pid);
void prof_status_release(prof_status_slot_t *slot, pid_t pid);

void prof_status_publish(prof_status_slot_t *slot,
    const prof_diagnostics_t *d, const prof_status_info_t *info);

/* From the owner's main thread when no profiler runs: why not. */
void prof_status_publish_stopped(prof_status_slot_t *slot,
    const char *message, int err);

/* From the owner's main thread: its profiler process exited unexpectedly
   (counted), with why it stopped. */
void prof_status_publish_lost(prof_status_slot_t *slot, const char *message);

/* A consistent copy: 0, or -1 when the slot is free or kept busy. */
int prof_status_read(const prof_status_slot_t *slot,
    prof_status_slot_t *copy);

/* Every live worker's slot and the totals: JSON, or text lines. */
int prof_status_json(prof_buffer_t *out, const prof_status_slot_t *slots,
    size_t count);
int prof_status_text(prof_buffer_t *out, const prof_status_slot_t *slots,
    size_t count);


#endif /* PROF_STATUS_H */
