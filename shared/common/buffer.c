/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Growable byte buffer and JSON string escaping.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buffer.h"


int
prof_buffer_reserve(prof_buffer_t *b, size_t more)
{
    size_t          cap;
    unsigned char  *data;

    if (b->capacity - b->length > more) {
        return 0;
    }

    cap = b->capacity ? b->capacity : 256;
    while (cap - b->length <= more) {
        cap *= 2;
    }

    data = realloc(b->data, cap);
    if (data == NULL) {
        return -ENOMEM;
    }

    b->data = data;
    b->capacity = cap;

    return 0;
}


int
prof_buffer_append(prof_buffer_t *b, const void *data, size_t length)
{
    if (prof_buffer_reserve(b, length) != 0) {
        return -ENOMEM;
    }

    memcpy(b->data + b->length, data, length);
    b->length += length;
    b->data[b->length] = '\0';      /* reserve keeps a byte for it */

    return 0;
}


int
prof_buffer_append_str(prof_buffer_t *b, const char *s)
{
    return prof_buffer_append(b, s, strlen(s));
}


int
prof_buffer_printf(prof_buffer_t *b, const char *fmt, ...)
{
    int      n;
    va_list  args;

    va_start(args, fmt);
    n = vsnprintf(NULL, 0, fmt, args);
    va_end(args);

    if (n < 0 || prof_buffer_reserve(b, n + 1) != 0) {
        return -ENOMEM;
    }

    va_start(args, fmt);
    vsnprintf((char *) b->data + b->length, n + 1, fmt, args);
    va_end(args);

    b->length += n;

    return 0;
}


int
prof_buffer_append_json(prof_buffer_t *b, const char *s, size_t length)
{
    size_t          i;
    char            esc[8];
    unsigned char   c;

    if (prof_buffer_append(b, "\"", 1) != 0) {
        return -ENOMEM;
    }

    for (i = 0; i < length; i++) {
        c = (unsigned char) s[i];

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = c;
            esc[2] = '\0';

        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);

        } else {
            esc[0] = c;
            esc[1] = '\0';
        }

        if (prof_buffer_append_str(b, esc) != 0) {
            return -ENOMEM;
        }
    }

    return prof_buffer_append(b, "\"", 1);
}


void
prof_buffer_free(prof_buffer_t *b)
{
    free(b->data);
    b->data = NULL;
    b->length = 0;
    b->capacity = 0;
}
