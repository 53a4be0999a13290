/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The names of the addresses of the aggregator's stacks: each symbolized
 * once, when first seen (native functions with their inlined ones and
 * lines, Lua functions, markers), kept until an eviction.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channel/lua_frames.h"
#include "common/clock.h"
#include "profiler/aggregator.h"
#include "profiler/aggregator_internal.h"


static const prof_address_t  prof_truncated_address = {
    NULL, "[truncated]", 0, 0, NULL, NULL, 0, NULL
};

static const prof_address_t  prof_unwind_stop_address = {
    NULL, "[unwind stopped]", 0, 0, NULL, NULL, 0, NULL
};

static const prof_address_t  prof_lua_lost_address = {
    NULL, "[Lua frames not read]", 0, 0, NULL, NULL, 0, NULL
};


/* The functions inlined at a pc of a known function, and its line. */
static void
prof_aggregator_inlines(prof_aggregator_t *agg, prof_address_t *info,
    uint64_t pc)
{
    char          *p;
    size_t         i, n, len, size;
    prof_inline_t  frames[PROF_INLINES_MAX];

    free(info->inlines);
    info->inlines = NULL;
    info->ninlines = 0;
    info->line = 0;

    if (info->function == NULL) {
        return;
    }

    n = prof_symbolizer_inlines(agg->conf.symbolizer, info->object, pc,
                                frames, PROF_INLINES_MAX, &info->line);
    if (n == 0) {
        return;
    }

    /*
     * The names are copied after the list, in the one allocation: the
     * symbolizer may release the DWARF they came from.
     */
    size = n * sizeof(prof_inline_t);

    for (i = 0; i < n; i++) {
        size += strlen(frames[i].function) + 1;
    }

    info->inlines = malloc(size);
    if (info->inlines == NULL) {
        info->line = 0;
        return;
    }

    p = (char *) &info->inlines[n];

    for (i = 0; i < n; i++) {
        len = strlen(frames[i].function) + 1;
        info->inlines[i].function = memcpy(p, frames[i].function, len);
        info->inlines[i].line = frames[i].line;
        p += len;
    }

    info->ninlines = (uint32_t) n;
}


/* Forgets every address (their inlined functions' lists go). */
void
prof_aggregator_forget_addresses(prof_aggregator_t *agg)
{
    uint32_t  i;

    for (i = 0; i < agg->addresses.count; i++) {
        free(agg->address_info[i].inlines);
        free(agg->address_info[i].owned);
    }

    prof_intern_free(&agg->addresses);
}


/*
 * A Lua frame's function (lua_frames.h): its name, its chunk as the file
 * and its first line, copied from the table the handler fills (NULL
 * function: the entry was given to another function since). Kept with the
 * address (a Lua frame's address goes at the profile's close, as JIT
 * code's).
 */
static void
prof_aggregator_lua(prof_aggregator_t *agg, prof_address_t *info,
    uint64_t pc)
{
    char                 name[PROF_LUA_CHUNK_MAX + 48];
    size_t               len;
    prof_lua_function_t  f;

    if (agg->conf.lua == NULL
        || prof_lua_function(agg->conf.lua, PROF_FRAME_LUA_ID(pc), &f) != 0)
    {
        return;
    }

    prof_lua_function_name(&f, name, sizeof(name));
    len = strlen(name);

    /* "name\0chunk\0" */
    info->owned = malloc(len + 1 + f.chunk_len + 1);
    if (info->owned == NULL) {
        return;
    }

    memcpy(info->owned, name, len + 1);
    memcpy(info->owned + len + 1, f.chunk_name, f.chunk_len);
    info->owned[len + 1 + f.chunk_len] = '\0';

    info->function = info->owned;
    info->file = info->owned + len + 1;
    info->start_line = f.firstline;
    info->line = PROF_FRAME_LUA_LINE(pc);
}


/*
 * Naming new code, which profiling_max_cpu leaves out: the thread's CPU
 * from the start, told while under way (a build may last seconds), and
 * added to the counter at its end.
 */
static int64_t
prof_aggregator_naming_start(prof_aggregator_t *agg)
{
    int64_t  start;

    start = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);

    if (agg->conf.naming_since != NULL) {
        __atomic_store_n(agg->conf.naming_since, start, __ATOMIC_RELEASE);
    }

    return start;
}


static void
prof_aggregator_naming_done(prof_aggregator_t *agg, int64_t start)
{
    int64_t  now;

    now = prof_clock_ns(CLOCK_THREAD_CPUTIME_ID);

    if (start >= 0 && now > start && agg->conf.diagnostics != NULL) {
        prof_counter_add(agg->conf.diagnostics->naming_cpu_ns,
                         (uint64_t) (now - start));
    }

    if (agg->conf.naming_since != NULL) {
        __atomic_store_n(agg->conf.naming_since, -1, __ATOMIC_RELEASE);
    }
}


/*
 * Symbolizes pc the first time it is seen: its information goes into the
 * address cache (a Lua frame's from the Lua function table). 0 or -ENOMEM.
 */
