/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the unwind tables (worker/unwind.h): stacks walked from a
 * SIGPROF handler while the thread runs real code (zlib, qsort with a
 * callback, recursion through this program) must match what libunwind's
 * stepping unwinder finds for the same signal, frame for frame.
 */

#define _GNU_SOURCE
#define UNW_LOCAL_ONLY

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <ucontext.h>
#include <zlib.h>
#include <libunwind.h>
#include <cmocka.h>

#include "worker/arch.h"
#include "worker/unwind.h"
#include "common/unwind_table.h"


#define FRAMES_MAX   64
#define SAMPLES_MAX  400


typedef struct {
    int                   status;
    int                   count;
    int                   reference_count;
    void                 *frames[FRAMES_MAX];
    void                 *reference[FRAMES_MAX];
} sample_t;


static prof_unwind_table_t  *table;
static uintptr_t             stack_low, stack_high;
static sample_t              samples[SAMPLES_MAX];
static volatile int          sample_count;


#ifdef __ARM_FEATURE_PAC_DEFAULT

#define REFERENCE  "GCC's unwinder"

/*
 * Built with return addresses signed (-mbranch-protection=standard):
 * libunwind (1.6) cannot step over such frames, GCC's unwinder can. The
 * reference is its walk from the handler through the signal frame, from
 * the interrupted pc on.
 */
#include <unwind.h>

typedef struct {
    void       **frames;
    int          max;
    int          n;
    uintptr_t    from;
} gcc_walk_t;


static _Unwind_Reason_Code
gcc_frame(struct _Unwind_Context *context, void *arg)
{
    int          before;
    uintptr_t    ip;
    gcc_walk_t  *w = arg;

    ip = _Unwind_GetIPInfo(context, &before);

    if (w->n == 0 && ip != w->from) {
        return _URC_NO_REASON;                  /* the handler's frames */
    }

    if (ip == 0) {
        return _URC_END_OF_STACK;
    }

    w->frames[w->n++] = (void *) ip;

    return (w->n == w->max) ? _URC_END_OF_STACK : _URC_NO_REASON;
}


static int
reference_unwind(ucontext_t *uc, void **frames, int max)
{
    gcc_walk_t  w;

    w.frames = frames;
    w.max = max;
    w.n = 0;
    w.from = uc->uc_mcontext.pc;

    _Unwind_Backtrace(gcc_frame, &w);

    return w.n;
}


/*
 * Whether this function's return address, as its frame record holds it,
 * is signed (differs from what __builtin_return_address() gives, which
 * strips it): whether the CPU authenticates pointers.
 */
__attribute__((noinline)) static int
return_address_signed(void)
{
    uintptr_t  saved;

    saved = ((volatile uintptr_t *) __builtin_frame_address(0))[1];

    return saved != (uintptr_t) __builtin_return_address(0);
}

#else

#define REFERENCE  "libunwind"

/* libunwind from the signal context: the reference. */
static int
reference_unwind(ucontext_t *uc, void **frames, int max)
{
    int           n;
    unw_word_t    ip;
    unw_cursor_t  cursor;

    if (unw_init_local2(&cursor, (unw_context_t *) uc, UNW_INIT_SIGNAL_FRAME)
        != 0)
    {
        return 0;
    }

    n = 0;
    do {
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) {
            break;
        }
        frames[n++] = (void *) ip;
    } while (n < max && unw_step(&cursor) > 0);

    return n;
}

#endif


static void
on_sigprof(int signo, siginfo_t *info, void *context)
{
    int                  saved_errno;
    ucontext_t          *uc = context;
    sample_t            *s;
    prof_unwind_regs_t   regs;

    if (sample_count == SAMPLES_MAX) {
        return;
    }

    saved_errno = errno;

    s = &samples[sample_count];

    prof_arch_context_regs(uc, &regs.pc, &regs.sp, &regs.fp, &regs.aux,
                           &regs.lr);
    regs.stack_low = stack_low;
    regs.stack_high = stack_high;
    regs.stack_delta = 0;
    regs.caller = 0;
    regs.where = NULL;

    s->status = prof_unwind(table, &regs, s->frames, FRAMES_MAX, &s->count);
    s->reference_count = reference_unwind(uc, s->reference, FRAMES_MAX);

    sample_count++;
    errno = saved_errno;
}


static int
compare_ints(const void *a, const void *b)
{
    int  x = *(const int *) a, y = *(const int *) b;

    return (x > y) - (x < y);
}


__attribute__((noinline)) static unsigned
work(unsigned x)
{
    int            i, values[4096];
    uLongf         out_len;
    unsigned char  in[16384], out[20000];

    for (i = 0; i < (int) sizeof(in); i++) {
        x = x * 1103515245 + 12345;
        in[i] = (unsigned char) ((x >> 16) % 32);
    }
    out_len = sizeof(out);
    assert_int_equal(compress2(out, &out_len, in, sizeof(in), 6), Z_OK);

    for (i = 0; i < 4096; i++) {
        values[i] = (int) (x = x * 1103515245 + 12345);
    }
    qsort(values, 4096, sizeof(int), compare_ints);

    return x + (unsigned) out_len;
}


