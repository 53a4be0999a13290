/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The signal path's Lua part (lua_frames.h): LuaJIT's frames spliced into a
 * sample's native ones, in the SIGPROF handler.
 *
 * Async-signal-safe only, like signal_path.c (CI checks both objects).
 * Memory outside the thread's stack (LuaJIT's states, stacks, functions,
 * prototypes, strings) is read under a guard (lua_guard.h): a SIGSEGV
 * there jumps back here and the walk ends with a marker. Every step is checked against
 * what LuaJIT keeps consistent (a frame's function is a function, a Lua
 * frame's link is a pc inside its caller's bytecode, just past a call),
 * so that a frame is right or absent.
 *
 * The layout is LuaJIT 2.1's in GC64 mode (lj_obj.h, lj_frame.h; the
 * machine's C frame and interpreter registers: arch.h), checked at start
 * by prof_lua_find (lua.c).
 */

#define _GNU_SOURCE

#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <ucontext.h>

#include "channel/lua_frames.h"
#include "channel/sample.h"
#include "worker/lua_guard.h"
#include "worker/lua_layout.h"


/* Bytecodes and names a name's search reads at most */
#define PROF_LUA_NAME_SCAN  256


typedef struct {
    prof_lua_t  *lua;
    uint64_t    *out;
    int          n;
    int          max;
} prof_lua_walk_t;


/* Bytes of LuaJIT's memory from p up to a NUL into name (at most
   PROF_LUA_NAME_MAX); their count. */
__attribute__((no_sanitize_address)) static uint32_t
prof_lua_copy_name(uintptr_t p, char *name)
{
    char      c;
    uint32_t  n;

    for (n = 0; n < PROF_LUA_NAME_MAX; n++) {
        c = (char) RD8(p + n);
        if (c == '\0') {
            break;
        }
        name[n] = c;
    }

    return n;
}


