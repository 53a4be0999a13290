/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The layout of an inline table's image (inline_table.h), which its
 * builder (inline_table_build.c) writes and its lookup (inline_table.c)
 * reads: a header, the ranges by blocks (each block's first start, an
 * offset from base, and where its ranges' bytes begin), the ranges'
 * bytes (each range's start, line and innermost inlined function, a
 * node: 0 for none, delta-coded within its block), the nodes (a name, the
 * line of the call, the node of the function it was inlined into, which
 * comes before it), and the names. Pointer-free: the symbol store holds
 * it for every profiler process of the instance.
 */

#ifndef PROF_INLINE_TABLE_IMAGE_H
#define PROF_INLINE_TABLE_IMAGE_H

#include <stddef.h>
#include <stdint.h>


#define PROF_INL_MAGIC          0x326c6e69666f7270ULL   /* "profinl2" */
#define PROF_INL_NO_NAME        UINT32_MAX  /* a node's: its chain is none */
#define PROF_INL_BLOCK          16          /* ranges a block */
#define PROF_INL_ENTRY_MAX      15          /* bytes of a range, at most */


typedef struct {
    uint64_t             magic;
    uint64_t             base;              /* vaddr of the first start */
    uint32_t             nranges;
    uint32_t             nnodes;            /* node 0 is none */
    uint32_t             names_len;
    uint32_t             data_len;          /* a multiple of 4 */
} prof_inl_header_t;

/*
 * The ranges by blocks of PROF_INL_BLOCK: a block's first start (an
 * offset from base) and where its ranges' bytes begin in the data. A
 * range's bytes, three LEB128 numbers: its start less the one before it
 * in the block (0 for the first), its line less the one before it
 * (zigzag; the first's less 0), its innermost inlined function (a node, 0
 * for none).
 */
typedef struct {
    uint32_t             start;
    uint32_t             offset;
} prof_inl_block_t;

/* What a range says: from its start to the next range's. */
typedef struct {
    uint32_t             line;              /* at the range's start */
    uint32_t             node;              /* innermost inlined: 0 none */
} prof_inl_value_t;

typedef struct {
    uint32_t             name;              /* offset in the names */
    uint32_t             call_line;
    uint32_t             parent;            /* the node it is inlined in */
} prof_inl_node_t;


/* The image's parts. */
#define prof_inl_nblocks(h)                                                 \
    (((h)->nranges + PROF_INL_BLOCK - 1) / PROF_INL_BLOCK)
#define prof_inl_blocks(h)  ((const prof_inl_block_t *) ((h) + 1))
#define prof_inl_data(h)                                                    \
    ((const uint8_t *) (prof_inl_blocks(h) + prof_inl_nblocks(h)))
#define prof_inl_nodes(h)                                                   \
    ((const prof_inl_node_t *) (prof_inl_data(h) + (h)->data_len))
#define prof_inl_names(h)                                                   \
    ((const char *) (prof_inl_nodes(h) + (h)->nnodes))


static inline size_t
prof_inl_image_bytes(uint64_t nranges, uint64_t data_len, uint64_t nnodes,
    uint64_t names_len)
{
    return sizeof(prof_inl_header_t)
           + (nranges + PROF_INL_BLOCK - 1) / PROF_INL_BLOCK
             * sizeof(prof_inl_block_t)
           + data_len + nnodes * sizeof(prof_inl_node_t) + names_len;
}


#endif /* PROF_INLINE_TABLE_IMAGE_H */
