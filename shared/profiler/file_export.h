/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Dump directory: writes encoded profiles to <dir>/<service>.<pid>.<seq>.pprof
 * and keeps the directory within a bound on the count and size of profiles.
 *
 * The directory is opened once; every name is then resolved relative to
 * that descriptor, so renaming or replacing the path later does not move
 * the profiles. Its last component must not be a symbolic link (refused
 * with a message saying so; name the link's target instead); the
 * components before it are followed. A profile is written to a new file
 * .<service>.<pid>.<seq>.<16 random hex digits>.tmp, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW and set to mode 0600 on its descriptor, then
 * renamed to its final name: a name planted in the directory (file or
 * symbolic link) is never followed, written or read; a planted final name
 * is replaced as a directory entry, what it pointed to is untouched.
 *
 * Retention: before each profile is renamed in (and at open) the
 * directory is scanned,
 * reading at most keep_files (PROF_DUMP_KEEP_FILES_MAX when 0) +
 * PROF_DUMP_SCAN_SLACK entries: a scan cut short keeps more than the
 * bounds, never deletes more. Regular files owned by this process's
 * effective user and named <service>.<pid>.<seq>.pprof for this service,
 * whichever worker wrote them, are counted; past keep_files files or
 * keep_bytes bytes, counting the profile about to be added, the oldest
 * (by mtime, then name) are deleted: the directory never holds more than
 * the bounds (but the new profile alone, when it is larger). The same scan deletes this module's temporary
 * files (of any service) older than PROF_DUMP_STALE_TEMP_S seconds, left
 * by a process that died while writing. Nothing else is ever deleted;
 * symbolic links and other non-regular files are skipped. Several
 * processes may share a directory: a file another one deleted first is
 * not an error.
 *
 * Threading: prof_dump_dir_open, prof_dump_dir_write and
 * prof_dump_dir_close may be called from any thread, but not concurrently
 * on the same object (the profiler loop thread writes). They block on
 * file I/O. The counters given in the configuration are added to with
 * relaxed atomics (prof_counter_add) and may be read by any thread.
 * Memory: the object copies what it needs from the configuration.
 */

#ifndef PROF_FILE_EXPORT_H
#define PROF_FILE_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


#define PROF_DUMP_KEEP_FILES_DEFAULT  1000
#define PROF_DUMP_KEEP_BYTES_DEFAULT  (256 * 1024 * 1024)
#define PROF_DUMP_KEEP_FILES_MAX      100000
#define PROF_DUMP_SCAN_SLACK          10000   /* other entries read */
#define PROF_DUMP_STALE_TEMP_S        60


typedef struct {
    const char  *service;         /* the file name prefix; characters other
                                     than [A-Za-z0-9._-] become '_' */
    uint64_t     keep_files;      /* 0: no bound on the count, else at most
                                     PROF_DUMP_KEEP_FILES_MAX */
    uint64_t     keep_bytes;      /* 0: no bound on the size */
    uint64_t    *files_deleted;   /* NULL, or counts files retention
                                     deleted */
    uint64_t    *temps_removed;   /* NULL, or counts stale temporary files
                                     removed */
} prof_dump_conf_t;

typedef struct prof_dump_dir_s  prof_dump_dir_t;


/*
 * Opens the directory and checks that this process can create files in it
 * (a probe file, removed at once), then applies retention. On failure
 * returns NULL with errno set and, in error (may be NULL), one line naming
 * the path and the reason.
 */
prof_dump_dir_t *prof_dump_dir_open(const char *path,
    const prof_dump_conf_t *conf, char *error, size_t error_size);

/*
 * Writes one profile, then applies retention. 0 or -errno; on error
 * nothing is left behind and no earlier profile is deleted.
 */
int prof_dump_dir_write(prof_dump_dir_t *d, pid_t pid, uint64_t sequence,
    const void *data, size_t length);

void prof_dump_dir_close(prof_dump_dir_t *d);


#endif /* PROF_FILE_EXPORT_H */
