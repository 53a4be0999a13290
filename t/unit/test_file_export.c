/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the dump directory (shared/profiler/file_export.h): files
 * created only under new random names and renamed without following
 * planted links, the directory held by one descriptor, clear errors at
 * open, retention by count and size over this service's profiles only,
 * stale temporary files removed.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "profiler/file_export.h"


#define NOBODY          65534
#define FORCED_HEX      "0123456789abcdef"
#define SECRET          "secret, not a profile"


typedef struct {
    char   base[64];
    char   dump[128];          /* base/dump, mode 0700 */
    char   target[128];        /* base/target: what planted links aim at */
} fixture_t;


/*
 * getrandom(2) as the file sink sees it: the next forced_draws calls of 8
 * bytes return FORCED_HEX, so that a test can plant the temporary name.
 */

static unsigned  forced_draws;

ssize_t
getrandom(void *buffer, size_t length, unsigned int flags)
{
    static const unsigned char  forced[] = {
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef
    };

    if (forced_draws > 0 && length == sizeof(forced)) {
        forced_draws--;
        memcpy(buffer, forced, sizeof(forced));
        return sizeof(forced);
    }

    return syscall(SYS_getrandom, buffer, length, flags);
}


static int
remove_entry(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
    (void) chmod(path, 0700);
    return remove(path);
}


static int
setup(void **state)
{
    fixture_t  *f;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);

    strcpy(f->base, "/tmp/prof-dump-XXXXXX");
    assert_non_null(mkdtemp(f->base));
    snprintf(f->dump, sizeof(f->dump), "%s/dump", f->base);
    snprintf(f->target, sizeof(f->target), "%s/target", f->base);

    assert_int_equal(mkdir(f->dump, 0700), 0);

    forced_draws = 0;
    *state = f;

    return 0;
}


static int
teardown(void **state)
{
    fixture_t  *f = *state;

    (void) nftw(f->base, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);

    return 0;
}


static void
path_in(char *path, size_t size, const char *dir, const char *name)
{
    assert_true(snprintf(path, size, "%s/%s", dir, name) < (int) size);
}


static void
put_file(const char *dir, const char *name, const char *content,
    size_t length)
{
    int   fd;
    char  path[512];

    path_in(path, sizeof(path), dir, name);

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, length), (ssize_t) length);
    assert_int_equal(close(fd), 0);
}


/* A file of length bytes named name in dir, modified age_s seconds ago. */
static void
put_aged(const char *dir, const char *name, size_t length, int age_s)
{
    char             path[512], *content;
    struct timespec  ts[2];

    content = calloc(1, length + 1);
    assert_non_null(content);
    memset(content, 'x', length);
    put_file(dir, name, content, length);
    free(content);

    path_in(path, sizeof(path), dir, name);
    assert_int_equal(clock_gettime(CLOCK_REALTIME, &ts[0]), 0);
    ts[0].tv_sec -= age_s;
    ts[1] = ts[0];
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}


static void
age(const char *dir, const char *name, int age_s)
{
    char             path[512];
    struct timespec  ts[2];

    path_in(path, sizeof(path), dir, name);
    assert_int_equal(clock_gettime(CLOCK_REALTIME, &ts[0]), 0);
    ts[0].tv_sec -= age_s;
    ts[1] = ts[0];
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}


static void
put_link(const char *dir, const char *name, const char *to)
{
    char  path[512];

    path_in(path, sizeof(path), dir, name);
    assert_int_equal(symlink(to, path), 0);
}


/* The content of a regular file (not through a link), NUL-terminated. */
static char *
read_file(const char *dir, const char *name)
{
    int          fd;
    char         path[512], *content;
    ssize_t      n;
    struct stat  st;

    path_in(path, sizeof(path), dir, name);

    fd = open(path, O_RDONLY | O_NOFOLLOW);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISREG(st.st_mode));

    content = calloc(1, st.st_size + 1);
    assert_non_null(content);
    n = read(fd, content, st.st_size);
    assert_int_equal(n, st.st_size);
    assert_int_equal(close(fd), 0);

    return content;
}


static void
assert_file_is(const char *dir, const char *name, const char *content)
{
    char  *actual;

    actual = read_file(dir, name);
    assert_string_equal(actual, content);
    free(actual);
}


