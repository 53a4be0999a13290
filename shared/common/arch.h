/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The machine, as the unwinder sees it in both processes (the worker's
 * signal path, the profiler process's reads of a blocked worker's stack)
 * and as both read its cycle counter: one file per architecture under
 * arch/, chosen here. The worker's side adds LuaJIT's layout on that
 * machine (worker/arch.h).
 *
 * Each architecture provides, as constants and static inline functions
 * (the signal handler calls nothing out of line for them):
 * - prof_arch_context_regs(uc, &pc, &sp, &fp, &aux, &lr): where the code
 *   a signal interrupted was, from its ucontext_t: its auxiliary
 *   register's value, and its link register's (0 without one);
 * - prof_arch_strip_pc(pc): a code address without what the CPU adds to
 *   return addresses (AArch64's pointer authentication signature);
 * - prof_arch_ticks(): the cycle counter that splits wall time
 *   (sampler.h), cheap, monotonic on one core, the same counter in every
 *   process of the machine;
 * - PROF_ARCH_DW_SP, PROF_ARCH_DW_FP: the DWARF numbers of the stack and
 *   frame pointer registers, as call frame information names them;
 * - PROF_ARCH_DW_AUX (optional): the DWARF number of a callee-saved
 *   register some code defines its CFA from besides those two (the walk
 *   follows where frames save it);
 * - PROF_ARCH_DW_CFA_NEGATE_RA_STATE (optional): the vendor CFA opcode
 *   that toggles return address signing, which changes no rule;
 * - either PROF_ARCH_RA_SLOT: where every frame's return address lies,
 *   in words from the CFA (the unwind table keeps rows only for frames
 *   that keep it there); or PROF_ARCH_RA_IN_ROWS, PROF_ARCH_DW_LR and
 *   PROF_ARCH_RA_SLOT_GUESS: calls leave it in a link register, which a
 *   prologue saves where its row says (0: still in the register, the
 *   interrupted frame's only), and where the scan guesses it;
 * - PROF_ARCH_RED_ZONE: bytes below sp a leaf may use, which signal
 *   delivery leaves alone;
 * - PROF_ARCH_PUSHED_FP_SLOT: where a prologue saves its caller's frame
 *   pointer, in words from its return address (the stack scan's guess);
 * - PROF_ARCH_INSN_ALIGN, PROF_ARCH_CALL_MIN, PROF_ARCH_CALL_DIRECT,
 *   PROF_ARCH_CALL_INDIRECT, prof_arch_call_ends_at(): the call
 *   instructions that end just before an address (return sites and
 *   call-outs, unwind_build.c), and PROF_ARCH_PLT_BYTES,
 *   prof_arch_plt_entry(): a PLT entry's.
 *
 * The walk itself assumes 64-bit words (LP64) and a stack that grows
 * down.
 *
 * Included by the worker's code, the signal handler's too, and by the
 * profiler process's: all of it is async-signal-safe, nothing blocks or
 * allocates. Includers define _GNU_SOURCE (the registers' names in
 * ucontext_t).
 */

#ifndef PROF_COMMON_ARCH_H
#define PROF_COMMON_ARCH_H


#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before any include to use common/arch.h"
#endif

#if defined(__x86_64__)

#include "common/arch/x86_64.h"

#elif defined(__aarch64__)

#include "common/arch/aarch64.h"

#else

#error "this architecture is not supported yet"

#endif


#endif /* PROF_COMMON_ARCH_H */
