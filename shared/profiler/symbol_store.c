/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The symbol store (symbol_store.h): a memory file of a table and the
 * images it lists. The table is the file's first pages; each image starts
 * on a page of its own after them. Locks (fcntl record locks on the
 * file's first bytes, advisory; a process that dies holds none): byte 0
 * the table's; byte 1 + i entry i's, written while its image is built.
 * The file grows by each image built, page-rounded: it holds what was
 * built, nothing reserved.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "profiler/symbol_store.h"


#define PROF_STORE_MAGIC        0x32737973666f7270ULL   /* "profsys2" */
#define PROF_STORE_ENTRIES      256
#define PROF_STORE_MAX_BYTES    (1ULL << 30)
/*
 * How long a process waits for another's image (the builder, niced, may
 * be starved on a busy machine: the waiter sleeps meanwhile).
 */
#define PROF_STORE_WAIT_NS      (20 * 1000 * 1000 * 1000LL)
#define PROF_STORE_POLL_NS      (10 * 1000 * 1000)


typedef enum {
    PROF_STORE_FREE = 0,
    PROF_STORE_BUILDING,                    /* by the holder of its lock */
    PROF_STORE_READY,
    PROF_STORE_NONE                         /* the file has none */
} prof_store_state_e;


typedef struct {
    uint64_t             dev;               /* the file: its key */
    uint64_t             ino;
    uint64_t             size;
    int64_t              mtime_ns;
    uint32_t             state;             /* prof_store_state_e */
    uint32_t             kind;              /* of image: the key's too */
    uint64_t             off;               /* of its image, in the file */
    uint64_t             len;
} prof_store_entry_t;


typedef struct {
    uint64_t             magic;
    uint64_t             used;              /* bytes of images, rounded */
    uint32_t             count;             /* entries in use or freed */
    uint32_t             images;
    prof_store_entry_t   entries[PROF_STORE_ENTRIES];
} prof_store_table_t;


struct prof_symbol_store_s {
    int                  fd;
    size_t               table_bytes;       /* rounded to pages */
    prof_store_table_t  *table;             /* mapped read-write */
    unsigned             built;
    unsigned             mapped;
    struct {
        const void      *image;             /* NULL: a free place */
        uint32_t         entry;
    } maps[PROF_STORE_ENTRIES];             /* this process's mappings */
};


static size_t
prof_store_table_bytes(void)
{
    size_t  page;

    page = (size_t) sysconf(_SC_PAGESIZE);

    return (sizeof(prof_store_table_t) + page - 1) & ~(page - 1);
}


int
prof_symbol_store_create(void)
{
    int                  fd, err;
    size_t               n;
    prof_store_table_t  *t;

    fd = memfd_create("nginx-profiling-symbols", MFD_CLOEXEC);
    if (fd == -1) {
        return -errno;
    }

    n = prof_store_table_bytes();

    if (ftruncate(fd, (off_t) n) == -1) {
        err = -errno;
        (void) close(fd);
        return err;
    }

    t = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t == MAP_FAILED) {
        err = -errno;
        (void) close(fd);
        return err;
    }

    t->magic = PROF_STORE_MAGIC;
    (void) munmap(t, n);

    return fd;
}


prof_symbol_store_t *
prof_symbol_store_open(int fd)
{
    prof_symbol_store_t  *s;

    s = calloc(1, sizeof(prof_symbol_store_t));
    if (s == NULL) {
        return NULL;
    }

    s->fd = fd;
    s->table_bytes = prof_store_table_bytes();
    s->table = mmap(NULL, s->table_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                    fd, 0);

    if (s->table == MAP_FAILED || s->table->magic != PROF_STORE_MAGIC) {
        if (s->table != MAP_FAILED) {
            (void) munmap(s->table, s->table_bytes);
        }
        free(s);
        return NULL;
    }

    return s;
}


void
prof_symbol_store_close(prof_symbol_store_t *s)
{
    if (s == NULL) {
        return;
    }

    (void) munmap(s->table, s->table_bytes);
    free(s);
}


