/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Trace context parsing: the ids that link samples to traces, from W3C
 * traceparent, Datadog's x-datadog-* headers, or a tracer's variables.
 * Malformed input means "no ids" (a negative return), never a crash.
 *
 * Threading: pure functions, any thread. Inputs are byte ranges, not
 * NUL-terminated strings.
 */

#ifndef PROF_TRACE_CONTEXT_H
#define PROF_TRACE_CONTEXT_H

#include <stddef.h>
#include <stdint.h>


/*
 * An id: 16 or 32 hex digits (the low 64 bits of a 128-bit id), or a
 * decimal u64. Zero, "-" (no trace), empty and anything else: -EINVAL.
 */
int prof_parse_id(const char *s, size_t length, uint64_t *id);

/*
 * A trace id whole: 32 hex digits (both halves), 16 (the low half) or a
 * decimal u64 (the low half). All zero, "-", anything else: -EINVAL.
 */
int prof_parse_trace_id(const char *s, size_t length, uint64_t *high,
    uint64_t *low);

/*
 * traceparent: "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>",
 * lowercase only; version ff, an all-zero trace or parent id: invalid.
 * Later versions may append "-..." fields.
 */
int prof_parse_traceparent(const char *s, size_t length,
    uint64_t *trace_id_high, uint64_t *trace_id_low, uint64_t *parent_id);

/* x-datadog-trace-id / x-datadog-parent-id: nonzero decimal u64. */
int prof_parse_datadog_id(const char *s, size_t length, uint64_t *id);


#endif /* PROF_TRACE_CONTEXT_H */