/* The address right after a call in a function of this program. */
__attribute__((noinline)) static void *
recurse_return_address_callee(void)
{
    return __builtin_return_address(0);
}


__attribute__((noinline)) static void *
recurse_return_address(void)
{
    void  *ra;

    ra = recurse_return_address_callee();

    /* Work after the call: the return address is inside this function. */
    __asm__ volatile ("" ::: "memory");

    return ra;
}


#if defined(__x86_64__)

/*
 * A function that finds its frame from rbp (as code built with frame
 * pointers does), with locals, calling code at rdi: fp_caller_return is
 * its return address there; and one that finds it from rsp whatever the
 * build's flags, rsp_caller_return.
 */
extern const char fp_caller_return[], rsp_caller_return[];

__asm__ (
    "    .pushsection .text\n"
    "    .type   fp_caller, @function\n"
    "fp_caller:\n"
    "    .cfi_startproc\n"
    "    push    %rbp\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset %rbp, -16\n"
    "    mov     %rsp, %rbp\n"
    "    .cfi_def_cfa_register %rbp\n"
    "    sub     $32, %rsp\n"
    "    call    *%rdi\n"
    "fp_caller_return:\n"
    "    leave\n"
    "    .cfi_def_cfa %rsp, 8\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   fp_caller, .-fp_caller\n"
    "\n"
    "    .type   rsp_caller, @function\n"
    "rsp_caller:\n"
    "    .cfi_startproc\n"
    "    sub     $8, %rsp\n"
    "    .cfi_def_cfa_offset 16\n"
    "    call    *%rdi\n"
    "rsp_caller_return:\n"
    "    add     $8, %rsp\n"
    "    .cfi_def_cfa_offset 8\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   rsp_caller, .-rsp_caller\n"
    "    .popsection\n"
);


#endif /* __x86_64__ */


/* The work at the bottom of depth frames of this program. */
__attribute__((noinline)) static unsigned
recurse(unsigned depth, unsigned seed)
{
    unsigned  r;

    if (depth == 0) {
        return work(seed);
    }

    r = recurse(depth - 1, seed + depth);

    /* Work after the call: no tail call, so every level is a frame. */
    return r ^ (r >> 7);
}


__attribute__((noinline)) static void
workload(int64_t ns)
{
    unsigned         x, depth;
    struct timespec  now, end;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
    end.tv_sec += ns / 1000000000;
    end.tv_nsec += ns % 1000000000;
    if (end.tv_nsec >= 1000000000) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000;
    }

    x = 1;

    for (depth = 0; ; depth = (depth + 7) % 40) {
        x += recurse(depth, x);

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        if (now.tv_sec > end.tv_sec
            || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
        {
            break;
        }
    }
}


static void
stack_bounds(void)
{
    void            *addr;
    size_t           size;
    pthread_attr_t   attr;

    assert_int_equal(pthread_getattr_np(pthread_self(), &attr), 0);
    assert_int_equal(pthread_attr_getstack(&attr, &addr, &size), 0);
    pthread_attr_destroy(&attr);

    stack_low = (uintptr_t) addr;
    stack_high = (uintptr_t) addr + size;
}


static void
test_matches_libunwind(void **state)
{
    int                i, j, complete, matched, deep;
    timer_t            timer;
    sample_t          *s;
    struct sigevent    sev;
    struct sigaction   sa, saved;
    struct itimerspec  its;

    table = prof_unwind_table_build();
    assert_non_null(table);
    assert_true(prof_unwind_table_objects(table) >= 3);  /* us, libc, libz */
    stack_bounds();

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGPROF, &sa, &saved), 0);

    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGPROF;
    assert_int_equal(timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer), 0);

    its.it_interval.tv_sec = 0;
    its.it_interval.tv_nsec = 1000 * 1000;
    its.it_value = its.it_interval;
    assert_int_equal(timer_settime(timer, 0, &its, NULL), 0);

    /*
     * 600 ms of CPU time, more while fewer than 50 samples came (a thread
     * waiting for a CPU gets its timer's expirations late and together),
     * 10 s of it at most.
     */
    for (i = 0; i < 100 && (i < 6 || sample_count < 50); i++) {
        workload(100 * 1000 * 1000LL);
    }

    timer_delete(timer);
    sigaction(SIGPROF, &saved, NULL);

    assert_true(sample_count >= 50);

    complete = 0;
    matched = 0;
    deep = 0;

    for (i = 0; i < sample_count; i++) {
        s = &samples[i];

        if (s->status != PROF_UNWIND_END) {
            continue;
        }
        complete++;

        if (s->count == s->reference_count) {
            for (j = 0; j < s->count; j++) {
                if (s->frames[j] != s->reference[j]) {
                    break;
                }
            }
            if (j == s->count) {
                matched++;
            }
        }

        if (s->count > 32) {
            deep++;
        }
    }

    print_message("%d samples, %d walked to the outermost frame, "
                  "%d equal to " REFERENCE "'s, %d deeper than 32 frames, "
                  "%u objects, %zu bytes of tables\n",
                  sample_count, complete, matched, deep,
                  prof_unwind_table_objects(table),
                  prof_unwind_table_bytes(table));

