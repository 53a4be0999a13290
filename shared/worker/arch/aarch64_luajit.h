/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * LuaJIT 2.1 (always GC64) on AArch64: the C frame an activation of the VM
 * keeps on the native stack (lj_frame.h's CFRAME_OFS_*, the same in
 * Debian's libluajit2 and OpenResty's LuaJIT) and the registers the
 * interpreter keeps its BASE and PC in (vm_arm64.dasc).
 *
 * Included through worker/arch.h only (lua_layout.h), from files that
 * define _GNU_SOURCE. Constants and static inline functions: callable from
 * the signal handler (signal_lua.c) and from the layout's check (lua.c).
 */

#ifndef PROF_ARCH_AARCH64_LUAJIT_H
#define PROF_ARCH_AARCH64_LUAJIT_H

#include <stdint.h>
#include <ucontext.h>


/* The C frame of an activation of the VM (L->cframe points to it). */
#define LJL_CF_L                16
#define LJL_CF_PC               8
#define LJL_CF_PREV             0


/*
 * The frame pointer of the VM's frame at its C frame cf, for the walk to
 * go on from there: the VM's unwind rule finds its CFA from x29 (x29 +
 * 16), which its entries point to the frame record {x29, x30} they save
 * at the top of the C frame (CFRAME_SIZE 208: at cf + 192), and which a
 * trace may use as it likes.
 */
#define LJL_CF_FRAME_RECORD     192

static inline uintptr_t
prof_arch_lj_cframe_fp(uintptr_t cf, uintptr_t fp)
{
    (void) fp;

    return cf + LJL_CF_FRAME_RECORD;
}


/*
 * The interpreter's BASE (x19) and PC (x21) when a signal interrupted it,
 * from the signal's context.
 */
static inline void
prof_arch_lj_interp_regs(const ucontext_t *uc, uintptr_t *base,
    uintptr_t *pc)
{
    *base = (uintptr_t) uc->uc_mcontext.regs[19];
    *pc = (uintptr_t) uc->uc_mcontext.regs[21];
}


/*
 * The interpreter's BASE while C code it called runs, as far as registers
 * tell: it stays in x19, callee-saved, which the code called may have
 * saved and reused; the walk does not follow where (0: unknown, the
 * caller takes L->base).
 */
static inline uintptr_t
prof_arch_lj_kept_base(const ucontext_t *uc, uintptr_t vm_fp)
{
    (void) uc;
    (void) vm_fp;

    return 0;
}


/*
 * Where code that the VM called on its C frame returns, interrupted before
 * it saved anything: a call leaves the return address in x30, and the
 * stack as it was. *ra: that return address, *ret_sp: sp.
 */
static inline void
prof_arch_lj_vm_return(const ucontext_t *uc, uintptr_t sp, uintptr_t *ra,
    uintptr_t *ret_sp)
{
    *ra = prof_arch_strip_pc((uintptr_t) uc->uc_mcontext.regs[30]);
    *ret_sp = sp;
}


#endif /* PROF_ARCH_AARCH64_LUAJIT_H */
