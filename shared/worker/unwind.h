/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unwind tables: the call frame information (.eh_frame) of every loaded
 * object, turned ahead of time into sorted rows "from this pc on, the
 * caller's frame is at sp/fp + N, the frame pointer was saved at CFA + M",
 * so that a signal handler walks a stack with a table lookup and two loads
 * a frame: no DWARF interpretation, no locks, no allocation in the handler.
 *
 * The machine's registers and frame rules are arch.h's (x86-64 only so
 * far: sp is rsp, fp is rbp). Frames whose rules the rows cannot express
 * (a CFA computed by an expression, a return address not where calls
 * leave it: on x86-64 at CFA - 8) and code outside every object known
 * when the table was built (JIT code, objects loaded later) stop the walk
 * with a status that says so; prof_unwind_scan() may then find the next
 * caller by scanning the stack, reading nothing but the stack and the
 * table.
 *
 * Threading: a table's rows are immutable once built; prof_unwind reads
 * them from a signal handler, which may interrupt the same thread while it
 * builds the next table (prof_sampler_maintain_table, worker/sampler.h:
 * SIGPROF is blocked only for the swap). prof_unwind also keeps a cache
 * of rows in the table: one thread at a time may walk with a table.
 * Building and freeing are not async-signal-safe. Building reads every
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


typedef struct prof_unwind_table_s  prof_unwind_table_t;


typedef enum {
    PROF_UNWIND_END = 0,        /* reached the outermost frame */
    PROF_UNWIND_FULL,           /* the frames array is full */
    PROF_UNWIND_NO_OBJECT,      /* a pc outside every known object */
    PROF_UNWIND_NO_RULE,        /* a frame the rows cannot step over */
    PROF_UNWIND_BAD_STACK       /* a frame outside the stack's bounds */
} prof_unwind_status_e;


typedef struct {
    uintptr_t  pc;
    uintptr_t  sp;
    uintptr_t  fp;              /* the frame pointer, 0: unknown */
    uintptr_t  aux;             /* the auxiliary register (arch.h),
                                   0: unknown */
    uintptr_t  lr;              /* the link register, where it may hold
                                   pc's frame's return address (pc the
                                   interrupted instruction), else 0 */
    uintptr_t  stack_low;       /* the thread's stack: [low, high) */
    uintptr_t  stack_high;
    int        caller;          /* pc is a return address (not the pc
                                   of an interrupted instruction) */
    uintptr_t *where;           /* when not NULL: for each frame, its sp,
                                   fp and 0 (3 words), the last one's
                                   third word 1 when its pc is in no
                                   object (signal_lua.h's
                                   prof_lua_where_t) */
} prof_unwind_regs_t;


/* The objects loaded now (dl_iterate_phdr). NULL when out of memory. */
prof_unwind_table_t *prof_unwind_table_build(void);
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


/* Async-signal-safe (unwind_walk.c), called by the handler. */

/* How many stack scans a walk may make (prof_unwind_scan, below). */
int prof_unwind_scans(const prof_unwind_table_t *t);

/*
 * Writes the return addresses of the stack described by regs, innermost
 * first (frames[0] = regs->pc), at most max of them; *count is how many
 * were written. regs is left at the last frame written.
 */
prof_unwind_status_e prof_unwind(const prof_unwind_table_t *t,
    prof_unwind_regs_t *regs, void **frames, int max, int *count);

/*
 * Looks above regs->sp, at most max_words words, for a return address
 * into a known object whose frame fits the stack; on success regs is set
 * to that caller (pc, sp, a guess of fp, caller = 1) and 0 returned.
 * Reads only the stack between sp and its high bound, and the table.
 */
int prof_unwind_scan(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    unsigned max_words);

/*
 * Where calls leave the return address in a link register (arch.h): the
 * caller of the interrupted frame regs describes (code no object holds),
 * from regs->lr when it is a return address into a known object's code
 * with rules; its frame is found from the frame pointer or, from the
 * stack pointer, at the first place at most max_words words above sp
 * where it holds a return address. On success regs is set to that caller
 * and 0 returned; -1 elsewhere and on other machines. Reads only the
 * stack between sp and its high bound, and the table.
 */
int prof_unwind_link(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    unsigned max_words);


#endif /* PROF_UNWIND_H */
