/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Symbolizer: finds the ELF object (path, build id, load bias) mapping a pc
 * of a process (this one, or the worker of a profiler process) from its
 * maps, and the function containing it.
 * Threading, memory and when the maps are read: see symbolizer.h.
 */

#define _GNU_SOURCE

#include <elf.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "profiler/debug_info.h"
#include "profiler/debuginfod.h"
#include "profiler/elf_file.h"
#include "profiler/symbolizer.h"


#define PROF_SYM_DEBUG_DIR      "/usr/lib/debug/.build-id"
#define PROF_SYM_DELETED        " (deleted)"
#define PROF_SYM_NOTES_MAX      (1 << 20)   /* bytes of one PT_NOTE */
#define PROF_SYM_TABLE_MAX      (512 << 20) /* bytes of a symbol table or of
                                               its string table */
#define PROF_SYM_DWARF_MAX      (256ULL << 20)  /* bytes of DWARF sections
                                               (decompressed) read for
                                               inlined functions */

/*
 * Reads of the maps for pcs in no object while the loader's set of objects
 * is unchanged: at most a burst at once, one an interval on average.
 */
#define PROF_SYM_REREAD_INTERVAL_NS  1000000000LL
#define PROF_SYM_REREAD_BURST        4


typedef struct {
    uint64_t             addr;              /* ELF virtual address */
    uint64_t             size;
    const char          *name;              /* in the object's strtab */
    unsigned             rank;              /* lower is preferred */
} prof_sym_t;


typedef struct {
    prof_object_t        obj;               /* what callers see */
    char                 build_id[2 * PROF_ELF_BUILD_ID_MAX + 1];
    uint64_t             inode;             /* of the file, from the maps */
    unsigned             mapped:1;          /* in the last maps read */
    unsigned             seen:1;            /* in the maps read under way */
    unsigned             loaded:1;          /* symbols were looked for */
    unsigned             corrupt_reported:1;
    unsigned             asked:1;           /* of debuginfod, not taken */
    unsigned             unnamed:1;         /* a pc of it in no function */
    unsigned             renamed:1;         /* by the last take_fetched */
    unsigned             fetched:1;         /* debuginfod's file taken */
    unsigned             fetched_reported:1;
    prof_symbols_e       names;             /* where they came from, once
                                               loaded */
    prof_sym_t          *syms;              /* sorted by addr, no dups */
    size_t               nsyms;
    char                *strtab;
    char                *strtab_extra;      /* MiniDebugInfo's, beside
                                               .dynsym's */
    char                 image[32];         /* where to read the ELF when
                                               not at obj.path: the vdso */
    int                  image_fd;
    char                *names_path;        /* the file its names came
                                               from, when its DWARF may
                                               tell inlined functions */
    int                  names_fd;          /* or that file open: -1 */
    Dwarf               *dwarf;             /* of that file, once asked */
    int                  dwarf_fd;
    unsigned             dwarf_tried:1;
} prof_sym_object_t;


struct prof_symbolizer_s {
    prof_sym_object_t  **objects;           /* held: mapped, and unmapped
                                               until collected */
    size_t               nobjects;
    prof_sym_object_t  **active;            /* mapped ones, by start */
    size_t               nactive;
    char                *debug_dir;
    prof_debuginfod_t   *debuginfod;        /* NULL: none */
    int64_t              fetch_wait_ms;
    unsigned             next_id;
    unsigned             maps_tried:1;      /* a read was attempted */
    char                 maps_path[64];     /* /proc/self/maps, or the
                                               worker's */
    int                  frozen;            /* maps never read again */
    unsigned long long   loader_generation; /* loads + unloads at the last
                                               attempt to read the maps */
    int64_t              reread_due_ns;     /* rate of rereads for unknown
                                               pcs (GCRA) */
    prof_symbolizer_stats_t  stats;
};


/* Load bias from the PT_LOAD segment holding the mapping's file offset. */

static void
prof_elf_load_bias(prof_elf_t *elf, Elf64_Phdr *ph, prof_object_t *obj)
{
    uint64_t     page, base, off;
    Elf64_Phdr  *best;
    unsigned     i;

    page = (uint64_t) sysconf(_SC_PAGESIZE);
    off = obj->file_offset;
    best = NULL;

    for (i = 0; i < elf->ehdr.e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD || ph[i].p_offset > elf->size
            || ph[i].p_filesz > elf->size)
        {
            continue;
        }

        base = ph[i].p_offset - ph[i].p_offset % page;

        if (off < base || off >= ph[i].p_offset + ph[i].p_filesz) {
            continue;
        }

        if (best == NULL || ((ph[i].p_flags & PF_X) && !(best->p_flags & PF_X)))
        {
            best = &ph[i];
        }
    }

    if (best) {
        obj->load_bias = obj->start - off + best->p_offset - best->p_vaddr;
    }
}


