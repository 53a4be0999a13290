/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Writes that finish: the whole buffer to a descriptor, whatever short
 * writes and signals interrupt it.
 *
 * Threading: none of its own. It blocks as write(2) does: never on a
 * signal handler or the event loop.
 */

#ifndef PROF_IO_H
#define PROF_IO_H

#include <stddef.h>


/* Writes length bytes of p to fd: 0, or -errno. */
int prof_write_all(int fd, const void *p, size_t length);


#endif /* PROF_IO_H */
