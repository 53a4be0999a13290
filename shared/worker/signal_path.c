/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The signal path: the SIGPROF handler. It walks the interrupted thread's
 * stack (the unwind table's walk and stack scans, unwind_walk.c; LuaJIT's
 * frames, signal_lua.c) into a slot of the sampler's ring, accounts wall
 * time, and says what the sample cost (signal_path.h).
 *
 * A sample runs cold: the signal comes every 10 ms of the worker's CPU,
 * and each page the handler touches then is a miss of the TLB, each line
 * one of the cache. It reads what prof_signal_prepare found and backed
 * beforehand, and its code lies in one place (PROF_SIGNAL_TEXT).
 *
 * Async-signal-safe only: CI checks the undefined symbols of this file's
 * object against a short list (ci/check-signal-path). Memory read here is
 * the sampler's own state, the thread's rseq area, and one word of an
 * object of the array the server declared mapped for as long as it
 * samples (prof_sampler_set_objects); never an address found on the
 * stack.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define PROF_SIGNAL_RSEQ     1
#endif
#endif

#include "channel/lua_frames.h"
#include "channel/sample.h"
#include "channel/sampler_state.h"
#include "common/clock.h"
#include "common/futex.h"
#include "worker/arch.h"
#include "worker/signal_lua.h"
#include "worker/signal_path.h"
#include "worker/unwind.h"


/* A stack scan looks this far above sp (prof_unwind_scans: how often). */
#define PROF_SCAN_WORDS      512

/* Whether calls leave the return address in a link register (arch.h). */
#ifdef PROF_ARCH_RA_IN_ROWS
#define PROF_SIGNAL_LINK     1
#else
#define PROF_SIGNAL_LINK     0
#endif


prof_sampler_t  *prof_signal_sampler;


#ifdef PROF_SIGNAL_RSEQ

/*
 * A critical section (rseq(2)) that holds no code, its abort address
 * past the signature the thread's rseq area was registered with (the
 * kernel checks it): while the handler runs, the area points to it, and
 * the kernel clears that pointer when it switches the thread out, or
 * migrates it, or delivers it a signal, outside the section.
 */
static const uint32_t        prof_signal_rseq_sig[2] = { RSEQ_SIG, 0 };

static const struct rseq_cs  prof_signal_no_section = {
    .version = 0,
    .flags = 0,
    .start_ip = (uintptr_t) &prof_signal_rseq_sig[1],
    .post_commit_offset = 0,
    .abort_ip = (uintptr_t) &prof_signal_rseq_sig[1]
};

#endif


/*
 * Whether the kernel may switch the thread out unseen from here on: 0
 * when it will say so (the rseq area points to the section above; it
 * pointed nowhere, as the signal's delivery leaves it), -1 when it will
 * not (no area, or another section of the code the signal interrupted).
 */
PROF_SIGNAL_TEXT static int
prof_signal_watch(prof_sampler_t *s)
{
#ifdef PROF_SIGNAL_RSEQ
    uint64_t  *cs = s->rseq_cs;

    if (cs != NULL && __atomic_load_n(cs, __ATOMIC_RELAXED) == 0) {
        __atomic_store_n(cs, (uint64_t) (uintptr_t) &prof_signal_no_section,
                         __ATOMIC_RELAXED);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        return 0;
    }
#endif

    return -1;
}


/*
 * Whether the thread was switched out since prof_signal_watch (watched:
 * what it returned): 1, 0, or -1 when it cannot be told. The area points
 * nowhere again.
 */
PROF_SIGNAL_TEXT static int
prof_signal_switched(prof_sampler_t *s, int watched)
{
#ifdef PROF_SIGNAL_RSEQ
    uint64_t  *cs = s->rseq_cs;

    if (watched == 0) {
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(cs, __ATOMIC_RELAXED) == 0) {
            return 1;
        }
        __atomic_store_n(cs, 0, __ATOMIC_RELAXED);
        return 0;
    }
#endif

    return -1;
}


