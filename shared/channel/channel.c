/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The memory a worker shares with its profiler process.
 */

#include <sys/mman.h>

#include "channel/channel.h"


void *
prof_shared_alloc(size_t size)
{
    void  *p;

    /* Pages are backed when first written: unused room costs nothing. */
    p = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    return (p != MAP_FAILED) ? p : NULL;
}


void
prof_shared_free(void *p, size_t size)
{
    if (p != NULL) {
        (void) munmap(p, size);
    }
}


prof_channel_t *
prof_channel_create(void)
{
    prof_channel_t  *c;

    c = prof_shared_alloc(sizeof(prof_channel_t));
    if (c == NULL) {
        return NULL;
    }

    c->version = PROF_CHANNEL_VERSION;
    prof_spsc_init_in(&c->labels, PROF_LABELS_RING, sizeof(prof_labels_t),
                      c->label_items);
    prof_endpoint_tables_init(c->endpoints);

    return c;
}


void
prof_channel_free(prof_channel_t *c)
{
    prof_shared_free(c, sizeof(prof_channel_t));
}
