/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Building an inline table (inline_table.h) from libdw's answers over the
 * ranges of pcs where they are constant: each compile unit's DIEs painted
 * over its pcs in the order dwarf_getscopes() prefers them, its line rows
 * and the aranges as bounds, and libdw asked at each range's start.
 */

#define _GNU_SOURCE

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "profiler/inline_table.h"
#include "profiler/inline_table_image.h"


#define PROF_INL_DEPTH_MAX      256         /* DIEs nested (a bound) */


typedef struct {
    uint64_t             start;
    uint64_t             end;
} prof_inl_span_t;

typedef struct {
    uint64_t             start;
    uint64_t             end;
    uint32_t             seq;               /* a later paint wins */
    uint32_t             node;
} prof_inl_paint_t;

typedef struct {
    uint64_t             start;
    uint64_t             end;
    uint32_t             node;
} prof_inl_step_t;

typedef struct {
    uint64_t             off;               /* of its DIE */
    size_t               first;             /* its steps */
    size_t               count;
} prof_inl_cu_t;

typedef struct {
    uint64_t             start;
    prof_inl_value_t     value;
} prof_inl_range_t;

/* A growable array. */
typedef struct {
    void                *items;
    size_t               n;
    size_t               cap;
} prof_inl_vec_t;

typedef struct {
    Dwarf               *dwarf;
    prof_inl_vec_t       paints;            /* prof_inl_paint_t, a CU's */
    prof_inl_vec_t       steps;             /* prof_inl_step_t */
    prof_inl_vec_t       cus;               /* prof_inl_cu_t */
    prof_inl_vec_t       bounds;            /* uint64_t */
    prof_inl_vec_t       ranges;            /* prof_inl_range_t */
    prof_intern_t        nodes;             /* prof_inl_node_t, 0 none */
    prof_intern_t        names;             /* with their NUL */
    uint32_t             seq;
    int                  err;
} prof_inl_build_t;


/* Room for one more item of size bytes: its address, or NULL. */
static void *
prof_inl_push(prof_inl_build_t *b, prof_inl_vec_t *v, size_t size)
{
    void    *p;
    size_t   cap;

    if (v->n == v->cap) {
        cap = v->cap ? 2 * v->cap : 256;
        p = realloc(v->items, cap * size);
        if (p == NULL) {
            b->err = -ENOMEM;
            return NULL;
        }
        v->items = p;
        v->cap = cap;
    }

    return (char *) v->items + size * v->n++;
}


/* The offset of name among the names, added once. */
static uint32_t
prof_inl_name(prof_inl_build_t *b, const char *name)
{
    int      inserted;
    int64_t  index;

    index = prof_intern(&b->names, name, strlen(name) + 1, &inserted);
    if (index < 0 || b->names.keys_used >= PROF_INL_NO_NAME) {
        b->err = (index < 0) ? -ENOMEM : -EFBIG;
        return PROF_INL_NO_NAME;
    }

    return (uint32_t) b->names.entries[index].offset;
}


/* The node of an inlined function's DIE, inlined into parent. */
static uint32_t
prof_inl_node(prof_inl_build_t *b, Dwarf_Die *die, uint32_t parent)
{
    int               inserted;
    int64_t           index;
    Dwarf_Word        v;
    const char       *name;
    prof_inl_node_t   key;
    Dwarf_Attribute   attr;

    /* As dwarf_inlines.c named it: the linkage name, else the name. */
    name = NULL;

    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) != NULL) {
        name = dwarf_formstring(&attr);
    }

    if (name == NULL && dwarf_attr_integrate(die, DW_AT_name, &attr) != NULL)
    {
        name = dwarf_formstring(&attr);
    }

    memset(&key, 0, sizeof(key));
    key.name = (name != NULL) ? prof_inl_name(b, name) : PROF_INL_NO_NAME;
    key.parent = parent;

    if (dwarf_attr_integrate(die, DW_AT_call_line, &attr) != NULL
        && dwarf_formudata(&attr, &v) == 0 && v <= UINT32_MAX)
    {
        key.call_line = (uint32_t) v;
    }

    index = prof_intern(&b->nodes, &key, sizeof(key), &inserted);
    if (index <= 0) {
        b->err = (index < 0) ? -ENOMEM : b->err;
        return 0;
    }

    return (uint32_t) index;
}


