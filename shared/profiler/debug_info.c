/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Debug information as distributions ship it beside stripped objects: the
 * debug file a .gnu_debuglink names, and MiniDebugInfo (.gnu_debugdata).
 * See debug_info.h.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "profiler/debug_info.h"
#include "profiler/elf_file.h"
#include "common/io.h"


#define PROF_DEBUGLINK_MAX       4096        /* bytes of .gnu_debuglink */
#define PROF_DEBUGLINK_FILE_MAX  (4ULL << 30) /* bytes of a debug file */
#define PROF_DEBUGDATA_MAX       (64 << 20)  /* bytes of .gnu_debugdata */
#define PROF_MINIDEBUG_MAX       (256 << 20) /* bytes once decompressed */
#define PROF_MINIDEBUG_MEMLIMIT  (128 << 20) /* liblzma's memory */


/*
 * The contents of the section named name of the ELF file at path, at most
 * max bytes: 0, -ENOENT when it has none, -EFBIG when it is larger,
 * -ENOEXEC when the file is malformed, -errno.
 */
static int
prof_debug_section(const char *path, const char *name, uint64_t max,
    void **data, uint64_t *size)
{
    int          rc;
    size_t       n;
    prof_elf_t   elf;
    Elf64_Shdr  *sh, *s;

    *data = NULL;
    *size = 0;

    rc = prof_elf_open(&elf, path);
    if (rc != 0) {
        return rc;
    }

    rc = prof_elf_sections(&elf, &sh, &n);
    if (rc != 0) {
        prof_elf_close(&elf);
        return rc;
    }

    s = prof_elf_section_named(&elf, sh, n, name, &rc);

    if (s == NULL) {
        rc = (rc != 0) ? rc : -ENOENT;

    } else if (s->sh_type == SHT_NOBITS || s->sh_size == 0) {
        rc = -ENOENT;

    } else if (s->sh_size > max) {
        rc = -EFBIG;

    } else {
        rc = prof_elf_read_alloc(&elf, s->sh_offset, s->sh_size, data);
        *size = s->sh_size;
    }

    free(sh);
    prof_elf_close(&elf);

    return rc;
}


/* The CRC-32 of a file (zlib's, as .gnu_debuglink's): 0 or -errno. */
static int
prof_debug_crc(const char *path, uint32_t *crc)
{
    int          fd, rc;
    char         buf[65536];
    uLong        c;
    ssize_t      n;
    struct stat  st;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd == -1) {
        return -errno;
    }

    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)
        || (uint64_t) st.st_size > PROF_DEBUGLINK_FILE_MAX)
    {
        close(fd);
        return -ENOENT;
    }

    c = crc32(0L, Z_NULL, 0);
    rc = 0;

    for ( ;; ) {
        n = read(fd, buf, sizeof(buf));

        if (n == 0) {
            break;
        }

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            rc = -errno;
            break;
        }

        c = crc32(c, (const Bytef *) buf, (uInt) n);
    }

    close(fd);
    *crc = (uint32_t) c;

    return rc;
}


int
prof_debuglink_find(const char *object, const char *root, char *path,
    size_t size)
{
    int        rc, n;
    char       dir[PATH_MAX], *slash, *link;
    size_t     i, len;
    uint32_t   want, crc;
    uint64_t   link_size;
    struct {
        const char  *prefix;
        const char  *sub;
    } where[3];

    rc = prof_debug_section(object, ".gnu_debuglink", PROF_DEBUGLINK_MAX,
                            (void **) &link, &link_size);
    if (rc != 0) {
        return rc;
    }

    /* A file name (no directory), its NUL byte, padding to 4, the CRC. */

    len = strnlen(link, link_size);
    i = (len + 4) & ~(size_t) 3;

    if (len == 0 || len == link_size || i + 4 > link_size
        || memchr(link, '/', len) != NULL || strcmp(link, ".") == 0
        || strcmp(link, "..") == 0)
    {
        free(link);
        return -ENOEXEC;
    }

    memcpy(&want, link + i, 4);

    /* The object's directory: where gdb looks first, then under root. */

    n = snprintf(dir, sizeof(dir), "%s", object);
    slash = strrchr(dir, '/');

    if (n <= 0 || (size_t) n >= sizeof(dir) || slash == NULL) {
        free(link);
        return -ENOENT;
    }

    *slash = '\0';

    where[0].prefix = "";
    where[0].sub = "/";
    where[1].prefix = "";
    where[1].sub = "/.debug/";
    where[2].prefix = root;
    where[2].sub = "/";

    rc = -ENOENT;

    for (i = 0; i < 3 && rc != 0; i++) {
        if (where[i].prefix == NULL) {
            continue;
        }

        n = snprintf(path, size, "%s%s%s%s", where[i].prefix, dir,
                     where[i].sub, link);

        if (n <= 0 || (size_t) n >= size || strcmp(path, object) == 0) {
            continue;
        }

        if (prof_debug_crc(path, &crc) == 0 && crc == want) {
            rc = 0;
        }
    }

    free(link);

    return rc;
}


