/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A closed profile written to the page's store (channel/ui_store.h): its
 * frames named (functions, the functions inlined in them, Lua functions
 * with their chunk), its samples' CPU, wall and off-CPU time with the
 * labels the page filters by, merged per (stack, labels).
 *
 * Threading: the profiler loop thread only (the aggregator's on_profile,
 * before the profile is freed). It never blocks but for the store's
 * writers' lock, which no writer holds across I/O.
 * Memory: its tables are allocated and freed in the call.
 */

#ifndef PROF_UI_PUBLISH_H
#define PROF_UI_PUBLISH_H

#include <sys/types.h>

#include "channel/ui_store.h"
#include "profiler/aggregator.h"


/*
 * 0, -ENOMEM, or -E2BIG (the record is larger than the store). A record
 * over max_bytes (0: no bound) has its lightest samples folded into one
 * "[other stacks]" frame until it fits (its totals stay): so that the
 * store holds each worker's last 15 minutes whatever the profiles.
 */
int prof_ui_publish(prof_ui_store_t *store, pid_t pid,
    const prof_profile_t *profile, prof_aggregator_t *agg,
    size_t max_bytes);


#endif /* PROF_UI_PUBLISH_H */