/* The file to read an object's ELF data from. */
static const char *
prof_sym_image(prof_sym_object_t *o)
{
    return o->image[0] != '\0' ? o->image : o->obj.path;
}


/*
 * The vdso has no file, but its image in memory is a whole ELF object
 * (with a build id and .dynsym): copy it to a memory file to read it.
 */
static int
prof_sym_vdso_image(prof_sym_object_t *o)
{
    int      fd;
    size_t   size;
    ssize_t  n;

    size = o->obj.end - o->obj.start;

    fd = memfd_create("vdso", MFD_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }

    n = write(fd, (const void *) (uintptr_t) o->obj.start, size);
    if (n != (ssize_t) size) {
        close(fd);
        return -EIO;
    }

    o->image_fd = fd;
    snprintf(o->image, sizeof(o->image), "/proc/self/fd/%d", fd);

    return 0;
}


/*
 * Best effort: the load bias and build id of a new object. A malformed
 * file marks it corrupt.
 */

static void
prof_sym_object_inspect(prof_sym_object_t *o)
{
    int          rc;
    unsigned     i;
    uint64_t     align;
    prof_elf_t   elf;
    Elf64_Phdr  *ph;
    void        *notes;

    rc = prof_elf_open(&elf, prof_sym_image(o));
    if (rc != 0) {
        o->obj.corrupt = (rc == -ENOEXEC);
        return;
    }

    rc = prof_elf_read_alloc(&elf, elf.ehdr.e_phoff,
                             (uint64_t) elf.ehdr.e_phnum * sizeof(Elf64_Phdr),
                             (void **) &ph);
    if (rc != 0) {
        goto done;
    }

    prof_elf_load_bias(&elf, ph, &o->obj);

    for (i = 0; i < elf.ehdr.e_phnum && o->build_id[0] == '\0'; i++) {
        if (ph[i].p_type != PT_NOTE || ph[i].p_filesz > PROF_SYM_NOTES_MAX) {
            continue;
        }

        rc = prof_elf_read_alloc(&elf, ph[i].p_offset, ph[i].p_filesz,
                                 &notes);
        if (rc != 0) {
            break;
        }

        align = ph[i].p_align == 8 ? 8 : 4;
        rc = prof_elf_build_id(notes, ph[i].p_filesz, align, o->build_id);
        free(notes);

        if (rc == -ENOEXEC) {
            break;
        }
    }

    free(ph);

done:

    o->obj.corrupt = (rc == -ENOEXEC);
    close(elf.fd);
}


static int
prof_sym_cmp(const void *a, const void *b)
{
    const prof_sym_t  *x = a, *y = b;

    if (x->addr != y->addr) {
        return x->addr < y->addr ? -1 : 1;
    }

    if (x->rank != y->rank) {
        return x->rank < y->rank ? -1 : 1;
    }

    return 0;
}


/* Prefers non-local names, then fewer leading underscores: getpid. */

static unsigned
prof_sym_rank(const Elf64_Sym *s, const char *name)
{
    unsigned  rank;

    rank = ELF64_ST_BIND(s->st_info) == STB_LOCAL ? 16 : 0;

    while (*name++ == '_' && rank % 16 < 15) {
        rank++;
    }

    return rank;
}


static int
prof_sym_is_function(const Elf64_Sym *s)
{
    unsigned  type;

    type = ELF64_ST_TYPE(s->st_info);

    return (type == STT_FUNC || type == STT_GNU_IFUNC)
           && s->st_size != 0 && s->st_shndx != SHN_UNDEF
           && s->st_name != 0;
}


/*
 * Keeps the functions of an ELF symbol table, sorted and deduplicated:
 * 0, -ENOENT when there is none, -ENOEXEC when a name is not within the
 * string table (strsize bytes, and a NUL byte after them).
 */

