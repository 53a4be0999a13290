/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Clocks in nanoseconds: the one conversion of a struct timespec, and a
 * clock read with it. clock_gettime only, so async-signal-safe (the signal
 * path uses it); any thread, never blocks.
 */

#ifndef PROF_CLOCK_H
#define PROF_CLOCK_H

#include <stdint.h>
#include <time.h>


#define PROF_NS_PER_SEC  1000000000LL


static inline int64_t
prof_timespec_ns(const struct timespec *ts)
{
    return (int64_t) ts->tv_sec * PROF_NS_PER_SEC + ts->tv_nsec;
}


/* The clock's time in nanoseconds, or -1 when it cannot be read. */
static inline int64_t
prof_clock_ns(clockid_t clock)
{
    struct timespec  ts;

    if (clock_gettime(clock, &ts) != 0) {
        return -1;
    }

    return prof_timespec_ns(&ts);
}


#endif /* PROF_CLOCK_H */
