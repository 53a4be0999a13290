/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * UTF-8 hygiene: every string that leaves the profiler (pprof strings,
 * event.json, tags) is valid UTF-8, whatever bytes it came from (a
 * client's URI, the configuration, a symbol table, a file name).
 *
 * What is replaced: each maximal subpart of an ill-formed sequence (the
 * Unicode and WHATWG "substitution of maximal subparts", as Python's
 * decode("utf-8", "replace") does) becomes one U+FFFD: stray continuation
 * bytes, C0, C1 and F5..FF, overlong forms (C0 80, E0 80 80, F0 80 80 80),
 * surrogates (ED A0 80..ED BF BF), code points above U+10FFFF, and
 * sequences cut short (by the end of the string or by another byte).
 *
 * U+0000: a NUL byte (a client's %00) is valid UTF-8, but C tools and
 * many pprof readers stop at it, and it would make two documents disagree
 * on the same name. prof_utf8_valid() refuses it, prof_utf8_sanitize()
 * and prof_utf8_append() replace it with U+FFFD (pprof strings, tags,
 * anything that names something); prof_utf8_append_json() writes it as
 * \u0000, since JSON escapes it losslessly (no caller hands it one: names
 * reach the documents already sanitized, so an endpoint reads the same in
 * the pprof's labels and in event.json).
 *
 * Threading: none (pure functions on the caller's memory). Memory: the
 * caller's; nothing is allocated but through a prof_buffer_t.
 */

#ifndef PROF_UTF8_H
#define PROF_UTF8_H

#include <stddef.h>

#include "common/buffer.h"


/* The most bytes prof_utf8_sanitize() writes for length bytes (no NUL). */
#define PROF_UTF8_SANITIZED_MAX(length)  (3 * (size_t) (length))


/*
 * 1 when s[0, length) is valid UTF-8 without U+0000, that is when
 * prof_utf8_sanitize() would leave it unchanged; else 0. ASCII text is
 * checked eight bytes at a time.
 */
int prof_utf8_valid(const char *s, size_t length);

/*
 * Copies s[0, length) into out (PROF_UTF8_SANITIZED_MAX(length) + 1 bytes),
 * replacing each maximal ill-formed subpart and each NUL with U+FFFD, and
 * NUL-terminates it; returns the length written. Valid text is copied
 * byte for byte. out and s must not overlap.
 */
size_t prof_utf8_sanitize(char *out, const char *s, size_t length);

/* Appends s, sanitized as above. 0 or -ENOMEM (b keeps what it had). */
int prof_utf8_append(prof_buffer_t *b, const char *s, size_t length);

/*
 * Appends s as a quoted JSON string: ill-formed subparts become U+FFFD;
 * '"', '\' and U+0000..U+001F, U+007F are escaped (\", \\, \u00XX); other
 * characters are written as they are (UTF-8). 0 or -ENOMEM (b keeps what
 * it had).
 */
int prof_utf8_append_json(prof_buffer_t *b, const char *s, size_t length);


#endif /* PROF_UTF8_H */
