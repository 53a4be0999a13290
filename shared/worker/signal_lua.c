/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The signal path's Lua part (signal_lua.h): LuaJIT's frames spliced into
 * a sample's native ones, in the SIGPROF handler. This file finds the
 * activations of the VM on the native stack (their C frames, the running
 * one's top frame from the registers or its state, a coroutine's resumer)
 * and puts each one's Lua frames (signal_lua_walk.c) in place of the VM's
 * own frame.
 *
 * Async-signal-safe only, like signal_path.c (CI checks the handler's
 * objects). Memory outside the thread's stack (LuaJIT's states, stacks,
 * functions, prototypes, strings) is read under a guard (lua_guard.h): a
 * SIGSEGV there jumps back here and the walk ends with a marker. Every
 * step is checked against what LuaJIT keeps consistent (a frame's function
 * is a function, a Lua frame's link is a pc inside its caller's bytecode,
 * just past a call), so that a frame is right or absent.
 *
 * The layout is LuaJIT 2.1's in GC64 mode (lj_obj.h, lj_frame.h; the
 * machine's C frame and interpreter registers: arch.h), checked at start
 * by prof_lua_find (lua.c).
 */

#define _GNU_SOURCE

#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <ucontext.h>

#include "channel/lua_frames.h"
#include "channel/sample.h"
#include "common/unwind_walk.h"
#include "worker/lua_guard.h"
#include "worker/lua_layout.h"
#include "worker/signal_lua.h"
#include "worker/signal_lua_walk.h"


/*
 * The interpreter's code of the sampler's table, copied when the table
 * became the sampler's (prof_lua_code_keep): a sample without Lua reads
 * the table's page for nothing else.
 */
static const prof_lua_t  *prof_lua_code_of;
static uintptr_t          prof_lua_code_start;
static uintptr_t          prof_lua_code_end;


void
prof_lua_code_keep(const prof_lua_t *lua)
{
    prof_lua_code_start = lua->vm.vm_start;
    prof_lua_code_end = lua->vm.vm_end;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    prof_lua_code_of = lua;
}


PROF_SIGNAL_TEXT static int
prof_lua_in_vm(const prof_lua_t *lua, uint64_t pc)
{
    if (lua == prof_lua_code_of) {
        return pc >= prof_lua_code_start && pc < prof_lua_code_end;
    }

    return pc >= lua->vm.vm_start && pc < lua->vm.vm_end;
}


PROF_SIGNAL_TEXT int
prof_lua_may_run(const prof_lua_t *lua, const uint64_t *frames,
    const prof_lua_where_t *where, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (prof_lua_in_vm(lua, frames[i]) || where[i].unknown) {
            return 1;
        }
    }

    /* Without the interpreter's code, no frame tells one apart. */
    return (lua == prof_lua_code_of)
           ? prof_lua_code_end <= prof_lua_code_start
           : lua->vm.vm_end <= lua->vm.vm_start;
}


