/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The handler's walk of one activation of LuaJIT (signal_lua_walk.h): its
 * frames from the innermost down to the C entry, each checked, with its
 * line, its function entered in the shared table the first time it is met
 * and named as its caller's bytecode calls it (lj_debug_slotname).
 *
 * Async-signal-safe only (CI checks this object with the handler's).
 * LuaJIT's memory is read under the fault guard (lua_guard.h), set by the
 * caller; the layout is lua_layout.h's.
 */

#define _GNU_SOURCE

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "channel/lua_frames.h"
#include "channel/sample.h"
#include "common/unwind_walk.h"
#include "worker/lua_guard.h"
#include "worker/lua_layout.h"
#include "worker/signal_lua_walk.h"


/* Bytecodes and names a name's search reads at most */
#define PROF_LUA_NAME_SCAN  256

/* Functions the walks met last (a power of two) */
#define PROF_LUA_RECENT     32


/*
 * The functions the walks met last, by prototype and call site, for the
 * table they are in: most samples walk the frames the one before walked,
 * and a frame found here reads one line of this process's memory instead
 * of the table's index and entry (two lines, often two pages, cold in a
 * sample). The handler's (and the layout's check, on the same thread
 * before the handler walks Lua).
 */
typedef struct {
    uintptr_t          proto;
    uintptr_t          site;
    uint64_t           chunk;
    int32_t            firstline;
    uint32_t           site_ins;
    uint32_t           id;                  /* id + 1, 0: none */
} prof_lua_recent_t;

static prof_lua_recent_t  prof_lua_recent[PROF_LUA_RECENT];
static const prof_lua_t  *prof_lua_recent_table;


/* Bytes of LuaJIT's memory from p up to a NUL into name (at most
   PROF_LUA_NAME_MAX); their count. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uint32_t
prof_lua_copy_name(uintptr_t p, char *name)
{
    char      c;
    uint32_t  n;

    for (n = 0; n < PROF_LUA_NAME_MAX; n++) {
        c = (char) PROF_LUA_RD8(p + n);
        if (c == '\0') {
            break;
        }
        name[n] = c;
    }

    return n;
}


/* An unsigned LEB128 number at p into *v; past it. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uintptr_t
prof_lua_uleb(uintptr_t p, uint32_t *v)
{
    int       i;
    uint8_t   b;
    uint32_t  r;

    r = 0;

    for (i = 0; i < 5; i++) {
        b = PROF_LUA_RD8(p++);
        r |= (uint32_t) (b & 0x7f) << (7 * i);
        if (b < 0x80) {
            break;
        }
    }

    *v = r;
    return p;
}


/* The name of slot at bytecode position pos of prototype pt when a local
   lives there (LuaJIT's debug_varname) into name: its length, 0: none. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uint32_t
prof_lua_local_name(uintptr_t pt, uint32_t pos, uint32_t slot, char *name)
{
    uint32_t     i, vn, start, end, v;
    uintptr_t    p, at;
    const char  *own;

    p = PROF_LUA_RD64(pt + LJL_PT_VARINFO);
    start = 0;

    for (i = 0; p != 0 && i < PROF_LUA_NAME_SCAN; i++) {
        at = p;
        vn = PROF_LUA_RD8(p);

        if (vn == 0) {
            return 0;                   /* the end */
        }

        if (vn >= LJL_VARNAME_MAX) {
            while (PROF_LUA_RD8(p) != 0) {
                if (++p - at > 255) {
                    return 0;
                }
            }
        }

        p = prof_lua_uleb(p + 1, &v);
        start += v;
        if (start > pos) {
            return 0;
        }

        p = prof_lua_uleb(p, &v);
        end = start + v;

        if (pos < end && slot-- == 0) {
            if (vn >= LJL_VARNAME_MAX) {
                return prof_lua_copy_name(at, name);
            }

            /* One of LuaJIT's own: the for loops' */
            for (own = LJL_VARNAMES; --vn > 0; own++) {
                while (*own != '\0') {
                    own++;
                }
            }

            return prof_lua_copy_name((uintptr_t) own, name);
        }
    }

    return 0;
}


