/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Trace context parsing: hex and decimal ids, traceparent.
 */

#include <errno.h>
#include <string.h>

#include "worker/trace_context.h"


/* Hex digit values, 16 for anything else; uppercase is 0x10 | value. */
static const uint8_t  prof_hex[256] = {
    ['0'] = 0x20, ['1'] = 0x21, ['2'] = 0x22, ['3'] = 0x23, ['4'] = 0x24,
    ['5'] = 0x25, ['6'] = 0x26, ['7'] = 0x27, ['8'] = 0x28, ['9'] = 0x29,
    ['a'] = 0x2a, ['b'] = 0x2b, ['c'] = 0x2c, ['d'] = 0x2d, ['e'] = 0x2e,
    ['f'] = 0x2f,
    ['A'] = 0x4a, ['B'] = 0x4b, ['C'] = 0x4c, ['D'] = 0x4d, ['E'] = 0x4e,
    ['F'] = 0x4f,
};


/*
 * The table marks lowercase digits with 0x20 and uppercase with 0x40, so
 * one lookup both validates and converts a character.
 */
static int
prof_parse_hex64_short(const char *s, size_t length, int lowercase_only,
    uint64_t *value)
{
    size_t    i;
    uint8_t   d, valid;
    uint64_t  v;

    if (length == 0 || length > 16) {
        return -EINVAL;
    }

    valid = lowercase_only ? 0x20 : 0x60;
    v = 0;

    for (i = 0; i < length; i++) {
        d = prof_hex[(unsigned char) s[i]];
        if ((d & valid) == 0) {
            return -EINVAL;
        }
        v = (v << 4) | (d & 0x0f);
    }

    *value = v;
    return 0;
}


#define PROF_BYTES(b)  (0x0101010101010101ULL * (b))

/* Bytes of x strictly between m and n (all bytes < 128): 0x80 each. */
#define prof_between(x, m, n)                                                 \
    ((PROF_BYTES(127 + (n)) - ((x) & PROF_BYTES(127))) & ~(x)                 \
     & (((x) & PROF_BYTES(127)) + PROF_BYTES(127 - (m))) & PROF_BYTES(128))


/*
 * Eight hex digits at once (8 bytes loaded as one word, first digit in the
 * low byte): 0 when one is not a hex digit (uppercase too unless
 * lowercase_only).
 */
static int
prof_parse_hex8(const char *s, int lowercase_only, uint32_t *value)
{
    uint64_t  x, ok, v;

    memcpy(&x, s, 8);

    ok = prof_between(x, '0' - 1, '9' + 1) | prof_between(x, 'a' - 1, 'f' + 1);
    if (!lowercase_only) {
        ok |= prof_between(x, 'A' - 1, 'F' + 1);
    }

    if ((x & PROF_BYTES(128)) != 0 || ok != PROF_BYTES(128)) {
        return 0;
    }

    /* Letters have bit 6 set: their low nibble + 9 is their value. */
    v = (x & PROF_BYTES(0x0f)) + ((x & PROF_BYTES(0x40)) >> 6) * 9;

    /* Pack the nibbles, first digit most significant. */
    v = ((v << 4) + (v >> 8)) & 0x00ff00ff00ff00ffULL;
    v = ((v << 8) + (v >> 16)) & 0x0000ffff0000ffffULL;
    *value = (uint32_t) ((v << 16) + (v >> 32));

    return 1;
}


static int
prof_parse_hex64(const char *s, size_t length, int lowercase_only,
    uint64_t *value)
{
    uint32_t  high, low;

    if (length != 16) {
        return prof_parse_hex64_short(s, length, lowercase_only, value);
    }

    if (!prof_parse_hex8(s, lowercase_only, &high)
        || !prof_parse_hex8(s + 8, lowercase_only, &low))
    {
        return -EINVAL;
    }

    *value = ((uint64_t) high << 32) | low;
    return 0;
}


static int
prof_parse_decimal64(const char *s, size_t length, uint64_t *value)
{
    size_t    i;
    uint64_t  v, d;

    if (length == 0 || length > 20) {
        return -EINVAL;
    }

    v = 0;

    for (i = 0; i < length; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -EINVAL;
        }

        d = (uint64_t) (s[i] - '0');

        if (v > (UINT64_MAX - d) / 10) {
            return -EINVAL;                 /* overflow */
        }

        v = v * 10 + d;
    }

    *value = v;
    return 0;
}


int
prof_parse_datadog_id(const char *s, size_t length, uint64_t *id)
{
    uint64_t  v;

    if (prof_parse_decimal64(s, length, &v) != 0 || v == 0) {
        return -EINVAL;
    }

    *id = v;
    return 0;
}


int
prof_parse_id(const char *s, size_t length, uint64_t *id)
{
    uint64_t  v;

    /* 16 or 32 characters that are all hex digits: hex. */
    if ((length == 16 || length == 32)
        && prof_parse_hex64(s, 16, 0, &v) == 0
        && prof_parse_hex64(s + length - 16, 16, 0, &v) == 0)
    {
        if (v == 0) {
            return -EINVAL;
        }

        *id = v;
        return 0;
    }

    return prof_parse_datadog_id(s, length, id);
}


int
prof_parse_trace_id(const char *s, size_t length, uint64_t *high,
    uint64_t *low)
{
    uint64_t  h, l;

    if (length == 32) {
        if (prof_parse_hex64(s, 16, 0, &h) != 0
            || prof_parse_hex64(s + 16, 16, 0, &l) != 0
            || (h == 0 && l == 0))
        {
            return -EINVAL;
        }

        *high = h;
        *low = l;
        return 0;
    }

    if (prof_parse_id(s, length, &l) != 0) {
        return -EINVAL;
    }

    *high = 0;
    *low = l;

    return 0;
}


int
prof_parse_traceparent(const char *s, size_t length,
    uint64_t *trace_id_high, uint64_t *trace_id_low, uint64_t *parent_id)
{
    uint64_t  version, high, low, parent, flags;

    /* 2 + 1 + 32 + 1 + 16 + 1 + 2 */
    if (length < 55) {
        return -EINVAL;
    }

    if (s[2] != '-' || s[35] != '-' || s[52] != '-'
        || prof_parse_hex64(s, 2, 1, &version) != 0
        || prof_parse_hex64(s + 3, 16, 1, &high) != 0
        || prof_parse_hex64(s + 19, 16, 1, &low) != 0
        || prof_parse_hex64(s + 36, 16, 1, &parent) != 0
        || prof_parse_hex64(s + 53, 2, 1, &flags) != 0)
    {
        return -EINVAL;
    }

    if (version == 0xff || (high == 0 && low == 0) || parent == 0) {
        return -EINVAL;
    }

    /* Version 00 has exactly these fields; later ones may add "-...". */
    if (length > 55 && (version == 0 || s[55] != '-')) {
        return -EINVAL;
    }

    *trace_id_high = high;
    *trace_id_low = low;
    *parent_id = parent;

    return 0;
}
