/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The lua module's LuaJIT, when one is loaded: found in its configuration,
 * and told to the profiler, whose samples then carry its Lua frames.
 */

#include "ngx_http_profiling_module.h"
#include "channel/lua_frames.h"
#include "worker/lua.h"


/*
 * The lua module's LuaJIT state (lua-nginx-module, OpenResty's and
 * Debian's): the first field of its main configuration. NULL: none.
 */
void *
ngx_http_profiling_lua_state(ngx_cycle_t *cycle)
{
    void                **lmcf;
    ngx_uint_t            i;
    ngx_module_t         *m;
    ngx_http_conf_ctx_t  *ctx;

    ctx = (ngx_http_conf_ctx_t *) cycle->conf_ctx[ngx_http_module.index];
    if (ctx == NULL) {
        return NULL;
    }

    for (i = 0; cycle->modules[i]; i++) {
        m = cycle->modules[i];

        if (m->type == NGX_HTTP_MODULE
            && ngx_strcmp(m->name, "ngx_http_lua_module") == 0)
        {
            lmcf = ctx->main_conf[m->ctx_index];
            return (lmcf != NULL) ? *lmcf : NULL;
        }
    }

    return NULL;
}


/*
 * The lua module's LuaJIT, created with its configuration: its frames go
 * into the samples once its layout checked out (frames: profiling_lua;
 * off, only its C frames guide the native walk through its JIT code);
 * otherwise that is said once (unless off), and the stacks stay native.
 */
void
ngx_http_profiling_find_lua(ngx_cycle_t *cycle, prof_t *profiler,
    ngx_flag_t frames)
{
    char                  err[128];
    void                 *L;
    static prof_lua_vm_t  vm;

    if (profiler == NULL) {
        return;
    }

    L = ngx_http_profiling_lua_state(cycle);
    if (L == NULL) {
        prof_set_lua_vm(profiler, NULL, NULL, frames);
        return;
    }

    if (prof_lua_find(L, &vm, err, sizeof(err)) != 0) {
        if (frames) {
            ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                          "profiling: the lua module's LuaJIT is not one "
                          "the profiler knows, %s: stacks without Lua "
                          "frames", err);
        }
        prof_set_lua_vm(profiler, NULL, err, frames);
        return;
    }

    prof_set_lua_vm(profiler, &vm, NULL, frames);
}
