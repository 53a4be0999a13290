/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Test-only module:
 *
 * "profiling_burn MS;" makes a location's content handler spin on the CPU
 * for MS milliseconds in ngx_http_profiling_burn_spin(), a function the
 * tests then look for in the profiles.
 *
 * "profiling_burn_stacks N;" makes the handler reach that spin through a
 * chain of 8 to 32 calls among 16 distinct functions, chosen from a stack
 * id: the request's "stack" argument, else a per-worker request counter,
 * modulo N. N ids give about N distinct stacks (16^8 chains per depth), for
 * measuring what many distinct stacks cost the profiler. Without
 * profiling_burn in the location the spin lasts 1 ms.
 *
 * "profiling_burn_jit MS [frame_pointer];" makes the handler spin for MS
 * milliseconds in machine code written by hand into an anonymous executable
 * mapping, as a JIT compiler would: code of no object, without .eh_frame,
 * that runs with garbage in rbp and junk words between sp and its return
 * address. It is called by ngx_http_profiling_burn_jit_call, whose call
 * frame information finds its caller from rsp, or with frame_pointer by
 * ngx_http_profiling_burn_jit_call_fp_in under
 * ngx_http_profiling_burn_jit_call_fp, which find theirs from rbp (as code
 * built with frame pointers does: the first saves the second's frame
 * pointer); all are written in assembly below, and
 * the C functions below them are built without frame pointers even in a
 * build with them (-fno-omit-frame-pointer, ASan's), so that every build
 * gives the stack under the JIT code the same frames.
 *
 * "profiling_burn_libc MS;" makes the handler spend MS milliseconds of CPU
 * in the C library, called from ngx_http_profiling_burn_libc() only: a
 * read through the system call wrappers (pread), a copy (memcpy), a
 * system call without a cancellation point (getppid), and an allocation
 * (malloc, free; musl maps and unmaps one that large): the first frame
 * out of the C library of every such sample is that function.
 *
 * "profiling_burn_signals;" (http) makes each worker install actions of
 * its own for SIGPROF (counting them) and SIGSEGV (a crash reporter's: the
 * default action back, then the fault again) as it starts, as a module
 * placed after the profiler's might.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/mman.h>


#define NGX_HTTP_PROFILING_BURN_LINKS      16
#define NGX_HTTP_PROFILING_BURN_MIN_DEPTH  8
#define NGX_HTTP_PROFILING_BURN_MAX_DEPTH  32


typedef struct {
    ngx_msec_t  burn;
    ngx_uint_t  stacks;         /* 0: spin called directly */
    ngx_msec_t  jit;
    ngx_flag_t  jit_frame_pointer;
    ngx_msec_t  libc;
} ngx_http_profiling_burn_loc_conf_t;


/* A chain being walked: which link comes at each level. */
typedef struct {
    uint64_t    digits[2];      /* 4 bits a level, 32 levels */
    ngx_uint_t  depth;
    ngx_uint_t  level;
    ngx_msec_t  ms;
} ngx_http_profiling_burn_chain_t;


static char *ngx_http_profiling_burn(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_profiling_burn_stacks(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_profiling_burn_jit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_profiling_burn_create_loc_conf(ngx_conf_t *cf);

uint64_t ngx_http_profiling_burn_spin(ngx_msec_t ms);
uint64_t ngx_http_profiling_burn_libc(ngx_msec_t ms);
ngx_int_t ngx_http_profiling_burn_jit_run(ngx_msec_t ms,
    ngx_flag_t frame_pointer);


static char *ngx_http_profiling_burn_signals(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_profiling_burn_init_process(ngx_cycle_t *cycle);

/* Set by profiling_burn_signals in the master, inherited by the workers. */
static ngx_uint_t  ngx_http_profiling_burn_own_signals;

static ngx_command_t  ngx_http_profiling_burn_commands[] = {

    { ngx_string("profiling_burn_signals"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_NOARGS,
      ngx_http_profiling_burn_signals,
      0,
      0,
      NULL },

    { ngx_string("profiling_burn"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_burn,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, burn),
      NULL },

    { ngx_string("profiling_burn_stacks"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_burn_stacks,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, stacks),
      NULL },

    { ngx_string("profiling_burn_libc"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_burn,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, libc),
      NULL },

    { ngx_string("profiling_burn_jit"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_profiling_burn_jit,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_burn_loc_conf_t, jit),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_profiling_burn_module_ctx = {
    NULL, NULL, NULL, NULL, NULL, NULL,
    ngx_http_profiling_burn_create_loc_conf,
    NULL
};


ngx_module_t  ngx_http_profiling_burn_module = {
    NGX_MODULE_V1,
    &ngx_http_profiling_burn_module_ctx,
    ngx_http_profiling_burn_commands,
    NGX_HTTP_MODULE,
    NULL,                                   /* init master */
    NULL,                                   /* init module */
    ngx_http_profiling_burn_init_process,   /* init process */
    NULL, NULL, NULL, NULL,
    NGX_MODULE_V1_PADDING
};


static volatile sig_atomic_t  ngx_http_profiling_burn_sigprofs;


static void
ngx_http_profiling_burn_on_prof(int signo, siginfo_t *info, void *context)
{
    ngx_http_profiling_burn_sigprofs++;
}


static void
ngx_http_profiling_burn_on_segv(int signo, siginfo_t *info, void *context)
{
    signal(SIGSEGV, SIG_DFL);
}


static char *
ngx_http_profiling_burn_signals(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_burn_own_signals = 1;
    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_profiling_burn_init_process(ngx_cycle_t *cycle)
{
    struct sigaction  sa;

    if (!ngx_http_profiling_burn_own_signals) {
        return NGX_OK;
    }

    ngx_memzero(&sa, sizeof(struct sigaction));
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);

    sa.sa_sigaction = ngx_http_profiling_burn_on_prof;
    (void) sigaction(SIGPROF, &sa, NULL);

    sa.sa_sigaction = ngx_http_profiling_burn_on_segv;
    (void) sigaction(SIGSEGV, &sa, NULL);

    return NGX_OK;
}


/*
 * Spins for ms milliseconds of the thread's CPU time: on a loaded machine
 * a request still burns what the tests expect, only later.
 */
__attribute__((noinline)) uint64_t
ngx_http_profiling_burn_spin(ngx_msec_t ms)
{
    uint64_t         x;
    struct timespec  start, now;

    x = 88172645463325252ULL;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);

    do {
        for (int i = 0; i < 10000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000
             + (now.tv_nsec - start.tv_nsec) / 1000000 < (long) ms);

    return x;
}


/* The C library's code, called from here only (noinline, no tail call). */
__attribute__((noinline)) uint64_t
ngx_http_profiling_burn_libc(ngx_msec_t ms)
{
    int              fd, i;
    char            *p;
    uint64_t         n;
    struct timespec  start, now;
    static char      src[65536], dst[65536];

    n = 0;
    fd = open("/dev/zero", O_RDONLY);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);

    do {
        for (i = 0; i < 16; i++) {
            if (fd != -1) {
                n += (uint64_t) pread(fd, dst, 4096, 0);
            }

            memcpy(dst, src, sizeof(dst));
            __asm__ volatile ("" : : "r" (dst) : "memory");

            n += (uint64_t) getppid();

            p = malloc(256 * 1024);
            if (p != NULL) {
                ((volatile char *) p)[0] = (char) n;
                free(p);
            }
        }

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);

    } while ((now.tv_sec - start.tv_sec) * 1000
             + (now.tv_nsec - start.tv_nsec) / 1000000 < (long) ms);

    if (fd != -1) {
        close(fd);
    }

    return n + (uint64_t) dst[0];
}


#if defined(__GNUC__) && !defined(__clang__)
#define NGX_HTTP_PROFILING_BURN_NO_FRAME_POINTER                             \
    __attribute__((optimize("omit-frame-pointer")))
#else
#define NGX_HTTP_PROFILING_BURN_NO_FRAME_POINTER
#endif

typedef void (*ngx_http_profiling_burn_jit_pt)(uint64_t iterations);

/* Call code(iterations): the JIT code's callers. */
void ngx_http_profiling_burn_jit_call(ngx_http_profiling_burn_jit_pt code,
    uint64_t iterations);
void ngx_http_profiling_burn_jit_call_fp(ngx_http_profiling_burn_jit_pt code,
    uint64_t iterations);

#if defined(__x86_64__)

/*
 * The JIT code, x86-64, called as void f(uint64_t iterations):
 *
 *   mov   r8, rbp                  keep the caller's rbp in a register only
 *   movabs rax, 0x4141414141414141
 *   mov   rbp, rax                 rbp: garbage (not even canonical)
 *   push  rax                      junk words above sp, below the return
 *   push  rsp                      address: garbage, a stack address,
 *   lea   rcx, [rip]               an address in this code, 0, -1,
 *   push  rcx                      garbage again and, nearest sp, the
 *   push  0                        entry of a libc function (a pointer a
 *   push  -1                       JIT's frame may well hold, but no
 *   push  rax                      return address); no saved rbp among
 *   movabs rdx, DECOY              them
 *   push  rdx
 * loop:
 *   dec   rdi                      the spin (iterations >= 1)
 *   jnz   loop
 *   add   rsp, 56
 *   mov   rbp, r8
 *   ret
 *
 * DECOY, the 8 bytes at NGX_HTTP_PROFILING_BURN_JIT_DECOY, is written when
 * the code is copied.
 */
static const u_char  ngx_http_profiling_burn_jit_code[] = {
    0x49, 0x89, 0xe8,                                   /* mov r8, rbp */
    0x48, 0xb8, 0x41, 0x41, 0x41, 0x41,
                0x41, 0x41, 0x41, 0x41,                 /* movabs rax */
    0x48, 0x89, 0xc5,                                   /* mov rbp, rax */
    0x50,                                               /* push rax */
    0x54,                                               /* push rsp */
    0x48, 0x8d, 0x0d, 0x00, 0x00, 0x00, 0x00,           /* lea rcx, [rip] */
    0x51,                                               /* push rcx */
    0x6a, 0x00,                                         /* push 0 */
    0x6a, 0xff,                                         /* push -1 */
    0x50,                                               /* push rax */
    0x48, 0xba, 0, 0, 0, 0, 0, 0, 0, 0,                 /* movabs rdx */
    0x52,                                               /* push rdx */
    0x48, 0xff, 0xcf,                                   /* loop: dec rdi */
    0x75, 0xfb,                                         /* jnz loop */
    0x48, 0x83, 0xc4, 0x38,                             /* add rsp, 56 */
    0x4c, 0x89, 0xc5,                                   /* mov rbp, r8 */
    0xc3                                                /* ret */
};

#define NGX_HTTP_PROFILING_BURN_JIT_DECOY  33

__asm__ (
    "    .pushsection .text\n"
    "    .globl  ngx_http_profiling_burn_jit_call\n"
    "    .type   ngx_http_profiling_burn_jit_call, @function\n"
    "ngx_http_profiling_burn_jit_call:\n"
    "    .cfi_startproc\n"
    "    sub     $8, %rsp\n"                /* CFA = rsp + 16 */
    "    .cfi_def_cfa_offset 16\n"
    "    mov     %rdi, %rax\n"
    "    mov     %rsi, %rdi\n"
    "    call    *%rax\n"
    "    add     $8, %rsp\n"
    "    .cfi_def_cfa_offset 8\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   ngx_http_profiling_burn_jit_call, "
                 ".-ngx_http_profiling_burn_jit_call\n"
    "\n"
    /* The frame of code built with frame pointers: CFA = rbp + 16. */
    "    .macro  burn_fp_enter\n"
    "    push    %rbp\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset %rbp, -16\n"
    "    mov     %rsp, %rbp\n"              /* CFA = rbp + 16 */
    "    .cfi_def_cfa_register %rbp\n"
    "    .endm\n"
    "    .macro  burn_fp_leave\n"
    "    pop     %rbp\n"
    "    .cfi_def_cfa %rsp, 8\n"
    "    ret\n"
    "    .endm\n"
    "\n"
    "    .globl  ngx_http_profiling_burn_jit_call_fp\n"
    "    .type   ngx_http_profiling_burn_jit_call_fp, @function\n"
    "ngx_http_profiling_burn_jit_call_fp:\n"
    "    .cfi_startproc\n"
    "    burn_fp_enter\n"
    "    call    ngx_http_profiling_burn_jit_call_fp_in\n"
    "    burn_fp_leave\n"
    "    .cfi_endproc\n"
    "    .size   ngx_http_profiling_burn_jit_call_fp, "
                 ".-ngx_http_profiling_burn_jit_call_fp\n"
    "\n"
    "    .type   ngx_http_profiling_burn_jit_call_fp_in, @function\n"
    "ngx_http_profiling_burn_jit_call_fp_in:\n"
    "    .cfi_startproc\n"
    "    burn_fp_enter\n"
    "    mov     %rdi, %rax\n"
    "    mov     %rsi, %rdi\n"
    "    call    *%rax\n"
    "    burn_fp_leave\n"
    "    .cfi_endproc\n"
    "    .size   ngx_http_profiling_burn_jit_call_fp_in, "
                 ".-ngx_http_profiling_burn_jit_call_fp_in\n"
    "    .popsection\n"
);


#elif defined(__aarch64__)

/*
 * The JIT code, AArch64, called as void f(uint64_t iterations): a leaf,
 * its return address in x30 only:
 *
 *   mov   x9, x29                  keep the caller's x29 in a register only
 *   mov   x10, #0x4141414141414141 (movz, movk x3)
 *   mov   x29, x10                 x29: garbage (not even canonical)
 *   sub   sp, sp, #64              junk words below the caller's frame:
 *   adr   x11, .                   garbage, a stack address, an address
 *   ldr   x12, DECOY               in this code, 0, -1, garbage again and,
 *   mov   x13, sp                  nearest sp, twice the entry of a libc
 *   mov   x14, #-1                 function (no return address); no frame
 *   stp   x10, x13, [sp, #48]      record among them
 *   stp   x11, xzr, [sp, #32]
 *   stp   x14, x10, [sp, #16]
 *   stp   x12, x12, [sp]
 * loop:
 *   subs  x0, x0, #1               the spin (iterations >= 1)
 *   b.ne  loop
 *   add   sp, sp, #64
 *   mov   x29, x9
 *   ret
 *   DECOY: 8 bytes, written when the code is copied
 */
static const uint32_t  ngx_http_profiling_burn_jit_code[] = {
    0xaa1d03e9, 0xd288282a, 0xf2a8282a, 0xf2c8282a, 0xf2e8282a, 0xaa0a03fd,
    0xd10103ff, 0x1000000b, 0x5800018c, 0x910003ed, 0x9280000e, 0xa90337ea,
    0xa9027feb, 0xa9012bee, 0xa90033ec, 0xf1000400, 0x54ffffe1, 0x910103ff,
    0xaa0903fd, 0xd65f03c0, 0, 0
};

#define NGX_HTTP_PROFILING_BURN_JIT_DECOY  80

__asm__ (
    "    .pushsection .text\n"
    "    .globl  ngx_http_profiling_burn_jit_call\n"
    "    .type   ngx_http_profiling_burn_jit_call, %function\n"
    "ngx_http_profiling_burn_jit_call:\n"
    "    .cfi_startproc\n"
    "    stp     x29, x30, [sp, #-32]!\n"      /* CFA = sp + 32 */
    "    .cfi_def_cfa_offset 32\n"
    "    .cfi_offset 29, -32\n"
    "    .cfi_offset 30, -24\n"
    "    mov     x2, x0\n"
    "    mov     x0, x1\n"
    "    blr     x2\n"
    "    ldp     x29, x30, [sp], #32\n"
    "    .cfi_restore 29\n"
    "    .cfi_restore 30\n"
    "    .cfi_def_cfa_offset 0\n"
    "    ret\n"
    "    .cfi_endproc\n"
    "    .size   ngx_http_profiling_burn_jit_call, "
                 ".-ngx_http_profiling_burn_jit_call\n"
    "\n"
    /* The frame of code built with frame pointers: CFA = x29 + 16. */
    "    .macro  burn_fp_enter\n"
    "    stp     x29, x30, [sp, #-16]!\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset 29, -16\n"
    "    .cfi_offset 30, -8\n"
    "    mov     x29, sp\n"
    "    .cfi_def_cfa_register 29\n"
    "    .endm\n"
    "    .macro  burn_fp_leave\n"
    "    ldp     x29, x30, [sp], #16\n"
    "    .cfi_restore 29\n"
    "    .cfi_restore 30\n"
    "    .cfi_def_cfa sp, 0\n"
    "    ret\n"
    "    .endm\n"
    "\n"
    "    .globl  ngx_http_profiling_burn_jit_call_fp\n"
    "    .type   ngx_http_profiling_burn_jit_call_fp, %function\n"
    "ngx_http_profiling_burn_jit_call_fp:\n"
    "    .cfi_startproc\n"
    "    burn_fp_enter\n"
    "    bl      ngx_http_profiling_burn_jit_call_fp_in\n"
    "    burn_fp_leave\n"
    "    .cfi_endproc\n"
    "    .size   ngx_http_profiling_burn_jit_call_fp, "
                 ".-ngx_http_profiling_burn_jit_call_fp\n"
    "\n"
    "    .type   ngx_http_profiling_burn_jit_call_fp_in, %function\n"
    "ngx_http_profiling_burn_jit_call_fp_in:\n"
    "    .cfi_startproc\n"
    "    burn_fp_enter\n"
    "    mov     x2, x0\n"
    "    mov     x0, x1\n"
    "    blr     x2\n"
    "    burn_fp_leave\n"
    "    .cfi_endproc\n"
    "    .size   ngx_http_profiling_burn_jit_call_fp_in, "
                 ".-ngx_http_profiling_burn_jit_call_fp_in\n"
    "    .popsection\n"
);

#endif


#if defined(__x86_64__) || defined(__aarch64__)

/*
 * Spins for ms milliseconds of the thread's CPU time in the JIT code, a
 * million iterations (under a millisecond) a call: the code is mapped for
 * this call only and unmapped after, as a JIT discards code. Returns
 * NGX_ERROR when the mapping cannot be made.
 */
NGX_HTTP_PROFILING_BURN_NO_FRAME_POINTER __attribute__((noinline)) ngx_int_t
ngx_http_profiling_burn_jit_run(ngx_msec_t ms, ngx_flag_t frame_pointer)
{
    u_char                          *code;
    size_t                           size;
    uintptr_t                        decoy;
    struct timespec                  start, now;
    ngx_http_profiling_burn_jit_pt   spin;

    size = ngx_pagesize;

    code = mmap(NULL, size, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS,
                -1, 0);
    if (code == MAP_FAILED) {
        return NGX_ERROR;
    }

    ngx_memcpy(code, ngx_http_profiling_burn_jit_code,
               sizeof(ngx_http_profiling_burn_jit_code));

    decoy = (uintptr_t) getppid;
    ngx_memcpy(code + NGX_HTTP_PROFILING_BURN_JIT_DECOY, &decoy,
               sizeof(decoy));

    __builtin___clear_cache((char *) code,
                            (char *) code
                            + sizeof(ngx_http_profiling_burn_jit_code));

    if (mprotect(code, size, PROT_READ|PROT_EXEC) != 0) {
        munmap(code, size);
        return NGX_ERROR;
    }

    spin = (ngx_http_profiling_burn_jit_pt) (uintptr_t) code;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);

    do {
        if (frame_pointer) {
            ngx_http_profiling_burn_jit_call_fp(spin, 1000000);

        } else {
            ngx_http_profiling_burn_jit_call(spin, 1000000);
        }

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000
             + (now.tv_nsec - start.tv_nsec) / 1000000 < (long) ms);

    munmap(code, size);

    return NGX_OK;
}

#else

/* No JIT code of this machine's yet: the location fails (ENOSYS). */
ngx_int_t
ngx_http_profiling_burn_jit_run(ngx_msec_t ms, ngx_flag_t frame_pointer)
{
    ngx_set_errno(NGX_ENOSYS);

    return NGX_ERROR;
}

#endif


typedef uint64_t (*ngx_http_profiling_burn_link_pt)(
    ngx_http_profiling_burn_chain_t *chain);

static const ngx_http_profiling_burn_link_pt
    ngx_http_profiling_burn_links[NGX_HTTP_PROFILING_BURN_LINKS];


/* The next link of the chain, or the spin at its end. */
static ngx_inline uint64_t
ngx_http_profiling_burn_next(ngx_http_profiling_burn_chain_t *chain)
{
    ngx_uint_t  l, digit;

    l = chain->level++;

    if (l == chain->depth) {
        return ngx_http_profiling_burn_spin(chain->ms);
    }

    digit = (chain->digits[l / 16] >> (4 * (l % 16))) & 0xf;

    return ngx_http_profiling_burn_links[digit](chain);
}


/*
 * The links: distinct functions (each adds its own constant, so identical
 * code folding cannot merge them), never inlined (noinline, and called
 * through a table), and never tail calls (the addition follows the call),
 * so that each keeps its own frame and return address in the stack.
 */
#define NGX_HTTP_PROFILING_BURN_LINK(n)                                      \
    __attribute__((noinline)) uint64_t                                       \
    ngx_http_profiling_burn_link##n(ngx_http_profiling_burn_chain_t *chain)  \
    {                                                                        \
        return ngx_http_profiling_burn_next(chain) + n + 1;                  \
    }

NGX_HTTP_PROFILING_BURN_LINK(0)
NGX_HTTP_PROFILING_BURN_LINK(1)
NGX_HTTP_PROFILING_BURN_LINK(2)
NGX_HTTP_PROFILING_BURN_LINK(3)
NGX_HTTP_PROFILING_BURN_LINK(4)
NGX_HTTP_PROFILING_BURN_LINK(5)
NGX_HTTP_PROFILING_BURN_LINK(6)
NGX_HTTP_PROFILING_BURN_LINK(7)
NGX_HTTP_PROFILING_BURN_LINK(8)
NGX_HTTP_PROFILING_BURN_LINK(9)
NGX_HTTP_PROFILING_BURN_LINK(10)
NGX_HTTP_PROFILING_BURN_LINK(11)
NGX_HTTP_PROFILING_BURN_LINK(12)
NGX_HTTP_PROFILING_BURN_LINK(13)
NGX_HTTP_PROFILING_BURN_LINK(14)
NGX_HTTP_PROFILING_BURN_LINK(15)

static const ngx_http_profiling_burn_link_pt
    ngx_http_profiling_burn_links[NGX_HTTP_PROFILING_BURN_LINKS] =
{
    ngx_http_profiling_burn_link0, ngx_http_profiling_burn_link1,
    ngx_http_profiling_burn_link2, ngx_http_profiling_burn_link3,
    ngx_http_profiling_burn_link4, ngx_http_profiling_burn_link5,
    ngx_http_profiling_burn_link6, ngx_http_profiling_burn_link7,
    ngx_http_profiling_burn_link8, ngx_http_profiling_burn_link9,
    ngx_http_profiling_burn_link10, ngx_http_profiling_burn_link11,
    ngx_http_profiling_burn_link12, ngx_http_profiling_burn_link13,
    ngx_http_profiling_burn_link14, ngx_http_profiling_burn_link15
};


/* splitmix64: neighbouring ids get unrelated chains. */
static uint64_t
ngx_http_profiling_burn_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}


static uint64_t
ngx_http_profiling_burn_chain(ngx_http_request_t *r,
    ngx_http_profiling_burn_loc_conf_t *blcf, ngx_msec_t ms)
{
    ngx_int_t                         n;
    ngx_str_t                         arg;
    uint64_t                          id;
    ngx_http_profiling_burn_chain_t   chain;
    static uint64_t                   requests;

    id = requests++;

    if (ngx_http_arg(r, (u_char *) "stack", 5, &arg) == NGX_OK) {
        n = ngx_atoi(arg.data, arg.len);
        if (n != NGX_ERROR) {
            id = (uint64_t) n;
        }
    }

    id %= blcf->stacks;

    chain.digits[0] = ngx_http_profiling_burn_mix(2 * id);
    chain.digits[1] = ngx_http_profiling_burn_mix(2 * id + 1);
    chain.depth = NGX_HTTP_PROFILING_BURN_MIN_DEPTH
                  + ngx_http_profiling_burn_mix(id ^ 0x5eed)
                    % (NGX_HTTP_PROFILING_BURN_MAX_DEPTH
                       - NGX_HTTP_PROFILING_BURN_MIN_DEPTH + 1);
    chain.level = 0;
    chain.ms = ms;

    return ngx_http_profiling_burn_next(&chain);
}


NGX_HTTP_PROFILING_BURN_NO_FRAME_POINTER static ngx_int_t
ngx_http_profiling_burn_handler(ngx_http_request_t *r)
{
    uint64_t                             x;
    ngx_int_t                            rc;
    ngx_msec_t                           ms;
    ngx_buf_t                           *b;
    ngx_chain_t                          out;
    ngx_http_profiling_burn_loc_conf_t  *blcf;

    blcf = ngx_http_get_module_loc_conf(r, ngx_http_profiling_burn_module);

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    b = ngx_create_temp_buf(r->pool, 32);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ms = (blcf->burn == NGX_CONF_UNSET_MSEC) ? 1 : blcf->burn;

    if (blcf->jit != NGX_CONF_UNSET_MSEC) {
        if (ngx_http_profiling_burn_jit_run(blcf->jit,
                                            blcf->jit_frame_pointer)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, ngx_errno,
                          "profiling_burn_jit: no JIT code, or mmap() or "
                          "mprotect() failed");
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        x = 0;

    } else if (blcf->libc != NGX_CONF_UNSET_MSEC) {
        x = ngx_http_profiling_burn_libc(blcf->libc);

    } else if (blcf->stacks == NGX_CONF_UNSET_UINT) {
        x = ngx_http_profiling_burn_spin(ms);

    } else {
        x = ngx_http_profiling_burn_chain(r, blcf, ms);
    }

    /* nginx's clock moves on past the burn: the log's $msec is when the
       burn ended, its $request_time how long the request took. */
    ngx_time_update();

    b->last = ngx_sprintf(b->last, "burned %uL\n", x & 1);
    b->last_buf = 1;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static char *
ngx_http_profiling_burn(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_burn_handler;

    return ngx_conf_set_msec_slot(cf, cmd, conf);
}


static char *
ngx_http_profiling_burn_stacks(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char                                *rv;
    ngx_http_core_loc_conf_t            *clcf;
    ngx_http_profiling_burn_loc_conf_t  *blcf = conf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_burn_handler;

    rv = ngx_conf_set_num_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (blcf->stacks == 0) {
        return "must be at least 1";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_profiling_burn_jit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                           *value;
    ngx_http_core_loc_conf_t            *clcf;
    ngx_http_profiling_burn_loc_conf_t  *blcf = conf;

    if (blcf->jit != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    blcf->jit = ngx_parse_time(&value[1], 0);
    if (blcf->jit == (ngx_msec_t) NGX_ERROR) {
        return "invalid value";
    }

    blcf->jit_frame_pointer = 0;

    if (cf->args->nelts == 3) {
        if (ngx_strcmp(value[2].data, "frame_pointer") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\"", &value[2]);
            return NGX_CONF_ERROR;
        }

        blcf->jit_frame_pointer = 1;
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_profiling_burn_handler;

    return NGX_CONF_OK;
}


static void *
ngx_http_profiling_burn_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_profiling_burn_loc_conf_t  *conf;

    conf = ngx_palloc(cf->pool, sizeof(ngx_http_profiling_burn_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->burn = NGX_CONF_UNSET_MSEC;
    conf->stacks = NGX_CONF_UNSET_UINT;
    conf->jit = NGX_CONF_UNSET_MSEC;
    conf->jit_frame_pointer = NGX_CONF_UNSET;
    conf->libc = NGX_CONF_UNSET_MSEC;

    return conf;
}
