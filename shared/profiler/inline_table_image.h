/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The layout of an inline table's image (inline_table.h), which its
 * builder (inline_table_build.c) writes and its lookup (inline_table.c)
 * reads: a header, the ranges' starts (offsets from base, sorted), each
 * range's line and innermost inlined function (a node: 0 for none), the
 * nodes (a name, the line of the call, the node of the function it was
 * inlined into, which comes before it), and the names. Pointer-free: the
 * symbol store holds it for every profiler process of the instance.
 */

#ifndef PROF_INLINE_TABLE_IMAGE_H
#define PROF_INLINE_TABLE_IMAGE_H

#include <stddef.h>
#include <stdint.h>


#define PROF_INL_MAGIC          0x316c6e69666f7270ULL   /* "profinl1" */
#define PROF_INL_NO_NAME        UINT32_MAX  /* a node's: its chain is none */


typedef struct {
    uint64_t             magic;
    uint64_t             base;              /* vaddr of the first start */
    uint32_t             nranges;
    uint32_t             nnodes;            /* node 0 is none */
    uint32_t             names_len;
    uint32_t             reserved;
} prof_inl_header_t;

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
#define prof_inl_starts(h)  ((const uint32_t *) ((h) + 1))
#define prof_inl_values(h)                                                  \
    ((const prof_inl_value_t *) (prof_inl_starts(h) + (h)->nranges))
#define prof_inl_nodes(h)                                                   \
    ((const prof_inl_node_t *) (prof_inl_values(h) + (h)->nranges))
#define prof_inl_names(h)                                                   \
    ((const char *) (prof_inl_nodes(h) + (h)->nnodes))


static inline size_t
prof_inl_image_bytes(uint64_t nranges, uint64_t nnodes, uint64_t names_len)
{
    return sizeof(prof_inl_header_t) + nranges * 12 + nnodes * 12
           + names_len;
}


#endif /* PROF_INLINE_TABLE_IMAGE_H */
