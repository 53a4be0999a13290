/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The unwind table's walk (unwind_walk.h): a stack's return addresses from
 * the rows, and the stack scan past code the table does not know. Called
 * by the worker's SIGPROF handler (worker/signal_path.c).
 *
 * Async-signal-safe only: CI checks its object's undefined symbols
 * (ci/check-signal-path). It reads the stack within the caller's bounds
 * and the table, never an address found on the stack; the machine's
 * frame rules are arch.h's.
 */

#define _GNU_SOURCE

#include <stdint.h>
#include <string.h>

#include "common/arch.h"
#include "common/unwind_table.h"


_Static_assert(sizeof(prof_row_t) <= sizeof(((prof_unwind_recent_frame_t *)
               0)->row), "a recent frame holds a row");


/* Where a frame's return address is, in words from its CFA, for the
   scan (which knows the slot and looks for the CFA); how far above sp a
   CFA lies at least. */
#ifdef PROF_ARCH_RA_IN_ROWS
#define PROF_SCAN_RA_SLOT        PROF_ARCH_RA_SLOT_GUESS
#define PROF_CFA_ABOVE_SP        0
#else
#define PROF_SCAN_RA_SLOT        PROF_ARCH_RA_SLOT
#define PROF_CFA_ABOVE_SP        (-PROF_ARCH_RA_SLOT * 8)
#endif


/* The stack's word at at (proved within the bounds by the caller): in
   the stack, or in its copy delta bytes away (unwind_walk.h). */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static inline uintptr_t
prof_unwind_word(uintptr_t delta, uintptr_t at)
{
    return *(const uintptr_t *) (at + delta);
}


/* A row of the cache only (a CFA rule no table holds): its pcs lie in
   no object, between two of them (JIT code). */
#define PROF_CFA_NO_OBJECT       7


/* How many objects start at or below pc. */
PROF_SIGNAL_TEXT static unsigned
prof_unwind_objects_below(const prof_unwind_table_t *t, uintptr_t pc)
{
    unsigned  l, h, m;

    l = 0;
    h = t->object_count;
    while (l < h) {
        m = (l + h) / 2;
        if (t->objects[m].start <= pc) {
            l = m + 1;
        } else {
            h = m;
        }
    }

    return l;
}


/* The object holding pc, trying hint first (the caller's often shares
   its callee's object), or NULL. */
PROF_SIGNAL_TEXT static const prof_unwind_object_t *
prof_unwind_object(const prof_unwind_table_t *t, uintptr_t pc,
    const prof_unwind_object_t *hint)
{
    unsigned  l;

    if (hint != NULL && pc >= hint->start && pc < hint->end) {
        return hint;
    }

    l = prof_unwind_objects_below(t, pc);

    if (l == 0 || pc >= t->objects[l - 1].end) {
        return NULL;
    }

    return &t->objects[l - 1];
}


PROF_SIGNAL_TEXT int
prof_unwind_scans(const prof_unwind_table_t *t)
{
    /* Twice as many where an object without unwind tables is loaded
       (musl's libc: its calls nest a few deep in code without rules). */
    return t->callouts ? 8 : 4;
}


/* The index of the row in force at pc, in the object that holds it. */
PROF_SIGNAL_TEXT static uint32_t
prof_unwind_row_index(const prof_unwind_object_t *o, uintptr_t pc)
{
    uint32_t   lo, hi, mid, offset;
    uintptr_t  page;

    offset = (uint32_t) (pc - o->base);
    page = (pc - o->start) >> PROF_UNWIND_PAGE_SHIFT;

    lo = o->pages[page];
    hi = o->pages[page + 1];

    while (lo < hi) {
        mid = lo + (hi - lo + 1) / 2;
        if (o->rows[mid].pc <= offset) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }

    return lo;
}


/* The row in force at pc, in the object that holds it. */
PROF_SIGNAL_TEXT static const prof_row_t *
prof_unwind_row(const prof_unwind_object_t *o, uintptr_t pc)
{
    return &o->rows[prof_unwind_row_index(o, pc)];
}


