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


/*
 * The signal handler's code (this walk, worker/signal_path.c and
 * signal_lua*.c) in one place of the module's text, which the linker
 * keeps apart (.text.hot): a sample runs it cold, a miss of the TLB and
 * of the cache for each page it spans.
 */
#define PROF_SIGNAL_TEXT  __attribute__((section(".text.hot.prof_signal")))


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

/*
 * The same, for a table that may point into shared, a table this process
 * maps at the address the other one does (the one it inherited from it):
 * such arrays stay where they are, checked to lie in shared.
 */
prof_unwind_table_t *prof_unwind_table_adopt_over(void *copy, size_t size,
    uintptr_t remote, const prof_unwind_table_t *shared);


/*
 * The rows the last walk of a thread used, for its next walk (the signal
 * handler's, prof_unwind_recent): consecutive samples share most of their
 * frames, and a walk's rows lie in a few lines of this list, where the
 * table's cache (by pc) spreads them over 32 KB, a cold line a frame.
 * Frames are matched by their depth in the stack (stack_high - sp), from
 * the innermost outward, and a row by the range of pcs it holds for.
 */
#define PROF_UNWIND_RECENT  48              /* frames kept of a walk */

typedef struct {
    uintptr_t                   lo;         /* the row holds for pcs */
    uint32_t                    len;        /*   [lo, lo + len) */
    uint32_t                    depth;      /* of the frame's sp */
#ifdef __aarch64__
    uint32_t                    row[3];     /* its row (unwind_table.h): */
#else
    uint32_t                    row[2];     /*   with the return address's
                                               slot where calls leave it
                                               in a register */
#endif
} prof_unwind_recent_frame_t;

typedef struct {
    const prof_unwind_table_t  *table;      /* whose rows they are, */
    uint32_t                    generation; /*   and its generation */
    uint32_t                    count[2];   /* frames in each list */
    uint32_t                    last;       /* the last walk's list */
    uint32_t                    at;         /* its next frame to match */
    prof_unwind_recent_frame_t  frames[2][PROF_UNWIND_RECENT];
} prof_unwind_recent_t;


/*
 * Async-signal-safe. Hidden from other objects: the handler calls them
 * directly, not through the PLT.
 */
#pragma GCC visibility push(hidden)

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
 * A new walk of r's thread with t, the caller's generation-th table (a
 * count of its tables: another table may lie where a freed one was): the
 * frames kept by the walk before become the last walk's (none when it
 * walked with another table).
 */
void prof_unwind_recent_begin(prof_unwind_recent_t *r,
    const prof_unwind_table_t *t, uint32_t generation);

/*
 * The lines of r the next walk reads and writes, asked of the memory at
 * once (the walk reads them one after the other, each a miss): early in
 * the handler, so that they come while it does other work.
 */
void prof_unwind_recent_prefetch(const prof_unwind_recent_t *r);

/*
 * prof_unwind, looking rows up in the last walk's list before the table
 * and keeping this walk's in r; a walk's scans go on with it (after
 * prof_unwind_recent_begin, one thread).
 */
prof_unwind_status_e prof_unwind_recent(const prof_unwind_table_t *t,
    prof_unwind_regs_t *regs, prof_unwind_recent_t *r, void **frames,
    int max, int *count);

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

#pragma GCC visibility pop


#endif /* PROF_UNWIND_WALK_H */
