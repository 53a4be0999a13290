/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Clocks in nanoseconds: the one conversion of a struct timespec, a clock
 * read with it, and the one way times are written out. The inline
 * functions call clock_gettime only, so they are async-signal-safe (the
 * signal path uses them); prof_rfc3339 is not. Any thread, never blocks.
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


/* UTC RFC 3339 with nanoseconds and 'Z', into buf[64], as the intake
   documents and the status page write times. */
void prof_rfc3339(char *buf, int64_t realtime_ns);


#endif /* PROF_CLOCK_H */
