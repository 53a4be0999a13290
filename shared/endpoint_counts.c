/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Endpoint counts: an interning table of names with a count each, and the
 * raw logs the server's thread appends to.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint_counts.h"


prof_endpoint_log_t *
prof_endpoint_log_create(uint64_t period)
{
    prof_endpoint_log_t  *log;

    log = malloc(sizeof(prof_endpoint_log_t) + PROF_ENDPOINT_LOG_BYTES);
    if (log == NULL) {
        return NULL;
    }

    log->next = NULL;
    log->period = period;
    log->used = 0;
    log->capacity = PROF_ENDPOINT_LOG_BYTES;

    return log;
}


void
prof_endpoint_log_free(prof_endpoint_log_t *log)
{
    prof_endpoint_log_t  *next;

    for ( /* void */ ; log != NULL; log = next) {
        next = log->next;
        free(log);
    }
}


void
prof_endpoint_writer_start(prof_endpoint_writer_t *w,
    prof_endpoint_log_t *chunk)
{
    w->chunk = chunk;
    w->pos = chunk->data + chunk->used;
    w->end = chunk->data + chunk->capacity;
}


prof_endpoint_log_t *
prof_endpoint_writer_take(prof_endpoint_writer_t *w)
{
    prof_endpoint_log_t  *chunk;

    chunk = w->chunk;
    if (chunk != NULL) {
        chunk->used = (uint32_t) (w->pos - chunk->data);
    }

    w->chunk = NULL;
    w->pos = NULL;
    w->end = NULL;

    return chunk;
}


uint64_t
prof_endpoint_log_records(const prof_endpoint_log_t *log)
{
    size_t          n;
    uint64_t        records;
    const uint8_t  *p, *end;

    records = 0;

    for ( /* void */ ; log != NULL; log = log->next) {
        p = log->data;
        end = log->data + log->used;

        while (end - p >= 2) {
            n = p[0] | (size_t) p[1] << 8;
            if ((size_t) (end - p - 2) < n) {
                break;
            }
            p += 2 + n;
            records++;
        }
    }

    return records;
}


uint64_t
prof_endpoint_counts_add_log(prof_endpoint_counts_t *c,
    const prof_endpoint_log_t *log)
{
    size_t          n;
    uint64_t        records;
    const uint8_t  *p, *end;

    records = 0;

    for ( /* void */ ; log != NULL; log = log->next) {
        p = log->data;
        end = log->data + log->used;

        while (end - p >= 2) {
            n = p[0] | (size_t) p[1] << 8;
            p += 2;
            if ((size_t) (end - p) < n) {
                break;
            }

            (void) prof_endpoint_counts_add(c, (const char *) p, n);
            p += n;
            records++;
        }
    }

    return records;
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