/*
 * Where the native walk goes on when the signal interrupted code that the
 * interpreter called on its C frame, before that code pushed anything:
 * from its return address, on the C frame of the running state's
 * activation. That code is one of the interpreter's own subroutines
 * (vm_mod for %, vm_floor for math.floor), which keep no frame and leave
 * BASE and PC in their registers, and which the VM's unwind rule (one for
 * all its code, that of code on its C frame) reads 8 bytes off; or a PLT
 * entry on its way to libm, whose rule the table does not keep (a scan
 * finds the return address, not the frame pointer, where the interpreter
 * keeps BASE around such calls). *pc and *sp set to that return address
 * and the C frame, and PROF_LUA_CALLED_VM: the VM's own code, its frame
 * left out as the VM's frames are; PROF_LUA_CALLED_CODE: other code, its
 * frame kept, with the frame pointer as it is (nothing pushed, nothing
 * saved). 0, unchanged: neither (the return address not in the VM, or
 * not returning to the C frame: code C code called, or the VM on its
 * frame, whose first slot may hold a return address left there).
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) int
prof_lua_vm_return(prof_lua_t *lua, const ucontext_t *uc, uintptr_t *pc,
    uintptr_t *sp, uintptr_t stack_low, uintptr_t stack_high)
{
    int        called;
    uintptr_t  L, cf, ra, ret;

    if (lua == NULL || uc == NULL || (*sp & 7) != 0 || *sp < stack_low
        || *sp + 8 > stack_high)
    {
        return 0;
    }

    prof_arch_lj_vm_return(uc, *sp, &ra, &ret);

    if (!prof_lua_in_vm(lua, ra) || ret < stack_low || ret >= stack_high
        || !prof_lua_guarded())
    {
        return 0;
    }

    prof_lua_guard_reading = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (sigsetjmp(prof_lua_guard_jump, 0)) {
        /* A fault: as it was; the splice reads the same words. */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        return 0;
    }

    L = PROF_LUA_RD64(lua->vm.g + LJL_G_CUR_L) & LJL_GCVMASK;
    cf = (L != 0) ? (PROF_LUA_RD64(L + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK) : 0;

    prof_lua_guard_reading = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (cf != ret) {
        return 0;
    }

    called = prof_lua_in_vm(lua, *pc) ? PROF_LUA_CALLED_VM
                                      : PROF_LUA_CALLED_CODE;
    *pc = ra;
    *sp = cf;

    return called;
}


PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) int
prof_lua_trace_runs(prof_lua_t *lua)
{
    int  trace;

    if (lua == NULL) {
        return 0;
    }

    if (!prof_lua_guarded()) {
        return 1;                       /* unknown: as if one ran */
    }

    prof_lua_guard_reading = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (sigsetjmp(prof_lua_guard_jump, 0)) {
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        return 1;
    }

    trace = (int32_t) PROF_LUA_RD32(lua->vm.g + LJL_G_VMSTATE) >= 0
            || PROF_LUA_RD64(lua->vm.g + LJL_G_JIT_BASE) != 0;

    prof_lua_guard_reading = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    return trace;
}


/*
 * The C frame of the activation of lua's VM that runs (its running
 * state's L->cframe, which names that state at LJL_CF_L), when it lies on
 * this stack at or above sp, else 0; *trace: whether that activation runs
 * a trace, or code a trace called (its state says so; 1 when the state
 * cannot be read).
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) uintptr_t
prof_lua_cframe(prof_lua_t *lua, uintptr_t sp, uintptr_t stack_low,
    uintptr_t stack_high, int *trace)
{
    uintptr_t  L, cf;

    *trace = 0;

    if (lua == NULL || !prof_lua_guarded()) {
        return 0;
    }

    prof_lua_guard_reading = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (sigsetjmp(prof_lua_guard_jump, 0)) {
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        *trace = 1;
        return 0;
    }

    L = PROF_LUA_RD64(lua->vm.g + LJL_G_CUR_L) & LJL_GCVMASK;
    cf = (L != 0) ? (PROF_LUA_RD64(L + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK) : 0;
    *trace = (int32_t) PROF_LUA_RD32(lua->vm.g + LJL_G_VMSTATE) >= 0
             || PROF_LUA_RD64(lua->vm.g + LJL_G_JIT_BASE) != 0;

    prof_lua_guard_reading = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    /* On this stack, where the walk reads: the state it names, L. */
    if (cf < sp || cf < stack_low || cf >= stack_high || (cf & 7) != 0
        || stack_high - cf < LJL_CF_L + 8
        || (*(const uintptr_t *) (cf + LJL_CF_L) & LJL_GCVMASK) != L)
    {
        return 0;
    }

    return cf;
}


