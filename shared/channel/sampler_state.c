/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What both sides do to the sampler's shared state: the futex words' wait
 * and wake, and a flush added to the mailbox.
 */

#define _GNU_SOURCE

#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "channel/sampler_state.h"
#include "common/clock.h"
#include "common/futex.h"


long
prof_sampler_futex(uint32_t *word, int op, uint32_t value,
    const struct timespec *timeout)
{
    return syscall(SYS_futex, word, op, value, timeout, NULL,
                   FUTEX_BITSET_MATCH_ANY);
}


void
prof_sampler_wake(prof_sampler_t *s)
{
    __atomic_add_fetch(&s->wake, 1, __ATOMIC_RELEASE);
    (void) prof_sampler_futex(&s->wake, FUTEX_WAKE, 1, NULL);
}


void
prof_sampler_post_flush(prof_sampler_t *s, uint64_t period, int final,
    int64_t now_ns, int64_t wall_ns, int64_t off_cpu_ns, int64_t idle_ns)
{
    uint32_t       added;
    prof_flush_t  *f;

    added = s->flushes_added;

    if (added - __atomic_load_n(&s->flushes_taken, __ATOMIC_ACQUIRE)
        == PROF_FLUSHES)
    {
        /* The sampler thread is behind: this one extends the last. */
        f = &s->flushes[(added - 1) % PROF_FLUSHES];
        prof_counter_add(s->conf.diagnostics->flushes_merged, 1);

    } else {
        f = &s->flushes[added % PROF_FLUSHES];
        memset(f, 0, sizeof(prof_flush_t));
        added++;
    }

    f->period = period;

    f->wall_ns += wall_ns;
    f->off_cpu_ns += off_cpu_ns;
    f->idle_ns += idle_ns;
    f->write_index = s->write_index;
    f->final = final;
    f->monotonic_ns = now_ns;
    f->realtime_ns = prof_clock_ns(CLOCK_REALTIME);
    f->last_tag = s->sampled.epoch;

    __atomic_store_n(&s->flushes_added, added, __ATOMIC_RELEASE);
}


prof_stall_t *
prof_sampler_next_stall(prof_sampler_t *s)
{
    if (s->stalls_added - __atomic_load_n(&s->stalls_taken, __ATOMIC_ACQUIRE)
        == PROF_STALLS)
    {
        __atomic_store_n(&s->stalls_lost, s->stalls_lost + 1,
                         __ATOMIC_RELAXED);
        return NULL;
    }

    return &s->stalls[s->stalls_added % PROF_STALLS];
}


void
prof_sampler_post_stall(prof_sampler_t *s)
{
    __atomic_store_n(&s->stalls_added, s->stalls_added + 1,
                     __ATOMIC_RELEASE);
    prof_sampler_wake(s);
}
