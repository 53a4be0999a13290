/*
 * Unwind tables built from .eh_frame_hdr/.eh_frame, and the table walk.
 *
 * For every FDE the CIE's and the FDE's call frame instructions are run
 * once, at build time, keeping only what a walk needs on x86-64: how the
 * CFA is computed (rsp or rbp + offset), whether the return address is at
 * CFA - 8 (or undefined: the outermost frame), and where rbp was saved.
 * Each change of those rules becomes a row; rows are sorted by pc, and an
 * index narrows each lookup to the rows of 256 bytes of code: a walk
 * touches few cache lines a frame, which matters as the tables are cold
 * whenever the signal comes.
 */

#define _GNU_SOURCE

#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "unwind.h"


#define PROF_DW_RBP          6
#define PROF_DW_RSP          7

#define PROF_PE_OMIT         0xff
#define PROF_PE_PCREL        0x10
#define PROF_PE_DATAREL      0x30
#define PROF_PE_TABLE        0x3b    /* datarel | sdata4 */

/* Code bytes an index entry covers: a few rows, most often one cache line. */
#define PROF_PAGE_SHIFT      8

#define PROF_STATE_STACK     8       /* DW_CFA_remember_state depth */

#define PROF_RED_ZONE        128     /* below sp, x86-64 System V ABI */

#define PROF_FP_UNKNOWN      INT8_MIN


enum {
    PROF_CFA_NONE = 0,               /* no rule the walk can follow */
    PROF_CFA_RSP,
    PROF_CFA_RBP,
    PROF_CFA_OUTERMOST               /* return address undefined */
};


/* From pc on (an offset from the object's base), until the next row. */
typedef struct {
    uint32_t   pc;
    uint8_t    cfa;                  /* PROF_CFA_* */
    int8_t     fp_slot;              /* rbp saved at CFA + 8 * fp_slot,
                                        0: not saved by this frame */
    int16_t    cfa_slots;            /* CFA = register + 8 * cfa_slots */
} prof_row_t;


typedef struct {
    uintptr_t    base;               /* load bias */
    uintptr_t    start;              /* pcs covered: [start, end) */
    uintptr_t    end;
    prof_row_t  *rows;
    uint32_t     row_count;
    uint32_t     row_capacity;
    uint32_t    *pages;              /* row in force at each page start */
} prof_unwind_object_t;


/*
 * The rows last used, by pc: a server's stacks go through few call sites,
 * and this small array stays in cache where the index and rows do not.
 * Written by the handler only.
 */
#define PROF_CACHE_SIZE      2048    /* a power of two */

typedef struct {
    uintptr_t   pc;
    prof_row_t  row;
} prof_cache_entry_t;


struct prof_unwind_table_s {
    prof_cache_entry_t    *cache;
    prof_unwind_object_t  *objects;  /* sorted by start */
    unsigned               object_count;
    unsigned               object_capacity;
    size_t                 bytes;
    unsigned long long     loads;
    int                    failed;   /* out of memory while building */
};


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


