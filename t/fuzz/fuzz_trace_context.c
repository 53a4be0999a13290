/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * libFuzzer target: every trace context parser on arbitrary bytes. Build
 * with clang -fsanitize=fuzzer,address,undefined (make fuzz).
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/trace_context.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char      *s;
    uint64_t   high, low, parent, id;

    /* A copy of exactly size bytes: reading past it is caught by ASan. */
    s = malloc(size ? size : 1);
    if (s == NULL) {
        return 0;
    }
    memcpy(s, data, size);

    if (prof_parse_traceparent(s, size, &high, &low, &parent) == 0
        && ((high == 0 && low == 0) || parent == 0))
    {
        abort();        /* zero ids are never valid */
    }

    if (prof_parse_id(s, size, &id) == 0 && id == 0) {
        abort();
    }

    if (prof_parse_datadog_id(s, size, &id) == 0 && id == 0) {
        abort();
    }

    free(s);
    return 0;
}