#ifdef __SANITIZE_THREAD__
    /*
     * ThreadSanitizer runs the handler later, from its own code, with the
     * context of the signal's arrival: that stack has moved on since, and
     * only the walk's safety (done above) can be checked.
     */
    prof_unwind_table_free(table);
    skip();
#endif

    /* A leaf in a PLT stub (no rows) may stop a walk; nothing else. */
    assert_true(complete >= sample_count * 98 / 100);
    assert_true(matched >= complete * 98 / 100);
    assert_true(deep > 0);

    prof_unwind_table_free(table);
}


static void
set_regs(prof_unwind_regs_t *regs, uintptr_t pc, uintptr_t sp,
    uintptr_t low, uintptr_t high)
{
    regs->pc = pc;
    regs->sp = sp;
    regs->fp = 0;
    regs->aux = 0;
    regs->lr = 0;
    regs->stack_low = low;
    regs->stack_high = high;
    regs->stack_delta = 0;
    regs->caller = 0;
    regs->where = NULL;
}


static void
test_bounds_and_unknown_code(void **state)
{
    int                 count;
    void               *frames[FRAMES_MAX];
    uintptr_t           fake[4], low, high;
    prof_unwind_regs_t  regs;

    table = prof_unwind_table_build();
    assert_non_null(table);

    low = (uintptr_t) fake;
    high = (uintptr_t) (fake + 4);

    /* A pc in no object: the walk stops at once, with that frame. */
    set_regs(&regs, 16, low, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_NO_OBJECT);
    assert_int_equal(count, 1);

    /* A frame whose caller would lie past the stack's end is not read. */
    set_regs(&regs, (uintptr_t) recurse, high - 4, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_BAD_STACK);

    /* A stack pointer outside the bounds: nothing is read. */
    set_regs(&regs, (uintptr_t) recurse, low - 64, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_BAD_STACK);
    assert_int_equal(count, 0);

#ifdef PROF_ARCH_RA_IN_ROWS
    /* At a function's first instruction the return address is in the
       link register (a caller's, whose own return address is 0 here). */
    memset(fake, 0, sizeof(fake));
    set_regs(&regs, (uintptr_t) recurse, low, low, high);
    regs.lr = (uintptr_t) recurse_return_address();
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_END);
    assert_int_equal(count, 2);
    assert_ptr_equal(frames[1], (void *) regs.lr);
#else
    /* At a function's first instruction the return address is at sp. */
    fake[0] = 0;
    set_regs(&regs, (uintptr_t) recurse, low, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_END);
    assert_int_equal(count, 1);
#endif

    /* Full: exactly max frames. */
    fake[0] = (uintptr_t) workload + 1;
    set_regs(&regs, (uintptr_t) recurse, low, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, 1, &count),
                     PROF_UNWIND_FULL);
    assert_int_equal(count, 1);

    prof_unwind_table_free(table);
}


#if defined(__x86_64__)

/*
 * Code the table does not know (JIT code: an anonymous executable page)
 * whose frame holds junk, then a return address into known code: the
 * scan finds the caller; junk that only looks like code (a function's
 * own address, a pointer into no object) is passed over, and nothing is
 * read past the stack's end.
 */
