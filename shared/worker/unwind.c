/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unwind tables built from .eh_frame_hdr/.eh_frame, in one anonymous
 * mapping per table.
 *
 * For every FDE the CIE's and the FDE's call frame instructions are run
 * once, at build time, keeping only what a walk needs: how the CFA is
 * computed (stack or frame pointer + offset), whether the return address
 * is where the machine's calls leave it (arch.h: on x86-64 at CFA - 8) or
 * undefined (the outermost frame), and where the frame pointer was saved.
 * Each change of those rules becomes a row; rows are sorted by pc, and an
 * index narrows each lookup to the rows of 256 bytes of code: a walk
 * touches few cache lines a frame, which matters as the tables are cold
 * whenever the signal comes.
 *
 * A build runs dl_iterate_phdr twice: once to size the mapping (objects,
 * FDEs, code spans), once, with the mapping made, to parse every object
 * into it. Nothing is allocated inside the callbacks (a malloc there could
 * wait for a lock held by a thread that waits for the loader lock), and
 * every object's data is read inside the callback, while the loader lock
 * keeps it mapped. Should the rows not fit (objects loaded between the
 * passes, rules denser than guessed), the build starts again, larger.
 */

#define _GNU_SOURCE

#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/arch.h"
#include "worker/unwind_table.h"


#define PROF_PE_OMIT         0xff
#define PROF_PE_PCREL        0x10
#define PROF_PE_DATAREL      0x30
#define PROF_PE_TABLE        0x3b    /* datarel | sdata4 */

#define PROF_STATE_STACK     8       /* DW_CFA_remember_state depth */

/* Rows guessed per FDE when sizing, then doubled on each retry. */
#define PROF_ROWS_PER_FDE    6
#define PROF_BUILD_ATTEMPTS  4

/* An entry's length beyond this is corrupt. */
#define PROF_ENTRY_MAX       (1 << 20)

/* Code spans beyond this are corrupt (no object has 1 GB of code). */
#define PROF_SPAN_MAX        ((uintptr_t) 1 << 30)


/* What the instructions say so far. */
typedef struct {
    int        cfa_reg;
    int64_t    cfa_offset;
    int        cfa_ok;
    int        fp_rule;              /* PROF_RULE_* */
    int64_t    fp_offset;
    int        ra_rule;
    int64_t    ra_offset;
} prof_cfa_state_t;

enum {
    PROF_RULE_SAME = 0,
    PROF_RULE_OFFSET,
    PROF_RULE_UNDEFINED,
    PROF_RULE_OTHER
};


typedef struct {
    const uint8_t  *pos;
    const uint8_t  *end;
    int             bad;
} prof_cursor_t;


typedef struct {
    const uint8_t     *address;      /* of the CIE, to reuse it */
    uint64_t           code_align;
    int64_t            data_align;
    uint64_t           ra_reg;
    uint8_t            fde_encoding;
    int                augmented;    /* 'z': FDEs have augmentation data */
    prof_cfa_state_t   initial;
} prof_cie_t;


/* Where an object's data may be read, and where its code may lie. */
typedef struct {
    uintptr_t          base;         /* load bias */
    const uint8_t     *low;          /* the segment of .eh_frame_hdr */
    const uint8_t     *high;
    const uint8_t     *hdr;
    size_t             hdr_size;
    uintptr_t          code_low;     /* executable segments */
    uintptr_t          code_high;
} prof_image_t;


/* Sizes found by the first pass. */
typedef struct {
    size_t             objects;
    size_t             fdes;
    size_t             pages;
} prof_sizes_t;


/* The second pass: the table, and the object being parsed. */
typedef struct {
    prof_unwind_table_t   *t;
    unsigned char         *next;     /* free space of the mapping */
    unsigned char         *limit;
    size_t                 object_capacity;
    prof_unwind_object_t  *o;
    prof_row_t            *rows;     /* the object's, at next */
    uint32_t               row_count;
    uint32_t               row_room;
    uintptr_t              code_low;
    uintptr_t              code_high;
    int                    full;     /* rows did not fit: start again */
} prof_builder_t;


static uint64_t
prof_read_leb(prof_cursor_t *c, unsigned *shift, uint8_t *last)
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
prof_read_uleb(prof_cursor_t *c)
{
    uint8_t   last;
    unsigned  shift;

    return prof_read_leb(c, &shift, &last);
}