/* A record lock on one byte: 0, or -errno (-EAGAIN: held elsewhere). */
static int
prof_store_lock(prof_symbol_store_t *s, off_t byte, short type, int wait)
{
    struct flock  fl;

    memset(&fl, 0, sizeof(fl));
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = byte;
    fl.l_len = 1;

    while (fcntl(s->fd, wait ? F_SETLKW : F_SETLK, &fl) == -1) {
        if (errno != EINTR) {
            return (errno == EACCES) ? -EAGAIN : -errno;
        }
    }

    return 0;
}


#define prof_store_lock_table(s)                                            \
    prof_store_lock(s, 0, F_WRLCK, 1)
#define prof_store_unlock_table(s)                                          \
    (void) prof_store_lock(s, 0, F_UNLCK, 1)
#define prof_store_entry_byte(s, e)                                         \
    ((off_t) (1 + ((e) - (s)->table->entries)))


static prof_store_entry_t *
prof_store_find(prof_symbol_store_t *s, const struct stat *st, uint32_t kind)
{
    uint32_t             i;
    prof_store_entry_t  *e;

    for (i = 0; i < s->table->count && i < PROF_STORE_ENTRIES; i++) {
        e = &s->table->entries[i];

        if (e->state != PROF_STORE_FREE && e->kind == kind
            && e->dev == (uint64_t) st->st_dev
            && e->ino == (uint64_t) st->st_ino
            && e->size == (uint64_t) st->st_size
            && e->mtime_ns == prof_timespec_ns(&st->st_mtim))
        {
            return e;
        }
    }

    return NULL;
}


static prof_store_entry_t *
prof_store_claim(prof_symbol_store_t *s, const struct stat *st,
    uint32_t kind)
{
    uint32_t             i;
    prof_store_entry_t  *e;

    for (i = 0; i < s->table->count; i++) {
        if (s->table->entries[i].state == PROF_STORE_FREE) {
            break;
        }
    }

    if (i == PROF_STORE_ENTRIES) {
        return NULL;
    }

    if (i == s->table->count) {
        s->table->count++;
    }

    e = &s->table->entries[i];
    memset(e, 0, sizeof(*e));
    e->dev = (uint64_t) st->st_dev;
    e->ino = (uint64_t) st->st_ino;
    e->size = (uint64_t) st->st_size;
    e->mtime_ns = prof_timespec_ns(&st->st_mtim);
    e->kind = kind;
    e->state = PROF_STORE_BUILDING;

    return e;
}


static int
prof_store_write(int fd, const char *p, size_t len, uint64_t off)
{
    ssize_t  n;

    while (len > 0) {
        n = pwrite(fd, p, len, (off_t) off);
        if (n == -1) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t) n;
        off += (uint64_t) n;
    }

    return 0;
}


/*
 * Builds entry e's image (its lock held, the table's not) and marks it
 * ready, or none, or free again on a failure that may pass.
 */
static int
prof_store_build(prof_symbol_store_t *s, prof_store_entry_t *e, int fd,
    prof_symbol_store_build_pt build, void *data)
{
    int       rc;
    void     *image;
    size_t    len, page;
    uint64_t  off, rounded;

    image = NULL;
    rc = build(fd, data, &image, &len);

    page = (size_t) sysconf(_SC_PAGESIZE);
    off = 0;

    if (prof_store_lock_table(s) != 0) {
        free(image);
        return -ENOLCK;
    }

    if (rc == 0) {
        rounded = (len + page - 1) & ~(uint64_t) (page - 1);

        if (s->table->used + rounded > PROF_STORE_MAX_BYTES) {
            rc = -ENOSPC;

        } else {
            off = s->table_bytes + s->table->used;
            if (ftruncate(s->fd, (off_t) (off + rounded)) == -1) {
                rc = -errno;
            } else {
                s->table->used += rounded;
            }
        }
    }

    prof_store_unlock_table(s);

    /* Its pages allocated, then written: an error, never SIGBUS. */
    if (rc == 0) {
        if (fallocate(s->fd, 0, (off_t) off, (off_t) len) == -1
            && errno != EOPNOTSUPP)
        {
            rc = -errno;
        } else {
            rc = prof_store_write(s->fd, image, len, off);
        }
    }

    free(image);

    (void) prof_store_lock_table(s);

    if (rc == 0) {
        e->off = off;
        e->len = len;
        e->state = PROF_STORE_READY;
        s->table->images++;
        s->built++;

    } else if (rc == -ENOENT || rc == -ENOEXEC) {
        e->state = PROF_STORE_NONE;

    } else {
        e->state = PROF_STORE_FREE;     /* its pages, if any, are lost */
    }

    prof_store_unlock_table(s);
    (void) prof_store_lock(s, prof_store_entry_byte(s, e), F_UNLCK, 0);

    return rc;
}


