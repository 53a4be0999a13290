/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A blocked thread's stack read from another process (remote_stack.h):
 * /proc's registers at the system call, process_vm_readv of the stack
 * (and of the unwind table when the worker replaced it), the walk on the
 * copy, the wall time claimed.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/clock.h"
#include "channel/sample.h"
#include "profiler/remote_stack.h"


/* A stack scan looks this far above sp (the signal handler's measure). */
#define PROF_REMOTE_SCAN_WORDS   512


struct prof_remote_stack_s {
    prof_sampler_t         *sampler;
    int                     syscall_fd;     /* -1: not open yet */
    int                     schedstat_fd;   /* -1: not open yet */
    unsigned char          *stack;          /* the copy, red zone first */

    /* the worker's table, copied when it is not forked_table: valid
       while the worker's table_swaps is copy_swaps */
    unsigned char          *table_copy;     /* mapped, copy_capacity */
    size_t                  copy_capacity;
    prof_unwind_table_t    *copy;           /* NULL: none */
    uintptr_t               copy_remote;
    uint32_t                copy_swaps;
};


/*
 * A number at *p (before end): decimal, or hexadecimal after "0x"; *p
 * moved past it. 0, or -EINVAL (no digit, or more than 64 bits).
 */
static int
prof_syscall_number(const char **p, const char *end, uint64_t *value)
{
    int          digits, d;
    uint64_t     v;
    const char  *at = *p;

    v = 0;
    digits = 0;

    if (end - at > 2 && at[0] == '0' && at[1] == 'x') {
        for (at += 2; at < end; at++, digits++) {
            if (*at >= '0' && *at <= '9') {
                d = *at - '0';
            } else if (*at >= 'a' && *at <= 'f') {
                d = *at - 'a' + 10;
            } else {
                break;
            }
            if (v >> 60) {
                return -EINVAL;
            }
            v = v << 4 | (uint64_t) d;
        }

    } else {
        for ( /* void */ ; at < end && *at >= '0' && *at <= '9';
             at++, digits++)
        {
            d = *at - '0';
            if (v > (UINT64_MAX - (uint64_t) d) / 10) {
                return -EINVAL;
            }
            v = v * 10 + (uint64_t) d;
        }
    }

    if (digits == 0) {
        return -EINVAL;
    }

    *p = at;
    *value = v;

    return 0;
}


int
prof_syscall_regs_parse(const char *text, size_t length,
    prof_syscall_regs_t *regs)
{
    int          i, n, outside;
    uint64_t     v[9];
    const char  *p, *end;

    p = text;
    end = text + length;

    while (end > p && (end[-1] == '\n' || end[-1] == '\0')) {
        end--;
    }

    if (end - p == 7 && memcmp(p, "running", 7) == 0) {
        return -EAGAIN;
    }

    /* "-1 SP PC": blocked, but in no system call. */
    outside = (p < end && *p == '-');
    if (outside) {
        p++;
    }

    for (n = 0; n < 9 && p < end; n++) {
        if (n > 0) {
            if (*p != ' ') {
                return -EINVAL;
            }
            p++;
        }

        if (prof_syscall_number(&p, end, &v[n]) != 0) {
            return -EINVAL;
        }
    }

    if (p != end) {
        return -EINVAL;
    }

    memset(regs, 0, sizeof(prof_syscall_regs_t));

    if (outside) {
        if (n != 3 || v[0] != 1) {
            return -EINVAL;
        }

        regs->nr = -1;
        regs->sp = v[1];
        regs->pc = v[2];

        return 0;
    }

    if (n != 9 || v[0] > LONG_MAX) {
        return -EINVAL;
    }

    regs->nr = (long) v[0];
    for (i = 0; i < 6; i++) {
        regs->args[i] = v[1 + i];
    }
    regs->sp = v[7];
    regs->pc = v[8];

    return 0;
}


