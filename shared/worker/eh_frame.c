/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * .eh_frame_hdr and .eh_frame read (eh_frame.h): DW_EH_PE pointers, CIEs,
 * FDEs, and their call frame instructions run to the rules a walk needs.
 */

#define _GNU_SOURCE

#include <string.h>

#include "worker/arch.h"
#include "worker/eh_frame.h"


#define PROF_PE_OMIT         0xff
#define PROF_PE_PCREL        0x10
#define PROF_PE_DATAREL      0x30
#define PROF_PE_TABLE        0x3b    /* datarel | sdata4 */

#define PROF_STATE_STACK     8       /* DW_CFA_remember_state depth */

/* An entry's length beyond this is corrupt. */
#define PROF_ENTRY_MAX       (1 << 20)


static uint64_t
prof_read_leb(prof_eh_cursor_t *c, unsigned *shift, uint8_t *last)
{
    uint8_t   byte;
    uint64_t  value;

    value = 0;
    *shift = 0;

    do {
        if (c->pos >= c->end || *shift > 63) {
            c->bad = 1;
            *last = 0;
            return 0;
        }
        byte = *c->pos++;
        value |= (uint64_t) (byte & 0x7f) << *shift;
        *shift += 7;
    } while (byte & 0x80);

    *last = byte;

    return value;
}


static uint64_t
prof_read_uleb(prof_eh_cursor_t *c)
{
    uint8_t   last;
    unsigned  shift;

    return prof_read_leb(c, &shift, &last);
}


static int64_t
prof_read_sleb(prof_eh_cursor_t *c)
{
    uint8_t   last;
    unsigned  shift;
    uint64_t  value;

    value = prof_read_leb(c, &shift, &last);

    if (shift < 64 && (last & 0x40)) {
        value |= ~(uint64_t) 0 << shift;
    }

    return (int64_t) value;
}


static uint64_t
prof_read_bytes(prof_eh_cursor_t *c, size_t n)
{
    uint8_t   b1;
    uint16_t  b2;
    uint32_t  b4;
    uint64_t  b8;

    if (c->pos > c->end || (size_t) (c->end - c->pos) < n) {
        c->bad = 1;
        return 0;
    }

    switch (n) {
    case 1: memcpy(&b1, c->pos, 1); c->pos += 1; return b1;
    case 2: memcpy(&b2, c->pos, 2); c->pos += 2; return b2;
    case 4: memcpy(&b4, c->pos, 4); c->pos += 4; return b4;
    default: memcpy(&b8, c->pos, 8); c->pos += 8; return b8;
    }
}


/* Skips a block whose ULEB128 length comes first. */
static void
prof_skip_block(prof_eh_cursor_t *c)
{
    uint64_t  length;

    length = prof_read_uleb(c);

    if (c->bad || c->pos > c->end || length > (uint64_t) (c->end - c->pos)) {
        c->bad = 1;
        return;
    }

    c->pos += length;
}


/* A DW_EH_PE-encoded pointer; data_base for datarel. */
static uintptr_t
prof_read_encoded(prof_eh_cursor_t *c, uint8_t encoding, uintptr_t data_base)
{
    uintptr_t       value;
    const uint8_t  *at = c->pos;

    if (encoding == PROF_PE_OMIT) {
        return 0;
    }

    switch (encoding & 0x0f) {
    case 0x00: value = prof_read_bytes(c, 8); break;
    case 0x01: value = prof_read_uleb(c); break;
    case 0x02: value = (uint16_t) prof_read_bytes(c, 2); break;
    case 0x03: value = (uint32_t) prof_read_bytes(c, 4); break;
    case 0x04: value = prof_read_bytes(c, 8); break;
    case 0x09: value = (uintptr_t) prof_read_sleb(c); break;
    case 0x0a: value = (uintptr_t) (int16_t) prof_read_bytes(c, 2); break;
    case 0x0b: value = (uintptr_t) (int32_t) prof_read_bytes(c, 4); break;
    case 0x0c: value = prof_read_bytes(c, 8); break;
    default:
        c->bad = 1;
        return 0;
    }

    switch (encoding & 0x70) {
    case 0x00: break;
    case PROF_PE_PCREL: value += (uintptr_t) at; break;
    case PROF_PE_DATAREL: value += data_base; break;
    default:
        c->bad = 1;
        return 0;
    }

    if (encoding & 0x80) {          /* indirect: not used for code ranges */
        c->bad = 1;
    }

    return value;
}


