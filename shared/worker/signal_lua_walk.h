/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * One activation of LuaJIT walked: what prof_lua_splice (signal_lua.c)
 * calls for each activation it finds on the native stack, in the SIGPROF
 * handler (and in the layout's check, lua.c, through it).
 *
 * Async-signal-safe; reads LuaJIT's memory, so the caller holds the fault
 * guard up (lua_guard.h: prof_lua_guard_reading, prof_lua_guard_jump).
 * Writes the frames into the caller's array and new functions into the
 * shared table (lua_frames.h); allocates nothing, blocks on nothing.
 */

#ifndef PROF_SIGNAL_LUA_WALK_H
#define PROF_SIGNAL_LUA_WALK_H

#include <stdint.h>

#include "channel/lua_frames.h"
#include "worker/lua_guard.h"
#include "worker/lua_layout.h"


/* Frames written so far into out, at most max. */
typedef struct {
    prof_lua_t  *lua;
    uint64_t    *out;
    int          n;
    int          max;
} prof_lua_walk_t;


/* Whether instruction ins calls: a frame returns just past it. */
#define PROF_LUA_CALLS(ins)                                                  \
    (LJL_BC_OP(ins) == LJL_BC_CALLM || LJL_BC_OP(ins) == LJL_BC_CALL        \
     || LJL_BC_OP(ins) == LJL_BC_ITERC || LJL_BC_OP(ins) == LJL_BC_ITERN)

/* Whether pc follows an instruction of prototype pt's bytecode, past its
   header (reads pt: under the guard). */
#define PROF_LUA_PC_IN(pt, pc)                                               \
    ((pc) >= (pt) + LJL_PT_SIZE + 8                                          \
     && (pc) <= (pt) + LJL_PT_SIZE                                           \
                + (uintptr_t) PROF_LUA_RD32((pt) + LJL_PT_SIZEBC) * 4)


/*
 * The Lua frames of one activation of L, from frame (base - 1 of the
 * innermost) down to where the activation was entered from C, leaf
 * first; pc: past the leaf's instruction (0: unknown). 0 with *cont the
 * frame below the C entry (0: the bottom), or -1: inconsistent.
 * Hidden from other objects: the splice calls it directly.
 */
__attribute__((visibility("hidden"))) int prof_lua_walk(prof_lua_walk_t *w,
    uintptr_t L, uintptr_t frame, uintptr_t pc, uintptr_t *cont);


#endif /* PROF_SIGNAL_LUA_WALK_H */
