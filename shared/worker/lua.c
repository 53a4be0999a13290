/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * LuaJIT found and checked (lua.h), outside the handler: on the
 * worker's thread, once prof_start has forked the profiler process
 * (module/ngx_http_profiling_lua.c). What it found reaches the profiler
 * process through the shared table (prof_set_lua_vm, worker/profiler.h).
 */

#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "channel/lua_frames.h"
#include "channel/sample.h"
#include "worker/lua.h"
#include "worker/lua_guard.h"
#include "worker/lua_layout.h"
#include "worker/signal_lua.h"


/* LuaJIT's C API, as the lua module's library exports it. */
typedef int (*prof_lua_cfunction_pt)(void *L);

typedef struct {
    int          (*loadbuffer)(void *L, const char *buf, size_t size,
                               const char *name);
    void         (*pushcclosure)(void *L, prof_lua_cfunction_pt f, int n);
    int          (*pcall)(void *L, int nargs, int nresults, int errfunc);
    int          (*gettop)(void *L);
    void         (*settop)(void *L, int idx);
    const char  *(*tolstring)(void *L, int idx, size_t *len);
} prof_lua_api_t;


/* The check's chunk: probe() calls the C function at line 3, the chunk
   calls probe() at line 6. */
static const char  prof_lua_check_chunk[] =
    "local f = ...\n"
    "local function probe(g)\n"
    "  local r = g()\n"
    "  return r\n"
    "end\n"
    "local r = probe(f)\n"
    "return r\n";

/*
 * The resumers' chunk: the C function run as a coroutine that Lua's own
 * coroutine.resume resumes (the lua module keeps it as _resume, under a
 * wrapper), then as one a coroutine.wrap function resumes.
 */
static const char  prof_lua_resume_chunk[] =
    "local f = ...\n"
    "local c = coroutine\n"
    "local create, resume = c._create or c.create, c._resume or c.resume\n"
    "local wrap = c._wrap or c.wrap\n"
    "resume(create(f))\n"
    "wrap(f)()\n";

#define PROF_LUA_RESUME_LINE  5         /* resume_ffid[0]'s; [1]'s: 6 */

#define PROF_LUA_CHECK_NAME  "=profiling"


/* What the check's C functions saw, called from the chunks. */
static struct {
    prof_lua_t      *lua;
    uintptr_t        main;              /* the state the chunks run on */
    const char      *failed;
    int              count;
    uint64_t         frames[8];
    int              resumed;           /* times resumed so far */
    uint8_t          resume_ffid[2];    /* as learned, 0: not */
} prof_lua_check;


/*
 * Reads size bytes at address, which may be unmapped: 0, or -1. Where
 * process_vm_readv() is missing (qemu-user), through a pipe, whose write
 * fails with EFAULT for an address that is not readable.
 */
static int
prof_lua_read(uintptr_t address, void *buf, size_t size)
{
    int           fd[2], rc;
    struct iovec  local, remote;

    local.iov_base = buf;
    local.iov_len = size;
    remote.iov_base = (void *) address;
    remote.iov_len = size;

    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0)
        == (ssize_t) size)
    {
        return 0;
    }

    if (errno != ENOSYS || size > PIPE_BUF || pipe2(fd, O_CLOEXEC) != 0) {
        return -1;
    }

    rc = (write(fd[1], (void *) address, size) == (ssize_t) size
          && read(fd[0], buf, size) == (ssize_t) size) ? 0 : -1;

    close(fd[0]);
    close(fd[1]);

    return rc;
}


/*
 * Run as a coroutine L that the resumers' chunk resumed at line
 * PROF_LUA_RESUME_LINE + k: learns the id of the fast function that
 * resumed it, from the main state's top frame, and keeps it only if the
 * handler's walk from this coroutine's C frame (linked to none) crosses to
 * exactly the chunk's frame at that line. vm_pc: an address in the VM (the
 * C function's return address).
 */
