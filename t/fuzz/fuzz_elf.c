/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * libFuzzer target: the symbolizer's ELF parsing (program headers, build id
 * notes, section headers, symbol and string tables) on arbitrary bytes as
 * a file. Build with clang -fsanitize=fuzzer,address,undefined (make fuzz).
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profiler/symbolizer.h"


static int   fuzz_fd = -1;
static char  fuzz_path[32];


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int      rc;
    size_t   functions;
    ssize_t  n;

    /* one memory file for the process, rewritten for each input */

    if (fuzz_fd == -1) {
        fuzz_fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
        if (fuzz_fd == -1) {
            abort();
        }

        snprintf(fuzz_path, sizeof(fuzz_path), "/proc/self/fd/%d", fuzz_fd);
    }

    if (ftruncate(fuzz_fd, 0) != 0) {
        abort();
    }

    n = size ? pwrite(fuzz_fd, data, size, 0) : 0;
    if (n != (ssize_t) size) {
        abort();
    }

    rc = prof_symbolizer_parse_file_for_test(fuzz_path, &functions);

    /* lookups always agree with the table; a malformed file has none */

    if (rc == -EFAULT || (rc != 0 && functions != 0)) {
        abort();
    }

    return 0;
}