unsigned
prof_remote_stack_walk(const prof_unwind_table_t *t, uintptr_t pc,
    uintptr_t sp, const void *copy, uintptr_t low, size_t size,
    uint64_t *frames, unsigned max, uint32_t *stop, uint32_t *scanned)
{
    int                   count, scans;
    unsigned              n;
    prof_unwind_regs_t    regs;
    prof_unwind_status_e  status;

    memset(&regs, 0, sizeof(regs));
    regs.pc = pc;
    regs.sp = sp;
    regs.stack_low = low;
    regs.stack_high = low + size;
    regs.stack_delta = (uintptr_t) copy - low;

    n = 0;
    scans = 0;

    /*
     * As the signal handler walks (signal_path.c), but the frame pointer,
     * the auxiliary and the link registers are not known (0) until a
     * frame's rule finds them saved: code whose frame is found from one
     * of them stops the walk, and a scan of the stack goes on.
     */
    for ( ;; ) {
        status = prof_unwind(t, &regs, (void **) frames + n,
                             (int) (max + 1 - n), &count);
        n += (unsigned) count;

        if (status == PROF_UNWIND_END || status == PROF_UNWIND_FULL) {
            break;
        }

        if ((status != PROF_UNWIND_NO_OBJECT
             && status != PROF_UNWIND_NO_RULE)
            || scans == prof_unwind_scans(t) || count == 0 || n > max
            || prof_unwind_scan(t, &regs, PROF_REMOTE_SCAN_WORDS) != 0)
        {
            break;
        }

        scans++;
    }

    *scanned = (uint32_t) scans;
    *stop = 0;

    if (status != PROF_UNWIND_END && status != PROF_UNWIND_FULL) {
        *stop = status;
        if (n <= max) {
            frames[n++] = PROF_FRAME_UNWIND_STOP;
        }
    }

    if (n > max) {
        frames[max - 1] = PROF_FRAME_TRUNCATED;
        n = max;
    }

    return n;
}


int
prof_remote_stack_create(prof_remote_stack_t **reader, prof_sampler_t *s)
{
    prof_remote_stack_t  *r;

    r = calloc(1, sizeof(prof_remote_stack_t));
    if (r == NULL) {
        return -ENOMEM;
    }

    r->stack = malloc(PROF_ARCH_RED_ZONE + PROF_REMOTE_STACK_BYTES);
    if (r->stack == NULL) {
        free(r);
        return -ENOMEM;
    }

    r->sampler = s;
    r->syscall_fd = -1;
    r->schedstat_fd = -1;

    *reader = r;
    return 0;
}


void
prof_remote_stack_free(prof_remote_stack_t *r)
{
    if (r == NULL) {
        return;
    }

    if (r->syscall_fd >= 0) {
        (void) close(r->syscall_fd);
    }
    if (r->schedstat_fd >= 0) {
        (void) close(r->schedstat_fd);
    }
    if (r->table_copy != NULL) {
        (void) munmap(r->table_copy, r->copy_capacity);
    }

    free(r->stack);
    free(r);
}


/* Up to size bytes of the worker's memory at remote: how many, or
   -errno. */
static ssize_t
prof_remote_read(prof_sampler_t *s, void *local, uintptr_t remote,
    size_t size)
{
    ssize_t       n;
    struct iovec  to, from;

    to.iov_base = local;
    to.iov_len = size;
    from.iov_base = (void *) remote;
    from.iov_len = size;

    n = process_vm_readv(s->pid, &to, 1, &from, 1, 0);

    return (n < 0) ? -errno : n;
}


/* All of size bytes of the worker's memory at remote: 0, or -errno. */
static int
prof_remote_read_all(prof_sampler_t *s, void *local, uintptr_t remote,
    size_t size)
{
    ssize_t  n;

    n = prof_remote_read(s, local, remote, size);
    if (n < 0) {
        return (int) n;
    }

    return ((size_t) n == size) ? 0 : -EFAULT;
}


/* A file of the sampled thread's in /proc, opened once: its text (at
   most size - 1 bytes), or -errno. */
static ssize_t
prof_remote_proc(prof_sampler_t *s, int *fd, const char *name, char *buf,
    size_t size)
{
    char     path[64];
    ssize_t  n;

    if (*fd < 0) {
        (void) snprintf(path, sizeof(path), "/proc/%d/task/%d/%s",
                        (int) s->pid, (int) s->tid, name);

        *fd = open(path, O_RDONLY | O_CLOEXEC);
        if (*fd < 0) {
            return -errno;
        }
    }

    n = pread(*fd, buf, size - 1, 0);
    if (n < 0) {
        return -errno;
    }

    buf[n] = '\0';

    return n;
}


