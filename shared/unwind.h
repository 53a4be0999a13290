/*
 * Unwind tables: the call frame information (.eh_frame) of every loaded
 * object, turned ahead of time into sorted rows "from this pc on, the
 * caller's frame is at rsp/rbp + N, rbp was saved at CFA + M", so that a
 * signal handler walks a stack with a table lookup and two loads a frame:
 * no DWARF interpretation, no locks, no allocation in the handler.
 *
 * x86-64 only. Frames whose rules the rows cannot express (a CFA computed
 * by an expression, a return address not at CFA - 8) and code outside every
 * object known when the table was built stop the walk with a status that
 * says so; the caller may then use a general unwinder.
 *
 * Threading: a table's rows are immutable once built; prof_unwind reads
 * them from a signal handler while another thread may build the next
 * table. prof_unwind also keeps a cache of rows in the table: one thread
 * at a time may walk with a table. Building and freeing are not
 * async-signal-safe.
 * Memory: a table is one allocation per object plus the table itself, all
 * owned by the table.
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
    uintptr_t  fp;              /* rbp */
    uintptr_t  stack_low;       /* the thread's stack: [low, high) */
    uintptr_t  stack_high;
} prof_unwind_regs_t;


/* The objects loaded now (dl_iterate_phdr). NULL when out of memory. */
prof_unwind_table_t *prof_unwind_table_build(void);
void prof_unwind_table_free(prof_unwind_table_t *t);

/* Bytes the table holds, and how many objects it covers. */
size_t prof_unwind_table_bytes(const prof_unwind_table_t *t);
unsigned prof_unwind_table_objects(const prof_unwind_table_t *t);

/* dl_iterate_phdr's count of objects ever loaded, when the table was
   built: a larger count now means the table may miss some. */
unsigned long long prof_unwind_table_loads(const prof_unwind_table_t *t);
unsigned long long prof_unwind_loads_now(void);

/*
 * Async-signal-safe. Writes the return addresses of the stack described
 * by regs, innermost first (frames[0] = regs->pc), at most max of them;
 * *count is how many were written.
 */
prof_unwind_status_e prof_unwind(const prof_unwind_table_t *t,
    const prof_unwind_regs_t *regs, void **frames, int max, int *count);


#endif /* PROF_UNWIND_H */
