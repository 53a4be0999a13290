/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the stack read from outside a thread blocked in a system call
 * (profiler/remote_stack.h) and of the unwind table copied from another
 * process (common/unwind_walk.h): the text of /proc/PID/task/TID/syscall
 * parsed, whatever it holds; a thread of this process blocked in read(2)
 * three calls deep walked from its registers there, on a copy of its
 * stack at another address, as on the stack itself; the walk never reads
 * past the copy, whatever it holds; a table copied byte for byte walks as
 * the one it copies, and a copy whose pointers leave it is refused.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "channel/sample.h"
#include "common/unwind_table.h"
#include "profiler/remote_stack.h"
#include "worker/unwind.h"


#define FRAMES_MAX   64


/* A thread blocked in read(2) from a pipe, three calls of this file deep:
   the return address each call left, as its callee saw it. */
typedef struct {
    int           pipe[2];
    pid_t         tid;
    pthread_t     thread;
    uintptr_t     stack_low;
    uintptr_t     stack_high;
    uintptr_t     returns[3];   /* into blocked_middle, _outer, _main */
    int           ready;
} blocked_t;


static prof_unwind_table_t  *table;
static char                  blocked_byte;


/*
 * The calls to walk through: frames found from the stack pointer, as
 * GCC's -O2 makes them (a build with frame pointers, a sanitizer's,
 * gives a walk from outside only the pc and sp, and frames found from a
 * frame pointer not yet known are stepped over by a scan, remote_stack.h),
 * and read(2) by syscall(2), which no sanitizer intercepts (an
 * interceptor's frame is one of those).
 */
#if defined(__GNUC__) && !defined(__clang__)
#define BLOCKED_FRAME  __attribute__((noinline, optimize("omit-frame-pointer")))
#else
#define BLOCKED_FRAME  __attribute__((noinline))
#endif


BLOCKED_FRAME static void
blocked_read(blocked_t *b)
{
    b->returns[0] = (uintptr_t) __builtin_return_address(0);
    __atomic_store_n(&b->ready, 1, __ATOMIC_RELEASE);

    while (syscall(SYS_read, b->pipe[0], &blocked_byte, 1) < 0
           && errno == EINTR)
    {
        /* again */
    }

    __asm__ volatile ("" ::: "memory");
}


BLOCKED_FRAME static void
blocked_middle(blocked_t *b)
{
    b->returns[1] = (uintptr_t) __builtin_return_address(0);
    blocked_read(b);
    __asm__ volatile ("" ::: "memory");
}


BLOCKED_FRAME static void
blocked_outer(blocked_t *b)
{
    b->returns[2] = (uintptr_t) __builtin_return_address(0);
    blocked_middle(b);
    __asm__ volatile ("" ::: "memory");
}


BLOCKED_FRAME static void *
blocked_main(void *arg)
{
    blocked_t  *b = arg;

    b->tid = (pid_t) syscall(SYS_gettid);
    blocked_outer(b);
    __asm__ volatile ("" ::: "memory");

    return NULL;
}


/* The syscall file of a thread of this process, parsed. */
static int
read_syscall(pid_t tid, prof_syscall_regs_t *regs)
{
    int      fd;
    char     path[64], buf[256];
    ssize_t  n;

    (void) snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall",
                    (int) getpid(), (int) tid);

    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    n = read(fd, buf, sizeof(buf));
    (void) close(fd);
    assert_true(n > 0);

    return prof_syscall_regs_parse(buf, (size_t) n, regs);
}


/*
 * Whether this machine's threads' system calls are read as the profiler
 * process reads them: the calling thread's own, reading its file, is
 * read(2) on its stack (not under an emulator: qemu-user shows its own
 * registers and calls there).
 */
static int
syscalls_readable(void)
{
    int                  here;
    prof_syscall_regs_t  regs;

    if (read_syscall((pid_t) syscall(SYS_gettid), &regs) != 0) {
        return 0;
    }

    return regs.nr == SYS_read && regs.sp > (uintptr_t) &here - 65536
           && regs.sp < (uintptr_t) &here + 65536;
}


/* Starts the thread and waits for it to block in read(2): its registers
   there. */
