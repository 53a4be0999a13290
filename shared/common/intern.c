/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Interning table: open addressing over dense entries, keys in one arena.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"


#define PROF_INTERN_MIN_SLOTS  64


void
prof_intern_init(prof_intern_t *t)
{
    memset(t, 0, sizeof(*t));
}


void
prof_intern_free(prof_intern_t *t)
{
    free(t->entries);
    free(t->slots);
    free(t->keys);
    prof_intern_init(t);
}


void
prof_intern_clear(prof_intern_t *t)
{
    t->count = 0;
    t->keys_used = 0;

    if (t->slots != NULL) {
        memset(t->slots, 0, (t->slot_mask + 1) * sizeof(uint32_t));
    }
}


uint64_t
prof_hash_bytes(const void *data, size_t length)
{
    const unsigned char  *p = data;
    uint64_t              h, word;

    /* A multiply-xorshift over 8-byte words; keys are mostly addresses. */

    h = 0x9e3779b97f4a7c15ULL ^ (length * 0xff51afd7ed558ccdULL);

    while (length >= 8) {
        memcpy(&word, p, 8);
        h ^= word * 0xc4ceb9fe1a85ec53ULL;
        h = (h << 31 | h >> 33) * 0x9e3779b97f4a7c15ULL;
        p += 8;
        length -= 8;
    }

    while (length > 0) {
        h ^= *p++;
        h *= 0x100000001b3ULL;
        length--;
    }

    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;

    return h;
}


static int
prof_intern_grow_slots(prof_intern_t *t)
{
    uint32_t   n, i, mask, *slots;
    uint64_t   pos;

    n = (t->slots == NULL) ? PROF_INTERN_MIN_SLOTS : (t->slot_mask + 1) * 2;

    slots = calloc(n, sizeof(uint32_t));
    if (slots == NULL) {
        return -ENOMEM;
    }

    mask = n - 1;

    for (i = 0; i < t->count; i++) {
        pos = t->entries[i].hash & mask;
        while (slots[pos] != 0) {
            pos = (pos + 1) & mask;
        }
        slots[pos] = i + 1;
    }

    free(t->slots);
    t->slots = slots;
    t->slot_mask = mask;

    return 0;
}


static int
prof_intern_reserve(prof_intern_t *t, size_t length)
{
    size_t                cap;
    uint32_t              entries_cap;
    unsigned char        *keys;
    prof_intern_entry_t  *entries;

    if (t->slots == NULL || (uint64_t) (t->count + 1) * 10
                            > (uint64_t) (t->slot_mask + 1) * 7)
    {
        if (prof_intern_grow_slots(t) != 0) {
            return -ENOMEM;
        }
    }

    if (t->count == t->entries_capacity) {
        entries_cap = t->entries_capacity ? t->entries_capacity * 2 : 64;
        entries = realloc(t->entries, entries_cap * sizeof(*entries));
        if (entries == NULL) {
            return -ENOMEM;
        }
        t->entries = entries;
        t->entries_capacity = entries_cap;
    }

    if (t->keys_used + length > t->keys_capacity) {
        cap = t->keys_capacity ? t->keys_capacity : 4096;
        while (cap < t->keys_used + length) {
            cap *= 2;
        }
        keys = realloc(t->keys, cap);
        if (keys == NULL) {
            return -ENOMEM;
        }
        t->keys = keys;
        t->keys_capacity = cap;
    }

    return 0;
}


static int64_t
prof_intern_lookup(const prof_intern_t *t, const void *key, size_t length,
    uint64_t hash, uint64_t *slot)
{
    uint32_t                    index;
    uint64_t                    pos;
    const prof_intern_entry_t  *e;

    pos = hash & t->slot_mask;

    for ( ;; ) {
        index = t->slots[pos];

        if (index == 0) {
            *slot = pos;
            return -1;
        }

        e = &t->entries[index - 1];

        if (e->hash == hash && e->length == length
            && memcmp(t->keys + e->offset, key, length) == 0)
        {
            return index - 1;
        }

        pos = (pos + 1) & t->slot_mask;
    }
}


int64_t
prof_intern_find(const prof_intern_t *t, const void *key, size_t length)
{
    uint64_t  slot;

    if (t->slots == NULL) {
        return -1;
    }

    return prof_intern_lookup(t, key, length, prof_hash_bytes(key, length),
                              &slot);
}


int64_t
prof_intern(prof_intern_t *t, const void *key, size_t length, int *inserted)
{
    int64_t               index;
    uint64_t              hash, slot;
    prof_intern_entry_t  *e;

    *inserted = 0;
    hash = prof_hash_bytes(key, length);

    if (t->slots != NULL) {
        index = prof_intern_lookup(t, key, length, hash, &slot);
        if (index >= 0) {
            return index;
        }
    }

    if (prof_intern_reserve(t, length) != 0) {
        return -ENOMEM;
    }

    /* The slots may have been rehashed: find the free slot again. */
    (void) prof_intern_lookup(t, key, length, hash, &slot);

    e = &t->entries[t->count];
    e->hash = hash;
    e->offset = t->keys_used;
    e->length = length;

    if (length > 0) {
        memcpy(t->keys + t->keys_used, key, length);
    }
    t->keys_used += length;

    t->slots[slot] = t->count + 1;
    *inserted = 1;

    return t->count++;
}


const void *
prof_intern_key(const prof_intern_t *t, uint32_t index, size_t *length)
{
    const prof_intern_entry_t  *e = &t->entries[index];

    if (length != NULL) {
        *length = e->length;
    }

    return t->keys + e->offset;
}


size_t
prof_intern_memory(const prof_intern_t *t)
{
    return t->entries_capacity * sizeof(prof_intern_entry_t)
           + (t->slots ? (t->slot_mask + 1) * sizeof(uint32_t) : 0)
           + t->keys_capacity;
}


size_t
prof_intern_bytes(const prof_intern_t *t)
{
    return (size_t) t->entries_capacity * sizeof(prof_intern_entry_t)
           + (t->slots != NULL ? ((size_t) t->slot_mask + 1) * sizeof(uint32_t)
                               : 0)
           + t->keys_capacity;
}