/* An FDE's or CIE's length; c ends up at its id field, end after it. */
static int
prof_read_entry(prof_eh_cursor_t *c, const uint8_t **entry_end)
{
    uint64_t  length;

    length = (uint32_t) prof_read_bytes(c, 4);
    if (length == 0xffffffff) {
        length = prof_read_bytes(c, 8);
    }

    if (c->bad || length == 0 || length > (uint64_t) (c->end - c->pos)) {
        return -1;
    }

    *entry_end = c->pos + length;
    c->end = *entry_end;

    return 0;
}


/* A factored offset times the CIE's alignment; overflow is corrupt data. */
static int64_t
prof_scale(prof_eh_cursor_t *c, int64_t value, int64_t align)
{
    int64_t  result;

    if (__builtin_mul_overflow(value, align, &result)) {
        c->bad = 1;
        return 0;
    }

    return result;
}


/* The rule of a register the unwinder follows, or NULL. */
static prof_eh_reg_rule_t *
prof_eh_reg_rule(prof_eh_cfa_state_t *state, const prof_eh_cie_t *cie,
    uint64_t reg)
{
    if (reg == PROF_ARCH_DW_FP) {
        return &state->fp;
    }

    if (reg == cie->ra_reg) {
        return &state->ra;
    }

#ifdef PROF_ARCH_DW_AUX
    if (reg == PROF_ARCH_DW_AUX) {
        return &state->aux;
    }
#endif

    return NULL;
}


/*
 * Runs call frame instructions from pc (NULL rows: a CIE's initial ones).
 * Rows are emitted through emit() at every advance of the location.
 */