/*
 * The cache's entry for pc: by its 64-byte block of code, so that the pcs
 * a signal interrupts in a loop find the row their first one cached.
 */
PROF_SIGNAL_TEXT static prof_unwind_cache_entry_t *
prof_unwind_cache_entry(const prof_unwind_table_t *t, uintptr_t pc)
{
    uintptr_t  block;

    block = pc >> 6;

    return &t->cache[(block ^ (block >> 11)) & (PROF_UNWIND_CACHE_SIZE - 1)];
}


/*
 * Where no object holds pc: the gap between two objects around it, at
 * most 2 GB either side, into the cache as a row of PROF_CFA_NO_OBJECT
 * (a trace's pcs vary, its machine code lies in one such gap).
 */
PROF_SIGNAL_TEXT static const prof_row_t *
prof_unwind_cache_gap(const prof_unwind_table_t *t,
    prof_unwind_cache_entry_t *e, uintptr_t pc)
{
    unsigned   l;
    uintptr_t  lo, hi;

    l = prof_unwind_objects_below(t, pc);
    lo = (l > 0) ? t->objects[l - 1].end : 0;
    hi = (l < t->object_count) ? t->objects[l].start : UINTPTR_MAX;

    if (pc - lo > 0x7fffffff) {
        lo = pc - 0x7fffffff;
    }
    if (hi - pc > 0x7fffffff) {
        hi = pc + 0x7fffffff;
    }

    e->pc = lo;
    e->row.pc = (uint32_t) (hi - lo);
    e->row.cfa = PROF_CFA_NO_OBJECT;

    return &e->row;
}


/*
 * The row in force at pc from the table, into the cache with the pcs it
 * holds for (the row's pc, an offset no walk reads, holding their count:
 * an entry serves any pc of its range); where no object holds pc, a row
 * of PROF_CFA_NO_OBJECT.
 */
PROF_SIGNAL_TEXT static const prof_row_t *
prof_unwind_cache_fill(const prof_unwind_table_t *t,
    prof_unwind_cache_entry_t *e, uintptr_t pc,
    const prof_unwind_object_t **hint)
{
    uint32_t                     i, end;
    const prof_unwind_object_t  *o;

    o = prof_unwind_object(t, pc, *hint);
    if (o == NULL) {
        return prof_unwind_cache_gap(t, e, pc);
    }

    *hint = o;
    i = prof_unwind_row_index(o, pc);
    end = (i + 1 < o->row_count) ? o->rows[i + 1].pc
                                 : (uint32_t) (o->end - o->base);

    e->pc = o->base + o->rows[i].pc;
    e->row = o->rows[i];
    e->row.pc = end - o->rows[i].pc;

    return &e->row;
}


/* The last walk's row for the frame at depth (stack_high - sp) if it
   holds for pc, into *copy, with its pcs into *lo and *len; else NULL. */
PROF_SIGNAL_TEXT static const prof_row_t *
prof_unwind_recent_row(prof_unwind_recent_t *r, uintptr_t depth,
    uintptr_t pc, prof_row_t *copy, uintptr_t *lo, uint32_t *len)
{
    uint32_t                           n;
    const prof_unwind_recent_frame_t  *f;

    f = r->frames[r->last];
    n = r->count[r->last];

    /* Outward, depth falls: the frames of the last walk below it go. */
    while (r->at < n && f[r->at].depth > depth) {
        r->at++;
    }

    if (r->at == n || f[r->at].depth != depth
        || pc - f[r->at].lo >= f[r->at].len)
    {
        return NULL;
    }

    memcpy(copy, f[r->at].row, sizeof(prof_row_t));
    *lo = f[r->at].lo;
    *len = f[r->at].len;

    return copy;
}


