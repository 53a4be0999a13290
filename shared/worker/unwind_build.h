/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Building an unwind table (unwind_table.h) from images of objects: a
 * mapping made, every image's call frame information turned into rows and
 * a page index in it, the mapping finished. Called by unwind.c only, which
 * finds the images (the loaded objects, or one image in memory).
 *
 * Not for the signal handler. prof_unwind_table_create and
 * prof_unwind_table_finish map and unmap memory; between them
 * prof_unwind_builder_add_image allocates nothing, takes no lock and reads
 * an image only within its segment and its code (the return sites), so
 * that it may run inside
 * dl_iterate_phdr, the loader lock held. One thread builds a table.
 * Memory: the table is its own mapping, freed by prof_unwind_table_free.
 */

#ifndef PROF_UNWIND_BUILD_H
#define PROF_UNWIND_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "common/unwind_table.h"
#include "worker/unwind.h"


/* Code spans beyond this are corrupt (no object has 1 GB of code). */
#define PROF_SPAN_MAX        ((uintptr_t) 1 << 30)

/*
 * An object with more code than this a FDE is taken to have no unwind
 * tables (musl's libc: 4 FDEs for 600 KiB; glibc's objects have one for
 * every few hundred bytes): its code without rules gets return sites, and
 * a table with one gets call-outs.
 */
#define PROF_SPARSE_FDE_BYTES  ((uintptr_t) 16 << 10)

/* Whether an image of span bytes of code with n FDEs is sparse. */
#define prof_unwind_sparse(span, n)                                          \
    ((n) == 0 || (uintptr_t) (span) / (n) > PROF_SPARSE_FDE_BYTES)


/* Readable executable segments of an image kept, at most. */
#define PROF_IMAGE_SEGMENTS  4


/*
 * Where an object's data may be read, and where its code may lie: hdr
 * NULL when it has no .eh_frame_hdr (rows without rules only). Its code
 * is read (for return sites) only within its readable executable
 * segments, never in the holes between them.
 */
typedef struct {
    uintptr_t          base;         /* load bias */
    const uint8_t     *low;          /* the segment of .eh_frame_hdr */
    const uint8_t     *high;
    const uint8_t     *hdr;
    size_t             hdr_size;
    uintptr_t          code_low;     /* executable segments */
    uintptr_t          code_high;
    unsigned           segments;
    uintptr_t          segment_low[PROF_IMAGE_SEGMENTS];
    uintptr_t          segment_high[PROF_IMAGE_SEGMENTS];
} prof_unwind_image_t;


/* A table being built, and the object being parsed. */
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
    int                    callouts; /* make call-outs (unwind_table.h) */
    const prof_unwind_table_t *shared; /* whose objects may be taken
                                          whole, or NULL */
    uintptr_t              entry;    /* the program's entry point, or 0 */
    int                    full;     /* rows did not fit: start again */
} prof_unwind_builder_t;


/*
 * A table of an empty mapping with size bytes for rows and indexes and
 * room for objects, b ready to add images to it; NULL when out of memory.
 */
prof_unwind_table_t *prof_unwind_table_create(size_t size, size_t objects,
    prof_unwind_builder_t *b);

/*
 * The FDEs of an image's .eh_frame_hdr search table (*table: its
 * entries), or 0: none, no header, or one without a search table (then
 * the image is code without rules).
 */
uint64_t prof_unwind_image_fdes(const prof_unwind_image_t *im,
    const uint8_t **table);

/*
 * Parses one image into the next object of the table: 0, or -1 when it
 * has no usable rows (left out) or did not fit (b->full: the caller
 * starts again with a larger table).
 */
int prof_unwind_builder_add_image(prof_unwind_builder_t *b,
    const prof_unwind_image_t *im);

/*
 * The next object of the table is o, an object of another table (b->shared)
 * built from the same image, which outlives this one: its descriptor
 * copied, its arrays left where they are. 0, or -1 when the table has no
 * room for another object.
 */
int prof_unwind_builder_add_object(prof_unwind_builder_t *b,
    const prof_unwind_object_t *o);

/* Sorts the objects and gives back the pages the build did not use. */
void prof_unwind_table_finish(prof_unwind_table_t *t,
    prof_unwind_builder_t *b);


#endif /* PROF_UNWIND_BUILD_H */