int
prof_eh_run_cfa(prof_eh_cursor_t *c, const prof_eh_cie_t *cie,
    prof_eh_cfa_state_t *state, uintptr_t pc, uint8_t fde_encoding,
    prof_eh_emit_pt emit, void *data)
{
    int                  depth;
    uint8_t              op;
    uint64_t             reg, delta;
    int64_t              offset;
    prof_eh_reg_rule_t  *r;
    prof_eh_cfa_state_t  initial, saved[PROF_STATE_STACK];

    initial = cie->initial;
    depth = 0;

    while (c->pos < c->end && !c->bad) {
        op = *c->pos++;
        delta = 0;
        reg = (uint64_t) -1;
        offset = 0;

        switch (op >> 6) {
        case 1:                                 /* advance_loc */
            delta = (op & 0x3f) * cie->code_align;
            goto advance;

        case 2:                                 /* offset */
            reg = op & 0x3f;
            offset = prof_scale(c, (int64_t) prof_read_uleb(c),
                                cie->data_align);
            goto set_offset;

        case 3:                                 /* restore */
            reg = op & 0x3f;
            goto restore;
        }

        switch (op) {
        case 0x00:                              /* nop */
            break;

        case 0x01:                              /* set_loc */
            delta = prof_read_encoded(c, fde_encoding, 0) - pc;
            goto advance;

        case 0x02:
            delta = prof_read_bytes(c, 1) * cie->code_align;
            goto advance;

        case 0x03:
            delta = prof_read_bytes(c, 2) * cie->code_align;
            goto advance;

        case 0x04:
            delta = prof_read_bytes(c, 4) * cie->code_align;
            goto advance;

        case 0x05:                              /* offset_extended */
            reg = prof_read_uleb(c);
            offset = prof_scale(c, (int64_t) prof_read_uleb(c),
                                cie->data_align);
            goto set_offset;

        case 0x06:                              /* restore_extended */
            reg = prof_read_uleb(c);
            goto restore;

        case 0x07:                              /* undefined */
        case 0x08:                              /* same_value */
            reg = prof_read_uleb(c);
            r = prof_eh_reg_rule(state, cie, reg);
            if (r != NULL) {
                r->rule = (op == 0x07) ? PROF_EH_RULE_UNDEFINED
                                       : PROF_EH_RULE_SAME;
            }
            break;

        case 0x09:                              /* register */
            reg = prof_read_uleb(c);
            (void) prof_read_uleb(c);
            goto set_other;

        case 0x0a:                              /* remember_state */
            if (depth == PROF_STATE_STACK) {
                return -1;
            }
            saved[depth++] = *state;
            break;

        case 0x0b:                              /* restore_state */
            if (depth == 0) {
                return -1;
            }
            *state = saved[--depth];
            break;

        case 0x0c:                              /* def_cfa */
            state->cfa_reg = (int) prof_read_uleb(c);
            state->cfa_offset = (int64_t) prof_read_uleb(c);
            state->cfa_ok = 1;
            break;

        case 0x0d:                              /* def_cfa_register */
            state->cfa_reg = (int) prof_read_uleb(c);
            break;

        case 0x0e:                              /* def_cfa_offset */
            state->cfa_offset = (int64_t) prof_read_uleb(c);
            break;

        case 0x0f:                              /* def_cfa_expression */
            prof_skip_block(c);
            state->cfa_ok = 0;
            break;

        case 0x10:                              /* expression */
        case 0x16:                              /* val_expression */
            reg = prof_read_uleb(c);
            prof_skip_block(c);
            goto set_other;

        case 0x11:                              /* offset_extended_sf */
            reg = prof_read_uleb(c);
            offset = prof_scale(c, prof_read_sleb(c), cie->data_align);
            goto set_offset;

        case 0x12:                              /* def_cfa_sf */
            state->cfa_reg = (int) prof_read_uleb(c);
            state->cfa_offset = prof_scale(c, prof_read_sleb(c),
                                           cie->data_align);
            state->cfa_ok = 1;
            break;

        case 0x13:                              /* def_cfa_offset_sf */
            state->cfa_offset = prof_scale(c, prof_read_sleb(c),
                                           cie->data_align);
            break;

        case 0x14:                              /* val_offset */
            reg = prof_read_uleb(c);
            (void) prof_read_uleb(c);
            goto set_other;

        case 0x15:                              /* val_offset_sf */
            reg = prof_read_uleb(c);
            (void) prof_read_sleb(c);
            goto set_other;

        case 0x2e:                              /* GNU_args_size */
            (void) prof_read_uleb(c);
            break;

#ifdef PROF_ARCH_DW_CFA_NEGATE_RA_STATE
        case PROF_ARCH_DW_CFA_NEGATE_RA_STATE:
            /* Return addresses signed from here on, or no longer: the
               walk strips any signature (arch.h). */
            break;
#endif

        case 0x2f:                              /* GNU_negative_offset_ext */
            reg = prof_read_uleb(c);
            offset = prof_scale(c, (int64_t) prof_read_uleb(c),
                                -cie->data_align);
            goto set_offset;

        default:
            return -1;
        }

        continue;

    advance:

        if (emit != NULL && delta != 0) {
            if (emit(data, pc, state) != 0) {
                return -1;
            }
        }
        pc += delta;
        continue;

    set_offset:

        r = prof_eh_reg_rule(state, cie, reg);
        if (r != NULL) {
            r->rule = PROF_EH_RULE_OFFSET;
            r->offset = offset;
        }
        continue;

    set_other:

        r = prof_eh_reg_rule(state, cie, reg);
        if (r != NULL) {
            r->rule = PROF_EH_RULE_OTHER;
        }
        continue;

    restore:

        r = prof_eh_reg_rule(state, cie, reg);
        if (r != NULL) {
            *r = *prof_eh_reg_rule(&initial, cie, reg);
        }
    }

    if (c->bad) {
        return -1;
    }

    return (emit != NULL) ? emit(data, pc, state) : 0;
}


