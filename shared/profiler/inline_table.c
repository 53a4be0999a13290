/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Inline tables (inline_table.h): an image checked whole before use, and
 * the lookup of a pc, a binary search over the ranges' starts and the
 * walk up its chain of inlined functions.
 */

#include <stddef.h>
#include <stdint.h>

#include "profiler/inline_table.h"
#include "profiler/inline_table_image.h"


/* A LEB128 number of at most 32 bits at *p (before end): 0, or -1. */
static int
prof_inl_read(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    unsigned  shift;

    *v = 0;

    for (shift = 0; *p < end && shift < 35; shift += 7) {
        *v |= (uint64_t) (**p & 0x7f) << shift;
        if ((*(*p)++ & 0x80) == 0) {
            return (*v >> 33) == 0 ? 0 : -1;
        }
    }

    return -1;
}


/*
 * The ranges of block b decoded one by one, as far as the one in force at
 * at (UINT32_MAX: the whole block): the last one's value, and 0; -1 when
 * its bytes are not a block's (they stop short, a start goes backwards, a
 * node is past the nodes).
 */
static int
prof_inl_block(const prof_inl_header_t *h, uint32_t b, uint32_t at,
    prof_inl_value_t *v)
{
    uint32_t                 i, n, start, line;
    uint64_t                 dstart, zline, node;
    const uint8_t           *p, *end;
    const prof_inl_block_t  *blocks = prof_inl_blocks(h);

    n = h->nranges - b * PROF_INL_BLOCK;
    n = (n < PROF_INL_BLOCK) ? n : PROF_INL_BLOCK;

    p = prof_inl_data(h) + blocks[b].offset;
    end = (b + 1 < prof_inl_nblocks(h))
          ? prof_inl_data(h) + blocks[b + 1].offset
          : prof_inl_data(h) + h->data_len;

    start = blocks[b].start;
    line = 0;

    for (i = 0; i < n; i++) {
        if (prof_inl_read(&p, end, &dstart) != 0
            || prof_inl_read(&p, end, &zline) != 0
            || prof_inl_read(&p, end, &node) != 0 || node >= h->nnodes
            || (i == 0) != (dstart == 0) || dstart > UINT32_MAX - start)
        {
            return -1;
        }

        start += (uint32_t) dstart;

        if (start > at) {
            break;
        }

        /* zigzag: 2d for d >= 0, -2d - 1 for d < 0 */
        line += (zline & 1) ? -(uint32_t) ((zline >> 1) + 1)
                            : (uint32_t) (zline >> 1);
        v->line = line;
        v->node = (uint32_t) node;
    }

    return 0;
}


int
prof_inline_table_valid(const void *image, size_t len)
{
    uint32_t                  i, nblocks;
    prof_inl_value_t          v;
    const prof_inl_node_t    *nodes;
    const prof_inl_block_t   *blocks;
    const prof_inl_header_t  *h = image;

    if (len < sizeof(*h) || h->magic != PROF_INL_MAGIC || h->nnodes == 0
        || h->names_len == 0 || h->nranges == 0 || (h->data_len & 3) != 0
        || prof_inl_image_bytes(h->nranges, h->data_len, h->nnodes,
                                h->names_len) != len
        || prof_inl_names(h)[h->names_len - 1] != '\0')
    {
        return 0;
    }

    blocks = prof_inl_blocks(h);
    nblocks = prof_inl_nblocks(h);

    /* Every block decodes within its bytes, its starts after the last's. */
    for (i = 0; i < nblocks; i++) {
        if (blocks[i].offset > h->data_len
            || (i > 0 && (blocks[i].start <= blocks[i - 1].start
                          || blocks[i].offset <= blocks[i - 1].offset))
            || (i == 0 && (blocks[0].start != 0 || blocks[0].offset != 0)))
        {
            return 0;
        }
    }

    for (i = 0; i < nblocks; i++) {
        if (prof_inl_block(h, i, UINT32_MAX, &v) != 0) {
            return 0;
        }
    }

    nodes = prof_inl_nodes(h);

    /* A node's parent comes before it: every chain ends. */
    for (i = 1; i < h->nnodes; i++) {
        if (nodes[i].parent >= i
            || (nodes[i].name != PROF_INL_NO_NAME
                && nodes[i].name >= h->names_len))
        {
            return 0;
        }
    }

    return 1;
}


size_t
prof_inline_table_lookup(const void *image, uint64_t vaddr,
    prof_inline_t *frames, size_t max, uint32_t *line)
{
    size_t                    n, lo, hi, mid;
    uint32_t                  node, at;
    prof_inl_value_t          value, *v;
    const prof_inl_node_t    *nodes;
    const prof_inl_block_t   *blocks;
    const prof_inl_header_t  *h = image;

    *line = 0;

    if (vaddr < h->base || vaddr - h->base > UINT32_MAX) {
        return 0;
    }

    at = (uint32_t) (vaddr - h->base);
    blocks = prof_inl_blocks(h);

    /* The last block that starts at or before the pc, then its range. */
    lo = 0;
    hi = prof_inl_nblocks(h);

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (blocks[mid].start <= at) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    v = &value;

    if (lo == 0 || prof_inl_block(h, (uint32_t) (lo - 1), at, v) != 0) {
        return 0;
    }

    nodes = prof_inl_nodes(h);
    *line = v->line;
    n = 0;

    for (node = v->node; node != 0; node = nodes[node].parent) {
        if (n == max || nodes[node].name == PROF_INL_NO_NAME) {
            /* A chain cut short would name a wrong caller: none. */
            *line = 0;
            return 0;
        }

        frames[n].function = prof_inl_names(h) + nodes[node].name;
        frames[n].line = *line;
        n++;

        *line = nodes[node].call_line;
    }

    return n;
}