void *
prof_symbol_store_get(prof_symbol_store_t *s, int fd, uint32_t kind,
    prof_symbol_store_build_pt build, void *data, size_t *len, int *err)
{
    int                  rc;
    void                *image;
    int64_t              deadline;
    uint32_t             i, index;
    uint64_t             off;
    struct stat          st;
    struct timespec      pause = { 0, PROF_STORE_POLL_NS };
    prof_store_entry_t  *e;

    if (fstat(fd, &st) == -1) {
        *err = -errno;
        return NULL;
    }

    deadline = prof_clock_ns(CLOCK_MONOTONIC) + PROF_STORE_WAIT_NS;

    for ( ;; ) {
        if (prof_store_lock_table(s) != 0) {
            *err = -ENOLCK;
            return NULL;
        }

        e = prof_store_find(s, &st, kind);

        if (e == NULL) {
            e = prof_store_claim(s, &st, kind);
            if (e == NULL) {
                prof_store_unlock_table(s);
                *err = -ENOSPC;
                return NULL;
            }

            /* Held before the table is let go: nobody takes it over. */
            (void) prof_store_lock(s, prof_store_entry_byte(s, e), F_WRLCK,
                                   0);
            prof_store_unlock_table(s);

            rc = prof_store_build(s, e, fd, build, data);
            if (rc != 0) {
                *err = rc;
                return NULL;
            }

            continue;
        }

        if (e->state == PROF_STORE_READY) {
            off = e->off;
            *len = e->len;
            index = (uint32_t) (e - s->table->entries);
            prof_store_unlock_table(s);
            break;
        }

        if (e->state == PROF_STORE_NONE) {
            prof_store_unlock_table(s);
            *err = -ENOENT;
            return NULL;
        }

        /* Being built: by a live process while its lock is held. */
        if (prof_store_lock(s, prof_store_entry_byte(s, e), F_WRLCK, 0)
            == 0)
        {
            prof_store_unlock_table(s);

            rc = prof_store_build(s, e, fd, build, data);
            if (rc != 0) {
                *err = rc;
                return NULL;
            }

            continue;
        }

        prof_store_unlock_table(s);

        if (prof_clock_ns(CLOCK_MONOTONIC) >= deadline) {
            *err = -ETIMEDOUT;
            return NULL;
        }

        (void) nanosleep(&pause, NULL);
    }

    image = mmap(NULL, *len, PROT_READ, MAP_SHARED, s->fd, (off_t) off);

    for (i = 0; image != MAP_FAILED && i < PROF_STORE_ENTRIES; i++) {
        if (s->maps[i].image == NULL) {
            s->maps[i].image = image;
            s->maps[i].entry = index;
            s->mapped++;
            return image;
        }
    }

    if (image != MAP_FAILED) {
        (void) munmap(image, *len);
    }

    *err = (image == MAP_FAILED) ? -errno : -ENOSPC;

    return NULL;
}


void
prof_symbol_store_unmap(prof_symbol_store_t *s, void *image, size_t len)
{
    unsigned  i;

    (void) munmap(image, len);

    for (i = 0; i < PROF_STORE_ENTRIES; i++) {
        if (s->maps[i].image == image) {
            s->maps[i].image = NULL;
            s->mapped--;
            return;
        }
    }
}


void
prof_symbol_store_stats(prof_symbol_store_t *s,
    prof_symbol_store_stats_t *stats)
{
    memset(stats, 0, sizeof(*stats));

    if (s == NULL) {
        return;
    }

    /* Without the lock: figures, each read whole. */
    stats->bytes = __atomic_load_n(&s->table->used, __ATOMIC_RELAXED);

    stats->images = __atomic_load_n(&s->table->images, __ATOMIC_RELAXED);
    stats->built = s->built;
    stats->mapped = s->mapped;
}
