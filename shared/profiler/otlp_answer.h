/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * An OTLP receiver's answers (collector/profiles/v1development of
 * opentelemetry-proto v1.10.0, and OTLP/HTTP's google.rpc.Status), read
 * by the profiler process for its counters and its log.
 *
 * Threading: any; no state. Memory: the caller's.
 */

#ifndef PROF_OTLP_ANSWER_H
#define PROF_OTLP_ANSWER_H

#include <stddef.h>
#include <stdint.h>


/*
 * An ExportProfilesServiceResponse (uncompressed): its partial success,
 * the profiles rejected (0: none) and the message (its longest valid
 * UTF-8 beginning that fits message_size, "" when none). 0, or -EINVAL
 * when it is no such message.
 */
int prof_otlp_response(const void *data, size_t length, int64_t *rejected,
    char *message, size_t message_size);

/*
 * A refusal's reason: the message of a google.rpc.Status (OTLP/HTTP's
 * error body), else the body itself when it is text; its longest valid
 * UTF-8 beginning that fits message_size. 0, or -EINVAL when there is
 * none.
 */
int prof_otlp_status_message(const void *data, size_t length, char *message,
    size_t message_size);


#endif /* PROF_OTLP_ANSWER_H */
