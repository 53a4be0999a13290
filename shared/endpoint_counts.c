/*
 * Endpoint counts: an interning table of names with a count each.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint_counts.h"
#include "sample.h"


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
    int        inserted;
    char       key[PROF_ENDPOINT_MAX + 1];
    size_t     cap;
    int64_t    index;
    uint64_t  *counts;

    if (length > PROF_ENDPOINT_MAX) {
        length = PROF_ENDPOINT_MAX;
    }

    memcpy(key, name, length);
    key[length] = '\0';

    c->requests++;

    if (c->names.count >= PROF_ENDPOINT_COUNTS_MAX) {
        index = prof_intern_find(&c->names, key, length + 1);
        if (index < 0) {
            c->dropped++;
            return 0;
        }
        c->counts[index]++;
        return 0;
    }

    if (c->names.count >= c->capacity) {
        cap = c->capacity ? c->capacity * 2 : 16;
        counts = realloc(c->counts, cap * sizeof(uint64_t));
        if (counts == NULL) {
            c->dropped++;
            return -ENOMEM;
        }
        c->counts = counts;
        c->capacity = cap;
    }

    index = prof_intern(&c->names, key, length + 1, &inserted);
    if (index < 0) {
        c->dropped++;
        return -ENOMEM;
    }

    if (inserted) {
        c->counts[index] = 0;
    }

    c->counts[index]++;

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