/* The string constant idx of prototype pt into name: its length. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uint32_t
prof_lua_constant_name(uintptr_t pt, uint32_t idx, char *name)
{
    uint32_t   n, len;
    uintptr_t  str;

    str = PROF_LUA_RD64(PROF_LUA_RD64(pt + LJL_PT_K)
                        - 8 * ((uintptr_t) idx + 1))
          & LJL_GCVMASK;
    if (str == 0 || PROF_LUA_RD8(str + LJL_GCT) != LJL_GCT_STR) {
        return 0;
    }

    len = PROF_LUA_RD32(str + LJL_STR_LEN);
    if (len > PROF_LUA_NAME_MAX) {
        len = PROF_LUA_NAME_MAX;
    }

    for (n = 0; n < len; n++) {
        name[n] = (char) PROF_LUA_RD8(str + LJL_STR_DATA + n);
    }

    return len;
}


/* The name of upvalue idx of prototype pt into name: its length. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uint32_t
prof_lua_upvalue_name(uintptr_t pt, uint32_t idx, char *name)
{
    uintptr_t  p, start;

    p = PROF_LUA_RD64(pt + LJL_PT_UVINFO);
    if (p == 0) {
        return 0;
    }

    for (start = p; idx > 0; p++) {
        if (PROF_LUA_RD8(p) == 0) {
            idx--;
        }
        if (p - start > 4096) {
            return 0;
        }
    }

    return prof_lua_copy_name(p, name);
}


/*
 * What the call instruction at ip, in prototype pt, calls, as LuaJIT's
 * debug.getinfo names it (lj_debug_slotname): the local, global, field,
 * method or upvalue the function came from, into name. Its length; 0: no
 * name (an expression, or further back than the scan goes).
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static uint32_t
prof_lua_callee_name(uintptr_t pt, uintptr_t ip, char *name)
{
    int                steps;
    uint32_t           ins, op, a, slot, n;
    uintptr_t          bc;
    static const char  modes[] = LJL_BC_AMODES;

    bc = pt + LJL_PT_SIZE;
    ins = PROF_LUA_RD32(ip);
    slot = LJL_BC_A(ins);

    if (LJL_BC_OP(ins) == LJL_BC_ITERC) {
        slot -= 3;                      /* the for loop's generator */
    }

    for (steps = 0; steps < PROF_LUA_NAME_SCAN; /* void */ ) {
        n = prof_lua_local_name(pt, (uint32_t) (ip - bc) / 4, slot, name);
        if (n > 0) {
            return n;
        }

        /* The last instruction before it that wrote the slot. */
        for ( ;; ) {
            ip -= 4;
            if (ip <= bc || ++steps == PROF_LUA_NAME_SCAN) {
                return 0;
            }

            ins = PROF_LUA_RD32(ip);
            op = LJL_BC_OP(ins);
            a = LJL_BC_A(ins);

            if (op >= LJL_BC_MAX) {
                return 0;
            }

            if (modes[op] == 'b') {
                if (slot >= a
                    && (op != LJL_BC_KNIL || slot <= LJL_BC_D(ins)))
                {
                    return 0;
                }

            } else if (modes[op] == 'd' && a == slot) {
                break;
            }
        }

        switch (op) {

        case LJL_BC_MOV:
            slot = LJL_BC_D(ins);       /* a copy: the name of the source */
            continue;

        case LJL_BC_GGET:
            return prof_lua_constant_name(pt, LJL_BC_D(ins), name);

        case LJL_BC_TGETS:
            return prof_lua_constant_name(pt, LJL_BC_C(ins), name);

        case LJL_BC_UGET:
            return prof_lua_upvalue_name(pt, LJL_BC_D(ins), name);

        default:
            return 0;
        }
    }

    return 0;
}


/*
 * The entry of the recent list for prototype pt at site (h: their hash)
 * when it holds them, as they are now (chunk, first, ins) and with an id
 * whose entry in the table no later function took (entries are reused in
 * turn): else NULL.
 */
PROF_SIGNAL_TEXT static prof_lua_recent_t *
prof_lua_recent_of(const prof_lua_t *lua, uint32_t h, uintptr_t pt,
    uintptr_t site, uint64_t chunk, int32_t first, uint32_t ins)
{
    uint32_t            issued;
    prof_lua_recent_t  *r;

    if (prof_lua_recent_table != lua) {
        memset(prof_lua_recent, 0, sizeof(prof_lua_recent));
        prof_lua_recent_table = lua;
    }

    r = &prof_lua_recent[(h >> 16) & (PROF_LUA_RECENT - 1)];
    issued = __atomic_load_n(&lua->count, __ATOMIC_RELAXED);

    if (r->id != 0 && r->proto == pt && r->site == site && r->chunk == chunk
        && r->firstline == first && r->site_ins == ins
        && ((issued - (r->id - 1)) & 0x7fffffff) <= PROF_LUA_FUNCTIONS)
    {
        return r;
    }

    r->id = 0;
    r->proto = pt;
    r->site = site;
    r->chunk = chunk;
    r->firstline = first;
    r->site_ins = ins;

    return NULL;
}


