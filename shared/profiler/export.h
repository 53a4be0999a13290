/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A closed profile's export: encoded (pprof.h); written to the dump
 * directory (file_export.h) when there is one; submitted to the uploader
 * (upload.h) with its event.json and code-provenance.json, the profiles'
 * identity (a tracer's, process_conf.h) resolved first, when there is an
 * agent; encoded again for Pyroscope (pyroscope.h) and OTLP (otlp.h) when
 * they are configured. Failures are counted and logged (at most once a minute each).
 *
 * Threading: the profiler loop thread only (the aggregator's on_profile).
 * It blocks on the dump directory's file writes; uploads go on the loop.
 * Memory: the profile is freed here; the encoded pprof moves to the
 * upload.
 */

#ifndef PROF_EXPORT_H
#define PROF_EXPORT_H

#include "profiler/aggregator.h"
#include "profiler/process.h"


/* The aggregator's on_profile: data is the prof_process_t. */
void prof_export_profile(void *data, prof_profile_t *profile);


#endif /* PROF_EXPORT_H */
