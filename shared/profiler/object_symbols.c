/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Where an object's function names come from: its .symtab, else its
 * debug file (by build id, or .gnu_debuglink), else its MiniDebugInfo
 * with .dynsym, else .dynsym; loaded the first time a pc of it is named.
 */

#define _GNU_SOURCE

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "profiler/debug_info.h"
#include "profiler/dwarf_inlines.h"
#include "profiler/elf_file.h"
#include "profiler/object_cache.h"
#include "profiler/object_symbols.h"
#include "profiler/symbol_table.h"
#include "profiler/symbolizer_internal.h"


/*
 * The global directory of .gnu_debuglink lookups: the parent of the
 * build-id directory when it is ".../.build-id" (/usr/lib/debug), else
 * none. 0, or -ENOENT.
 */
static int
prof_sym_debug_root(const char *debug_dir, char *root, size_t size)
{
    size_t  len, suffix;

    suffix = sizeof("/.build-id") - 1;
    len = (debug_dir != NULL) ? strlen(debug_dir) : 0;

    if (len <= suffix || len - suffix >= size
        || strcmp(debug_dir + len - suffix, "/.build-id") != 0)
    {
        return -ENOENT;
    }

    memcpy(root, debug_dir, len - suffix);
    root[len - suffix] = '\0';

    return 0;
}


/* The debug file of an object by its build id: 0 (path written) or -1. */
static int
prof_sym_build_id_path(const char *debug_dir, prof_sym_object_t *o,
    char *path, size_t size)
{
    int          n;
    const char  *id;

    id = o->obj.build_id;

    if (debug_dir == NULL || strlen(id) <= 2) {
        return -1;
    }

    n = snprintf(path, size, "%s/%.2s/%s.debug", debug_dir, id, id + 2);

    return (n > 0 && (size_t) n < size) ? 0 : -1;
}


/*
 * The symbols of an object, from the first of: its .symtab, the .symtab
 * of its debug file by build id, of the debug file its .gnu_debuglink
 * names (debug_dir NULL: no other file is read), its MiniDebugInfo (in
 * the object itself) with its .dynsym, its .dynsym. A malformed object
 * file has none. Records where they came from.
 */

void
prof_sym_object_load(const char *debug_dir, prof_sym_object_t *o)
{
    int   rc;
    char  path[PATH_MAX], root[PATH_MAX];

    o->loaded = 1;
    o->names = PROF_SYMBOLS_NONE;

    if (o->obj.corrupt) {
        return;
    }

    rc = prof_symbol_table_read(&o->table, prof_sym_image(o), SHT_SYMTAB);
    if (rc == 0 || rc == -ENOEXEC) {
        o->obj.corrupt = (rc == -ENOEXEC);
        o->names = (rc == 0) ? PROF_SYMBOLS_SYMTAB : PROF_SYMBOLS_NONE;

        if (rc == 0 && o->image[0] == '\0') {
            o->names_path = strdup(o->obj.path);
        }

        return;
    }

    o->names = PROF_SYMBOLS_DEBUG_FILE;

    if (prof_sym_build_id_path(debug_dir, o, path, sizeof(path)) == 0
        && prof_symbol_table_read(&o->table, path, SHT_SYMTAB) == 0)
    {
        o->names_path = strdup(path);
        return;
    }

    if (debug_dir != NULL && o->image[0] == '\0'
        && prof_debuglink_find(o->obj.path,
                               prof_sym_debug_root(debug_dir, root,
                                                   sizeof(root)) == 0
                               ? root : NULL,
                               path, sizeof(path)) == 0
        && prof_symbol_table_read(&o->table, path, SHT_SYMTAB) == 0)
    {
        o->names_path = strdup(path);
        return;
    }

    o->names = PROF_SYMBOLS_MINIDEBUGINFO;

    rc = prof_symbol_table_read_minidebuginfo(&o->table,
                                              prof_sym_image(o));
    if (rc == 0 || rc == -ENOEXEC) {
        o->obj.corrupt = (rc == -ENOEXEC);
        o->names = (rc == 0) ? o->names : PROF_SYMBOLS_NONE;
        return;
    }

    rc = prof_symbol_table_read(&o->table, prof_sym_image(o), SHT_DYNSYM);
    o->obj.corrupt = (rc == -ENOEXEC);
    o->names = (rc == 0) ? PROF_SYMBOLS_DYNSYM : PROF_SYMBOLS_NONE;
}