PROF_SIGNAL_TEXT static void
prof_unwind_recent_keep(prof_unwind_recent_t *r, uintptr_t depth,
    uintptr_t lo, uint32_t len, const prof_row_t *row)
{
    uint32_t                     n;
    prof_unwind_recent_frame_t  *f;

    n = r->count[1 - r->last];
    if (n == PROF_UNWIND_RECENT) {
        return;
    }

    f = &r->frames[1 - r->last][n];
    f->lo = lo;
    f->len = len;
    f->depth = (uint32_t) depth;
    memcpy(f->row, row, sizeof(prof_row_t));

    r->count[1 - r->last] = n + 1;
}


PROF_SIGNAL_TEXT void
prof_unwind_recent_prefetch(const prof_unwind_recent_t *r)
{
    uint32_t                           i, n;
    const prof_unwind_recent_frame_t  *last, *next;

    /* The list the walk before filled is the next walk's last. */
    last = r->frames[1 - r->last];
    next = r->frames[r->last];
    n = r->count[1 - r->last];

    for (i = 0; i < n; i += 64 / sizeof(prof_unwind_recent_frame_t)) {
        __builtin_prefetch(&last[i], 0);
        __builtin_prefetch(&next[i], 1);
    }
}


PROF_SIGNAL_TEXT void
prof_unwind_recent_begin(prof_unwind_recent_t *r,
    const prof_unwind_table_t *t, uint32_t generation)
{
    if (r->table != t || r->generation != generation) {
        r->table = t;
        r->generation = generation;
        r->count[0] = 0;
        r->count[1] = 0;
    }

    r->last = 1 - r->last;
    r->count[1 - r->last] = 0;
    r->at = 0;
}


/* Whether the offset of w from o's base is in a sorted array of them. */
PROF_SIGNAL_TEXT static int
prof_unwind_offset_in(const prof_unwind_object_t *o, uintptr_t w,
    const uint32_t *a, uint32_t n)
{
    uint32_t  l, h, m, offset;

    offset = (uint32_t) (w - o->base);
    l = 0;
    h = n;

    while (l < h) {
        m = l + (h - l) / 2;
        if (a[m] < offset) {
            l = m + 1;
        } else {
            h = m;
        }
    }

    return l < n && a[l] == offset;
}


/*
 * It reads the interrupted code's stack frames, return addresses and saved
 * registers only, but an address sanitizer would see reads of other
 * functions' frames.
 */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address))