/* lstat()'s file type of name in dir, 0 when it does not exist. */
static mode_t
type_of(const char *dir, const char *name)
{
    char         path[512];
    struct stat  st;

    path_in(path, sizeof(path), dir, name);

    if (lstat(path, &st) != 0) {
        assert_int_equal(errno, ENOENT);
        return 0;
    }

    return st.st_mode & S_IFMT;
}


static unsigned
entries_in(const char *dir)
{
    DIR            *d;
    unsigned        n;
    struct dirent  *de;

    d = opendir(dir);
    assert_non_null(d);

    n = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            n++;
        }
    }

    closedir(d);

    return n;
}


static prof_dump_dir_t *
open_dir(const char *path, uint64_t keep_files, uint64_t keep_bytes,
    uint64_t *files_deleted, uint64_t *temps_removed)
{
    char               error[512];
    prof_dump_dir_t   *d;
    prof_dump_conf_t   conf;

    memset(&conf, 0, sizeof(conf));
    conf.service = "web";
    conf.keep_files = keep_files;
    conf.keep_bytes = keep_bytes;
    conf.files_deleted = files_deleted;
    conf.temps_removed = temps_removed;

    d = prof_dump_dir_open(path, &conf, error, sizeof(error));
    if (d == NULL) {
        fail_msg("%s", error);
    }

    return d;
}


static void
test_profile_is_written_mode_0600_whatever_the_umask(void **state)
{
    fixture_t        *f = *state;
    mode_t            saved;
    struct stat       st;
    prof_dump_dir_t  *d;
    char              path[512];

    d = open_dir(f->dump, 0, 0, NULL, NULL);

    saved = umask(0);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "abc", 3), 0);
    (void) umask(0277);
    assert_int_equal(prof_dump_dir_write(d, 42, 8, "defg", 4), 0);
    (void) umask(saved);

    assert_file_is(f->dump, "web.42.7.pprof", "abc");
    assert_file_is(f->dump, "web.42.8.pprof", "defg");

    path_in(path, sizeof(path), f->dump, "web.42.7.pprof");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    path_in(path, sizeof(path), f->dump, "web.42.8.pprof");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);

    /* No temporary file (nor the probe of open) is left. */
    assert_int_equal(entries_in(f->dump), 2);

    prof_dump_dir_close(d);
}


static void
test_planted_temporary_name_is_never_followed_nor_written(void **state)
{
    fixture_t        *f = *state;
    prof_dump_dir_t  *d;

    put_file(f->base, "target", SECRET, sizeof(SECRET) - 1);
    d = open_dir(f->dump, 0, 0, NULL, NULL);

    /* A link at the very name drawn: another name is drawn. */
    put_link(f->dump, ".web.42.7." FORCED_HEX ".tmp", f->target);
    forced_draws = 1;
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);

    assert_file_is(f->base, "target", SECRET);
    assert_int_equal(type_of(f->dump, ".web.42.7." FORCED_HEX ".tmp"),
                     S_IFLNK);
    assert_file_is(f->dump, "web.42.7.pprof", "profile");

    /* A regular file there is neither truncated nor written. */
    put_file(f->dump, ".web.42.8." FORCED_HEX ".tmp", "planted", 7);
    forced_draws = 1;
    assert_int_equal(prof_dump_dir_write(d, 42, 8, "profile", 7), 0);

    assert_file_is(f->dump, ".web.42.8." FORCED_HEX ".tmp", "planted");
    assert_file_is(f->dump, "web.42.8.pprof", "profile");

    /* Every draw taken: the profile fails, nothing is touched. */
    put_link(f->dump, ".web.42.9." FORCED_HEX ".tmp", f->target);
    forced_draws = 100;
    assert_int_equal(prof_dump_dir_write(d, 42, 9, "profile", 7), -EEXIST);
    forced_draws = 0;

    assert_int_equal(type_of(f->dump, "web.42.9.pprof"), 0);
    assert_int_equal(type_of(f->dump, ".web.42.9." FORCED_HEX ".tmp"),
                     S_IFLNK);
    assert_file_is(f->base, "target", SECRET);
    assert_int_equal(entries_in(f->dump), 5);

    prof_dump_dir_close(d);
}


