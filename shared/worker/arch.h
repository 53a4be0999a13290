/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The machine the worker runs on, as its signal path and the Lua walk see
 * it: the machine (common/arch.h: registers, frame rules, the cycle
 * counter) and LuaJIT on that machine, one file per architecture under
 * arch/, chosen here.
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
 * Included by worker/ code, the signal handler's too: all of it is
 * async-signal-safe, nothing blocks or allocates. Includers define
 * _GNU_SOURCE (the registers' names in ucontext_t).
 */

#ifndef PROF_ARCH_H
#define PROF_ARCH_H


#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before any include to use worker/arch.h"
#endif

#include "common/arch.h"

#if defined(__x86_64__)

#include "worker/arch/x86_64_luajit.h"

#elif defined(__aarch64__)

#include "worker/arch/aarch64_luajit.h"

#endif


#endif /* PROF_ARCH_H */