static inline prof_unwind_status_e
prof_unwind_frames(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    prof_unwind_recent_t *r, void **frames, int max, int *count)
{
    int                               status, n, leaf, keep;
    uint32_t                          len;
    uintptr_t                         pc, sp, fp, aux, cfa, slot, lookup;
    uintptr_t                         delta, depth, lo;
    prof_row_t                        recent;
    const prof_row_t                 *row;
    prof_unwind_cache_entry_t        *e;
    const prof_unwind_object_t       *o;

    pc = regs->pc;
    sp = regs->sp;
    fp = regs->fp;
    aux = regs->aux;
    leaf = !regs->caller;
    delta = regs->stack_delta;
    o = NULL;
    n = 0;

    if (sp < regs->stack_low || sp >= regs->stack_high) {
        *count = 0;
        return PROF_UNWIND_BAD_STACK;
    }

    for ( ;; ) {
        if (n == max) {
            status = PROF_UNWIND_FULL;
            break;
        }

        if (regs->where != NULL) {
            regs->where[3 * n] = sp;
            regs->where[3 * n + 1] = fp;
            regs->where[3 * n + 2] = 0;
        }

        frames[n++] = (void *) pc;

        regs->pc = pc;
        regs->sp = sp;
        regs->fp = fp;
        regs->aux = aux;
        regs->caller = !leaf;

        if (n == max) {
            status = PROF_UNWIND_FULL;          /* no step for nothing */
            break;
        }

        /* A return address may be just past its function: look before. */
        lookup = leaf ? pc : pc - 1;
        depth = regs->stack_high - sp;

        keep = (r != NULL && depth <= UINT32_MAX);
        row = keep ? prof_unwind_recent_row(r, depth, lookup, &recent, &lo,
                                            &len)
                   : NULL;

        if (row == NULL) {
            e = prof_unwind_cache_entry(t, lookup);

            row = (lookup - e->pc < e->row.pc)
                  ? &e->row : prof_unwind_cache_fill(t, e, lookup, &o);

            if (row->cfa == PROF_CFA_NO_OBJECT) {
                if (regs->where != NULL) {
                    regs->where[3 * (n - 1) + 2] = 1;
                }
                status = PROF_UNWIND_NO_OBJECT;
                break;
            }

            lo = e->pc;
            len = e->row.pc;
        }

        if (keep) {
            prof_unwind_recent_keep(r, depth, lo, len, row);
        }

        if (row->cfa == PROF_CFA_OUTERMOST) {
            status = PROF_UNWIND_END;
            break;
        }

        if (row->cfa == PROF_CFA_NONE) {
            status = (t->entry != 0 && !leaf
                      && lookup - t->entry < PROF_UNWIND_ENTRY_SPAN)
                     ? PROF_UNWIND_END : PROF_UNWIND_NO_RULE;
            break;
        }

        if ((row->cfa == PROF_CFA_AUX && aux == 0)
            || (row->cfa == PROF_CFA_FP && fp == 0))
        {
            status = PROF_UNWIND_NO_RULE;       /* its value lost */
            break;
        }

        cfa = ((row->cfa == PROF_CFA_SP) ? sp
               : (row->cfa == PROF_CFA_FP) ? fp : aux)
              + (intptr_t) row->cfa_slots * 8;

        if ((cfa & 7) != 0 || cfa < sp + PROF_CFA_ABOVE_SP
            || cfa > regs->stack_high
            || cfa < regs->stack_low)
        {
            status = PROF_UNWIND_BAD_STACK;
            break;
        }

        if (row->fp_slot == PROF_UNWIND_FP_UNKNOWN) {
            fp = 0;

        } else if (row->fp_slot != 0) {
            /*
             * In an epilogue, past the frame pointer's restore ("pop
             * %rbp"), the rule may still name the slot: it is below sp
             * then, in the leaf's red zone (which signal delivery leaves
             * alone) and holds the value restored.
             */
            slot = cfa + (intptr_t) row->fp_slot * 8;
            if (slot < (leaf ? sp - PROF_ARCH_RED_ZONE : sp)
                || slot < regs->stack_low || slot + 8 > regs->stack_high)
            {
                status = PROF_UNWIND_BAD_STACK;
                break;
            }
            fp = prof_unwind_word(delta, slot);
        }

        /* The auxiliary register likewise, but a slot out of bounds only
           loses its value. */
        if (row->aux_slot == PROF_UNWIND_AUX_UNKNOWN) {
            aux = 0;

        } else if (row->aux_slot != 0) {
            slot = cfa + (intptr_t) row->aux_slot * 8;
            aux = (slot < (leaf ? sp - PROF_ARCH_RED_ZONE : sp)
                   || slot < regs->stack_low
                   || slot + 8 > regs->stack_high)
                  ? 0 : prof_unwind_word(delta, slot);
        }

#ifdef PROF_ARCH_RA_IN_ROWS
        if (row->ra_slot == 0) {
            /* Still in the link register: the interrupted frame's only. */
            if (!leaf || regs->lr == 0) {
                status = PROF_UNWIND_NO_RULE;
                break;
            }
            pc = regs->lr;

        } else {
            slot = cfa + (intptr_t) row->ra_slot * 8;
            if (slot < sp || slot + 8 > regs->stack_high) {
                status = PROF_UNWIND_BAD_STACK;
                break;
            }
            pc = prof_unwind_word(delta, slot);
        }

        pc = prof_arch_strip_pc(pc);
#else
        pc = prof_unwind_word(delta, cfa + (intptr_t) PROF_ARCH_RA_SLOT * 8);
#endif
        sp = cfa;
        leaf = 0;

        if (pc == 0) {
            status = PROF_UNWIND_END;
            break;
        }
    }

    *count = n;

    return status;
}


