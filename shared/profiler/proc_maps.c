/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The maps of the symbolized process (/proc/PID/maps): read into the
 * symbolizer's objects, indexed by address, and read again when the
 * loader's objects changed or, at a bounded rate, for an unknown pc.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