/*
 * The C frame of the activation that cf's (on this stack) was entered
 * from, on the same state's chain: above cf, else 0 (a coroutine's first,
 * whose resumer the splice finds from the native frames).
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) uintptr_t
prof_lua_cframe_prev(uintptr_t cf, uintptr_t stack_high)
{
    uintptr_t  prev;

    if (cf == 0 || stack_high - cf < LJL_CF_PREV + 8) {
        return 0;
    }

    prev = *(const uintptr_t *) (cf + LJL_CF_PREV) & LJL_CFRAME_RAWMASK;

    return (prev > cf && prev < stack_high && (prev & 7) == 0) ? prev : 0;
}


PROF_SIGNAL_TEXT int
prof_lua_astray(const prof_lua_t *lua, const uint64_t *frames,
    const prof_lua_where_t *where, int from, int n, uintptr_t cf, int trace,
    int *at)
{
    int  i, vm;

    *at = -1;

    for (i = from; i < n; i++) {
        vm = prof_lua_in_vm(lua, frames[i]);

        if (where[i].sp == cf && vm) {
            *at = i;
            return -1;
        }

        if (where[i].sp >= cf || (vm && trace)) {
            return i;
        }
    }

    return -1;
}


PROF_SIGNAL_TEXT void
prof_lua_cframe_regs(const prof_lua_t *lua, uintptr_t cf,
    prof_unwind_regs_t *regs)
{
    regs->pc = (lua == prof_lua_code_of) ? prof_lua_code_start
                                         : lua->vm.vm_start;
    regs->fp = prof_arch_lj_cframe_fp(cf, regs->fp);
    regs->sp = cf;
    regs->aux = 0;
    regs->lr = 0;
    regs->caller = 0;
}


/*
 * The interpreter in a return, between the first result stored over the
 * returning frame's function slot and BASE moved down to the caller's
 * frame (a fast function's ->fff_res, BC_RET*, a C function's results
 * through ->vm_returnc, whose copy advances BASE): its PC is already the
 * caller's, past the call instruction, whose A places the returning
 * frame (at base, or at L->base for a C function) in the caller's. The
 * caller's frame (its base - 1) when it holds a Lua function whose
 * bytecode pc is in; 0: not such a return.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uintptr_t
prof_lua_returning(uintptr_t L, uintptr_t base, uintptr_t pc)
{
    int        i;
    uint32_t   ins;
    uint64_t   fv;
    uintptr_t  callee, caller, fn, pt;

    if (pc < 4096 || (pc & 3) != 0 || pc > LJL_GCVMASK) {
        return 0;                       /* not a pc: the register reused */
    }

    ins = PROF_LUA_RD32(pc - 4);
    if (!PROF_LUA_CALLS(ins)) {
        return 0;
    }

    for (i = 0; i < 2; i++) {
        callee = (i == 0) ? base : PROF_LUA_RD64(L + LJL_L_BASE);
        caller = callee - 16 - 8 * (uintptr_t) LJL_BC_A(ins);

        if ((callee & 7) != 0 || caller < 24 || caller >= callee) {
            continue;
        }

        fv = PROF_LUA_RD64(caller - 16);
        fn = fv & LJL_GCVMASK;

        if ((int64_t) fv >> 47 != LJL_TFUNC
            || PROF_LUA_RD8(fn + LJL_GCT) != LJL_GCT_FUNC
            || PROF_LUA_RD8(fn + LJL_FN_FFID) != LJL_FF_LUA)
        {
            continue;
        }

        pt = PROF_LUA_RD64(fn + LJL_FN_PC) - LJL_PT_SIZE;

        if (PROF_LUA_PC_IN(pt, pc)) {
            return caller - 8;
        }
    }

    return 0;
}