PROF_SIGNAL_TEXT prof_unwind_status_e
prof_unwind(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    void **frames, int max, int *count)
{
    return prof_unwind_frames(t, regs, NULL, frames, max, count);
}


PROF_SIGNAL_TEXT prof_unwind_status_e
prof_unwind_recent(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    prof_unwind_recent_t *r, void **frames, int max, int *count)
{
    return prof_unwind_frames(t, regs, r, frames, max, count);
}


/*
 * The row of the code at w - 1 if w may be a return address: in a known
 * object, with a rule there or at a return site of code without one, and
 * not the first byte of a function (a pointer to a function is no return
 * address); else NULL. Most words a scan reads are pointers to data,
 * between the objects; of those in code, most the cache holds: told from
 * it (and into it) where the row it holds for w - 1 goes on past w (no
 * function starts there), copied into *copy; else from the table.
 * *object: the row's object.
 */
PROF_SIGNAL_TEXT static const prof_row_t *
prof_unwind_return_row(const prof_unwind_table_t *t, uintptr_t w,
    const prof_unwind_object_t **object, prof_row_t *copy)
{
    const prof_row_t            *row, *at;
    prof_unwind_cache_entry_t   *e;
    const prof_unwind_object_t  *o;

    if (w <= t->code_low || w > t->code_high) {
        return NULL;
    }

    o = prof_unwind_object(t, w - 1, NULL);
    if (o == NULL) {
        return NULL;
    }

    e = prof_unwind_cache_entry(t, w - 1);

    if (w - 1 - e->pc >= e->row.pc) {
        (void) prof_unwind_cache_fill(t, e, w - 1, &o);
    }

    /* A frame from the auxiliary register is no caller a scan can take:
       its value is not known there. */
    if (e->row.cfa == PROF_CFA_AUX) {
        return NULL;
    }

    if (e->row.cfa != PROF_CFA_NONE && w - e->pc < e->row.pc) {
        *copy = e->row;
        *object = o;
        return copy;
    }

    row = prof_unwind_row(o, w - 1);
    if (row->cfa == PROF_CFA_NONE
        && !prof_unwind_offset_in(o, w, o->sites, o->site_count))
    {
        return NULL;
    }

    if (w < o->end) {
        at = prof_unwind_row(o, w);
        if (at->pc == (uint32_t) (w - o->base)) {
            return NULL;
        }
    }

    *object = o;

    return row;
}


#ifdef PROF_ARCH_RA_IN_ROWS

/* Whether the word at slot, in the stack, is a return address, not
   self's. */
PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) static int
prof_unwind_return_at(const prof_unwind_table_t *t,
    const prof_unwind_regs_t *regs, uintptr_t slot, uintptr_t self)
{
    uintptr_t                    w;
    prof_row_t                   copy;
    const prof_unwind_object_t  *o;

    if (slot < regs->sp || slot >= regs->stack_high
        || regs->stack_high - slot < 8 || (slot & 7) != 0)
    {
        return 0;
    }

    w = prof_arch_strip_pc(prof_unwind_word(regs->stack_delta, slot));

    return w != self && prof_unwind_return_row(t, w, &o, &copy) != NULL;
}


/*
 * The frame of a caller whose row is row, above its callee's frame, of
 * any size, that starts at from: the first place (sp stays 16-byte
 * aligned), at most max_words words above, where the caller's return
 * address would lie if its frame started there (a frame found from the
 * frame pointer: one that points there, to a frame record at the bottom
 * of the frame, as GCC and LuaJIT's VM lay them out); not self, the
 * caller's own pc (its callee's frame record). 0 and *sp, *fp; or -1.
 * *budget: the places a walk may still look at, all searches together
 * (a stale stack full of return addresses would otherwise cost the
 * square of its size).
 */
