/* SPDX-License-Identifier: BSD-2-Clause */

/* Times written out: see clock.h. */

#include <stdio.h>
#include <time.h>

#include "common/clock.h"


void
prof_rfc3339(char *buf, int64_t realtime_ns)
{
    time_t     sec;
    struct tm  tm;

    sec = (time_t) (realtime_ns / PROF_NS_PER_SEC);
    gmtime_r(&sec, &tm);

    snprintf(buf, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec,
             (long long) (realtime_ns % PROF_NS_PER_SEC));
}