static void
blocked_start(blocked_t *b, prof_syscall_regs_t *regs)
{
    int             i;
    void           *addr;
    size_t          size;
    pthread_attr_t  attr;
    struct timespec pause = { 0, 1000 * 1000 };

    memset(b, 0, sizeof(blocked_t));
    assert_int_equal(pipe(b->pipe), 0);
    assert_int_equal(pthread_create(&b->thread, NULL, blocked_main, b), 0);

    assert_int_equal(pthread_getattr_np(b->thread, &attr), 0);
    assert_int_equal(pthread_attr_getstack(&attr, &addr, &size), 0);
    (void) pthread_attr_destroy(&attr);
    b->stack_low = (uintptr_t) addr;
    b->stack_high = (uintptr_t) addr + size;

    for (i = 0; i < 5000; i++) {
        if (__atomic_load_n(&b->ready, __ATOMIC_ACQUIRE)
            && read_syscall(b->tid, regs) == 0 && regs->nr == SYS_read)
        {
            return;
        }
        (void) nanosleep(&pause, NULL);
    }

    fail_msg("the thread did not block in read(2)");
}


static void
blocked_stop(blocked_t *b)
{
    assert_int_equal(write(b->pipe[1], "x", 1), 1);
    assert_int_equal(pthread_join(b->thread, NULL), 0);
    (void) close(b->pipe[0]);
    (void) close(b->pipe[1]);
}


/* The blocked thread's stack from sp (less the red zone) up: a copy,
   made as the profiler process makes it. */
static unsigned char *
blocked_copy(blocked_t *b, const prof_syscall_regs_t *regs, uintptr_t *low,
    size_t *size)
{
    ssize_t         n;
    unsigned char  *copy;
    struct iovec    to, from;

    *low = regs->sp - PROF_ARCH_RED_ZONE;
    *size = b->stack_high - *low;
    if (*size > PROF_REMOTE_STACK_BYTES) {
        *size = PROF_REMOTE_STACK_BYTES;
    }

    copy = malloc(*size);
    assert_non_null(copy);

    to.iov_base = copy;
    to.iov_len = *size;
    from.iov_base = (void *) *low;
    from.iov_len = *size;

    n = process_vm_readv(getpid(), &to, 1, &from, 1, 0);
    assert_int_equal(n, (ssize_t) *size);

    return copy;
}


/* Whether the return addresses the thread left are in frames, in order
   (after the leaf). */
static void
assert_frames_hold_returns(const blocked_t *b, const uint64_t *frames,
    unsigned n)
{
    unsigned  i, k;

    k = 0;

    for (i = 1; i < n && k < 3; i++) {
        if (frames[i] == b->returns[k]) {
            k++;
        }
    }

    if (k < 3) {
        for (i = 0; i < n; i++) {
            print_message("frame %u: %#llx\n", i,
                          (unsigned long long) frames[i]);
        }
        print_message("returns: %#lx %#lx %#lx\n",
                      (unsigned long) b->returns[0],
                      (unsigned long) b->returns[1],
                      (unsigned long) b->returns[2]);
    }

    assert_int_equal(k, 3);
}


static int
setup(void **state)
{
    table = prof_unwind_table_build();

    return table == NULL ? -1 : 0;
}


static int
teardown(void **state)
{
    prof_unwind_table_free(table);
    table = NULL;

    return 0;
}


/* The tests of a blocked thread: skipped where its calls are not read. */
static void
skip_unless_readable(void)
{
    if (!syscalls_readable()) {
        print_message("system calls not read as on a machine: skipped\n");
        skip();
    }
}


/*
 * The kernel's lines, and what is not one: a number of another form, a
 * field more or less, anything but "running" in words.
 */
