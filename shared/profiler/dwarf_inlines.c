/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The functions inlined at a pc and the lines running in them, from the
 * DWARF (libdw) of the file an object's names came from, opened the first
 * time it is asked.
 */

#define _GNU_SOURCE

#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "profiler/dwarf_inlines.h"
#include "profiler/elf_file.h"
#include "profiler/inline_table.h"
#include "profiler/object_cache.h"
#include "profiler/symbol_store.h"
#include "profiler/symbolizer_internal.h"


/* Bytes of DWARF sections (decompressed) read for inlined functions. */
#define PROF_SYM_DWARF_MAX      (256ULL << 20)

/* When another process builds the store's image past the wait. */
#define PROF_SYM_DWARF_RETRY_NS (10 * 1000 * 1000 * 1000LL)


/*
 * The bytes libdw holds once it opened a file: every .debug_* section,
 * decompressed (it decompresses them all at once). UINT64_MAX when the
 * section names cannot be read.
 */
static uint64_t
prof_sym_dwarf_bytes(prof_elf_t *elf, Elf64_Shdr *sh, size_t n)
{
    char        *names, *name;
    size_t       i;
    uint64_t     total;
    Elf64_Chdr   chdr;
    Elf64_Shdr  *strs;

    if (elf->ehdr.e_shstrndx >= n) {
        return UINT64_MAX;
    }

    strs = &sh[elf->ehdr.e_shstrndx];
    if (strs->sh_size > PROF_ELF_NAMES_MAX
        || prof_elf_read_alloc(elf, strs->sh_offset, strs->sh_size,
                               (void **) &names) != 0)
    {
        return UINT64_MAX;
    }

    total = 0;

    for (i = 0; i < n; i++) {
        if (sh[i].sh_name >= strs->sh_size || sh[i].sh_type == SHT_NOBITS) {
            continue;
        }

        name = names + sh[i].sh_name;

        if (strncmp(name, ".debug_", 7) != 0) {
            continue;
        }

        if (!(sh[i].sh_flags & SHF_COMPRESSED)) {
            total += sh[i].sh_size;

        } else if (prof_elf_read(elf, sh[i].sh_offset, &chdr, sizeof(chdr))
                   == 0)
        {
            total += (chdr.ch_size < PROF_SYM_DWARF_MAX) ? chdr.ch_size
                                                         : PROF_SYM_DWARF_MAX;
        } else {
            total = UINT64_MAX;
            break;
        }
    }

    free(names);

    return total;
}


void
prof_symbolizer_set_store(prof_symbolizer_t *sym, prof_symbol_store_t *store)
{
    sym->store = store;
}


/*
 * The inline table of the file open at fd from the instance's symbol
 * store (inline_table.h): built from its DWARF by whichever profiler
 * process asked first, mapped here; no libdw table is held.
 */
static int
prof_sym_inline_table(prof_symbolizer_t *sym, prof_sym_object_t *o, int fd)
{
    int                        err;
    void                      *image;
    size_t                     len;
    prof_symbol_store_stats_t  before, after;

    prof_symbol_store_stats(sym->store, &before);

    image = prof_symbol_store_get(sym->store, fd, PROF_STORE_INLINES,
                                  prof_inline_table_build, NULL, &len, &err);

#ifdef __GLIBC__
    /*
     * Built here: libdw's reading of the whole DWARF (megabytes for
     * libc's) was freed; its pages go back to the system, once a table.
     */
    prof_symbol_store_stats(sym->store, &after);
    if (after.built != before.built) {
        (void) malloc_trim(0);
    }
#else
    (void) after;
#endif

    if (image == NULL) {
        return err;
    }

    if (!prof_inline_table_valid(image, len)) {
        prof_symbol_store_unmap(sym->store, image, len);
        return -ENOEXEC;
    }

    o->inline_table = image;
    o->inline_table_len = len;
    o->inline_store = sym->store;

    return 0;
}