static int
prof_parse_cie(const uint8_t *address, const uint8_t *limit,
    prof_eh_cie_t *cie)
{
    uint8_t            version, encoding;
    const char        *aug;
    const uint8_t     *end;
    prof_eh_cursor_t   c = { address, limit, 0 };

    memset(cie, 0, sizeof(prof_eh_cie_t));
    cie->address = address;
    cie->fde_encoding = 0;

    if (prof_read_entry(&c, &end) != 0 || prof_read_bytes(&c, 4) != 0) {
        return -1;
    }

    version = (uint8_t) prof_read_bytes(&c, 1);
    if (c.bad || (version != 1 && version != 3)) {
        return -1;
    }

    aug = (const char *) c.pos;
    while (c.pos < c.end && *c.pos != '\0') {
        c.pos++;
    }
    if (c.pos == c.end) {
        return -1;
    }
    c.pos++;

    if (aug[0] == 'e' && aug[1] == 'h') {
        return -1;                              /* pre-2000 GCC layout */
    }

    cie->code_align = prof_read_uleb(&c);
    cie->data_align = prof_read_sleb(&c);
    if (cie->data_align == INT64_MIN) {
        return -1;
    }
    cie->ra_reg = (version == 1) ? prof_read_bytes(&c, 1) : prof_read_uleb(&c);

    if (aug[0] == 'z') {
        cie->augmented = 1;
        (void) prof_read_uleb(&c);

        for (aug++; *aug != '\0' && !c.bad; aug++) {
            switch (*aug) {
            case 'L':
                (void) prof_read_bytes(&c, 1);
                break;
            case 'P':
                encoding = (uint8_t) prof_read_bytes(&c, 1);
                (void) prof_read_encoded(&c, encoding & 0x7f, 0);
                break;
            case 'R':
                cie->fde_encoding = (uint8_t) prof_read_bytes(&c, 1);
                break;
            case 'S':
            case 'B':
                break;
            default:
                return -1;
            }
        }
    }

    if (c.bad) {
        return -1;
    }

    cie->initial.ra.rule = PROF_EH_RULE_SAME;

    return prof_eh_run_cfa(&c, cie, &cie->initial, 0, cie->fde_encoding,
                        NULL, NULL);
}


int
prof_eh_fde_open(const uint8_t *fde, const uint8_t *low, const uint8_t *high,
    prof_eh_cie_t *cie, prof_eh_cursor_t *c, uintptr_t *pc, uintptr_t *range)
{
    uint32_t        cie_offset;
    const uint8_t  *end, *cie_address;

    if (fde < low || fde >= high) {
        return -1;
    }

    c->pos = fde;
    c->end = (high - fde > PROF_ENTRY_MAX) ? fde + PROF_ENTRY_MAX : high;
    c->bad = 0;

    if (prof_read_entry(c, &end) != 0) {
        return -1;
    }

    cie_offset = (uint32_t) prof_read_bytes(c, 4);
    if (c->bad || cie_offset == 0) {
        return -1;                              /* a CIE, not an FDE */
    }

    if ((size_t) (c->pos - 4 - low) < cie_offset) {
        return -1;                              /* before the segment */
    }

    cie_address = c->pos - 4 - cie_offset;
    if (cie->address != cie_address
        && prof_parse_cie(cie_address, high, cie) != 0)
    {
        cie->address = NULL;
        return -1;
    }

    *pc = prof_read_encoded(c, cie->fde_encoding, 0);
    *range = prof_read_encoded(c, cie->fde_encoding & 0x0f, 0);

    if (cie->augmented) {
        prof_skip_block(c);
    }

    return c->bad ? -1 : 0;
}


int
prof_eh_hdr_searchable(const uint8_t *hdr, size_t size)
{
    return size >= 4 && hdr[0] == 1 && hdr[3] == PROF_PE_TABLE;
}


int
prof_eh_hdr_table(const uint8_t *hdr, size_t size, const uint8_t **table,
    uint64_t *count)
{
    uint8_t           ptr_encoding, count_encoding;
    uint64_t          n;
    prof_eh_cursor_t  c;

    if (size < 4) {
        return -1;
    }

    ptr_encoding = hdr[1];
    count_encoding = hdr[2];

    c.pos = hdr + 4;
    c.end = hdr + size;
    c.bad = 0;
    (void) prof_read_encoded(&c, ptr_encoding, (uintptr_t) hdr);
    n = prof_read_encoded(&c, count_encoding, (uintptr_t) hdr);

    if (c.bad || n > (uint64_t) (c.end - c.pos) / 8) {
        return -1;
    }

    *table = c.pos;
    *count = n;

    return 0;
}


const uint8_t *
prof_eh_hdr_fde(const uint8_t *hdr, const uint8_t *entry, const uint8_t *low,
    const uint8_t *high)
{
    int32_t  pair[2];                           /* pc, FDE */

    memcpy(pair, entry, sizeof(pair));

    /* The FDE lies where the entry says, relative to the header. */
    if (pair[1] < 0 ? (size_t) -(int64_t) pair[1] > (size_t) (hdr - low)
                    : (size_t) pair[1] >= (size_t) (high - hdr))
    {
        return NULL;
    }

    return hdr + pair[1];
}
