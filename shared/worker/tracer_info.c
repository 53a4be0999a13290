/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The Datadog tracer's self-description: found among this process's file
 * descriptors, read with pread (the file's offset is the tracer's), and
 * parsed as a MessagePack map of which only string values are kept.
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/tracer_info.h"


#define PROF_TRACER_INFO_NAME  "/memfd:datadog-tracer-info-"
#define PROF_TRACER_INFO_MAX   (64 * 1024)      /* bytes read, at most */
#define PROF_MSGPACK_DEPTH     8


typedef struct {
    const uint8_t  *pos;
    const uint8_t  *end;
} prof_mp_t;


static int
prof_mp_uint(prof_mp_t *m, size_t n, uint64_t *value)
{
    size_t  i;

    if ((size_t) (m->end - m->pos) < n) {
        return -1;
    }

    *value = 0;
    for (i = 0; i < n; i++) {
        *value = (*value << 8) | m->pos[i];
    }

    m->pos += n;

    return 0;
}


/* A string's bytes: 0, 1 when the value is not a string, -1 malformed. */
static int
prof_mp_str(prof_mp_t *m, const uint8_t **s, size_t *len)
{
    uint8_t   b;
    uint64_t  n;

    if (m->pos >= m->end) {
        return -1;
    }

    b = *m->pos;

    if (b >= 0xa0 && b <= 0xbf) {
        m->pos++;
        n = b & 0x1f;

    } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
        m->pos++;
        if (prof_mp_uint(m, (size_t) 1 << (b - 0xd9), &n) != 0) {
            return -1;
        }

    } else {
        return 1;
    }

    if ((uint64_t) (m->end - m->pos) < n) {
        return -1;
    }

    *s = m->pos;
    *len = (size_t) n;
    m->pos += n;

    return 0;
}


/* Skips one value of any type; -1 when malformed or too deep. */
static int
prof_mp_skip(prof_mp_t *m, unsigned depth)
{
    uint8_t   b;
    uint64_t  n, i;

    if (m->pos >= m->end || depth > PROF_MSGPACK_DEPTH) {
        return -1;
    }

    b = *m->pos++;

    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        return 0;                                   /* ints, nil, bool */
    }

    if (b >= 0xa0 && b <= 0xbf) {
        n = b & 0x1f;
        goto bytes;
    }

    if (b >= 0x90 && b <= 0x9f) {
        n = b & 0x0f;
        goto array;
    }

    if (b >= 0x80 && b <= 0x8f) {
        n = (uint64_t) (b & 0x0f) * 2;
        goto array;
    }

    switch (b) {
    case 0xcc: case 0xd0: n = 1; goto fixed;
    case 0xcd: case 0xd1: n = 2; goto fixed;
    case 0xca: case 0xce: case 0xd2: n = 4; goto fixed;
    case 0xcb: case 0xcf: case 0xd3: n = 8; goto fixed;
    case 0xd4: n = 2; goto fixed;
    case 0xd5: n = 3; goto fixed;
    case 0xd6: n = 5; goto fixed;
    case 0xd7: n = 9; goto fixed;
    case 0xd8: n = 17; goto fixed;

    case 0xc4: case 0xd9:
        if (prof_mp_uint(m, 1, &n) != 0) { return -1; }
        goto bytes;
    case 0xc5: case 0xda:
        if (prof_mp_uint(m, 2, &n) != 0) { return -1; }
        goto bytes;
    case 0xc6: case 0xdb:
        if (prof_mp_uint(m, 4, &n) != 0) { return -1; }
        goto bytes;

    case 0xc7:
        if (prof_mp_uint(m, 1, &n) != 0) { return -1; }
        n++;
        goto bytes;
    case 0xc8:
        if (prof_mp_uint(m, 2, &n) != 0) { return -1; }
        n++;
        goto bytes;
    case 0xc9:
        if (prof_mp_uint(m, 4, &n) != 0) { return -1; }
        n++;
        goto bytes;

    case 0xdc:
        if (prof_mp_uint(m, 2, &n) != 0) { return -1; }
        goto array;
    case 0xdd:
        if (prof_mp_uint(m, 4, &n) != 0) { return -1; }
        goto array;
    case 0xde:
        if (prof_mp_uint(m, 2, &n) != 0) { return -1; }
        n *= 2;
        goto array;
    case 0xdf:
        if (prof_mp_uint(m, 4, &n) != 0) { return -1; }
        n *= 2;
        goto array;

    default:
        return -1;
    }