/*
 * The id of prototype pt's function in the table (lua_frames.h), called from
 * site (past the call instruction in prototype caller; 0 and 0: from C),
 * its entry filled when new; -1 when pt is not a prototype.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static int64_t
prof_lua_intern(prof_lua_t *lua, uintptr_t pt, uintptr_t site,
    uintptr_t caller)
{
    uint32_t              i, h, v, len, j, k, head, id, ins, *slot, *free;
    uint64_t              chunk;
    int32_t               first;
    uintptr_t             data;
    prof_lua_recent_t    *r;
    prof_lua_function_t  *f;

    if (PROF_LUA_RD8(pt + LJL_GCT) != LJL_GCT_PROTO) {
        return -1;
    }

    chunk = PROF_LUA_RD64(pt + LJL_PT_CHUNKNAME) & LJL_GCVMASK;
    first = (int32_t) PROF_LUA_RD32(pt + LJL_PT_FIRSTLINE);
    ins = (site != 0) ? PROF_LUA_RD32(site - 4) : 0;

    h = (uint32_t) (((pt >> 3) ^ (site * 0x2545f491)) * 0x9e3779b1u);
    free = NULL;

    r = prof_lua_recent_of(lua, h, pt, site, chunk, first, ins);
    if (r != NULL) {
        return r->id - 1;
    }

    r = &prof_lua_recent[(h >> 16) & (PROF_LUA_RECENT - 1)];

    for (i = 0; i < PROF_LUA_PROBES; i++) {
        slot = &lua->slots[(h + i) & (PROF_LUA_FUNCTIONS * 2 - 1)];
        v = *slot;
        f = &lua->functions[(v - 1) & (PROF_LUA_FUNCTIONS - 1)];

        if (v == 0 || f->id != v) {
            /* Never used, or its entry went to another function since. */
            if (free == NULL) {
                free = slot;
            }
            continue;
        }

        if (f->proto == pt && f->site == site && f->chunk == chunk
            && f->firstline == first && f->site_ins == ins)
        {
            r->id = v;
            return v - 1;
        }
    }

    if (chunk == 0 || PROF_LUA_RD8(chunk + LJL_GCT) != LJL_GCT_STR) {
        return -1;
    }

    if (free == NULL) {
        free = &lua->slots[h & (PROF_LUA_FUNCTIONS * 2 - 1)];
    }

    /* The next entry in turn, unusable to readers while written. */
    id = lua->count;
    f = &lua->functions[id & (PROF_LUA_FUNCTIONS - 1)];
    __atomic_store_n(&f->id, 0, __ATOMIC_RELEASE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    f->proto = pt;
    f->chunk = chunk;
    f->firstline = first;
    f->site = site;
    f->site_ins = ins;
    f->name_len = (caller != 0) ? prof_lua_callee_name(caller, site - 4,
                                                        f->name)
                                : 0;

    /* The first byte ('@' a file, '=' a name) and the end of it. */
    len = PROF_LUA_RD32(chunk + LJL_STR_LEN);
    data = chunk + LJL_STR_DATA;
    head = 0;
    k = 0;

    if (len > PROF_LUA_CHUNK_MAX) {
        f->chunk_name[k++] = (char) PROF_LUA_RD8(data);
        f->chunk_name[k++] = '.';
        f->chunk_name[k++] = '.';
        f->chunk_name[k++] = '.';
        head = len - (PROF_LUA_CHUNK_MAX - k);
    }

    for (j = head; j < len; j++) {
        f->chunk_name[k++] = (char) PROF_LUA_RD8(data + j);
    }

    f->chunk_len = k;

    __atomic_store_n(&f->id, id + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&lua->count, (id + 1) & 0x7fffffff, __ATOMIC_RELEASE);
    *free = id + 1;
    r->id = id + 1;

    return id;
}


/* The line of the instruction before pc in prototype pt (0: no line
   information); -1 when pc is not past an instruction of it. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static int64_t
prof_lua_line(uintptr_t pt, uintptr_t pc)
{
    uint32_t   sizebc, numline, i;
    int32_t    first;
    uintptr_t  bc, lineinfo;

    bc = pt + LJL_PT_SIZE;
    sizebc = PROF_LUA_RD32(pt + LJL_PT_SIZEBC);

    /* The instruction pc follows: one after the function header. */
    if (pc < bc + 8 || pc > bc + (uintptr_t) sizebc * 4 || (pc & 3) != 0) {
        return -1;
    }

    lineinfo = PROF_LUA_RD64(pt + LJL_PT_LINEINFO);
    if (lineinfo == 0) {
        return 0;
    }

    first = (int32_t) PROF_LUA_RD32(pt + LJL_PT_FIRSTLINE);
    numline = PROF_LUA_RD32(pt + LJL_PT_NUMLINE);
    i = (uint32_t) ((pc - bc) / 4 - 2);     /* header has no entry */

    if (numline < 256) {
        return first + PROF_LUA_RD8(lineinfo + i);
    }

    if (numline < 65536) {
        return first + PROF_LUA_RD16(lineinfo + 2 * i);
    }

    return first + (int32_t) PROF_LUA_RD32(lineinfo + 4 * i);
}


