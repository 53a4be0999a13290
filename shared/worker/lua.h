/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * LuaJIT found in the worker and its layout checked (lua.c), for the
 * handler to splice its frames (signal_lua.h).
 *
 * Threading: the worker's thread, outside the handler, once prof_start
 * has forked the profiler process (module/ngx_http_profiling_lua.c). It
 * runs Lua code in the lua module's state and installs the fault guard
 * (lua_guard.h) for the check's walks, removing it after. What it found
 * goes to the profiler process through the shared table
 * (prof_set_lua_vm, worker/profiler.h).
 * Memory: vm is the caller's; the check's own table is freed before it
 * returns.
 */

#ifndef PROF_LUA_H
#define PROF_LUA_H

#include <stddef.h>

#include "channel/lua_frames.h"


/*
 * Finds LuaJIT in the process from a lua_State of it (the lua module's),
 * checks its layout (LuaJIT 2.1, GC64, x86-64: worker/lua_layout.h) by
 * running a known Lua function once and walking it, and fills vm. 0, or
 * -1 with why in err.
 */
int prof_lua_find(void *lua_state, prof_lua_vm_t *vm, char *err,
    size_t size);


#endif /* PROF_LUA_H */
