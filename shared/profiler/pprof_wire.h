/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The protobuf wire format of pprof's messages, written directly: varints,
 * length-delimited fields, and the small messages (Label, ValueType, Line)
 * the encoder nests in its records. The field numbers are those of
 * nanopb's generated profile.pb.h.
 *
 * For the pprof encoder. Threading: none; the writers only write into the
 * caller's bytes, which must have room (at most 10 bytes a varint, 1 a
 * key: every field number here is below 16). Each returns where the next
 * byte goes.
 */

#ifndef PROF_PPROF_WIRE_H
#define PROF_PPROF_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "profile.pb.h"


/* Protobuf wire types; every field number here is below 16: one byte. */
#define PROF_PB_VARINT   0
#define PROF_PB_LEN      2
#define PROF_PB_KEY(field, type)  ((unsigned char) (((field) << 3) | (type)))


static inline unsigned char *
prof_pb_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char) (v | 0x80);
        v >>= 7;
    }

    *p++ = (unsigned char) v;

    return p;
}


static inline size_t
prof_pb_varint_size(uint64_t v)
{
    size_t  n;

    for (n = 1; v >= 0x80; n++) {
        v >>= 7;
    }

    return n;
}


/* A varint field; left out when 0 (proto3). */
static inline unsigned char *
prof_pb_uint(unsigned char *p, unsigned field, uint64_t v)
{
    if (v == 0) {
        return p;
    }

    *p++ = PROF_PB_KEY(field, PROF_PB_VARINT);

    return prof_pb_varint(p, v);
}


static inline unsigned char *
prof_pb_bytes(unsigned char *p, unsigned field, const void *data,
    size_t length)
{
    *p++ = PROF_PB_KEY(field, PROF_PB_LEN);
    p = prof_pb_varint(p, length);
    memcpy(p, data, length);

    return p + length;
}


/* A Label: a string or a number under a key. */
static inline unsigned char *
prof_pb_label(unsigned char *p, int64_t key, int64_t str, int64_t num)
{
    unsigned char  *end, body[3 * 11];

    end = prof_pb_uint(body, perftools_profiles_Label_key_tag, key);
    end = prof_pb_uint(end, perftools_profiles_Label_str_tag, str);
    end = prof_pb_uint(end, perftools_profiles_Label_num_tag, num);

    return prof_pb_bytes(p, perftools_profiles_Sample_label_tag, body,
                         end - body);
}


/* ValueType: a type and its unit (string indices). */
static inline unsigned char *
prof_pb_value_type(unsigned char *p, unsigned field, const int64_t type[2])
{
    unsigned char  *end, body[2 * 11];

    end = prof_pb_uint(body, perftools_profiles_ValueType_type_tag,
                       type[0]);
    end = prof_pb_uint(end, perftools_profiles_ValueType_unit_tag, type[1]);

    return prof_pb_bytes(p, field, body, end - body);
}


/* A Line of a Location: function and line number (0: unknown). */
static inline unsigned char *
prof_pb_line(unsigned char *p, uint64_t function_id, uint32_t lineno)
{
    unsigned char  *end, line[32];

    end = prof_pb_uint(line, perftools_profiles_Line_function_id_tag,
                       function_id);
    if (lineno != 0) {
        end = prof_pb_uint(end, perftools_profiles_Line_line_tag, lineno);
    }

    return prof_pb_bytes(p, perftools_profiles_Location_line_tag, line,
                         end - line);
}


#endif /* PROF_PPROF_WIRE_H */