/*
 * Where the innermost activation of L (the one running) has its top
 * frame: *frame (base - 1) and *pc (0: unknown); -1 when it cannot be
 * told. cf: the activation's C frame; i: the native frame of the VM for
 * it, or -1.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static int
prof_lua_top(prof_lua_t *lua, const ucontext_t *uc, uintptr_t L,
    const uint64_t *frames, const prof_lua_where_t *where, int n,
    uintptr_t cf, uintptr_t *frame, uintptr_t *pc, uintptr_t *alt,
    uintptr_t *alt_pc)
{
    int        i;
    int32_t    state;
    uintptr_t  base, fp, stack;

    state = (int32_t) PROF_LUA_RD32(lua->vm.g + LJL_G_VMSTATE);
    *pc = 0;
    *alt = 0;
    *alt_pc = 0;

    if (state >= 0) {
        /* A trace runs: the base it runs on (its inlined calls unseen). */
        base = PROF_LUA_RD64(lua->vm.g + LJL_G_JIT_BASE);

    } else if (state == LJL_VMST_INTERP && n > 0
               && prof_lua_in_vm(lua, frames[0]) && where[0].sp == cf)
    {
        /* The interpreter: its BASE and PC registers; in a return, the
           caller's frame from its PC where BASE's frame is half gone. */
        prof_arch_lj_interp_regs(uc, &base, pc);
        *alt = prof_lua_returning(L, base, *pc);
        *alt_pc = (*alt != 0) ? *pc : 0;

    } else if (state == LJL_VMST_INTERP) {
        /*
         * C code the interpreter called: it keeps BASE in a register
         * around calls that do not take L (libm's from math.*; on x86-64
         * rbp, the VM frame's frame pointer), else in L->base.
         */
        fp = 0;
        for (i = 0; i < n; i++) {
            if (where[i].sp == cf && prof_lua_in_vm(lua, frames[i])) {
                fp = prof_arch_lj_kept_base(uc, where[i].fp);
                break;
            }
        }

        base = PROF_LUA_RD64(L + LJL_L_BASE);
        stack = PROF_LUA_RD64(L + LJL_L_STACK);

        if (fp >= stack + 16 && (fp & 7) == 0 && fp != base
            && fp < stack + (uintptr_t) PROF_LUA_RD32(L + LJL_L_STACKSIZE) * 8)
        {
            *alt = base - 8;
            base = fp;
        }

    } else {
        /* A C function, the collector, the trace compiler: L->base. */
        base = PROF_LUA_RD64(L + LJL_L_BASE);
    }

    if (base == 0 || (base & 7) != 0) {
        return -1;
    }

    *frame = base - 8;
    return 0;
}


/*
 * A coroutine resumed from Lua (coroutine.resume, a coroutine.wrap
 * function) runs on a chain of C frames of its own, its first linked to
 * none: its resumer's C frame is where the native frame right after the
 * coroutine's VM frame (native frame i) runs, if that frame is in the VM,
 * is the current C frame of a state whose top frame is one of those fast
 * functions, and that function resumes L (the thread its argument or a
 * wrap function's upvalue holds). That C frame, or 0.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uintptr_t
prof_lua_resumer(const prof_lua_t *lua, const uint64_t *frames,
    const prof_lua_where_t *where, int i, int n, uintptr_t L)
{
    uint8_t    ffid;
    uint64_t   fv, co;
    uintptr_t  cf, rL, base, fn;

    if ((lua->vm.resume_ffid[0] == 0 && lua->vm.resume_ffid[1] == 0)
        || i >= n || !prof_lua_in_vm(lua, frames[i])
        || (where[i].sp & 7) != 0)
    {
        return 0;
    }

    cf = where[i].sp;
    rL = PROF_LUA_RD64(cf + LJL_CF_L) & LJL_GCVMASK;

    if (rL == 0 || rL == L || PROF_LUA_RD8(rL + LJL_GCT) != LJL_GCT_THREAD
        || (PROF_LUA_RD64(rL + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK) != cf)
    {
        return 0;
    }

    base = PROF_LUA_RD64(rL + LJL_L_BASE);
    if (base < 16 || (base & 7) != 0) {
        return 0;
    }

    fv = PROF_LUA_RD64(base - 16);
    fn = fv & LJL_GCVMASK;

    if ((int64_t) fv >> 47 != LJL_TFUNC
        || PROF_LUA_RD8(fn + LJL_GCT) != LJL_GCT_FUNC)
    {
        return 0;
    }

    ffid = PROF_LUA_RD8(fn + LJL_FN_FFID);

    if (ffid != 0 && ffid == lua->vm.resume_ffid[0]) {
        co = PROF_LUA_RD64(base);       /* coroutine.resume(co, ...) */

    } else if (ffid != 0 && ffid == lua->vm.resume_ffid[1]) {
        co = PROF_LUA_RD64(fn + LJL_FN_UPVALUE0);

    } else {
        return 0;
    }

    return ((int64_t) co >> 47 == LJL_TTHREAD && (co & LJL_GCVMASK) == L)
           ? cf : 0;
}