/* A LEB128 number's bits; *shift: how many, *last: its last byte. */
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
            offset = (int64_t) prof_read_uleb(c) * cie->data_align;
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
            offset = (int64_t) prof_read_uleb(c) * cie->data_align;
            goto set_offset;

        case 0x06:                              /* restore_extended */
            reg = prof_read_uleb(c);
            goto restore;

        case 0x07:                              /* undefined */
        case 0x08:                              /* same_value */
            reg = prof_read_uleb(c);
            if (reg == PROF_DW_RBP) {
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
            offset = prof_read_sleb(c) * cie->data_align;
            goto set_offset;

        case 0x12:                              /* def_cfa_sf */
            state->cfa_reg = (int) prof_read_uleb(c);
            state->cfa_offset = prof_read_sleb(c) * cie->data_align;
            state->cfa_ok = 1;
            break;

        case 0x13:                              /* def_cfa_offset_sf */
            state->cfa_offset = prof_read_sleb(c) * cie->data_align;
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
            offset = -(int64_t) prof_read_uleb(c) * cie->data_align;
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

        if (reg == PROF_DW_RBP) {
            state->fp_rule = PROF_RULE_OFFSET;
            state->fp_offset = offset;
        } else if (reg == cie->ra_reg) {
            state->ra_rule = PROF_RULE_OFFSET;
            state->ra_offset = offset;
        }
        continue;

    set_other:

        if (reg == PROF_DW_RBP) {
            state->fp_rule = PROF_RULE_OTHER;
        } else if (reg == cie->ra_reg) {
            state->ra_rule = PROF_RULE_OTHER;
        }
        continue;

    restore:

        if (reg == PROF_DW_RBP) {
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
prof_object_emit(void *data, uintptr_t pc, const prof_cfa_state_t *state)
{
    prof_row_t             row, *last, *rows;
    prof_unwind_object_t  *o = data;

    memset(&row, 0, sizeof(row));

    if (pc - o->base > UINT32_MAX) {
        return -1;
    }
    row.pc = (uint32_t) (pc - o->base);

    if (state == NULL) {
        row.cfa = PROF_CFA_NONE;                /* past the function */

    } else if (state->ra_rule == PROF_RULE_UNDEFINED) {
        row.cfa = PROF_CFA_OUTERMOST;

    } else if (state->cfa_ok
               && (state->cfa_reg == PROF_DW_RSP
                   || state->cfa_reg == PROF_DW_RBP)
               && state->cfa_offset % 8 == 0
               && state->cfa_offset / 8 >= INT16_MIN
               && state->cfa_offset / 8 <= INT16_MAX
               && state->ra_rule == PROF_RULE_OFFSET
               && state->ra_offset == -8)
    {
        row.cfa = (state->cfa_reg == PROF_DW_RSP) ? PROF_CFA_RSP
                                                  : PROF_CFA_RBP;
        row.cfa_slots = (int16_t) (state->cfa_offset / 8);

        if (state->fp_rule == PROF_RULE_SAME) {
            row.fp_slot = 0;

        } else if (state->fp_rule == PROF_RULE_OFFSET
                   && state->fp_offset % 8 == 0
                   && state->fp_offset / 8 > PROF_FP_UNKNOWN
                   && state->fp_offset / 8 <= INT8_MAX
                   && state->fp_offset != 0)
        {
            row.fp_slot = (int8_t) (state->fp_offset / 8);

        } else {
            row.fp_slot = PROF_FP_UNKNOWN;
        }

    } else {
        row.cfa = PROF_CFA_NONE;
    }

    if (o->row_count > 0) {
        last = &o->rows[o->row_count - 1];

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

    if (o->row_count == o->row_capacity) {
        o->row_capacity = o->row_capacity ? 2 * o->row_capacity : 1024;
        rows = realloc(o->rows, o->row_capacity * sizeof(prof_row_t));
        if (rows == NULL) {
            return -1;
        }
        o->rows = rows;
    }

    o->rows[o->row_count++] = row;

    return 0;
}


static void
prof_object_add_fde(prof_unwind_object_t *o, const uint8_t *fde,
    const uint8_t *limit, prof_cie_t *cie)
{
    uint32_t          cie_offset, rows_before;
    uintptr_t         pc, range;
    const uint8_t    *end, *cie_address;
    prof_cursor_t     c = { fde, limit, 0 };
    prof_cfa_state_t  state;

    if (prof_read_entry(&c, &end) != 0) {
        return;
    }

    cie_offset = (uint32_t) prof_read_bytes(&c, 4);
    if (c.bad || cie_offset == 0) {
        return;                                 /* a CIE, not an FDE */
    }

    cie_address = c.pos - 4 - cie_offset;
    if (cie->address != cie_address
        && prof_parse_cie(cie_address, limit, cie) != 0)
    {
        cie->address = NULL;
        return;
    }

    pc = prof_read_encoded(&c, cie->fde_encoding, 0);
    range = prof_read_encoded(&c, cie->fde_encoding & 0x0f, 0);

    if (cie->augmented) {
        prof_skip_block(&c);
    }

    if (c.bad || range == 0 || pc < o->base) {
        return;
    }

    state = cie->initial;
    rows_before = o->row_count;

    if (prof_run_cfa(&c, cie, &state, pc, cie->fde_encoding,
                     prof_object_emit, o) != 0)
    {
        /* An instruction not understood: no rule for the function. */
        o->row_count = rows_before;
        (void) prof_object_emit(o, pc, NULL);
    }

    (void) prof_object_emit(o, pc + range, NULL);
}


static int
prof_object_index(prof_unwind_object_t *o)
{
    uint32_t   i, page, pages;
    uintptr_t  first;

    if (o->row_count < 2) {
        return -1;
    }

    first = o->rows[0].pc;
    o->start = o->base + first;
    o->end = o->base + o->rows[o->row_count - 1].pc;

    pages = (uint32_t) ((o->end - o->start) >> PROF_PAGE_SHIFT) + 2;

    o->pages = malloc(pages * sizeof(uint32_t));
    if (o->pages == NULL) {
        return -1;
    }

    i = 0;
    for (page = 0; page < pages; page++) {
        while (i + 1 < o->row_count
               && o->rows[i + 1].pc
                  <= first + ((uintptr_t) page << PROF_PAGE_SHIFT))
        {
            i++;
        }
        o->pages[page] = i;
    }

    return 0;
}


static int
prof_unwind_add_object(struct dl_phdr_info *info, size_t size, void *data)
{
    int                    i;
    uint8_t                version, ptr_encoding, count_encoding, table_enc;
    int32_t                entry[2];
    size_t                 hdr_size;
    uint64_t               n, k;
    const uint8_t         *hdr;
    prof_cie_t             cie;
    prof_cursor_t          c;
    prof_unwind_table_t   *t = data;
    prof_unwind_object_t  *o, *objects;

    hdr = NULL;
    hdr_size = 0;
    for (i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) {
            hdr = (const uint8_t *) (info->dlpi_addr
                                     + info->dlpi_phdr[i].p_vaddr);
            hdr_size = info->dlpi_phdr[i].p_memsz;
        }
    }

    if (hdr == NULL || hdr_size < 4) {
        return 0;
    }

    /* The header: version, encodings, eh_frame pointer, count, table. */

    version = hdr[0];
    ptr_encoding = hdr[1];
    count_encoding = hdr[2];
    table_enc = hdr[3];

    if (version != 1 || table_enc != PROF_PE_TABLE) {
        return 0;
    }

    c.pos = hdr + 4;
    c.end = hdr + hdr_size;
    c.bad = 0;
    (void) prof_read_encoded(&c, ptr_encoding, (uintptr_t) hdr);
    n = prof_read_encoded(&c, count_encoding, (uintptr_t) hdr);
    if (c.bad || n == 0 || n > (uint64_t) (c.end - c.pos) / 8) {
        return 0;
    }

    if (t->object_count == t->object_capacity) {
        t->object_capacity = t->object_capacity ? 2 * t->object_capacity : 32;
        objects = realloc(t->objects,
                          t->object_capacity * sizeof(prof_unwind_object_t));
        if (objects == NULL) {
            t->failed = 1;
            return 1;
        }
        t->objects = objects;
    }

    o = &t->objects[t->object_count];
    memset(o, 0, sizeof(prof_unwind_object_t));
    o->base = info->dlpi_addr;

    memset(&cie, 0, sizeof(cie));

    for (k = 0; k < n; k++) {
        memcpy(entry, c.pos + 8 * k, sizeof(entry));

        /*
         * The entry's FDE lies in the object's mapped .eh_frame; its own
         * length bounds what is read of it (1 MB: any larger is corrupt).
         */
        prof_object_add_fde(o, hdr + entry[1], hdr + entry[1] + (1 << 20),
                            &cie);
    }

    if (prof_object_index(o) != 0) {
        free(o->rows);
        free(o->pages);
        return 0;
    }

    t->bytes += o->row_count * sizeof(prof_row_t)
                + ((o->end - o->start) >> PROF_PAGE_SHIFT) * sizeof(uint32_t);
    t->object_count++;

    if (size >= offsetof(struct dl_phdr_info, dlpi_adds)
                + sizeof(info->dlpi_adds))
    {
        t->loads = info->dlpi_adds;
    }

    return 0;
}


static int
prof_unwind_compare(const void *a, const void *b)
{
    const prof_unwind_object_t  *x = a, *y = b;

    return (x->start > y->start) - (x->start < y->start);
}


prof_unwind_table_t *
prof_unwind_table_build(void)
{
    prof_unwind_table_t  *t;

    t = calloc(1, sizeof(prof_unwind_table_t));
    if (t == NULL) {
        return NULL;
    }

    t->cache = calloc(PROF_CACHE_SIZE, sizeof(prof_cache_entry_t));
    if (t->cache == NULL) {
        free(t);
        return NULL;
    }

    (void) dl_iterate_phdr(prof_unwind_add_object, t);

    if (t->failed) {
        prof_unwind_table_free(t);
        return NULL;
    }

    qsort(t->objects, t->object_count, sizeof(prof_unwind_object_t),
          prof_unwind_compare);

    t->bytes += sizeof(prof_unwind_table_t)
                + t->object_count * sizeof(prof_unwind_object_t)
                + PROF_CACHE_SIZE * sizeof(prof_cache_entry_t);

    return t;
}


void
prof_unwind_table_free(prof_unwind_table_t *t)
{
    unsigned  i;

    if (t == NULL) {
        return;
    }

    for (i = 0; i < t->object_count; i++) {
        free(t->objects[i].rows);
        free(t->objects[i].pages);
    }

    free(t->objects);
    free(t->cache);
    free(t);
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


unsigned long long
prof_unwind_table_loads(const prof_unwind_table_t *t)
{
    return t->loads;
}


static int
prof_unwind_count_loads(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long  *loads = data;

    if (size >= offsetof(struct dl_phdr_info, dlpi_adds)
                + sizeof(info->dlpi_adds))
    {
        *loads = info->dlpi_adds;
    }

    return 1;
}


unsigned long long
prof_unwind_loads_now(void)
{
    unsigned long long  loads = 0;

    (void) dl_iterate_phdr(prof_unwind_count_loads, &loads);

    return loads;
}


/* The object holding pc, trying hint first (the caller's often shares
   its callee's object), or NULL. */
static const prof_unwind_object_t *
prof_unwind_object(const prof_unwind_table_t *t, uintptr_t pc,
    const prof_unwind_object_t *hint)
{
    unsigned  l, h, m;

    if (hint != NULL && pc >= hint->start && pc < hint->end) {
        return hint;
    }

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

    if (l == 0 || pc >= t->objects[l - 1].end) {
        return NULL;
    }

    return &t->objects[l - 1];
}


/* The row in force at pc, in the object that holds it. */
static const prof_row_t *
prof_unwind_row(const prof_unwind_object_t *o, uintptr_t pc)
{
    uint32_t  lo, hi, mid, offset;
    uintptr_t page;

    offset = (uint32_t) (pc - o->base);
    page = (pc - o->start) >> PROF_PAGE_SHIFT;

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

    return &o->rows[lo];
}


/*
 * It reads the interrupted code's stack frames, return addresses and saved
 * registers only, but an address sanitizer would see reads of other
 * functions' frames.
 */
__attribute__((no_sanitize_address)) prof_unwind_status_e
prof_unwind(const prof_unwind_table_t *t, const prof_unwind_regs_t *regs,
    void **frames, int max, int *count)
{
    int                           status, n;
    uintptr_t                     pc, sp, fp, cfa, slot, lookup;
    const prof_row_t             *row;
    prof_cache_entry_t           *e;
    const prof_unwind_object_t   *o;

    pc = regs->pc;
    sp = regs->sp;
    fp = regs->fp;
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

        frames[n++] = (void *) pc;

        /* A return address may be just past its function: look before. */
        lookup = (n == 1) ? pc : pc - 1;

        e = &t->cache[(lookup ^ (lookup >> 11)) & (PROF_CACHE_SIZE - 1)];

        if (e->pc == lookup) {
            row = &e->row;

        } else {
            o = prof_unwind_object(t, lookup, o);
            if (o == NULL) {
                status = PROF_UNWIND_NO_OBJECT;
                break;
            }

            row = prof_unwind_row(o, lookup);
            e->pc = lookup;
            e->row = *row;
        }

        if (row->cfa == PROF_CFA_OUTERMOST) {
            status = PROF_UNWIND_END;
            break;
        }

        if (row->cfa == PROF_CFA_NONE) {
            status = PROF_UNWIND_NO_RULE;
            break;
        }

        cfa = ((row->cfa == PROF_CFA_RSP) ? sp : fp)
              + (intptr_t) row->cfa_slots * 8;

        if (cfa < sp + 8 || cfa > regs->stack_high || cfa < regs->stack_low) {
            status = PROF_UNWIND_BAD_STACK;
            break;
        }

        if (row->fp_slot == PROF_FP_UNKNOWN) {
            fp = 0;

        } else if (row->fp_slot != 0) {
            /*
             * In an epilogue, past "pop %rbp", the rule may still name
             * the slot: it is below sp then, in the leaf's red zone (which
             * signal delivery leaves alone) and holds the value popped.
             */
            slot = cfa + (intptr_t) row->fp_slot * 8;
            if (slot < ((n == 1) ? sp - PROF_RED_ZONE : sp)
                || slot < regs->stack_low || slot + 8 > regs->stack_high)
            {
                status = PROF_UNWIND_BAD_STACK;
                break;
            }
            fp = *(const uintptr_t *) slot;
        }

        pc = *(const uintptr_t *) (cfa - 8);
        sp = cfa;

        if (pc == 0) {
            status = PROF_UNWIND_END;
            break;
        }
    }

    *count = n;

    return status;
}
