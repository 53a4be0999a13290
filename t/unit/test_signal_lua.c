/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the signal path's way through LuaJIT's JIT code
 * (shared/worker/signal_lua.h): the running activation's C frame read
 * from LuaJIT's state (a global_State, a lua_State and a C frame laid out
 * by hand as lua_layout.h says), the chain of C frames, where a native
 * walk strays before it passes that frame, and the registers the walk goes
 * on from.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "channel/lua_frames.h"
#include "worker/lua_guard.h"
#include "worker/lua_layout.h"
#include "worker/signal_lua.h"


#define VM_START  0x10000
#define VM_END    0x20000
#define C_CODE    0x30000


/* A VM's memory: its global state, a state, and a stack of 64 words. */
typedef struct {
    uint64_t      g[64];
    uint64_t      L[16];
    uint64_t      stack[64];
    prof_lua_t   *lua;
} vm_t;


static void
word(void *base, size_t offset, uint64_t value)
{
    memcpy((char *) base + offset, &value, sizeof(value));
}


static int
setup(void **state)
{
    vm_t  *vm;

    vm = calloc(1, sizeof(vm_t));
    assert_non_null(vm);

    vm->lua = calloc(1, sizeof(prof_lua_t));
    assert_non_null(vm->lua);
    vm->lua->vm.g = (uintptr_t) vm->g;
    vm->lua->vm.vm_start = VM_START;
    vm->lua->vm.vm_end = VM_END;

    word(vm->g, LJL_G_CUR_L, (uintptr_t) vm->L);
    word(vm->g, LJL_G_VMSTATE, (uint32_t) LJL_VMST_INTERP);

    *state = vm;
    return 0;
}


static int
teardown(void **state)
{
    vm_t  *vm = *state;

    prof_lua_guard_remove();
    free(vm->lua);
    free(vm);
    return 0;
}


/*
 * The fault guard over the reads of the VM's memory, installed by the test
 * itself: cmocka installs its own SIGSEGV action before each test runs.
 */
static void
guard(void)
{
    prof_lua_guard_remove();
    assert_int_equal(prof_lua_guard_install(), 0);
}


/* The state's C frame at stack word at, its flags in its low bits, linked
   to the one at prev (-1: none). */
static uintptr_t
cframe(vm_t *vm, int at, int prev)
{
    uintptr_t  cf;

    cf = (uintptr_t) &vm->stack[at];
    word((void *) cf, LJL_CF_L, (uintptr_t) vm->L);
    word((void *) cf, LJL_CF_PREV,
         prev < 0 ? 0 : (uintptr_t) &vm->stack[prev] | 1);
    word(vm->L, LJL_L_CFRAME, cf | 1);

    return cf;
}


static void
test_the_running_c_frame_is_read_from_the_state(void **state)
{
    int        trace;
    vm_t      *vm = *state;
    uintptr_t  cf, low, high;

    guard();

    low = (uintptr_t) vm->stack;
    high = (uintptr_t) (vm->stack + 64);
    cf = cframe(vm, 40, -1);

    assert_int_equal(prof_lua_cframe(vm->lua, low, low, high, &trace), cf);
    assert_int_equal(trace, 0);

    /* A trace runs: its number is the VM's state. */
    word(vm->g, LJL_G_VMSTATE, 7);
    assert_int_equal(prof_lua_cframe(vm->lua, low, low, high, &trace), cf);
    assert_int_equal(trace, 1);

    /* Below the walk's sp, off the stack, or naming another state: none. */
    assert_int_equal(prof_lua_cframe(vm->lua, cf + 8, low, high, &trace), 0);
    assert_int_equal(prof_lua_cframe(vm->lua, low, low, cf, &trace), 0);
    word((void *) cf, LJL_CF_L, (uintptr_t) vm->g);
    assert_int_equal(prof_lua_cframe(vm->lua, low, low, high, &trace), 0);

    /* No Lua running. */
    cframe(vm, 40, -1);
    word(vm->L, LJL_L_CFRAME, 0);
    assert_int_equal(prof_lua_cframe(vm->lua, low, low, high, &trace), 0);
}


static void
test_a_state_that_cannot_be_read_names_no_frame(void **state)
{
    int        trace;
    vm_t      *vm = *state;
    uintptr_t  low;

    guard();

    low = (uintptr_t) vm->stack;
    vm->lua->vm.g = 64;                 /* nothing is mapped there */

    assert_int_equal(prof_lua_cframe(vm->lua, low, low,
                                     (uintptr_t) (vm->stack + 64), &trace),
                     0);
    assert_int_equal(trace, 1);         /* not known: as if one ran */
}


