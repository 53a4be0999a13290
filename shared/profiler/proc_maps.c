/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The maps of the symbolized process (/proc/PID/maps): read into the
 * symbolizer's objects, indexed by address, and read again when the
 * loader's objects changed or, at a bounded rate, for a pc in no mapping
 * the last read showed (JIT code's, mappings of no file, are kept apart:
 * their pcs read nothing again).
 */

#define _GNU_SOURCE

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "profiler/object_cache.h"
#include "profiler/proc_maps.h"
#include "profiler/symbolizer_internal.h"


#define PROF_SYM_DELETED        " (deleted)"

/*
 * Reads of the maps for pcs in no object while the loader's set of objects
 * is unchanged: at most a burst at once, one an interval on average.
 */
#define PROF_SYM_REREAD_INTERVAL_NS  1000000000LL
#define PROF_SYM_REREAD_BURST        4


/* A line of the maps. */
typedef struct {
    uint64_t     start;
    uint64_t     end;
    uint64_t     off;
    uint64_t     inode;
    char         perms[5];
    const char  *path;                  /* "" for an anonymous mapping */
} prof_sym_map_t;


/* Parses a line of the maps (its end, a NUL): 0, or -1 if it is none. */

static int
prof_sym_maps_parse(const char *line, prof_sym_map_t *m)
{
    int  n;

    n = 0;

    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %*s %" SCNu64
               " %n", &m->start, &m->end, m->perms, &m->off, &m->inode, &n)
        != 5 || n == 0)
    {
        return -1;
    }

    m->path = line + n;

    return 0;
}


/* Whether path is a regular file that starts as an ELF file does. */

static int
prof_sym_is_elf(const char *path)
{
    int          fd;
    char         magic[SELFMAG];
    ssize_t      n;
    struct stat  st;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd == -1) {
        return 0;
    }

    n = (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        ? pread(fd, magic, SELFMAG, 0) : -1;
    close(fd);

    return n == SELFMAG && memcmp(magic, ELFMAG, SELFMAG) == 0;
}


/*
 * Handles one mapping: 0 or -errno. Executable mappings of files and the
 * vdso; and, in a process qemu-user runs (emulated: its maps show
 * another process its code as the host's mappings, readable only; its
 * own maps, and so the loader's view, are the guest's), the readable
 * mappings of the ELF files with no executable mapping.
 */

static int
prof_sym_maps_line(prof_symbolizer_t *sym, const prof_sym_map_t *m,
    int emulated_code)
{
    int                 file, readable_only;
    size_t              i, len, del;
    const char         *path;
    prof_sym_object_t  *o;

    path = m->path;
    len = strlen(path);
    del = sizeof(PROF_SYM_DELETED) - 1;

    /*
     * Deleted files (upgraded binaries) and the vdso are kept as objects
     * without a file to read, so that their pcs do not make lookups read
     * the maps again.
     */

    if (!(m->perms[2] == 'x'
          || (emulated_code && m->perms[0] == 'r' && path[0] == '/'))
        || (path[0] != '/' && strcmp(path, "[vdso]") != 0))
    {
        return 0;
    }

    readable_only = (m->perms[2] != 'x');

    file = path[0] == '/'
           && !(len >= del && strcmp(path + len - del, PROF_SYM_DELETED) == 0);

    /* the same mapping of the same file (unmapped ones may come back) */

    for (i = 0; i < sym->nobjects; i++) {
        o = sym->objects[i];

        if (o->obj.start == m->start && o->obj.end == m->end
            && o->obj.file_offset == m->off && o->inode == m->inode
            && strcmp(o->obj.path, path) == 0)
        {
            o->seen = 1;
            return 0;
        }
    }

    if (readable_only && !prof_sym_is_elf(path)) {
        return 0;                       /* data (locale-archive) */
    }

    o = prof_sym_object_create(sym, m->start, m->end, m->off, m->inode, path,
                               file);
    if (o == NULL) {
        return -ENOMEM;
    }

    o->seen = 1;

    return 0;
}


/* An executable mapping of no file, not the kernel's ([vdso]...). */