PROF_SIGNAL_TEXT static int
prof_unwind_frame_above(const prof_unwind_table_t *t,
    const prof_unwind_regs_t *regs, const prof_row_t *row, uintptr_t from,
    uintptr_t self, unsigned max_words, unsigned *budget, uintptr_t *sp,
    uintptr_t *fp)
{
    unsigned   i;
    uintptr_t  at, cfa;

    at = (from + 15) & ~(uintptr_t) 15;

    for (i = 0; i < max_words && *budget > 0; i += 2, at += 16) {
        --*budget;

        cfa = at + (intptr_t) row->cfa_slots * 8;
        if (cfa >= at && cfa <= regs->stack_high
            && prof_unwind_return_at(t, regs,
                                     cfa + (intptr_t) row->ra_slot * 8,
                                     self))
        {
            *sp = at;
            if (row->cfa == PROF_CFA_FP) {
                *fp = at;
            }
            return 0;
        }
    }

    return -1;
}


#endif


PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) int
prof_unwind_scan(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    unsigned max_words)
{
    unsigned                     i, j;
    uintptr_t                    slot, w, sp, fp, cfa, up, saved, v, pushed;
    prof_row_t                   copy, other;
    const prof_row_t            *row;
    const prof_unwind_object_t  *from, *wo;
#ifdef PROF_ARCH_RA_IN_ROWS
    unsigned                     budget = 2 * max_words;
#endif

    /* The object of the frame the scan starts from, if any. */
    from = prof_unwind_object(t, regs->caller ? regs->pc - 1 : regs->pc,
                              NULL);

    slot = (regs->sp + 7) & ~(uintptr_t) 7;

    for (i = 0; i < max_words; i++, slot += 8) {
        if (slot < regs->stack_low || slot + 8 > regs->stack_high) {
            return -1;
        }

        w = prof_arch_strip_pc(prof_unwind_word(regs->stack_delta, slot));

        row = prof_unwind_return_row(t, w, &wo, &copy);
        if (row == NULL) {
            continue;
        }

        /* Called from code with rules in another object than the frame
           without any: only through a call-out (unwind_table.h). */
        if (t->callouts && from != NULL && wo != from
            && row->cfa != PROF_CFA_NONE
            && w - 1 - t->entry >= PROF_UNWIND_ENTRY_SPAN
            && !prof_unwind_offset_in(wo, w, wo->callouts, wo->callout_count))
        {
            continue;
        }

        /* The caller's sp once returned: the CFA of the callee's frame. */
        sp = slot - (intptr_t) PROF_SCAN_RA_SLOT * 8;

        /* Likely the caller's frame pointer, if the callee saved it. */
        fp = 0;
        pushed = slot + (intptr_t) PROF_ARCH_PUSHED_FP_SLOT * 8;
        if (slot >= regs->sp - (intptr_t) PROF_ARCH_PUSHED_FP_SLOT * 8) {
            fp = prof_unwind_word(regs->stack_delta, pushed);
            if (fp <= sp || fp >= regs->stack_high || (fp & 7) != 0) {
                fp = 0;
            }
        }

#ifdef PROF_ARCH_RA_IN_ROWS
        /* A caller that finds its frame from sp: where that frame starts,
           above the callee's, by its own return address. */
        if (row->cfa == PROF_CFA_SP
            && prof_unwind_frame_above(t, regs, row, sp, 0, max_words - i,
                                       &budget, &sp, &fp)
               != 0)
        {
            continue;
        }
#endif

        if (row->cfa == PROF_CFA_FP && fp == 0 && row->cfa_slots > 0) {
            /*
             * A caller that finds its frame from the frame pointer, under
             * a callee that saved none (JIT code may use the register as
             * it likes): its frame is taken to end at the next return
             * address above, if the frame pointer it saved there looks
             * like one (its caller's, or 0), its frame pointer to be
             * where that puts it. up: where that return address may be,
             * from the lowest frame pointer (sp) up.
             */
            up = sp + (uintptr_t) (row->cfa_slots + PROF_SCAN_RA_SLOT) * 8;

            for (j = i + 1; j < max_words; j++, up += 8) {
                if (up + 8 > regs->stack_high) {
                    break;
                }

                if (prof_unwind_return_row(t, prof_arch_strip_pc(
                                               prof_unwind_word(
                                                   regs->stack_delta, up)),
                                           &wo, &other)
                    == NULL)
                {
                    continue;
                }

                /* Where it saved its frame pointer: from its CFA. */
                saved = up - (intptr_t) PROF_SCAN_RA_SLOT * 8
                        + (intptr_t) row->fp_slot * 8;

                if (row->fp_slot < 0 && row->fp_slot != PROF_UNWIND_FP_UNKNOWN
                    && saved >= sp)
                {
                    v = prof_unwind_word(regs->stack_delta, saved);
                    if (v == 0 || ((v & 7) == 0 && v > up
                                   && v < regs->stack_high))
                    {
                        fp = up - (intptr_t) PROF_SCAN_RA_SLOT * 8
                             - (uintptr_t) row->cfa_slots * 8;
                    }
                }

                break;
            }
        }

        if (row->cfa != PROF_CFA_OUTERMOST && row->cfa != PROF_CFA_NONE) {
            if (row->cfa == PROF_CFA_FP && fp == 0) {
                continue;
            }

            cfa = ((row->cfa == PROF_CFA_SP) ? sp : fp)
                  + (intptr_t) row->cfa_slots * 8;

            if (cfa < sp - (intptr_t) PROF_SCAN_RA_SLOT * 8
                || cfa > regs->stack_high)
            {
                continue;
            }
        }

        regs->pc = w;
        regs->sp = sp;
        regs->fp = fp;
        regs->aux = 0;
        regs->lr = 0;
        regs->caller = 1;

        return 0;
    }

    return -1;
}


