/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Symbol tables: the functions of an ELF file's .symtab or .dynsym (and
 * MiniDebugInfo's), sorted and deduplicated, and the lookup by address.
 * A function without a size (assembly) is given one: up to the next
 * symbol or section boundary, at most PROF_SYM_UNSIZED_MAX.
 */

#define _GNU_SOURCE

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler/debug_info.h"
#include "profiler/elf_file.h"
#include "profiler/symbol_table.h"


#define PROF_SYM_TABLE_MAX      (512 << 20) /* bytes of a symbol table or of
                                               its string table */

/*
 * A function symbol without a size (hand-written assembly: musl's memcpy,
 * crt1.o's _start) names the bytes up to the next symbol, at most these:
 * past them may lie a hidden function the table does not hold.
 */
#define PROF_SYM_UNSIZED_MAX    256


static int
prof_symbol_cmp(const void *a, const void *b)
{
    const prof_symbol_t  *x = a, *y = b;

    if (x->addr != y->addr) {
        return x->addr < y->addr ? -1 : 1;
    }

    if (x->unsized != y->unsized) {
        return x->unsized ? 1 : -1;          /* a sized one first */
    }

    if (x->rank != y->rank) {
        return x->rank < y->rank ? -1 : 1;
    }

    return 0;
}


/* Prefers non-local names, then fewer leading underscores: getpid. */

static unsigned
prof_symbol_rank(const Elf64_Sym *s, const char *name)
{
    unsigned  rank;

    rank = ELF64_ST_BIND(s->st_info) == STB_LOCAL ? 16 : 0;

    while (*name++ == '_' && rank % 16 < 15) {
        rank++;
    }

    return rank;
}


/*
 * A function, or the entry point of the file (entry, or 0) whatever its
 * type: musl's crt1.o leaves a program's _start untyped.
 */
static int
prof_symbol_is_function(const Elf64_Sym *s, uint64_t entry)
{
    unsigned  type;

    type = ELF64_ST_TYPE(s->st_info);

    return (type == STT_FUNC || type == STT_GNU_IFUNC
            || (type == STT_NOTYPE && entry != 0 && s->st_value == entry))
           && s->st_shndx != SHN_UNDEF && s->st_name != 0;
}


/* Sorts syms (n), keeps one a address, sizes the unsized: how many left. */
static size_t
prof_symbol_sort(prof_symbol_t *syms, size_t n)
{
    size_t    i, k;
    uint64_t  room, end;

    if (n == 0) {
        return 0;
    }

    qsort(syms, n, sizeof(prof_symbol_t), prof_symbol_cmp);

    /*
     * One a address (an unsized one: the smallest size known), none
     * unsized within the sized function before it (a label of its code
     * would take its name past the label's few bytes).
     */
    for (i = 1, k = 1, end = syms[0].unsized ? 0 : syms[0].addr
                                                  + syms[0].size;
         i < n; i++)
    {
        if (syms[i].addr == syms[k - 1].addr) {
            if (syms[i].unsized && syms[k - 1].unsized
                && syms[i].size < syms[k - 1].size)
            {
                syms[k - 1].size = syms[i].size;
            }

        } else if (!syms[i].unsized || syms[i].addr >= end) {
            syms[k++] = syms[i];
        }

        /* The furthest end of the sized ones so far (nested, aliases). */
        if (!syms[i].unsized && syms[i].addr + syms[i].size > end) {
            end = syms[i].addr + syms[i].size;
        }
    }

    for (i = 0; i + 1 < k; i++) {
        room = syms[i + 1].addr - syms[i].addr;
        if (syms[i].unsized && syms[i].size > room) {
            syms[i].size = room;
        }
    }

    return k;
}


static int
prof_addr_cmp(const void *a, const void *b)
{
    const uint64_t  *x = a, *y = b;

    return (*x > *y) - (*x < *y);
}


/*
 * The size of the unsized functions of syms (k of them): up to the next
 * symbol of any kind of es (n: a label, an object) or the next start or
 * end of a section (sh, shnum: glibc's _init, in .init, is unsized and
 * followed by .plt), at most PROF_SYM_UNSIZED_MAX; 0 or -ENOMEM.
 */
