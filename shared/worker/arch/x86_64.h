/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * x86-64 (Linux, System V ABI) as the unwinder and the signal path see it:
 * the registers of interrupted code, their DWARF numbers, where a call
 * leaves the return address and a prologue the frame pointer, and the
 * cycle counter.
 *
 * Included through worker/arch.h only, from files that define _GNU_SOURCE
 * (REG_RIP and the like). Constants and static inline functions: callable
 * from the signal handler (async-signal-safe, nothing blocks, allocates or
 * is called out of line) and from anywhere else.
 */

#ifndef PROF_ARCH_X86_64_H
#define PROF_ARCH_X86_64_H

#include <stdint.h>
#include <ucontext.h>


/*
 * DWARF register numbers (the psABI's) of the stack pointer (rsp) and the
 * frame pointer (rbp). The return address's column is the one each CIE
 * names (16 here).
 */
#define PROF_ARCH_DW_SP          7
#define PROF_ARCH_DW_FP          6

/*
 * A call pushes the return address: it lies in the word below the CFA
 * (the stack pointer before the call), in every frame.
 */
#define PROF_ARCH_RA_SLOT        (-1)

/* Bytes below sp a leaf may use, which signal delivery leaves alone. */
#define PROF_ARCH_RED_ZONE       128

/*
 * A function that keeps a frame pointer pushes its caller's first thing
 * ("push %rbp"): in the word below its return address.
 */
#define PROF_ARCH_PUSHED_FP_SLOT (-1)


/* Where the code a signal interrupted was: rip, rsp and rbp. */
static inline void
prof_arch_context_regs(const ucontext_t *uc, uintptr_t *pc, uintptr_t *sp,
    uintptr_t *fp)
{
    *pc = uc->uc_mcontext.gregs[REG_RIP];
    *sp = uc->uc_mcontext.gregs[REG_RSP];
    *fp = uc->uc_mcontext.gregs[REG_RBP];
}


/* The time stamp counter (rdtsc): ticks of the core that reads it. */
static inline uint64_t
prof_arch_ticks(void)
{
    return __builtin_ia32_rdtsc();
}


#endif /* PROF_ARCH_X86_64_H */
