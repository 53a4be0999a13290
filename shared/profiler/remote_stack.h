/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The stack of a worker's thread blocked in a system call, read from its
 * profiler process without interrupting it (a signal would end a sleep or
 * a poll early, EINTR): its registers at the call from
 * /proc/PID/task/TID/syscall (its stack and program counters), its stack
 * from there up with process_vm_readv (at most PROF_REMOTE_STACK_BYTES),
 * walked on that copy with the worker's unwind table
 * (common/unwind_walk.h): the one the profiler process was forked with,
 * at the same address in its memory, else a copy of the worker's current
 * one. The wall time since the worker's last account is accounted here,
 * as the signal handler does for the stack it is asked for: a claim the
 * worker's next account starts from (channel/sampler_state.h).
 *
 * Native frames only: a frame pointer the system call's registers do not
 * give is found where a callee saved it, else the walk scans the stack;
 * LuaJIT's frames, which the handler reads from LuaJIT's state, are not
 * read (they are in the worker's memory, object by object). A request's
 * tag is the one the worker's own samples took, when one is pending for
 * what runs; a tag is the worker's to take.
 *
 * The worker allows its profiler process to read it (worker/profiler.c:
 * PR_SET_PTRACER, for Yama); a worker that is not dumpable, or a
 * ptrace_scope of 2 or 3, refuses: -EPERM or -EACCES, and the sampler
 * thread asks for the stack with the signal (ring_drain.h).
 *
 * Threading: the sampler thread only, in the process that drains the
 * sampler (the profiler process, forked by the worker; or the sampled
 * process itself, in tests). It reads the sampler's shared state and
 * writes only claims and the account word (sampler_state.h).
 * Memory: the reader owns its descriptors and buffers (the stack's copy;
 * the unwind table's copy, made when the worker replaced the table it
 * was forked with, and kept until it replaces it again).
 */

#ifndef PROF_REMOTE_STACK_H
#define PROF_REMOTE_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "common/unwind_walk.h"
#include "channel/sampler_state.h"


/* The stack read above sp, at most (a scan looks 4 KB above a frame). */
#define PROF_REMOTE_STACK_BYTES  (128 * 1024)

/* The unwind table copied, at most (Debian's nginx with the lua module:
   about 3 MB). */
#define PROF_REMOTE_TABLE_BYTES  (256 * 1024 * 1024)


typedef struct prof_remote_stack_s  prof_remote_stack_t;


/* A thread's registers at a system call, as /proc/PID/task/TID/syscall
   gives them. */
typedef struct {
    long           nr;              /* the call; -1: blocked outside one
                                       (a page fault, a stop) */
    uint64_t       args[6];         /* (none when nr is -1) */
    uint64_t       sp;
    uint64_t       pc;
} prof_syscall_regs_t;


/*
 * The text of /proc/PID/task/TID/syscall (length bytes, not terminated):
 * "NR ARG1 .. ARG6 SP PC", or "-1 SP PC" blocked outside a call, numbers
 * in decimal or 0x hexadecimal. 0; -EAGAIN when it says "running" (the
 * thread is on a CPU); -EINVAL when it says anything else.
 */
int prof_syscall_regs_parse(const char *text, size_t length,
    prof_syscall_regs_t *regs);

/*
 * The walk of a copy of a stack: copy holds the stack's [low, low +
 * size), the thread stopped at pc (an instruction, not a return address)
 * with sp, nothing else known. At most max + 1 frames into frames (leaf
 * first), as the signal handler writes them into a slot: a walk that
 * could not finish ends with PROF_FRAME_UNWIND_STOP (*stop: why, the
 * walk's status; else 0), one cut at max with PROF_FRAME_TRUNCATED;
 * *scanned: callers found by scanning. Reads nothing outside the copy and
 * the table. The number of frames written.
 */
unsigned prof_remote_stack_walk(const prof_unwind_table_t *t, uintptr_t pc,
    uintptr_t sp, const void *copy, uintptr_t low, size_t size,
    uint64_t *frames, unsigned max, uint32_t *stop, uint32_t *scanned);

/* A reader of s's sampled thread: 0 or -ENOMEM. Opens nothing yet. */
int prof_remote_stack_create(prof_remote_stack_t **reader, prof_sampler_t *s);
void prof_remote_stack_free(prof_remote_stack_t *r);

/*
 * The sampled thread's stack, read now, into slot (s->slot_size bytes) as
 * the handler fills a PROF_SLOT_STACK slot: its frames, its request's
 * tag, its turn, and the wall time since the last account, which is
 * accounted (a claim); *from_ns: where that time starts; *phase: the
 * phase of the loop's turn then (PROF_PHASE_*). Returns 0;
 * -EAGAIN: the thread is not blocked in a system call (it runs: "running",
 * or it moved while it was read; the signal may ask); -EBUSY: the thread
 * accounted meanwhile (it ran: nothing to take); -EPERM, -EACCES: the
 * worker does not allow the read; -ERANGE: its stack pointer is not in
 * its stack (another stack; an emulator's registers, under qemu-user);
 * -ENOENT: no unwind table, or the thread is gone; other -errno.
 */
int prof_remote_stack_read(prof_remote_stack_t *r, prof_slot_t *slot,
    int64_t *from_ns, uint32_t *phase);


#endif /* PROF_REMOTE_STACK_H */
