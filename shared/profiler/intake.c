/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Intake documents: tags, event.json, code-provenance.json (with the dpkg
 * package and version of each loaded object), runtime id.
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "profiler/intake.h"
#include "common/clock.h"
#include "common/intern.h"
#include "common/utf8.h"


#define PROF_DPKG_INFO    "/var/lib/dpkg/info"
#define PROF_DPKG_STATUS  "/var/lib/dpkg/status"
#define PROF_PACKAGES_MAX 256


/* What dpkg says of an object's file, cached for the process. */
typedef struct {
    char    *path;
    char    *package;       /* NULL: in no package */
    char    *version;
} prof_package_t;


static prof_package_t  prof_packages[PROF_PACKAGES_MAX];
static size_t          prof_package_count;


/*
 * A tag's key or value: valid UTF-8 (prof_utf8_append), and neither a
 * comma (it would split the tag) nor a control character: '_' instead.
 */
static int
prof_append_tag_text(prof_buffer_t *out, const char *s, size_t length)
{
    size_t          i;
    unsigned char   c;

    i = out->length;

    if (prof_utf8_append(out, s, length) != 0) {
        return -ENOMEM;
    }

    for ( /* void */ ; i < out->length; i++) {
        c = out->data[i];
        if (c == ',' || c < 0x20 || c == 0x7f) {
            out->data[i] = '_';
        }
    }

    return 0;
}


/*
 * ",key:value" (no comma first); no tag when the value is missing or only
 * blanks. Keys and values are user data: blanks around the value are cut.
 */
static int
prof_append_tag(prof_buffer_t *out, const char *key, const char *value)
{
    size_t  start, end;

    if (value == NULL) {
        return 0;
    }

    start = 0;
    end = strlen(value);

    while (start < end && value[start] == ' ') {
        start++;
    }
    while (end > start && value[end - 1] == ' ') {
        end--;
    }

    if (start == end || key[0] == '\0') {
        return 0;
    }

    if (out->length > 0 && prof_buffer_append(out, ",", 1) != 0) {
        return -ENOMEM;
    }

    if (prof_append_tag_text(out, key, strlen(key)) != 0
        || prof_buffer_append(out, ":", 1) != 0
        || prof_append_tag_text(out, value + start, end - start) != 0)
    {
        return -ENOMEM;
    }

    return 0;
}


int
prof_intake_tags(prof_buffer_t *out, const prof_intake_conf_t *conf,
    uint64_t sequence)
{
    int          rc;
    char         pid[32], seq[32], key[128];
    size_t       i, n;
    const char  *tag, *colon;

    snprintf(pid, sizeof(pid), "%d", (int) conf->pid);
    snprintf(seq, sizeof(seq), "%llu", (unsigned long long) sequence);

    rc = prof_append_tag(out, "service", conf->service)
         | prof_append_tag(out, "env", conf->env)
         | prof_append_tag(out, "version", conf->version)
         | prof_append_tag(out, "host", conf->host)
         | prof_append_tag(out, "language", "native")
         | prof_append_tag(out, "runtime", "nginx")
         | prof_append_tag(out, "runtime_version", conf->runtime_version)
         | prof_append_tag(out, "runtime_os", conf->runtime_os)
         | prof_append_tag(out, "runtime_arch", conf->runtime_arch)
         | prof_append_tag(out, "format", "pprof")
         | prof_append_tag(out, "runtime-id", conf->runtime_id)
         | prof_append_tag(out, "process_id", pid)
         | prof_append_tag(out, "profiler_version", conf->profiler_version)
         | prof_append_tag(out, "profile_seq", seq);

    for (i = 0; i < conf->user_tag_count; i++) {
        tag = conf->user_tags[i];
        colon = strchr(tag, ':');
        if (colon == NULL) {
            continue;
        }

        n = colon - tag;
        if (n == 0 || n >= sizeof(key)) {
            continue;
        }

        memcpy(key, tag, n);
        key[n] = '\0';

        rc |= prof_append_tag(out, key, colon + 1);
    }

    return rc ? -ENOMEM : 0;
}



/*
 * endpoint_counts: {"name":count,...}, or null. Names are written as the
 * pprof's "trace endpoint" labels show them (sanitized UTF-8), so two
 * names that differ only in invalid bytes are one key, with the sum of
 * their counts (a JSON object must not repeat a key).
 */