/* The interrupted thread's stack into the slot, at most max + 1 frames. */
PROF_SIGNAL_TEXT static void
prof_signal_walk(prof_sampler_t *s, prof_slot_t *slot, ucontext_t *uc,
    int max)
{
    int                   n, count, scans, called, from, astray, at;
    int                   trace, cf_known, jumps;
    uintptr_t             pc, sp, cf;
    prof_lua_t           *lua;
    prof_unwind_regs_t    regs;
    prof_unwind_table_t  *t;
    prof_unwind_status_e  status;

    /* The frames' places, as many as it may walk: the part a walk fills
       lies near the handler's other locals, not 12 KB below them. */
    prof_lua_where_t      where[max + 2];

    prof_arch_context_regs(uc, &regs.pc, &regs.sp, &regs.fp, &regs.aux,
                           &regs.lr);
    regs.stack_low = s->stack_low;
    regs.stack_high = s->stack_high;
    regs.stack_delta = 0;
    regs.caller = 0;
    regs.where = NULL;

    slot->unwind_stop = 0;
    slot->scanned = 0;

    /* Replaced by this thread only, with SIGPROF blocked. */
    t = s->table;
    lua = __atomic_load_n(&s->lua, __ATOMIC_ACQUIRE);

    n = 0;
    scans = 0;

    if (t == NULL) {
        slot->frames[n++] = regs.pc;
        status = PROF_UNWIND_NO_RULE;

    } else {
        prof_unwind_recent_begin(&s->recent, t,
                                 __atomic_load_n(&s->table_swaps,
                                                 __ATOMIC_RELAXED));

        /* In code LuaJIT's VM called, nothing pushed yet: walked on from
           where it returns (its frame kept, but for the VM's own). */
        pc = regs.pc;
        sp = regs.sp;
        called = (lua != NULL) ? prof_lua_vm_return(lua, uc, &regs.pc,
                                                    &regs.sp, s->stack_low,
                                                    s->stack_high)
                               : 0;

        if (called == PROF_LUA_CALLED_CODE) {
            slot->frames[n] = pc;
            where[n].sp = sp;
            where[n].fp = regs.fp;
            where[n].unknown = 0;
            n++;
        }

        if (called != 0) {
            regs.caller = 1;
        }

        /* The running activation's C frame, until the walk passed it
           (signal_lua.h): read once the walk meets Lua or stops. */
        cf = 0;
        trace = 0;
        cf_known = (lua == NULL);
        jumps = 0;

        for ( ;; ) {
            if (lua != NULL) {
                regs.where = (uintptr_t *) &where[n];
            }

            from = n;
            status = prof_unwind_recent(t, &regs, &s->recent,
                                        (void **) slot->frames + n,
                                        max + 1 - n, &count);
            n += count;

            if (status == PROF_UNWIND_NO_OBJECT) {
                __atomic_fetch_add(&s->sampled.unknown_pcs, 1,
                                   __ATOMIC_RELAXED);
                /* The loop's slow path looks at the table at the turn's
                   end (prof_sampler_turn_slow). */
                __atomic_store_n(&s->sampled.stall_ticks, 0,
                                 __ATOMIC_RELAXED);
            }

            if (!cf_known
                && ((status != PROF_UNWIND_END && status != PROF_UNWIND_FULL)
                    || prof_lua_may_run(lua, slot->frames + from,
                                        where + from, n - from)))
            {
                cf = prof_lua_cframe(lua, sp, s->stack_low, s->stack_high,
                                     &trace);
                cf_known = 1;
            }

            /* Past an activation's C frame: the next one's on. */
            astray = -1;
            while (cf != 0) {
                astray = prof_lua_astray(lua, slot->frames, where, from, n,
                                         cf, trace, &at);
                if (at < 0) {
                    break;
                }
                from = at + 1;
                cf = prof_lua_cframe_prev(cf, s->stack_high);
                trace = 0;      /* the state tells of the running one's */
            }

            /*
             * Astray below the running activation's C frame, or stopped
             * below it under a trace (in its machine code, or code it
             * called) or at a frame the walk cannot step: on from that C
             * frame, the frames astray dropped, no scan (signal_lua.h).
             * Where no trace runs, code without rules or in no object
             * (C code the interpreter called, a regex's JIT code) is
             * scanned past as before, and what the scan finds checked
             * likewise.
             */
            if (cf != 0 && jumps < PROF_LUA_ACTIVATIONS
                && (astray >= 0
                    || (status != PROF_UNWIND_FULL
                        && (trace || (status != PROF_UNWIND_NO_RULE
                                      && status != PROF_UNWIND_NO_OBJECT)))))
            {
                if (astray >= 0) {
                    n = astray;
                    regs.fp = (n > 0) ? where[n - 1].fp : 0;
                }
                if (n > max) {
                    break;
                }
                prof_lua_cframe_regs(lua, cf, &regs);
                jumps++;
                continue;
            }

            if (status == PROF_UNWIND_END || status == PROF_UNWIND_FULL) {
                break;
            }

            /*
             * The interrupted frame, in code no object holds or without
             * rules (a PLT entry): its caller from the link register
             * (where calls leave return addresses there), but in a
             * LuaJIT trace, which uses it for anything; else a scan of
             * the stack.
             */
            if ((status != PROF_UNWIND_NO_OBJECT
                 && status != PROF_UNWIND_NO_RULE)
                || scans == prof_unwind_scans(t) || count == 0 || n > max
                || ((!PROF_SIGNAL_LINK || regs.caller
                     || prof_lua_trace_runs(lua)
                     || prof_unwind_link(t, &regs, PROF_SCAN_WORDS) != 0)
                    && prof_unwind_scan(t, &regs, PROF_SCAN_WORDS) != 0))
            {
                /* No caller found below the running activation's C
                   frame: on from it. */
                if (cf == 0 || jumps == PROF_LUA_ACTIVATIONS || n > max
                    || (status != PROF_UNWIND_NO_OBJECT
                        && status != PROF_UNWIND_NO_RULE))
                {
                    break;
                }
                prof_lua_cframe_regs(lua, cf, &regs);
                jumps++;
                continue;
            }

            scans++;
        }
    }

    slot->scanned = scans;

    /* A walk to the outermost frame shows every activation of the VM:
       without one, none of LuaJIT's memory is read. */
    if (lua != NULL && t != NULL
        && __atomic_load_n(&lua->state, __ATOMIC_RELAXED) == PROF_LUA_FOUND
        && (status != PROF_UNWIND_END
            || prof_lua_may_run(lua, slot->frames, where, n)))
    {
        n = prof_lua_splice(lua, uc, slot->frames, where, n, max + 1,
                            s->stack_low, s->stack_high);
    }

    if (status != PROF_UNWIND_END && status != PROF_UNWIND_FULL) {
        /* A marker ends a stack the walk could not finish. */
        slot->unwind_stop = status;
        if (n <= max) {
            slot->frames[n++] = PROF_FRAME_UNWIND_STOP;
        }
    }

    if (n > max) {
        slot->frames[max - 1] = PROF_FRAME_TRUNCATED;
        n = max;
    }

    slot->frame_count = (uint16_t) n;
}