static int
prof_sym_collect(prof_sym_object_t *o, Elf64_Sym *es, size_t n,
    char *strtab, uint64_t strsize)
{
    size_t       i, k, functions;
    prof_sym_t  *syms;

    for (i = 0, functions = 0; i < n; i++) {
        if (es[i].st_name >= strsize && es[i].st_name != 0) {
            return -ENOEXEC;
        }

        functions += prof_sym_is_function(&es[i]);
    }

    if (functions == 0) {
        return -ENOENT;
    }

    syms = malloc(functions * sizeof(prof_sym_t));
    if (syms == NULL) {
        return -ENOMEM;
    }

    for (i = 0, k = 0; i < n; i++) {
        if (!prof_sym_is_function(&es[i])) {
            continue;
        }

        syms[k].addr = es[i].st_value;
        syms[k].size = es[i].st_size;
        syms[k].name = strtab + es[i].st_name;
        syms[k].rank = prof_sym_rank(&es[i], syms[k].name);
        k++;
    }

    qsort(syms, k, sizeof(prof_sym_t), prof_sym_cmp);

    for (i = 1, n = 1; i < k; i++) {
        if (syms[i].addr != syms[n - 1].addr) {
            syms[n++] = syms[i];
        }
    }

    o->syms = syms;
    o->nsyms = n;
    o->strtab = strtab;

    return 0;
}


/*
 * Loads the functions of the first section of the given type in a file:
 * 0, -ENOENT when there are none, -ENOEXEC when the file is malformed,
 * -errno.
 */

static int
prof_sym_load_file(prof_sym_object_t *o, const char *path, uint32_t type)
{
    int          rc;
    size_t       i, shnum;
    prof_elf_t   elf;
    Elf64_Shdr  *sh, *tab, *str;
    Elf64_Sym   *es;
    char        *strtab;

    rc = prof_elf_open(&elf, path);
    if (rc != 0) {
        return rc;
    }

    es = NULL;
    strtab = NULL;

    rc = prof_elf_sections(&elf, &sh, &shnum);
    if (rc != 0) {
        goto done;
    }

    for (i = 0, tab = NULL; i < shnum && tab == NULL; i++) {
        tab = sh[i].sh_type == type ? &sh[i] : NULL;
    }

    if (tab == NULL) {
        rc = -ENOENT;
        goto done;
    }

    if (tab->sh_entsize != sizeof(Elf64_Sym)
        || tab->sh_size % sizeof(Elf64_Sym) != 0
        || tab->sh_link == 0 || tab->sh_link >= shnum
        || sh[tab->sh_link].sh_type != SHT_STRTAB)
    {
        rc = -ENOEXEC;
        goto done;
    }

    str = &sh[tab->sh_link];

    if (tab->sh_size > PROF_SYM_TABLE_MAX || str->sh_size > PROF_SYM_TABLE_MAX)
    {
        rc = -EFBIG;
        goto done;
    }

    rc = prof_elf_read_alloc(&elf, tab->sh_offset, tab->sh_size,
                             (void **) &es);
    if (rc != 0) {
        goto done;
    }

    rc = prof_elf_read_alloc(&elf, str->sh_offset, str->sh_size,
                             (void **) &strtab);
    if (rc != 0) {
        goto done;
    }

    rc = prof_sym_collect(o, es, tab->sh_size / sizeof(Elf64_Sym), strtab,
                          str->sh_size);

done:

    if (rc != 0) {
        free(strtab);
    }

    free(es);
    free(sh);
    close(elf.fd);

    return rc;
}


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
 * Adds MiniDebugInfo's functions (mini, loaded from its .symtab) to those
 * of .dynsym in o: 0 or -ENOMEM. mini's tables become o's.
 */
static int
prof_sym_merge(prof_sym_object_t *o, prof_sym_object_t *mini)
{
    size_t       i, n;
    prof_sym_t  *syms;

    syms = malloc((o->nsyms + mini->nsyms) * sizeof(prof_sym_t));
    if (syms == NULL) {
        return -ENOMEM;
    }

    if (o->nsyms) {
        memcpy(syms, o->syms, o->nsyms * sizeof(prof_sym_t));
    }

    memcpy(syms + o->nsyms, mini->syms, mini->nsyms * sizeof(prof_sym_t));
    n = o->nsyms + mini->nsyms;

    qsort(syms, n, sizeof(prof_sym_t), prof_sym_cmp);

    for (i = 1, o->nsyms = 1; i < n; i++) {
        if (syms[i].addr != syms[o->nsyms - 1].addr) {
            syms[o->nsyms++] = syms[i];
        }
    }

    free(o->syms);
    free(mini->syms);
    o->syms = syms;
    o->strtab_extra = mini->strtab;
    mini->syms = NULL;
    mini->strtab = NULL;

    return 0;
}


/*
 * .dynsym and MiniDebugInfo's .symtab together: 0, or -ENOENT when the
 * object has no MiniDebugInfo with functions (o is left as it was).
 */
