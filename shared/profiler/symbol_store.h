/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The symbol store: what every profiler process of an instance would
 * otherwise compute alike, computed once and held once. A memory file
 * (memfd) the master creates before its first workers and keeps for its
 * life; every worker, and so every profiler process, inherits its
 * descriptor. It holds images: the symbol tables of the objects named
 * (symbol_table.h), and the inline tables of the files whose DWARF is
 * read for inlined functions (inline_table.h), which every process maps
 * read-only: their pages count once in the instance, not once per worker,
 * and no process holds libdw's tables of a file the store has (libc's
 * debug file: 579 KB of inline table, where each process held 3 MB of
 * libdw's tables over an 8.5 MB image of its DWARF before).
 *
 * Entries are keyed by the file (device, inode, size, modification time)
 * and never change once ready; the first process to ask builds an image
 * (outside the table's lock, holding a lock on its entry's byte), the
 * others wait for it, with a deadline, or take over an entry whose builder
 * died. Locks are fcntl()'s record locks: a process that dies holds none.
 * Nothing is freed before the master exits, and the file grows only by
 * the images built: the store is bounded (PROF_STORE_MAX_BYTES,
 * PROF_STORE_ENTRIES), and past its bound a process reads its own DWARF,
 * as without a store.
 *
 * Threading: the profiler process's loop thread only. It reads files and
 * may block (building an image, or waiting for another process's):
 * never on a signal handler or the event loop of a worker. The worker
 * never maps it.
 */

#ifndef PROF_SYMBOL_STORE_H
#define PROF_SYMBOL_STORE_H

#include <stddef.h>
#include <stdint.h>


/* What a store holds, for the status page and the exit line. */
typedef struct {
    uint64_t             bytes;             /* of images, all processes */
    unsigned             images;
    unsigned             built;             /* by this process */
    unsigned             mapped;            /* by this process, now */
} prof_symbol_store_stats_t;


typedef struct prof_symbol_store_s  prof_symbol_store_t;


/* In the master: a new store's descriptor (close-on-exec), or -errno. */
int prof_symbol_store_create(void);

/* In a profiler process: the store of that descriptor, or NULL. */
prof_symbol_store_t *prof_symbol_store_open(int fd);

void prof_symbol_store_close(prof_symbol_store_t *s);

/*
 * What an image is of; a file has one image of each kind at most.
 */
#define PROF_STORE_SYMTAB           2   /* symbol_table.h: .symtab */
#define PROF_STORE_DYNSYM           3   /* .dynsym */
#define PROF_STORE_MINIDEBUGINFO    4   /* .dynsym and MiniDebugInfo */
#define PROF_STORE_INLINES          5   /* inline_table.h */

/*
 * Builds the image of a kind for the file open at fd, in memory of its own
 * (malloc, *image and *len): 0, -ENOENT when the file has none (the store
 * remembers it), -errno.
 */
typedef int (*prof_symbol_store_build_pt)(int fd, void *data, void **image,
    size_t *len);

/*
 * The image of that kind of the file open at fd, mapped read-only: its
 * address and *len, built now with build if no process has, or NULL:
 * -ENOENT when the file has none (remembered for the others), -ENOSPC
 * when the store is full, -ETIMEDOUT when another process is still
 * building it, -errno. Unmap with prof_symbol_store_unmap().
 */
void *prof_symbol_store_get(prof_symbol_store_t *s, int fd, uint32_t kind,
    prof_symbol_store_build_pt build, void *data, size_t *len, int *err);

void prof_symbol_store_unmap(prof_symbol_store_t *s, void *image,
    size_t len);

void prof_symbol_store_stats(prof_symbol_store_t *s,
    prof_symbol_store_stats_t *stats);


#endif /* PROF_SYMBOL_STORE_H */