static void
test_planted_final_name_is_replaced_not_followed(void **state)
{
    fixture_t        *f = *state;
    char              path[512];
    struct stat       st;
    prof_dump_dir_t  *d;

    put_file(f->base, "target", SECRET, sizeof(SECRET) - 1);
    d = open_dir(f->dump, 0, 0, NULL, NULL);

    /* A symbolic link: replaced by the profile, its target untouched. */
    put_link(f->dump, "web.42.7.pprof", f->target);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);

    assert_int_equal(type_of(f->dump, "web.42.7.pprof"), S_IFREG);
    assert_file_is(f->dump, "web.42.7.pprof", "profile");
    assert_file_is(f->base, "target", SECRET);

    /* A hard link to a file elsewhere: the entry goes, the file stays. */
    path_in(path, sizeof(path), f->dump, "web.42.8.pprof");
    assert_int_equal(link(f->target, path), 0);
    assert_int_equal(prof_dump_dir_write(d, 42, 8, "profile", 7), 0);

    assert_file_is(f->dump, "web.42.8.pprof", "profile");
    assert_file_is(f->base, "target", SECRET);
    assert_int_equal(stat(f->target, &st), 0);
    assert_int_equal(st.st_nlink, 1);

    prof_dump_dir_close(d);
}


static void
test_a_failed_write_leaves_nothing(void **state)
{
    fixture_t        *f = *state;
    char              path[512];
    prof_dump_dir_t  *d;

    d = open_dir(f->dump, 0, 0, NULL, NULL);

    /* A directory at the final name: the rename fails. */
    path_in(path, sizeof(path), f->dump, "web.42.7.pprof");
    assert_int_equal(mkdir(path, 0700), 0);

    assert_true(prof_dump_dir_write(d, 42, 7, "profile", 7) < 0);
    assert_int_equal(entries_in(f->dump), 1);
    assert_int_equal(entries_in(path), 0);

    prof_dump_dir_close(d);
}


static void
test_directory_that_is_a_symbolic_link_is_refused(void **state)
{
    fixture_t        *f = *state;
    char              link_path[256], slash_path[256], through[256];
    char              error[512];
    prof_dump_dir_t  *d;
    prof_dump_conf_t  conf;

    memset(&conf, 0, sizeof(conf));
    conf.service = "web";

    path_in(link_path, sizeof(link_path), f->base, "link");
    assert_int_equal(symlink(f->dump, link_path), 0);

    errno = 0;
    d = prof_dump_dir_open(link_path, &conf, error, sizeof(error));
    assert_null(d);
    assert_int_equal(errno, ELOOP);
    assert_non_null(strstr(error, link_path));
    assert_non_null(strstr(error, "is a symbolic link"));

    /* A trailing slash does not make it followed. */
    path_in(slash_path, sizeof(slash_path), link_path, "");
    d = prof_dump_dir_open(slash_path, &conf, error, sizeof(error));
    assert_null(d);
    assert_non_null(strstr(error, "is a symbolic link"));

    /* Links before the last component are followed. */
    path_in(link_path, sizeof(link_path), f->base, "parent");
    assert_int_equal(symlink(f->base, link_path), 0);
    path_in(through, sizeof(through), link_path, "dump/");

    d = prof_dump_dir_open(through, &conf, error, sizeof(error));
    assert_non_null(d);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);
    assert_file_is(f->dump, "web.42.7.pprof", "profile");
    prof_dump_dir_close(d);

    assert_int_equal(entries_in(f->dump), 1);
}


static void
test_directory_is_held_by_its_descriptor(void **state)
{
    fixture_t        *f = *state;
    char              moved[256], other[256];
    prof_dump_dir_t  *d;

    d = open_dir(f->dump, 0, 0, NULL, NULL);

    /* The path now leads elsewhere: profiles still go where they went. */
    path_in(moved, sizeof(moved), f->base, "moved");
    path_in(other, sizeof(other), f->base, "other");
    assert_int_equal(rename(f->dump, moved), 0);
    assert_int_equal(mkdir(other, 0700), 0);
    assert_int_equal(symlink(other, f->dump), 0);

    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);

    assert_file_is(moved, "web.42.7.pprof", "profile");
    assert_int_equal(entries_in(other), 0);

    prof_dump_dir_close(d);
}


static void
assert_open_fails(const char *path, int err, const char *reason)
{
    char               error[512];
    prof_dump_dir_t   *d;
    prof_dump_conf_t   conf;

    memset(&conf, 0, sizeof(conf));
    conf.service = "web";

    errno = 0;
    d = prof_dump_dir_open(path, &conf, error, sizeof(error));

    assert_null(d);
    assert_int_equal(errno, err);
    assert_non_null(strstr(error, path));
    assert_non_null(strstr(error, reason));
}


