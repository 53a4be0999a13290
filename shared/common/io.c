/* SPDX-License-Identifier: BSD-2-Clause */

/* Writes that finish: see io.h. */

#include <errno.h>
#include <unistd.h>

#include "common/io.h"


int
prof_write_all(int fd, const void *p, size_t length)
{
    ssize_t      n;
    const char  *c;

    c = p;

    while (length > 0) {
        n = write(fd, c, length);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            return -errno;
        }

        c += n;
        length -= n;
    }

    return 0;
}
