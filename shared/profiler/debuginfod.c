/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Debug files fetched by build id with libdebuginfod, one at a time on a
 * thread of their own, the cache kept to its bound. See debuginfod.h.
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <dlfcn.h>
#include <elfutils/debuginfod.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "profiler/debuginfod.h"
#include "common/io.h"
#include "profiler/thread.h"


#define PROF_DEBUGINFOD_BUILD_ID_MAX  128      /* hex digits */
#define PROF_DEBUGINFOD_NICE          10
#define PROF_DEBUGINFOD_TRIM_MAX      4096     /* cache entries looked at */


typedef struct {
    char                     build_id[PROF_DEBUGINFOD_BUILD_ID_MAX + 1];
    prof_debuginfod_state_e  state;
    int                      queued;        /* waits for the thread */
    int                      fd;            /* FOUND: the file, else -1 */
    int64_t                  failed_ns;     /* FAILED: when */
} prof_debuginfod_record_t;


typedef struct {
    debuginfod_client  *(*begin)(void);
    int                 (*find_debuginfo)(debuginfod_client *c,
                                          const unsigned char *build_id,
                                          int build_id_len, char **path);
    void                (*set_progressfn)(debuginfod_client *c,
                                          debuginfod_progressfn_t fn);
    void                (*end)(debuginfod_client *c);
} prof_debuginfod_lib_t;


struct prof_debuginfod_s {
    prof_debuginfod_conf_t     conf;
    char                      *cache_dir;

    /* protected by mutex */
    uv_mutex_t                 mutex;
    uv_cond_t                  changed;     /* a record's state, the queue
                                               or stop */
    prof_debuginfod_record_t  *records;
    size_t                     nrecords;
    unsigned                   pending;     /* records PENDING */
    int64_t                    down_until_ns;   /* a server unreachable */
    int                        stop;
    int64_t                    waits_end_ns;    /* no wait goes past */
    int                        done;        /* the fetch thread ended */
    int                        load_failed;
    char                       load_error[256];

    /* the loop thread's */
    int                        started;     /* the fetch thread */
    int                        load_error_told;
    uv_thread_t                thread;

    /* the fetch thread's, until it ends */
    void                      *handle;      /* dlopen() */
    prof_debuginfod_lib_t      lib;
    int64_t                    fetch_deadline_ns;
    int                        cancelled;   /* the fetch under way was
                                               given up by the callback */
};


/* The fetch thread's component, for libdebuginfod's progress callback. */
static __thread prof_debuginfod_t  *prof_debuginfod_current;


static int
prof_debuginfod_setenv_u64(const char *name, uint64_t value)
{
    char  buf[32];

    snprintf(buf, sizeof(buf), "%" PRIu64, value);
    return setenv(name, buf, 1) == 0 ? 0 : -errno;
}


/* A fetch's bound in whole seconds, at least 1. */
static uint64_t
prof_debuginfod_seconds(const prof_debuginfod_conf_t *conf)
{
    return (conf->timeout_ms + 999) / 1000;
}