fixed:
bytes:

    if ((uint64_t) (m->end - m->pos) < n) {
        return -1;
    }
    m->pos += n;
    return 0;

array:

    /* Each element is at least a byte: more than that is malformed. */
    if (n > (uint64_t) (m->end - m->pos)) {
        return -1;
    }

    for (i = 0; i < n; i++) {
        if (prof_mp_skip(m, depth + 1) != 0) {
            return -1;
        }
    }

    return 0;
}


static void
prof_tracer_info_set(char *dst, const uint8_t *s, size_t len)
{
    if (len >= PROF_TRACER_INFO_VALUE_MAX) {
        len = PROF_TRACER_INFO_VALUE_MAX - 1;
    }

    memcpy(dst, s, len);
    dst[len] = '\0';
}


int
prof_tracer_info_parse(prof_tracer_info_t *info, const void *data,
    size_t size)
{
    int             rc;
    size_t          klen, vlen;
    uint8_t         b;
    uint64_t        n, i;
    prof_mp_t       m;
    const uint8_t  *k, *v;

    memset(info, 0, sizeof(prof_tracer_info_t));

    m.pos = data;
    m.end = m.pos + size;

    if (m.pos >= m.end) {
        return -1;
    }

    b = *m.pos++;

    if (b >= 0x80 && b <= 0x8f) {
        n = b & 0x0f;

    } else if (b == 0xde) {
        if (prof_mp_uint(&m, 2, &n) != 0) {
            return -1;
        }

    } else if (b == 0xdf) {
        if (prof_mp_uint(&m, 4, &n) != 0) {
            return -1;
        }

    } else {
        return -1;
    }

    for (i = 0; i < n; i++) {
        if (prof_mp_str(&m, &k, &klen) != 0) {
            return -1;
        }

        rc = prof_mp_str(&m, &v, &vlen);
        if (rc < 0) {
            return -1;
        }

        if (rc == 1) {
            if (prof_mp_skip(&m, 0) != 0) {
                return -1;
            }
            continue;
        }

#define prof_key_is(name)                                                     \
    (klen == sizeof(name) - 1 && memcmp(k, name, klen) == 0)

        if (prof_key_is("runtime_id")) {
            prof_tracer_info_set(info->runtime_id, v, vlen);
        } else if (prof_key_is("service_name")) {
            prof_tracer_info_set(info->service, v, vlen);
        } else if (prof_key_is("service_env")) {
            prof_tracer_info_set(info->env, v, vlen);
        } else if (prof_key_is("service_version")) {
            prof_tracer_info_set(info->version, v, vlen);
        }

#undef prof_key_is
    }

    return (info->runtime_id[0] != '\0') ? 0 : -1;
}


/* The descriptor's file, read from its start, if it is the tracer's. */
static int
prof_tracer_info_try(prof_tracer_info_t *info, int dirfd, const char *name)
{
    int          fd, rc;
    char         path[64], target[256];
    ssize_t      n, got;
    unsigned char  *buf;

    n = readlinkat(dirfd, name, target, sizeof(target) - 1);
    if (n <= 0) {
        return -1;
    }
    target[n] = '\0';

    if (strncmp(target, PROF_TRACER_INFO_NAME,
                sizeof(PROF_TRACER_INFO_NAME) - 1) != 0)
    {
        return -1;
    }

    /* A descriptor of our own: the tracer's offset stays where it is. */
    snprintf(path, sizeof(path), "/proc/self/fd/%s", name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }

    buf = malloc(PROF_TRACER_INFO_MAX);
    if (buf == NULL) {
        close(fd);
        return -1;
    }

    got = 0;
    while (got < PROF_TRACER_INFO_MAX) {
        n = pread(fd, buf + got, PROF_TRACER_INFO_MAX - got, got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        got += n;
    }

    close(fd);

    rc = prof_tracer_info_parse(info, buf, (size_t) got);
    free(buf);

    return rc;
}


int
prof_tracer_info_read(prof_tracer_info_t *info)
{
    int             rc;
    DIR            *dir;
    struct dirent  *e;

    dir = opendir("/proc/self/fd");
    if (dir == NULL) {
        return -1;
    }

    rc = -1;

    while (rc != 0 && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') {
            rc = prof_tracer_info_try(info, dirfd(dir), e->d_name);
        }
    }

    closedir(dir);

    return rc;
}
