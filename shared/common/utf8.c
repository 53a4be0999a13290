/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * UTF-8 hygiene: validation with an ASCII fast path, substitution of
 * maximal ill-formed subparts with U+FFFD, JSON string escaping.
 */

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "common/utf8.h"


#define PROF_UTF8_ONES   0x0101010101010101ULL
#define PROF_UTF8_HIGHS  0x8080808080808080ULL


static const char  prof_utf8_replacement[3] = { '\xef', '\xbf', '\xbd' };
static const char  prof_utf8_hex[] = "0123456789abcdef";


/* The length of the leading run of bytes 0x01..0x7f. */
static inline size_t
prof_utf8_ascii_run(const unsigned char *s, size_t length)
{
    size_t    i;
    uint64_t  v;

    i = 0;

    /*
     * A byte >= 0x80 sets its high bit in v; a NUL byte, the lowest one
     * when there are several, sets its high bit in v - ONES (the bytes
     * below it are not 0: no borrow reaches it).
     */
    while (length - i >= 8) {
        memcpy(&v, s + i, 8);

        if ((v | (v - PROF_UTF8_ONES)) & PROF_UTF8_HIGHS) {
            break;
        }

        i += 8;
    }

    while (i < length && (unsigned) s[i] - 1 < 0x7f) {
        i++;
    }

    return i;
}


/*
 * The length (1 to 4) of the well-formed sequence at s[0, length), or 0
 * when there is none (U+0000 included); then *bad is the length (1 to 3)
 * of the maximal subpart to replace: the longest prefix of a well-formed
 * sequence, at least one byte.
 */
static size_t
prof_utf8_sequence(const unsigned char *s, size_t length, size_t *bad)
{
    size_t         need, i;
    unsigned char  c, lo, hi;

    c = s[0];

    if (c >= 0x01 && c <= 0x7f) {
        return 1;
    }

    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        lo = 0x80;
        hi = 0xbf;

    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        lo = (c == 0xe0) ? 0xa0 : 0x80;     /* E0 80..9F: overlong */
        hi = (c == 0xed) ? 0x9f : 0xbf;     /* ED A0..BF: surrogates */

    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        lo = (c == 0xf0) ? 0x90 : 0x80;     /* F0 80..8F: overlong */
        hi = (c == 0xf4) ? 0x8f : 0xbf;     /* F4 90..BF: > U+10FFFF */

    } else {
        /* NUL, a continuation byte, C0, C1 (overlong), F5..FF */
        *bad = 1;
        return 0;
    }

    for (i = 1; i <= need; i++) {
        if (i == length || s[i] < lo || s[i] > hi) {
            *bad = i;
            return 0;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    return need + 1;
}


int
prof_utf8_valid(const char *s, size_t length)
{
    size_t                i, n, bad;
    const unsigned char  *p = (const unsigned char *) s;

    i = prof_utf8_ascii_run(p, length);

    while (i < length) {
        n = prof_utf8_sequence(p + i, length - i, &bad);
        if (n == 0) {
            return 0;
        }

        i += n;
        i += prof_utf8_ascii_run(p + i, length - i);
    }

    return 1;
}


size_t
prof_utf8_sanitize(char *out, const char *s, size_t length)
{
    size_t                i, n, bad, start, written;
    const unsigned char  *p = (const unsigned char *) s;

    i = 0;
    written = 0;

    while (i < length) {

        /* the longest valid run from i, copied at once */

        start = i;
        bad = 0;

        for ( ;; ) {
            i += prof_utf8_ascii_run(p + i, length - i);
            if (i == length) {
                break;
            }

            n = prof_utf8_sequence(p + i, length - i, &bad);
            if (n == 0) {
                break;
            }

            i += n;
        }

        memcpy(out + written, s + start, i - start);
        written += i - start;

        if (i < length) {
            memcpy(out + written, prof_utf8_replacement, 3);
            written += 3;
            i += bad;
        }
    }

    out[written] = '\0';

    return written;
}


int
prof_utf8_append(prof_buffer_t *b, const char *s, size_t length)
{
    if (prof_utf8_valid(s, length)) {
        return prof_buffer_append(b, s, length);
    }

    if (length > SIZE_MAX / 3 - 1
        || prof_buffer_reserve(b, PROF_UTF8_SANITIZED_MAX(length)) != 0)
    {
        return -ENOMEM;
    }

    /* reserve keeps a byte past what is asked for the NUL */
    b->length += prof_utf8_sanitize((char *) b->data + b->length, s, length);

    return 0;
}


int
prof_utf8_append_json(prof_buffer_t *b, const char *s, size_t length)
{
    size_t                i, n, bad;
    unsigned char         c, *o;
    const unsigned char  *p = (const unsigned char *) s;

    /* A byte takes at most 6 (\u00XX); then the quotes. */
    if (length > (SIZE_MAX - 3) / 6
        || prof_buffer_reserve(b, 6 * length + 2) != 0)
    {
        return -ENOMEM;
    }

    o = b->data + b->length;
    *o++ = '"';

    i = 0;

    while (i < length) {
        c = p[i];

        if (c >= 0x20 && c < 0x7f) {
            if (c == '"' || c == '\\') {
                *o++ = '\\';
            }

            *o++ = c;
            i++;
            continue;
        }

        if (c < 0x20 || c == 0x7f) {
            *o++ = '\\';
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = prof_utf8_hex[c >> 4];
            *o++ = prof_utf8_hex[c & 0xf];
            i++;
            continue;
        }

        n = prof_utf8_sequence(p + i, length - i, &bad);

        if (n == 0) {
            memcpy(o, prof_utf8_replacement, 3);
            o += 3;
            i += bad;
            continue;
        }

        memcpy(o, p + i, n);
        o += n;
        i += n;
    }

    *o++ = '"';
    *o = '\0';
    b->length = o - b->data;

    return 0;
}