void
prof_sym_object_share(prof_symbol_store_t *store, prof_sym_object_t *o)
{
    int          fd;
    uint32_t     kind;
    const char  *path;

    if (store == NULL || o->table.syms == NULL || o->image[0] != '\0') {
        return;
    }

    path = o->obj.path;

    switch (o->names) {
    case PROF_SYMBOLS_SYMTAB:
        kind = PROF_STORE_SYMTAB;
        break;
    case PROF_SYMBOLS_DEBUG_FILE:
        kind = PROF_STORE_SYMTAB;
        path = o->names_path;
        break;
    case PROF_SYMBOLS_MINIDEBUGINFO:
        kind = PROF_STORE_MINIDEBUGINFO;
        break;
    case PROF_SYMBOLS_DYNSYM:
        kind = PROF_STORE_DYNSYM;
        break;
    default:
        return;
    }

    if (path == NULL) {
        return;
    }

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }

    /* Past the store's bounds, or a failure: its own stay. */
    (void) prof_symbol_table_share(&o->table, store, fd, kind);
    (void) close(fd);
}

int
prof_symbolizer_symbols_loaded(prof_symbolizer_t *sym, size_t i)
{
    if (i >= sym->nactive || !sym->active[i]->loaded) {
        return -1;
    }

    return (int) sym->active[i]->names;
}


/* In the order prof_sym_object_load() looks. */
prof_symbols_e
prof_symbolizer_symbols(prof_symbolizer_t *sym, size_t i)
{
    char                path[PATH_MAX], root[PATH_MAX];
    prof_sym_object_t  *o;

    if (i >= sym->nactive || sym->active[i]->obj.corrupt) {
        return PROF_SYMBOLS_NONE;
    }

    o = sym->active[i];

    if (o->loaded) {
        return o->names;
    }

    if (prof_elf_has_section(prof_sym_image(o), SHT_SYMTAB) == 1) {
        return PROF_SYMBOLS_SYMTAB;
    }

    if (prof_sym_build_id_path(sym->debug_dir, o, path, sizeof(path)) == 0
        && prof_elf_has_section(path, SHT_SYMTAB) == 1)
    {
        return PROF_SYMBOLS_DEBUG_FILE;
    }

    if (o->image[0] == '\0'
        && prof_debuglink_find(o->obj.path,
                               prof_sym_debug_root(sym->debug_dir, root,
                                                   sizeof(root)) == 0
                               ? root : NULL,
                               path, sizeof(path)) == 0
        && prof_elf_has_section(path, SHT_SYMTAB) == 1)
    {
        return PROF_SYMBOLS_DEBUG_FILE;
    }

    if (prof_minidebuginfo_present(prof_sym_image(o))) {
        return PROF_SYMBOLS_MINIDEBUGINFO;
    }

    if (prof_elf_has_section(prof_sym_image(o), SHT_DYNSYM) == 1) {
        return PROF_SYMBOLS_DYNSYM;
    }

    return PROF_SYMBOLS_NONE;
}


int
prof_symbolizer_parse_file_for_test(const char *path, size_t *functions)
{
    int                 rc;
    size_t              i;
    prof_elf_t          elf;
    const char         *name;
    prof_sym_object_t   o;

    *functions = 0;

    rc = prof_elf_open(&elf, path);
    if (rc != 0) {
        return rc;
    }

    close(elf.fd);

    memset(&o, 0, sizeof(o));
    o.obj.path = path;
    o.obj.end = UINT64_MAX;
    o.obj.build_id = o.build_id;
    o.image_fd = -1;
    o.names_fd = -1;
    o.dwarf_fd = -1;

    prof_sym_object_inspect(&o);
    prof_sym_object_load(NULL, &o);

    rc = o.obj.corrupt ? -ENOEXEC : 0;

    if (o.obj.corrupt && o.table.nsyms != 0) {
        rc = -EFAULT;
    }

    if (strlen(o.build_id) % 2 != 0) {
        rc = -EFAULT;
    }

    /* every function is found at its address, under its own name */

    for (i = 0; i < o.table.nsyms && rc == 0; i++) {
        name = prof_symbol_table_lookup(&o.table, o.table.syms[i].addr);

        if (name != o.table.syms[i].name) {
            rc = -EFAULT;
        }
    }

    if (rc == 0) {
        *functions = o.table.nsyms;
    }

    prof_symbol_table_free(&o.table);
    prof_sym_dwarf_forget(&o);

    return rc;
}
