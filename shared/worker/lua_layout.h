/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What the profiler knows of LuaJIT's memory: LuaJIT 2.1 in GC64 mode
 * (lj_obj.h, lj_frame.h, lj_bc.h of OpenResty's luajit2 and of LuaJIT 2.1
 * alike), as byte offsets; the C frame's, which differ by machine, are
 * arch.h's (LJL_CF_*). prof_lua_find (lua.c) checks them against the
 * running library before the handler uses them.
 */

#ifndef PROF_LUA_LAYOUT_H
#define PROF_LUA_LAYOUT_H

#include "worker/arch.h"


#define LJL_GCVMASK             (((uint64_t) 1 << 47) - 1)
#define LJL_GCT                 9       /* every GC object's type byte */
#define LJL_GCT_STR             4       /* ~LJ_TSTR */
#define LJL_GCT_THREAD          6
#define LJL_GCT_PROTO           7
#define LJL_GCT_FUNC            8
#define LJL_TFUNC               (-9)    /* a TValue's type, bits 47.. */
#define LJL_TTHREAD             (-7)

/* lua_State */
#define LJL_L_GLREF             16
#define LJL_L_BASE              32
#define LJL_L_TOP               40
#define LJL_L_STACK             56
#define LJL_L_CFRAME            80
#define LJL_L_STACKSIZE         88      /* in slots */

/* global_State */
#define LJL_G_VMSTATE           184
#define LJL_G_MAINTHREF         192
#define LJL_G_CUR_L             368
#define LJL_G_JIT_BASE          376

#define LJL_VMST_INTERP         (-1)    /* ~LJ_VMST_INTERP */
#define LJL_VMST_C              (-2)

/* GCfuncL */
#define LJL_FN_FFID             10
#define LJL_FN_PC               32      /* its prototype's bytecode */
#define LJL_FF_LUA              0
#define LJL_FF_C                1
#define LJL_FN_UPVALUE0         48      /* GCfuncC: a wrap function's
                                           coroutine */

/* GCproto: its bytecode follows it */
#define LJL_PT_SIZEBC           12
#define LJL_PT_K                32      /* its constants: GC ones below */
#define LJL_PT_CHUNKNAME        64
#define LJL_PT_FIRSTLINE        72
#define LJL_PT_NUMLINE          76
#define LJL_PT_LINEINFO         80
#define LJL_PT_UVINFO           88      /* its upvalues' names */
#define LJL_PT_VARINFO          96      /* its locals' names and pcs */
#define LJL_PT_SIZE             104

/* GCstr: its bytes follow it */
#define LJL_STR_LEN             20
#define LJL_STR_DATA            24

/* L->cframe: the C frame of an activation of the VM (LJL_CF_*), with
   flags in its low bits */
#define LJL_CFRAME_RAWMASK      (~(uint64_t) 3)

/* A frame's link: its type in the low bits */
#define LJL_FRAME_TYPEP         7
#define LJL_FRAME_LUA           0
#define LJL_FRAME_C             1
#define LJL_FRAME_CONT          2
#define LJL_FRAME_VARG          3
#define LJL_FRAME_LUAP          4
#define LJL_FRAME_CP            5

/* Bytecodes: op in bits 0-7, A 8-15, C 16-23, B 24-31, D 16-31 */
#define LJL_BC_OP(i)            ((i) & 0xff)
#define LJL_BC_A(i)             (((i) >> 8) & 0xff)
#define LJL_BC_B(i)             ((i) >> 24)
#define LJL_BC_C(i)             (((i) >> 16) & 0xff)
#define LJL_BC_D(i)             ((i) >> 16)

#define LJL_BC_MOV              18
#define LJL_BC_KNIL             44
#define LJL_BC_UGET             45
#define LJL_BC_GGET             54
#define LJL_BC_TGETS            57
#define LJL_BC_CALLM            65      /* they call and leave a Lua */
#define LJL_BC_CALL             66      /*   frame's link */
#define LJL_BC_ITERC            69
#define LJL_BC_ITERN            70
#define LJL_BC_MAX              97

/*
 * What each bytecode does with its A operand (lj_bc.h's BCDEF): 'b' a
 * base (it may write A and the slots above), 'd' a destination (it writes
 * A), else neither. The names of slots follow from them (LuaJIT's own
 * lj_debug_slotname).
 */
#define LJL_BC_AMODES                                                       \
    "............dd.."  /*  0 ISLT.. */ \
    "..dddddddddddddd"  /* 16 ISTYPE.. */ \
    "ddddddddddddbd.."  /* 32 ADDVV.. */ \
    "...dddd.dddd...b"  /* 48 USETN.. */ \
    ".bbbbbbbbb...bbb"  /* 64 TSETR.. */ \
    "bbbbb..........."  /* 80 IFORL.. */ \
    "."  /* 96 FUNCCW.. */

/* Names of LuaJIT's own locals (VARNAME_*), in order from 1 */
#define LJL_VARNAMES                                                        \
    "(for index)\0(for limit)\0(for step)\0(for generator)\0"              \
    "(for state)\0(for control)\0"
#define LJL_VARNAME_MAX         7


#endif /* PROF_LUA_LAYOUT_H */