static int64_t
prof_read_sleb(prof_cursor_t *c)
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
prof_read_bytes(prof_cursor_t *c, size_t n)
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
prof_skip_block(prof_cursor_t *c)
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
prof_read_encoded(prof_cursor_t *c, uint8_t encoding, uintptr_t data_base)
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
prof_read_entry(prof_cursor_t *c, const uint8_t **entry_end)
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
prof_scale(prof_cursor_t *c, int64_t value, int64_t align)
{
    int64_t  result;

    if (__builtin_mul_overflow(value, align, &result)) {
        c->bad = 1;
        return 0;
    }

    return result;
}


/*
 * Runs call frame instructions from pc (NULL rows: a CIE's initial ones).
 * Rows are emitted through emit() at every advance of the location.
 */
typedef int (*prof_emit_pt)(void *data, uintptr_t pc,
    const prof_cfa_state_t *state);

static int
prof_run_cfa(prof_cursor_t *c, const prof_cie_t *cie, prof_cfa_state_t *state,
    uintptr_t pc, uint8_t fde_encoding, prof_emit_pt emit, void *data)
{
    int               depth;
    uint8_t           op;
    uint64_t          reg, delta;
    int64_t           offset;
    prof_cfa_state_t  saved[PROF_STATE_STACK];

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
            if (reg == PROF_ARCH_DW_FP) {
                state->fp_rule = (op == 0x08) ? PROF_RULE_SAME
                                              : PROF_RULE_OTHER;
            } else if (reg == cie->ra_reg) {
                state->ra_rule = (op == 0x07) ? PROF_RULE_UNDEFINED
                                              : PROF_RULE_OTHER;
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

        if (reg == PROF_ARCH_DW_FP) {
            state->fp_rule = PROF_RULE_OFFSET;
            state->fp_offset = offset;
        } else if (reg == cie->ra_reg) {
            state->ra_rule = PROF_RULE_OFFSET;
            state->ra_offset = offset;
        }
        continue;

    set_other:

        if (reg == PROF_ARCH_DW_FP) {
            state->fp_rule = PROF_RULE_OTHER;
        } else if (reg == cie->ra_reg) {
            state->ra_rule = PROF_RULE_OTHER;
        }
        continue;

    restore:

        if (reg == PROF_ARCH_DW_FP) {
            state->fp_rule = cie->initial.fp_rule;
            state->fp_offset = cie->initial.fp_offset;
        } else if (reg == cie->ra_reg) {
            state->ra_rule = cie->initial.ra_rule;
            state->ra_offset = cie->initial.ra_offset;
        }
    }

    if (c->bad) {
        return -1;
    }

    return (emit != NULL) ? emit(data, pc, state) : 0;
}


static int
prof_parse_cie(const uint8_t *address, const uint8_t *limit, prof_cie_t *cie)
{
    uint8_t         version, encoding;
    const char     *aug;
    const uint8_t  *end;
    prof_cursor_t   c = { address, limit, 0 };

    memset(cie, 0, sizeof(prof_cie_t));
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

    cie->initial.ra_rule = PROF_RULE_SAME;

    return prof_run_cfa(&c, cie, &cie->initial, 0, cie->fde_encoding,
                        NULL, NULL);
}



