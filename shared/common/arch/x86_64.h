/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * x86-64 (Linux, System V ABI) as the unwinder and the signal path see it:
 * the registers of interrupted code, their DWARF numbers, where a call
 * leaves the return address and a prologue the frame pointer, and the
 * cycle counter.
 *
 * Included through common/arch.h only, from files that define _GNU_SOURCE
 * (REG_RIP and the like). Constants and static inline functions: callable
 * from the signal handler (async-signal-safe, nothing blocks, allocates or
 * is called out of line) and from anywhere else.
 */

#ifndef PROF_ARCH_X86_64_H
#define PROF_ARCH_X86_64_H

#include <stdint.h>
#include <ucontext.h>


/*
 * DWARF register numbers (the psABI's) of the stack pointer (rsp) and the
 * frame pointer (rbp). The return address's column is the one each CIE
 * names (16 here). The auxiliary register: rbx, which glibc's dynamic
 * linker defines its CFA from where it aligns the stack (the lazy
 * binding's _dl_runtime_resolve, TLS descriptors).
 */
#define PROF_ARCH_DW_SP          7
#define PROF_ARCH_DW_FP          6
#define PROF_ARCH_DW_AUX         3

/*
 * A call pushes the return address: it lies in the word below the CFA
 * (the stack pointer before the call), in every frame.
 */
#define PROF_ARCH_RA_SLOT        (-1)

/* Bytes below sp a leaf may use, which signal delivery leaves alone. */
#define PROF_ARCH_RED_ZONE       128

/*
 * A function that keeps a frame pointer pushes its caller's first thing
 * ("push %rbp"): in the word below its return address.
 */
#define PROF_ARCH_PUSHED_FP_SLOT (-1)


/* Where the code a signal interrupted was: rip, rsp, rbp and rbx (no
   link register). */
static inline void
prof_arch_context_regs(const ucontext_t *uc, uintptr_t *pc, uintptr_t *sp,
    uintptr_t *fp, uintptr_t *aux, uintptr_t *lr)
{
    *pc = uc->uc_mcontext.gregs[REG_RIP];
    *sp = uc->uc_mcontext.gregs[REG_RSP];
    *fp = uc->uc_mcontext.gregs[REG_RBP];
    *aux = uc->uc_mcontext.gregs[REG_RBX];
    *lr = 0;
}


/* A code address as stored: return addresses carry no signature. */
static inline uintptr_t
prof_arch_strip_pc(uintptr_t pc)
{
    return pc;
}


/* The time stamp counter (rdtsc): ticks of the core that reads it. */
static inline uint64_t
prof_arch_ticks(void)
{
    return __builtin_ia32_rdtsc();
}


/*
 * The length of "call" through a register or memory (opcode ff /2) whose
 * ModRM byte is m[0] (then the SIB byte, when there is one and n, the
 * bytes that may be read from m, allows), from the opcode on: its mod and
 * rm fields say whether a SIB byte and a displacement follow. 0: not
 * ff /2.
 */
static inline unsigned
prof_arch_indirect_call_len(const uint8_t *m, unsigned n)
{
    unsigned  mod = m[0] >> 6, rm = m[0] & 7, sib = (rm == 4);

    if (((m[0] >> 3) & 7) != 2) {
        return 0;
    }

    switch (mod) {
    case 0:
        if (rm == 5) {
            return 6;                        /* rip + disp32 */
        }
        if (sib && n >= 2 && (m[1] & 7) == 5) {
            return 7;                        /* SIB without base: disp32 */
        }
        return 2 + sib;
    case 1:
        return 3 + sib;                      /* disp8 */
    case 2:
        return 6 + sib;                      /* disp32 */
    default:
        return 2;                            /* a register */
    }
}


/*
 * The call instruction ending just before p, as far as the before bytes
 * that may be read below p tell: PROF_ARCH_CALL_INDIRECT (through a
 * register or memory, with or without a REX prefix: a GOT slot, a
 * function pointer), PROF_ARCH_CALL_DIRECT ("call rel32" to a target in
 * [low, high), the object's own code; *target set), or 0. Used at build
 * time on code without unwind tables (musl's libc), whose return sites a
 * stack scan takes for return addresses: a guess that a scan makes anyway.
 * Indirect forms are tried first: a "call rel32" whose displacement's
 * last bytes read as one (ff 14 ..) counts as indirect, a call-out.
 */
#define PROF_ARCH_CALL_DIRECT    1
#define PROF_ARCH_CALL_INDIRECT  2

/* Instructions end anywhere; the shortest call has 2 bytes. */
#define PROF_ARCH_INSN_ALIGN     1
#define PROF_ARCH_CALL_MIN       2

/*
 * Whether the code at p (PROF_ARCH_PLT_BYTES of it readable) is a PLT
 * entry: jmp *GOT(%rip), after an endbr64 and a bnd prefix where there
 * are.
 */
#define PROF_ARCH_PLT_BYTES      11

static inline int
prof_arch_plt_entry(const uint8_t *p)
{
    if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa) {
        p += 4;                                 /* endbr64 */
    }

    if (p[0] == 0xf2) {
        p++;                                    /* bnd */
    }

    return p[0] == 0xff && p[1] == 0x25;
}

static inline int
prof_arch_call_ends_at(const uint8_t *p, uintptr_t before, uintptr_t low,
    uintptr_t high, uintptr_t *target)
{
    int32_t    rel;
    uintptr_t  to;
    unsigned   len;

    for (len = 2; len <= 7 && len <= before; len++) {
        if (p[-(int) len] == 0xff
            && prof_arch_indirect_call_len(p + 1 - (int) len, len - 1)
               == len)
        {
            return PROF_ARCH_CALL_INDIRECT;
        }
    }

    if (before >= 5 && p[-5] == 0xe8) {
        rel = (int32_t) ((uint32_t) p[-4] | (uint32_t) p[-3] << 8
                         | (uint32_t) p[-2] << 16 | (uint32_t) p[-1] << 24);
        to = (uintptr_t) p + (uintptr_t) (intptr_t) rel;
        if (to >= low && to < high) {
            *target = to;
            return PROF_ARCH_CALL_DIRECT;
        }
    }

    return 0;
}


#endif /* PROF_ARCH_X86_64_H */
