/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Lua-land stacks: LuaJIT's call stack in the samples, where it runs,
 * interleaved with the native frames.
 *
 * - prof_lua_find (worker/lua.h: the worker's thread, after the fork,
 *   outside the handler): checks that the LuaJIT in the process has the
 *   layout worker/lua_layout.h knows (LuaJIT 2.1, GC64, x86-64:
 *   OpenResty's luajit2 and Debian's libluajit2) by running a known Lua
 *   function once and walking it, and finds the interpreter's code.
 *   Anything else: not found, said once, native stacks as before.
 * - prof_lua_splice (worker/signal_lua.h: the SIGPROF handler): for every
 *   activation of the VM on the native stack, its Lua frames in place of
 *   the VM's own frame (the interpreter, a trace's machine code), callers
 *   below callees, the C code a Lua function called above them. Reads
 *   LuaJIT's memory under a fault guard (worker/lua_guard.h): a fault or
 *   any inconsistency ends the Lua part with a marker frame, counted.
 * - What names a frame is copied into the table below by the handler the
 *   first time it meets a function (bounded), so that the profiler
 *   process names it without reading the worker's memory, even after the
 *   function was collected. A Lua frame is PROF_FRAME_LUA(id, line). The
 *   table is the channel's (lua_frames.c: made, read and named by either
 *   side); finding LuaJIT is the worker's (worker/lua.c), the walk its
 *   handler's (worker/signal_lua.c).
 */

#ifndef PROF_LUA_FRAMES_H
#define PROF_LUA_FRAMES_H

#include <stddef.h>
#include <stdint.h>


#define PROF_LUA_FUNCTIONS      2048        /* a power of two */
#define PROF_LUA_PROBES         8
#define PROF_LUA_CHUNK_MAX      128
#define PROF_LUA_NAME_MAX       64
#define PROF_LUA_ACTIVATIONS    16          /* VM entries a sample walks */

/* A Lua frame: bit 63, the function's entry, the line (0: unknown). */
#define PROF_FRAME_LUA_BIT      ((uint64_t) 1 << 63)
#define PROF_FRAME_IS_LUA(pc)   (((pc) & PROF_FRAME_LUA_BIT) != 0)
#define PROF_FRAME_LUA(id, line)                                              \
    (PROF_FRAME_LUA_BIT | ((uint64_t) (id) << 32) | (uint32_t) (line))
#define PROF_FRAME_LUA_ID(pc)   ((uint32_t) ((pc) >> 32) & 0x7fffffff)
#define PROF_FRAME_LUA_LINE(pc) ((uint32_t) (pc))

/* The marker frame in place of Lua frames the walk could not read. */
#define PROF_FRAME_LUA_LOST     ((uint64_t) 3)


/*
 * A Lua function as the handler met it, called from one place: its name
 * is what the caller's bytecode calls it (as debug.getinfo names it), so
 * a function called from two places under two names has two entries.
 * Entries are reused in turn (the id of the function an entry holds:
 * id + 1, 0 while written), so that a worker whose code makes new
 * functions without end (loadstring) keeps a bounded table; a reader
 * checks the id before and after its copy.
 */
typedef struct __attribute__((aligned(8))) {
    uint32_t        id;                 /* id + 1, 0: being written */
    int32_t         firstline;
    uint64_t        proto;              /* its prototype's address then */
    uint64_t        chunk;              /* its chunkname string's */
    uint64_t        site;               /* past the call instruction in
                                           the caller, 0: called from C */
    uint32_t        site_ins;           /* that instruction */
    uint32_t        name_len;           /* bytes of name, 0: none */
    uint32_t        chunk_len;          /* bytes of chunk_name */
    char            name[PROF_LUA_NAME_MAX];
    char            chunk_name[PROF_LUA_CHUNK_MAX];   /* the end of it when
                                                         longer */
} prof_lua_function_t;


/* What prof_lua_find learned: the handler's inputs. */
typedef struct prof_lua_vm_s {
    uintptr_t       g;                  /* LuaJIT's global_State */
    uintptr_t       vm_start;           /* the interpreter's machine code */
    uintptr_t       vm_end;
    uint8_t         resume_ffid[2];     /* the fast functions that resume a
                                           coroutine from Lua (resume, a
                                           wrap function's); 0: unknown */
    char            version[48];        /* jit.version */
    char            library[208];       /* the object it is in */
} prof_lua_vm_t;


/* What the worker found (prof_lua_t's state). */
#define PROF_LUA_UNKNOWN         0      /* not looked for yet */
#define PROF_LUA_FOUND           1      /* vm: its frames are read */
#define PROF_LUA_NONE            2      /* no LuaJIT in the worker */
#define PROF_LUA_NOT_RECOGNIZED  (-1)   /* why: stacks stay native */
#define PROF_LUA_WALK_ONLY       3      /* vm, its frames not read
                                           (profiling_lua off): its C
                                           frames guide the native walk
                                           (worker/signal_lua.h) */


/*
 * In memory shared with the profiler process. The worker's thread writes
 * state, why and vm (prof_set_lua_vm, worker/profiler.h; state last,
 * release); the handler the counters, count, slots and functions; the
 * profiler process only reads.
 */
typedef struct prof_lua_s {
    int32_t              state;         /* PROF_LUA_* */
    char                 why[128];      /* when not recognized */
    prof_lua_vm_t        vm;
    uint64_t             walks;         /* samples with Lua frames */
    uint64_t             lost;          /* walks ended by a marker */
    uint64_t             faults;        /*   of which by a fault */
    uint32_t             count;         /* ids issued (the next one) */
    uint32_t             slots[PROF_LUA_FUNCTIONS * 2];   /* by prototype:
                                           an id + 1, valid while its entry
                                           holds that id */
    prof_lua_function_t  functions[PROF_LUA_FUNCTIONS];
} prof_lua_t;


/* The shared table (mmap'ed MAP_SHARED before the fork), or NULL; the
   worker's thread (prof_start, prof_stop: its own mapping). */
prof_lua_t *prof_lua_create(void);
void prof_lua_free(prof_lua_t *lua);

/* The function of a Lua frame's id copied into f: 0, or -1 when its
   entry holds another one now. The profiler loop thread (aggregator.c),
   and the layout's check on the worker's thread (worker/lua.c). */
int prof_lua_function(const prof_lua_t *lua, uint32_t id,
    prof_lua_function_t *f);

/* The name users know a function by into buf: what its caller called it
   (a local, global, field, method or upvalue, as debug.getinfo names
   it), else "chunk:firstline" (the chunkname shown as Lua shows it). */
void prof_lua_function_name(const prof_lua_function_t *f, char *buf,
    size_t size);


#endif /* PROF_LUA_FRAMES_H */