static int
prof_builder_emit(prof_builder_t *b, uintptr_t pc,
    const prof_cfa_state_t *state)
{
    prof_row_t  row, *last;

    memset(&row, 0, sizeof(row));

    if (pc < b->code_low || pc > b->code_high
        || pc - b->o->base > UINT32_MAX)
    {
        return -1;
    }

    row.pc = (uint32_t) (pc - b->o->base);

    if (state == NULL) {
        row.cfa = PROF_CFA_NONE;                /* past the function */

    } else if (state->ra_rule == PROF_RULE_UNDEFINED) {
        row.cfa = PROF_CFA_OUTERMOST;

    } else if (state->cfa_ok
               && (state->cfa_reg == PROF_ARCH_DW_SP
                   || state->cfa_reg == PROF_ARCH_DW_FP)
               && state->cfa_offset % 8 == 0
               && state->cfa_offset / 8 >= INT16_MIN
               && state->cfa_offset / 8 <= INT16_MAX
               && state->ra_rule == PROF_RULE_OFFSET
               && state->ra_offset == PROF_ARCH_RA_SLOT * 8)
    {
        row.cfa = (state->cfa_reg == PROF_ARCH_DW_SP) ? PROF_CFA_SP
                                                      : PROF_CFA_FP;
        row.cfa_slots = (int16_t) (state->cfa_offset / 8);

        if (state->fp_rule == PROF_RULE_SAME) {
            row.fp_slot = 0;

        } else if (state->fp_rule == PROF_RULE_OFFSET
                   && state->fp_offset % 8 == 0
                   && state->fp_offset / 8 > PROF_UNWIND_FP_UNKNOWN
                   && state->fp_offset / 8 <= INT8_MAX
                   && state->fp_offset != 0)
        {
            row.fp_slot = (int8_t) (state->fp_offset / 8);

        } else {
            row.fp_slot = PROF_UNWIND_FP_UNKNOWN;
        }

    } else {
        row.cfa = PROF_CFA_NONE;
    }

    if (b->row_count > 0) {
        last = &b->rows[b->row_count - 1];

        if (row.pc < last->pc) {
            return 0;                           /* overlapping FDEs */
        }

        if (row.pc == last->pc) {
            *last = row;
            return 0;
        }

        if (last->cfa == row.cfa && last->cfa_slots == row.cfa_slots
            && last->fp_slot == row.fp_slot)
        {
            return 0;
        }
    }

    if (b->row_count == b->row_room) {
        b->full = 1;
        return -1;
    }

    b->rows[b->row_count++] = row;

    return 0;
}


static int
prof_builder_emit_cb(void *data, uintptr_t pc, const prof_cfa_state_t *state)
{
    return prof_builder_emit(data, pc, state);
}


/* One FDE of the image; a corrupt one adds no row. */
static void
prof_builder_add_fde(prof_builder_t *b, const prof_image_t *im,
    const uint8_t *fde, prof_cie_t *cie)
{
    uint32_t          cie_offset, rows_before;
    uintptr_t         pc, range;
    const uint8_t    *end, *cie_address;
    prof_cursor_t     c;
    prof_cfa_state_t  state;

    if (fde < im->low || fde >= im->high) {
        return;
    }

    c.pos = fde;
    c.end = (im->high - fde > PROF_ENTRY_MAX) ? fde + PROF_ENTRY_MAX
                                              : im->high;
    c.bad = 0;

    if (prof_read_entry(&c, &end) != 0) {
        return;
    }

    cie_offset = (uint32_t) prof_read_bytes(&c, 4);
    if (c.bad || cie_offset == 0) {
        return;                                 /* a CIE, not an FDE */
    }

    if ((size_t) (c.pos - 4 - im->low) < cie_offset) {
        return;                                 /* before the segment */
    }

    cie_address = c.pos - 4 - cie_offset;
    if (cie->address != cie_address
        && prof_parse_cie(cie_address, im->high, cie) != 0)
    {
        cie->address = NULL;
        return;
    }

    pc = prof_read_encoded(&c, cie->fde_encoding, 0);
    range = prof_read_encoded(&c, cie->fde_encoding & 0x0f, 0);

    if (cie->augmented) {
        prof_skip_block(&c);
    }

    if (c.bad || range == 0 || range > PROF_SPAN_MAX || pc < b->code_low
        || pc >= b->code_high || range > b->code_high - pc)
    {
        return;
    }

    state = cie->initial;
    rows_before = b->row_count;

    if (prof_run_cfa(&c, cie, &state, pc, cie->fde_encoding,
                     prof_builder_emit_cb, b) != 0)
    {
        /* An instruction not understood: no rule for the function. */
        b->row_count = rows_before;
        (void) prof_builder_emit(b, pc, NULL);
    }

    (void) prof_builder_emit(b, pc + range, NULL);
}


