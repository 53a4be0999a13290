/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The page's store: the recent closed profiles of every worker, in a
 * compact form (ui_record.h), in one ring of bytes of shared memory the
 * server maps before its workers fork. The oldest records are dropped
 * when a new one needs their room.
 *
 * Writers are the profiler processes, one record a closed profile, from
 * their loop threads; they take turns with a spin lock held only while
 * they copy a record in (no I/O, no allocation). Readers (a worker
 * serving the page) take no lock and never wait: they copy the bytes of
 * the records, then keep only those the writers had not begun to
 * overwrite (the tail, moved before any byte is overwritten, says which).
 *
 * Threading: prof_ui_store_init by the server before its workers fork;
 * prof_ui_store_write by any process sharing the store (a profiler
 * process's loop thread); prof_ui_store_copy and prof_ui_store_stats by
 * any thread of any process sharing it.
 * Memory: the store is the caller's (shared memory of size bytes); a copy
 * is malloc()ed and the caller's to free().
 */

#ifndef PROF_UI_STORE_H
#define PROF_UI_STORE_H

#include <stddef.h>
#include <stdint.h>


#define PROF_UI_STORE_MAGIC    0x50554931u      /* "PUI1" */


typedef struct prof_ui_store_s {
    uint32_t     magic;
    uint32_t     lock;              /* writers' spin lock, 0: free */
    uint64_t     size;              /* bytes of data */
    uint64_t     head;              /* where the next record goes (a
                                       position: bytes written since the
                                       start, the data's index modulo
                                       size) */
    uint64_t     tail;              /* the oldest record kept */
    uint64_t     records;           /* written */
    uint64_t     dropped;           /* records dropped for room */
    uint64_t     too_large;         /* records larger than the store */
    uint64_t     busy;              /* records dropped: the writers' lock
                                       not had in time */
    unsigned char  data[];          /* the ring: records, each a
                                       prof_ui_chunk_t and its bytes */
} prof_ui_store_t;


/* What a record begins with in the ring (8-byte aligned). */
typedef struct {
    uint32_t     magic;             /* PROF_UI_CHUNK_* */
    uint32_t     length;            /* of the whole, this header included,
                                       a multiple of 8 */
} prof_ui_chunk_t;

#define PROF_UI_CHUNK_RECORD   0x52454331u      /* a record follows */
#define PROF_UI_CHUNK_WRAP     0x57524150u      /* the rest of the ring
                                                   is unused: go on at
                                                   its start */


typedef struct {
    uint64_t     size;
    uint64_t     used;
    uint64_t     records_held;
    uint64_t     records;
    uint64_t     dropped;
    uint64_t     too_large;
    uint64_t     busy;
} prof_ui_store_stats_t;


/* The store in memory of bytes (its header included): NULL when too
   small. */
prof_ui_store_t *prof_ui_store_init(void *memory, size_t bytes);

/* Adds a record of length bytes (dropping the oldest ones for room):
   0, or -E2BIG when it cannot fit, -EBUSY when the writers' lock stays
   taken (each counted). */
int prof_ui_store_write(prof_ui_store_t *s, const void *record,
    size_t length);

/*
 * A consistent copy of the records held, each a prof_ui_chunk_t and its
 * bytes, oldest first, in *copy (malloc()ed, the caller's) of *length
 * bytes: 0, or -ENOMEM.
 */
int prof_ui_store_copy(const prof_ui_store_t *s, unsigned char **copy,
    size_t *length);

void prof_ui_store_stats(const prof_ui_store_t *s,
    prof_ui_store_stats_t *stats);


#endif /* PROF_UI_STORE_H */