static int
prof_symbol_size_unsized(prof_symbol_t *syms, size_t k, const Elf64_Sym *es,
    size_t n, const Elf64_Shdr *sh, size_t shnum)
{
    size_t     i, m, l, h, mid;
    uint64_t  *at;

    for (i = 0, m = 0; i < k; i++) {
        m += syms[i].unsized;
    }

    if (m == 0) {
        return 0;
    }

    at = malloc((n + 2 * shnum) * sizeof(uint64_t));
    if (at == NULL) {
        return -ENOMEM;
    }

    for (i = 0, m = 0; i < n; i++) {
        if (es[i].st_shndx != SHN_UNDEF && es[i].st_shndx < SHN_LORESERVE
            && ELF64_ST_TYPE(es[i].st_info) != STT_TLS)
        {
            at[m++] = es[i].st_value;
        }
    }

    for (i = 0; i < shnum; i++) {
        if ((sh[i].sh_flags & SHF_ALLOC) && !(sh[i].sh_flags & SHF_TLS)
            && sh[i].sh_addr != 0)
        {
            at[m++] = sh[i].sh_addr;
            at[m++] = sh[i].sh_addr + sh[i].sh_size;
        }
    }

    qsort(at, m, sizeof(uint64_t), prof_addr_cmp);

    for (i = 0; i < k; i++) {
        if (!syms[i].unsized) {
            continue;
        }

        l = 0;
        h = m;
        while (l < h) {
            mid = l + (h - l) / 2;
            if (at[mid] <= syms[i].addr) {
                l = mid + 1;
            } else {
                h = mid;
            }
        }

        syms[i].size = PROF_SYM_UNSIZED_MAX;
        if (l < m && at[l] - syms[i].addr < PROF_SYM_UNSIZED_MAX) {
            syms[i].size = at[l] - syms[i].addr;
        }
    }

    free(at);

    return 0;
}


/*
 * Keeps the functions of an ELF symbol table, sorted and deduplicated:
 * 0, -ENOENT when there is none, -ENOEXEC when a name is not within the
 * string table (strsize bytes, and a NUL byte after them).
 */

static int
prof_symbol_table_collect(prof_symbol_table_t *t, Elf64_Sym *es, size_t n,
    char *strtab, uint64_t strsize, uint64_t entry, const Elf64_Shdr *sh,
    size_t shnum)
{
    size_t          i, k, functions;
    prof_symbol_t  *syms;

    for (i = 0, functions = 0; i < n; i++) {
        if (es[i].st_name >= strsize && es[i].st_name != 0) {
            return -ENOEXEC;
        }

        functions += prof_symbol_is_function(&es[i], entry);
    }

    if (functions == 0) {
        return -ENOENT;
    }

    syms = malloc(functions * sizeof(prof_symbol_t));
    if (syms == NULL) {
        return -ENOMEM;
    }

    for (i = 0, k = 0; i < n; i++) {
        if (!prof_symbol_is_function(&es[i], entry)) {
            continue;
        }

        syms[k].addr = es[i].st_value;
        syms[k].size = es[i].st_size;
        syms[k].unsized = (es[i].st_size == 0);
        syms[k].name = strtab + es[i].st_name;
        syms[k].rank = prof_symbol_rank(&es[i], syms[k].name);
        k++;
    }

    if (prof_symbol_size_unsized(syms, k, es, n, sh, shnum) != 0) {
        free(syms);
        return -ENOMEM;
    }

    t->syms = syms;
    t->nsyms = prof_symbol_sort(syms, k);
    t->strtab = strtab;

    return 0;
}


/*
 * Loads the functions of the first section of the given type in a file:
 * 0, -ENOENT when there are none, -ENOEXEC when the file is malformed,
 * -errno.
 */

int
prof_symbol_table_read(prof_symbol_table_t *t, const char *path,
    uint32_t type)
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

    rc = prof_symbol_table_collect(t, es, tab->sh_size / sizeof(Elf64_Sym),
                                   strtab, str->sh_size,
                                   elf.ehdr.e_type == ET_EXEC
                                   || elf.ehdr.e_type == ET_DYN
                                   ? elf.ehdr.e_entry : 0, sh, shnum);

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
 * Adds MiniDebugInfo's functions (mini, loaded from its .symtab) to those
 * of .dynsym in t: 0 or -ENOMEM. mini's tables become t's.
 */
static int
prof_symbol_table_merge(prof_symbol_table_t *t, prof_symbol_table_t *mini)
{
    size_t          n;
    prof_symbol_t  *syms;

    syms = malloc((t->nsyms + mini->nsyms) * sizeof(prof_symbol_t));
    if (syms == NULL) {
        return -ENOMEM;
    }

    if (t->nsyms) {
        memcpy(syms, t->syms, t->nsyms * sizeof(prof_symbol_t));
    }

    memcpy(syms + t->nsyms, mini->syms, mini->nsyms * sizeof(prof_symbol_t));
    n = t->nsyms + mini->nsyms;

    t->nsyms = prof_symbol_sort(syms, n);

    free(t->syms);
    free(mini->syms);
    t->syms = syms;
    t->strtab_extra = mini->strtab;
    mini->syms = NULL;
    mini->strtab = NULL;

    return 0;
}


/*
 * .dynsym and MiniDebugInfo's .symtab together: 0, or -ENOENT when the
 * object has no MiniDebugInfo with functions (t is left as it was).
 */