/* The page index of the rows just built; 0, or -1: no room. */
static int
prof_builder_index(prof_builder_t *b)
{
    uint32_t               i, page, pages, *index;
    uintptr_t              first, span;
    prof_unwind_object_t  *o = b->o;

    first = b->rows[0].pc;
    o->start = o->base + first;
    o->end = o->base + b->rows[b->row_count - 1].pc;
    span = o->end - o->start;

    pages = (uint32_t) (span >> PROF_UNWIND_PAGE_SHIFT) + 2;
    index = (uint32_t *) (b->rows + b->row_count);

    if ((size_t) (b->limit - (unsigned char *) index)
        < pages * sizeof(uint32_t))
    {
        b->full = 1;
        return -1;
    }

    i = 0;
    for (page = 0; page < pages; page++) {
        while (i + 1 < b->row_count
               && b->rows[i + 1].pc
                  <= first + ((uintptr_t) page << PROF_UNWIND_PAGE_SHIFT))
        {
            i++;
        }
        index[page] = i;
    }

    o->rows = b->rows;
    o->row_count = b->row_count;
    o->pages = index;

    b->next = (unsigned char *) (index + pages);
    b->next = (unsigned char *) (((uintptr_t) b->next + 15) & ~15UL);

    return 0;
}


/*
 * Parses one image into the next object of the table: 0, or -1 when it
 * has no usable rows (left out) or did not fit (b->full).
 */
static int
prof_builder_add_image(prof_builder_t *b, const prof_image_t *im)
{
    uint8_t                ptr_encoding, count_encoding;
    int32_t                entry[2];
    uint64_t               n, k;
    prof_cie_t             cie;
    prof_cursor_t          c;
    prof_unwind_table_t   *t = b->t;

    if (im->hdr_size < 4 || im->hdr[0] != 1 || im->hdr[3] != PROF_PE_TABLE
        || im->code_low >= im->code_high)
    {
        return -1;
    }

    if (t->object_count == b->object_capacity) {
        return -1;
    }

    ptr_encoding = im->hdr[1];
    count_encoding = im->hdr[2];

    c.pos = im->hdr + 4;
    c.end = im->hdr + im->hdr_size;
    c.bad = 0;
    (void) prof_read_encoded(&c, ptr_encoding, (uintptr_t) im->hdr);
    n = prof_read_encoded(&c, count_encoding, (uintptr_t) im->hdr);
    if (c.bad || n == 0 || n > (uint64_t) (c.end - c.pos) / 8) {
        return -1;
    }

    b->o = &t->objects[t->object_count];
    memset(b->o, 0, sizeof(prof_unwind_object_t));
    b->o->base = im->base;
    b->code_low = im->code_low;
    b->code_high = im->code_high;

    b->rows = (prof_row_t *) b->next;
    b->row_count = 0;
    b->row_room = (uint32_t) ((size_t) (b->limit - b->next)
                              / sizeof(prof_row_t) > UINT32_MAX
                              ? UINT32_MAX
                              : (size_t) (b->limit - b->next)
                                / sizeof(prof_row_t));

    memset(&cie, 0, sizeof(cie));

    for (k = 0; k < n && !b->full; k++) {
        memcpy(entry, c.pos + 8 * k, sizeof(entry));

        /* The FDE lies where the entry says, relative to the header. */
        if (entry[1] < 0 ? (size_t) -(int64_t) entry[1]
                           > (size_t) (im->hdr - im->low)
                         : (size_t) entry[1] >= (size_t) (im->high - im->hdr))
        {
            continue;
        }

        prof_builder_add_fde(b, im, im->hdr + entry[1], &cie);
    }

    if (b->full || b->row_count < 2 || prof_builder_index(b) != 0) {
        return -1;
    }

    if (t->object_count == 0 || b->o->start < t->code_low) {
        t->code_low = b->o->start;
    }
    if (b->o->end > t->code_high) {
        t->code_high = b->o->end;
    }

    t->object_count++;

    return 0;
}


