/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Stalls of the worker's event loop, as the profiler process reports
 * them: a line at warn in the server's log for each (at most
 * PROF_STALL_LINES a minute, the rest counted), naming how long it
 * lasted, what it ran for (the worker's description, sampler_state.h)
 * and the code its turn's first sample past the threshold (else its
 * last) held (Lua functions as "name (file:line)", native ones by
 * name), and the figures for the status page: the count, the longest,
 * the turns' histogram; and, once, that the worker's stack may not be
 * read from outside (the signal asks for it then).
 *
 * Threading: the profiler loop thread only.
 */

#ifndef PROF_STALL_REPORT_H
#define PROF_STALL_REPORT_H

#include <stdint.h>

#include "channel/status.h"
#include "profiler/ring_drain.h"


/* Lines a minute, at most; the frames a line names, at most. */
#define PROF_STALL_LINES     10
#define PROF_STALL_NAMED     8

typedef struct {
    uint64_t     count;                 /* taken, and lost on the way */
    uint64_t     logged;
    uint64_t     not_logged;            /* since the last line */
    uint64_t     lost;                  /* on the way (mailboxes full) */
    int          longest_pending;       /* its line to make */
    int64_t      longest_ns;
    int64_t      longest_at_ns;         /* unix ns */
    char         longest[PROF_STATUS_TEXT_MAX * 2];
    int64_t      window_ns;             /* the minute's start (monotonic) */
    unsigned     window_lines;
    int          refused_told;          /* the worker's stack may not be
                                           read from outside: said */
} prof_stalls_t;


struct prof_process_s;

/* The stalls the sampler thread handed over: counted, logged. */
void prof_stalls_report(struct prof_process_s *p);

/* The status page's figures (loop): the stalls and the worker's turns. */
void prof_stalls_status(struct prof_process_s *p, prof_status_loop_t *l);


#endif /* PROF_STALL_REPORT_H */
