/*
 * Symbolizer: finds the ELF object (path, build id, load bias) mapping a pc
 * of this process from /proc/self/maps, and the function containing it.
 */

#define _GNU_SOURCE

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbolizer.h"


#define PROF_SYM_DEBUG_DIR      "/usr/lib/debug/.build-id"
#define PROF_SYM_DELETED        " (deleted)"
#define PROF_SYM_BUILD_ID_MAX   64          /* bytes of the note payload */
#define PROF_SYM_NOTES_MAX      (1 << 20)   /* bytes of one PT_NOTE */


typedef struct {
    uint64_t             addr;              /* ELF virtual address */
    uint64_t             size;
    const char          *name;              /* in the object's strtab */
    unsigned             rank;              /* lower is preferred */
} prof_sym_t;


typedef struct {
    prof_object_t        obj;               /* what callers see */
    char                 build_id[2 * PROF_SYM_BUILD_ID_MAX + 1];
    unsigned             mapped:1;          /* in the last maps read */
    unsigned             loaded:1;          /* symbols were looked for */
    prof_sym_t          *syms;              /* sorted by addr, no dups */
    size_t               nsyms;
    char                *strtab;
    char                 image[32];         /* where to read the ELF when
                                               not at obj.path: the vdso */
    int                  image_fd;
} prof_sym_object_t;


typedef struct {
    int                  fd;
    uint64_t             size;
    Elf64_Ehdr           ehdr;
} prof_elf_t;


struct prof_symbolizer_s {
    prof_sym_object_t  **objects;           /* all objects, by id */
    size_t               nobjects;
    prof_sym_object_t  **active;            /* mapped ones, by start */
    size_t               nactive;
    char                *debug_dir;
};


static int
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


/* Reads len bytes at off into a new buffer with a NUL byte after them. */

static void *
prof_elf_read_alloc(prof_elf_t *elf, uint64_t off, uint64_t len)
{
    char  *buf;

    if (len > elf->size) {
        return NULL;
    }

    buf = malloc(len + 1);
    if (buf == NULL) {
        return NULL;
    }

    if (prof_elf_read(elf, off, buf, len) != 0) {
        free(buf);
        return NULL;
    }

    buf[len] = '\0';

    return buf;
}


static int
prof_elf_open(prof_elf_t *elf, const char *path)
{
    struct stat   st;
    Elf64_Ehdr   *eh;

    elf->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (elf->fd == -1) {
        return -errno;
    }

    eh = &elf->ehdr;

    if (fstat(elf->fd, &st) == -1 || !S_ISREG(st.st_mode)) {
        goto failed;
    }

    elf->size = st.st_size;

    if (prof_elf_read(elf, 0, eh, sizeof(Elf64_Ehdr)) != 0
        || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0
        || eh->e_ident[EI_CLASS] != ELFCLASS64
        || eh->e_ident[EI_DATA] != ELFDATA2LSB
        || (eh->e_phnum && eh->e_phentsize != sizeof(Elf64_Phdr))
        || (eh->e_shnum && eh->e_shentsize != sizeof(Elf64_Shdr)))
    {
        goto failed;
    }

    return 0;

failed:

    close(elf->fd);

    return -ENOEXEC;
}


static uint64_t
prof_align(uint64_t n, uint64_t align)
{
    return (n + align - 1) & ~(align - 1);
}


/* Finds a GNU build id note in a PT_NOTE payload: 0 or -1. */

static int
prof_elf_build_id(const unsigned char *p, uint64_t len, uint64_t align,
    char *out)
{
    uint64_t    pos, desc, next, i;
    Elf64_Nhdr  nh;

    pos = 0;

    while (len - pos >= sizeof(Elf64_Nhdr)) {
        memcpy(&nh, p + pos, sizeof(Elf64_Nhdr));

        desc = prof_align(pos + sizeof(Elf64_Nhdr) + nh.n_namesz, align);
        next = prof_align(desc + nh.n_descsz, align);

        if (desc + nh.n_descsz > len) {
            return -1;
        }

        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == sizeof(ELF_NOTE_GNU)
            && memcmp(p + pos + sizeof(Elf64_Nhdr), ELF_NOTE_GNU,
                      sizeof(ELF_NOTE_GNU)) == 0
            && nh.n_descsz > 0 && nh.n_descsz <= PROF_SYM_BUILD_ID_MAX)
        {
            for (i = 0; i < nh.n_descsz; i++) {
                sprintf(out + 2 * i, "%02x", p[desc + i]);
            }

            return 0;
        }

        if (next >= len) {
            return -1;
        }

        pos = next;
    }

    return -1;
}


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