/* What o's DWARF holds, let go. */
static void
prof_sym_dwarf_end(prof_sym_object_t *o)
{
    if (o->dwarf != NULL) {
        dwarf_end(o->dwarf);
        o->dwarf = NULL;
    }

    if (o->inline_table != NULL) {
        prof_symbol_store_unmap(o->inline_store, (void *) o->inline_table,
                                o->inline_table_len);
        o->inline_table = NULL;
    }
}


/*
 * The DWARF of the file o's names came from, opened the first time it is
 * asked for: its inline table from the store, or libdw's reading of it
 * (without a store, or past its bounds). -1 when that file has none (or
 * too much of it), or when the names came from no such file.
 */
static int
prof_sym_dwarf(prof_symbolizer_t *sym, prof_sym_object_t *o)
{
    int          fd, rc;
    char         path[32];
    size_t       n;
    prof_elf_t   elf;
    Elf64_Shdr  *sh, *info;

    if (o->dwarf_tried) {
        return (o->inline_table != NULL || o->dwarf != NULL) ? 0 : -1;
    }

    /* Another process was building its table: asked again later. */
    if (o->dwarf_retry_ns != 0
        && prof_clock_ns(CLOCK_MONOTONIC) < o->dwarf_retry_ns)
    {
        return -1;
    }

    o->dwarf_tried = 1;

    if (o->names_fd >= 0) {
        fd = fcntl(o->names_fd, F_DUPFD_CLOEXEC, 0);

    } else if (o->names_path != NULL) {
        fd = open(o->names_path, O_RDONLY | O_CLOEXEC);

    } else {
        return -1;
    }

    if (fd < 0) {
        return -1;
    }

    /* Bounded: an object whose .debug_info is larger is not read. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rc = -ENOENT;

    if (prof_elf_open(&elf, path) == 0) {
        if (prof_elf_sections(&elf, &sh, &n) == 0) {
            info = prof_elf_section_named(&elf, sh, n, ".debug_info", &rc);
            rc = (info == NULL || info->sh_type == SHT_NOBITS
                  || prof_sym_dwarf_bytes(&elf, sh, n) > PROF_SYM_DWARF_MAX)
                 ? -ENOENT : 0;
            free(sh);
        }

        prof_elf_close(&elf);
    }

    /*
     * From the store; while another process is still building the table
     * (a niced process on a busy machine), none for now rather than a
     * copy of its own.
     */
    if (rc == 0 && sym->store != NULL) {
        rc = prof_sym_inline_table(sym, o, fd);

        if (rc == -ETIMEDOUT) {
            o->dwarf_tried = 0;
            o->dwarf_retry_ns = prof_clock_ns(CLOCK_MONOTONIC)
                                + PROF_SYM_DWARF_RETRY_NS;
        }

        if (rc == 0 || rc == -ETIMEDOUT || rc == -ENOENT) {
            close(fd);
            return rc;
        }

        rc = 0;
    }

    /* Without a store, or past its bounds: its own. */
    if (rc == 0) {
        o->dwarf = dwarf_begin(fd, DWARF_C_READ);
    }

    if (o->dwarf == NULL) {
        close(fd);
        return -1;
    }

    o->dwarf_fd = fd;

    if (o->names_fd >= 0) {
        close(o->names_fd);
        o->names_fd = -1;
    }

    return 0;
}


/* An attribute of a DIE as a number, following its abstract origin. */
static uint32_t
prof_sym_die_udata(Dwarf_Die *die, unsigned name)
{
    Dwarf_Word        v;
    Dwarf_Attribute   attr;

    if (dwarf_attr_integrate(die, name, &attr) == NULL
        || dwarf_formudata(&attr, &v) != 0 || v > UINT32_MAX)
    {
        return 0;
    }

    return (uint32_t) v;
}