static int
prof_append_endpoint_counts(prof_buffer_t *out,
    const prof_intake_profile_t *profile)
{
    int             rc, inserted;
    size_t          i, length;
    int64_t         index;
    uint64_t       *sums;
    const char     *name;
    prof_intern_t   names;
    prof_buffer_t   sanitized = { NULL, 0, 0 };

    if (profile->endpoint_count == 0) {
        return prof_buffer_append_str(out, "null");
    }

    sums = calloc(profile->endpoint_count, sizeof(uint64_t));
    if (sums == NULL) {
        return -ENOMEM;
    }

    prof_intern_init(&names);
    rc = 0;

    for (i = 0; i < profile->endpoint_count; i++) {
        name = profile->endpoints[i];
        sanitized.length = 0;

        if (prof_utf8_append(&sanitized, name, strlen(name)) != 0) {
            rc = -ENOMEM;
            break;
        }

        index = prof_intern(&names, sanitized.data, sanitized.length,
                            &inserted);
        if (index < 0) {
            rc = -ENOMEM;
            break;
        }

        sums[index] += profile->endpoint_counts[i];
    }

    rc |= prof_buffer_append_str(out, "{");

    for (i = 0; rc == 0 && i < names.count; i++) {
        name = prof_intern_key(&names, i, &length);

        rc |= prof_buffer_append_str(out, i ? "," : "");
        rc |= prof_utf8_append_json(out, name, length);
        rc |= prof_buffer_printf(out, ":%llu", (unsigned long long) sums[i]);
    }

    rc |= prof_buffer_append_str(out, "}");

    prof_buffer_free(&sanitized);
    prof_intern_free(&names);
    free(sums);

    return rc ? -ENOMEM : 0;
}


int
prof_intake_event_json(prof_buffer_t *out, const prof_intake_conf_t *conf,
    const prof_intake_profile_t *profile, const char * const *attachments,
    size_t attachment_count)
{
    int            rc;
    char           start[64], end[64];
    size_t         i;
    prof_buffer_t  tags = { NULL, 0, 0 };

    if (prof_intake_tags(&tags, conf, profile->sequence) != 0
        || (profile->remote_symbols
            && prof_append_tag(&tags, "remote_symbols", "yes") != 0))
    {
        prof_buffer_free(&tags);
        return -ENOMEM;
    }

    prof_rfc3339(start, profile->start_realtime_ns);
    prof_rfc3339(end, profile->start_realtime_ns
                             + profile->duration_ns);

    rc = prof_buffer_append_str(out, "{\"attachments\":[");

    for (i = 0; i < attachment_count; i++) {
        rc |= prof_buffer_append_str(out, i ? "," : "");
        rc |= prof_utf8_append_json(out, attachments[i],
                                    strlen(attachments[i]));
    }

    rc |= prof_buffer_append_str(out, "],\"tags_profiler\":");
    rc |= prof_utf8_append_json(out, tags.length ? (char *) tags.data : "",
                                tags.length);
    rc |= prof_buffer_printf(out, ",\"start\":\"%s\",\"end\":\"%s\","
                             "\"family\":\"native\",\"version\":\"4\","
                             "\"endpoint_counts\":", start, end);

    rc |= prof_append_endpoint_counts(out, profile);

    rc |= prof_buffer_append_str(out, ",\"internal\":{},\"info\":{"
                                 "\"application\":{\"service\":");
    rc |= prof_utf8_append_json(out, conf->service, strlen(conf->service));
    rc |= prof_buffer_append_str(out, "},\"platform\":{\"hostname\":");
    rc |= prof_utf8_append_json(out, conf->host, strlen(conf->host));
    rc |= prof_buffer_append_str(out, ",\"runtime_engine\":\"nginx\","
                                 "\"runtime_version\":");
    rc |= prof_utf8_append_json(out, conf->runtime_version,
                                strlen(conf->runtime_version));
    rc |= prof_buffer_append_str(out, "},\"profiler\":{\"version\":");
    rc |= prof_utf8_append_json(out, conf->profiler_version,
                                strlen(conf->profiler_version));
    rc |= prof_buffer_append_str(out, "}}}");

    prof_buffer_free(&tags);

    return rc ? -ENOMEM : 0;
}


int
prof_intake_uuid(char *uuid)
{
    unsigned char  b[16];

    if (getrandom(b, sizeof(b), 0) != (ssize_t) sizeof(b)) {
        return -errno;
    }

    b[6] = (b[6] & 0x0f) | 0x40;        /* version 4 */
    b[8] = (b[8] & 0x3f) | 0x80;        /* variant 10 */

    snprintf(uuid, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
             b[10], b[11], b[12], b[13], b[14], b[15]);

    return 0;
}


static prof_package_t *
prof_package_find(const char *path)
{
    size_t  i;

    for (i = 0; i < prof_package_count; i++) {
        if (strcmp(prof_packages[i].path, path) == 0) {
            return &prof_packages[i];
        }
    }

    return NULL;
}


/*
 * Finds, in one pass over dpkg's lists, the package of each new path: one
 * hash lookup per listed file. dpkg lists /lib/... where the merged /usr
 * shows /usr/lib/..., so a path is also looked up without its "/usr".
 */