/* A SIGPROF not from our timer or thread: the action before ours. */
PROF_SIGNAL_TEXT static void
prof_signal_foreign(prof_sampler_t *s, int signo, siginfo_t *info,
    void *context)
{
    struct sigaction  *sa = &s->saved_action;

    if (sa->sa_flags & SA_SIGINFO) {
        if (sa->sa_sigaction != NULL) {
            sa->sa_sigaction(signo, info, context);
        }
        return;
    }

    if (sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN
        && sa->sa_handler != NULL)
    {
        sa->sa_handler(signo);
    }
}


PROF_SIGNAL_TEXT static long
prof_signal_futex_wake(uint32_t *word)
{
    return syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}


/*
 * Wall time since the last account, split as sampler.h says
 * (prof_wall_split): from the point the profiler process accounted up
 * to, if it did (a claim, sampler_state.h), while this thread was
 * blocked in a system call.
 */
PROF_SIGNAL_TEXT void
prof_signal_account(prof_sampler_t *s, int64_t now_ns, uint64_t now_tsc,
    int64_t cpu_ns, int64_t *wall_ns, int64_t *off_cpu_ns, int64_t *idle_ns)
{
    uint64_t                  word;
    const prof_wall_point_t  *claim;
    prof_sampled_thread_t    *h = &s->sampled;

    word = __atomic_fetch_or(&s->account, PROF_ACCOUNT_BUSY,
                             __ATOMIC_ACQ_REL);

    if (word & PROF_ACCOUNT_CLAIM) {
        claim = &s->claims[(word & PROF_ACCOUNT_WHICH) ? 1 : 0];
        if (claim->wall_ns > s->point.wall_ns) {
            __atomic_store_n(&s->point.wall_ns, claim->wall_ns,
                             __ATOMIC_RELAXED);
            __atomic_store_n(&s->point.tsc, claim->tsc, __ATOMIC_RELAXED);
            __atomic_store_n(&s->point.wait_ticks, claim->wait_ticks,
                             __ATOMIC_RELAXED);
        }
    }

    /* A claim made after this sample began: no time before it. */
    if (now_ns < s->point.wall_ns) {
        now_ns = s->point.wall_ns;
        now_tsc = s->point.tsc;
    }

    prof_wall_split(&s->point, now_ns, now_tsc, h->wait_ticks, cpu_ns,
                    wall_ns, off_cpu_ns, idle_ns);

    __atomic_store_n(&s->account, ((word | (PROF_ACCOUNT_ONE - 1)) + 1)
                                  | (word & PROF_ACCOUNT_WHICH),
                     __ATOMIC_RELEASE);
}