size_t
prof_symbolizer_inlines(prof_symbolizer_t *sym, const prof_object_t *object,
    uint64_t pc, prof_inline_t *frames, size_t max, uint32_t *line)
{
    int                 i, nscopes;
    int                 lineno;
    size_t              n;
    uint64_t            vaddr;
    Dwarf              *dwarf;
    Dwarf_Die           cudie, die, *inner, *scopes;
    Dwarf_Line         *l;
    Dwarf_Attribute     attr;
    prof_sym_object_t  *o;
    const char         *name;

    o = (prof_sym_object_t *) object;
    *line = 0;

    if (!o->loaded || prof_sym_dwarf(sym, o) != 0) {
        return 0;
    }

    o->dwarf_used = 1;
    sym->stats.dwarf_lookups++;

    vaddr = pc - o->obj.load_bias;

    if (o->inline_table != NULL) {
        return prof_inline_table_lookup(o->inline_table, vaddr, frames, max,
                                        line);
    }

    dwarf = o->dwarf;

    if (dwarf_addrdie(dwarf, vaddr, &cudie) == NULL) {
        return 0;
    }

    l = dwarf_getsrc_die(&cudie, vaddr);
    if (l != NULL && dwarf_lineno(l, &lineno) == 0 && lineno > 0) {
        *line = (uint32_t) lineno;
    }

    /*
     * dwarf_getscopes() finds the innermost scope of pc, but past an
     * inlined function it gives that function's abstract parents: the
     * chain that contains pc is that of the innermost DIE, asked again
     * (as elfutils' addr2line does).
     */
    nscopes = dwarf_getscopes(&cudie, vaddr, &scopes);
    if (nscopes <= 0) {
        *line = (nscopes < 0) ? 0 : *line;
        return 0;
    }

    inner = dwarf_offdie(dwarf, dwarf_dieoffset(&scopes[0]), &die);
    free(scopes);

    nscopes = (inner != NULL) ? dwarf_getscopes_die(inner, &scopes) : -1;
    if (nscopes <= 0) {
        *line = 0;
        return 0;
    }

    /*
     * Innermost first: each inlined function with the line running in
     * it; the line of the function around them is the call site of the
     * outermost.
     */
    n = 0;

    for (i = 0; i < nscopes; i++) {
        if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) {
            break;
        }

        if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) {
            continue;
        }

        /* The symbol's name (mangled, as .symtab has it), else the
           source's. */
        name = NULL;

        if (dwarf_attr_integrate(&scopes[i], DW_AT_linkage_name, &attr)
            != NULL)
        {
            name = dwarf_formstring(&attr);
        }

        if (name == NULL
            && dwarf_attr_integrate(&scopes[i], DW_AT_name, &attr) != NULL)
        {
            name = dwarf_formstring(&attr);
        }

        if (n == max || name == NULL) {
            /* A chain cut short would name a wrong caller: none. */
            n = 0;
            *line = 0;
            break;
        }

        frames[n].function = name;
        frames[n].line = *line;
        n++;

        *line = prof_sym_die_udata(&scopes[i], DW_AT_call_line);
    }

    free(scopes);

    return n;
}


unsigned
prof_symbolizer_release_dwarf(prof_symbolizer_t *sym)
{
    size_t              i;
    unsigned            released;
    prof_sym_object_t  *o;

    released = 0;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        /* An inline table is the store's pages: it stays mapped. */
        if (o->dwarf == NULL) {
            continue;
        }

        if (o->dwarf_used) {
            o->dwarf_used = 0;
            continue;
        }

        prof_sym_dwarf_end(o);
        o->dwarf_tried = 0;

        /* Its file stays open, as it was before it was read. */
        if (o->names_fd < 0) {
            o->names_fd = o->dwarf_fd;

        } else {
            close(o->dwarf_fd);
        }

        o->dwarf_fd = -1;
        released++;
    }

    return released;
}


/* The file its names came from is no longer: nor is its DWARF. */
void
prof_sym_dwarf_forget(prof_sym_object_t *o)
{
    prof_sym_dwarf_end(o);

    if (o->dwarf_fd >= 0) {
        close(o->dwarf_fd);
        o->dwarf_fd = -1;
    }

    if (o->names_fd >= 0) {
        close(o->names_fd);
        o->names_fd = -1;
    }

    free(o->names_path);
    o->names_path = NULL;
    o->dwarf_tried = 0;
}