static int
prof_remote_stack_regs(prof_remote_stack_t *r, prof_syscall_regs_t *regs)
{
    char     buf[256];
    ssize_t  n;

    n = prof_remote_proc(r->sampler, &r->syscall_fd, "syscall", buf,
                         sizeof(buf));
    if (n < 0) {
        return (int) n;
    }

    return prof_syscall_regs_parse(buf, (size_t) n, regs);
}


/* The sampled thread's CPU time (its schedstat's first field, the thread
   CPU clock's ns), or -1. */
static int64_t
prof_remote_stack_cpu_ns(prof_remote_stack_t *r)
{
    char        buf[128];
    ssize_t     n;
    uint64_t    v;
    const char  *p;

    n = prof_remote_proc(r->sampler, &r->schedstat_fd, "schedstat", buf,
                         sizeof(buf));
    if (n <= 0) {
        return -1;
    }

    p = buf;
    if (prof_syscall_number(&p, buf + n, &v) != 0 || v > INT64_MAX) {
        return -1;
    }

    return (int64_t) v;
}


/*
 * The worker's unwind table, usable here: the one this process was forked
 * with while the worker still has it (at the same address), else a copy
 * of the one it has now, read with table_swaps unchanged across the read
 * (the worker counts a replacement before it frees the old table).
 */
static int
prof_remote_stack_table(prof_remote_stack_t *r, const prof_unwind_table_t **t)
{
    int                   rc;
    size_t                size, page;
    uint32_t              swaps;
    uintptr_t             remote;
    unsigned char        *m;
    uint64_t              head[64];
    prof_sampler_t       *s = r->sampler;
    prof_unwind_table_t  *copy, *forked;

    swaps = __atomic_load_n(&s->table_swaps, __ATOMIC_ACQUIRE);
    remote = (uintptr_t) __atomic_load_n(&s->table, __ATOMIC_ACQUIRE);
    forked = __atomic_load_n(&s->forked_table, __ATOMIC_ACQUIRE);

    if (remote == 0) {
        return -ENOENT;
    }

    /* (Replaced meanwhile: still the one in force a moment ago.) */
    if (forked != NULL && remote == (uintptr_t) forked) {
        *t = forked;
        return 0;
    }

    if (r->copy != NULL && r->copy_remote == remote
        && r->copy_swaps == swaps)
    {
        *t = r->copy;
        return 0;
    }

    r->copy = NULL;

    size = prof_unwind_table_head_bytes();
    if (size > sizeof(head)) {
        return -EINVAL;
    }

    rc = prof_remote_read_all(s, head, remote, size);
    if (rc != 0) {
        return rc;
    }

    size = prof_unwind_table_copy_bytes(head, remote);
    if (size == 0 || size > PROF_REMOTE_TABLE_BYTES) {
        return -EINVAL;
    }

    if (size > r->copy_capacity) {
        page = (size_t) sysconf(_SC_PAGESIZE);
        size = (size + page - 1) & ~(page - 1);

        m = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            return -ENOMEM;
        }

        if (r->table_copy != NULL) {
            (void) munmap(r->table_copy, r->copy_capacity);
        }

        r->table_copy = m;
        r->copy_capacity = size;
        size = prof_unwind_table_copy_bytes(head, remote);
    }

    rc = prof_remote_read_all(s, r->table_copy, remote, size);
    if (rc != 0) {
        return rc;
    }

    if (__atomic_load_n(&s->table_swaps, __ATOMIC_ACQUIRE) != swaps) {
        return -EAGAIN;
    }

    /*
     * Its objects of the master's table (borrowed, never freed) point
     * into that table, which this process inherited where it lies.
     */
    copy = prof_unwind_table_adopt_over(r->table_copy, size, remote,
                                        s->borrowed);
    if (copy == NULL) {
        return -EINVAL;
    }

    r->copy = copy;
    r->copy_remote = remote;
    r->copy_swaps = swaps;

    *t = copy;
    return 0;
}


/*
 * The tag of what runs: the one a sample of the worker's took for it and
 * the worker has not resolved yet, if any (channel/sampled_thread.h);
 * else none: a new tag is the worker's to take.
 */