/* DIEs whose children dwarf_getscopes() looks into (libdw's list). */
static int
prof_inl_may_have_scopes(int tag)
{
    switch (tag) {
    case DW_TAG_compile_unit:
    case DW_TAG_module:
    case DW_TAG_lexical_block:
    case DW_TAG_with_stmt:
    case DW_TAG_catch_block:
    case DW_TAG_try_block:
    case DW_TAG_entry_point:
    case DW_TAG_inlined_subroutine:
    case DW_TAG_subprogram:
    case DW_TAG_namespace:
    case DW_TAG_class_type:
    case DW_TAG_structure_type:
        return 1;
    default:
        return 0;
    }
}


static int
prof_inl_span_cmp(const void *a, const void *b)
{
    const prof_inl_span_t  *x = a, *y = b;

    return (x->start > y->start) - (x->start < y->start);
}


/*
 * The pc ranges of a DIE (as dwarf_haspc() reads them) within clip (NULL:
 * anywhere), sorted: how many, in *out (malloc), 0 for none.
 */
static size_t
prof_inl_spans(prof_inl_build_t *b, Dwarf_Die *die,
    const prof_inl_span_t *clip, size_t nclip, prof_inl_span_t **out)
{
    size_t            n, cap, i, j, k;
    ptrdiff_t         off;
    Dwarf_Addr        base, start, end;
    prof_inl_span_t  *s, *p, *r;

    s = NULL;
    n = cap = 0;
    off = 0;

    while ((off = dwarf_ranges(die, off, &base, &start, &end)) > 0) {
        if (start >= end) {
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 4;
            p = realloc(s, cap * sizeof(prof_inl_span_t));
            if (p == NULL) {
                b->err = -ENOMEM;
                free(s);
                return 0;
            }
            s = p;
        }
        s[n].start = start;
        s[n].end = end;
        n++;
    }

    if (n == 0) {
        free(s);
        return 0;
    }

    qsort(s, n, sizeof(prof_inl_span_t), prof_inl_span_cmp);

    if (clip == NULL) {
        *out = s;
        return n;
    }

    /* Within the ranges of the DIE around it (both sorted). */
    r = malloc((n + nclip) * sizeof(prof_inl_span_t));
    if (r == NULL) {
        b->err = -ENOMEM;
        free(s);
        return 0;
    }

    for (i = 0, k = 0; i < n; i++) {
        for (j = 0; j < nclip; j++) {
            start = s[i].start > clip[j].start ? s[i].start : clip[j].start;
            end = s[i].end < clip[j].end ? s[i].end : clip[j].end;
            if (start < end && k < n + nclip) {
                r[k].start = start;
                r[k].end = end;
                k++;
            }
        }
    }

    free(s);

    if (k == 0) {
        free(r);
        return 0;
    }

    *out = r;
    return k;
}


/*
 * The children of parent, as dwarf_getscopes() visits them: the innermost
 * DIE that has a pc is found by following, at each level, the first child
 * that has it. Painted last child first, each child's own children after
 * it, a later paint winning: the first child's, the deepest's.
 */
static void
prof_inl_visit(prof_inl_build_t *b, Dwarf_Die *parent,
    const prof_inl_span_t *clip, size_t nclip, uint32_t node,
    unsigned depth)
{
    int                tag;
    size_t             n, cap, i, k, nspans;
    uint32_t           kid_node;
    Dwarf_Die         *kids, *p;
    prof_inl_span_t   *spans;
    prof_inl_paint_t  *paint;

    if (depth > PROF_INL_DEPTH_MAX || b->err != 0) {
        return;
    }

    kids = malloc(16 * sizeof(Dwarf_Die));
    if (kids == NULL || dwarf_child(parent, &kids[0]) != 0) {
        free(kids);
        return;
    }

    n = 1;
    cap = 16;

    for ( ;; ) {
        if (n == cap) {
            cap *= 2;
            p = realloc(kids, cap * sizeof(Dwarf_Die));
            if (p == NULL) {
                b->err = -ENOMEM;
                free(kids);
                return;
            }
            kids = p;
        }
        if (dwarf_siblingof(&kids[n - 1], &kids[n]) != 0) {
            break;
        }
        n++;
    }

    for (i = n; i-- > 0 && b->err == 0; ) {
        nspans = prof_inl_spans(b, &kids[i], clip, nclip, &spans);
        if (nspans == 0) {
            continue;
        }

        tag = dwarf_tag(&kids[i]);
        kid_node = node;

        if (tag == DW_TAG_subprogram) {
            kid_node = 0;

        } else if (tag == DW_TAG_inlined_subroutine) {
            kid_node = prof_inl_node(b, &kids[i], node);
        }

        b->seq++;

        for (k = 0; k < nspans; k++) {
            paint = prof_inl_push(b, &b->paints, sizeof(prof_inl_paint_t));
            if (paint == NULL) {
                break;
            }
            paint->start = spans[k].start;
            paint->end = spans[k].end;
            paint->seq = b->seq;
            paint->node = kid_node;
        }

        if (prof_inl_may_have_scopes(tag) && dwarf_haschildren(&kids[i]) > 0)
        {
            prof_inl_visit(b, &kids[i], spans, nspans, kid_node, depth + 1);
        }

        free(spans);
    }

    free(kids);
}