/* The image of a loaded object: its .eh_frame_hdr's segment, its code. */
static int
prof_image_of(struct dl_phdr_info *info, prof_image_t *im)
{
    int                 i;
    uintptr_t           hdr, seg_end;
    const ElfW(Phdr)   *ph, *eh, *seg;

    eh = NULL;
    seg = NULL;
    memset(im, 0, sizeof(prof_image_t));
    im->base = info->dlpi_addr;
    im->code_low = UINTPTR_MAX;

    for (i = 0; i < info->dlpi_phnum; i++) {
        ph = &info->dlpi_phdr[i];

        if (ph->p_type == PT_GNU_EH_FRAME) {
            eh = ph;

        } else if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            if (info->dlpi_addr + ph->p_vaddr < im->code_low) {
                im->code_low = info->dlpi_addr + ph->p_vaddr;
            }
            if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > im->code_high) {
                im->code_high = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
            }
        }
    }

    if (eh == NULL || im->code_low >= im->code_high) {
        return -1;
    }

    for (i = 0; i < info->dlpi_phnum; i++) {
        ph = &info->dlpi_phdr[i];

        if (ph->p_type == PT_LOAD && eh->p_vaddr >= ph->p_vaddr
            && eh->p_vaddr - ph->p_vaddr < ph->p_memsz)
        {
            seg = ph;
        }
    }

    if (seg == NULL) {
        return -1;
    }

    hdr = info->dlpi_addr + eh->p_vaddr;
    seg_end = info->dlpi_addr + seg->p_vaddr + seg->p_memsz;

    im->low = (const uint8_t *) (info->dlpi_addr + seg->p_vaddr);
    im->high = (const uint8_t *) seg_end;
    im->hdr = (const uint8_t *) hdr;
    im->hdr_size = (eh->p_memsz < seg_end - hdr) ? eh->p_memsz
                                                 : seg_end - hdr;

    return 0;
}


static int
prof_size_object(struct dl_phdr_info *info, size_t size, void *data)
{
    uint8_t         ptr_encoding, count_encoding;
    uint64_t        n;
    prof_cursor_t   c;
    prof_image_t    im;
    prof_sizes_t   *sizes = data;

    sizes->objects++;

    if (prof_image_of(info, &im) != 0 || im.hdr_size < 4) {
        return 0;
    }

    ptr_encoding = im.hdr[1];
    count_encoding = im.hdr[2];

    c.pos = im.hdr + 4;
    c.end = im.hdr + im.hdr_size;
    c.bad = 0;
    (void) prof_read_encoded(&c, ptr_encoding, (uintptr_t) im.hdr);
    n = prof_read_encoded(&c, count_encoding, (uintptr_t) im.hdr);

    if (c.bad || n > (uint64_t) (c.end - c.pos) / 8
        || im.code_high - im.code_low > PROF_SPAN_MAX)
    {
        return 0;
    }

    sizes->fdes += n;
    sizes->pages += ((im.code_high - im.code_low) >> PROF_UNWIND_PAGE_SHIFT)
                    + 2;

    return 0;
}


static void
prof_note_generation(prof_unwind_table_t *t, struct dl_phdr_info *info,
    size_t size)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs)
                + sizeof(info->dlpi_subs))
    {
        t->adds = info->dlpi_adds;
        t->subs = info->dlpi_subs;
    }
}


static int
prof_parse_object(struct dl_phdr_info *info, size_t size, void *data)
{
    prof_image_t     im;
    prof_builder_t  *b = data;

    prof_note_generation(b->t, info, size);

    if (prof_image_of(info, &im) != 0) {
        return 0;
    }

    if (prof_builder_add_image(b, &im) != 0) {
        if (b->full) {
            return 1;                   /* start again, larger */
        }
        b->t->skipped++;
    }

    return 0;
}


static int
prof_unwind_compare(const void *a, const void *b)
{
    const prof_unwind_object_t  *x = a, *y = b;

    return (x->start > y->start) - (x->start < y->start);
}


/* A table of an empty mapping of size bytes, with room for objects. */
static prof_unwind_table_t *
prof_table_create(size_t size, size_t objects, prof_builder_t *b)
{
    void                 *m;
    size_t                page, head;
    prof_unwind_table_t  *t;

    page = (size_t) sysconf(_SC_PAGESIZE);

    head = sizeof(prof_unwind_table_t)
           + PROF_UNWIND_CACHE_SIZE * sizeof(prof_unwind_cache_entry_t)
           + objects * sizeof(prof_unwind_object_t) + 64;
    size = (head + size + page - 1) & ~(page - 1);

    m = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        return NULL;
    }

    t = m;
    t->arena = m;
    t->arena_size = size;
    t->cache = (prof_unwind_cache_entry_t *) (t + 1);
    t->objects = (prof_unwind_object_t *) (t->cache
                                           + PROF_UNWIND_CACHE_SIZE);

    memset(b, 0, sizeof(prof_builder_t));
    b->t = t;
    b->object_capacity = objects;
    b->next = (unsigned char *) (t->objects + objects);
    b->next = (unsigned char *) (((uintptr_t) b->next + 15) & ~15UL);
    b->limit = t->arena + size;

    return t;
}


