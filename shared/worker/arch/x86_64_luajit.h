/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * LuaJIT 2.1 (GC64) on x86-64: the C frame an activation of the VM keeps
 * on the native stack (lj_frame.h's CFRAME_OFS_*) and the registers the
 * interpreter keeps its BASE and PC in (vm_x64.dasc).
 *
 * Included through worker/arch.h only (lua_layout.h), from files that
 * define _GNU_SOURCE. Constants and static inline functions: callable from
 * the signal handler (signal_lua.c) and from the layout's check (lua.c).
 */

#ifndef PROF_ARCH_X86_64_LUAJIT_H
#define PROF_ARCH_X86_64_LUAJIT_H

#include <stdint.h>
#include <ucontext.h>


/* The C frame of an activation of the VM (L->cframe points to it). */
#define LJL_CF_L                16
#define LJL_CF_PC               24
#define LJL_CF_PREV             32


/*
 * The frame pointer of the VM's frame at its C frame cf, for the walk to
 * go on from there: none the VM's unwind rule needs (its CFA is rsp +
 * CFRAME_SIZE, the caller's rbp saved in the frame), but rbp as the walk
 * left it below (fp: callee-saved, it is where the interpreter keeps BASE
 * around calls that do not take L, prof_arch_lj_kept_base).
 */
static inline uintptr_t
prof_arch_lj_cframe_fp(uintptr_t cf, uintptr_t fp)
{
    (void) cf;

    return fp;
}


/*
 * The interpreter's BASE (rdx) and PC (rbx) when a signal interrupted it,
 * from the signal's context.
 */
static inline void
prof_arch_lj_interp_regs(const ucontext_t *uc, uintptr_t *base,
    uintptr_t *pc)
{
    *base = (uintptr_t) uc->uc_mcontext.gregs[REG_RDX];
    *pc = (uintptr_t) uc->uc_mcontext.gregs[REG_RBX];
}


/*
 * The interpreter's BASE while C code it called runs, as far as registers
 * tell: around a call that does not take L (libm's functions from math.*)
 * it keeps BASE in rbp, callee-saved, which the native walk recovered as
 * the frame pointer of the VM's frame (vm_fp, 0: unknown). The caller
 * checks that it is a slot of L's stack. uc: the signal's context, NULL
 * outside a handler.
 */
static inline uintptr_t
prof_arch_lj_kept_base(const ucontext_t *uc, uintptr_t vm_fp)
{
    (void) uc;

    return vm_fp;
}


/*
 * Where code that the VM called on its C frame returns, interrupted before
 * it pushed anything: one of the interpreter's own subroutines, vm_mod
 * (the % of BC_MOD*), vm_floor and vm_ceil (math.floor, math.ceil), which
 * keep no frame of their own (the VM's call frame information, one rule
 * for all its code, does not tell) and move neither BASE (rdx) nor PC
 * (rbx); or a PLT entry, or a C function's first instruction. A call
 * pushes the return address: sp, the stack pointer where the signal
 * interrupted that code, is a word of the thread's stack (the caller
 * checks); *ra: the return address there, *ret_sp: sp once returned.
 * uc: the signal's context.
 */
static inline void
prof_arch_lj_vm_return(const ucontext_t *uc, uintptr_t sp, uintptr_t *ra,
    uintptr_t *ret_sp)
{
    (void) uc;

    *ra = *(const uintptr_t *) sp;
    *ret_sp = sp + 8;
}


#endif /* PROF_ARCH_X86_64_LUAJIT_H */
