/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Dump directory: profiles written under random temporary names relative
 * to one directory descriptor, renamed, and kept within count and size.
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/diagnostics.h"
#include "profiler/file_export.h"
#include "common/io.h"


#define PROF_DUMP_SERVICE_MAX   100     /* characters kept of the service */
#define PROF_DUMP_RANDOM_BYTES  8
#define PROF_DUMP_CREATE_TRIES  4
#define PROF_DUMP_TEMP_SUFFIX   ".tmp"
#define PROF_DUMP_SUFFIX        ".pprof"


struct prof_dump_dir_s {
    int          fd;                /* O_DIRECTORY, opened once */
    uid_t        uid;               /* files counted must be this owner's */
    char         service[PROF_DUMP_SERVICE_MAX + 1];
    size_t       service_length;
    uint64_t     keep_files;
    uint64_t     keep_bytes;
    size_t       scan_max;          /* directory entries read per scan */
    uint64_t    *files_deleted;
    uint64_t    *temps_removed;
};


typedef struct {
    char        *name;
    int64_t      mtime_ns;
    uint64_t     size;
} prof_dump_entry_t;


typedef struct {
    prof_dump_entry_t  *entries;
    size_t              count;
    size_t              capacity;
} prof_dump_list_t;


static int
prof_dump_safe_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}


/*
 * A service name is user data: keep it to one harmless path component,
 * never empty and never starting with a dot (temporary names do).
 */
static size_t
prof_dump_component(char *dst, size_t size, const char *src)
{
    size_t  i;
    char    c;

    for (i = 0; i + 1 < size && src != NULL && src[i] != '\0'; i++) {
        c = src[i];
        if (!prof_dump_safe_char(c) || (c == '.' && i == 0)) {
            c = '_';
        }
        dst[i] = c;
    }

    if (i == 0 && size > 1) {
        dst[i++] = '_';
    }

    dst[i] = '\0';

    return i;
}


/* The start of a run of 1 to 20 digits ending at end, or NULL. */
static const char *
prof_dump_digits_before(const char *start, const char *end)
{
    const char  *p;

    for (p = end; p > start && p[-1] >= '0' && p[-1] <= '9'; p--) {
        /* void */
    }

    if (p == end || end - p > 20) {
        return NULL;
    }

    return p;
}


/* "<pid>.<seq>" exactly from p to end. */
static int
prof_dump_is_pid_seq(const char *p, const char *end)
{
    const char  *seq;

    seq = prof_dump_digits_before(p, end);
    if (seq == NULL || seq - 1 <= p || seq[-1] != '.') {
        return 0;
    }

    return prof_dump_digits_before(p, seq - 1) == p;
}


/* <service>.<pid>.<seq>.pprof, for this directory's service. */
static int
prof_dump_is_profile(const prof_dump_dir_t *d, const char *name)
{
    size_t       length, suffix_length;
    const char  *end;

    length = strlen(name);
    suffix_length = sizeof(PROF_DUMP_SUFFIX) - 1;

    if (length <= d->service_length + 1 + suffix_length
        || memcmp(name, d->service, d->service_length) != 0
        || name[d->service_length] != '.')
    {
        return 0;
    }

    end = name + length - suffix_length;

    if (strcmp(end, PROF_DUMP_SUFFIX) != 0) {
        return 0;
    }

    return prof_dump_is_pid_seq(name + d->service_length + 1, end);
}


/*
 * .<service>.<pid>.<seq>.<16 hex digits>.tmp, of any service (the random
 * part makes the pattern this module's own; a renamed service's leftovers
 * are cleaned too).
 */
static int
prof_dump_is_temp(const char *name)
{
    size_t       length, i;
    const char  *end, *hex, *seq, *pid;

    length = strlen(name);

    if (name[0] != '.' || length < sizeof(PROF_DUMP_TEMP_SUFFIX)) {
        return 0;
    }

    end = name + length - (sizeof(PROF_DUMP_TEMP_SUFFIX) - 1);

    if (strcmp(end, PROF_DUMP_TEMP_SUFFIX) != 0
        || end - name < 2 * PROF_DUMP_RANDOM_BYTES + 2)
    {
        return 0;
    }

    hex = end - 2 * PROF_DUMP_RANDOM_BYTES;

    for (i = 0; i < 2 * PROF_DUMP_RANDOM_BYTES; i++) {
        if (!((hex[i] >= '0' && hex[i] <= '9')
              || (hex[i] >= 'a' && hex[i] <= 'f')))
        {
            return 0;
        }
    }

    if (hex[-1] != '.') {
        return 0;
    }

    seq = prof_dump_digits_before(name, hex - 1);
    if (seq == NULL || seq - 1 <= name || seq[-1] != '.') {
        return 0;
    }

    pid = prof_dump_digits_before(name, seq - 1);
    if (pid == NULL || pid - 1 <= name + 1 || pid[-1] != '.') {
        return 0;
    }

    /* The service: at least one safe character, not starting with '.'. */
    if (name[1] == '.') {
        return 0;
    }

    for (i = 1; name + i < pid - 1; i++) {
        if (!prof_dump_safe_char(name[i])) {
            return 0;
        }
    }

    return 1;
}