PROF_SIGNAL_TEXT static void
prof_signal_account_slot(prof_sampler_t *s, prof_slot_t *slot,
    int64_t now_ns, uint64_t now_tsc, int64_t cpu_ns)
{
    prof_signal_account(s, now_ns, now_tsc, cpu_ns, &slot->wall_ns,
                        &slot->off_cpu_ns, &slot->idle_ns);
}


/*
 * The tag of what runs (channel/sampled_thread.h): the pending one for the
 * same words, a new one when none is pending, else none. The object's
 * stamp is read only from an object of the array, whose memory stays
 * mapped.
 */
PROF_SIGNAL_TEXT static uint64_t
prof_signal_tag(prof_sampled_thread_t *h)
{
    uint64_t  o, tag, stamp;

    if (h->running.log == 0) {
        return 0;
    }

    if (h->pending_tag != 0) {
        return (h->running.request == h->pending.request
                && h->running.log == h->pending.log
                && h->running.object == h->pending.object)
               ? h->pending_tag : 0;
    }

    o = h->running.object;
    stamp = 0;

    if (o >= h->objects && o < h->objects_end
        && (o - h->objects) % h->object_size == 0)
    {
        stamp = *(const uint64_t *) (uintptr_t) (o + h->stamp_offset);
    }

    tag = h->epoch + 1;
    h->epoch = tag;
    h->pending = h->running;
    h->pending_stamp = stamp;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    h->pending_tag = tag;

    return tag;
}


/*
 * The interval the sampler thread wants (profiling_max_cpu), when it
 * changed: the timer re-armed (timer_settime is async-signal-safe), its
 * CPU time counted from now.
 */
PROF_SIGNAL_TEXT static void
prof_signal_retime(prof_sampler_t *s)
{
    int64_t            wanted, cpu_ns;
    struct itimerspec  its;

    wanted = __atomic_load_n(&s->interval_wanted_ns, __ATOMIC_RELAXED);

    if (wanted <= 0 || wanted == s->interval_now_ns) {
        return;
    }

    cpu_ns = prof_clock_ns(s->cpu_clock);
    if (cpu_ns < 0) {
        return;
    }

    its.it_interval.tv_sec = wanted / 1000000000;
    its.it_interval.tv_nsec = wanted % 1000000000;
    its.it_value = its.it_interval;

    if (timer_settime(s->cpu_timer, 0, &its, NULL) != 0) {
        return;
    }

    s->timer_cpu_ns = cpu_ns;
    __atomic_store_n(&s->point_cpu_ns, cpu_ns, __ATOMIC_RELAXED);
    s->cpu_intervals = 0;
    s->interval_now_ns = wanted;
    s->rearmed = 1;
}