static int
prof_sym_load_minidebuginfo(prof_sym_object_t *o)
{
    int                 fd, rc;
    char                path[32];
    prof_sym_object_t   mini;

    if (prof_minidebuginfo_open(prof_sym_image(o), &fd) != 0) {
        return -ENOENT;
    }

    memset(&mini, 0, sizeof(mini));
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

    rc = prof_sym_load_file(&mini, path, SHT_SYMTAB);
    close(fd);

    if (rc != 0) {
        return -ENOENT;
    }

    rc = prof_sym_load_file(o, prof_sym_image(o), SHT_DYNSYM);

    if (rc == 0 && prof_sym_merge(o, &mini) != 0) {
        /* No memory: .dynsym's, loaded already, alone. */
        free(mini.syms);
        free(mini.strtab);
        return 0;
    }

    if (rc == -ENOEXEC) {
        free(mini.syms);
        free(mini.strtab);
        return rc;
    }

    if (rc != 0) {
        /* No .dynsym: MiniDebugInfo's alone. */
        o->syms = mini.syms;
        o->nsyms = mini.nsyms;
        o->strtab = mini.strtab;
    }

    return 0;
}


/*
 * The symbols of an object, from the first of: its .symtab, the .symtab
 * of its debug file by build id, of the debug file its .gnu_debuglink
 * names (debug_dir NULL: no other file is read), its MiniDebugInfo (in
 * the object itself) with its .dynsym, its .dynsym. A malformed object
 * file has none. Records where they came from.
 */

static void
prof_sym_object_load(const char *debug_dir, prof_sym_object_t *o)
{
    int   rc;
    char  path[PATH_MAX], root[PATH_MAX];

    o->loaded = 1;
    o->names = PROF_SYMBOLS_NONE;

    if (o->obj.corrupt) {
        return;
    }

    rc = prof_sym_load_file(o, prof_sym_image(o), SHT_SYMTAB);
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
        && prof_sym_load_file(o, path, SHT_SYMTAB) == 0)
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
        && prof_sym_load_file(o, path, SHT_SYMTAB) == 0)
    {
        o->names_path = strdup(path);
        return;
    }

    o->names = PROF_SYMBOLS_MINIDEBUGINFO;

    rc = prof_sym_load_minidebuginfo(o);
    if (rc == 0 || rc == -ENOEXEC) {
        o->obj.corrupt = (rc == -ENOEXEC);
        o->names = (rc == 0) ? o->names : PROF_SYMBOLS_NONE;
        return;
    }

    rc = prof_sym_load_file(o, prof_sym_image(o), SHT_DYNSYM);
    o->obj.corrupt = (rc == -ENOEXEC);
    o->names = (rc == 0) ? PROF_SYMBOLS_DYNSYM : PROF_SYMBOLS_NONE;
}


static const char *
prof_sym_object_lookup(prof_sym_object_t *o, uint64_t vaddr)
{
    size_t       lo, hi, mid;
    prof_sym_t  *s;

    lo = 0;
    hi = o->nsyms;

    /* the first symbol with addr > vaddr */

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (o->syms[mid].addr <= vaddr) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    if (lo == 0) {
        return NULL;
    }

    s = &o->syms[lo - 1];

    return vaddr - s->addr < s->size ? s->name : NULL;
}


static prof_sym_object_t *
prof_sym_object_find(prof_symbolizer_t *sym, uint64_t pc)
{
    size_t              lo, hi, mid;
    prof_sym_object_t  *o;

    lo = 0;
    hi = sym->nactive;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        o = sym->active[mid];

        if (pc < o->obj.start) {
            hi = mid;

        } else if (pc >= o->obj.end) {
            lo = mid + 1;

        } else {
            return o;
        }
    }

    return NULL;
}


