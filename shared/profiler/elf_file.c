/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A bounds-checked reader of 64-bit little-endian ELF files: headers,
 * sections, notes. Every read is checked against the file's size.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profiler/elf_file.h"


/* Reads len bytes at off: 0, -ENOEXEC past the end of the file, -errno. */

int
prof_elf_read(prof_elf_t *elf, uint64_t off, void *buf, size_t len)
{
    ssize_t  n;

    if (len > elf->size || off > elf->size - len) {
        return -ENOEXEC;
    }

    while (len) {
        n = pread(elf->fd, buf, len, (off_t) off);

        if (n <= 0) {
            if (n == -1 && errno == EINTR) {
                continue;
            }

            return n == 0 ? -ENOEXEC : -errno;
        }

        buf = (char *) buf + n;
        off += n;
        len -= n;
    }

    return 0;
}


/*
 * Reads len bytes at off into a new buffer with a NUL byte after them
 * (a string table's last name ends there even when the file's does not).
 */

int
prof_elf_read_alloc(prof_elf_t *elf, uint64_t off, uint64_t len, void **out)
{
    int    rc;
    char  *buf;

    *out = NULL;

    if (len > elf->size || off > elf->size - len) {
        return -ENOEXEC;
    }

    buf = malloc(len + 1);
    if (buf == NULL) {
        return -ENOMEM;
    }

    rc = prof_elf_read(elf, off, buf, len);
    if (rc != 0) {
        free(buf);
        return rc;
    }

    buf[len] = '\0';
    *out = buf;

    return 0;
}


/* 0, -ENOEXEC when the file is not a 64-bit little-endian ELF, -errno. */

int
prof_elf_open(prof_elf_t *elf, const char *path)
{
    int          rc;
    struct stat  st;
    Elf64_Ehdr  *eh;

    elf->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (elf->fd == -1) {
        return -errno;
    }

    eh = &elf->ehdr;

    if (fstat(elf->fd, &st) == -1) {
        rc = -errno;
        goto failed;
    }

    if (!S_ISREG(st.st_mode)) {
        rc = -ENODEV;
        goto failed;
    }

    elf->size = st.st_size;

    rc = prof_elf_read(elf, 0, eh, sizeof(Elf64_Ehdr));
    if (rc != 0) {
        goto failed;
    }

    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0
        || eh->e_ident[EI_CLASS] != ELFCLASS64
        || eh->e_ident[EI_DATA] != ELFDATA2LSB
        || (eh->e_phnum && eh->e_phentsize != sizeof(Elf64_Phdr)))
    {
        rc = -ENOEXEC;
        goto failed;
    }

    return 0;

failed:

    close(elf->fd);
    elf->fd = -1;

    return rc;
}


/*
 * The section headers: *count of them in a new buffer. -ENOENT when the
 * file has none, -ENOEXEC when they are not all within the file.
 */

int
prof_elf_sections(prof_elf_t *elf, Elf64_Shdr **sections, size_t *count)
{
    int         rc;
    uint64_t    n;
    Elf64_Shdr  first;

    *sections = NULL;
    *count = 0;

    if (elf->ehdr.e_shoff == 0) {
        return -ENOENT;
    }

    if (elf->ehdr.e_shentsize != sizeof(Elf64_Shdr)) {
        return -ENOEXEC;
    }

    n = elf->ehdr.e_shnum;

    if (n == 0) {
        /* SHN_LORESERVE sections or more: the count is in the first one */

        rc = prof_elf_read(elf, elf->ehdr.e_shoff, &first, sizeof(first));
        if (rc != 0) {
            return rc;
        }

        n = first.sh_size;
        if (n == 0) {
            return -ENOENT;
        }
    }

    if (n > elf->size / sizeof(Elf64_Shdr)) {
        return -ENOEXEC;
    }

    rc = prof_elf_read_alloc(elf, elf->ehdr.e_shoff, n * sizeof(Elf64_Shdr),
                             (void **) sections);
    if (rc != 0) {
        return rc;
    }

    *count = n;

    return 0;
}