static int
prof_dump_random_hex(char *hex)
{
    size_t          i;
    ssize_t         n;
    unsigned char   bytes[PROF_DUMP_RANDOM_BYTES];
    static const char  digits[] = "0123456789abcdef";

    do {
        n = getrandom(bytes, sizeof(bytes), 0);
    } while (n < 0 && errno == EINTR);

    if (n < 0) {
        return -errno;
    }

    if (n != (ssize_t) sizeof(bytes)) {
        return -EIO;
    }

    for (i = 0; i < sizeof(bytes); i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 0xf];
    }

    hex[2 * sizeof(bytes)] = '\0';

    return 0;
}


/*
 * Creates a new temporary file under a random name, mode 0600 whatever
 * the umask. Returns its descriptor and name, or -errno.
 */
static int
prof_dump_create_temp(prof_dump_dir_t *d, pid_t pid, uint64_t sequence,
    char *tmp, size_t tmp_size)
{
    int       fd, rc, err;
    unsigned  tries;
    char      hex[2 * PROF_DUMP_RANDOM_BYTES + 1];

    for (tries = 0; tries < PROF_DUMP_CREATE_TRIES; tries++) {

        rc = prof_dump_random_hex(hex);
        if (rc != 0) {
            return rc;
        }

        if (snprintf(tmp, tmp_size, ".%s.%d.%llu.%s" PROF_DUMP_TEMP_SUFFIX,
                     d->service, (int) pid, (unsigned long long) sequence,
                     hex)
            >= (int) tmp_size)
        {
            return -ENAMETOOLONG;
        }

        fd = openat(d->fd, tmp,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);

        if (fd >= 0) {
            if (fchmod(fd, 0600) != 0) {
                err = errno;
                (void) close(fd);
                (void) unlinkat(d->fd, tmp, 0);
                return -err;
            }
            return fd;
        }

        /* Someone else's name (planted or not): draw another. */
        if (errno != EEXIST) {
            return -errno;
        }
    }

    return -EEXIST;
}


static int
prof_dump_list_add(prof_dump_list_t *list, const char *name,
    const struct stat *st)
{
    size_t              capacity;
    prof_dump_entry_t  *entries, *e;

    if (list->count == list->capacity) {
        capacity = list->capacity ? 2 * list->capacity : 64;
        entries = realloc(list->entries, capacity * sizeof(*entries));
        if (entries == NULL) {
            return -ENOMEM;
        }
        list->entries = entries;
        list->capacity = capacity;
    }

    e = &list->entries[list->count];

    e->name = strdup(name);
    if (e->name == NULL) {
        return -ENOMEM;
    }

    e->mtime_ns = prof_timespec_ns(&st->st_mtim);
    e->size = (uint64_t) st->st_size;
    list->count++;

    return 0;
}


static void
prof_dump_list_free(prof_dump_list_t *list)
{
    size_t  i;

    for (i = 0; i < list->count; i++) {
        free(list->entries[i].name);
    }

    free(list->entries);
}


static int
prof_dump_oldest_first(const void *a, const void *b)
{
    const prof_dump_entry_t  *x = a, *y = b;

    if (x->mtime_ns != y->mtime_ns) {
        return x->mtime_ns < y->mtime_ns ? -1 : 1;
    }

    return strcmp(x->name, y->name);
}


/*
 * Deletes the oldest profiles past the bounds, counting the profile of
 * length bytes about to be added, if adding (so that the directory never
 * holds more than the bounds, even for a moment).
 */