/* The file its names came from is no longer: nor is its DWARF. */
static void
prof_sym_dwarf_forget(prof_sym_object_t *o)
{
    if (o->dwarf != NULL) {
        dwarf_end(o->dwarf);
        o->dwarf = NULL;
    }

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


static void
prof_sym_object_free(prof_sym_object_t *o)
{
    free(o->syms);
    free(o->strtab);
    free(o->strtab_extra);
    free((char *) o->obj.path);

    if (o->image_fd >= 0) {
        close(o->image_fd);
    }

    prof_sym_dwarf_forget(o);

    free(o);
}


static prof_sym_object_t *
prof_sym_object_create(prof_symbolizer_t *sym, uint64_t start, uint64_t end,
    uint64_t off, uint64_t inode, const char *path, int file)
{
    prof_sym_object_t  *o, **objects;

    objects = realloc(sym->objects,
                      (sym->nobjects + 1) * sizeof(prof_sym_object_t *));
    if (objects == NULL) {
        return NULL;
    }

    sym->objects = objects;

    o = calloc(1, sizeof(prof_sym_object_t));
    if (o == NULL) {
        return NULL;
    }

    o->obj.path = strdup(path);
    if (o->obj.path == NULL) {
        free(o);
        return NULL;
    }

    o->obj.id = ++sym->next_id;
    o->obj.start = start;
    o->obj.end = end;
    o->obj.file_offset = off;
    o->obj.load_bias = start - off;
    o->obj.build_id = o->build_id;
    o->inode = inode;
    o->image_fd = -1;
    o->names_fd = -1;
    o->dwarf_fd = -1;

    if (!file && strcmp(path, "[vdso]") == 0
        && prof_sym_vdso_image(o) == 0)
    {
        file = 1;
    }

    if (file) {
        prof_sym_object_inspect(o);
        sym->stats.objects_corrupt += o->obj.corrupt;

    } else {
        o->loaded = 1;
    }

    sym->objects[sym->nobjects++] = o;

    return o;
}


/* Handles one line of the maps: 0 or -errno. */

static int
prof_sym_maps_line(prof_symbolizer_t *sym, char *line)
{
    int                 n, file;
    char                perms[5];
    size_t              i, len, del;
    uint64_t            start, end, off, inode;
    const char         *path;
    prof_sym_object_t  *o;

    n = 0;

    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %*s %" SCNu64
               " %n", &start, &end, perms, &off, &inode, &n) != 5 || n == 0)
    {
        return 0;
    }

    path = line + n;
    len = strcspn(path, "\n");
    line[n + len] = '\0';
    del = sizeof(PROF_SYM_DELETED) - 1;

    /*
     * Executable mappings of files and the vdso. Deleted files (upgraded
     * binaries) and the vdso are kept as objects without a file to read,
     * so that their pcs do not make lookups read the maps again.
     */

    if (perms[2] != 'x' || (path[0] != '/' && strcmp(path, "[vdso]") != 0)) {
        return 0;
    }

    file = path[0] == '/'
           && !(len >= del && strcmp(path + len - del, PROF_SYM_DELETED) == 0);

    /* the same mapping of the same file (unmapped ones may come back) */

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->obj.start == start && o->obj.end == end
            && o->obj.file_offset == off && o->inode == inode
            && strcmp(o->obj.path, path) == 0)
        {
            o->seen = 1;
            return 0;
        }
    }

    o = prof_sym_object_create(sym, start, end, off, inode, path, file);
    if (o == NULL) {
        return -ENOMEM;
    }

    o->seen = 1;

    return 0;
}


static int
prof_sym_start_cmp(const void *a, const void *b)
{
    const prof_sym_object_t  *x = *(prof_sym_object_t * const *) a;
    const prof_sym_object_t  *y = *(prof_sym_object_t * const *) b;

    if (x->obj.start != y->obj.start) {
        return x->obj.start < y->obj.start ? -1 : 1;
    }

    return 0;
}


/* Lists the mapped objects by start address for prof_sym_object_find(). */

static int
prof_sym_index(prof_symbolizer_t *sym)
{
    size_t               i;
    prof_sym_object_t  **active;

    active = realloc(sym->active,
                     (sym->nobjects ? sym->nobjects : 1) * sizeof(void *));
    if (active == NULL) {
        sym->nactive = 0;
        return -ENOMEM;
    }

    sym->active = active;
    sym->nactive = 0;

    for (i = 0; i < sym->nobjects; i++) {
        if (sym->objects[i]->mapped) {
            active[sym->nactive++] = sym->objects[i];
        }
    }

    qsort(active, sym->nactive, sizeof(void *), prof_sym_start_cmp);

    return 0;
}


/*
 * The loader's count of objects loaded plus unloaded: it changes with
 * every dlopen() and dlclose() that maps or unmaps an object. The callback
 * runs under the loader's lock: it does not allocate.
 */

static int
prof_sym_loader_count(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long  *generation = data;

    if (size >= offsetof(struct dl_phdr_info, dlpi_subs)
                + sizeof(info->dlpi_subs))
    {
        *generation = info->dlpi_adds + info->dlpi_subs;
    }

    return 1;
}


static unsigned long long
prof_sym_loader_generation(void)
{
    unsigned long long  generation = 0;

    (void) dl_iterate_phdr(prof_sym_loader_count, &generation);

    return generation;
}


/*
 * For a pc in no known object: whether to read the maps again. Always
 * when the loader's objects changed; else at most a burst, then one an
 * interval (a generic cell rate: reread_due_ns is when the next one would
 * be due at that rate).
 */

