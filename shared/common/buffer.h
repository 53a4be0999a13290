/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Growable byte buffer, with the JSON string escaping the intake needs.
 *
 * Threading: none (owned by one thread). Memory: data is malloc'ed and
 * belongs to the buffer until prof_buffer_free().
 */

#ifndef PROF_BUFFER_H
#define PROF_BUFFER_H

#include <stddef.h>


typedef struct {
    unsigned char  *data;
    size_t          length;
    size_t          capacity;
} prof_buffer_t;


/* Each returns 0 or -ENOMEM (the buffer keeps what it had). */
int prof_buffer_reserve(prof_buffer_t *b, size_t more);
int prof_buffer_append(prof_buffer_t *b, const void *data, size_t length);
int prof_buffer_append_str(prof_buffer_t *b, const char *s);
int prof_buffer_printf(prof_buffer_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends s as a quoted JSON string, escaping what JSON requires. */
int prof_buffer_append_json(prof_buffer_t *b, const char *s, size_t length);

void prof_buffer_free(prof_buffer_t *b);


#endif /* PROF_BUFFER_H */
