/*
 * File sink: writes an encoded profile to <dir>/<service>.<pid>.<seq>.pprof
 * through a temporary name and a rename, so that a reader never sees half
 * a file. Files are created readable by their owner only (0600).
 *
 * Threading: any thread; blocking file I/O (the profiler loop thread).
 */

#ifndef PROF_FILE_EXPORT_H
#define PROF_FILE_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


/* 0 or -errno; on error nothing is left behind. */
int prof_file_export(const char *dir, const char *service, pid_t pid,
    uint64_t sequence, const void *data, size_t length);


#endif /* PROF_FILE_EXPORT_H */
