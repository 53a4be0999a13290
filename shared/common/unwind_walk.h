/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The unwind table's walk: a stack's return addresses from the rows an
 * unwind table holds ("from this pc on, the caller's frame is at sp/fp +
 * N, the frame pointer was saved at CFA + M"), with a table lookup and
 * two loads a frame: no DWARF interpretation, no locks, no allocation.
 * The tables are built by the worker (worker/unwind.h); their layout is
 * unwind_table.h's.
 *
 * The machine's registers and frame rules are common/arch.h's. Frames
 * whose rules the rows cannot express (a CFA computed by an expression, a
 * return address not where calls leave it: on x86-64 at CFA - 8) and code
 * outside every object known when the table was built (JIT code, objects
 * loaded later) stop the walk with a status that says so;
 * prof_unwind_scan() may then find the next caller by scanning the stack,
 * reading nothing but the stack and the table.
 *
 * The stack is read only between the bounds regs gives, and there only
 * where the walk proved a word lies: in the stack itself (the signal
 * handler, on the thread it interrupted), or in a copy of it at another
 * address (stack_delta): the profiler process walks a copy of a worker's
 * stack it read while the worker was blocked in a system call
 * (profiler/remote_stack.h). A frame pointer or auxiliary register not
 * known (0) stops the walk at a frame whose CFA is found from it
 * (PROF_UNWIND_NO_RULE): such a copy comes with a pc and an sp only.
 *
 * Threading: async-signal-safe; called by the worker's SIGPROF handler
 * (worker/signal_path.c) and by the profiler process's sampler thread. A
 * table's rows are immutable once built, but the walk keeps a cache of
 * rows in the table: one thread at a time may walk with a table.
 */

#ifndef PROF_UNWIND_WALK_H
#define PROF_UNWIND_WALK_H

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
    uintptr_t  stack_delta;     /* where its words are read: at their
                                   address plus this; 0 in the process
                                   whose stack it is, else the address of
                                   a copy of [low, high) less low */
    int        caller;          /* pc is a return address (not the pc
                                   of an interrupted instruction) */
    uintptr_t *where;           /* when not NULL: for each frame, its sp,
                                   fp and 0 (3 words), the last one's
                                   third word 1 when its pc is in no
                                   object (signal_lua.h's
                                   prof_lua_where_t) */
} prof_unwind_regs_t;


/*
 * A table copied byte for byte from another process, where it lies at
 * remote (unwind_copy.c; not for the signal handler): first its head,
 * prof_unwind_table_head_bytes() bytes, which tells how many bytes to
 * copy (0: no table's head), then those, which prof_unwind_table_adopt
 * makes usable here: NULL when the copy is no table whose pointers all
 * lie in it (torn, corrupt). The copy is the caller's, and is the table
 * then.
 */
size_t prof_unwind_table_head_bytes(void);
size_t prof_unwind_table_copy_bytes(const void *head, uintptr_t remote);
prof_unwind_table_t *prof_unwind_table_adopt(void *copy, size_t size,
    uintptr_t remote);


/* Async-signal-safe. */

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


#endif /* PROF_UNWIND_WALK_H */