/* An unsigned LEB128 number at p into *v; past it. */
__attribute__((no_sanitize_address)) static uintptr_t
prof_lua_uleb(uintptr_t p, uint32_t *v)
{
    int       i;
    uint8_t   b;
    uint32_t  r;

    r = 0;

    for (i = 0; i < 5; i++) {
        b = RD8(p++);
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
__attribute__((no_sanitize_address)) static uint32_t
prof_lua_local_name(uintptr_t pt, uint32_t pos, uint32_t slot, char *name)
{
    uint32_t     i, vn, start, end, v;
    uintptr_t    p, at;
    const char  *own;

    p = RD64(pt + LJL_PT_VARINFO);
    start = 0;

    for (i = 0; p != 0 && i < PROF_LUA_NAME_SCAN; i++) {
        at = p;
        vn = RD8(p);

        if (vn == 0) {
            return 0;                   /* the end */
        }

        if (vn >= LJL_VARNAME_MAX) {
            while (RD8(p) != 0) {
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
__attribute__((no_sanitize_address)) static uint32_t
prof_lua_constant_name(uintptr_t pt, uint32_t idx, char *name)
{
    uint32_t   n, len;
    uintptr_t  str;

    str = RD64(RD64(pt + LJL_PT_K) - 8 * ((uintptr_t) idx + 1)) & LJL_GCVMASK;
    if (str == 0 || RD8(str + LJL_GCT) != LJL_GCT_STR) {
        return 0;
    }

    len = RD32(str + LJL_STR_LEN);
    if (len > PROF_LUA_NAME_MAX) {
        len = PROF_LUA_NAME_MAX;
    }

    for (n = 0; n < len; n++) {
        name[n] = (char) RD8(str + LJL_STR_DATA + n);
    }

    return len;
}


/* The name of upvalue idx of prototype pt into name: its length. */
__attribute__((no_sanitize_address)) static uint32_t
prof_lua_upvalue_name(uintptr_t pt, uint32_t idx, char *name)
{
    uintptr_t  p, start;

    p = RD64(pt + LJL_PT_UVINFO);
    if (p == 0) {
        return 0;
    }

    for (start = p; idx > 0; p++) {
        if (RD8(p) == 0) {
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
__attribute__((no_sanitize_address)) static uint32_t
prof_lua_callee_name(uintptr_t pt, uintptr_t ip, char *name)
{
    int                steps;
    uint32_t           ins, op, a, slot, n;
    uintptr_t          bc;
    static const char  modes[] = LJL_BC_AMODES;

    bc = pt + LJL_PT_SIZE;
    ins = RD32(ip);
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

            ins = RD32(ip);
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
 * The id of prototype pt's function in the table (lua_frames.h), called from
 * site (past the call instruction in prototype caller; 0 and 0: from C),
 * its entry filled when new; -1 when pt is not a prototype.
 */
__attribute__((no_sanitize_address)) static int64_t
prof_lua_intern(prof_lua_t *lua, uintptr_t pt, uintptr_t site,
    uintptr_t caller)
{
    uint32_t              i, h, v, len, j, k, head, id, ins, *slot, *free;
    uint64_t              chunk;
    int32_t               first;
    uintptr_t             data;
    prof_lua_function_t  *f;

    if (RD8(pt + LJL_GCT) != LJL_GCT_PROTO) {
        return -1;
    }

    chunk = RD64(pt + LJL_PT_CHUNKNAME) & LJL_GCVMASK;
    first = (int32_t) RD32(pt + LJL_PT_FIRSTLINE);
    ins = (site != 0) ? RD32(site - 4) : 0;

    h = (uint32_t) (((pt >> 3) ^ (site * 0x2545f491)) * 0x9e3779b1u);
    free = NULL;

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
            return v - 1;
        }
    }

    if (chunk == 0 || RD8(chunk + LJL_GCT) != LJL_GCT_STR) {
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
    len = RD32(chunk + LJL_STR_LEN);
    data = chunk + LJL_STR_DATA;
    head = 0;
    k = 0;

    if (len > PROF_LUA_CHUNK_MAX) {
        f->chunk_name[k++] = (char) RD8(data);
        f->chunk_name[k++] = '.';
        f->chunk_name[k++] = '.';
        f->chunk_name[k++] = '.';
        head = len - (PROF_LUA_CHUNK_MAX - k);
    }

    for (j = head; j < len; j++) {
        f->chunk_name[k++] = (char) RD8(data + j);
    }

    f->chunk_len = k;

    __atomic_store_n(&f->id, id + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&lua->count, (id + 1) & 0x7fffffff, __ATOMIC_RELEASE);
    *free = id + 1;

    return id;
}


/* The line of the instruction before pc in prototype pt (0: no line
   information); -1 when pc is not past an instruction of it. */
__attribute__((no_sanitize_address)) static int64_t
prof_lua_line(uintptr_t pt, uintptr_t pc)
{
    uint32_t   sizebc, numline, i;
    int32_t    first;
    uintptr_t  bc, lineinfo;

    bc = pt + LJL_PT_SIZE;
    sizebc = RD32(pt + LJL_PT_SIZEBC);

    /* The instruction pc follows: one after the function header. */
    if (pc < bc + 8 || pc > bc + (uintptr_t) sizebc * 4 || (pc & 3) != 0) {
        return -1;
    }

    lineinfo = RD64(pt + LJL_PT_LINEINFO);
    if (lineinfo == 0) {
        return 0;
    }

    first = (int32_t) RD32(pt + LJL_PT_FIRSTLINE);
    numline = RD32(pt + LJL_PT_NUMLINE);
    i = (uint32_t) ((pc - bc) / 4 - 2);     /* header has no entry */

    if (numline < 256) {
        return first + RD8(lineinfo + i);
    }

    if (numline < 65536) {
        return first + RD16(lineinfo + 2 * i);
    }

    return first + (int32_t) RD32(lineinfo + 4 * i);
}


/*
 * The Lua frames of one activation of L, from frame (base - 1 of the
 * innermost) down to where the activation was entered from C, leaf
 * first; pc: past the leaf's instruction (0: unknown). 0 with *cont the
 * frame below the C entry (0: the bottom), or -1: inconsistent.
 */
__attribute__((no_sanitize_address)) static int
prof_lua_walk(prof_lua_walk_t *w, uintptr_t L, uintptr_t frame,
    uintptr_t pc, uintptr_t *cont)
{
    int        leaf, entry;
    int64_t    id, line;
    uint32_t   ins, op;
    uint64_t   fv, ftsz;
    uintptr_t  stack, bot, top, fn, pt, next, site, caller, link;

    stack = RD64(L + LJL_L_STACK);
    top = stack + (uintptr_t) RD32(L + LJL_L_STACKSIZE) * 8;
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

        fv = RD64(frame - 8);
        ftsz = RD64(frame);

        if ((int64_t) fv >> 47 != LJL_TFUNC) {
            return -1;
        }

        fn = fv & LJL_GCVMASK;
        if (RD8(fn + LJL_GCT) != LJL_GCT_FUNC) {
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
            ins = RD32(ftsz - 4);
            op = LJL_BC_OP(ins);
            if (op != LJL_BC_CALLM && op != LJL_BC_CALL
                && op != LJL_BC_ITERC && op != LJL_BC_ITERN)
            {
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
            link = RD64(frame - 16);
            break;

        default:
            /* pcall, xpcall: the caller's line is not kept there. */
            break;
        }

        if (RD8(fn + LJL_FN_FFID) == LJL_FF_LUA) {
            pt = RD64(fn + LJL_FN_PC) - LJL_PT_SIZE;

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
                fv = RD64(next - 8);
                fn = fv & LJL_GCVMASK;
                if ((int64_t) fv >> 47 == LJL_TFUNC
                    && RD8(fn + LJL_GCT) == LJL_GCT_FUNC
                    && RD8(fn + LJL_FN_FFID) == LJL_FF_LUA)
                {
                    caller = RD64(fn + LJL_FN_PC) - LJL_PT_SIZE;

                    /* A call instruction of it, past its header. */
                    if (site < caller + LJL_PT_SIZE + 8
                        || site > caller + LJL_PT_SIZE
                                  + (uintptr_t) RD32(caller + LJL_PT_SIZEBC)
                                    * 4)
                    {
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


static int
prof_lua_in_vm(const prof_lua_t *lua, uint64_t pc)
{
    return pc >= lua->vm.vm_start && pc < lua->vm.vm_end;
}


/*
 * Where the innermost activation of L (the one running) has its top
 * frame: *frame (base - 1) and *pc (0: unknown); -1 when it cannot be
 * told. cf: the activation's C frame; i: the native frame of the VM for
 * it, or -1.
 */
__attribute__((no_sanitize_address)) static int
prof_lua_top(prof_lua_t *lua, const ucontext_t *uc, uintptr_t L,
    const uint64_t *frames, const prof_lua_where_t *where, int n,
    uintptr_t cf, uintptr_t *frame, uintptr_t *pc, uintptr_t *alt)
{
    int        i;
    int32_t    state;
    uintptr_t  base, fp, stack;

    state = (int32_t) RD32(lua->vm.g + LJL_G_VMSTATE);
    *pc = 0;
    *alt = 0;

    if (state >= 0) {
        /* A trace runs: the base it runs on (its inlined calls unseen). */
        base = RD64(lua->vm.g + LJL_G_JIT_BASE);

    } else if (state == LJL_VMST_INTERP && n > 0
               && prof_lua_in_vm(lua, frames[0]) && where[0].sp == cf)
    {
        /* The interpreter: its BASE and PC registers. */
        prof_arch_lj_interp_regs(uc, &base, pc);

    } else if (state == LJL_VMST_INTERP) {
        /*
         * C code the interpreter called: it keeps BASE in a register
         * around calls that do not take L (libm's from math.*; on x86-64
         * rbp, the VM frame's frame pointer), else in L->base.
         */
        fp = 0;
        for (i = 0; i < n; i++) {
            if (where[i].sp == cf && prof_lua_in_vm(lua, frames[i])) {
                fp = prof_arch_lj_kept_base(uc, where[i].fp);
                break;
            }
        }

        base = RD64(L + LJL_L_BASE);
        stack = RD64(L + LJL_L_STACK);

        if (fp >= stack + 16 && (fp & 7) == 0 && fp != base
            && fp < stack + (uintptr_t) RD32(L + LJL_L_STACKSIZE) * 8)
        {
            *alt = base - 8;
            base = fp;
        }

    } else {
        /* A C function, the collector, the trace compiler: L->base. */
        base = RD64(L + LJL_L_BASE);
    }

    if (base == 0 || (base & 7) != 0) {
        return -1;
    }

    *frame = base - 8;
    return 0;
}


/*
 * A coroutine resumed from Lua (coroutine.resume, a coroutine.wrap
 * function) runs on a chain of C frames of its own, its first linked to
 * none: its resumer's C frame is where the native frame right after the
 * coroutine's VM frame (native frame i) runs, if that frame is in the VM,
 * is the current C frame of a state whose top frame is one of those fast
 * functions, and that function resumes L (the thread its argument or a
 * wrap function's upvalue holds). That C frame, or 0.
 */
__attribute__((no_sanitize_address)) static uintptr_t
prof_lua_resumer(const prof_lua_t *lua, const uint64_t *frames,
    const prof_lua_where_t *where, int i, int n, uintptr_t L)
{
    uint8_t    ffid;
    uint64_t   fv, co;
    uintptr_t  cf, rL, base, fn;

    if ((lua->vm.resume_ffid[0] == 0 && lua->vm.resume_ffid[1] == 0)
        || i >= n || !prof_lua_in_vm(lua, frames[i])
        || (where[i].sp & 7) != 0)
    {
        return 0;
    }

    cf = where[i].sp;
    rL = RD64(cf + LJL_CF_L) & LJL_GCVMASK;

    if (rL == 0 || rL == L || RD8(rL + LJL_GCT) != LJL_GCT_THREAD
        || (RD64(rL + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK) != cf)
    {
        return 0;
    }

    base = RD64(rL + LJL_L_BASE);
    if (base < 16 || (base & 7) != 0) {
        return 0;
    }

    fv = RD64(base - 16);
    fn = fv & LJL_GCVMASK;

    if ((int64_t) fv >> 47 != LJL_TFUNC || RD8(fn + LJL_GCT) != LJL_GCT_FUNC) {
        return 0;
    }

    ffid = RD8(fn + LJL_FN_FFID);

    if (ffid != 0 && ffid == lua->vm.resume_ffid[0]) {
        co = RD64(base);                /* coroutine.resume(co, ...) */

    } else if (ffid != 0 && ffid == lua->vm.resume_ffid[1]) {
        co = RD64(fn + LJL_FN_UPVALUE0);

    } else {
        return 0;
    }

    return ((int64_t) co >> 47 == LJL_TTHREAD && (co & LJL_GCVMASK) == L)
           ? cf : 0;
}


/*
 * LuaJIT's frames into frames[] (n native ones, with where they were),
 * at most max in all: each activation of the VM, from the one running
 * out, replaces the VM's own frames for it. Returns the new count.
 */
__attribute__((no_sanitize_address)) int
prof_lua_splice(prof_lua_t *lua, const ucontext_t *uc, uint64_t *frames,
    const prof_lua_where_t *where, int n, int max, uintptr_t stack_low,
    uintptr_t stack_high)
{
    int              i, k, rc, trace;
    uint64_t         out[PROF_MAX_FRAMES_LIMIT + 1];
    int              start;
    uintptr_t        g, L, cf, cfL, prevL, frame, pc, cont, alt;
    prof_lua_walk_t  w;

    if (lua == NULL || n == 0 || !prof_lua_guarded()) {
        return n;
    }

    prof_lua_probing = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (__builtin_setjmp(prof_lua_jump)) {
        /* A fault: the native frames as they were. */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        lua->faults++;
        lua->lost++;
        return n;
    }

    g = lua->vm.g;
    L = RD64(g + LJL_G_CUR_L) & LJL_GCVMASK;
    cf = (L != 0) ? (RD64(L + LJL_L_CFRAME) & LJL_CFRAME_RAWMASK) : 0;

    /* No Lua running: nothing of it on this stack. */
    if (cf == 0 || cf < where[0].sp || cf >= stack_high || cf < stack_low) {
        prof_lua_probing = 0;
        return n;
    }

    lua->walks++;
    /* On a trace: running it, or C code it called (the collector too). */
    trace = (int32_t) RD32(g + LJL_G_VMSTATE) >= 0
            || RD64(g + LJL_G_JIT_BASE) != 0;

    w.lua = lua;
    w.out = out;
    w.n = 0;
    w.max = max;

    i = 0;
    prevL = 0;
    cont = 0;

    for (k = 0; cf != 0 && k < PROF_LUA_ACTIVATIONS; k++) {
        if (cf < stack_low || cf >= stack_high || (cf & 7) != 0) {
            break;
        }

        cfL = RD64(cf + LJL_CF_L) & LJL_GCVMASK;

        /*
         * The native frames above the activation: kept, but for the VM's
         * own frame for it and, under a trace, the trace's machine code
         * (in no object the table knows).
         */
        for ( /* void */ ; i < n && where[i].sp <= cf; i++) {
            if ((where[i].sp == cf && prof_lua_in_vm(lua, frames[i]))
                || (k == 0 && trace && where[i].unknown))
            {
                continue;
            }
            if (w.n < max) {
                out[w.n++] = frames[i];
            }
        }

        alt = 0;

        if (k == 0) {
            rc = (cfL == L) ? prof_lua_top(lua, uc, L, frames, where, n, cf,
                                           &frame, &pc, &alt)
                            : -1;
        } else if (cfL == prevL && cont != 0) {
            frame = cont;
            pc = 0;
            rc = 0;
        } else {
            frame = RD64(cfL + LJL_L_BASE) - 8;
            pc = 0;
            rc = 0;
        }

        start = w.n;

        if (rc == 0) {
            rc = prof_lua_walk(&w, cfL, frame, pc, &cont);
        }

        if (rc != 0 && alt != 0) {
            w.n = start;
            rc = prof_lua_walk(&w, cfL, alt, 0, &cont);
        }

        if (rc != 0) {
            lua->lost++;
            if (w.n < max) {
                out[w.n++] = PROF_FRAME_LUA_LOST;
            }
            cont = 0;
        }

        prevL = cfL;
        cf = RD64(cf + LJL_CF_PREV) & LJL_CFRAME_RAWMASK;

        if (cf == 0) {
            cf = prof_lua_resumer(lua, frames, where, i, n, cfL);
        }
    }

    prof_lua_probing = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    for ( /* void */ ; i < n && w.n < max; i++) {
        out[w.n++] = frames[i];
    }

    memcpy(frames, out, w.n * sizeof(uint64_t));

    return w.n;
}
