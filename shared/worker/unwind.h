/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unwind tables: the call frame information (.eh_frame) of every loaded
 * object, turned ahead of time into sorted rows (common/unwind_table.h)
 * that a signal handler walks (common/unwind_walk.h) with a table lookup
 * and two loads a frame.
 *
 * Threading: a table's rows are immutable once built; the walk reads
 * them from a signal handler, which may interrupt the same thread while it
 * builds the next table (prof_sampler_maintain_table, worker/sampler.h:
 * SIGPROF is blocked only for the swap). Building and freeing are not
 * async-signal-safe. Building reads every
 * loaded object's .eh_frame_hdr and .eh_frame inside dl_iterate_phdr (the
 * loader lock held, so that no object is unmapped meanwhile) and allocates
 * nothing there: the table is one anonymous mapping, sized before the
 * loader lock is taken.
 * Every read of an object's data is bounded by the loaded segment that
 * holds its .eh_frame_hdr: a corrupt object is left out (counted), never
 * read past its segment.
 * Memory: a table is one mapping, owned by the table.
 */

#ifndef PROF_UNWIND_H
#define PROF_UNWIND_H

#include <stddef.h>
#include <stdint.h>

#include "common/unwind_walk.h"


/* The objects loaded now (dl_iterate_phdr). NULL when out of memory. */
prof_unwind_table_t *prof_unwind_table_build(void);

/*
 * The same, taking from shared (a table built earlier in this address
 * space, the master's, which must outlive the new one) the objects still
 * loaded where they were: the new table points into shared's arrays for
 * them, and holds only the rows of the objects loaded since (a worker's:
 * the modules the name service loads as it starts, kilobytes instead of a
 * copy of megabytes). Every object parsed anew when the call-outs differ.
 */
prof_unwind_table_t *prof_unwind_table_build_over(
    const prof_unwind_table_t *shared);
void prof_unwind_table_free(prof_unwind_table_t *t);

/* Bytes the table holds, how many objects it covers and left out. */
size_t prof_unwind_table_bytes(const prof_unwind_table_t *t);
unsigned prof_unwind_table_objects(const prof_unwind_table_t *t);
unsigned prof_unwind_table_skipped(const prof_unwind_table_t *t);

/*
 * dl_iterate_phdr's count of objects ever loaded plus those unloaded when
 * the table was built: another count now means the table may be stale.
 */
unsigned long long prof_unwind_table_generation(const prof_unwind_table_t *t);
unsigned long long prof_unwind_generation_now(void);

/*
 * A table of one image in memory (tests and fuzzing): segment is the
 * loaded segment holding the .eh_frame_hdr at hdr_offset (hdr_size bytes)
 * and the .eh_frame it points to (hdr_size 0: none, code without unwind
 * tables, with return sites); base is the load bias its pcs are relative
 * to. NULL when out of memory; an image that cannot be parsed gives a
 * table of no object.
 */
prof_unwind_table_t *prof_unwind_table_from_image(uintptr_t base,
    const void *segment, size_t segment_size, size_t hdr_offset,
    size_t hdr_size);


#endif /* PROF_UNWIND_H */
