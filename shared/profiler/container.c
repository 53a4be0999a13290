/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The container id from /proc/self/cgroup, and the cgroup's inode.
 */

#define _GNU_SOURCE

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profiler/container.h"


#define PROF_CGROUP_MAX   (16 * 1024)
#define PROF_CGROUP_ROOT  "/sys/fs/cgroup"


static int
prof_is_hex(const char *s, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return 0;
        }
    }

    return 1;
}


static int
prof_is_digits(const char *s, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
    }

    return n > 0;
}


/* A container id: 64 hex, <32 hex>-<digits> (ECS), or a UUID. */
static int
prof_is_container_id(const char *s, size_t n)
{
    if (n == 64) {
        return prof_is_hex(s, 64);
    }

    if (n == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-'
        && s[23] == '-')
    {
        return prof_is_hex(s, 8) && prof_is_hex(s + 9, 4)
               && prof_is_hex(s + 14, 4) && prof_is_hex(s + 19, 4)
               && prof_is_hex(s + 24, 12);
    }

    if (n > 33 && s[32] == '-') {
        return prof_is_hex(s, 32) && prof_is_digits(s + 33, n - 33);
    }

    return 0;
}


/* The id in a path's last component, without a runtime's prefix. */
static size_t
prof_path_id(const char *path, size_t n, const char **id)
{
    size_t       i, k, len;
    const char  *last;

    static const char  *prefixes[] = {
        "docker-", "cri-containerd-", "crio-", "libpod-", NULL
    };

    last = path;
    for (i = 0; i < n; i++) {
        if (path[i] == '/') {
            last = path + i + 1;
        }
    }

    len = path + n - last;

    if (len > 6 && memcmp(last + len - 6, ".scope", 6) == 0) {
        len -= 6;
    }

    for (k = 0; prefixes[k] != NULL; k++) {
        i = strlen(prefixes[k]);
        if (len > i && memcmp(last, prefixes[k], i) == 0) {
            last += i;
            len -= i;
            break;
        }
    }

    if (!prof_is_container_id(last, len)) {
        return 0;
    }

    *id = last;

    return len;
}


int
prof_container_parse(const char *text, size_t length, char *id,
    size_t id_size, char *v2_path, size_t path_size)
{
    int          lines;
    size_t       n, plen;
    const char  *line, *end, *nl, *path, *found;

    id[0] = '\0';
    v2_path[0] = '\0';
    lines = 0;

    for (line = text, end = text + length; line < end; line = nl + 1) {
        nl = memchr(line, '\n', end - line);
        if (nl == NULL) {
            nl = end;
        }

        /* hierarchy-ID:controllers:path */
        path = memchr(line, ':', nl - line);
        if (path != NULL) {
            path = memchr(path + 1, ':', nl - path - 1);
        }
        if (path == NULL) {
            continue;
        }

        path++;
        plen = nl - path;
        lines++;

        if (nl - line >= 3 && memcmp(line, "0::", 3) == 0
            && plen < path_size)
        {
            memcpy(v2_path, path, plen);
            v2_path[plen] = '\0';
        }

        if (id[0] == '\0') {
            n = prof_path_id(path, plen, &found);
            if (n > 0 && n < id_size) {
                memcpy(id, found, n);
                id[n] = '\0';
            }
        }
    }

    return lines ? 0 : -1;
}


void
prof_container_entity(prof_container_t *c, uint64_t cgroup_inode)
{
    if (c->container_id[0] != '\0') {
        snprintf(c->entity_id, sizeof(c->entity_id), "ci-%s",
                 c->container_id);

    } else if (cgroup_inode != 0) {
        snprintf(c->entity_id, sizeof(c->entity_id), "in-%llu",
                 (unsigned long long) cgroup_inode);

    } else {
        c->entity_id[0] = '\0';
    }
}


void
prof_container_detect(prof_container_t *c)
{
    int          fd;
    char         text[PROF_CGROUP_MAX], v2[1024], path[1100];
    ssize_t      n, got;
    uint64_t     inode;
    struct stat  st;

    memset(c, 0, sizeof(prof_container_t));

    fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }

    got = 0;
    while (got < (ssize_t) sizeof(text) - 1
           && (n = read(fd, text + got, sizeof(text) - 1 - got)) > 0)
    {
        got += n;
    }

    close(fd);

    if (prof_container_parse(text, (size_t) got, c->container_id,
                             sizeof(c->container_id), v2, sizeof(v2)) != 0)
    {
        return;
    }

    inode = 0;

    /* cgroup v2: the inode of the process's own cgroup, not the root's. */
    if (c->container_id[0] == '\0' && v2[0] != '\0'
        && strcmp(v2, "/") != 0)
    {
        snprintf(path, sizeof(path), "%s%s", PROF_CGROUP_ROOT, v2);

        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            inode = (uint64_t) st.st_ino;
        }
    }

    prof_container_entity(c, inode);
}