static int
prof_sym_map_anonymous(const prof_sym_map_t *m)
{
    return m->perms[2] == 'x' && m->path[0] != '/' && m->path[0] != '[';
}


/*
 * Handles the maps' text (lines ended by NULs, n of them): 0 or -errno.
 * exec: room for n pointers; anonymous: for 2n numbers, the executable
 * mappings of no file (start, end), their count in *nanonymous.
 */

static int
prof_sym_maps_lines(prof_symbolizer_t *sym, const char *text, size_t n,
    const char **exec, uint64_t *anonymous, size_t *nanonymous)
{
    int             rc, emulated;
    size_t          i, j, nexec;
    const char     *line;
    prof_sym_map_t  m;

    /*
     * The files mapped executable; qemu-user's process when qemu's own
     * program is the only one.
     */
    nexec = 0;
    emulated = 1;
    *nanonymous = 0;
    for (i = 0, line = text; i < n; i++, line += strlen(line) + 1) {
        if (prof_sym_maps_parse(line, &m) != 0) {
            continue;
        }

        if (prof_sym_map_anonymous(&m)) {
            anonymous[2 * *nanonymous] = m.start;
            anonymous[2 * *nanonymous + 1] = m.end;
            (*nanonymous)++;
        }

        if (m.perms[2] == 'x' && m.path[0] == '/') {
            exec[nexec++] = m.path;
            emulated &= (strstr(m.path, "/qemu") != NULL);
        }
    }
    emulated &= (nexec > 0);

    rc = 0;
    for (i = 0, line = text; rc == 0 && i < n; i++, line += strlen(line) + 1)
    {
        if (prof_sym_maps_parse(line, &m) != 0) {
            continue;
        }

        for (j = 0; j < nexec && strcmp(exec[j], m.path) != 0; j++) {
            /* void */
        }

        rc = prof_sym_maps_line(sym, &m, emulated && j == nexec);
    }

    return rc;
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


unsigned long long
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

int
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


int
prof_symbolizer_refresh(prof_symbolizer_t *sym)
{
    int           rc, err;
    FILE         *f;
    char         *text;
    size_t        i, size, lines, nanonymous;
    ssize_t       len;
    uint64_t     *anonymous;
    const char  **exec;

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

    /* The whole text (lines ended by NULs), then its lines. */
    text = NULL;
    size = 0;
    len = getdelim(&text, &size, '\0', f);
    rc = ferror(f) ? -EIO : (len < 0 && !feof(f)) ? -ENOMEM : 0;
    fclose(f);

    lines = 0;
    if (len > 0) {
        for (i = 0; i < (size_t) len; i++) {
            if (text[i] == '\n') {
                text[i] = '\0';
                lines++;
            }
        }
        if (text[len - 1] != '\0') {
            lines++;                    /* the last line, not ended */
        }
    }

    /* A process that has exited (a zombie) has empty maps: a failed read,
       not every object unmapped. */
    if (rc == 0 && lines == 0) {
        rc = -ESRCH;
    }

    anonymous = NULL;
    nanonymous = 0;

    if (rc == 0) {
        exec = malloc(lines * sizeof(char *));
        anonymous = malloc(2 * lines * sizeof(uint64_t));
        rc = (exec == NULL || anonymous == NULL)
             ? -ENOMEM
             : prof_sym_maps_lines(sym, text, lines, exec, anonymous,
                                   &nanonymous);
        free(exec);
    }

    /* JIT code's mappings: this read's, when it was whole. */
    if (rc == 0) {
        free(sym->anonymous);
        sym->anonymous = anonymous;
        sym->nanonymous = nanonymous;

    } else {
        free(anonymous);
    }

    free(text);

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


int
prof_sym_anonymous_find(prof_symbolizer_t *sym, uint64_t pc)
{
    size_t  lo, hi, mid;

    lo = 0;
    hi = sym->nanonymous;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (pc < sym->anonymous[2 * mid]) {
            hi = mid;

        } else if (pc >= sym->anonymous[2 * mid + 1]) {
            lo = mid + 1;

        } else {
            return 1;
        }
    }

    return 0;
}


/* The mapped object holding pc (binary search), or NULL. */
prof_sym_object_t *
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
