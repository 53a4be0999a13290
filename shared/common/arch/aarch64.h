/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * AArch64 (Linux, AAPCS64) as the unwinder and the signal path see it:
 * the registers of interrupted code, their DWARF numbers, where a frame
 * keeps its return address (call frame information says, frame by frame:
 * a call leaves it in the link register x30, which a function that calls
 * others saves, with x29, in a frame record), return addresses signed by
 * pointer authentication, and the cycle counter.
 *
 * Included through common/arch.h only, from files that define _GNU_SOURCE.
 * Constants and static inline functions: callable from the signal handler
 * (async-signal-safe, nothing blocks, allocates or is called out of line)
 * and from anywhere else.
 */

#ifndef PROF_ARCH_AARCH64_H
#define PROF_ARCH_AARCH64_H

#include <stdint.h>
#include <ucontext.h>


/*
 * DWARF register numbers (the AArch64 DWARF ABI's) of the stack pointer
 * (sp), the frame pointer (x29) and the link register (x30, the return
 * address's column of every CIE). No auxiliary register: no code defines
 * its CFA from another.
 */
#define PROF_ARCH_DW_SP          31
#define PROF_ARCH_DW_FP          29
#define PROF_ARCH_DW_LR          30

/*
 * Where the return address lies is each row's (a frame record may be
 * anywhere in its frame), in words from the CFA; a row whose return
 * address is still in the link register (a leaf, or a function before it
 * saved it) has none: the walk takes the register for the interrupted
 * frame only.
 */
#define PROF_ARCH_RA_IN_ROWS     1

/*
 * Return addresses may be signed (pointer authentication, code built with
 * -mbranch-protection): the call frame instruction that says where they
 * are (DW_CFA_AARCH64_negate_ra_state) changes nothing for the walk,
 * which strips any signature (prof_arch_strip_pc).
 */
#define PROF_ARCH_DW_CFA_NEGATE_RA_STATE  0x2d

/* Linux on AArch64 leaves no red zone below sp. */
#define PROF_ARCH_RED_ZONE       0

/*
 * A frame record is {x29, x30}: the caller's frame pointer in the word
 * below the return address.
 */
#define PROF_ARCH_PUSHED_FP_SLOT (-1)

/*
 * The scan's guess of a frame's CFA from the slot of its return address:
 * none (a frame record may be anywhere in its frame); the caller's frame
 * is found from the frame pointer below it.
 */
#define PROF_ARCH_RA_SLOT_GUESS  (-1)


/* Where the code a signal interrupted was: pc, sp, x29 and x30. */
static inline void
prof_arch_context_regs(const ucontext_t *uc, uintptr_t *pc, uintptr_t *sp,
    uintptr_t *fp, uintptr_t *aux, uintptr_t *lr)
{
    *pc = uc->uc_mcontext.pc;
    *sp = uc->uc_mcontext.sp;
    *fp = uc->uc_mcontext.regs[29];
    *aux = 0;
    *lr = uc->uc_mcontext.regs[30];
}


/*
 * A code address as stored (in the link register or a frame record),
 * without the signature pointer authentication may have put in its high
 * bits: xpaclri strips x30's (a no-op, "hint 7", on a CPU without it),
 * whatever width the kernel's addresses have.
 */
static inline uintptr_t
prof_arch_strip_pc(uintptr_t pc)
{
    register uintptr_t  x30 __asm__("x30") = pc;

    __asm__ ("hint 7" : "+r" (x30));

    return x30;
}


/* The virtual counter (cntvct_el0): ticks at a fixed rate, all cores. */
static inline uint64_t
prof_arch_ticks(void)
{
    uint64_t  t;

    __asm__ volatile ("mrs %0, cntvct_el0" : "=r" (t));

    return t;
}


/* The instruction at p, little-endian. */
static inline uint32_t
prof_arch_insn(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}


/*
 * The call instruction ending just before p (4 bytes, as before allows):
 * PROF_ARCH_CALL_INDIRECT ("blr", "blraa" and the like: a pointer, a
 * PLT's), PROF_ARCH_CALL_DIRECT ("bl" to a target in [low, high), the
 * object's own code; *target set), or 0. Used at build time on code
 * without unwind tables, whose return sites a stack scan takes for return
 * addresses.
 */
#define PROF_ARCH_CALL_DIRECT    1
#define PROF_ARCH_CALL_INDIRECT  2

/* Instructions are 4 bytes, 4-byte aligned. */
#define PROF_ARCH_INSN_ALIGN     4
#define PROF_ARCH_CALL_MIN       4

static inline int
prof_arch_call_ends_at(const uint8_t *p, uintptr_t before, uintptr_t low,
    uintptr_t high, uintptr_t *target)
{
    int32_t    imm;
    uint32_t   insn;
    uintptr_t  to;

    if (before < 4) {
        return 0;
    }

    insn = prof_arch_insn(p - 4);

    /* blr Xn; blraa, blrab, blraaz, blrabz Xn(, Xm) */
    if ((insn & 0xfffffc1f) == 0xd63f0000
        || (insn & 0xfefff800) == 0xd63f0800)
    {
        return PROF_ARCH_CALL_INDIRECT;
    }

    if ((insn & 0xfc000000) == 0x94000000) {             /* bl imm26 */
        imm = (int32_t) (insn << 6) >> 6;
        to = (uintptr_t) p - 4 + (uintptr_t) ((intptr_t) imm * 4);
        if (to >= low && to < high) {
            *target = to;
            return PROF_ARCH_CALL_DIRECT;
        }
    }

    return 0;
}


/*
 * Whether the code at p (PROF_ARCH_PLT_BYTES of it readable) is a PLT
 * entry: "adrp x16, GOT page; ldr x17, [x16, #slot]", after a "bti c"
 * where there is one.
 */
#define PROF_ARCH_PLT_BYTES      12

static inline int
prof_arch_plt_entry(const uint8_t *p)
{
    if (prof_arch_insn(p) == 0xd503245f) {
        p += 4;                                 /* bti c */
    }

    return (prof_arch_insn(p) & 0x9f00001f) == 0x90000010
           && (prof_arch_insn(p + 4) & 0xffc003ff) == 0xf9400211;
}


#endif /* PROF_ARCH_AARCH64_H */
