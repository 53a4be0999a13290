/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The layout of an unwind table, shared by its builder (worker/unwind.c,
 * worker/unwind_build.c), its walker (unwind_walk.c, which runs in the
 * worker's signal handler and in the profiler process) and the fuzz
 * target that checks what the builder made (t/fuzz/fuzz_unwind.c). Not a
 * public interface: see worker/unwind.h and unwind_walk.h. Includers
 * define _GNU_SOURCE (the rows' layout is the machine's, arch.h).
 *
 * A table lives in one anonymous mapping of its own (rows, page indexes,
 * object descriptors and the row cache), written while the table is built
 * and only read afterwards, except for the cache, which the walk writes.
 */

#ifndef PROF_UNWIND_TABLE_H
#define PROF_UNWIND_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/arch.h"
#include "common/unwind_walk.h"


/* Code bytes an index entry covers: a few rows, most often one cache line. */
#define PROF_UNWIND_PAGE_SHIFT   8

/*
 * A frame pointer's slot: a byte where a prologue saves it next to the
 * return address (x86-64: just below it); 16 bits where the frame record
 * lies at the bottom of the frame, below its locals (AArch64).
 */
#ifdef PROF_ARCH_RA_IN_ROWS
typedef int16_t  prof_fp_slot_t;
#define PROF_UNWIND_FP_UNKNOWN   INT16_MIN
#define PROF_UNWIND_FP_MAX       INT16_MAX
#else
typedef int8_t   prof_fp_slot_t;
#define PROF_UNWIND_FP_UNKNOWN   INT8_MIN
#define PROF_UNWIND_FP_MAX       INT8_MAX
#endif
#define PROF_UNWIND_AUX_UNKNOWN  (-16)        /* the least 5-bit slot */

/* The rows last used, by pc (a power of two). */
#define PROF_UNWIND_CACHE_SIZE   2048

/*
 * Code without a rule this close past the program's entry point is the
 * program's first function (_start), whose call is the stack's first
 * frame where no FDE says so (musl's crt1.o has none in .eh_frame).
 */
#define PROF_UNWIND_ENTRY_SPAN   64


enum {
    PROF_CFA_NONE = 0,                  /* no rule the walk can follow */
    PROF_CFA_SP,                        /* from the stack pointer */
    PROF_CFA_FP,                        /* from the frame pointer */
    PROF_CFA_AUX,                       /* from the auxiliary register */
    PROF_CFA_OUTERMOST                  /* return address undefined */
};


/*
 * From pc on (an offset from the object's base), until the next row. The
 * return address is where the machine's calls leave it (arch.h's
 * PROF_ARCH_RA_SLOT), a frame that keeps it elsewhere has no rule; or,
 * where calls leave it in a link register (PROF_ARCH_RA_IN_ROWS), where
 * the row says.
 */
typedef struct {
    uint32_t   pc;
    unsigned   cfa:3;                   /* PROF_CFA_* */
    signed     aux_slot:5;              /* the auxiliary register saved
                                           at CFA + 8 * aux_slot, 0: not
                                           saved by this frame */
    prof_fp_slot_t  fp_slot;            /* the frame pointer saved at
                                           CFA + 8 * fp_slot,
                                           0: not saved by this frame */
    int16_t    cfa_slots;               /* CFA = register + 8 * cfa_slots */
#ifdef PROF_ARCH_RA_IN_ROWS
    int16_t    ra_slot;                 /* the return address saved at
                                           CFA + 8 * ra_slot, 0: still in
                                           the link register */
#endif
} prof_row_t;

#ifdef PROF_ARCH_RA_IN_ROWS
_Static_assert(sizeof(prof_row_t) == 12, "a row is 12 bytes");
#else
_Static_assert(sizeof(prof_row_t) == 8, "a row is 8 bytes");
#endif


/*
 * An object's executable segments: rows for all of its code, those of
 * code no FDE covers without a rule. Its return sites, when it has no
 * unwind tables to speak of (unwind_build.h: sparse; musl's libc), are
 * the offsets just past the call instructions of that code (sorted):
 * where a stack scan may take a word for a return address without a rule
 * to prove it; any object has those of the first bytes past the
 * program's entry point (_start). Its call-outs, in a
 * table where some object lacks unwind tables: the offsets just past the
 * calls of its other code that may lead into another object (through the
 * PLT, or a pointer): a scan from a frame without rules in another object
 * takes a word of code with rules for that frame's caller only there,
 * where a stale return address (of a call that returned long ago, in a
 * slot the frame left unwritten) would otherwise pass.
 */
typedef struct {
    uintptr_t         base;             /* load bias */
    uintptr_t         start;            /* pcs covered: [start, end) */
    uintptr_t         end;
    const prof_row_t *rows;
    uint32_t          row_count;
    uint32_t          site_count;
    uint32_t          callout_count;
    const uint32_t   *pages;            /* row in force at each page */
    const uint32_t   *sites;            /* offsets from base */
    const uint32_t   *callouts;         /* offsets from base */
} prof_unwind_object_t;


typedef struct {
    uintptr_t   pc;
    prof_row_t  row;
} prof_unwind_cache_entry_t;


struct prof_unwind_table_s {
    prof_unwind_cache_entry_t  *cache;
    prof_unwind_object_t       *objects;    /* sorted by start */
    unsigned                    object_count;
    uintptr_t                   code_low;   /* of all objects */
    uintptr_t                   code_high;
    uintptr_t                   entry;      /* the program's, or 0 */
    int                         callouts;   /* objects have call-outs */

    unsigned long long          adds;       /* dl_iterate_phdr's counts */
    unsigned long long          subs;
    unsigned                    skipped;    /* objects left out */
    size_t                      bytes;      /* used of the mapping */

    unsigned char              *arena;      /* the mapping */
    size_t                      arena_size;
};


#endif /* PROF_UNWIND_TABLE_H */