static void
test_the_chain_goes_outward_only(void **state)
{
    vm_t      *vm = *state;
    uintptr_t  inner, outer, high;

    high = (uintptr_t) (vm->stack + 64);
    outer = cframe(vm, 50, -1);
    inner = cframe(vm, 20, 50);

    assert_int_equal(prof_lua_cframe_prev(inner, high), outer);
    assert_int_equal(prof_lua_cframe_prev(outer, high), 0);

    /* A link inward (a loop) or off the stack ends it. */
    cframe(vm, 30, 10);
    assert_int_equal(prof_lua_cframe_prev((uintptr_t) &vm->stack[30], high),
                     0);
    cframe(vm, 30, 50);
    assert_int_equal(prof_lua_cframe_prev((uintptr_t) &vm->stack[30],
                                          (uintptr_t) &vm->stack[50]), 0);
}


static void
test_a_walk_that_passes_the_c_frame_keeps_to_it(void **state)
{
    int               at;
    uint64_t          frames[4];
    vm_t             *vm = *state;
    uintptr_t         cf;
    prof_lua_where_t  where[4];

    cf = (uintptr_t) &vm->stack[40];
    memset(where, 0, sizeof(where));

    /* A trace's code, C code it called, then the VM at its C frame. */
    frames[0] = 0x7f0000001000;  where[0].sp = cf - 64;  where[0].unknown = 1;
    frames[1] = C_CODE;          where[1].sp = cf - 32;
    frames[2] = VM_START + 8;    where[2].sp = cf;
    frames[3] = C_CODE;          where[3].sp = cf + 96;

    assert_int_equal(prof_lua_astray(vm->lua, frames, where, 0, 4, cf, 0, &at),
                     -1);
    assert_int_equal(at, 2);

    /* Not yet there: nothing astray, nothing passed. */
    assert_int_equal(prof_lua_astray(vm->lua, frames, where, 0, 2, cf, 0, &at),
                     -1);
    assert_int_equal(at, -1);
}


static void
test_a_frame_above_the_c_frame_first_is_astray(void **state)
{
    int               at;
    uint64_t          frames[3];
    vm_t             *vm = *state;
    uintptr_t         cf;
    prof_lua_where_t  where[3];

    cf = (uintptr_t) &vm->stack[40];
    memset(where, 0, sizeof(where));

    /* A scan took a word left above the C frame for a caller. */
    frames[0] = 0x7f0000001000;  where[0].sp = cf - 64;
    frames[1] = C_CODE;          where[1].sp = cf + 200;
    frames[2] = VM_START + 8;    where[2].sp = cf + 400;

    assert_int_equal(prof_lua_astray(vm->lua, frames, where, 0, 3, cf, 0, &at),
                     1);
    assert_int_equal(at, -1);

    /* Not the VM's code at the C frame's sp: astray too. */
    where[1].sp = cf;
    assert_int_equal(prof_lua_astray(vm->lua, frames, where, 0, 3, cf, 0, &at),
                     1);
}


static void
test_the_vm_code_below_its_c_frame_is_astray_under_a_trace(void **state)
{
    int               at;
    uint64_t          frames[2];
    vm_t             *vm = *state;
    uintptr_t         cf;
    prof_lua_where_t  where[2];

    cf = (uintptr_t) &vm->stack[40];
    memset(where, 0, sizeof(where));

    /* Its exit handler, on the trace's stack: its one rule not there. */
    frames[0] = C_CODE;          where[0].sp = cf - 400;
    frames[1] = VM_START + 64;   where[1].sp = cf - 200;

    assert_int_equal(prof_lua_astray(vm->lua, frames, where, 0, 2, cf, 1,
                                     &at),
                     1);
    assert_int_equal(at, -1);

    /* No trace: its subroutines, which the walk takes on from its
       return (prof_lua_vm_return), else as the walk found them. */
    assert_int_equal(prof_lua_astray(vm->lua, frames, where, 0, 2, cf, 0,
                                     &at),
                     -1);
}


static void
test_the_walk_goes_on_from_the_vm_frame(void **state)
{
    vm_t               *vm = *state;
    uintptr_t           cf;
    prof_unwind_regs_t  regs;

    cf = (uintptr_t) &vm->stack[40];
    memset(&regs, 0xff, sizeof(regs));
    regs.fp = cf - 64;

    prof_lua_cframe_regs(vm->lua, cf, &regs);

    assert_int_equal(regs.pc, VM_START);
    assert_int_equal(regs.sp, cf);
    assert_int_equal(regs.fp, prof_arch_lj_cframe_fp(cf, cf - 64));
    assert_int_equal(regs.aux, 0);
    assert_int_equal(regs.lr, 0);
    assert_int_equal(regs.caller, 0);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_the_running_c_frame_is_read_from_the_state, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_a_state_that_cannot_be_read_names_no_frame, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_the_chain_goes_outward_only, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_walk_that_passes_the_c_frame_keeps_to_it, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_a_frame_above_the_c_frame_first_is_astray, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_the_vm_code_below_its_c_frame_is_astray_under_a_trace,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_the_walk_goes_on_from_the_vm_frame, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