static void
test_missing_path_or_a_file_is_one_clear_error(void **state)
{
    fixture_t  *f = *state;
    char        path[256];

    path_in(path, sizeof(path), f->base, "missing");
    assert_open_fails(path, ENOENT, strerror(ENOENT));

    path_in(path, sizeof(path), f->base, "missing/dump");
    assert_open_fails(path, ENOENT, strerror(ENOENT));

    put_file(f->base, "file", "x", 1);
    path_in(path, sizeof(path), f->base, "file");
    assert_open_fails(path, ENOTDIR, strerror(ENOTDIR));

    path_in(path, sizeof(path), f->base, "file/dump");
    assert_open_fails(path, ENOTDIR, strerror(ENOTDIR));

    assert_open_fails("", EINVAL, "empty");
}


/*
 * In a child with the worker's privileges (nobody when run as root): a
 * directory it cannot write fails at open, with the reason; one that
 * becomes unwritable fails each write, leaving nothing.
 */
static void
unwritable_child(fixture_t *f, int out)
{
    int                rc;
    char               error[512];
    prof_dump_dir_t   *d;
    prof_dump_conf_t   conf;

    if (geteuid() == 0
        && (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0
            || setuid(NOBODY) != 0))
    {
        _exit(90);
    }

    memset(&conf, 0, sizeof(conf));
    conf.service = "web";

    if (chmod(f->dump, 0500) != 0) {
        _exit(91);
    }

    errno = 0;
    d = prof_dump_dir_open(f->dump, &conf, error, sizeof(error));
    if (d != NULL || errno != EACCES) {
        _exit(92);
    }

    if (write(out, error, strlen(error)) != (ssize_t) strlen(error)) {
        _exit(93);
    }

    if (chmod(f->dump, 0700) != 0) {
        _exit(94);
    }

    d = prof_dump_dir_open(f->dump, &conf, error, sizeof(error));
    if (d == NULL || chmod(f->dump, 0500) != 0) {
        _exit(95);
    }

    rc = prof_dump_dir_write(d, 42, 7, "profile", 7);
    prof_dump_dir_close(d);

    _exit(rc == -EACCES ? 0 : 96);
}


static void
test_unwritable_directory_is_one_clear_error(void **state)
{
    fixture_t  *f = *state;
    int         fds[2], status;
    char        error[512];
    pid_t       pid;
    ssize_t     n;

    /* The worker's user owns the directory and can reach it. */
    assert_int_equal(chmod(f->base, 0755), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(f->dump, NOBODY, NOBODY), 0);
    }

    assert_int_equal(pipe(fds), 0);

    pid = fork();
    assert_true(pid >= 0);

    if (pid == 0) {
        close(fds[0]);
        unwritable_child(f, fds[1]);
    }

    close(fds[1]);
    n = read(fds[0], error, sizeof(error) - 1);
    close(fds[0]);

    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    assert_true(n > 0);
    error[n] = '\0';
    assert_non_null(strstr(error, f->dump));
    assert_non_null(strstr(error, strerror(EACCES)));
    assert_non_null(strstr(error, "cannot create files"));

    assert_int_equal(entries_in(f->dump), 0);
}