/*
 * LuaJIT's frames into frames[] (n native ones, with where they were),
 * at most max in all: each activation of the VM, from the one running
 * out, replaces the VM's own frames for it. Returns the new count.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) int
prof_lua_splice(prof_lua_t *lua, const ucontext_t *uc, uint64_t *frames,
    const prof_lua_where_t *where, int n, int max, uintptr_t stack_low,
    uintptr_t stack_high)
{
    int              i, k, rc, trace;
    uint64_t         out[PROF_MAX_FRAMES_LIMIT + 1];
    int              start;
    uintptr_t        g, L, cf, cfL, prevL, frame, pc, cont, alt, alt_pc;
    prof_lua_walk_t  w;

    if (lua == NULL || n == 0 || !prof_lua_guarded()) {
        return n;
    }

    prof_lua_guard_reading = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (sigsetjmp(prof_lua_guard_jump, 0)) {
        /* A fault: the native frames as they were. */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        lua->faults++;
        lua->lost++;
        return n;
    }

    g = lua->vm.g;
    L = PROF_LUA_RD64(g + LJL_G_CUR_L) & LJL_GCVMASK;
    cf = (L != 0) ? (PROF_LUA_RD64(L + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK) : 0;

    /* No Lua running: nothing of it on this stack. */
    if (cf == 0 || cf < where[0].sp || cf >= stack_high || cf < stack_low) {
        prof_lua_guard_reading = 0;
        return n;
    }

    lua->walks++;
    /* On a trace: running it, or C code it called (the collector too). */
    trace = (int32_t) PROF_LUA_RD32(g + LJL_G_VMSTATE) >= 0
            || PROF_LUA_RD64(g + LJL_G_JIT_BASE) != 0;

    w.lua = lua;
    w.out = out;
    w.n = 0;
    w.max = max;

    i = 0;
    prevL = 0;
    cont = 0;

    for (k = 0; cf != 0 && k < PROF_LUA_ACTIVATIONS; k++) {
        if (cf < stack_low || cf >= stack_high || (cf & 7) != 0) {
            break;
        }

        cfL = PROF_LUA_RD64(cf + LJL_CF_L) & LJL_GCVMASK;

        /*
         * The native frames above the activation: kept, but for the VM's
         * own frame for it and, under a trace, the trace's machine code
         * (in no object the table knows).
         */
        for ( /* void */ ; i < n && where[i].sp <= cf; i++) {
            if ((where[i].sp == cf && prof_lua_in_vm(lua, frames[i]))
                || (k == 0 && trace && where[i].unknown))
            {
                continue;
            }
            if (w.n < max) {
                out[w.n++] = frames[i];
            }
        }

        alt = 0;
        alt_pc = 0;

        if (k == 0) {
            rc = (cfL == L) ? prof_lua_top(lua, uc, L, frames, where, n, cf,
                                           &frame, &pc, &alt, &alt_pc)
                            : -1;
        } else if (cfL == prevL && cont != 0) {
            frame = cont;
            pc = 0;
            rc = 0;
        } else {
            frame = PROF_LUA_RD64(cfL + LJL_L_BASE) - 8;
            pc = 0;
            rc = 0;
        }

        start = w.n;

        if (rc == 0) {
            rc = prof_lua_walk(&w, cfL, frame, pc, &cont);
        }

        if (rc != 0 && alt != 0) {
            w.n = start;
            rc = prof_lua_walk(&w, cfL, alt, alt_pc, &cont);
        }

        if (rc != 0) {
            lua->lost++;
            if (w.n < max) {
                out[w.n++] = PROF_FRAME_LUA_LOST;
            }
            cont = 0;
        }

        prevL = cfL;
        cf = PROF_LUA_RD64(cf + LJL_CF_PREV) & LJL_CFRAME_RAWMASK;

        if (cf == 0) {
            cf = prof_lua_resumer(lua, frames, where, i, n, cfL);
        }
    }

    prof_lua_guard_reading = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    for ( /* void */ ; i < n && w.n < max; i++) {
        out[w.n++] = frames[i];
    }

    memcpy(frames, out, w.n * sizeof(uint64_t));

    return w.n;
}