int
prof_debuginfod_setenv(const prof_debuginfod_conf_t *conf)
{
    int          rc;
    const char  *urls;

    urls = conf->urls ? conf->urls : getenv(DEBUGINFOD_URLS_ENV_VAR);
    if (urls == NULL || urls[strspn(urls, " \t")] == '\0') {
        return -EINVAL;
    }

    rc = 0;

    if (conf->urls != NULL && setenv(DEBUGINFOD_URLS_ENV_VAR, urls, 1) != 0) {
        return -errno;
    }

    if (conf->cache_dir != NULL
        && setenv(DEBUGINFOD_CACHE_PATH_ENV_VAR, conf->cache_dir, 1) != 0)
    {
        return -errno;
    }

    /*
     * Seconds: all of a fetch (MAXTIME, which fails it with ETIME and
     * leaves no "missing" mark in the cache), and a transfer slower than
     * 100 KB/s for as long (TIMEOUT); libdebuginfod checks them in whole
     * seconds once a second, so a fetch may take two seconds more. The
     * progress callback is a backstop two seconds later.
     */
    rc |= prof_debuginfod_setenv_u64(DEBUGINFOD_TIMEOUT_ENV_VAR,
                                     prof_debuginfod_seconds(conf));
    rc |= prof_debuginfod_setenv_u64(DEBUGINFOD_MAXTIME_ENV_VAR,
                                     prof_debuginfod_seconds(conf));

    /* Each try gets MAXTIME: one try, the retries are a period later. */
    rc |= prof_debuginfod_setenv_u64(DEBUGINFOD_RETRY_LIMIT_ENV_VAR, 0);

    if (conf->cache_max_bytes > 0) {
        rc |= prof_debuginfod_setenv_u64(DEBUGINFOD_MAXSIZE_ENV_VAR,
                                         conf->cache_max_bytes);
    }

    (void) unsetenv(DEBUGINFOD_PROGRESS_ENV_VAR);
    (void) unsetenv(DEBUGINFOD_VERBOSE_ENV_VAR);

    return rc;
}


prof_debuginfod_t *
prof_debuginfod_create(const prof_debuginfod_conf_t *conf)
{
    prof_debuginfod_t  *d;

    d = calloc(1, sizeof(prof_debuginfod_t));
    if (d == NULL) {
        return NULL;
    }

    d->conf = *conf;
    d->conf.urls = NULL;

    if (conf->cache_dir != NULL) {
        d->cache_dir = strdup(conf->cache_dir);
        if (d->cache_dir == NULL) {
            free(d);
            return NULL;
        }
    }

    d->conf.cache_dir = d->cache_dir;

    if (uv_mutex_init(&d->mutex) != 0) {
        free(d->cache_dir);
        free(d);
        return NULL;
    }

    d->waits_end_ns = INT64_MAX;

    if (uv_cond_init(&d->changed) != 0) {
        uv_mutex_destroy(&d->mutex);
        free(d->cache_dir);
        free(d);
        return NULL;
    }

    return d;
}


/* libdebuginfod, loaded by the fetch thread: 0, or -1 (why in
   load_error). */
static int
prof_debuginfod_load(prof_debuginfod_t *d)
{
    const char  *err;

    d->handle = dlopen(DEBUGINFOD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (d->handle == NULL) {
        err = dlerror();
        snprintf(d->load_error, sizeof(d->load_error), "%s",
                 err ? err : DEBUGINFOD_SONAME " not found");
        return -1;
    }

#define prof_debuginfod_sym(field, name)                                      \
    *(void **) &d->lib.field = dlsym(d->handle, name);                        \
    if (d->lib.field == NULL) {                                               \
        snprintf(d->load_error, sizeof(d->load_error),                        \
                 DEBUGINFOD_SONAME " has no %s", name);                       \
        return -1;                                                            \
    }

    prof_debuginfod_sym(begin, "debuginfod_begin");
    prof_debuginfod_sym(find_debuginfo, "debuginfod_find_debuginfo");
    prof_debuginfod_sym(set_progressfn, "debuginfod_set_progressfn");
    prof_debuginfod_sym(end, "debuginfod_end");

#undef prof_debuginfod_sym

    return 0;
}


/* Called by libdebuginfod at least once a second: non-zero aborts. */
static int
prof_debuginfod_progress(debuginfod_client *c, long done, long total)
{
    prof_debuginfod_t  *d = prof_debuginfod_current;

    if (__atomic_load_n(&d->stop, __ATOMIC_RELAXED)
        || prof_clock_ns(CLOCK_MONOTONIC) >= d->fetch_deadline_ns)
    {
        d->cancelled = 1;
        return 1;
    }

    return 0;
}


typedef struct {
    char      name[PROF_DEBUGINFOD_BUILD_ID_MAX + 1];
    uint64_t  bytes;
    int64_t   fetched;
    int       foreign;      /* holds what libdebuginfod does not write */
} prof_debuginfod_entry_t;


static int
prof_debuginfod_entry_cmp(const void *a, const void *b)
{
    const prof_debuginfod_entry_t  *x = a, *y = b;

    return (x->fetched > y->fetched) - (x->fetched < y->fetched);
}


/* The bytes of the files of a cache entry (a build id's directory), and
   when it last changed; with remove, the entry goes. */
static int
prof_debuginfod_entry_walk(int dirfd, prof_debuginfod_entry_t *e,
    int remove)
{
    int             fd;
    DIR            *dir;
    struct stat     st;
    struct dirent  *de;

    fd = openat(dirfd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW
                                | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }

    dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return -ENOMEM;
    }

    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.') {
            continue;
        }

        if (remove) {
            (void) unlinkat(fd, de->d_name, 0);
            continue;
        }

        /* Only what libdebuginfod writes there (its temporary files,
           "debuginfo.XXXXXX", too): else not an entry. */
        if (strncmp(de->d_name, "debuginfo", 9) != 0
            && strncmp(de->d_name, "executable", 10) != 0
            && strncmp(de->d_name, "source", 6) != 0
            && strncmp(de->d_name, "section", 7) != 0)
        {
            e->foreign = 1;
            continue;
        }

        /* ctime: when it was written (its mtime is the server's). */
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            e->bytes += (uint64_t) st.st_size;
            if (st.st_ctime > e->fetched) {
                e->fetched = st.st_ctime;
            }
        }
    }

    closedir(dir);

    if (remove) {
        (void) unlinkat(dirfd, e->name, AT_REMOVEDIR);
    }

    return 0;
}


