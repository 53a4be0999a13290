/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The table of Lua functions (lua_frames.h) both processes read: mapped
 * shared by the worker before the fork, entries written by its signal
 * handler, read word by word by either side.
 */

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "channel/lua_frames.h"


prof_lua_t *
prof_lua_create(void)
{
    prof_lua_t  *lua;

    lua = mmap(NULL, sizeof(prof_lua_t), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return (lua == MAP_FAILED) ? NULL : lua;
}


void
prof_lua_free(prof_lua_t *lua)
{
    if (lua != NULL) {
        (void) munmap(lua, sizeof(prof_lua_t));
    }
}


/* A word of an entry, read as such (an entry is made of them). */
typedef uint64_t  prof_lua_word_t __attribute__((may_alias));

_Static_assert(sizeof(prof_lua_function_t) % sizeof(prof_lua_word_t) == 0,
               "an entry is made of words");


int
prof_lua_function(const prof_lua_t *lua, uint32_t id,
    prof_lua_function_t *f)
{
    size_t                      i;
    prof_lua_word_t            *to;
    const prof_lua_word_t      *from;
    const prof_lua_function_t  *e;

    e = &lua->functions[id & (PROF_LUA_FUNCTIONS - 1)];

    if (__atomic_load_n(&e->id, __ATOMIC_ACQUIRE) != id + 1) {
        return -1;
    }

    /* Acquire loads, word by word: the id's second read comes after. */
    from = (const prof_lua_word_t *) e;
    to = (prof_lua_word_t *) f;

    for (i = 0; i < sizeof(prof_lua_function_t) / sizeof(*to); i++) {
        to[i] = __atomic_load_n(&from[i], __ATOMIC_ACQUIRE);
    }

    if (__atomic_load_n(&e->id, __ATOMIC_ACQUIRE) != id + 1
        || f->chunk_len > PROF_LUA_CHUNK_MAX)
    {
        return -1;
    }

    return 0;
}


/* What its caller called it; else as Lua shows a chunk: a file's path, a
   name, or the string's start, and its first line. */
void
prof_lua_function_name(const prof_lua_function_t *f, char *buf, size_t size)
{
    int          len;
    const char  *s;

    if (f->name_len > 0) {
        snprintf(buf, size, "%.*s", (int) f->name_len, f->name);
        return;
    }

    s = f->chunk_name;
    len = (int) f->chunk_len;

    if (len > 0 && (s[0] == '@' || s[0] == '=')) {
        snprintf(buf, size, "%.*s:%d", len - 1, s + 1, (int) f->firstline);
        return;
    }

    if (memchr(s, '\n', len) != NULL) {
        len = (int) ((const char *) memchr(s, '\n', len) - s);
    }

    snprintf(buf, size, "[string \"%.*s\"]:%d", len > 40 ? 40 : len, s,
             (int) f->firstline);
}