static void
test_scan_steps_over_unknown_code(void **state)
{
    int                 count;
    void               *frames[FRAMES_MAX];
    uintptr_t           stack[16], low, high, ret;
    prof_unwind_regs_t  regs;

    table = prof_unwind_table_build();
    assert_non_null(table);

    low = (uintptr_t) stack;
    high = (uintptr_t) (stack + 16);

    /* A return address into workload(): just past a call in it. */
    ret = (uintptr_t) recurse_return_address();

    memset(stack, 0, sizeof(stack));
    stack[0] = 0xdeadbeef;                   /* junk */
    stack[1] = (uintptr_t) recurse;          /* a function's address */
    stack[2] = (uintptr_t) &stack[10];       /* the caller's rbp, pushed */
    stack[3] = ret;

    /* The walk stops at the unknown pc... */
    set_regs(&regs, 0x1000, low, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_NO_OBJECT);

    /* ... the scan finds the return address, past the junk (the
       auxiliary register's value unknown there). */
    regs.aux = low;
    assert_int_equal(prof_unwind_scan(table, &regs, 64), 0);
    assert_int_equal(regs.pc, ret);
    assert_int_equal(regs.sp, (uintptr_t) &stack[4]);
    assert_int_equal(regs.caller, 1);
    assert_int_equal(regs.aux, 0);

    /*
     * A caller whose frame is found from rbp, under a callee that pushed
     * no rbp: its frame ends at the next return address above its locals.
     */
    memset(stack, 0, sizeof(stack));
    stack[0] = 0x4141414141414141;           /* junk, not a saved rbp */
    stack[1] = (uintptr_t) fp_caller_return;
    stack[2] = 0xdeadbeef;                   /* fp_caller's locals */
    stack[3] = (uintptr_t) recurse;
    stack[6] = (uintptr_t) &stack[12];       /* the rbp it saved */
    stack[7] = (uintptr_t) rsp_caller_return;

    set_regs(&regs, 0x1000, low, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 64), 0);
    assert_int_equal(regs.pc, (uintptr_t) fp_caller_return);
    assert_int_equal(regs.sp, (uintptr_t) &stack[2]);
    assert_int_equal(regs.fp, (uintptr_t) &stack[6]);
    prof_unwind(table, &regs, frames, 2, &count);
    assert_int_equal(count, 2);
    assert_ptr_equal(frames[0], fp_caller_return);
    assert_ptr_equal(frames[1], rsp_caller_return);

    /* ... not where the word below that is no frame pointer... */
    stack[6] = 0x4141414141414141;
    set_regs(&regs, 0x1000, low, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 64), 0);
    assert_int_equal(regs.pc, (uintptr_t) rsp_caller_return);

    /* ... and without a return address above, it is passed over. */
    stack[6] = (uintptr_t) &stack[12];
    stack[7] = 0;
    set_regs(&regs, 0x1000, low, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 64), -1);

    /* Nothing that looks like a return address: no caller. */
    memset(stack, 0, sizeof(stack));
    stack[0] = (uintptr_t) recurse;
    set_regs(&regs, 0x1000, low, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 64), -1);

    /* The scan stays in the stack whatever max_words says. */
    set_regs(&regs, 0x1000, high - 8, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 1 << 20), -1);

    prof_unwind_table_free(table);
}


/*
 * Code without call frame information, as musl's libc is built: a
 * function with a frame of locals calling a leaf that keeps none (a
 * system call's wrapper). nocfi_leaf_pc is in the leaf, after no call.
 */
extern const char nocfi_caller[], nocfi_caller_return[], nocfi_leaf_pc[],
    nocfi_end[];

__asm__ (
    "    .pushsection .text\n"
    "    .type   nocfi_caller, @function\n"
    "nocfi_caller:\n"
    "    sub     $24, %rsp\n"
    "    call    nocfi_leaf\n"
    "nocfi_caller_return:\n"
    "    add     $24, %rsp\n"
    "    ret\n"
    "    .size   nocfi_caller, .-nocfi_caller\n"
    "    .type   nocfi_leaf, @function\n"
    "nocfi_leaf:\n"
    "    nop\n"
    "nocfi_leaf_pc:\n"
    "    ret\n"
    "    .size   nocfi_leaf, .-nocfi_leaf\n"
    "nocfi_end:\n"
    "    .popsection\n"
);


/*
 * In an object without unwind tables (here: the code above, as a table
 * of one image without .eh_frame_hdr), the scan takes a word just past a
 * call there for a return address (and not a word that points elsewhere
 * in that code); such a frame just past the program's entry point ends
 * the stack.
 */
static void
test_code_without_tables(void **state)
{
    int                 count;
    void               *frames[FRAMES_MAX];
    uintptr_t           stack[16], low, high, code;
    prof_unwind_regs_t  regs;

    code = (uintptr_t) nocfi_caller;
    table = prof_unwind_table_from_image(code, nocfi_caller,
                                         (size_t) (nocfi_end - nocfi_caller),
                                         0, 0);
    assert_non_null(table);
    assert_int_equal(prof_unwind_table_objects(table), 1);

    low = (uintptr_t) stack;
    high = (uintptr_t) (stack + 16);

    memset(stack, 0, sizeof(stack));
    stack[0] = (uintptr_t) nocfi_leaf_pc;        /* not after a call */
    stack[1] = (uintptr_t) nocfi_caller_return;  /* the leaf's caller */
    stack[2] = 0x4141414141414141;               /* its locals */

    /* A pc in a known object, where no rule is: not an unknown pc. */
    set_regs(&regs, (uintptr_t) nocfi_leaf_pc, low, low, high);
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_NO_RULE);
    assert_int_equal(count, 1);

    assert_int_equal(prof_unwind_scan(table, &regs, 64), 0);
    assert_int_equal(regs.pc, (uintptr_t) nocfi_caller_return);
    assert_int_equal(regs.sp, (uintptr_t) &stack[2]);

    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_NO_RULE);
    assert_int_equal(count, 1);
    assert_ptr_equal(frames[0], nocfi_caller_return);

    /* Nothing above looks like a return address. */
    assert_int_equal(prof_unwind_scan(table, &regs, 64), -1);

    /* The same frame as the program's first function's: the end. */
    table->entry = code;
    set_regs(&regs, (uintptr_t) nocfi_caller_return, (uintptr_t) &stack[2],
             low, high);
    regs.caller = 1;
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_END);
    assert_int_equal(count, 1);

    prof_unwind_table_free(table);
}