static void
test_syscall_file_is_parsed(void **state)
{
    prof_syscall_regs_t  r;
    static const char   *bad[] = {
        "",
        "\n",
        "running now\n",
        "Running\n",
        "0 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd0000\n",           /* 8 fields */
        "0 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8 0x9\n",          /* 10 */
        "0  0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8\n",             /* two spaces */
        "0 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0xZ\n",
        "0 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x\n",
        "0 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8 \n",
        "0 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x10000000000000000\n",
        "-2 0x7ffd0000 0x7f000000\n",
        "-1 0x7ffd0000\n",
        "-1 0x7ffd0000 0x7f000000 0x1\n",
        "-1 0x7ffd0000 0x7f00000G\n",
        "x 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8\n",
        NULL
    };
    const char         **b;
    const char          *line;

    line = "202 0x55d0c4a3e0d8 0x80 0x2 0x0 0x0 0x0 0x7ffd5a2bd040 "
           "0x7f3c9a2e37fa\n";
    assert_int_equal(prof_syscall_regs_parse(line, strlen(line), &r), 0);
    assert_int_equal(r.nr, 202);
    assert_int_equal(r.args[0], 0x55d0c4a3e0d8ULL);
    assert_int_equal(r.args[1], 0x80);
    assert_int_equal(r.args[2], 2);
    assert_int_equal(r.args[5], 0);
    assert_int_equal(r.sp, 0x7ffd5a2bd040ULL);
    assert_int_equal(r.pc, 0x7f3c9a2e37faULL);

    /* Without the newline, or cut by the reader's buffer at its end. */
    assert_int_equal(prof_syscall_regs_parse(line, strlen(line) - 1, &r), 0);
    assert_int_equal(r.pc, 0x7f3c9a2e37faULL);

    line = "-1 0x7ffd5a2bd040 0x55d0c4a00123\n";
    assert_int_equal(prof_syscall_regs_parse(line, strlen(line), &r), 0);
    assert_int_equal(r.nr, -1);
    assert_int_equal(r.sp, 0x7ffd5a2bd040ULL);
    assert_int_equal(r.pc, 0x55d0c4a00123ULL);

    line = "running\n";
    assert_int_equal(prof_syscall_regs_parse(line, strlen(line), &r),
                     -EAGAIN);

    for (b = bad; *b != NULL; b++) {
        if (prof_syscall_regs_parse(*b, strlen(*b), &r) != -EINVAL) {
            fail_msg("parsed: \"%s\"", *b);
        }
    }
}


/*
 * A thread of this process blocked in read(2): the file names the call,
 * its stack pointer in the thread's stack; and the walk from there, on a
 * copy of the stack (as the profiler process reads it) and on the stack
 * itself, finds the same frames, through the three calls of this file.
 */
static void
test_walk_of_a_copy_is_the_walk_of_the_stack(void **state)
{
    size_t               size;
    uint32_t             stop, scanned, live_stop, live_scanned;
    unsigned             n, live_n;
    uint64_t             frames[FRAMES_MAX + 1], live[FRAMES_MAX + 1];
    uintptr_t            low;
    blocked_t            b;
    unsigned char       *copy;
    prof_syscall_regs_t  regs;

    skip_unless_readable();

    blocked_start(&b, &regs);

    assert_true(regs.sp >= b.stack_low && regs.sp < b.stack_high);
    assert_int_equal(regs.args[0], (uint64_t) b.pipe[0]);

    copy = blocked_copy(&b, &regs, &low, &size);

    n = prof_remote_stack_walk(table, regs.pc, regs.sp, copy, low, size,
                               frames, FRAMES_MAX, &stop, &scanned);
    live_n = prof_remote_stack_walk(table, regs.pc, regs.sp, (void *) low,
                                    low, size, live, FRAMES_MAX, &live_stop,
                                    &live_scanned);

    print_message("%u frames (%u scanned, stop %u)\n", n, scanned, stop);

    assert_int_equal(n, live_n);
    assert_memory_equal(frames, live, n * sizeof(uint64_t));
    assert_int_equal(stop, live_stop);
    assert_int_equal(scanned, live_scanned);

    assert_int_equal(frames[0], regs.pc);
    assert_frames_hold_returns(&b, frames, n);

    free(copy);
    blocked_stop(&b);
}


/*
 * Copies cut short, at their end a page no read may touch, and copies of
 * garbage: the walk stops inside them (a marker ends it), never reading
 * past.
 */
