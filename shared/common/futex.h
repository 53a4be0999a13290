/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The futex operations the two processes wait and wake each other with
 * (futex(2)): from the kernel's header where the compiler has it, else
 * the kernel ABI's values (a musl toolchain without kernel headers:
 * Debian's musl-gcc, Alpine without linux-headers).
 */

#ifndef PROF_FUTEX_H
#define PROF_FUTEX_H

#if defined(__has_include)
#if __has_include(<linux/futex.h>)
#include <linux/futex.h>
#endif
#endif

#ifndef FUTEX_WAIT
#define FUTEX_WAIT               0
#define FUTEX_WAKE               1
#define FUTEX_WAIT_BITSET        9
#define FUTEX_PRIVATE_FLAG       128
#define FUTEX_BITSET_MATCH_ANY   0xffffffff
#endif

#endif /* PROF_FUTEX_H */