static uint64_t
prof_align(uint64_t n, uint64_t align)
{
    return (n + align - 1) & ~(align - 1);
}


/*
 * Finds a GNU build id note in a PT_NOTE payload of len bytes (len < 4 GB):
 * 0, -ENOENT when there is none, -ENOEXEC when a note overruns it.
 */

int
prof_elf_build_id(const unsigned char *p, uint64_t len, uint64_t align,
    char *out)
{
    uint64_t    pos, desc, next, i;
    Elf64_Nhdr  nh;

    pos = 0;

    while (len - pos >= sizeof(Elf64_Nhdr)) {
        memcpy(&nh, p + pos, sizeof(Elf64_Nhdr));

        /* 32-bit sizes on a position below 4 GB: no 64-bit overflow */

        desc = prof_align(pos + sizeof(Elf64_Nhdr) + nh.n_namesz, align);
        next = prof_align(desc + nh.n_descsz, align);

        if (desc > len || nh.n_descsz > len - desc) {
            return -ENOEXEC;
        }

        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == sizeof(ELF_NOTE_GNU)
            && memcmp(p + pos + sizeof(Elf64_Nhdr), ELF_NOTE_GNU,
                      sizeof(ELF_NOTE_GNU)) == 0
            && nh.n_descsz > 0 && nh.n_descsz <= PROF_ELF_BUILD_ID_MAX)
        {
            for (i = 0; i < nh.n_descsz; i++) {
                snprintf(out + 2 * i, 3, "%02x", p[desc + i]);
            }

            return 0;
        }

        if (next >= len) {
            return -ENOENT;
        }

        pos = next;
    }

    return -ENOENT;
}


/* Closes a file prof_elf_open() opened. */
void
prof_elf_close(prof_elf_t *elf)
{
    if (elf->fd >= 0) {
        close(elf->fd);
        elf->fd = -1;
    }
}


/*
 * The section named name among the n headers sh: NULL when there is
 * none, or when the section names are not within the file (*rc then
 * -ENOEXEC, else 0).
 */
Elf64_Shdr *
prof_elf_section_named(prof_elf_t *elf, Elf64_Shdr *sh, size_t n,
    const char *name, int *rc)
{
    size_t       i, len;
    char        *names;
    Elf64_Shdr  *found, *str;

    *rc = 0;

    if (elf->ehdr.e_shstrndx == SHN_UNDEF
        || elf->ehdr.e_shstrndx >= n)
    {
        return NULL;
    }

    str = &sh[elf->ehdr.e_shstrndx];

    if (str->sh_type != SHT_STRTAB || str->sh_size > PROF_ELF_NAMES_MAX) {
        *rc = -ENOEXEC;
        return NULL;
    }

    *rc = prof_elf_read_alloc(elf, str->sh_offset, str->sh_size,
                              (void **) &names);
    if (*rc != 0) {
        return NULL;
    }

    len = strlen(name);
    found = NULL;

    for (i = 0; i < n && found == NULL; i++) {
        if (sh[i].sh_name < str->sh_size
            && str->sh_size - sh[i].sh_name > len
            && memcmp(names + sh[i].sh_name, name, len + 1) == 0)
        {
            found = &sh[i];
        }
    }

    free(names);

    return found;
}


/* Whether a file has a section of a type: 1, 0, or -errno. */
int
prof_elf_has_section(const char *path, uint32_t type)
{
    int          rc;
    size_t       i, shnum;
    prof_elf_t   elf;
    Elf64_Shdr  *sh;

    rc = prof_elf_open(&elf, path);
    if (rc != 0) {
        return rc;
    }

    rc = prof_elf_sections(&elf, &sh, &shnum);
    close(elf.fd);

    if (rc != 0) {
        return rc;
    }

    for (i = 0; i < shnum; i++) {
        if (sh[i].sh_type == type && sh[i].sh_size > 0) {
            break;
        }
    }

    free(sh);

    return i < shnum;
}