/* Best effort: the load bias and build id of a new object. */

static void
prof_sym_object_inspect(prof_sym_object_t *o)
{
    unsigned    i;
    uint64_t    align;
    prof_elf_t  elf;
    Elf64_Phdr *ph;
    void       *notes;

    if (prof_elf_open(&elf, prof_sym_image(o)) != 0) {
        return;
    }

    ph = prof_elf_read_alloc(&elf, elf.ehdr.e_phoff,
                             (uint64_t) elf.ehdr.e_phnum * sizeof(Elf64_Phdr));
    if (ph == NULL) {
        goto done;
    }

    prof_elf_load_bias(&elf, ph, &o->obj);

    for (i = 0; i < elf.ehdr.e_phnum && o->build_id[0] == '\0'; i++) {
        if (ph[i].p_type != PT_NOTE || ph[i].p_filesz > PROF_SYM_NOTES_MAX) {
            continue;
        }

        notes = prof_elf_read_alloc(&elf, ph[i].p_offset, ph[i].p_filesz);
        if (notes == NULL) {
            continue;
        }

        align = ph[i].p_align == 8 ? 8 : 4;
        (void) prof_elf_build_id(notes, ph[i].p_filesz, align, o->build_id);
        free(notes);
    }

    free(ph);

done:

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


/* Keeps the functions of an ELF symbol table, sorted and deduplicated. */

static int
prof_sym_collect(prof_sym_object_t *o, Elf64_Sym *es, size_t n,
    char *strtab, uint64_t strsize)
{
    size_t       i, k;
    unsigned     type;
    prof_sym_t  *syms;

    syms = malloc((n ? n : 1) * sizeof(prof_sym_t));
    if (syms == NULL) {
        return -ENOMEM;
    }

    for (i = 0, k = 0; i < n; i++) {
        type = ELF64_ST_TYPE(es[i].st_info);

        if ((type != STT_FUNC && type != STT_GNU_IFUNC)
            || es[i].st_size == 0 || es[i].st_shndx == SHN_UNDEF
            || es[i].st_name == 0 || es[i].st_name >= strsize)
        {
            continue;
        }

        syms[k].addr = es[i].st_value;
        syms[k].size = es[i].st_size;
        syms[k].name = strtab + es[i].st_name;
        syms[k].rank = prof_sym_rank(&es[i], syms[k].name);
        k++;
    }

    if (k == 0) {
        free(syms);
        return -ENOENT;
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


/* Loads the functions of the first section of the given type in a file. */

static int
prof_sym_load_file(prof_sym_object_t *o, const char *path, uint32_t type)
{
    int          rc;
    unsigned     i, shnum;
    prof_elf_t   elf;
    Elf64_Shdr  *sh, *tab, *str;
    Elf64_Sym   *es;
    char        *strtab;

    if (prof_elf_open(&elf, path) != 0) {
        return -ENOENT;
    }

    rc = -ENOENT;
    es = NULL;
    strtab = NULL;
    shnum = elf.ehdr.e_shnum;

    sh = prof_elf_read_alloc(&elf, elf.ehdr.e_shoff,
                             (uint64_t) shnum * sizeof(Elf64_Shdr));
    if (sh == NULL) {
        goto done;
    }

    for (i = 0, tab = NULL; i < shnum && tab == NULL; i++) {
        tab = sh[i].sh_type == type ? &sh[i] : NULL;
    }

    if (tab == NULL || tab->sh_entsize != sizeof(Elf64_Sym)
        || tab->sh_link >= shnum || sh[tab->sh_link].sh_type != SHT_STRTAB)
    {
        goto done;
    }

    str = &sh[tab->sh_link];
    es = prof_elf_read_alloc(&elf, tab->sh_offset, tab->sh_size);
    strtab = prof_elf_read_alloc(&elf, str->sh_offset, str->sh_size);

    if (es && strtab) {
        rc = prof_sym_collect(o, es, tab->sh_size / sizeof(Elf64_Sym),
                              strtab, str->sh_size);
    }

done:

    if (rc != 0) {
        free(strtab);
    }

    free(es);
    free(sh);
    close(elf.fd);

    return rc;
}


static void
prof_sym_object_load(prof_symbolizer_t *sym, prof_sym_object_t *o)
{
    int          n;
    char         path[PATH_MAX];
    const char  *id;

    o->loaded = 1;

    if (prof_sym_load_file(o, prof_sym_image(o), SHT_SYMTAB) == 0) {
        return;
    }

    id = o->obj.build_id;

    if (strlen(id) > 2) {
        n = snprintf(path, sizeof(path), "%s/%.2s/%s.debug",
                     sym->debug_dir, id, id + 2);

        if (n > 0 && (size_t) n < sizeof(path)
            && prof_sym_load_file(o, path, SHT_SYMTAB) == 0)
        {
            return;
        }
    }

    (void) prof_sym_load_file(o, prof_sym_image(o), SHT_DYNSYM);
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


static prof_sym_object_t *
prof_sym_object_create(prof_symbolizer_t *sym, uint64_t start, uint64_t end,
    uint64_t off, const char *path, int file)
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

    o->obj.id = sym->nobjects + 1;
    o->obj.start = start;
    o->obj.end = end;
    o->obj.file_offset = off;
    o->obj.load_bias = start - off;
    o->obj.build_id = o->build_id;
    o->image_fd = -1;

    if (!file && strcmp(path, "[vdso]") == 0
        && prof_sym_vdso_image(o) == 0)
    {
        file = 1;
    }

    if (file) {
        prof_sym_object_inspect(o);

    } else {
        o->loaded = 1;
    }

    sym->objects[sym->nobjects++] = o;

    return o;
}


/* Handles one line of /proc/self/maps: 0 or -errno. */

static int
prof_sym_maps_line(prof_symbolizer_t *sym, char *line)
{
    int                 n, file;
    char                perms[5];
    size_t              i, len, del;
    uint64_t            start, end, off;
    const char         *path;
    prof_sym_object_t  *o;

    n = 0;

    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %*s %*u %n",
               &start, &end, perms, &off, &n) != 4 || n == 0)
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
     * so that their pcs do not make every lookup reread the maps.
     */

    if (perms[2] != 'x' || (path[0] != '/' && strcmp(path, "[vdso]") != 0)) {
        return 0;
    }

    file = path[0] == '/'
           && !(len >= del && strcmp(path + len - del, PROF_SYM_DELETED) == 0);

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->obj.start == start && strcmp(o->obj.path, path) == 0) {
            o->mapped = 1;
            return 0;
        }
    }

    o = prof_sym_object_create(sym, start, end, off, path, file);
    if (o == NULL) {
        return -ENOMEM;
    }

    o->mapped = 1;

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

    return sym;
}


