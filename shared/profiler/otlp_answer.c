/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * An OTLP receiver's answers read: a partial success, a refusal's
 * reason.
 */

#include <errno.h>
#include <string.h>

#include "common/utf8.h"
#include "profiler/otlp_answer.h"


/* collector/profiles/v1development, google.rpc.Status: field numbers */
#define PROF_OTLP_RESPONSE_PARTIAL           1
#define PROF_OTLP_PARTIAL_REJECTED           1
#define PROF_OTLP_PARTIAL_MESSAGE            2
#define PROF_OTLP_STATUS_MESSAGE             2

/* protobuf wire types */
#define PROF_OTLP_WIRE_VARINT   0
#define PROF_OTLP_WIRE_FIXED64  1
#define PROF_OTLP_WIRE_LEN      2
#define PROF_OTLP_WIRE_FIXED32  5


/* A varint at *p (before end). 0, or -EINVAL. */
static int
prof_otlp_read_varint(const unsigned char **p, const unsigned char *end,
    uint64_t *v)
{
    unsigned  shift;

    *v = 0;

    for (shift = 0; *p < end && shift < 64; shift += 7) {
        *v |= (uint64_t) (**p & 0x7f) << shift;
        if ((*(*p)++ & 0x80) == 0) {
            return 0;
        }
    }

    return -EINVAL;
}


/*
 * The next field of a message in [*p, end): its number, and its value
 * (a varint's) or its bytes (a length-delimited one's); others skipped.
 */
static int
prof_otlp_read_field(const unsigned char **p, const unsigned char *end,
    unsigned *field, uint64_t *v, const unsigned char **data)
{
    uint64_t  key;

    if (prof_otlp_read_varint(p, end, &key) != 0) {
        return -EINVAL;
    }

    *field = (unsigned) (key >> 3);
    *data = NULL;

    switch (key & 7) {

    case PROF_OTLP_WIRE_VARINT:
        return prof_otlp_read_varint(p, end, v);

    case PROF_OTLP_WIRE_LEN:
        if (prof_otlp_read_varint(p, end, v) != 0
            || *v > (uint64_t) (end - *p))
        {
            return -EINVAL;
        }
        *data = *p;
        *p += *v;
        return 0;

    case PROF_OTLP_WIRE_FIXED64:
    case PROF_OTLP_WIRE_FIXED32:
        *v = ((key & 7) == PROF_OTLP_WIRE_FIXED64) ? 8 : 4;
        if (*v > (uint64_t) (end - *p)) {
            return -EINVAL;
        }
        *p += *v;
        *v = 0;
        return 0;

    default:
        return -EINVAL;
    }
}


/* At most message_size - 1 bytes of text, cut between characters. */
static void
prof_otlp_copy_text(char *message, size_t message_size,
    const unsigned char *text, uint64_t length)
{
    size_t  n;

    n = (length < message_size - 1) ? (size_t) length : message_size - 1;
    while (n > 0 && !prof_utf8_valid((const char *) text, n)) {
        n--;
    }

    memcpy(message, text, n);
    message[n] = '\0';
}


int
prof_otlp_response(const void *data, size_t length, int64_t *rejected,
    char *message, size_t message_size)
{
    uint64_t              v, w;
    unsigned              field, inner;
    const unsigned char  *p, *end, *bytes, *q, *qend, *text;

    *rejected = 0;
    message[0] = '\0';

    p = data;
    end = p + length;

    while (p < end) {
        if (prof_otlp_read_field(&p, end, &field, &v, &bytes) != 0) {
            return -EINVAL;
        }

        if (field != PROF_OTLP_RESPONSE_PARTIAL || bytes == NULL) {
            continue;
        }

        q = bytes;
        qend = bytes + v;

        while (q < qend) {
            if (prof_otlp_read_field(&q, qend, &inner, &w, &text) != 0) {
                return -EINVAL;
            }

            if (inner == PROF_OTLP_PARTIAL_REJECTED && text == NULL) {
                *rejected = (int64_t) w;

            } else if (inner == PROF_OTLP_PARTIAL_MESSAGE && text != NULL) {
                prof_otlp_copy_text(message, message_size, text, w);
            }
        }
    }

    return 0;
}


int
prof_otlp_status_message(const void *data, size_t length, char *message,
    size_t message_size)
{
    size_t                i;
    uint64_t              v;
    unsigned              field;
    const unsigned char  *p, *end, *text;

    message[0] = '\0';
    p = data;
    end = p + length;

    while (p < end) {
        if (prof_otlp_read_field(&p, end, &field, &v, &text) != 0) {
            break;
        }

        if (field == PROF_OTLP_STATUS_MESSAGE && text != NULL && v > 0) {
            prof_otlp_copy_text(message, message_size, text, v);
            return 0;
        }
    }

    /* Not a Status: the body, when it is printable text. */
    p = data;
    for (i = 0; i < length; i++) {
        if (p[i] < 0x20 && p[i] != '\n' && p[i] != '\t' && p[i] != '\r') {
            return -EINVAL;
        }
    }

    if (length == 0 || !prof_utf8_valid(data, length)) {
        return -EINVAL;
    }

    prof_otlp_copy_text(message, message_size, p, length);

    while ((i = strlen(message)) > 0
           && (message[i - 1] == '\n' || message[i - 1] == '\r'))
    {
        message[i - 1] = '\0';
    }

    return 0;
}