static void
prof_dump_retain(prof_dump_dir_t *d, prof_dump_list_t *list,
    unsigned adding, size_t length)
{
    size_t              i;
    uint64_t            files, bytes;
    prof_dump_entry_t  *e;

    if (list->count == 0) {
        return;
    }

    files = list->count + adding;
    bytes = adding ? length : 0;

    for (i = 0; i < list->count; i++) {
        bytes += list->entries[i].size;
    }

    qsort(list->entries, list->count, sizeof(prof_dump_entry_t),
          prof_dump_oldest_first);

    for (i = 0; i < list->count; i++) {

        if ((d->keep_files == 0 || files <= d->keep_files)
            && (d->keep_bytes == 0 || bytes <= d->keep_bytes))
        {
            break;
        }

        e = &list->entries[i];

        /*
         * ENOENT: another worker deleted it first. Any other failure: it
         * is not ours to delete; it is not counted either, so that it
         * does not make us delete more of the others.
         */
        if (unlinkat(d->fd, e->name, 0) == 0 && d->files_deleted != NULL) {
            prof_counter_add(*d->files_deleted, 1);
        }

        files--;
        bytes -= e->size;
    }
}


/*
 * One bounded pass over the directory: removes stale temporary files and
 * makes room, by retention, for a profile of length bytes if adding.
 */