/* Sorts the objects and gives back the pages the build did not use. */
static void
prof_table_finish(prof_unwind_table_t *t, prof_builder_t *b)
{
    size_t  page, used;

    qsort(t->objects, t->object_count, sizeof(prof_unwind_object_t),
          prof_unwind_compare);

    page = (size_t) sysconf(_SC_PAGESIZE);
    used = ((size_t) (b->next - t->arena) + page - 1) & ~(page - 1);

    if (used < t->arena_size) {
        (void) munmap(t->arena + used, t->arena_size - used);
        t->arena_size = used;
    }

    t->bytes = (size_t) (b->next - t->arena);
}


prof_unwind_table_t *
prof_unwind_table_build(void)
{
    int                   attempt;
    size_t                rows;
    prof_sizes_t          sizes;
    prof_builder_t        b;
    prof_unwind_table_t  *t;

    memset(&sizes, 0, sizeof(sizes));
    (void) dl_iterate_phdr(prof_size_object, &sizes);

    rows = sizes.fdes * PROF_ROWS_PER_FDE + 4096;

    for (attempt = 0; attempt < PROF_BUILD_ATTEMPTS; attempt++) {
        /* Objects loaded meanwhile may need room too. */
        t = prof_table_create(rows * sizeof(prof_row_t)
                              + (sizes.pages + 64) * sizeof(uint32_t)
                              + (sizes.objects + 16) * 16,
                              sizes.objects + 16, &b);
        if (t == NULL) {
            return NULL;
        }

        (void) dl_iterate_phdr(prof_parse_object, &b);

        if (!b.full) {
            prof_table_finish(t, &b);
            return t;
        }

        prof_unwind_table_free(t);
        rows *= 2;
        sizes.pages *= 2;
    }

    return NULL;
}


prof_unwind_table_t *
prof_unwind_table_from_image(uintptr_t base, const void *segment,
    size_t segment_size, size_t hdr_offset, size_t hdr_size)
{
    size_t                rows, span;
    prof_image_t          im;
    prof_builder_t        b;
    prof_unwind_table_t  *t;

    memset(&im, 0, sizeof(im));

    if (hdr_offset > segment_size) {
        hdr_offset = segment_size;
    }
    if (hdr_size > segment_size - hdr_offset) {
        hdr_size = segment_size - hdr_offset;
    }

    im.base = base;
    im.low = segment;
    im.high = im.low + segment_size;
    im.hdr = im.low + hdr_offset;
    im.hdr_size = hdr_size;
    im.code_low = (uintptr_t) segment;
    im.code_high = (uintptr_t) segment + segment_size;

    span = segment_size;
    rows = (hdr_size / 8) * PROF_ROWS_PER_FDE * 4 + 4096;

    t = prof_table_create(rows * sizeof(prof_row_t)
                          + ((span >> PROF_UNWIND_PAGE_SHIFT) + 64)
                            * sizeof(uint32_t), 1, &b);
    if (t == NULL) {
        return NULL;
    }

    if (prof_builder_add_image(&b, &im) != 0) {
        t->skipped++;
    }

    prof_table_finish(t, &b);

    return t;
}


void
prof_unwind_table_free(prof_unwind_table_t *t)
{
    if (t != NULL) {
        (void) munmap(t->arena, t->arena_size);
    }
}


size_t
prof_unwind_table_bytes(const prof_unwind_table_t *t)
{
    return t->bytes;
}


unsigned
prof_unwind_table_objects(const prof_unwind_table_t *t)
{
    return t->object_count;
}


unsigned
prof_unwind_table_skipped(const prof_unwind_table_t *t)
{
    return t->skipped;
}


unsigned long long
prof_unwind_table_generation(const prof_unwind_table_t *t)
{
    return t->adds + t->subs;
}


static int
prof_count_generation(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long  *generation = data;

    if (size >= offsetof(struct dl_phdr_info, dlpi_subs)
                + sizeof(info->dlpi_subs))
    {
        *generation = info->dlpi_adds + info->dlpi_subs;
    }

    return 1;
}


unsigned long long
prof_unwind_generation_now(void)
{
    unsigned long long  generation = 0;

    (void) dl_iterate_phdr(prof_count_generation, &generation);

    return generation;
}
