/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A bounds-checked reader of 64-bit little-endian ELF files, for the
 * symbolizer and the debug files it looks for: every read is checked
 * against the file's size, and a file that is not what it says is
 * -ENOEXEC, never a crash.
 *
 * Threading: none of its own; a prof_elf_t belongs to its caller. It reads
 * files, so it may block: never on a signal handler or the event loop.
 * Memory: what the *_alloc functions return belongs to the caller (free).
 */

#ifndef PROF_ELF_FILE_H
#define PROF_ELF_FILE_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>


#define PROF_ELF_BUILD_ID_MAX   64          /* bytes of the note payload */
#define PROF_ELF_NAMES_MAX      (1 << 20)   /* bytes of the section names */


typedef struct {
    int                  fd;
    uint64_t             size;
    Elf64_Ehdr           ehdr;
} prof_elf_t;


/*
 * 0, -ENOEXEC when the file is not a 64-bit little-endian ELF, -ENODEV
 * when it is not a regular file, -errno. On failure elf->fd is -1.
 */
int prof_elf_open(prof_elf_t *elf, const char *path);
void prof_elf_close(prof_elf_t *elf);

/* Reads len bytes at off: 0, -ENOEXEC past the end of the file, -errno. */
int prof_elf_read(prof_elf_t *elf, uint64_t off, void *buf, size_t len);

/*
 * Reads len bytes at off into a new buffer with a NUL byte after them
 * (a string table's last name ends there even when the file's does not).
 */
int prof_elf_read_alloc(prof_elf_t *elf, uint64_t off, uint64_t len,
    void **out);

/*
 * The section headers: *count of them in a new buffer. -ENOENT when the
 * file has none, -ENOEXEC when they are not all within the file.
 */
int prof_elf_sections(prof_elf_t *elf, Elf64_Shdr **sections,
    size_t *count);

/*
 * The section named name among the n headers sh: NULL when there is
 * none, or when the section names are not within the file (*rc then
 * -ENOEXEC, else 0).
 */
Elf64_Shdr *prof_elf_section_named(prof_elf_t *elf, Elf64_Shdr *sh,
    size_t n, const char *name, int *rc);

/*
 * Finds a GNU build id note in a PT_NOTE payload of len bytes (len < 4 GB)
 * and writes it in lowercase hex to out (2 * PROF_ELF_BUILD_ID_MAX + 1
 * bytes): 0, -ENOENT when there is none, -ENOEXEC when a note overruns it.
 */
int prof_elf_build_id(const unsigned char *p, uint64_t len, uint64_t align,
    char *out);

/*
 * Whether the file at path has a section of the type that is not empty:
 * 1, 0, or -errno (-ENOEXEC when it is malformed).
 */
int prof_elf_has_section(const char *path, uint32_t type);


#endif /* PROF_ELF_FILE_H */
