/*
 * File sink: temporary file, full write, rename.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "file_export.h"


/* A service name is user data: keep it to one harmless path component. */
static void
prof_file_component(char *dst, size_t size, const char *src)
{
    size_t  i;
    char    c;

    for (i = 0; i + 1 < size && src[i] != '\0'; i++) {
        c = src[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '-' || c == '_'
              || (c == '.' && i > 0)))
        {
            c = '_';
        }
        dst[i] = c;
    }

    dst[i] = '\0';
}


static int
prof_write_all(int fd, const unsigned char *p, size_t length)
{
    ssize_t  n;

    while (length > 0) {
        n = write(fd, p, length);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += n;
        length -= n;
    }

    return 0;
}


int
prof_file_export(const char *dir, const char *service, pid_t pid,
    uint64_t sequence, const void *data, size_t length)
{
    int   fd, rc;
    char  name[128], path[PATH_MAX], tmp[PATH_MAX];

    prof_file_component(name, sizeof(name), service);

    if (snprintf(path, sizeof(path), "%s/%s.%d.%llu.pprof", dir, name,
                 (int) pid, (unsigned long long) sequence)
            >= (int) sizeof(path)
        || snprintf(tmp, sizeof(tmp), "%s/.%s.%d.%llu.pprof.tmp", dir, name,
                    (int) pid, (unsigned long long) sequence)
            >= (int) sizeof(tmp))
    {
        return -ENAMETOOLONG;
    }

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -errno;
    }

    rc = prof_write_all(fd, data, length);

    if (close(fd) != 0 && rc == 0) {
        rc = -errno;
    }

    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -errno;
    }

    if (rc != 0) {
        (void) unlink(tmp);
    }

    return rc;
}