/* t/unit/nocfi.S: a shared object without unwind tables, loaded. */
uintptr_t nocfi_return_address(void);
uintptr_t nocfi_code(void);


/* Calls into that object through the PLT: the word just past the call. */
static uintptr_t __attribute__((noinline))
call_out_return_address(void)
{
    uintptr_t  ra;

    ra = nocfi_return_address();
    __asm__ volatile ("" ::: "memory");

    return ra;
}


/*
 * With an object without unwind tables loaded, a scan from its code takes
 * a word of another object's code for the caller only just past a call
 * that may leave that object (through the PLT, a pointer): not a stale
 * return address of a call to a function of that object's own, which
 * could not have led here.
 */
static void
test_scan_from_code_without_tables_takes_call_outs(void **state)
{
    uintptr_t           stack[8], low, high, stale, out;
    prof_unwind_regs_t  regs;

    table = prof_unwind_table_build();
    assert_non_null(table);
    assert_true(table->callouts);

    low = (uintptr_t) stack;
    high = (uintptr_t) (stack + 8);
    stale = (uintptr_t) recurse_return_address();   /* a local call's */
    out = call_out_return_address();

    /* Each below the frame pointer its function would have pushed (the
       callers find their frames from it in a build with them). */
    memset(stack, 0, sizeof(stack));
    stack[0] = (uintptr_t) &stack[6];
    stack[1] = stale;
    stack[2] = (uintptr_t) &stack[6];
    stack[3] = out;

    set_regs(&regs, nocfi_code(), low, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 8), 0);
    assert_int_equal(regs.pc, out);
    assert_int_equal(regs.sp, (uintptr_t) &stack[4]);

    /* From code that is no object's (JIT code), any caller goes. */
    set_regs(&regs, 0x1000, low, low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 8), 0);
    assert_int_equal(regs.pc, stale);

    prof_unwind_table_free(table);
}


/*
 * A function that aligns its stack and finds its frame from rbx (as
 * glibc's lazy binding does, _dl_runtime_resolve), calling code at rdi;
 * and one that saves rbx and uses it for its own, calling code at rdi.
 */
extern const char aux_realigner_return[], aux_saver_return[];

__asm__ (
    "    .pushsection .text\n"
    "    .type   aux_realigner, @function\n"
    "aux_realigner:\n"
    "    .cfi_startproc\n"
    "    push    %rbx\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset %rbx, -16\n"
    "    mov     %rsp, %rbx\n"
    "    .cfi_def_cfa_register %rbx\n"
    "    and     $-64, %rsp\n"
    "    sub     $128, %rsp\n"
    "    call    *%rdi\n"
    "aux_realigner_return:\n"
    "    mov     %rbx, %rsp\n"
    "    .cfi_def_cfa_register %rsp\n"
    "    pop     %rbx\n"
    "    .cfi_def_cfa_offset 8\n"
    "    .cfi_restore %rbx\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   aux_realigner, .-aux_realigner\n"
    "\n"
    "    .type   aux_saver, @function\n"
    "aux_saver:\n"
    "    .cfi_startproc\n"
    "    push    %rbx\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset %rbx, -16\n"
    "    xor     %ebx, %ebx\n"
    "    call    *%rdi\n"
    "aux_saver_return:\n"
    "    pop     %rbx\n"
    "    .cfi_def_cfa_offset 8\n"
    "    .cfi_restore %rbx\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   aux_saver, .-aux_saver\n"
    "    .popsection\n"
);


static int
find_dynamic_linker(struct dl_phdr_info *info, size_t size, void *data)
{
    if (strstr(info->dlpi_name, "/ld-linux") == NULL) {
        return 0;
    }

    *(uintptr_t *) data = info->dlpi_addr;

    return 1;
}


/* The rows from the auxiliary register in the dynamic linker's code. */
static unsigned
dynamic_linker_aux_rows(const prof_unwind_table_t *t)
{
    unsigned   i, j, n;
    uintptr_t  base;

    base = 0;
    assert_int_equal(dl_iterate_phdr(find_dynamic_linker, &base), 1);

    n = 0;
    for (i = 0; i < t->object_count; i++) {
        if (t->objects[i].base != base) {
            continue;
        }
        for (j = 0; j < t->objects[i].row_count; j++) {
            n += (t->objects[i].rows[j].cfa == PROF_CFA_AUX);
        }
    }

    return n;
}


