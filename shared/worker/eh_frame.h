/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Call frame information as .eh_frame_hdr and .eh_frame hold it: the
 * header's search table, CIEs, FDEs, and the interpreter of their call
 * frame instructions, which says what a walk needs of each frame: how its
 * CFA is computed, where the return address and the frame pointer (arch.h)
 * were saved.
 *
 * Used by the unwind table's builder (unwind_build.c) and its sizing pass
 * (unwind.c), outside the signal handler, also inside dl_iterate_phdr:
 * nothing here blocks, allocates or takes a lock. Every read stays within
 * the bounds the caller gives (the loaded segment that holds the data):
 * corrupt data is refused, never read past. Memory: the caller's; nothing
 * is kept.
 */

#ifndef PROF_EH_FRAME_H
#define PROF_EH_FRAME_H

#include <stddef.h>
#include <stdint.h>


/* Bytes being read: [pos, end); bad once a read would have gone past. */
typedef struct {
    const uint8_t  *pos;
    const uint8_t  *end;
    int             bad;
} prof_eh_cursor_t;


/* How a register was saved. */
enum {
    PROF_EH_RULE_SAME = 0,                  /* not: the caller's value */
    PROF_EH_RULE_OFFSET,                    /* at CFA + offset */
    PROF_EH_RULE_UNDEFINED,
    PROF_EH_RULE_OTHER                      /* elsewhere */
};


/* Where a register the unwinder follows was saved. */
typedef struct {
    int        rule;                        /* PROF_EH_RULE_* */
    int64_t    offset;
} prof_eh_reg_rule_t;


/* What the instructions say so far. */
typedef struct {
    int                 cfa_reg;
    int64_t             cfa_offset;
    int                 cfa_ok;
    prof_eh_reg_rule_t  fp;                 /* PROF_ARCH_DW_FP */
    prof_eh_reg_rule_t  aux;                /* PROF_ARCH_DW_AUX */
    prof_eh_reg_rule_t  ra;                 /* the CIE's return address */
} prof_eh_cfa_state_t;


typedef struct {
    const uint8_t        *address;      /* of the CIE, to reuse it */
    uint64_t              code_align;
    int64_t               data_align;
    uint64_t              ra_reg;
    uint8_t               fde_encoding;
    int                   augmented;    /* 'z': FDEs have augmentation
                                           data */
    prof_eh_cfa_state_t   initial;
} prof_eh_cie_t;


/*
 * Called by prof_eh_run_cfa at every advance of the location: the rules
 * in force from pc on. Non-zero stops the run.
 */
typedef int (*prof_eh_emit_pt)(void *data, uintptr_t pc,
    const prof_eh_cfa_state_t *state);


/*
 * Whether the .eh_frame_hdr at hdr (size bytes, readable) is one whose
 * search table prof_eh_hdr_fde reads: version 1, entries of two 4-byte
 * offsets from hdr.
 */
int prof_eh_hdr_searchable(const uint8_t *hdr, size_t size);

/*
 * The search table of the .eh_frame_hdr at hdr (size bytes, readable):
 * 0 with *table its first entry and *count its entries (each 8 bytes,
 * within size), or -1 when the header cannot be read.
 */
int prof_eh_hdr_table(const uint8_t *hdr, size_t size,
    const uint8_t **table, uint64_t *count);

/*
 * The FDE an entry of that table points to, when the header is searchable,
 * or NULL when that lies outside [low, high), the segment that holds hdr.
 */
const uint8_t *prof_eh_hdr_fde(const uint8_t *hdr, const uint8_t *entry,
    const uint8_t *low, const uint8_t *high);

/*
 * Opens the FDE at fde, within the segment [low, high): its CIE parsed
 * into *cie (kept when it is that one already; cie->address NULL: none),
 * its code [*pc, *pc + *range), and c at its call frame instructions.
 * 0, or -1 when fde is no FDE (a CIE) or is corrupt.
 */
int prof_eh_fde_open(const uint8_t *fde, const uint8_t *low,
    const uint8_t *high, prof_eh_cie_t *cie, prof_eh_cursor_t *c,
    uintptr_t *pc, uintptr_t *range);

/*
 * Runs call frame instructions from c on, at pc (with emit NULL: a CIE's
 * initial ones), into state: emit is called at every advance of the
 * location and at the end. 0, or -1 at an instruction not understood or
 * corrupt data.
 */
int prof_eh_run_cfa(prof_eh_cursor_t *c, const prof_eh_cie_t *cie,
    prof_eh_cfa_state_t *state, uintptr_t pc, uint8_t fde_encoding,
    prof_eh_emit_pt emit, void *data);


#endif /* PROF_EH_FRAME_H */