static void
prof_lua_check_resumed(void *L, int k, uintptr_t vm_pc)
{
    int                   n;
    uint8_t               ffid;
    uint64_t              faults, frames[8];
    uintptr_t             cf, mcf, base, fv, fn;
    prof_lua_t           *lua = prof_lua_check.lua;
    prof_lua_where_t      where[2];
    prof_lua_function_t   f;

    cf = *(uintptr_t *) ((uintptr_t) L + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK;
    mcf = *(uintptr_t *) (prof_lua_check.main + LJL_L_CFRAME)
          & LJL_CFRAME_RAWMASK;
    base = *(uintptr_t *) (prof_lua_check.main + LJL_L_BASE);

    if (cf == 0 || mcf <= cf || (base & 7) != 0
        || (*(uintptr_t *) (cf + LJL_CF_PREV) & LJL_CFRAME_RAWMASK) != 0
        || prof_lua_read(base - 16, &fv, sizeof(fv)) != 0
        || (int64_t) fv >> 47 != LJL_TFUNC)
    {
        return;
    }

    fn = fv & LJL_GCVMASK;

    if (prof_lua_read(fn + LJL_FN_FFID, &ffid, 1) != 0
        || ffid == LJL_FF_LUA || ffid == LJL_FF_C)
    {
        return;
    }

    /* The handler's walk, with what was learned so far and this one. */
    memcpy(lua->vm.resume_ffid, prof_lua_check.resume_ffid,
           sizeof(lua->vm.resume_ffid));
    lua->vm.resume_ffid[k] = ffid;
    faults = lua->faults;

    /* The VM's frames: the coroutine's, then the chunk's. */
    frames[0] = vm_pc;
    frames[1] = vm_pc;
    where[0].sp = cf;
    where[1].sp = mcf;
    where[0].fp = where[1].fp = 0;
    where[0].unknown = where[1].unknown = 0;

    n = prof_lua_splice(lua, NULL, frames, where, 2, 8, (uintptr_t) &n,
                        mcf + 4096);

    if (lua->faults != faults || n != 1 || !PROF_FRAME_IS_LUA(frames[0])
        || prof_lua_function(lua, PROF_FRAME_LUA_ID(frames[0]), &f) != 0
        || f.firstline != 0
        || f.chunk_len != sizeof(PROF_LUA_CHECK_NAME) - 1
        || memcmp(f.chunk_name, PROF_LUA_CHECK_NAME, f.chunk_len) != 0
        || PROF_FRAME_LUA_LINE(frames[0])
           != (uint32_t) (PROF_LUA_RESUME_LINE + k))
    {
        ffid = 0;
    }

    lua->faults = faults;
    prof_lua_check.resume_ffid[k] = ffid;
    memset(lua->vm.resume_ffid, 0, sizeof(lua->vm.resume_ffid));
}


static int
prof_lua_check_resume_cfunction(void *L)
{
    int  k;

    k = prof_lua_check.resumed++;

    if (k < 2) {
        prof_lua_check_resumed(L, k,
                               (uintptr_t) __builtin_return_address(0));
    }

    return 0;
}


static int
prof_lua_check_cfunction(void *L)
{
    int               i;
    int32_t           state;
    uint64_t          frames[8];
    uintptr_t         g, cf, here;
    unw_proc_info_t   pi;
    prof_lua_t       *lua = prof_lua_check.lua;
    prof_lua_where_t  where[1];

    g = lua->vm.g;
    here = (uintptr_t) &i;

    state = *(int32_t *) (g + LJL_G_VMSTATE);
    cf = *(uintptr_t *) ((uintptr_t) L + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK;

    if ((*(uintptr_t *) (g + LJL_G_CUR_L) & LJL_GCVMASK) != (uintptr_t) L) {
        prof_lua_check.failed = "the running state";
        return 0;
    }

    if (state != LJL_VMST_C) {
        prof_lua_check.failed = "the VM state";
        return 0;
    }

    if (cf <= here || *(uintptr_t *) (cf + LJL_CF_L) != (uintptr_t) L) {
        prof_lua_check.failed = "the C frame";
        return 0;
    }

    /* The interpreter's code: the function the return address is in. */
    frames[0] = (uintptr_t) __builtin_return_address(0);

    if (unw_get_proc_info_by_ip(unw_local_addr_space, frames[0], &pi, NULL)
        != 0 || pi.start_ip >= pi.end_ip || pi.end_ip - pi.start_ip > 4 << 20)
    {
        prof_lua_check.failed = "the interpreter's code";
        return 0;
    }

    lua->vm.vm_start = pi.start_ip;
    lua->vm.vm_end = pi.end_ip;

    /* The handler's walk, on a native stack of the VM's frame alone. */
    where[0].sp = cf;
    where[0].fp = 0;
    where[0].unknown = 0;

    prof_lua_check.count = prof_lua_splice(lua, NULL, frames, where, 1, 8,
                                           here, cf + 4096);
    for (i = 0; i < prof_lua_check.count; i++) {
        prof_lua_check.frames[i] = frames[i];
    }

    return 0;
}


/* The frame check's expectations: probe() at line 3, the chunk at 6;
   probe named as the chunk calls it, the chunk called from C. */
static const char *
prof_lua_check_frames(prof_lua_t *lua)
{
    static const int32_t  first[2] = { 2, 0 }, line[2] = { 3, 6 };
    static const char    *name[2] = { "probe", "" };

    int                   i;
    uint64_t              f;
    prof_lua_function_t   fn;

    if (lua->faults != 0) {
        return "a fault reading its memory";
    }

    if (prof_lua_check.count != 2) {
        return "the frames walked";
    }

    for (i = 0; i < 2; i++) {
        f = prof_lua_check.frames[i];

        if (!PROF_FRAME_IS_LUA(f)
            || prof_lua_function(lua, PROF_FRAME_LUA_ID(f), &fn) != 0
            || fn.firstline != first[i]
            || PROF_FRAME_LUA_LINE(f) != (uint32_t) line[i]
            || fn.chunk_len != sizeof(PROF_LUA_CHECK_NAME) - 1
            || memcmp(fn.chunk_name, PROF_LUA_CHECK_NAME, fn.chunk_len) != 0)
        {
            return "the frames walked";
        }

        if (fn.name_len != strlen(name[i])
            || memcmp(fn.name, name[i], fn.name_len) != 0)
        {
            return "the functions' names";
        }
    }

    return NULL;
}


static int
prof_lua_api(prof_lua_api_t *api)
{
    *(void **) &api->loadbuffer = dlsym(RTLD_DEFAULT, "luaL_loadbuffer");
    *(void **) &api->pushcclosure = dlsym(RTLD_DEFAULT, "lua_pushcclosure");
    *(void **) &api->pcall = dlsym(RTLD_DEFAULT, "lua_pcall");
    *(void **) &api->gettop = dlsym(RTLD_DEFAULT, "lua_gettop");
    *(void **) &api->settop = dlsym(RTLD_DEFAULT, "lua_settop");
    *(void **) &api->tolstring = dlsym(RTLD_DEFAULT, "lua_tolstring");

    return (api->loadbuffer && api->pushcclosure && api->pcall
            && api->gettop && api->settop && api->tolstring) ? 0 : -1;
}


int
prof_lua_find(void *lua_state, prof_lua_vm_t *vm, char *err, size_t size)
{
    int              top, rc;
    uint8_t          gct;
    size_t           len;
    Dl_info          info;
    uintptr_t        L, g, main;
    const char      *s, *failed;
    prof_lua_t      *lua;
    prof_lua_api_t   api;

    L = (uintptr_t) lua_state;
    memset(vm, 0, sizeof(prof_lua_vm_t));

    if (prof_lua_api(&api) != 0) {
        snprintf(err, size, "no LuaJIT C API in the process");
        return -1;
    }

    /* The lua module's state: a thread whose global state says so. */
    if (L == 0 || prof_lua_read(L + LJL_GCT, &gct, 1) != 0
        || gct != LJL_GCT_THREAD
        || prof_lua_read(L + LJL_L_GLREF, &g, sizeof(g)) != 0
        || prof_lua_read(g + LJL_G_MAINTHREF, &main, sizeof(main)) != 0
        || (main & LJL_GCVMASK) != L)
    {
        snprintf(err, size, "not LuaJIT 2.1 in GC64 mode (its state)");
        return -1;
    }

    vm->g = g;

    if (dladdr(*(void **) &api.pcall, &info) != 0 && info.dli_fname) {
        snprintf(vm->library, sizeof(vm->library), "%s", info.dli_fname);
    }

    lua = calloc(1, sizeof(prof_lua_t));
    if (lua == NULL) {
        snprintf(err, size, "%s", strerror(ENOMEM));
        return -1;
    }

    lua->vm = *vm;
    memset(&prof_lua_check, 0, sizeof(prof_lua_check));
    prof_lua_check.lua = lua;
    prof_lua_check.main = L;
    prof_lua_check.failed = "the check did not run";

    failed = NULL;
    top = api.gettop(lua_state);

    if (prof_lua_guard_install() != 0) {
        failed = "no fault guard";
        goto done;
    }

    rc = api.loadbuffer(lua_state, prof_lua_check_chunk,
                        sizeof(prof_lua_check_chunk) - 1,
                        PROF_LUA_CHECK_NAME);
    if (rc == 0) {
        api.pushcclosure(lua_state, prof_lua_check_cfunction, 0);
        prof_lua_check.failed = NULL;
        rc = api.pcall(lua_state, 1, 0, 0);
    }

    if (rc != 0) {
        failed = "the check did not run";
    } else if (prof_lua_check.failed != NULL) {
        failed = prof_lua_check.failed;
    } else {
        failed = prof_lua_check_frames(lua);
    }

    api.settop(lua_state, top);

    /* What resumes coroutines from Lua: unknown (their resumers' frames
       not shown) when this chunk does not get as far. */
    if (failed == NULL
        && api.loadbuffer(lua_state, prof_lua_resume_chunk,
                          sizeof(prof_lua_resume_chunk) - 1,
                          PROF_LUA_CHECK_NAME) == 0)
    {
        api.pushcclosure(lua_state, prof_lua_check_resume_cfunction, 0);
        (void) api.pcall(lua_state, 1, 0, 0);
    }

    prof_lua_guard_remove();

    api.settop(lua_state, top);

    if (failed == NULL
        && api.loadbuffer(lua_state, "return jit and jit.version", 26,
                          PROF_LUA_CHECK_NAME) == 0
        && api.pcall(lua_state, 0, 1, 0) == 0)
    {
        s = api.tolstring(lua_state, -1, &len);
        snprintf(vm->version, sizeof(vm->version), "%s",
                 s ? s : "LuaJIT");
    }

    api.settop(lua_state, top);

done:

    if (failed == NULL) {
        vm->vm_start = lua->vm.vm_start;
        vm->vm_end = lua->vm.vm_end;
        memcpy(vm->resume_ffid, prof_lua_check.resume_ffid,
               sizeof(vm->resume_ffid));
        if (vm->version[0] == '\0') {
            snprintf(vm->version, sizeof(vm->version), "LuaJIT");
        }
    } else {
        snprintf(err, size, "its layout is not LuaJIT 2.1's in GC64 mode "
                 "(%s)", failed);
    }

    free(lua);

    return failed ? -1 : 0;
}
