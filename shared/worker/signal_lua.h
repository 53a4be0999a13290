/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The signal path's Lua part (signal_lua.c): LuaJIT's frames spliced into
 * a sample's native ones.
 *
 * Threading: the SIGPROF handler (signal_path.c), and the layout's check
 * on the worker's thread (lua.c); async-signal-safe. It reads LuaJIT's
 * memory under the fault guard (lua_guard.h), which the worker's thread
 * installs beforehand: without it, no Lua frames. Memory: writes the
 * caller's frames, and new functions into the shared table
 * (channel/lua_frames.h); allocates nothing.
 */

#ifndef PROF_SIGNAL_LUA_H
#define PROF_SIGNAL_LUA_H

#include <stdint.h>
#include <ucontext.h>

#include "channel/lua_frames.h"
#include "common/unwind_walk.h"


/* Hidden from other objects: the handler calls them directly. */
#pragma GCC visibility push(hidden)


/* Where a native frame was: its sp and frame pointer (rbp on x86-64;
   0: unknown), and whether its pc is in no object the unwind table knows
   (JIT code). */
typedef struct {
    uintptr_t       sp;
    uintptr_t       fp;
    uintptr_t       unknown;
} prof_lua_where_t;


/* What prof_lua_vm_return found the signal interrupted: code the VM called
   on its C frame, the VM's own or other (signal_lua.c says which). */
#define PROF_LUA_CALLED_VM      1
#define PROF_LUA_CALLED_CODE    2

/*
 * Before the native walk: where it goes on when the signal interrupted
 * code the interpreter called on its C frame before that code pushed
 * anything (its return address and the C frame into *pc and *sp), and
 * which code it was; 0, unchanged, when it was not such code.
 */
int prof_lua_vm_return(prof_lua_t *lua, const ucontext_t *uc, uintptr_t *pc,
    uintptr_t *sp, uintptr_t stack_low, uintptr_t stack_high);

/*
 * Whether a trace of lua's VM runs, or code it called (its state says
 * so): 1, and when it cannot be told (its state unreadable); 0 when none
 * does, or there is no VM (lua NULL).
 */
int prof_lua_trace_runs(prof_lua_t *lua);

/*
 * The running activation's C frame (L->cframe of the state running), the
 * frame of lj_vm_pcall, lj_vm_resume or lj_vm_cpcall whose one unwind
 * rule (libluajit's .eh_frame, for all the VM's code) holds there and
 * nowhere else: the native walk must pass through it, as the VM's frame
 * at exactly that sp, before it reaches any frame above it. Under a
 * trace, whose machine code no object holds and whose stack is full of
 * words left by earlier calls, the walk goes on from it instead of
 * scanning.
 *
 * prof_lua_cframe: that C frame when it lies on this stack at or above sp
 * (else 0), and whether a trace runs (*trace); prof_lua_cframe_prev: the
 * one on the same state's chain above cf (nested calls into the VM), else
 * 0; prof_lua_astray: the first of native frames [from, n) (with where
 * they were) that the walk cannot have right while it has not passed cf
 * (at or above cf before the VM's frame at cf, or, under a trace (trace),
 * the VM's code below cf, whose rule does not hold there: its exit
 * handler), or -1, and *at the VM's frame at cf if among them, else -1;
 * prof_lua_cframe_regs: regs set to the VM's frame at cf, for the walk to
 * go on from.
 */
uintptr_t prof_lua_cframe(prof_lua_t *lua, uintptr_t sp, uintptr_t stack_low,
    uintptr_t stack_high, int *trace);
uintptr_t prof_lua_cframe_prev(uintptr_t cf, uintptr_t stack_high);
int prof_lua_astray(const prof_lua_t *lua, const uint64_t *frames,
    const prof_lua_where_t *where, int from, int n, uintptr_t cf, int trace,
    int *at);
void prof_lua_cframe_regs(const prof_lua_t *lua, uintptr_t cf,
    prof_unwind_regs_t *regs);

/*
 * lua's interpreter's code kept for the handler, which then reads lua's
 * memory only in samples with Lua frames; on the sampled thread as lua
 * becomes the sampler's (worker/signal_prepare.c), before its handler
 * walks Lua. Not for the handler.
 */
void prof_lua_code_keep(const prof_lua_t *lua);

/*
 * Whether native frames (n, with where they were) may hold an activation
 * of lua's VM: one of them is in its code, or in code no object holds (a
 * trace's), or its code is not known. Reads nothing of LuaJIT's.
 */
int prof_lua_may_run(const prof_lua_t *lua, const uint64_t *frames,
    const prof_lua_where_t *where, int n);

/*
 * LuaJIT's frames into frames[] (n native ones, with where they were), at
 * most max in all: each activation of the VM, from the one running out,
 * replaces the VM's own frames for it, callers below callees. A fault or
 * an inconsistency ends the Lua part with PROF_FRAME_LUA_LOST (counted).
 * Returns the new count.
 */
int prof_lua_splice(prof_lua_t *lua, const ucontext_t *uc, uint64_t *frames,
    const prof_lua_where_t *where, int n, int max, uintptr_t stack_low,
    uintptr_t stack_high);


#pragma GCC visibility pop


#endif /* PROF_SIGNAL_LUA_H */