static void
test_retention_by_count_deletes_oldest_profiles_only(void **state)
{
    fixture_t        *f = *state;
    char              path[512];
    uint64_t          deleted;
    prof_dump_dir_t  *d;

    put_file(f->base, "target", SECRET, sizeof(SECRET) - 1);

    deleted = 0;
    d = open_dir(f->dump, 3, 0, &deleted, NULL);

    /* Profiles of other workers of the service. */
    put_aged(f->dump, "web.1.1.pprof", 10, 400);
    put_aged(f->dump, "web.2.1.pprof", 10, 300);
    put_aged(f->dump, "web.1.2.pprof", 10, 200);
    put_aged(f->dump, "web.2.2.pprof", 10, 100);

    /* Older, but not this service's profiles, or not regular files. */
    put_aged(f->dump, "other.1.1.pprof", 10, 1000);
    put_aged(f->dump, "web.1.1.pprof.bak", 10, 1000);
    put_aged(f->dump, "web.x.1.pprof", 10, 1000);
    put_aged(f->dump, "web.1.pprof", 10, 1000);
    put_aged(f->dump, "web.1.1.1.pprof", 10, 1000);
    put_aged(f->dump, "web..1.pprof", 10, 1000);
    put_aged(f->dump, "xweb.1.1.pprof", 10, 1000);
    put_aged(f->dump, "web_1.1.pprof", 10, 1000);
    put_aged(f->dump, "web.1.123456789012345678901.pprof", 10, 1000);
    put_aged(f->dump, ".web.1.1.pprof", 10, 1000);
    put_aged(f->dump, "notes.txt", 10, 1000);
    put_link(f->dump, "web.9.9.pprof", f->target);
    age(f->dump, "web.9.9.pprof", 1000);
    path_in(path, sizeof(path), f->dump, "web.8.8.pprof");
    assert_int_equal(mkdir(path, 0700), 0);
    age(f->dump, "web.8.8.pprof", 1000);

    if (geteuid() == 0) {
        /* Someone else's file named like a profile. */
        put_aged(f->dump, "web.7.7.pprof", 10, 1000);
        path_in(path, sizeof(path), f->dump, "web.7.7.pprof");
        assert_int_equal(chown(path, NOBODY, NOBODY), 0);
    }

    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);

    assert_int_equal(deleted, 2);
    assert_int_equal(type_of(f->dump, "web.1.1.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.2.1.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.1.2.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.2.2.pprof"), S_IFREG);
    assert_file_is(f->dump, "web.42.7.pprof", "profile");

    assert_int_equal(type_of(f->dump, "other.1.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.1.1.pprof.bak"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.x.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.1.1.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web..1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "xweb.1.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web_1.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump,
                             "web.1.123456789012345678901.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.1.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "notes.txt"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.9.9.pprof"), S_IFLNK);
    assert_int_equal(type_of(f->dump, "web.8.8.pprof"), S_IFDIR);
    assert_file_is(f->base, "target", SECRET);

    if (geteuid() == 0) {
        assert_int_equal(type_of(f->dump, "web.7.7.pprof"), S_IFREG);
    }

    prof_dump_dir_close(d);
}


static void
test_retention_breaks_mtime_ties_by_name(void **state)
{
    fixture_t        *f = *state;
    char              a[512], b[512];
    uint64_t          deleted;
    struct timespec   ts[2];
    prof_dump_dir_t  *d;

    deleted = 0;
    d = open_dir(f->dump, 2, 0, &deleted, NULL);

    put_file(f->dump, "web.1.9.pprof", "x", 1);
    put_file(f->dump, "web.1.10.pprof", "x", 1);

    ts[0].tv_sec = 1700000000;
    ts[0].tv_nsec = 0;
    ts[1] = ts[0];
    path_in(a, sizeof(a), f->dump, "web.1.9.pprof");
    path_in(b, sizeof(b), f->dump, "web.1.10.pprof");
    assert_int_equal(utimensat(AT_FDCWD, a, ts, 0), 0);
    assert_int_equal(utimensat(AT_FDCWD, b, ts, 0), 0);

    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);

    assert_int_equal(deleted, 1);
    assert_int_equal(type_of(f->dump, "web.1.10.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.1.9.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.42.7.pprof"), S_IFREG);

    prof_dump_dir_close(d);
}