static int
prof_sym_should_reread(prof_symbolizer_t *sym)
{
    int64_t  now;

    if (!sym->maps_tried
        || prof_sym_loader_generation() != sym->loader_generation)
    {
        return 1;
    }

    now = prof_clock_ns(CLOCK_MONOTONIC);

    if (sym->reread_due_ns - now
        > (PROF_SYM_REREAD_BURST - 1) * PROF_SYM_REREAD_INTERVAL_NS)
    {
        return 0;
    }

    sym->reread_due_ns = (sym->reread_due_ns > now ? sym->reread_due_ns : now)
                         + PROF_SYM_REREAD_INTERVAL_NS;

    return 1;
}


prof_symbolizer_t *
prof_symbolizer_create(void)
{
    prof_symbolizer_t  *sym;

    sym = calloc(1, sizeof(prof_symbolizer_t));
    if (sym == NULL) {
        return NULL;
    }

    sym->debug_dir = strdup(PROF_SYM_DEBUG_DIR);
    if (sym->debug_dir == NULL) {
        free(sym);
        return NULL;
    }

    strcpy(sym->maps_path, "/proc/self/maps");

    return sym;
}


void
prof_symbolizer_freeze(prof_symbolizer_t *sym)
{
    __atomic_store_n(&sym->frozen, 1, __ATOMIC_RELEASE);
}


void
prof_symbolizer_set_pid(prof_symbolizer_t *sym, pid_t pid)
{
    snprintf(sym->maps_path, sizeof(sym->maps_path), "/proc/%d/maps",
             (int) pid);
}


void
prof_symbolizer_destroy(prof_symbolizer_t *sym)
{
    size_t  i;

    if (sym == NULL) {
        return;
    }

    for (i = 0; i < sym->nobjects; i++) {
        prof_sym_object_free(sym->objects[i]);
    }

    free(sym->objects);
    free(sym->active);
    free(sym->debug_dir);
    free(sym);
}


/* Applies to the objects whose symbols are not loaded yet. */

int
prof_symbolizer_set_debug_dir(prof_symbolizer_t *sym, const char *dir)
{
    char  *copy;

    if (dir == NULL) {
        return -EINVAL;
    }

    copy = strdup(dir);
    if (copy == NULL) {
        return -ENOMEM;
    }

    free(sym->debug_dir);
    sym->debug_dir = copy;

    return 0;
}


int
prof_symbolizer_refresh(prof_symbolizer_t *sym)
{
    int      rc, err;
    FILE    *f;
    char    *line;
    size_t   i, size, lines;

    if (__atomic_load_n(&sym->frozen, __ATOMIC_ACQUIRE)) {
        return -ESRCH;
    }

    /*
     * Taken before the read: a change during it is seen by the next
     * lookup. A failed read is tried again only when the loader's objects
     * change or at the rate of unknown pcs, not for every one.
     */

    sym->loader_generation = prof_sym_loader_generation();
    sym->maps_tried = 1;

    f = fopen(sym->maps_path, "re");
    if (f == NULL) {
        return -errno;
    }

    sym->stats.maps_reads++;

    for (i = 0; i < sym->nobjects; i++) {
        sym->objects[i]->seen = 0;
    }

    rc = 0;
    line = NULL;
    size = 0;
    lines = 0;

    while (rc == 0 && getline(&line, &size, f) != -1) {
        rc = prof_sym_maps_line(sym, line);
        lines++;
    }

    if (rc == 0 && ferror(f)) {
        rc = -EIO;
    }

    /* A process that has exited (a zombie) has empty maps: a failed read,
       not every object unmapped. */
    if (rc == 0 && lines == 0) {
        rc = -ESRCH;
    }

    free(line);
    fclose(f);

    /* a partial read unmaps nothing: collect must not free what it missed */

    for (i = 0; i < sym->nobjects; i++) {
        if (rc == 0) {
            sym->objects[i]->mapped = sym->objects[i]->seen;

        } else {
            sym->objects[i]->mapped |= sym->objects[i]->seen;
        }
    }

    err = prof_sym_index(sym);

    return rc ? rc : err;
}


/*
 * A frame of o has no name: its debug file is asked of debuginfod, when
 * none of the files at hand had its functions.
 */
static void
prof_sym_ask_debuginfod(prof_symbolizer_t *sym, prof_sym_object_t *o)
{
    if (sym->debuginfod == NULL || o->asked || o->fetched
        || o->obj.corrupt || o->build_id[0] == '\0'
        || o->names == PROF_SYMBOLS_SYMTAB
        || o->names == PROF_SYMBOLS_DEBUG_FILE)
    {
        return;
    }

    o->asked = 1;
    (void) prof_debuginfod_ask(sym->debuginfod, o->build_id);
}


