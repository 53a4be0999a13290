/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Endpoint counts: an interning table of names with a count each, and the
 * shared tables the worker counts into.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "channel/endpoint_counts.h"


void
prof_endpoint_table_insert(prof_endpoint_table_t *t, uint64_t hash,
    uint32_t i, const void *a, size_t alen, const void *b, size_t blen)
{
    char    *name;
    size_t   n;

    /* The name cut at PROF_ENDPOINT_MAX (the hash saw more of b, maybe:
       names alike once cut are merged when taken). */
    if (alen > PROF_ENDPOINT_MAX / 2) {
        alen = PROF_ENDPOINT_MAX / 2;
    }
    if (blen > PROF_ENDPOINT_MAX - alen - (alen != 0)) {
        blen = PROF_ENDPOINT_MAX - alen - (alen != 0);
    }

    n = alen + (alen != 0) + blen;

    if (t->used >= PROF_ENDPOINT_COUNTS_MAX
        || t->names_used + n > PROF_ENDPOINT_NAME_BYTES)
    {
        t->dropped++;
        return;
    }

    name = t->names + t->names_used;

    if (alen != 0) {
        memcpy(name, a, alen);
        name[alen] = ' ';
        name += alen + 1;
    }

    memcpy(name, b, blen);

    t->slot_names[i].offset = t->names_used;
    t->slot_names[i].length = (uint32_t) n;
    t->counts[i] = 1;
    t->hashes[i] = hash;

    t->names_used += (uint32_t) n;
    t->used++;
}


void
prof_endpoint_tables_init(prof_endpoint_table_t tables[2])
{
    tables[0].period = 0;
    tables[1].period = 1;
}


int
prof_endpoint_table_take(prof_endpoint_table_t *t, uint64_t period,
    prof_endpoint_counts_t *c)
{
    size_t  i;

    if (__atomic_load_n(&t->period, __ATOMIC_ACQUIRE) != period) {
        return -1;
    }

    for (i = 0; t->used > 0 && i < PROF_ENDPOINT_SLOTS; i++) {
        if (t->hashes[i] == 0) {
            continue;
        }

        if (c != NULL) {
            (void) prof_endpoint_counts_add_n(c,
                                          t->names + t->slot_names[i].offset,
                                          t->slot_names[i].length,
                                          t->counts[i]);
        }

        /* Only the slots used are written: the other pages of counts and
           names stay unmapped (hashes is read whole). */
        t->hashes[i] = 0;
        t->counts[i] = 0;
        t->slot_names[i].offset = 0;
        t->slot_names[i].length = 0;
        t->used--;
    }

    if (c != NULL) {
        c->requests += t->dropped;
        c->dropped += t->dropped;
    }

    t->used = 0;
    t->names_used = 0;
    t->dropped = 0;

    __atomic_store_n(&t->period, period + 2, __ATOMIC_RELEASE);

    return 0;
}


prof_endpoint_counts_t *
prof_endpoint_counts_create(void)
{
    prof_endpoint_counts_t  *c;

    c = calloc(1, sizeof(prof_endpoint_counts_t));
    if (c == NULL) {
        return NULL;
    }

    prof_intern_init(&c->names);

    return c;
}


void
prof_endpoint_counts_free(prof_endpoint_counts_t *c)
{
    if (c == NULL) {
        return;
    }

    prof_intern_free(&c->names);
    free(c->counts);
    free(c);
}


int
prof_endpoint_counts_add(prof_endpoint_counts_t *c, const char *name,
    size_t length)
{
    return prof_endpoint_counts_add_n(c, name, length, 1);
}


int
prof_endpoint_counts_add_n(prof_endpoint_counts_t *c, const char *name,
    size_t length, uint64_t n)
{
    int        inserted;
    char       key[PROF_ENDPOINT_MAX + 1];
    size_t     i, cap;
    int64_t    index;
    uint64_t  *counts;

    if (length > PROF_ENDPOINT_MAX) {
        length = PROF_ENDPOINT_MAX;
    }

    /* A NUL byte (a client's %00) becomes an invalid byte, which the
       documents replace with U+FFFD, as the pprof's labels do. */
    for (i = 0; i < length; i++) {
        key[i] = (name[i] != '\0') ? name[i] : (char) 0xff;
    }
    key[length] = '\0';

    c->requests += n;

    if (c->names.count >= PROF_ENDPOINT_COUNTS_MAX) {
        index = prof_intern_find(&c->names, key, length + 1);
        if (index < 0) {
            c->dropped += n;
            return 0;
        }
        c->counts[index] += n;
        return 0;
    }

    if (c->names.count >= c->capacity) {
        cap = c->capacity ? c->capacity * 2 : 16;
        counts = realloc(c->counts, cap * sizeof(uint64_t));
        if (counts == NULL) {
            c->dropped += n;
            return -ENOMEM;
        }
        c->counts = counts;
        c->capacity = cap;
    }

    index = prof_intern(&c->names, key, length + 1, &inserted);
    if (index < 0) {
        c->dropped += n;
        return -ENOMEM;
    }

    if (inserted) {
        c->counts[index] = 0;
    }

    c->counts[index] += n;

    return 0;
}


size_t
prof_endpoint_counts_size(const prof_endpoint_counts_t *c)
{
    return (c != NULL) ? c->names.count : 0;
}


const char *
prof_endpoint_counts_name(const prof_endpoint_counts_t *c, size_t i)
{
    return prof_intern_key(&c->names, i, NULL);
}