void
prof_symbolizer_destroy(prof_symbolizer_t *sym)
{
    size_t              i;
    prof_sym_object_t  *o;

    if (sym == NULL) {
        return;
    }

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];
        free(o->syms);
        free(o->strtab);
        free((char *) o->obj.path);
        if (o->image_fd >= 0) {
            close(o->image_fd);
        }
        free(o);
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
    size_t   i, size;

    f = fopen("/proc/self/maps", "re");
    if (f == NULL) {
        return -errno;
    }

    for (i = 0; i < sym->nobjects; i++) {
        sym->objects[i]->mapped = 0;
    }

    rc = 0;
    line = NULL;
    size = 0;

    while (rc == 0 && getline(&line, &size, f) != -1) {
        rc = prof_sym_maps_line(sym, line);
    }

    if (rc == 0 && ferror(f)) {
        rc = -EIO;
    }

    free(line);
    fclose(f);

    err = prof_sym_index(sym);

    return rc ? rc : err;
}


const prof_object_t *
prof_symbolize(prof_symbolizer_t *sym, uint64_t pc, const char **function)
{
    prof_sym_object_t  *o;

    if (function) {
        *function = NULL;
    }

    o = prof_sym_object_find(sym, pc);

    if (o == NULL) {
        (void) prof_symbolizer_refresh(sym);

        o = prof_sym_object_find(sym, pc);
        if (o == NULL) {
            return NULL;
        }
    }

    if (!o->loaded) {
        prof_sym_object_load(sym, o);
    }

    if (function) {
        *function = prof_sym_object_lookup(o, pc - o->obj.load_bias);
    }

    return &o->obj;
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