static int
prof_inl_paint_cmp(const void *a, const void *b)
{
    const prof_inl_paint_t  *x = a, *y = b;

    return (x->start > y->start) - (x->start < y->start);
}


static int
prof_inl_u64_cmp(const void *a, const void *b)
{
    const uint64_t  *x = a, *y = b;

    return (*x > *y) - (*x < *y);
}


/* A max-heap of paints by seq. */
static void
prof_inl_heap_push(prof_inl_paint_t **heap, size_t *n, prof_inl_paint_t *p)
{
    size_t             i;
    prof_inl_paint_t  *t;

    i = (*n)++;
    heap[i] = p;

    while (i > 0 && heap[(i - 1) / 2]->seq < heap[i]->seq) {
        t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}


static void
prof_inl_heap_pop(prof_inl_paint_t **heap, size_t *n)
{
    size_t             i, c;
    prof_inl_paint_t  *t;

    heap[0] = heap[--*n];

    for (i = 0; (c = 2 * i + 1) < *n; i = c) {
        if (c + 1 < *n && heap[c + 1]->seq > heap[c]->seq) {
            c++;
        }
        if (heap[i]->seq >= heap[c]->seq) {
            break;
        }
        t = heap[i];
        heap[i] = heap[c];
        heap[c] = t;
    }
}


/* A CU's paints resolved into steps (a pc's node: the latest paint's). */
static void
prof_inl_resolve(prof_inl_build_t *b, uint64_t cu_off)
{
    size_t             i, j, k, npoints, nheap;
    uint64_t          *points, at;
    prof_inl_cu_t     *cu;
    prof_inl_step_t   *step, *last;
    prof_inl_paint_t  *paints, **heap;

    paints = b->paints.items;
    k = b->paints.n;

    cu = prof_inl_push(b, &b->cus, sizeof(prof_inl_cu_t));
    if (cu == NULL) {
        return;
    }

    cu->off = cu_off;
    cu->first = b->steps.n;
    cu->count = 0;

    if (k == 0) {
        return;
    }

    points = malloc(2 * k * sizeof(uint64_t));
    heap = malloc(k * sizeof(prof_inl_paint_t *));
    if (points == NULL || heap == NULL) {
        b->err = -ENOMEM;
        goto done;
    }

    qsort(paints, k, sizeof(prof_inl_paint_t), prof_inl_paint_cmp);

    for (i = 0; i < k; i++) {
        points[2 * i] = paints[i].start;
        points[2 * i + 1] = paints[i].end;
    }

    qsort(points, 2 * k, sizeof(uint64_t), prof_inl_u64_cmp);

    npoints = 0;
    for (i = 0; i < 2 * k; i++) {
        if (npoints == 0 || points[npoints - 1] != points[i]) {
            points[npoints++] = points[i];
        }
    }

    nheap = 0;
    j = 0;

    for (i = 0; i + 1 < npoints; i++) {
        at = points[i];

        while (j < k && paints[j].start <= at) {
            prof_inl_heap_push(heap, &nheap, &paints[j++]);
        }

        while (nheap > 0 && heap[0]->end <= at) {
            prof_inl_heap_pop(heap, &nheap);
        }

        if (nheap == 0) {
            continue;
        }

        last = cu->count ? (prof_inl_step_t *) b->steps.items
                           + b->steps.n - 1
                         : NULL;

        if (last != NULL && last->end == at && last->node == heap[0]->node) {
            last->end = points[i + 1];
            continue;
        }

        step = prof_inl_push(b, &b->steps, sizeof(prof_inl_step_t));
        if (step == NULL) {
            break;
        }

        /* cu may have moved: b->cus did not grow meanwhile. */
        step->start = at;
        step->end = points[i + 1];
        step->node = heap[0]->node;
        cu->count++;
    }

done:

    free(points);
    free(heap);
}


/* The node of pc in the CU whose DIE is at cu_off (its steps). */
static uint32_t
prof_inl_cu_node(prof_inl_build_t *b, uint64_t cu_off, uint64_t pc)
{
    size_t            lo, hi, mid;
    prof_inl_cu_t    *cus, *cu;
    prof_inl_step_t  *steps;

    cus = b->cus.items;
    lo = 0;
    hi = b->cus.n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (cus[mid].off < cu_off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    if (lo == b->cus.n || cus[lo].off != cu_off) {
        return 0;
    }

    cu = &cus[lo];
    steps = (prof_inl_step_t *) b->steps.items + cu->first;
    lo = 0;
    hi = cu->count;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (steps[mid].end <= pc) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    return (lo < cu->count && steps[lo].start <= pc) ? steps[lo].node : 0;
}


static void
prof_inl_bound(prof_inl_build_t *b, uint64_t pc)
{
    uint64_t  *p;

    p = prof_inl_push(b, &b->bounds, sizeof(uint64_t));
    if (p != NULL) {
        *p = pc;
    }
}


/* Every CU: its steps; their bounds, its lines' and aranges' too. */
static void
prof_inl_units(prof_inl_build_t *b)
{
    size_t          i, nlines, naranges;
    uint8_t         unit_type;
    Dwarf_CU       *cu, *next;
    Dwarf_Die       cudie, subdie;
    Dwarf_Off       off;
    Dwarf_Addr      addr;
    Dwarf_Word      length;
    Dwarf_Line     *l;
    Dwarf_Lines    *lines;
    Dwarf_Aranges  *aranges;
    prof_inl_step_t *steps;

    for (cu = NULL; b->err == 0
         && dwarf_get_units(b->dwarf, cu, &next, NULL, &unit_type, &cudie,
                            &subdie) == 0;
         cu = next)
    {
        if (dwarf_tag(&cudie) != DW_TAG_compile_unit) {
            continue;
        }

        b->paints.n = 0;
        prof_inl_visit(b, &cudie, NULL, 0, 0, 0);
        prof_inl_resolve(b, dwarf_dieoffset(&cudie));

        if (dwarf_getsrclines(&cudie, &lines, &nlines) != 0) {
            continue;
        }

        for (i = 0; i < nlines; i++) {
            l = dwarf_onesrcline(lines, i);
            if (l != NULL && dwarf_lineaddr(l, &addr) == 0) {
                prof_inl_bound(b, addr);
            }
        }
    }

    steps = b->steps.items;

    for (i = 0; i < b->steps.n; i++) {
        prof_inl_bound(b, steps[i].start);
        prof_inl_bound(b, steps[i].end);
    }

    if (dwarf_getaranges(b->dwarf, &aranges, &naranges) == 0) {
        for (i = 0; i < naranges; i++) {
            if (dwarf_getarangeinfo(dwarf_onearange(aranges, i), &addr,
                                    &length, &off) == 0)
            {
                prof_inl_bound(b, addr);
                prof_inl_bound(b, addr + length);
            }
        }
    }
}


/* libdw's answer at pc: what dwarf_inlines.c asked of it. */
static void
prof_inl_answer(prof_inl_build_t *b, uint64_t pc, prof_inl_value_t *v)
{
    int          lineno;
    Dwarf_Die    cudie;
    Dwarf_Line  *l;

    v->line = 0;
    v->node = 0;

    if (dwarf_addrdie(b->dwarf, pc, &cudie) == NULL) {
        return;
    }

    l = dwarf_getsrc_die(&cudie, pc);
    if (l != NULL && dwarf_lineno(l, &lineno) == 0 && lineno > 0) {
        v->line = (uint32_t) lineno;
    }

    v->node = prof_inl_cu_node(b, dwarf_dieoffset(&cudie), pc);
}


/* The ranges: one for each run of bounds with the same answer. */
static void
prof_inl_ranges(prof_inl_build_t *b)
{
    size_t             i, n;
    uint64_t          *bounds;
    prof_inl_value_t   v;
    prof_inl_range_t  *r, *last;

    bounds = b->bounds.items;
    n = b->bounds.n;

    if (n == 0) {
        return;
    }

    qsort(bounds, n, sizeof(uint64_t), prof_inl_u64_cmp);

    for (i = 0; i < n && b->err == 0; i++) {
        if (i > 0 && bounds[i] == bounds[i - 1]) {
            continue;
        }

        prof_inl_answer(b, bounds[i], &v);

        last = b->ranges.n ? (prof_inl_range_t *) b->ranges.items
                             + b->ranges.n - 1
                           : NULL;

        if ((last == NULL && v.line == 0 && v.node == 0)
            || (last != NULL && memcmp(&last->value, &v, sizeof(v)) == 0))
        {
            continue;
        }

        r = prof_inl_push(b, &b->ranges, sizeof(prof_inl_range_t));
        if (r != NULL) {
            r->start = bounds[i];
            r->value = v;
        }
    }
}


/* A LEB128 number at p: past it. */
static uint8_t *
prof_inl_leb(uint8_t *p, uint64_t v)
{
    do {
        *p++ = (uint8_t) ((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);

    return p;
}


/* The image of what was built. */
static int
prof_inl_image(prof_inl_build_t *b, void **image, size_t *len)
{
    size_t              i, bytes, data_max, data_len;
    int64_t             dline;
    uint8_t            *data, *p;
    uint32_t            start, prev_start, prev_line;
    prof_inl_block_t   *blocks;
    prof_inl_header_t  *h;
    prof_inl_range_t   *ranges;

    ranges = b->ranges.items;

    if (b->ranges.n == 0) {
        return -ENOENT;
    }

    if (ranges[b->ranges.n - 1].start - ranges[0].start > UINT32_MAX
        || b->ranges.n > UINT32_MAX / PROF_INL_ENTRY_MAX)
    {
        return -EFBIG;
    }

    /* The ranges' bytes first, at most PROF_INL_ENTRY_MAX a range. */
    data_max = b->ranges.n * PROF_INL_ENTRY_MAX + 4;
    bytes = prof_inl_image_bytes(b->ranges.n, data_max, b->nodes.count,
                                 b->names.keys_used);

    h = calloc(1, bytes);
    if (h == NULL) {
        return -ENOMEM;
    }

    h->magic = PROF_INL_MAGIC;
    h->base = ranges[0].start;
    h->nranges = (uint32_t) b->ranges.n;
    h->nnodes = b->nodes.count;
    h->names_len = (uint32_t) b->names.keys_used;

    blocks = (prof_inl_block_t *) (h + 1);
    data = (uint8_t *) (blocks + prof_inl_nblocks(h));
    p = data;
    prev_start = 0;
    prev_line = 0;

    for (i = 0; i < b->ranges.n; i++) {
        start = (uint32_t) (ranges[i].start - h->base);

        if (i % PROF_INL_BLOCK == 0) {
            blocks[i / PROF_INL_BLOCK].start = start;
            blocks[i / PROF_INL_BLOCK].offset = (uint32_t) (p - data);
            prev_start = start;
            prev_line = 0;
        }

        dline = (int64_t) ranges[i].value.line - prev_line;

        p = prof_inl_leb(p, start - prev_start);
        p = prof_inl_leb(p, dline >= 0 ? (uint64_t) dline * 2
                                       : (uint64_t) -dline * 2 - 1);
        p = prof_inl_leb(p, ranges[i].value.node);

        prev_start = start;
        prev_line = ranges[i].value.line;
    }

    /* The nodes and names after the bytes used, aligned. */
    data_len = ((size_t) (p - data) + 3) & ~(size_t) 3;
    h->data_len = (uint32_t) data_len;

    memcpy(data + data_len, b->nodes.keys, b->nodes.keys_used);
    memcpy(data + data_len + b->nodes.keys_used, b->names.keys,
           b->names.keys_used);

    *image = h;
    *len = prof_inl_image_bytes(h->nranges, data_len, h->nnodes,
                                h->names_len);

    return 0;
}


int
prof_inline_table_build(int fd, void *data, void **image, size_t *len)
{
    int               rc, inserted;
    prof_inl_node_t   none;
    prof_inl_build_t  b;

    (void) data;

    memset(&b, 0, sizeof(b));
    prof_intern_init(&b.nodes);
    prof_intern_init(&b.names);

    /* Node 0, none (no node is this one); a name list never empty. */
    memset(&none, 0xff, sizeof(none));
    if (prof_intern(&b.nodes, &none, sizeof(none), &inserted) != 0
        || prof_intern(&b.names, "", 1, &inserted) != 0)
    {
        b.err = -ENOMEM;
    }

    b.dwarf = (b.err == 0) ? dwarf_begin(fd, DWARF_C_READ) : NULL;
    if (b.dwarf == NULL) {
        prof_intern_free(&b.nodes);
        prof_intern_free(&b.names);
        return (b.err != 0) ? b.err : -ENOENT;  /* none libdw reads */
    }

    prof_inl_units(&b);

    if (b.err == 0) {
        prof_inl_ranges(&b);
    }

    rc = (b.err != 0) ? b.err : prof_inl_image(&b, image, len);

    dwarf_end(b.dwarf);
    free(b.paints.items);
    free(b.steps.items);
    free(b.cus.items);
    free(b.bounds.items);
    free(b.ranges.items);
    prof_intern_free(&b.nodes);
    prof_intern_free(&b.names);

    return rc;
}