const prof_object_t *
prof_symbolize(prof_symbolizer_t *sym, uint64_t pc, const char **function)
{
    int                 corrupt;
    prof_sym_object_t  *o;

    if (function) {
        *function = NULL;
    }

    o = prof_sym_object_find(sym, pc);

    if (o == NULL) {
        if (!prof_sym_should_reread(sym)) {
            return NULL;
        }

        (void) prof_symbolizer_refresh(sym);

        o = prof_sym_object_find(sym, pc);
        if (o == NULL) {
            return NULL;
        }
    }

    if (!o->loaded) {
        corrupt = o->obj.corrupt;
        prof_sym_object_load(sym->debug_dir, o);
        sym->stats.objects_corrupt += !corrupt && o->obj.corrupt;
    }

    if (function) {
        *function = prof_sym_object_lookup(o, pc - o->obj.load_bias);

        if (*function == NULL) {
            o->unnamed = 1;
            prof_sym_ask_debuginfod(sym, o);
        }
    }

    return &o->obj;
}


const char *
prof_symbolizer_function(prof_symbolizer_t *sym, const prof_object_t *object,
    uint64_t pc)
{
    prof_sym_object_t  *o;

    /* obj is the first member of the symbolizer's object */
    o = (prof_sym_object_t *) object;

    return o->loaded ? prof_sym_object_lookup(o, pc - o->obj.load_bias)
                     : NULL;
}


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


/*
 * The DWARF of the file o's names came from, opened the first time it is
 * asked for: NULL when that file has none (or too much of it), or when
 * the names came from no such file.
 */
static Dwarf *
prof_sym_dwarf(prof_sym_object_t *o)
{
    int          fd, rc;
    char         path[32];
    size_t       n;
    prof_elf_t   elf;
    Elf64_Shdr  *sh, *info;

    if (o->dwarf_tried) {
        return o->dwarf;
    }

    o->dwarf_tried = 1;

    if (o->names_fd >= 0) {
        fd = fcntl(o->names_fd, F_DUPFD_CLOEXEC, 0);

    } else if (o->names_path != NULL) {
        fd = open(o->names_path, O_RDONLY | O_CLOEXEC);

    } else {
        return NULL;
    }

    if (fd < 0) {
        return NULL;
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

    if (rc == 0) {
        o->dwarf = dwarf_begin(fd, DWARF_C_READ);
    }

    if (o->dwarf == NULL) {
        close(fd);
        return NULL;
    }

    o->dwarf_fd = fd;

    if (o->names_fd >= 0) {
        close(o->names_fd);
        o->names_fd = -1;
    }

    return o->dwarf;
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

    if (!o->loaded || (dwarf = prof_sym_dwarf(o)) == NULL) {
        return 0;
    }

    vaddr = pc - o->obj.load_bias;

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


int
prof_symbolizer_renamed(prof_symbolizer_t *sym, const prof_object_t *object)
{
    /* obj is the first member of the symbolizer's object */
    return ((const prof_sym_object_t *) object)->renamed;
}


void
prof_symbolizer_set_debuginfod(prof_symbolizer_t *sym, prof_debuginfod_t *d,
    int64_t wait_ms)
{
    sym->debuginfod = d;
    sym->fetch_wait_ms = wait_ms;
}


/* Its .symtab for o's, from a debug file open at fd: 0, or -errno. */
static int
prof_sym_take_debug_file(prof_sym_object_t *o, int fd)
{
    int                 rc;
    char                path[32];
    prof_sym_object_t   fetched;

    memset(&fetched, 0, sizeof(fetched));
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

    rc = prof_sym_load_file(&fetched, path, SHT_SYMTAB);
    if (rc != 0) {
        return rc;
    }

    free(o->syms);
    free(o->strtab);
    free(o->strtab_extra);

    o->syms = fetched.syms;
    o->nsyms = fetched.nsyms;
    o->strtab = fetched.strtab;
    o->strtab_extra = NULL;
    o->names = PROF_SYMBOLS_DEBUGINFOD;

    prof_sym_dwarf_forget(o);
    o->names_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);

    return 0;
}


size_t
prof_symbolizer_take_fetched(prof_symbolizer_t *sym, int wait)
{
    int                      fd;
    size_t                   i, asked, renamed;
    prof_sym_object_t       *o;
    prof_debuginfod_state_e  state;

    if (sym->debuginfod == NULL) {
        return 0;
    }

    /* Those that failed are asked again (debuginfod.h says when). */
    for (i = 0, asked = 0; i < sym->nobjects; i++) {
        sym->objects[i]->renamed = 0;

        if (sym->objects[i]->unnamed) {
            prof_sym_ask_debuginfod(sym, sym->objects[i]);
        }

        asked += sym->objects[i]->asked;
    }

    if (asked == 0) {
        return 0;
    }

    if (wait) {
        (void) prof_debuginfod_wait(sym->debuginfod,
                                    prof_clock_ns(CLOCK_MONOTONIC)
                                    + sym->fetch_wait_ms * 1000000);
    }

    renamed = 0;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (!o->asked) {
            continue;
        }

        state = prof_debuginfod_take(sym->debuginfod, o->build_id, &fd);
        if (state == PROF_DEBUGINFOD_PENDING) {
            continue;
        }

        /* A failure is asked again by the next frame left unnamed. */
        o->asked = 0;

        if (state != PROF_DEBUGINFOD_FOUND) {
            continue;
        }

        o->fetched = 1;
        o->renamed = (prof_sym_take_debug_file(o, fd) == 0);
        renamed += o->renamed;
        close(fd);
    }

    return renamed;
}


