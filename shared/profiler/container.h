/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The container this process runs in, as Datadog's clients tell the agent
 * (headers Datadog-Container-ID and Datadog-Entity-ID, with which the
 * agent tags what it forwards): the container id found in the last
 * component of a /proc/self/cgroup path (a 64-hex docker/containerd id,
 * an ECS task id, or a UUID, with the runtimes' prefixes and ".scope"
 * suffix), else, on cgroup v2, the inode of the process's cgroup.
 *
 * Threading: any thread but a signal handler (file reads). Memory: the
 * caller's struct.
 */

#ifndef PROF_CONTAINER_H
#define PROF_CONTAINER_H

#include <stddef.h>
#include <stdint.h>


#define PROF_CONTAINER_ID_MAX  128


typedef struct {
    char    container_id[PROF_CONTAINER_ID_MAX + 1];    /* "": unknown */
    char    entity_id[PROF_CONTAINER_ID_MAX + 32];      /* "": unknown */
} prof_container_t;


/* Reads /proc/self/cgroup and the cgroup file system. */
void prof_container_detect(prof_container_t *c);

/*
 * From the text of a /proc/self/cgroup: the container id (into id, ""
 * when none), and the cgroup v2 path ("0::PATH" line, into v2_path, ""
 * when none). 0, or -1 when the text has no cgroup line at all.
 */
int prof_container_parse(const char *text, size_t length, char *id,
    size_t id_size, char *v2_path, size_t path_size);

/* The entity id: "ci-<id>" with a container id, else "in-<inode>". */
void prof_container_entity(prof_container_t *c, uint64_t cgroup_inode);


#endif /* PROF_CONTAINER_H */
