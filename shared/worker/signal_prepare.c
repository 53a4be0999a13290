/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What the SIGPROF handler (signal_path.c) needs before it runs: the
 * memory it writes backed; the sampled thread's errno and rseq area, and
 * the vDSO's clock_gettime, found.
 *
 * A first write to a page is a page fault, tens of microseconds on a
 * virtual machine, which a handler that writes it would pay in a sample:
 * the ring's slots and the sampler's struct (backed when first written,
 * channel.c), the unwind table's row cache (copied on write from the
 * master's), the Lua function table's index and first entries. Each page
 * is written with the byte it holds.
 *
 * Not async-signal-safe (dlsym): on the sampled thread, before its timer
 * runs (prof_signal_prepare), and before the Lua table is the sampler's
 * (prof_signal_prepare_lua), so that no handler writes the same memory
 * meanwhile.
 */

#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define PROF_PREPARE_RSEQ    1
#endif
#endif

#include "channel/lua_frames.h"
#include "channel/sampler_state.h"
#include "common/unwind_table.h"
#include "worker/signal_lua.h"
#include "worker/signal_path.h"


/* Function entries written before the first Lua sample: the first
   functions a worker meets, without the whole table's 500 KB. */
#define PROF_PREPARE_LUA_FUNCTIONS  256


static void
prof_prepare_pages(void *start, size_t size)
{
    size_t                   page, i;
    volatile unsigned char  *p = start;

    if (size == 0) {
        return;
    }

    page = (size_t) sysconf(_SC_PAGESIZE);

    for (i = 0; i < size; i += page) {
        p[i] = p[i];
    }

    p[size - 1] = p[size - 1];
}


/*
 * The rseq area glibc registered for this thread (glibc 2.35 and later:
 * __rseq_offset from the thread pointer, __rseq_size), looked up so that
 * the module needs no glibc of that version to load; NULL: none.
 */
static uint64_t *
prof_prepare_rseq_cs(void)
{
#ifdef PROF_PREPARE_RSEQ
    const ptrdiff_t     *offset;
    const unsigned int  *size;

    offset = dlsym(RTLD_DEFAULT, "__rseq_offset");
    size = dlsym(RTLD_DEFAULT, "__rseq_size");

    if (offset != NULL && size != NULL
        && *size >= offsetof(struct rseq, rseq_cs) + sizeof(uint64_t))
    {
        return (uint64_t *) ((char *) __builtin_thread_pointer() + *offset
                             + offsetof(struct rseq, rseq_cs));
    }
#endif

    return NULL;
}


/*
 * The vDSO's clock_gettime, which the handler calls without glibc's
 * (two more pages, its code and the loader's pointer to the vDSO's: a
 * miss of the TLB each in a sample); NULL: not found.
 */
static void
prof_prepare_vdso(prof_sampler_t *s)
{
    void  *vdso, *f;

    vdso = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (vdso == NULL) {
        return;
    }

    f = dlsym(vdso, "__vdso_clock_gettime");
    if (f == NULL) {
        f = dlsym(vdso, "__kernel_clock_gettime");
    }

    *(void **) &s->vdso_clock_gettime = f;

    (void) dlclose(vdso);
}


void
prof_signal_prepare(prof_sampler_t *s)
{
    prof_unwind_table_t  *t = s->table;

    prof_prepare_pages(s, s->shared_size);

    if (t != NULL) {
        prof_prepare_pages(t->cache, PROF_UNWIND_CACHE_SIZE
                                     * sizeof(prof_unwind_cache_entry_t));
    }

    s->thread_pointer = __builtin_thread_pointer();
    s->errno_at = &errno;
    s->rseq_cs = prof_prepare_rseq_cs();
    prof_prepare_vdso(s);
}


void
prof_signal_prepare_lua(prof_lua_t *lua)
{
    prof_lua_code_keep(lua);

    prof_prepare_pages(lua->slots, sizeof(lua->slots));
    prof_prepare_pages(lua->functions, PROF_PREPARE_LUA_FUNCTIONS
                                       * sizeof(prof_lua_function_t));
}
