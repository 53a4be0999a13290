/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The machine the worker runs on, as the unwinder and the signal path see
 * it: one pair of files per architecture under arch/, chosen here.
 *
 * Each architecture provides, as constants and static inline functions
 * (the signal handler calls nothing out of line for them):
 *
 * arch/<arch>.h, the machine:
 * - prof_arch_context_regs(uc, &pc, &sp, &fp, &aux, &lr): where the code
 *   a signal interrupted was, from its ucontext_t: its auxiliary
 *   register's value, and its link register's (0 without one);
 * - prof_arch_strip_pc(pc): a code address without what the CPU adds to
 *   return addresses (AArch64's pointer authentication signature);
 * - prof_arch_ticks(): the cycle counter that splits wall time
 *   (sampler.h), cheap and monotonic on one core;
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
 * arch/<arch>_luajit.h, LuaJIT 2.1 (GC64) on that machine:
 * - LJL_CF_L, LJL_CF_PC, LJL_CF_PREV: the VM's C frame (lj_frame.h);
 * - prof_arch_lj_interp_regs(uc, &base, &pc): the interpreter's BASE and
 *   PC registers in a signal's context;
 * - prof_arch_lj_kept_base(uc, vm_fp): BASE where the interpreter keeps
 *   it while C code it called runs;
 * - prof_arch_lj_vm_return(uc, sp, &ra, &ret_sp): where code the VM
 *   called returns when interrupted at sp before it pushed anything (a
 *   subroutine of the VM, which keeps no frame): its return address, and
 *   the sp of its caller, the VM's C frame.
 *
 * The walk itself assumes 64-bit words (LP64) and a stack that grows
 * down.
 *
 * Included by worker/ code, the signal handler's too: all of it is
 * async-signal-safe, nothing blocks or allocates. Includers define
 * _GNU_SOURCE (the registers' names in ucontext_t).
 */

#ifndef PROF_ARCH_H
#define PROF_ARCH_H


#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before any include to use worker/arch.h"
#endif

#if defined(__x86_64__)

#include "worker/arch/x86_64.h"
#include "worker/arch/x86_64_luajit.h"

#elif defined(__aarch64__)

#include "worker/arch/aarch64.h"
#include "worker/arch/aarch64_luajit.h"

#else

#error "this architecture is not supported yet"

#endif


#endif /* PROF_ARCH_H */