int
prof_aggregator_symbolize_once(prof_aggregator_t *agg, uint64_t pc)
{
    int              inserted;
    size_t           cap;
    int64_t          index, start;
    prof_address_t  *info;

    if (PROF_FRAME_IS_MARKER(pc)) {
        return 0;
    }

    /* Room for its information first: a known pc always has it. */
    if (agg->addresses.count >= agg->address_capacity) {
        cap = agg->address_capacity ? agg->address_capacity * 2 : 1024;
        info = realloc(agg->address_info, cap * sizeof(prof_address_t));
        if (info == NULL) {
            return -ENOMEM;
        }
        agg->address_info = info;
        agg->address_capacity = cap;
    }

    index = prof_intern(&agg->addresses, &pc, sizeof(pc), &inserted);
    if (index < 0) {
        return -ENOMEM;
    }

    if (!inserted) {
        return 0;
    }

    start = prof_aggregator_naming_start(agg);

    info = &agg->address_info[index];
    memset(info, 0, sizeof(prof_address_t));

    if (PROF_FRAME_IS_LUA(pc)) {
        prof_aggregator_lua(agg, info, pc);
        agg->unknown_addresses++;

    } else {
        if (agg->conf.symbolizer != NULL) {
            info->object = prof_symbolize(agg->conf.symbolizer, pc,
                                          &info->function);
            prof_aggregator_inlines(agg, info, pc);
        }

        agg->unknown_addresses += (info->object == NULL);
    }

    prof_aggregator_naming_done(agg, start);

    return 0;
}


/*
 * Addresses in no object (JIT code) are not kept past their profile: new
 * ones come for as long as code is compiled, and the symbolizer names
 * none of them. The others keep what the symbolizer said. Returns how
 * many went.
 */
size_t
prof_aggregator_forget_unknown(prof_aggregator_t *agg)
{
    int            inserted;
    size_t         evicted;
    int64_t        index;
    uint32_t       i;
    uint64_t       pc;
    prof_intern_t  kept;

    prof_intern_init(&kept);

    for (i = 0; i < agg->addresses.count; i++) {
        if (agg->address_info[i].object == NULL) {
            free(agg->address_info[i].owned);
            continue;
        }

        memcpy(&pc, prof_intern_key(&agg->addresses, i, NULL), sizeof(pc));

        /* Dense and in order: index <= i, the entry moves down. */
        index = prof_intern(&kept, &pc, sizeof(pc), &inserted);
        if (index < 0) {
            /* All go: those moved down, and those not looked at. */
            for (index = 0; index < (int64_t) kept.count; index++) {
                free(agg->address_info[index].inlines);
            }
            for ( /* void */ ; i < agg->addresses.count; i++) {
                free(agg->address_info[i].inlines);
                free(agg->address_info[i].owned);
            }
            prof_intern_free(&kept);
            prof_intern_init(&kept);
            break;
        }

        agg->address_info[index] = agg->address_info[i];
    }

    evicted = agg->addresses.count - kept.count;

    prof_intern_free(&agg->addresses);
    agg->addresses = kept;
    agg->unknown_addresses = 0;

    return evicted;
}


/* The addresses of the objects with new names named again, in the object
   each was found in (held until collected, even unmapped). */
void
prof_aggregator_rename(prof_aggregator_t *agg)
{
    int64_t           start;
    uint32_t          i;
    uint64_t          pc;
    prof_address_t   *info;

    start = prof_aggregator_naming_start(agg);

    for (i = 0; i < agg->addresses.count; i++) {
        info = &agg->address_info[i];

        if (info->object != NULL
            && prof_symbolizer_renamed(agg->conf.symbolizer, info->object))
        {
            memcpy(&pc, prof_intern_key(&agg->addresses, i, NULL),
                   sizeof(pc));
            info->function = prof_symbolizer_function(agg->conf.symbolizer,
                                                      info->object, pc);
            prof_aggregator_inlines(agg, info, pc);
        }
    }

    prof_aggregator_naming_done(agg, start);
}


const prof_address_t *
prof_aggregator_address(prof_aggregator_t *agg, uint64_t pc)
{
    int64_t  index;

    if (pc == PROF_FRAME_TRUNCATED) {
        return &prof_truncated_address;
    }

    if (pc == PROF_FRAME_LUA_LOST) {
        return &prof_lua_lost_address;
    }

    if (PROF_FRAME_IS_MARKER(pc)) {
        return &prof_unwind_stop_address;
    }

    index = prof_intern_find(&agg->addresses, &pc, sizeof(pc));
    if (index < 0) {
        return NULL;
    }

    return &agg->address_info[index];
}


const prof_address_t *
prof_aggregator_name(prof_aggregator_t *agg, uint64_t pc)
{
    if (prof_aggregator_symbolize_once(agg, pc) != 0) {
        return NULL;
    }

    return prof_aggregator_address(agg, pc);
}
