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


int
prof_inline_table_valid(const void *image, size_t len)
{
    uint32_t                  i;
    const prof_inl_node_t    *nodes;
    const prof_inl_value_t   *values;
    const prof_inl_header_t  *h = image;

    if (len < sizeof(*h) || h->magic != PROF_INL_MAGIC || h->nnodes == 0
        || h->names_len == 0
        || prof_inl_image_bytes(h->nranges, h->nnodes, h->names_len) != len
        || prof_inl_names(h)[h->names_len - 1] != '\0')
    {
        return 0;
    }

    values = prof_inl_values(h);
    nodes = prof_inl_nodes(h);

    for (i = 0; i < h->nranges; i++) {
        if (values[i].node >= h->nnodes
            || (i > 0 && prof_inl_starts(h)[i] <= prof_inl_starts(h)[i - 1]))
        {
            return 0;
        }
    }

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
    const uint32_t           *starts;
    const prof_inl_node_t    *nodes;
    const prof_inl_value_t   *v;
    const prof_inl_header_t  *h = image;

    *line = 0;

    if (vaddr < h->base || vaddr - h->base > UINT32_MAX) {
        return 0;
    }

    at = (uint32_t) (vaddr - h->base);
    starts = prof_inl_starts(h);

    /* The last range that starts at or before the pc. */
    lo = 0;
    hi = h->nranges;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (starts[mid] <= at) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    if (lo == 0) {
        return 0;
    }

    v = &prof_inl_values(h)[lo - 1];
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
