/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The machine the worker runs on, as the unwinder and the signal path see
 * it: one pair of files per architecture under arch/, chosen here.
 *
 * Each architecture provides, as constants and static inline functions
 * (the signal handler calls nothing out of line for them):
 *
 * arch/<arch>.h, the machine:
 * - prof_arch_context_regs(uc, &pc, &sp, &fp, &aux): where the code a
 *   signal interrupted was, from its ucontext_t, and its auxiliary
 *   register's value;
 * - prof_arch_ticks(): the cycle counter that splits wall time
 *   (sampler.h), cheap and monotonic on one core;
 * - PROF_ARCH_DW_SP, PROF_ARCH_DW_FP: the DWARF numbers of the stack and
 *   frame pointer registers, as call frame information names them;
 * - PROF_ARCH_DW_AUX: the DWARF number of a callee-saved register some
 *   code defines its CFA from besides those two (the walk follows where
 *   frames save it), -1 where none;
 * - PROF_ARCH_RA_SLOT: where the return address lies, in words from the
 *   CFA; the unwind table keeps rows only for frames that keep it there;
 * - PROF_ARCH_RED_ZONE: bytes below sp a leaf may use, which signal
 *   delivery leaves alone;
 * - PROF_ARCH_PUSHED_FP_SLOT: where a prologue saves its caller's frame
 *   pointer, in words from its return address (the stack scan's guess).
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
 * The walk itself assumes 64-bit words (LP64), a stack that grows down,
 * and a return address in the stack of every frame it steps over (a link
 * register holding a leaf's is not read).
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

#else

#error "this architecture is not supported yet"

#endif


#endif /* PROF_ARCH_H */