/*
 * The Lua frames of one activation of L, from frame (base - 1 of the
 * innermost) down to where the activation was entered from C, leaf
 * first; pc: past the leaf's instruction (0: unknown). 0 with *cont the
 * frame below the C entry (0: the bottom), or -1: inconsistent.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) int
prof_lua_walk(prof_lua_walk_t *w, uintptr_t L, uintptr_t frame,
    uintptr_t pc, uintptr_t *cont)
{
    int        leaf, entry;
    int64_t    id, line;
    uint32_t   ins;
    uint64_t   fv, ftsz;
    uintptr_t  stack, bot, top, fn, pt, next, site, caller, link;

    stack = PROF_LUA_RD64(L + LJL_L_STACK);
    top = stack + (uintptr_t) PROF_LUA_RD32(L + LJL_L_STACKSIZE) * 8;
    bot = stack + 8;

    leaf = 1;

    for ( ;; ) {
        if (frame <= bot) {
            *cont = 0;
            return 0;
        }

        if (frame >= top || (frame & 7) != 0) {
            return -1;
        }

        fv = PROF_LUA_RD64(frame - 8);
        ftsz = PROF_LUA_RD64(frame);

        if ((int64_t) fv >> 47 != LJL_TFUNC) {
            return -1;
        }

        fn = fv & LJL_GCVMASK;
        if (PROF_LUA_RD8(fn + LJL_GCT) != LJL_GCT_FUNC) {
            return -1;
        }

        /* Where the frame's link leads: the caller's frame and pc. */
        site = 0;
        link = 0;
        entry = 0;
        next = frame - (ftsz & ~(uint64_t) LJL_FRAME_TYPEP);

        switch (ftsz & LJL_FRAME_TYPEP) {

        case LJL_FRAME_LUA:
        case LJL_FRAME_LUAP:
            /* Returns past a call instruction; its A: the frame's slot. */
            if (ftsz > LJL_GCVMASK || (ftsz & 3) != 0 || ftsz < 8) {
                return -1;
            }
            ins = PROF_LUA_RD32(ftsz - 4);
            if (!PROF_LUA_CALLS(ins)) {
                return -1;
            }
            site = ftsz;
            link = ftsz;
            next = frame - 8 * (2 + LJL_BC_A(ins));
            break;

        case LJL_FRAME_C:
        case LJL_FRAME_CP:
            /* Entered from C: the frames below are an outer activation. */
            entry = 1;
            break;

        case LJL_FRAME_VARG:
            /* The same function again below its varargs: named there. */
            if (next >= frame) {
                return -1;
            }
            frame = next;
            continue;

        case LJL_FRAME_CONT:
            /* A metamethod the interpreter called: the caller's pc. */
            link = PROF_LUA_RD64(frame - 16);
            break;

        default:
            /* pcall, xpcall: the caller's line is not kept there. */
            break;
        }

        if (PROF_LUA_RD8(fn + LJL_FN_FFID) == LJL_FF_LUA) {
            pt = PROF_LUA_RD64(fn + LJL_FN_PC) - LJL_PT_SIZE;

            line = 0;
            if (pc != 0) {
                line = prof_lua_line(pt, pc);
                if (line < 0) {
                    if (!leaf) {
                        return -1;      /* a link not into its caller */
                    }
                    line = 0;           /* the leaf's pc: not known */
                }
            }

            /* The caller's prototype: its call names this function. */
            caller = 0;
            if (site != 0 && next < frame && next > bot) {
                fv = PROF_LUA_RD64(next - 8);
                fn = fv & LJL_GCVMASK;
                if ((int64_t) fv >> 47 == LJL_TFUNC
                    && PROF_LUA_RD8(fn + LJL_GCT) == LJL_GCT_FUNC
                    && PROF_LUA_RD8(fn + LJL_FN_FFID) == LJL_FF_LUA)
                {
                    caller = PROF_LUA_RD64(fn + LJL_FN_PC) - LJL_PT_SIZE;

                    /* A call instruction of it, past its header. */
                    if (!PROF_LUA_PC_IN(caller, site)) {
                        return -1;
                    }
                }
            }

            id = prof_lua_intern(w->lua, pt, caller ? site : 0, caller);
            if (id < 0) {
                return -1;
            }

            if (w->n == w->max) {
                *cont = 0;
                return 0;
            }

            w->out[w->n++] = PROF_FRAME_LUA(id, line);
        }

        if (entry) {
            *cont = (next < frame) ? next : 0;
            return 0;
        }

        if (next >= frame) {
            return -1;
        }

        leaf = 0;
        pc = link;
        frame = next;
    }
}