static void
prof_dump_scan(prof_dump_dir_t *d, unsigned adding, size_t length)
{
    int                fd;
    DIR               *dir;
    size_t             entries_read;
    int64_t            stale_before_ns;
    struct stat        st;
    struct dirent     *de;
    prof_dump_list_t   list;

    fd = openat(d->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }

    dir = fdopendir(fd);
    if (dir == NULL) {
        (void) close(fd);
        return;
    }

    memset(&list, 0, sizeof(list));
    stale_before_ns = prof_clock_ns(CLOCK_REALTIME)
                      - (int64_t) PROF_DUMP_STALE_TEMP_S * 1000000000;

    for (entries_read = 0; entries_read < d->scan_max; entries_read++) {

        de = readdir(dir);
        if (de == NULL) {
            break;
        }

        if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN) {
            continue;
        }

        if (prof_dump_is_temp(de->d_name)) {

            if (fstatat(d->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0
                || !S_ISREG(st.st_mode) || st.st_uid != d->uid
                || prof_timespec_ns(&st.st_mtim) >= stale_before_ns)
            {
                continue;
            }

            if (unlinkat(d->fd, de->d_name, 0) == 0
                && d->temps_removed != NULL)
            {
                prof_counter_add(*d->temps_removed, 1);
            }

            continue;
        }

        if ((d->keep_files == 0 && d->keep_bytes == 0)
            || !prof_dump_is_profile(d, de->d_name))
        {
            continue;
        }

        if (fstatat(d->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0
            || !S_ISREG(st.st_mode) || st.st_uid != d->uid)
        {
            continue;
        }

        if (prof_dump_list_add(&list, de->d_name, &st) != 0) {
            /* Out of memory: delete nothing rather than guess. */
            goto done;
        }
    }

    /*
     * A partial scan (capped, or a read error) only undercounts: it may
     * keep more than the bounds, never delete more.
     */
    prof_dump_retain(d, &list, adding, length);

done:

    prof_dump_list_free(&list);
    (void) closedir(dir);
}


static void __attribute__((format(printf, 3, 4)))
prof_dump_error(char *error, size_t error_size, const char *fmt, ...)
{
    va_list  args;

    if (error == NULL || error_size == 0) {
        return;
    }

    va_start(args, fmt);
    (void) vsnprintf(error, error_size, fmt, args);
    va_end(args);
}


static int
prof_dump_open_fd(const char *path, char *error, size_t error_size)
{
    int          fd, err;
    struct stat  st;

    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        return fd;
    }

    err = errno;

    /* Linux says ENOTDIR for O_DIRECTORY|O_NOFOLLOW on a link: be clear. */
    if ((err == ELOOP || err == ENOTDIR)
        && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
    {
        err = ELOOP;
        prof_dump_error(error, error_size,
                        "dump directory \"%s\" is a symbolic link, which "
                        "is not followed: name the directory it points to",
                        path);

    } else {
        prof_dump_error(error, error_size,
                        "cannot open dump directory \"%s\": %s", path,
                        strerror(err));
    }

    errno = err;
    return -1;
}


/* Creates and removes a file as a write would: fails as writes would. */
static int
prof_dump_probe(prof_dump_dir_t *d)
{
    int   fd;
    char  tmp[NAME_MAX + 1];

    fd = prof_dump_create_temp(d, getpid(), 0, tmp, sizeof(tmp));
    if (fd < 0) {
        return fd;
    }

    (void) close(fd);

    if (unlinkat(d->fd, tmp, 0) != 0) {
        return -errno;
    }

    return 0;
}


prof_dump_dir_t *
prof_dump_dir_open(const char *path, const prof_dump_conf_t *conf,
    char *error, size_t error_size)
{
    int               rc;
    char              dir_path[PATH_MAX];
    size_t            length;
    prof_dump_dir_t  *d;

    if (error != NULL && error_size > 0) {
        error[0] = '\0';
    }

    length = (path != NULL) ? strlen(path) : 0;

    if (length == 0) {
        prof_dump_error(error, error_size, "empty dump directory path");
        errno = EINVAL;
        return NULL;
    }

    if (conf->keep_files > PROF_DUMP_KEEP_FILES_MAX) {
        prof_dump_error(error, error_size,
                        "dump directory \"%s\": more than %d files to keep",
                        path, PROF_DUMP_KEEP_FILES_MAX);
        errno = EINVAL;
        return NULL;
    }

    if (length >= sizeof(dir_path)) {
        prof_dump_error(error, error_size,
                        "cannot open dump directory \"%s\": %s", path,
                        strerror(ENAMETOOLONG));
        errno = ENAMETOOLONG;
        return NULL;
    }

    /* "link/" would follow the link: trailing slashes are dropped. */
    memcpy(dir_path, path, length + 1);

    while (length > 1 && dir_path[length - 1] == '/') {
        dir_path[--length] = '\0';
    }

    d = calloc(1, sizeof(prof_dump_dir_t));
    if (d == NULL) {
        prof_dump_error(error, error_size,
                        "cannot open dump directory \"%s\": %s", dir_path,
                        strerror(ENOMEM));
        errno = ENOMEM;
        return NULL;
    }

    d->fd = prof_dump_open_fd(dir_path, error, error_size);
    if (d->fd < 0) {
        rc = errno;
        free(d);
        errno = rc;
        return NULL;
    }

    d->uid = geteuid();
    d->service_length = prof_dump_component(d->service, sizeof(d->service),
                                            conf->service);
    d->keep_files = conf->keep_files;
    d->keep_bytes = conf->keep_bytes;
    d->scan_max = (conf->keep_files ? conf->keep_files
                                    : PROF_DUMP_KEEP_FILES_MAX)
                  + PROF_DUMP_SCAN_SLACK;
    d->files_deleted = conf->files_deleted;
    d->temps_removed = conf->temps_removed;

    rc = prof_dump_probe(d);
    if (rc != 0) {
        prof_dump_error(error, error_size,
                        "cannot create files in dump directory \"%s\" "
                        "as uid %u: %s", dir_path, (unsigned) d->uid,
                        strerror(-rc));
        (void) close(d->fd);
        free(d);
        errno = -rc;
        return NULL;
    }

    prof_dump_scan(d, 0, 0);

    return d;
}


int
prof_dump_dir_write(prof_dump_dir_t *d, pid_t pid, uint64_t sequence,
    const void *data, size_t length)
{
    int   fd, rc;
    char  name[NAME_MAX + 1], tmp[NAME_MAX + 1];

    if (snprintf(name, sizeof(name), "%s.%d.%llu" PROF_DUMP_SUFFIX,
                 d->service, (int) pid, (unsigned long long) sequence)
        >= (int) sizeof(name))
    {
        return -ENAMETOOLONG;
    }

    fd = prof_dump_create_temp(d, pid, sequence, tmp, sizeof(tmp));
    if (fd < 0) {
        return fd;
    }

    rc = prof_write_all(fd, data, length);

    if (close(fd) != 0 && rc == 0) {
        rc = -errno;
    }

    /* Room for it first: the bounds hold at every moment. */
    if (rc == 0) {
        prof_dump_scan(d, 1, length);
    }

    /*
     * renameat() never follows a symbolic link at the new name: a planted
     * link or file there is replaced as an entry, its target untouched.
     */
    if (rc == 0 && renameat(d->fd, tmp, d->fd, name) != 0) {
        rc = -errno;
    }

    if (rc != 0) {
        (void) unlinkat(d->fd, tmp, 0);
        return rc;
    }

    return 0;
}


void
prof_dump_dir_close(prof_dump_dir_t *d)
{
    if (d == NULL) {
        return;
    }

    (void) close(d->fd);
    free(d);
}