static void
test_retention_by_size_deletes_oldest_first(void **state)
{
    fixture_t        *f = *state;
    char              profile[300];
    uint64_t          deleted;
    prof_dump_dir_t  *d;

    deleted = 0;
    d = open_dir(f->dump, 0, 1000, &deleted, NULL);

    put_aged(f->dump, "web.1.1.pprof", 400, 300);
    put_aged(f->dump, "web.1.2.pprof", 400, 200);
    put_aged(f->dump, "web.1.3.pprof", 400, 100);
    put_aged(f->dump, "other.1.1.pprof", 5000, 1000);

    /* 1,500 bytes: the two oldest go, 700 stay. */
    memset(profile, 'p', sizeof(profile));
    assert_int_equal(prof_dump_dir_write(d, 42, 7, profile, sizeof(profile)),
                     0);

    assert_int_equal(deleted, 2);
    assert_int_equal(type_of(f->dump, "web.1.1.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.1.2.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.1.3.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.42.7.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "other.1.1.pprof"), S_IFREG);

    prof_dump_dir_close(d);
}


static void
test_retention_keeps_the_profile_just_written(void **state)
{
    fixture_t        *f = *state;
    char              profile[100];
    uint64_t          deleted;
    prof_dump_dir_t  *d;

    deleted = 0;
    d = open_dir(f->dump, 0, 10, &deleted, NULL);

    put_aged(f->dump, "web.1.1.pprof", 50, 100);

    memset(profile, 'p', sizeof(profile));
    assert_int_equal(prof_dump_dir_write(d, 42, 7, profile, sizeof(profile)),
                     0);

    assert_int_equal(deleted, 1);
    assert_int_equal(type_of(f->dump, "web.1.1.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.42.7.pprof"), S_IFREG);

    prof_dump_dir_close(d);
}


static void
test_retention_applies_at_open_and_across_workers(void **state)
{
    fixture_t        *f = *state;
    uint64_t          deleted;
    prof_dump_dir_t  *w1, *w2;

    put_aged(f->dump, "web.1.1.pprof", 10, 500);
    put_aged(f->dump, "web.2.1.pprof", 10, 400);
    put_aged(f->dump, "web.3.1.pprof", 10, 300);
    put_aged(f->dump, "web.4.1.pprof", 10, 200);
    put_aged(f->dump, "web.5.1.pprof", 10, 100);

    /* A reload with a lower bound: enforced before the first profile. */
    deleted = 0;
    w1 = open_dir(f->dump, 3, 0, &deleted, NULL);
    assert_int_equal(deleted, 2);
    assert_int_equal(type_of(f->dump, "web.1.1.pprof"), 0);
    assert_int_equal(type_of(f->dump, "web.2.1.pprof"), 0);

    /* Two workers, one bound over both. */
    w2 = open_dir(f->dump, 3, 0, &deleted, NULL);
    assert_int_equal(deleted, 2);

    assert_int_equal(prof_dump_dir_write(w1, 10, 1, "a", 1), 0);
    assert_int_equal(prof_dump_dir_write(w2, 20, 1, "b", 1), 0);

    assert_int_equal(deleted, 4);
    assert_int_equal(entries_in(f->dump), 3);
    assert_int_equal(type_of(f->dump, "web.5.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.10.1.pprof"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.20.1.pprof"), S_IFREG);

    prof_dump_dir_close(w1);
    prof_dump_dir_close(w2);
}


static void
test_stale_temporary_files_are_removed(void **state)
{
    fixture_t        *f = *state;
    char              path[512];
    uint64_t          removed;
    prof_dump_dir_t  *d;

    put_file(f->base, "target", SECRET, sizeof(SECRET) - 1);

    /* Left by workers that died while writing: removed. */
    put_aged(f->dump, ".web.5.3." FORCED_HEX ".tmp", 10, 120);
    put_aged(f->dump, ".other.1.2.fedcba9876543210.tmp", 10, 120);

    /* Being written, or not this module's: kept. */
    put_aged(f->dump, ".web.5.4." FORCED_HEX ".tmp", 10, 5);
    put_aged(f->dump, ".web.5.3.0123456789abcdeg.tmp", 10, 120);
    put_aged(f->dump, ".web.5.3.0123456789ABCDEF.tmp", 10, 120);
    put_aged(f->dump, ".web.5.3.0123456789abcde.tmp", 10, 120);
    put_aged(f->dump, ".web.5." FORCED_HEX ".tmp", 10, 120);
    put_aged(f->dump, "..5.3." FORCED_HEX ".tmp", 10, 120);
    put_aged(f->dump, "web.5.3." FORCED_HEX ".tmp", 10, 120);
    put_aged(f->dump, ".web.5.3." FORCED_HEX ".tmp.bak", 10, 120);
    put_link(f->dump, ".web.5.5." FORCED_HEX ".tmp", f->target);
    age(f->dump, ".web.5.5." FORCED_HEX ".tmp", 120);
    path_in(path, sizeof(path), f->dump, ".web.5.6." FORCED_HEX ".tmp");
    assert_int_equal(mkdir(path, 0700), 0);
    age(f->dump, ".web.5.6." FORCED_HEX ".tmp", 120);

    if (geteuid() == 0) {
        put_aged(f->dump, ".web.5.7." FORCED_HEX ".tmp", 10, 120);
        path_in(path, sizeof(path), f->dump, ".web.5.7." FORCED_HEX ".tmp");
        assert_int_equal(chown(path, NOBODY, NOBODY), 0);
        age(f->dump, ".web.5.7." FORCED_HEX ".tmp", 120);
    }

    removed = 0;
    d = open_dir(f->dump, 0, 0, NULL, &removed);

    assert_int_equal(removed, 2);
    assert_int_equal(type_of(f->dump, ".web.5.3." FORCED_HEX ".tmp"), 0);
    assert_int_equal(type_of(f->dump, ".other.1.2.fedcba9876543210.tmp"), 0);

    assert_int_equal(type_of(f->dump, ".web.5.4." FORCED_HEX ".tmp"),
                     S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.5.3.0123456789abcdeg.tmp"),
                     S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.5.3.0123456789ABCDEF.tmp"),
                     S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.5.3.0123456789abcde.tmp"),
                     S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.5." FORCED_HEX ".tmp"), S_IFREG);
    assert_int_equal(type_of(f->dump, "..5.3." FORCED_HEX ".tmp"), S_IFREG);
    assert_int_equal(type_of(f->dump, "web.5.3." FORCED_HEX ".tmp"),
                     S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.5.3." FORCED_HEX ".tmp.bak"),
                     S_IFREG);
    assert_int_equal(type_of(f->dump, ".web.5.5." FORCED_HEX ".tmp"),
                     S_IFLNK);
    assert_int_equal(type_of(f->dump, ".web.5.6." FORCED_HEX ".tmp"),
                     S_IFDIR);
    assert_file_is(f->base, "target", SECRET);

    if (geteuid() == 0) {
        assert_int_equal(type_of(f->dump, ".web.5.7." FORCED_HEX ".tmp"),
                         S_IFREG);
    }

    /* A write's scan removes those that became stale since. */
    age(f->dump, ".web.5.4." FORCED_HEX ".tmp", 120);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "profile", 7), 0);
    assert_int_equal(removed, 3);
    assert_int_equal(type_of(f->dump, ".web.5.4." FORCED_HEX ".tmp"), 0);

    prof_dump_dir_close(d);
}


static void
test_service_name_stays_one_file_name(void **state)
{
    fixture_t        *f = *state;
    char              error[512];
    prof_dump_dir_t  *d;
    prof_dump_conf_t  conf;

    memset(&conf, 0, sizeof(conf));

    conf.service = "../x/y";
    d = prof_dump_dir_open(f->dump, &conf, error, sizeof(error));
    assert_non_null(d);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "a", 1), 0);
    prof_dump_dir_close(d);
    assert_file_is(f->dump, "_._x_y.42.7.pprof", "a");

    conf.service = "";
    d = prof_dump_dir_open(f->dump, &conf, error, sizeof(error));
    assert_non_null(d);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "b", 1), 0);
    prof_dump_dir_close(d);
    assert_file_is(f->dump, "_.42.7.pprof", "b");

    conf.service = ".hidden";
    d = prof_dump_dir_open(f->dump, &conf, error, sizeof(error));
    assert_non_null(d);
    assert_int_equal(prof_dump_dir_write(d, 42, 7, "c", 1), 0);
    prof_dump_dir_close(d);
    assert_file_is(f->dump, "_hidden.42.7.pprof", "c");

    assert_int_equal(entries_in(f->dump), 3);
    assert_int_equal(entries_in(f->base), 1);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name)  cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_profile_is_written_mode_0600_whatever_the_umask),
        T(test_planted_temporary_name_is_never_followed_nor_written),
        T(test_planted_final_name_is_replaced_not_followed),
        T(test_a_failed_write_leaves_nothing),
        T(test_directory_that_is_a_symbolic_link_is_refused),
        T(test_directory_is_held_by_its_descriptor),
        T(test_missing_path_or_a_file_is_one_clear_error),
        T(test_unwritable_directory_is_one_clear_error),
        T(test_retention_by_count_deletes_oldest_profiles_only),
        T(test_retention_breaks_mtime_ties_by_name),
        T(test_retention_by_size_deletes_oldest_first),
        T(test_retention_keeps_the_profile_just_written),
        T(test_retention_applies_at_open_and_across_workers),
        T(test_stale_temporary_files_are_removed),
        T(test_service_name_stays_one_file_name),
#undef T
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