/*
 * Keeps the cache within its bound: the build ids fetched least recently
 * go first, never keep (the one just fetched). Best effort: the workers'
 * profiler processes share the cache and may trim it at once.
 */
static void
prof_debuginfod_trim(prof_debuginfod_t *d, const char *keep)
{
    int                       fd;
    DIR                      *dir;
    size_t                    i, n, len;
    uint64_t                  total;
    struct dirent            *de;
    prof_debuginfod_entry_t  *entries;

    if (d->cache_dir == NULL || d->conf.cache_max_bytes == 0) {
        return;
    }

    entries = calloc(PROF_DEBUGINFOD_TRIM_MAX,
                     sizeof(prof_debuginfod_entry_t));
    if (entries == NULL) {
        return;
    }

    dir = opendir(d->cache_dir);
    if (dir == NULL) {
        free(entries);
        return;
    }

    fd = dirfd(dir);
    n = 0;
    total = 0;

    while (n < PROF_DEBUGINFOD_TRIM_MAX && (de = readdir(dir)) != NULL) {
        len = strlen(de->d_name);

        /* Build ids only: the cache's settings files stay. */
        if (len < 2 || len > PROF_DEBUGINFOD_BUILD_ID_MAX
            || strspn(de->d_name, "0123456789abcdef") != len)
        {
            continue;
        }

        memcpy(entries[n].name, de->d_name, len + 1);

        if (prof_debuginfod_entry_walk(fd, &entries[n], 0) == 0
            && !entries[n].foreign)
        {
            total += entries[n].bytes;
            n++;

        } else {
            memset(&entries[n], 0, sizeof(prof_debuginfod_entry_t));
        }
    }

    qsort(entries, n, sizeof(prof_debuginfod_entry_t),
          prof_debuginfod_entry_cmp);

    for (i = 0; i < n && total > d->conf.cache_max_bytes; i++) {
        if (strcmp(entries[i].name, keep) == 0) {
            continue;
        }

        (void) prof_debuginfod_entry_walk(fd, &entries[i], 1);
        total -= entries[i].bytes;
        prof_counter_add(d->conf.diagnostics->debuginfod_evicted, 1);
    }

    closedir(dir);
    free(entries);
}