/*
 * The turn the sample is in, and how long it had run; what it saw is the
 * turn's for a stall's report until a sample past the threshold saw it
 * (sampled_thread.h).
 */
PROF_SIGNAL_TEXT static void
prof_signal_turn(prof_sampled_thread_t *h, prof_slot_t *slot, int64_t now_ns,
    uint64_t now_tsc)
{
    uint32_t  past;

    if (prof_waiting(h->wait_ticks)) {
        slot->turn = 0;
        slot->turn_ns = 0;
        return;
    }

    slot->turn = h->turn_start;
    slot->turn_ns = prof_ticks_ns(h, now_tsc - h->turn_start, now_ns,
                                  now_tsc);

    if (h->stall_ns <= 0) {
        return;
    }

    past = (slot->turn_ns >= h->stall_ns);

    if (h->stall_turn != slot->turn || !h->stall_past) {
        h->stall_turn = slot->turn;
        h->stall_tag = slot->request;
        h->stall_phase = h->phase;
        h->stall_past = past;
    }
}


/*
 * What the sample writes and reads first, asked of the memory at once
 * before the clock's read: its slot's lines, the last walk's rows.
 */
PROF_SIGNAL_TEXT static void
prof_signal_prefetch(prof_sampler_t *s)
{
    size_t        i;
    prof_slot_t  *slot;

    slot = prof_sampler_slot(s, s->write_index);

    for (i = 0; i < s->slot_size && i < 512; i += 64) {
        __builtin_prefetch((char *) slot + i, 1);
    }

    prof_unwind_recent_prefetch(&s->recent);
}


/*
 * errno's address: on the sampled thread, the one prof_signal_prepare
 * found there, without glibc's function (its code and the PLT's are
 * pages a sample would miss in the TLB for it alone).
 */
PROF_SIGNAL_TEXT static int *
prof_signal_errno(prof_sampler_t *s)
{
    if (s->errno_at != NULL
        && __builtin_thread_pointer() == s->thread_pointer)
    {
        return s->errno_at;
    }

    return &errno;
}


