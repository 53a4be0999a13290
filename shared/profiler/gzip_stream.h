/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A gzip stream into a growing buffer for the pprof encoder: records are
 * written whole into a staging area, then deflated a block at a time at
 * zlib's fastest level.
 *
 * Threading: none of its own; a stream belongs to its caller (the
 * profiler loop thread). Compression takes the CPU for as long as the
 * data needs: never on the nginx event loop. Memory: the output buffer is
 * the caller's, grown with realloc; prof_gzip_stream_end() frees zlib's
 * state.
 */

#ifndef PROF_GZIP_STREAM_H
#define PROF_GZIP_STREAM_H

#include <errno.h>
#include <stddef.h>
#include <zlib.h>

#include "common/buffer.h"


/*
 * Records are written here, then deflated a block at a time: room for
 * the largest record the encoder writes whole (all but strings, written
 * in pieces: a sample of PROF_MAX_FRAMES_LIMIT location ids, at most 10
 * bytes each, its values and labels).
 */
#define PROF_GZIP_STAGE_SIZE  (64 * 1024)


typedef struct {
    z_stream             zs;
    prof_buffer_t       *out;
    int                  error;             /* the first, or 0 */

    size_t               staged_length;
    unsigned char        staged[PROF_GZIP_STAGE_SIZE];
} prof_gzip_stream_t;


/*
 * Starts a stream, zeroed before (calloc), appended to out: a gzip header,
 * then what is written. 0 or -ENOMEM.
 */
int prof_gzip_stream_init(prof_gzip_stream_t *gz, prof_buffer_t *out);

/* Deflates what is staged: 0 or the stream's error (-ENOMEM, -EIO). */
int prof_gzip_stream_flush(prof_gzip_stream_t *gz);

/*
 * Bytes of any length (copied to the staging area, deflated as it
 * fills): 0 or the stream's error.
 */
int prof_gzip_stream_put(prof_gzip_stream_t *gz, const void *data,
    size_t length);

/* Deflates the rest and writes the gzip trailer: 0, -ENOMEM or -EIO. */
int prof_gzip_stream_finish(prof_gzip_stream_t *gz);

/* Frees zlib's state; the output stays the caller's. */
void prof_gzip_stream_end(prof_gzip_stream_t *gz);


/*
 * Where a record of at most n bytes goes (n <= PROF_GZIP_STAGE_SIZE), or
 * NULL with the stream's error set; prof_gzip_stream_wrote() says where
 * it ended.
 */
static inline unsigned char *
prof_gzip_stream_room(prof_gzip_stream_t *gz, size_t n)
{
    if (n > PROF_GZIP_STAGE_SIZE) {
        gz->error = -EIO;
        return NULL;
    }

    if (PROF_GZIP_STAGE_SIZE - gz->staged_length < n
        && prof_gzip_stream_flush(gz) != 0)
    {
        return NULL;
    }

    return gz->staged + gz->staged_length;
}


static inline void
prof_gzip_stream_wrote(prof_gzip_stream_t *gz, const unsigned char *end)
{
    gz->staged_length = end - gz->staged;
}


#endif /* PROF_GZIP_STREAM_H */