/*
 * A frame whose CFA is rbx plus an offset, under a callee that saved rbx
 * and changed it: the walk takes rbx back from where the callee saved it
 * and steps over the frame by its rule, not over the junk of its aligned
 * area (a stale return address there would pass a scan); where rbx's
 * value is lost (past a scan), the frame has no rule.
 */
static void
test_frame_from_the_auxiliary_register(void **state)
{
    int                 count;
    void               *frames[FRAMES_MAX];
    uintptr_t           stack[32], low, high;
    prof_unwind_regs_t  regs;

    table = prof_unwind_table_build();
    assert_non_null(table);

    low = (uintptr_t) stack;
    high = (uintptr_t) (stack + 32);

    memset(stack, 0, sizeof(stack));
    stack[0] = (uintptr_t) &stack[20];          /* aux_saver's saved rbx */
    stack[1] = (uintptr_t) aux_realigner_return;
    stack[4] = (uintptr_t) fp_caller_return;    /* junk, stale */
    stack[20] = 0x4242;                         /* aux_realigner's */
    stack[21] = (uintptr_t) rsp_caller_return;
    stack[23] = 0;                              /* the outermost frame */

    set_regs(&regs, (uintptr_t) aux_saver_return, low, low, high);
    regs.caller = 1;
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_END);
    assert_int_equal(count, 3);
    assert_ptr_equal(frames[0], aux_saver_return);
    assert_ptr_equal(frames[1], aux_realigner_return);
    assert_ptr_equal(frames[2], rsp_caller_return);
    assert_int_equal(regs.aux, 0x4242);

    /* Its value unknown: no rule for that frame; nor does a scan take
       a word there for a caller. */
    set_regs(&regs, (uintptr_t) aux_realigner_return, (uintptr_t) &stack[2],
             low, high);
    regs.caller = 1;
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_NO_RULE);
    assert_int_equal(count, 1);

    set_regs(&regs, 0x1000, (uintptr_t) &stack[1], low, high);
    assert_int_equal(prof_unwind_scan(table, &regs, 32), 0);
    assert_int_equal(regs.pc, (uintptr_t) rsp_caller_return);

#ifdef __GLIBC__
    /* glibc's dynamic linker has such frames (its lazy binding's). */
    assert_true(dynamic_linker_aux_rows(table) > 0);
#endif

    prof_unwind_table_free(table);
}


#endif /* __x86_64__ */


#if defined(__aarch64__)

/*
 * Two callers of code at x0, as the burn module's: one finds its frame
 * from sp, one from x29; *_return: their return addresses there.
 */
__attribute__((visibility("hidden")))      /* not through the GOT */
extern const char a64_sp_caller[], a64_sp_caller_return[],
    a64_fp_caller_return[], a64_big_frame_return[];

__asm__ (
    "    .pushsection .text\n"
    "    .type   a64_sp_caller, %function\n"
    "a64_sp_caller:\n"
    "    .cfi_startproc\n"
    "    stp     x29, x30, [sp, #-32]!\n"
    "    .cfi_def_cfa_offset 32\n"
    "    .cfi_offset 29, -32\n"
    "    .cfi_offset 30, -24\n"
    "    blr     x0\n"
    "a64_sp_caller_return:\n"
    "    ldp     x29, x30, [sp], #32\n"
    "    .cfi_restore 29\n"
    "    .cfi_restore 30\n"
    "    .cfi_def_cfa_offset 0\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   a64_sp_caller, .-a64_sp_caller\n"
    "\n"
    "    .type   a64_fp_caller, %function\n"
    "a64_fp_caller:\n"
    "    .cfi_startproc\n"
    "    stp     x29, x30, [sp, #-16]!\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset 29, -16\n"
    "    .cfi_offset 30, -8\n"
    "    mov     x29, sp\n"
    "    .cfi_def_cfa_register 29\n"
    "    blr     x0\n"
    "a64_fp_caller_return:\n"
    "    ldp     x29, x30, [sp], #16\n"
    "    .cfi_restore 29\n"
    "    .cfi_restore 30\n"
    "    .cfi_def_cfa sp, 0\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   a64_fp_caller, .-a64_fp_caller\n"
    "\n"
    "    .type   a64_big_frame, %function\n"
    "a64_big_frame:\n"
    "    .cfi_startproc\n"
    "    sub     sp, sp, #2064\n"
    "    .cfi_def_cfa_offset 2064\n"
    "    stp     x29, x30, [sp]\n"
    "    .cfi_offset 29, -2064\n"
    "    .cfi_offset 30, -2056\n"
    "    mov     x29, sp\n"
    "    blr     x0\n"
    "a64_big_frame_return:\n"
    "    ldp     x29, x30, [sp]\n"
    "    .cfi_restore 29\n"
    "    .cfi_restore 30\n"
    "    add     sp, sp, #2064\n"
    "    .cfi_def_cfa_offset 0\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   a64_big_frame, .-a64_big_frame\n"
    "    .popsection\n"
);