/* CLOCK_MONOTONIC, from the vDSO's own function where it was found. */
PROF_SIGNAL_TEXT static int64_t
prof_signal_now(prof_sampler_t *s)
{
    struct timespec  ts;

    if (s->vdso_clock_gettime != NULL
        && s->vdso_clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
    {
        return prof_timespec_ns(&ts);
    }

    return prof_clock_ns(CLOCK_MONOTONIC);
}


/*
 * What the sample cost, into the slot: the handler's wall time from its
 * first instruction (start, TSC) to now, and its CPU time: the same when
 * the thread was not switched out meanwhile, else not known (-1); where
 * that cannot be told (switched -1: no rseq area), the wall time.
 */
PROF_SIGNAL_TEXT static void
prof_signal_cost(prof_sampler_t *s, prof_slot_t *slot, uint64_t start,
    int watched, int64_t entry_ns, uint64_t entry_tsc)
{
    int64_t   wall_ns;
    uint64_t  end;

    end = prof_arch_ticks();
    wall_ns = prof_ticks_ns(&s->sampled, end - start, entry_ns, entry_tsc);

    slot->handler_wall_ns = wall_ns;
    slot->handler_ns = (prof_signal_switched(s, watched) == 1) ? -1 : wall_ns;
}


PROF_SIGNAL_TEXT void
prof_signal_handler(int signo, siginfo_t *info, void *context)
{
    int              saved_errno, requested, watched, *errno_at;
    int64_t          entry_ns, cpu_ns;
    uint64_t         start, entry_tsc;
    uint32_t         weight;
    prof_slot_t     *slot;
    prof_sampler_t  *s;

    start = prof_arch_ticks();

    s = __atomic_load_n(&prof_signal_sampler, __ATOMIC_ACQUIRE);
    if (s == NULL) {
        return;
    }

    if (info->si_code == SI_TIMER && info->si_value.sival_ptr == s) {
        requested = 0;

    } else if (info->si_code == SI_QUEUE && info->si_value.sival_ptr == s
               && info->si_pid == s->pid)
    {
        if (__atomic_load_n(&s->requests, __ATOMIC_ACQUIRE) == s->served) {
            return;                     /* a request already served */
        }
        requested = 1;

    } else {
        prof_signal_foreign(s, signo, info, context);
        return;
    }

    watched = prof_signal_watch(s);
    prof_signal_prefetch(s);
    errno_at = prof_signal_errno(s);
    saved_errno = *errno_at;

    /*
     * The old timer's signal, queued while the handler re-armed it: the
     * CPU it stands for was counted at the re-arm.
     */
    if (!requested && s->rearmed) {
        s->rearmed = 0;
        cpu_ns = prof_clock_ns(s->cpu_clock);
        if (cpu_ns >= 0 && cpu_ns - s->timer_cpu_ns < s->interval_now_ns / 2) {
            goto done;
        }
    }

    slot = prof_sampler_slot(s, s->write_index);

    if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) != PROF_SLOT_FREE) {
        /* The wall time stays unaccounted: the next sample takes it. */
        __atomic_fetch_add(&s->ring_full, 1, __ATOMIC_RELAXED);
        goto done;
    }

    entry_ns = prof_signal_now(s);
    entry_tsc = prof_arch_ticks();

    prof_signal_walk(s, slot, context, s->conf.max_frames);

    if (requested) {
        /* Blocked outside the event loop: the time goes to this stack. */
        cpu_ns = prof_clock_ns(s->cpu_clock);
        slot->kind = PROF_SLOT_STACK;
        slot->weight = 0;
        prof_signal_account_slot(s, slot, entry_ns, entry_tsc,
                                 cpu_ns >= 0 ? cpu_ns - s->point_cpu_ns : 0);

    } else {
        weight = 1 + (info->si_overrun > 0 ? (uint32_t) info->si_overrun : 0);
        s->cpu_intervals += weight;
        cpu_ns = s->timer_cpu_ns
                 + (int64_t) s->cpu_intervals * s->interval_now_ns;

        slot->kind = PROF_SLOT_CPU;
        slot->weight = weight;
        slot->interval_ns = (uint32_t) s->interval_now_ns;
        prof_signal_account_slot(s, slot, entry_ns, entry_tsc,
                                 cpu_ns - s->point_cpu_ns);
        __atomic_store_n(&s->point_cpu_ns, cpu_ns, __ATOMIC_RELAXED);

        prof_signal_retime(s);
    }

    slot->time_ns = entry_ns;
    slot->request = prof_signal_tag(&s->sampled);
    prof_signal_turn(&s->sampled, slot, entry_ns, entry_tsc);

    prof_signal_cost(s, slot, start, watched, entry_ns, entry_tsc);
    watched = -1;

    __atomic_store_n(&slot->state, PROF_SLOT_READY, __ATOMIC_RELEASE);
    /* Only this thread writes it; the sampler thread reads it. */
    __atomic_store_n(&s->write_index, s->write_index + 1, __ATOMIC_RELEASE);

    /* Half full: the sampler thread drains it before it overflows. */
    if (s->write_index - __atomic_load_n(&s->read_index, __ATOMIC_ACQUIRE)
        == PROF_SLOTS / 2)
    {
        __atomic_add_fetch(&s->wake, 1, __ATOMIC_RELEASE);
        (void) prof_signal_futex_wake(&s->wake);
    }

done:

    (void) prof_signal_switched(s, watched);

    if (requested) {
        __atomic_store_n(&s->served,
                         __atomic_load_n(&s->requests, __ATOMIC_ACQUIRE),
                         __ATOMIC_RELEASE);
        (void) prof_signal_futex_wake(&s->served);
    }

    *errno_at = saved_errno;
}