static uint64_t
prof_remote_stack_tag(prof_sampled_thread_t *h)
{
    uint64_t  tag;

    tag = __atomic_load_n(&h->pending_tag, __ATOMIC_ACQUIRE);

    if (tag == 0 || __atomic_load_n(&h->running.log, __ATOMIC_RELAXED) == 0
        || __atomic_load_n(&h->running.request, __ATOMIC_RELAXED)
           != __atomic_load_n(&h->pending.request, __ATOMIC_RELAXED)
        || __atomic_load_n(&h->running.log, __ATOMIC_RELAXED)
           != __atomic_load_n(&h->pending.log, __ATOMIC_RELAXED)
        || __atomic_load_n(&h->running.object, __ATOMIC_RELAXED)
           != __atomic_load_n(&h->pending.object, __ATOMIC_RELAXED))
    {
        return 0;
    }

    return tag;
}


static void
prof_remote_point_load(prof_wall_point_t *to, prof_wall_point_t *from)
{
    to->wall_ns = __atomic_load_n(&from->wall_ns, __ATOMIC_RELAXED);
    to->tsc = __atomic_load_n(&from->tsc, __ATOMIC_RELAXED);
    to->wait_ticks = __atomic_load_n(&from->wait_ticks, __ATOMIC_RELAXED);
}


static void
prof_remote_point_store(prof_wall_point_t *to, const prof_wall_point_t *from)
{
    __atomic_store_n(&to->wall_ns, from->wall_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&to->tsc, from->tsc, __ATOMIC_RELAXED);
    __atomic_store_n(&to->wait_ticks, from->wait_ticks, __ATOMIC_RELAXED);
}


/*
 * The wall time from the last account (the sampled thread's point, or
 * the last claim) to now_ns, split, claimed (sampler_state.h): 0 and the
 * slot's values, or -EBUSY when the sampled thread accounts or accounted
 * since (the time is its own then).
 */