/* Whether a fetch's failure says a server is unreachable or too slow. */
static int
prof_debuginfod_server_down(int rc)
{
    switch (rc) {
    case -ETIME:
    case -ETIMEDOUT:
    case -ECONNREFUSED:
    case -ECONNRESET:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -ECANCELED:
        return 1;
    default:
        return 0;
    }
}


/*
 * libdebuginfod marks a build id "missing" with an empty file when a fetch
 * ends without it, also when the progress callback gave it up: removed,
 * for that only means "not in time".
 */
static void
prof_debuginfod_unmark(prof_debuginfod_t *d, const char *build_id)
{
    char         path[PATH_MAX];
    struct stat  st;

    if (d->cache_dir == NULL
        || snprintf(path, sizeof(path), "%s/%s/debuginfo", d->cache_dir,
                    build_id) >= (int) sizeof(path))
    {
        return;
    }

    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
        (void) unlink(path);
    }
}


/* The record of build_id (mutex held), or NULL. */
static prof_debuginfod_record_t *
prof_debuginfod_find(prof_debuginfod_t *d, const char *build_id)
{
    size_t  i;

    for (i = 0; i < d->nrecords; i++) {
        if (strcmp(d->records[i].build_id, build_id) == 0) {
            return &d->records[i];
        }
    }

    return NULL;
}


/* A record leaves PENDING (mutex held). */
static void
prof_debuginfod_settle(prof_debuginfod_t *d, prof_debuginfod_record_t *r,
    int fd, int64_t now_ns)
{
    r->queued = 0;
    r->fd = fd;

    if (fd >= 0) {
        r->state = PROF_DEBUGINFOD_FOUND;
        prof_counter_add(d->conf.diagnostics->debuginfod_found, 1);

    } else {
        r->state = PROF_DEBUGINFOD_FAILED;
        r->failed_ns = now_ns;
        prof_counter_add(d->conf.diagnostics->debuginfod_failed, 1);
    }

    d->pending--;
    uv_cond_broadcast(&d->changed);
}


/*
 * libdebuginfod remembers a build id the servers lack (and some failures
 * it cannot tell from that: a 5xx, a TLS error) in the cache for
 * cache_miss_s: no longer than a failure is remembered here.
 */
static void
prof_debuginfod_cache_miss(prof_debuginfod_t *d)
{
    int   fd, n;
    char  path[PATH_MAX], value[32];

    if (d->cache_dir == NULL
        || snprintf(path, sizeof(path), "%s/cache_miss_s", d->cache_dir)
           >= (int) sizeof(path))
    {
        return;
    }

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
              0644);
    if (fd < 0) {
        return;
    }

    n = snprintf(value, sizeof(value), "%lld\n",
                 (long long) (d->conf.retry_ms / 1000));
    (void) prof_write_all(fd, value, n);
    close(fd);
}