size_t
prof_symbolizer_collect(prof_symbolizer_t *sym)
{
    size_t              i, kept, evicted;
    prof_sym_object_t  *o;

    if (!sym->maps_tried) {
        return 0;
    }

    if (prof_sym_loader_generation() != sym->loader_generation) {
        (void) prof_symbolizer_refresh(sym);
    }

    kept = 0;
    evicted = 0;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->mapped) {
            sym->objects[kept++] = o;
            continue;
        }

        prof_sym_object_free(o);
        evicted++;
    }

    sym->nobjects = kept;
    sym->stats.objects_evicted += evicted;

    return evicted;
}


size_t
prof_symbolizer_object_count(prof_symbolizer_t *sym)
{
    return sym->nactive;
}


const prof_object_t *
prof_symbolizer_object(prof_symbolizer_t *sym, size_t i)
{
    return (i < sym->nactive) ? &sym->active[i]->obj : NULL;
}


/* Whether a file has a section of a type: 1, 0, or -errno. */
static int
prof_sym_has_section(const char *path, uint32_t type)
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

    if (prof_sym_has_section(prof_sym_image(o), SHT_SYMTAB) == 1) {
        return PROF_SYMBOLS_SYMTAB;
    }

    if (prof_sym_build_id_path(sym->debug_dir, o, path, sizeof(path)) == 0
        && prof_sym_has_section(path, SHT_SYMTAB) == 1)
    {
        return PROF_SYMBOLS_DEBUG_FILE;
    }

    if (o->image[0] == '\0'
        && prof_debuglink_find(o->obj.path,
                               prof_sym_debug_root(sym->debug_dir, root,
                                                   sizeof(root)) == 0
                               ? root : NULL,
                               path, sizeof(path)) == 0
        && prof_sym_has_section(path, SHT_SYMTAB) == 1)
    {
        return PROF_SYMBOLS_DEBUG_FILE;
    }

    if (prof_minidebuginfo_present(prof_sym_image(o))) {
        return PROF_SYMBOLS_MINIDEBUGINFO;
    }

    if (prof_sym_has_section(prof_sym_image(o), SHT_DYNSYM) == 1) {
        return PROF_SYMBOLS_DYNSYM;
    }

    return PROF_SYMBOLS_NONE;
}


const prof_object_t *
prof_symbolizer_corrupt_object(prof_symbolizer_t *sym)
{
    size_t              i;
    prof_sym_object_t  *o;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->obj.corrupt && !o->corrupt_reported) {
            o->corrupt_reported = 1;
            return &o->obj;
        }
    }

    return NULL;
}


const prof_object_t *
prof_symbolizer_fetched_object(prof_symbolizer_t *sym)
{
    size_t              i;
    prof_sym_object_t  *o;

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->names == PROF_SYMBOLS_DEBUGINFOD && !o->fetched_reported) {
            o->fetched_reported = 1;
            return &o->obj;
        }
    }

    return NULL;
}


void
prof_symbolizer_stats(prof_symbolizer_t *sym, prof_symbolizer_stats_t *stats)
{
    *stats = sym->stats;
    stats->objects_held = sym->nobjects;
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

    if (o.obj.corrupt && o.nsyms != 0) {
        rc = -EFAULT;
    }

    if (strlen(o.build_id) % 2 != 0) {
        rc = -EFAULT;
    }

    /* every function is found at its address, under its own name */

    for (i = 0; i < o.nsyms && rc == 0; i++) {
        name = prof_sym_object_lookup(&o, o.syms[i].addr);

        if (name != o.syms[i].name) {
            rc = -EFAULT;
        }
    }

    if (rc == 0) {
        *functions = o.nsyms;
    }

    free(o.syms);
    free(o.strtab);
    free(o.strtab_extra);
    prof_sym_dwarf_forget(&o);

    return rc;
}