int
prof_symbol_table_read_minidebuginfo(prof_symbol_table_t *t,
    const char *object)
{
    int                   fd, rc;
    char                  path[32];
    prof_symbol_table_t   mini;

    if (prof_minidebuginfo_open(object, &fd) != 0) {
        return -ENOENT;
    }

    memset(&mini, 0, sizeof(mini));
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

    rc = prof_symbol_table_read(&mini, path, SHT_SYMTAB);
    close(fd);

    if (rc != 0) {
        return -ENOENT;
    }

    rc = prof_symbol_table_read(t, object, SHT_DYNSYM);

    if (rc == 0 && prof_symbol_table_merge(t, &mini) != 0) {
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
        t->syms = mini.syms;
        t->nsyms = mini.nsyms;
        t->strtab = mini.strtab;
    }

    return 0;
}


/* A table in the symbol store: its count, entries, then the names. */
typedef struct {
    uint64_t             addr;
    uint64_t             size;
    uint64_t             name;              /* offset in the image */
} prof_stored_symbol_t;


/* The store's image of the table passed as data (the file is not read). */
static int
prof_symbol_table_image(int fd, void *data, void **image, size_t *len)
{
    char                  *out, *names;
    size_t                 i, total, n;
    uint64_t              *count;
    prof_stored_symbol_t  *e;
    prof_symbol_table_t   *t = data;

    total = sizeof(uint64_t) + t->nsyms * sizeof(prof_stored_symbol_t) + 1;
    for (i = 0; i < t->nsyms; i++) {
        total += strlen(t->syms[i].name) + 1;
    }

    out = malloc(total);
    if (out == NULL) {
        return -ENOMEM;
    }

    count = (uint64_t *) out;
    *count = t->nsyms;
    e = (prof_stored_symbol_t *) (count + 1);
    names = (char *) (e + t->nsyms);

    for (i = 0; i < t->nsyms; i++) {
        n = strlen(t->syms[i].name) + 1;
        memcpy(names, t->syms[i].name, n);
        e[i].addr = t->syms[i].addr;
        e[i].size = t->syms[i].size;
        e[i].name = (uint64_t) (names - out);
        names += n;
    }

    *names = '\0';
    *image = out;
    *len = total;

    return 0;
}


int
prof_symbol_table_share(prof_symbol_table_t *t, prof_symbol_store_t *store,
    int fd, uint32_t kind)
{
    int              err;
    void            *image;
    size_t           len;
    const uint64_t  *count;

    if (t->syms == NULL || t->nsyms == 0) {
        return -ENOENT;
    }

    image = prof_symbol_store_get(store, fd, kind, prof_symbol_table_image,
                                  t, &len, &err);
    if (image == NULL) {
        return err;
    }

    /* Written by another process: within its bounds, or not taken. */
    count = image;
    if (len < sizeof(uint64_t) + 1 || ((const char *) image)[len - 1] != '\0'
        || *count > (len - sizeof(uint64_t)) / sizeof(prof_stored_symbol_t))
    {
        prof_symbol_store_unmap(store, image, len);
        return -EINVAL;
    }

    free(t->syms);
    free(t->strtab);
    free(t->strtab_extra);
    t->syms = NULL;
    t->strtab = NULL;
    t->strtab_extra = NULL;
    t->nsyms = *count;
    t->image = image;
    t->image_len = len;
    t->store = store;

    return 0;
}


static const char *
prof_symbol_table_lookup_stored(const prof_symbol_table_t *t, uint64_t vaddr)
{
    size_t                       lo, hi, mid;
    const prof_stored_symbol_t  *e, *s;

    e = (const prof_stored_symbol_t *) ((const uint64_t *) t->image + 1);
    lo = 0;
    hi = t->nsyms;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (e[mid].addr <= vaddr) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    if (lo == 0) {
        return NULL;
    }

    s = &e[lo - 1];

    return (vaddr - s->addr < s->size && s->name < t->image_len)
           ? (const char *) t->image + s->name : NULL;
}


const char *
prof_symbol_table_lookup(const prof_symbol_table_t *t, uint64_t vaddr)
{
    if (t->image != NULL) {
        return prof_symbol_table_lookup_stored(t, vaddr);
    }

    size_t                lo, hi, mid;
    const prof_symbol_t  *s;

    lo = 0;
    hi = t->nsyms;

    /* the first symbol with addr > vaddr */

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (t->syms[mid].addr <= vaddr) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    if (lo == 0) {
        return NULL;
    }

    s = &t->syms[lo - 1];

    return vaddr - s->addr < s->size ? s->name : NULL;
}


void
prof_symbol_table_free(prof_symbol_table_t *t)
{
    if (t->image != NULL) {
        prof_symbol_store_unmap(t->store, (void *) t->image, t->image_len);
    }

    free(t->syms);
    free(t->strtab);
    free(t->strtab_extra);
    memset(t, 0, sizeof(prof_symbol_table_t));
}
