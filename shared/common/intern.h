/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Interning table: gives each distinct byte string (a stack, a sample key,
 * an address, a name) a dense index 0, 1, 2, ... in order of first sight.
 *
 * Threading: none; a table belongs to one thread (the profiler loop).
 * Memory: keys are copied into the table and owned by it; a pointer from
 * prof_intern_key() stays valid until the next insert, clear or free.
 */

#ifndef PROF_INTERN_H
#define PROF_INTERN_H

#include <stddef.h>
#include <stdint.h>


typedef struct {
    uint64_t   hash;
    size_t     offset;      /* into keys */
    size_t     length;
} prof_intern_entry_t;

typedef struct {
    prof_intern_entry_t  *entries;      /* dense, by index */
    uint32_t              count;
    uint32_t              entries_capacity;
    uint32_t             *slots;        /* index + 1, 0 when empty */
    uint32_t              slot_mask;    /* slot count - 1 (power of two) */
    unsigned char        *keys;
    size_t                keys_used;
    size_t                keys_capacity;
} prof_intern_t;


void prof_intern_init(prof_intern_t *t);
void prof_intern_free(prof_intern_t *t);
void prof_intern_clear(prof_intern_t *t);   /* keeps the memory */

/* The bytes it holds (allocated, used or not). */
size_t prof_intern_bytes(const prof_intern_t *t);

/*
 * Index of key, inserting it when new (*inserted = 1). Returns -ENOMEM
 * (and inserts nothing) when memory runs out.
 */
int64_t prof_intern(prof_intern_t *t, const void *key, size_t length,
    int *inserted);

/* Index of key, or -1 when absent. */
int64_t prof_intern_find(const prof_intern_t *t, const void *key,
    size_t length);

const void *prof_intern_key(const prof_intern_t *t, uint32_t index,
    size_t *length);

uint64_t prof_hash_bytes(const void *data, size_t length);

/* Bytes held by the table (for the diagnostics). */
size_t prof_intern_memory(const prof_intern_t *t);


#endif /* PROF_INTERN_H */