static int
prof_remote_stack_claim(prof_remote_stack_t *r, prof_slot_t *slot,
    int64_t now_ns, uint64_t now_tsc, uint64_t wait_ticks, int64_t *from_ns)
{
    int64_t             cpu_ns, point_cpu_ns;
    uint64_t            word, desired, which;
    prof_sampler_t     *s = r->sampler;
    prof_wall_point_t   point;

    cpu_ns = prof_remote_stack_cpu_ns(r);

    word = __atomic_load_n(&s->account, __ATOMIC_ACQUIRE);
    if (word & PROF_ACCOUNT_BUSY) {
        return -EBUSY;
    }

    if (word & PROF_ACCOUNT_CLAIM) {
        prof_remote_point_load(&point,
                               &s->claims[(word & PROF_ACCOUNT_WHICH) ? 1 : 0]);
    } else {
        prof_remote_point_load(&point, &s->point);
    }

    point_cpu_ns = __atomic_load_n(&s->point_cpu_ns, __ATOMIC_RELAXED);

    if (now_ns <= point.wall_ns) {
        return -EBUSY;
    }

    *from_ns = point.wall_ns;

    prof_wall_split(&point, now_ns, now_tsc, wait_ticks,
                    (cpu_ns >= 0) ? cpu_ns - point_cpu_ns : 0,
                    &slot->wall_ns, &slot->off_cpu_ns, &slot->idle_ns);

    /* The claim the word does not name: the sampled thread may be about
       to read that one. */
    which = (word & PROF_ACCOUNT_WHICH) ? 0 : PROF_ACCOUNT_WHICH;
    prof_remote_point_store(&s->claims[which ? 1 : 0], &point);

    desired = (word & ~(uint64_t) (PROF_ACCOUNT_BUSY | PROF_ACCOUNT_CLAIM
                                   | PROF_ACCOUNT_WHICH))
              | PROF_ACCOUNT_CLAIM | which;

    if (!__atomic_compare_exchange_n(&s->account, &word, desired, 0,
                                     __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    {
        return -EBUSY;
    }

    return 0;
}


/*
 * The stack from sp (in the thread's stack) up, and the red zone below
 * where it is mapped, into r->stack: 0 and *low, *size of what was read,
 * or -errno.
 */
static int
prof_remote_stack_copy(prof_remote_stack_t *r, uintptr_t sp, uintptr_t *low,
    size_t *size)
{
    ssize_t          n;
    uintptr_t        high;
    prof_sampler_t  *s = r->sampler;

    high = (s->stack_high - sp > PROF_REMOTE_STACK_BYTES)
           ? sp + PROF_REMOTE_STACK_BYTES : s->stack_high;

    n = prof_remote_read(s, r->stack + PROF_ARCH_RED_ZONE, sp, high - sp);
    if (n < 0) {
        return (int) n;
    }

    if ((size_t) n < sizeof(uintptr_t)) {
        return -EFAULT;
    }

    *low = sp;
    *size = (size_t) n;

    /* Below sp: a leaf's red zone, where an epilogue's rule may look. */
    if (PROF_ARCH_RED_ZONE > 0 && sp >= s->stack_low + PROF_ARCH_RED_ZONE
        && prof_remote_read_all(s, r->stack, sp - PROF_ARCH_RED_ZONE,
                                PROF_ARCH_RED_ZONE)
           == 0)
    {
        *low = sp - PROF_ARCH_RED_ZONE;
        *size += PROF_ARCH_RED_ZONE;
    }

    return 0;
}


int
prof_remote_stack_read(prof_remote_stack_t *r, prof_slot_t *slot,
    int64_t *from_ns, uint32_t *phase)
{
    int                         rc;
    size_t                      size;
    int64_t                     now_ns;
    uint32_t                    waiting, stop, scanned;
    uint64_t                    now_tsc, turn, tag, wait_ticks;
    uintptr_t                   low;
    prof_sampler_t             *s = r->sampler;
    prof_syscall_regs_t         regs, again;
    prof_sampled_thread_t      *h = &s->sampled;
    const prof_unwind_table_t  *t;

    rc = prof_remote_stack_table(r, &t);
    if (rc != 0) {
        return rc;
    }

    rc = prof_remote_stack_regs(r, &regs);
    if (rc != 0) {
        return rc;
    }

    /* Not on its stack: another (sigaltstack's), or not its registers
       (an emulator's own, under qemu-user): the signal asks. */
    if (regs.sp < s->stack_low || regs.sp >= s->stack_high) {
        return -ERANGE;
    }

    /* What the thread left as it blocked, stable while it stays so. */
    wait_ticks = __atomic_load_n(&h->wait_ticks, __ATOMIC_ACQUIRE);
    waiting = prof_waiting(wait_ticks);
    turn = __atomic_load_n(&h->turn_start, __ATOMIC_RELAXED);
    tag = prof_remote_stack_tag(h);
    *phase = __atomic_load_n(&h->phase, __ATOMIC_RELAXED);

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);
    now_tsc = prof_arch_ticks();

    rc = prof_remote_stack_copy(r, (uintptr_t) regs.sp, &low, &size);
    if (rc != 0) {
        return rc;
    }

    /* Still there: the copy and the words are of that one call. */
    rc = prof_remote_stack_regs(r, &again);
    if (rc != 0) {
        return rc;
    }

    if (again.nr != regs.nr || again.sp != regs.sp || again.pc != regs.pc) {
        return -EAGAIN;
    }

    rc = prof_remote_stack_claim(r, slot, now_ns, now_tsc, wait_ticks,
                                 from_ns);
    if (rc != 0) {
        return rc;
    }

    slot->frame_count = (uint16_t) prof_remote_stack_walk(t,
                            (uintptr_t) regs.pc, (uintptr_t) regs.sp,
                            r->stack + (PROF_ARCH_RED_ZONE
                                        - ((uintptr_t) regs.sp - low)),
                            low, size, slot->frames, s->conf.max_frames,
                            &stop, &scanned);

    slot->state = PROF_SLOT_READY;
    slot->kind = PROF_SLOT_STACK;
    slot->weight = 0;
    slot->interval_ns = 0;
    slot->unwind_stop = stop;
    slot->scanned = scanned;
    slot->handler_ns = 0;
    slot->time_ns = now_ns;
    slot->request = tag;

    if (waiting) {
        slot->turn = 0;
        slot->turn_ns = 0;

    } else {
        slot->turn = turn;
        slot->turn_ns = prof_ticks_ns(h, now_tsc - turn, now_ns, now_tsc);
    }

    return 0;
}
