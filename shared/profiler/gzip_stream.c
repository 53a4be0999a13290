/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A gzip stream into a growing buffer: staged records deflated a block at
 * a time (zlib, level 1, a gzip header and trailer).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profiler/gzip_stream.h"


/*
 * zlib's fastest level, as profilers' exporters use (the profile is
 * compressed once, on the profiler's thread): ~3.5% larger than the
 * default level, and deflate takes ~45% fewer instructions.
 */
#define PROF_GZIP_LEVEL  1
#define PROF_GZIP_CHUNK  (64 * 1024)

/*
 * An 8 KB window and a small hash (zlib's memLevel 5): about 48 KB of
 * deflate state instead of 256 KB, in the heap every period's encoding
 * touches. A profile's repetitions are near each other (its strings,
 * its locations' records): a profile of ci/bench-memory-instance's load
 * came out 2% smaller, not larger.
 */
#define PROF_GZIP_WINDOW_BITS  13
#define PROF_GZIP_MEM_LEVEL    5


int
prof_gzip_stream_init(prof_gzip_stream_t *gz, prof_buffer_t *out)
{
    gz->out = out;

    /* windowBits + 16: a gzip header and trailer. */
    if (deflateInit2(&gz->zs, PROF_GZIP_LEVEL, Z_DEFLATED,
                     PROF_GZIP_WINDOW_BITS + 16, PROF_GZIP_MEM_LEVEL,
                     Z_DEFAULT_STRATEGY) != Z_OK)
    {
        return -ENOMEM;
    }

    return 0;
}


static int
prof_gzip_stream_deflate(prof_gzip_stream_t *gz, int flush)
{
    int             rc;
    size_t          cap;
    unsigned char  *data;
    prof_buffer_t  *out = gz->out;

    if (out->capacity - out->length < PROF_GZIP_CHUNK) {
        cap = out->capacity ? out->capacity * 2 : 2 * PROF_GZIP_CHUNK;
        data = realloc(out->data, cap);
        if (data == NULL) {
            return -ENOMEM;
        }
        out->data = data;
        out->capacity = cap;
    }

    gz->zs.next_out = out->data + out->length;
    gz->zs.avail_out = out->capacity - out->length;

    rc = deflate(&gz->zs, flush);

    out->length = out->capacity - gz->zs.avail_out;

    if (rc == Z_STREAM_ERROR) {
        return -EIO;
    }

    return rc;
}


/* Deflates what is staged. */
int
prof_gzip_stream_flush(prof_gzip_stream_t *gz)
{
    int  rc;

    gz->zs.next_in = gz->staged;
    gz->zs.avail_in = gz->staged_length;

    while (gz->zs.avail_in > 0) {
        rc = prof_gzip_stream_deflate(gz, Z_NO_FLUSH);
        if (rc < 0) {
            gz->error = rc;
            return rc;
        }
    }

    gz->staged_length = 0;

    return 0;
}


/* Bytes of any length. */
int
prof_gzip_stream_put(prof_gzip_stream_t *gz, const void *data,
    size_t length)
{
    size_t                n;
    const unsigned char  *p = data;

    while (length > 0) {
        if (gz->staged_length == PROF_GZIP_STAGE_SIZE
            && prof_gzip_stream_flush(gz) != 0)
        {
            return gz->error;
        }

        n = PROF_GZIP_STAGE_SIZE - gz->staged_length;
        if (n > length) {
            n = length;
        }

        memcpy(gz->staged + gz->staged_length, p, n);
        gz->staged_length += n;
        p += n;
        length -= n;
    }

    return 0;
}


/* What is staged, then the gzip trailer. */
int
prof_gzip_stream_finish(prof_gzip_stream_t *gz)
{
    int  rc;

    rc = prof_gzip_stream_flush(gz);
    if (rc != 0) {
        return rc;
    }

    do {
        rc = prof_gzip_stream_deflate(gz, Z_FINISH);
        if (rc < 0) {
            return rc;
        }
    } while (rc != Z_STREAM_END);

    return 0;
}


void
prof_gzip_stream_end(prof_gzip_stream_t *gz)
{
    deflateEnd(&gz->zs);
}