static void
prof_package_scan(void)
{
    DIR             *dir;
    FILE            *f;
    int              inserted;
    char            *line, *name, *colon;
    size_t           cap, i, length;
    int64_t          index;
    ssize_t          n;
    struct dirent   *de;
    prof_intern_t    wanted;
    size_t           which[2 * PROF_PACKAGES_MAX];
    char             listpath[512];
    const char      *path;

    prof_intern_init(&wanted);

    for (i = 0; i < prof_package_count; i++) {
        if (prof_packages[i].package != NULL) {
            continue;
        }

        path = prof_packages[i].path;

        index = prof_intern(&wanted, path, strlen(path), &inserted);
        if (index >= 0 && inserted) {
            which[index] = i;
        }

        if (strncmp(path, "/usr/", 5) == 0) {
            index = prof_intern(&wanted, path + 4, strlen(path + 4),
                                &inserted);
            if (index >= 0 && inserted) {
                which[index] = i;
            }
        }
    }

    dir = (wanted.count > 0) ? opendir(PROF_DPKG_INFO) : NULL;
    if (dir == NULL) {
        prof_intern_free(&wanted);
        return;
    }

    line = NULL;
    cap = 0;

    while ((de = readdir(dir)) != NULL) {
        length = strlen(de->d_name);
        if (length < 6 || strcmp(de->d_name + length - 5, ".list") != 0) {
            continue;
        }

        snprintf(listpath, sizeof(listpath), "%s/%s", PROF_DPKG_INFO,
                 de->d_name);

        f = fopen(listpath, "re");
        if (f == NULL) {
            continue;
        }

        while ((n = getline(&line, &cap, f)) > 0) {
            if (line[n - 1] == '\n') {
                n--;
            }

            index = prof_intern_find(&wanted, line, n);
            if (index < 0 || prof_packages[which[index]].package != NULL) {
                continue;
            }

            name = strndup(de->d_name, length - 5);
            if (name != NULL && (colon = strchr(name, ':')) != NULL) {
                *colon = '\0';
            }
            prof_packages[which[index]].package = name;
        }

        fclose(f);
    }

    free(line);
    closedir(dir);
    prof_intern_free(&wanted);
}


/* Versions of the packages found, from dpkg's status file. */
static void
prof_package_versions(void)
{
    FILE    *f;
    char    *line, package[256];
    size_t   cap, i;
    ssize_t  n;

    f = fopen(PROF_DPKG_STATUS, "re");
    if (f == NULL) {
        return;
    }

    line = NULL;
    cap = 0;
    package[0] = '\0';

    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] == '\n') {
            line[--n] = '\0';
        }

        if (strncmp(line, "Package: ", 9) == 0) {
            snprintf(package, sizeof(package), "%s", line + 9);
            continue;
        }

        if (strncmp(line, "Version: ", 9) != 0) {
            continue;
        }

        for (i = 0; i < prof_package_count; i++) {
            if (prof_packages[i].package != NULL
                && prof_packages[i].version == NULL
                && strcmp(prof_packages[i].package, package) == 0)
            {
                prof_packages[i].version = strdup(line + 9);
            }
        }
    }

    free(line);
    fclose(f);
}


/*
 * Adds the objects' paths not seen before to the package cache, with
 * their packages and versions from dpkg's files (read once for them all).
 */
static void
prof_package_resolve_new(const prof_object_t * const *objects, size_t count)
{
    size_t  i, added;

    added = 0;

    for (i = 0; i < count && prof_package_count < PROF_PACKAGES_MAX; i++) {
        if (objects[i]->path[0] != '/'
            || prof_package_find(objects[i]->path) != NULL)
        {
            continue;
        }

        prof_packages[prof_package_count].path = strdup(objects[i]->path);
        if (prof_packages[prof_package_count].path == NULL) {
            break;
        }

        prof_package_count++;
        added++;
    }

    if (added > 0) {
        prof_package_scan();
        prof_package_versions();
    }
}


int
prof_intake_provenance_json(prof_buffer_t *out,
    const prof_object_t * const *objects, size_t count)
{
    int              rc;
    size_t           i;
    const char      *name;
    prof_package_t  *pkg;

    prof_package_resolve_new(objects, count);

    rc = prof_buffer_append_str(out, "{\"v1\":[");

    for (i = 0; i < count; i++) {
        pkg = prof_package_find(objects[i]->path);

        name = strrchr(objects[i]->path, '/');
        name = (pkg != NULL && pkg->package != NULL) ? pkg->package
               : (name != NULL ? name + 1 : objects[i]->path);

        rc |= prof_buffer_append_str(out, i ? ",{\"name\":" : "{\"name\":");
        rc |= prof_utf8_append_json(out, name, strlen(name));
        rc |= prof_buffer_append_str(out, ",\"kind\":\"library\","
                                     "\"paths\":[");
        rc |= prof_utf8_append_json(out, objects[i]->path,
                                    strlen(objects[i]->path));
        rc |= prof_buffer_append_str(out, "],\"build_id\":");
        rc |= prof_utf8_append_json(out, objects[i]->build_id,
                                    strlen(objects[i]->build_id));
        rc |= prof_buffer_append_str(out, ",\"version\":");

        if (pkg != NULL && pkg->version != NULL) {
            rc |= prof_utf8_append_json(out, pkg->version,
                                        strlen(pkg->version));
        } else {
            rc |= prof_buffer_append_str(out, "\"\"");
        }

        rc |= prof_buffer_append_str(out, "}");
    }

    rc |= prof_buffer_append_str(out, "]}");

    return rc ? -ENOMEM : 0;
}
