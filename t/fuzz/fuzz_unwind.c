/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * libFuzzer target: the unwind table builder's .eh_frame_hdr/.eh_frame
 * parsing on arbitrary bytes as a loaded segment, then walks and stack
 * scans with the table over a stack between guard pages. Build with clang
 * -fsanitize=fuzzer,address,undefined (make fuzz); seeds: unwind-seeds.py.
 *
 * Input: hdr_offset (u32, little endian), hdr_size (u32), then the segment
 * (its .eh_frame_hdr at hdr_offset, the .eh_frame and the code it
 * describes around it, at their distances in memory).
 */

#define _GNU_SOURCE

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/unwind.h"
#include "common/unwind_table.h"


#define FUZZ_HEADER_SIZE    8
#define FUZZ_STACK_WORDS    512
#define FUZZ_FRAMES_MAX     64
#define FUZZ_WALKS_MAX      64
#define FUZZ_SCAN_WORDS     512


static unsigned char  *fuzz_stack;      /* one page, guard pages around */
static size_t          fuzz_page;


static uint32_t
fuzz_u32(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}


/* xorshift64: the stack's words, different for every input. */
static uint64_t
fuzz_next(uint64_t *state)
{
    uint64_t  x = *state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;

    return x;
}


static void
fuzz_stack_init(void)
{
    unsigned char  *m;

    fuzz_page = (size_t) sysconf(_SC_PAGESIZE);

    /* [guard][stack][guard]: a read outside the stack faults. */
    m = mmap(NULL, 3 * fuzz_page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    if (m == MAP_FAILED
        || mprotect(m + fuzz_page, fuzz_page, PROT_READ | PROT_WRITE) != 0)
    {
        abort();
    }

    fuzz_stack = m + fuzz_page;
}


/*
 * Words that look like what a stack holds: return addresses into the
 * table's code (just past a row's pc, or anywhere), saved frame pointers
 * into the stack, zeros and garbage.
 */
static void
fuzz_fill_stack(const prof_unwind_object_t *o, uintptr_t seg,
    size_t seg_size, uint64_t seed)
{
    size_t      i;
    uint64_t    r, state;
    uintptr_t  *words, w;

    words = (uintptr_t *) fuzz_stack;
    state = seed | 1;

    for (i = 0; i < fuzz_page / sizeof(uintptr_t); i++) {
        r = fuzz_next(&state);

        switch (r & 7) {
        case 0:
        case 1:
        case 2:
            if (o != NULL) {
                w = o->base + o->rows[(r >> 8) % o->row_count].pc
                    + ((r >> 40) & 15);
            } else {
                w = seg + (seg_size ? (r >> 8) % seg_size : 0);
            }
            break;
        case 3:
            w = (uintptr_t) fuzz_stack + ((r >> 8) % fuzz_page & ~7UL);
            break;
        case 4:
            /* a pointer to a buffer on the stack: any alignment */
            w = (uintptr_t) fuzz_stack + (r >> 8) % fuzz_page;
            break;
        case 5:
            w = 0;
            break;
        case 6:
            /* a return site or a call-out where there are */
            if (o != NULL && o->site_count > 0 && (r & 8)) {
                w = o->base + o->sites[(r >> 8) % o->site_count];
            } else if (o != NULL && o->callout_count > 0) {
                w = o->base + o->callouts[(r >> 8) % o->callout_count];
            } else {
                w = seg + (seg_size ? (r >> 8) % seg_size : 0);
            }
            break;
        default:
            w = (uintptr_t) r;
        }

        words[i] = w;
    }
}


/* Offsets past calls in code without rules (gap) or with them. */
static void
fuzz_check_sites(const prof_unwind_object_t *o, const uint32_t *a,
    uint32_t n, int gap)
{
    uint32_t           i, lo, hi, mid;
    const prof_row_t  *row;

    for (i = 0; i < n; i++) {
        if ((i > 0 && a[i] <= a[i - 1]) || a[i] <= o->rows[0].pc
            || a[i] > o->rows[o->row_count - 1].pc)
        {
            abort();
        }

        /* The row in force at the call's last byte. */
        lo = 0;
        hi = o->row_count - 1;
        while (lo < hi) {
            mid = lo + (hi - lo + 1) / 2;
            if (o->rows[mid].pc <= a[i] - 1) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        row = &o->rows[lo];

        if ((row->cfa == PROF_CFA_NONE) != gap) {
            abort();
        }
    }
}


/* The table is what its builder promises (unwind_table.h). */
static void
fuzz_check_table(const prof_unwind_table_t *t, uintptr_t seg,
    size_t seg_size)
{
    uint32_t                     i, pages;
    const prof_unwind_object_t  *o;

    if (t->object_count > 1) {
        abort();
    }

    if (t->object_count == 0) {
        return;
    }

    o = &t->objects[0];

    if (o->row_count < 2 || o->start >= o->end || o->start < seg
        || o->end > seg + seg_size
        || o->start != o->base + o->rows[0].pc
        || o->end != o->base + o->rows[o->row_count - 1].pc)
    {
        abort();
    }

    for (i = 1; i < o->row_count; i++) {
        if (o->rows[i].pc <= o->rows[i - 1].pc
            || o->rows[i].cfa > PROF_CFA_OUTERMOST)
        {
            abort();
        }

        /* Saved registers only in rows with a rule. */
        if ((o->rows[i].cfa == PROF_CFA_NONE
             || o->rows[i].cfa == PROF_CFA_OUTERMOST)
            && (o->rows[i].fp_slot != 0 || o->rows[i].aux_slot != 0))
        {
            abort();
        }
    }

    pages = (uint32_t) ((o->end - o->start) >> PROF_UNWIND_PAGE_SHIFT) + 2;

    for (i = 0; i < pages; i++) {
        if (o->pages[i] >= o->row_count
            || (i > 0 && o->pages[i] < o->pages[i - 1]))
        {
            abort();
        }
    }

    /* Return sites after code without rules, call-outs after code with
       them: sorted (the walk's binary search), within the object. */
    fuzz_check_sites(o, o->sites, o->site_count, 1);
    fuzz_check_sites(o, o->callouts, o->callout_count, 0);
}


/* One walk as the signal path does it: the table, then stack scans. */
static void
fuzz_walk(const prof_unwind_table_t *t, uintptr_t pc, uintptr_t sp,
    uintptr_t fp, int caller)
{
    int                   n, count, scans;
    void                 *frames[FUZZ_FRAMES_MAX + 1];
    prof_unwind_regs_t    regs;
    prof_unwind_status_e  status;

    regs.pc = pc;
    regs.sp = sp;
    regs.fp = fp;
    regs.aux = (uintptr_t) fuzz_stack + ((fp ^ sp) % fuzz_page & ~7UL);
    regs.lr = pc + ((fp >> 4) & 0x3c);  /* code near pc: often a return
                                           address, or not */
    regs.stack_low = (uintptr_t) fuzz_stack;
    regs.stack_high = (uintptr_t) fuzz_stack + fuzz_page;
    regs.stack_delta = 0;
    regs.caller = caller;
    regs.where = NULL;

    n = 0;
    scans = 0;

    for ( ;; ) {
        count = -1;
        status = prof_unwind(t, &regs, frames + n, FUZZ_FRAMES_MAX + 1 - n,
                             &count);

        if (count < 0 || count > FUZZ_FRAMES_MAX + 1 - n
            || (int) status > PROF_UNWIND_BAD_STACK
            || (count > 0 && regs.pc != (uintptr_t) frames[n + count - 1])
            || regs.sp < regs.stack_low || regs.sp > regs.stack_high)
        {
            /*
             * BAD_STACK on entry writes no frame and leaves regs alone; an
             * outermost frame's CFA may be the top of the stack.
             */
            if (!(status == PROF_UNWIND_BAD_STACK && count == 0)) {
                abort();
            }
        }

        n += count;

        if (status == PROF_UNWIND_END || status == PROF_UNWIND_FULL
            || (status != PROF_UNWIND_NO_OBJECT
                && status != PROF_UNWIND_NO_RULE)
            || scans == prof_unwind_scans(t) || count == 0
            || n > FUZZ_FRAMES_MAX)
        {
            break;
        }

        if (prof_unwind_scan(t, &regs, FUZZ_SCAN_WORDS) != 0) {
            break;
        }

        if (regs.sp < regs.stack_low || regs.sp > regs.stack_high
            || regs.caller != 1)
        {
            abort();
        }

        scans++;
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                       seg_size, i, walks, step;
    uint8_t                     *seg;
    uint64_t                     seed, r, state;
    uintptr_t                    base, pc, sp, fp;
    prof_unwind_table_t         *t;
    const prof_unwind_object_t  *o;

    if (fuzz_stack == NULL) {
        fuzz_stack_init();
    }

    if (size < FUZZ_HEADER_SIZE) {
        return 0;
    }

    /* A copy of exactly the segment's bytes: reading past it is caught. */
    seg_size = size - FUZZ_HEADER_SIZE;
    seg = malloc(seg_size ? seg_size : 1);
    if (seg == NULL) {
        return 0;
    }
    memcpy(seg, data + FUZZ_HEADER_SIZE, seg_size);

    base = (uintptr_t) seg;

    t = prof_unwind_table_from_image(base, seg, seg_size, fuzz_u32(data),
                                     fuzz_u32(data + 4));
    if (t == NULL) {
        free(seg);
        return 0;
    }

    fuzz_check_table(t, base, seg_size);

    if (prof_unwind_table_objects(t) + prof_unwind_table_skipped(t) != 1) {
        abort();
    }

    o = (t->object_count > 0) ? &t->objects[0] : NULL;

    seed = 0xcbf29ce484222325ULL;
    for (i = 0; i < size; i++) {
        seed = (seed ^ data[i]) * 0x100000001b3ULL;
    }

    fuzz_fill_stack(o, base, seg_size, seed);

    /* From rows spread over the table, and from anywhere in the segment. */
    walks = (o != NULL) ? o->row_count : 0;
    step = (walks > FUZZ_WALKS_MAX) ? walks / FUZZ_WALKS_MAX : 1;
    state = seed ^ 0x9e3779b97f4a7c15ULL;

    for (i = 0; o != NULL && i < walks; i += step) {
        r = fuzz_next(&state);
        pc = o->base + o->rows[i].pc + (r & 3);
        sp = (uintptr_t) fuzz_stack + ((r >> 8) % fuzz_page & ~7UL);
        /* rbp: a frame pointer, or a register like any other */
        fp = (r & 4) ? (uintptr_t) fuzz_stack + ((r >> 24) % fuzz_page)
                     : (uintptr_t) (r >> 16);
        fp &= ~7UL;
        fuzz_walk(t, pc, sp, fp, (int) ((r >> 3) & 1));
    }

    for (i = 0; i < 8; i++) {
        r = fuzz_next(&state);
        pc = base + (seg_size ? (r >> 4) % (seg_size + 16) : 0);
        /* sp: 8-aligned as in compiled code, maybe off the stack */
        sp = ((uintptr_t) fuzz_stack + ((r >> 20) % (fuzz_page + 64)) - 32)
             & ~7UL;
        fp = (uintptr_t) fuzz_stack + ((r >> 40) % fuzz_page & ~7UL);
        fuzz_walk(t, pc, sp, fp, (int) (r & 1));
    }

    prof_unwind_table_free(t);
    free(seg);

    return 0;
}