/*
 * A frame of 2 KiB of locals above its frame record (as GCC lays out
 * AArch64 frames: x29 saved 258 words below the CFA), called from code
 * that finds its frame from x29: the walk takes x29 back from there.
 */
static void
test_frame_record_below_large_locals(void **state)
{
    uintptr_t           stack[266] __attribute__((aligned(16)));
    uintptr_t           ret;
    int                 count;
    void               *frames[FRAMES_MAX];
    prof_unwind_regs_t  regs;

    table = prof_unwind_table_build();
    assert_non_null(table);

    ret = (uintptr_t) recurse_return_address();

    memset(stack, 0, sizeof(stack));
    stack[0] = (uintptr_t) &stack[258];         /* the caller's x29 */
    stack[1] = (uintptr_t) a64_fp_caller_return;
    stack[259] = ret;                           /* the caller's record */

    set_regs(&regs, (uintptr_t) a64_big_frame_return, (uintptr_t) stack,
             (uintptr_t) stack, (uintptr_t) (stack + 266));
    regs.caller = 1;
    assert_int_equal(prof_unwind(table, &regs, frames, FRAMES_MAX, &count),
                     PROF_UNWIND_END);
    assert_int_equal(count, 3);
    assert_ptr_equal(frames[1], (void *) a64_fp_caller_return);
    assert_ptr_equal(frames[2], (void *) ret);

    prof_unwind_table_free(table);
}


/*
 * Code no object holds (JIT code), interrupted with its return address in
 * x30 and junk below its caller's frame: the caller is the link register,
 * its frame the first place above sp that holds its return address where
 * its row says, or, from x29, x29 when it does; not a word that is no
 * return address, nor for a frame other than the interrupted one.
 */
static void
test_link_register(void **state)
{
    uintptr_t           stack[32] __attribute__((aligned(16)));
    uintptr_t           low, high, ret;
    int                 count;
    void               *frames[FRAMES_MAX];
    prof_unwind_regs_t  regs;

    table = prof_unwind_table_build();
    assert_non_null(table);

    low = (uintptr_t) stack;
    high = (uintptr_t) (stack + 32);
    ret = (uintptr_t) recurse_return_address();

    memset(stack, 0, sizeof(stack));
    stack[0] = 0x4141414141414141;              /* the JIT code's junk */
    stack[1] = (uintptr_t) &stack[3];
    stack[2] = (uintptr_t) a64_sp_caller;       /* no return address */
    stack[5] = (uintptr_t) -1;
    stack[8] = (uintptr_t) &stack[20];          /* the caller's record */
    stack[9] = ret;

    set_regs(&regs, 0x1000, low, low, high);
    regs.lr = (uintptr_t) a64_sp_caller_return;
    assert_int_equal(prof_unwind_link(table, &regs, 64), 0);
    assert_int_equal(regs.pc, (uintptr_t) a64_sp_caller_return);
    assert_int_equal(regs.sp, (uintptr_t) &stack[8]);
    assert_int_equal(regs.caller, 1);
    assert_int_equal(regs.lr, 0);
    prof_unwind(table, &regs, frames, 2, &count);
    assert_int_equal(count, 2);
    assert_ptr_equal(frames[1], (void *) ret);

    /* From x29, where it points to the caller's frame record... */
    set_regs(&regs, 0x1000, low, low, high);
    regs.lr = (uintptr_t) a64_fp_caller_return;
    regs.fp = (uintptr_t) &stack[8];
    assert_int_equal(prof_unwind_link(table, &regs, 64), 0);
    assert_int_equal(regs.fp, (uintptr_t) &stack[8]);
    prof_unwind(table, &regs, frames, 2, &count);
    assert_int_equal(count, 2);
    assert_ptr_equal(frames[1], (void *) ret);

    /* ... or where the JIT code made it junk. */
    set_regs(&regs, 0x1000, low, low, high);
    regs.lr = (uintptr_t) a64_fp_caller_return;
    regs.fp = 0x4141414141414140;
    assert_int_equal(prof_unwind_link(table, &regs, 64), 0);
    assert_int_equal(regs.fp, (uintptr_t) &stack[8]);

    /* No return address in x30; or not the interrupted frame. */
    set_regs(&regs, 0x1000, low, low, high);
    regs.lr = (uintptr_t) a64_sp_caller;
    assert_int_equal(prof_unwind_link(table, &regs, 64), -1);

    set_regs(&regs, 0x1000, low, low, high);
    regs.lr = (uintptr_t) a64_sp_caller_return;
    regs.caller = 1;
    assert_int_equal(prof_unwind_link(table, &regs, 64), -1);

    prof_unwind_table_free(table);
}