static void
prof_debuginfod_main(void *arg)
{
    int                        fd;
    char                      *path, id[PROF_DEBUGINFOD_BUILD_ID_MAX + 1];
    size_t                     i;
    int64_t                    now_ns;
    debuginfod_client         *client;
    prof_debuginfod_t         *d = arg;
    prof_debuginfod_record_t  *r;

    prof_thread_settle("prof-debuginfod", PROF_DEBUGINFOD_NICE);
    prof_debuginfod_current = d;

    prof_debuginfod_cache_miss(d);

    client = NULL;

    if (prof_debuginfod_load(d) == 0) {
        client = d->lib.begin();
        if (client == NULL) {
            snprintf(d->load_error, sizeof(d->load_error),
                     "debuginfod_begin() failed");

        } else {
            d->lib.set_progressfn(client, prof_debuginfod_progress);
        }
    }

    uv_mutex_lock(&d->mutex);

    d->load_failed = (client == NULL);

    for ( ;; ) {
        r = NULL;

        for (i = 0; i < d->nrecords; i++) {
            if (d->records[i].queued) {
                r = &d->records[i];
                break;
            }
        }

        if (d->stop) {
            break;
        }

        if (r == NULL) {
            uv_cond_wait(&d->changed, &d->mutex);
            continue;
        }

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);

        if (client == NULL || now_ns < d->down_until_ns) {
            prof_debuginfod_settle(d, r, -1, now_ns);
            continue;
        }

        memcpy(id, r->build_id, sizeof(id));
        r->queued = 0;
        d->fetch_deadline_ns = now_ns + d->conf.timeout_ms * 1000000
                               + 2000000000;
        d->cancelled = 0;

        uv_mutex_unlock(&d->mutex);

        path = NULL;
        fd = d->lib.find_debuginfo(client, (const unsigned char *) id, 0,
                                   &path);
        free(path);

        if (fd >= 0) {
            prof_debuginfod_trim(d, id);

        } else if (d->cancelled) {
            /* Given up, it reads as "missing": not a mark to keep. */
            prof_debuginfod_unmark(d, id);
            fd = -ETIME;
        }

        uv_mutex_lock(&d->mutex);

        now_ns = prof_clock_ns(CLOCK_MONOTONIC);

        /* A server unreachable or too slow: asking others now is no use. */
        if (prof_debuginfod_server_down(fd)) {
            d->down_until_ns = now_ns + d->conf.retry_ms * 1000000;
        }

        r = prof_debuginfod_find(d, id);
        prof_debuginfod_settle(d, r, fd, now_ns);
    }

    /* Stopped: what is left fails. */
    for (i = 0; i < d->nrecords; i++) {
        if (d->records[i].state == PROF_DEBUGINFOD_PENDING) {
            prof_debuginfod_settle(d, &d->records[i], -1, 0);
        }
    }

    d->done = 1;
    uv_cond_broadcast(&d->changed);
    uv_mutex_unlock(&d->mutex);

    if (client != NULL) {
        d->lib.end(client);
    }
}


prof_debuginfod_state_e
prof_debuginfod_ask(prof_debuginfod_t *d, const char *build_id)
{
    int                        start;
    int64_t                    now_ns;
    prof_debuginfod_state_e    state;
    prof_debuginfod_record_t  *r, *records;

    if (build_id[0] == '\0'
        || strlen(build_id) > PROF_DEBUGINFOD_BUILD_ID_MAX)
    {
        return PROF_DEBUGINFOD_FAILED;
    }

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    start = 0;

    uv_mutex_lock(&d->mutex);

    r = prof_debuginfod_find(d, build_id);

    if (r == NULL) {
        if (d->nrecords == PROF_DEBUGINFOD_RECORDS || d->done) {
            uv_mutex_unlock(&d->mutex);
            return PROF_DEBUGINFOD_FAILED;
        }

        records = realloc(d->records, (d->nrecords + 1) * sizeof(*r));
        if (records == NULL) {
            uv_mutex_unlock(&d->mutex);
            return PROF_DEBUGINFOD_FAILED;
        }

        d->records = records;
        r = &d->records[d->nrecords++];
        memset(r, 0, sizeof(*r));
        strcpy(r->build_id, build_id);
        r->fd = -1;
        r->state = PROF_DEBUGINFOD_FAILED;
        r->failed_ns = INT64_MIN / 2;
    }

    if (r->state == PROF_DEBUGINFOD_FAILED && !d->done && !d->load_failed
        && now_ns - r->failed_ns >= d->conf.retry_ms * 1000000)
    {
        r->state = PROF_DEBUGINFOD_PENDING;
        r->queued = 1;
        d->pending++;
        prof_counter_add(d->conf.diagnostics->debuginfod_asked, 1);
        uv_cond_broadcast(&d->changed);
        start = !d->started;
        d->started = 1;
    }

    state = r->state;

    uv_mutex_unlock(&d->mutex);

    if (start && prof_thread_create(&d->thread, prof_debuginfod_main, d) != 0)
    {
        uv_mutex_lock(&d->mutex);
        d->done = 1;
        d->load_failed = 1;
        snprintf(d->load_error, sizeof(d->load_error),
                 "no thread for fetches");
        r = prof_debuginfod_find(d, build_id);
        prof_debuginfod_settle(d, r, -1, now_ns);
        uv_mutex_unlock(&d->mutex);
        d->started = 0;
        state = PROF_DEBUGINFOD_FAILED;
    }

    return state;
}