#ifdef PROF_ARCH_RA_IN_ROWS

PROF_SIGNAL_TEXT __attribute__((no_sanitize_address)) int
prof_unwind_link(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    unsigned max_words)
{
    int                          k;
    unsigned                     budget = max_words;
    uintptr_t                    lr, sp, fp, slot;
    prof_row_t                   copy;
    const prof_row_t            *row;
    const prof_unwind_object_t  *o;

    lr = prof_arch_strip_pc(regs->lr);
    if (regs->caller || lr == 0) {
        return -1;
    }

    row = prof_unwind_return_row(t, lr, &o, &copy);
    if (row == NULL || row->ra_slot == 0
        || (row->cfa != PROF_CFA_SP && row->cfa != PROF_CFA_FP))
    {
        return -1;
    }

    sp = regs->sp;
    fp = regs->fp;

    /*
     * From x29, unless the interrupted code changed it: where a return
     * address lies as the row says, not lr itself (then x29 is that
     * code's own frame record, which points to the caller's).
     */
    for (k = 0; row->cfa == PROF_CFA_FP && k < 2; k++) {
        slot = fp + (intptr_t) (row->cfa_slots + row->ra_slot) * 8;
        if (fp == 0 || (fp & 7) != 0 || fp < sp || fp >= regs->stack_high
            || regs->stack_high - fp < 8 || slot < sp
            || slot >= regs->stack_high || regs->stack_high - slot < 8)
        {
            break;
        }

        if (prof_unwind_return_at(t, regs, slot, lr)) {
            goto found;
        }

        if (prof_arch_strip_pc(prof_unwind_word(regs->stack_delta, slot))
            != lr)
        {
            break;
        }

        fp = prof_unwind_word(regs->stack_delta, fp);
    }

    fp = regs->fp;

    if (prof_unwind_frame_above(t, regs, row, regs->sp, lr, max_words,
                                &budget, &sp, &fp)
        != 0)
    {
        return -1;
    }

found:

    regs->pc = lr;
    regs->sp = sp;
    regs->fp = fp;
    regs->lr = 0;
    regs->caller = 1;

    return 0;
}

#else

PROF_SIGNAL_TEXT int
prof_unwind_link(const prof_unwind_table_t *t, prof_unwind_regs_t *regs,
    unsigned max_words)
{
    (void) t;
    (void) regs;
    (void) max_words;

    return -1;
}

#endif