#endif /* __aarch64__ */


#ifdef __ARM_FEATURE_PAC_DEFAULT

/*
 * The CPU signs return addresses, or does not, as PROFILING_EXPECT_PAC
 * says (1, 0; unset: either): the walks above went through signed ones.
 */
static void
test_return_addresses_signed(void **state)
{
    int          signed_ra;
    const char  *expect = getenv("PROFILING_EXPECT_PAC");

    signed_ra = return_address_signed();
    print_message("return addresses %s\n",
                  signed_ra ? "signed" : "not signed (no PAC in the CPU)");

    if (expect != NULL && *expect != '\0') {
        assert_int_equal(signed_ra, atoi(expect) != 0);
    }
}

#endif


/*
 * A table built over another (a worker's over the master's): the objects
 * loaded in both are the other's, their arrays shared, not copied; an
 * object loaded since has rows of its own; the new table is the size of
 * those only. Copied from another process, the new table is adopted over
 * the one this process shares with it, and not without it.
 */
static void
test_table_over_another_shares_its_objects(void **state)
{
    unsigned                     i, j, shared, own;
    size_t                       bytes;
    void                        *lib, *copy;
    const char                  *name;
    prof_unwind_table_t         *over, *adopted;
    const prof_unwind_object_t  *o;
    static const char           *candidates[] = {
        "libnss_files.so.2", "libresolv.so.2", "libnss_dns.so.2", NULL
    };

    table = prof_unwind_table_build();
    assert_non_null(table);

    /* A library not loaded yet. */
    lib = NULL;
    for (i = 0; candidates[i] != NULL && lib == NULL; i++) {
        name = candidates[i];
        if (dlopen(name, RTLD_NOW | RTLD_NOLOAD) == NULL) {
            lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (lib == NULL) {
        prof_unwind_table_free(table);
        skip();
    }

    over = prof_unwind_table_build_over(table);
    assert_non_null(over);
    assert_true(prof_unwind_table_generation(over)
                > prof_unwind_table_generation(table));
    assert_true(prof_unwind_table_objects(over)
                > prof_unwind_table_objects(table));

    shared = own = 0;

    for (i = 0; i < over->object_count; i++) {
        o = &over->objects[i];
        for (j = 0; j < table->object_count; j++) {
            if (table->objects[j].start == o->start) {
                break;
            }
        }
        if (j < table->object_count) {
            assert_memory_equal(o, &table->objects[j], sizeof(*o));
            shared++;
        } else {
            assert_true((unsigned char *) o->rows >= over->arena
                        && (unsigned char *) o->rows
                           < over->arena + over->bytes);
            own++;
        }
    }

    assert_int_equal(shared, table->object_count);
    assert_true(own >= 1);
    print_message("over a table of %zu bytes: %zu bytes (%u objects of "
                  "its own)\n", prof_unwind_table_bytes(table),
                  prof_unwind_table_bytes(over), own);
    assert_true(prof_unwind_table_bytes(over)
                < prof_unwind_table_bytes(table) / 4);

    /* As the profiler process copies it from the worker. */
    bytes = over->bytes;
    copy = aligned_alloc(64, (bytes + 63) & ~(size_t) 63);
    assert_non_null(copy);
    memcpy(copy, over->arena, bytes);
    assert_null(prof_unwind_table_adopt(copy, bytes,
                                        (uintptr_t) over->arena));
    memcpy(copy, over->arena, bytes);
    adopted = prof_unwind_table_adopt_over(copy, bytes,
                                           (uintptr_t) over->arena, table);
    assert_non_null(adopted);
    assert_int_equal(adopted->object_count, over->object_count);
    free(copy);

    prof_unwind_table_free(over);
    prof_unwind_table_free(table);
    dlclose(lib);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_libunwind),
        cmocka_unit_test(test_bounds_and_unknown_code),
        cmocka_unit_test(test_table_over_another_shares_its_objects),
#if defined(__x86_64__)
        cmocka_unit_test(test_scan_steps_over_unknown_code),
        cmocka_unit_test(test_code_without_tables),
        cmocka_unit_test(test_scan_from_code_without_tables_takes_call_outs),
        cmocka_unit_test(test_frame_from_the_auxiliary_register),
#endif
#if defined(__aarch64__)
        cmocka_unit_test(test_link_register),
        cmocka_unit_test(test_frame_record_below_large_locals),
#endif
#ifdef __ARM_FEATURE_PAC_DEFAULT
        cmocka_unit_test(test_return_addresses_signed),
#endif
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