unsigned
prof_debuginfod_wait(prof_debuginfod_t *d, int64_t deadline_ns)
{
    int64_t   now_ns, end_ns;
    unsigned  pending;

    uv_mutex_lock(&d->mutex);

    while (d->pending > 0) {
        /* The end may be brought forward meanwhile (end_waits). */
        end_ns = (deadline_ns < d->waits_end_ns) ? deadline_ns
                                                  : d->waits_end_ns;
        now_ns = prof_clock_ns(CLOCK_MONOTONIC);
        if (now_ns >= end_ns) {
            break;
        }

        (void) uv_cond_timedwait(&d->changed, &d->mutex,
                                 (uint64_t) (end_ns - now_ns));
    }

    pending = d->pending;

    uv_mutex_unlock(&d->mutex);

    return pending;
}


prof_debuginfod_state_e
prof_debuginfod_take(prof_debuginfod_t *d, const char *build_id, int *fd)
{
    prof_debuginfod_state_e    state;
    prof_debuginfod_record_t  *r;

    *fd = -1;

    uv_mutex_lock(&d->mutex);

    r = prof_debuginfod_find(d, build_id);
    state = (r != NULL) ? r->state : PROF_DEBUGINFOD_FAILED;

    if (state == PROF_DEBUGINFOD_FOUND) {
        *fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
        if (*fd < 0) {
            state = PROF_DEBUGINFOD_FAILED;
        }
    }

    uv_mutex_unlock(&d->mutex);

    return state;
}


void
prof_debuginfod_end_waits(prof_debuginfod_t *d, int64_t deadline_ns)
{
    uv_mutex_lock(&d->mutex);

    if (deadline_ns < d->waits_end_ns) {
        d->waits_end_ns = deadline_ns;
    }

    uv_cond_broadcast(&d->changed);
    uv_mutex_unlock(&d->mutex);
}


const char *
prof_debuginfod_load_error(prof_debuginfod_t *d)
{
    int  failed;

    uv_mutex_lock(&d->mutex);
    failed = d->load_failed;
    uv_mutex_unlock(&d->mutex);

    if (!failed || d->load_error_told) {
        return NULL;
    }

    d->load_error_told = 1;

    return d->load_error;
}


void
prof_debuginfod_destroy(prof_debuginfod_t *d)
{
    int      done;
    size_t   i;
    int64_t  deadline_ns;

    if (d == NULL) {
        return;
    }

    done = 1;

    if (d->started) {
        deadline_ns = prof_clock_ns(CLOCK_MONOTONIC) + 1000000000;

        uv_mutex_lock(&d->mutex);
        __atomic_store_n(&d->stop, 1, __ATOMIC_RELAXED);
        uv_cond_broadcast(&d->changed);

        while (!d->done && prof_clock_ns(CLOCK_MONOTONIC) < deadline_ns) {
            (void) uv_cond_timedwait(&d->changed, &d->mutex, 100000000);
        }

        done = d->done;
        uv_mutex_unlock(&d->mutex);

        if (!done) {
            /* Stuck in a fetch: left to the process's exit. */
            return;
        }

        (void) uv_thread_join(&d->thread);
    }

    for (i = 0; i < d->nrecords; i++) {
        if (d->records[i].fd >= 0) {
            close(d->records[i].fd);
        }
    }

    if (d->handle != NULL) {
        dlclose(d->handle);
    }

    uv_cond_destroy(&d->changed);
    uv_mutex_destroy(&d->mutex);
    free(d->records);
    free(d->cache_dir);
    free(d);
}