/*
 * Decompresses an xz stream of size bytes into a new buffer of at most
 * PROF_MINIDEBUG_MAX bytes: 0, -EFBIG past it, -ENOEXEC when the stream
 * is malformed or truncated, -ENOMEM.
 */
static int
prof_debug_unxz(const uint8_t *in, uint64_t size, uint8_t **out,
    size_t *out_size)
{
    int          rc;
    size_t       cap;
    uint8_t     *buf, *bigger;
    lzma_ret     ret;
    lzma_stream  strm = LZMA_STREAM_INIT;

    *out = NULL;
    *out_size = 0;

    if (lzma_stream_decoder(&strm, PROF_MINIDEBUG_MEMLIMIT, 0) != LZMA_OK) {
        return -ENOMEM;
    }

    cap = 0;
    buf = NULL;
    strm.next_in = in;
    strm.avail_in = size;

    for ( ;; ) {
        if (strm.avail_out == 0) {
            if (cap == PROF_MINIDEBUG_MAX) {
                rc = -EFBIG;
                break;
            }

            cap = (cap == 0) ? 4 * size + 65536 : 2 * cap;
            cap = (cap > PROF_MINIDEBUG_MAX) ? PROF_MINIDEBUG_MAX : cap;

            bigger = realloc(buf, cap);
            if (bigger == NULL) {
                rc = -ENOMEM;
                break;
            }

            buf = bigger;
            strm.next_out = buf + strm.total_out;
            strm.avail_out = cap - strm.total_out;
        }

        ret = lzma_code(&strm, LZMA_FINISH);

        if (ret == LZMA_STREAM_END) {
            rc = 0;
            break;
        }

        if (ret != LZMA_OK || (strm.avail_in == 0 && strm.avail_out != 0)) {
            rc = (ret == LZMA_MEM_ERROR || ret == LZMA_MEMLIMIT_ERROR)
                 ? -ENOMEM : -ENOEXEC;
            break;
        }
    }

    if (rc == 0) {
        *out = buf;
        *out_size = strm.total_out;

    } else {
        free(buf);
    }

    lzma_end(&strm);

    return rc;
}


int
prof_minidebuginfo_open(const char *object, int *fd)
{
    int        rc, out;
    void      *xz;
    size_t     size;
    uint8_t   *elf;
    uint64_t   xz_size;

    *fd = -1;

    rc = prof_debug_section(object, ".gnu_debugdata", PROF_DEBUGDATA_MAX,
                            &xz, &xz_size);
    if (rc != 0) {
        return rc;
    }

    rc = prof_debug_unxz(xz, xz_size, &elf, &size);
    free(xz);

    if (rc != 0) {
        return rc;
    }

    out = memfd_create("minidebuginfo", MFD_CLOEXEC);

    if (out == -1) {
        rc = -errno;

    } else if ((rc = prof_write_all(out, elf, size)) != 0) {
        close(out);

    } else {
        *fd = out;
    }

    free(elf);

    return rc;
}


int
prof_minidebuginfo_present(const char *object)
{
    int          fd, rc;
    size_t       n;
    char         path[32];
    prof_elf_t   elf;
    Elf64_Shdr  *sh;

    if (prof_minidebuginfo_open(object, &fd) != 0) {
        return 0;
    }

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rc = prof_elf_open(&elf, path);
    close(fd);

    if (rc != 0) {
        return 0;
    }

    rc = prof_elf_sections(&elf, &sh, &n);
    prof_elf_close(&elf);

    if (rc != 0) {
        return 0;
    }

    for (rc = 0; n > 0 && !rc; n--) {
        rc = (sh[n - 1].sh_type == SHT_SYMTAB && sh[n - 1].sh_size > 0);
    }

    free(sh);

    return rc;
}
