/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * A shared object without unwind tables (no .eh_frame, no .eh_frame_hdr),
 * as musl's libc is: t/unit/test_unwind.c loads it. Its functions keep no
 * frame: nocfi_return_address returns its own return address (a word
 * just past a call through the PLT, in its caller); nocfi_code the
 * address of code of the object.
 */

    .text
    .globl  nocfi_return_address
    .type   nocfi_return_address, @function
nocfi_return_address:
#if defined(__x86_64__)
    mov     (%rsp), %rax
    ret
#elif defined(__aarch64__)
    mov     x0, x30
    ret
#endif
    .size   nocfi_return_address, .-nocfi_return_address

    .globl  nocfi_code
    .type   nocfi_code, @function
nocfi_code:
#if defined(__x86_64__)
    lea     1f(%rip), %rax
1:  ret
#elif defined(__aarch64__)
    adr     x0, 1f
1:  ret
#endif
    .size   nocfi_code, .-nocfi_code

    .section .note.GNU-stack,"",@progbits