static void
test_walk_never_reads_past_the_copy(void **state)
{
    size_t               size, cut, page, span;
    uint32_t             stop, scanned;
    unsigned             n, full, i;
    uint64_t             frames[FRAMES_MAX + 1], x;
    uint64_t             garbage[FRAMES_MAX + 1];
    uintptr_t            low;
    blocked_t            b;
    unsigned char       *copy, *m, *at;
    prof_syscall_regs_t  regs;

    skip_unless_readable();

    page = (size_t) sysconf(_SC_PAGESIZE);

    blocked_start(&b, &regs);
    copy = blocked_copy(&b, &regs, &low, &size);

    /* The frames of the whole copy, for the garbage's return addresses. */
    full = prof_remote_stack_walk(table, regs.pc, regs.sp, copy, low, size,
                                  frames, FRAMES_MAX, &stop, &scanned);
    assert_true(full >= 1);

    span = (size + page - 1) & ~(page - 1);
    m = mmap(NULL, span + page, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + span, page, PROT_NONE), 0);

    for (cut = 8; cut <= size; cut = (cut < 512) ? cut + 8 : cut * 2) {
        /* The copy's first cut bytes, ending at the guard page. */
        at = m + span - cut;
        memcpy(at, copy, cut);

        n = prof_remote_stack_walk(table, regs.pc,
                                   (regs.sp < low + cut) ? regs.sp : low,
                                   at, low, cut, garbage, FRAMES_MAX, &stop,
                                   &scanned);
        assert_true(n >= 1 && n <= FRAMES_MAX);
    }

    /* Garbage: words that look like anything, the stack's return
       addresses and its own addresses too. */
    x = 88172645463325252ULL;
    for (i = 0; i < 64; i++) {
        for (at = m + span - size; at + 8 <= m + span; at += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *(uint64_t *) at = (x & 1) ? frames[x % full] + (x >> 60)
                                       : regs.sp + (x >> 48);
        }

        n = prof_remote_stack_walk(table, regs.pc, regs.sp,
                                   m + span - size, low, size, garbage,
                                   FRAMES_MAX, &stop, &scanned);
        assert_true(n >= 1 && n <= FRAMES_MAX);
    }

    (void) munmap(m, span + page);
    free(copy);
    blocked_stop(&b);
}


/*
 * A table copied byte for byte, as the profiler process copies the
 * worker's (its head tells how much): the copy walks as the table; a copy
 * whose pointers leave it, or of another size, is refused.
 */
static void
test_table_copy_walks_as_the_table(void **state)
{
    size_t                 size, bytes, cut;
    uint32_t               stop, scanned;
    unsigned               n, copy_n;
    uint64_t               frames[FRAMES_MAX + 1], with_copy[FRAMES_MAX + 1];
    uintptr_t              low, remote;
    blocked_t              b;
    unsigned char         *copy, *stack;
    prof_unwind_table_t   *t;
    prof_syscall_regs_t    regs;
    prof_unwind_object_t  *o;

    skip_unless_readable();

    remote = (uintptr_t) table->arena;

    assert_true(prof_unwind_table_head_bytes() <= table->bytes);
    bytes = prof_unwind_table_copy_bytes(table, remote);
    assert_int_equal(bytes, table->bytes);
    assert_int_equal(prof_unwind_table_copy_bytes(table, remote + 4096), 0);

    copy = aligned_alloc(64, (bytes + 63) & ~(size_t) 63);
    assert_non_null(copy);

    /* Another size, or another place: refused. */
    memcpy(copy, table->arena, bytes);
    assert_null(prof_unwind_table_adopt(copy, bytes - 8, remote));
    memcpy(copy, table->arena, bytes);
    assert_null(prof_unwind_table_adopt(copy, bytes, remote + 64));

    /* An object's rows out of the copy: refused. */
    memcpy(copy, table->arena, bytes);
    o = (prof_unwind_object_t *) (copy + ((unsigned char *) table->objects
                                          - table->arena));
    o[0].rows = (const prof_row_t *) (remote + bytes - 4);
    assert_null(prof_unwind_table_adopt(copy, bytes, remote));

    /* Its page index naming a row it does not have: refused. */
    memcpy(copy, table->arena, bytes);
    cut = (size_t) ((const unsigned char *) table->objects[0].pages
                    - table->arena);
    *(uint32_t *) (copy + cut) = table->objects[0].row_count;
    assert_null(prof_unwind_table_adopt(copy, bytes, remote));

    /* The copy as it is: it walks as the table. */
    memcpy(copy, table->arena, bytes);
    t = prof_unwind_table_adopt(copy, bytes, remote);
    assert_non_null(t);
    assert_ptr_equal(t, copy);

    blocked_start(&b, &regs);
    stack = blocked_copy(&b, &regs, &low, &size);

    n = prof_remote_stack_walk(table, regs.pc, regs.sp, stack, low, size,
                               frames, FRAMES_MAX, &stop, &scanned);
    copy_n = prof_remote_stack_walk(t, regs.pc, regs.sp, stack, low, size,
                                    with_copy, FRAMES_MAX, &stop, &scanned);

    assert_int_equal(n, copy_n);
    assert_memory_equal(frames, with_copy, n * sizeof(uint64_t));
    assert_frames_hold_returns(&b, with_copy, copy_n);

    free(stack);
    blocked_stop(&b);
    free(copy);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_syscall_file_is_parsed),
        cmocka_unit_test_setup_teardown(
            test_walk_of_a_copy_is_the_walk_of_the_stack, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_walk_never_reads_past_the_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_table_copy_walks_as_the_table, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
