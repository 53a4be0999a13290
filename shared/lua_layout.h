/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What the profiler knows of LuaJIT's memory: LuaJIT 2.1 in GC64 mode on
 * x86-64 (lj_obj.h, lj_frame.h, lj_bc.h of OpenResty's luajit2 and of
 * LuaJIT 2.1 alike), as byte offsets. prof_lua_find (lua.c) checks them
 * against the running library before the handler uses them.
 */

#ifndef PROF_LUA_LAYOUT_H
#define PROF_LUA_LAYOUT_H


#define LJL_GCVMASK             (((uint64_t) 1 << 47) - 1)
#define LJL_GCT                 9       /* every GC object's type byte */
#define LJL_GCT_STR             4       /* ~LJ_TSTR */
#define LJL_GCT_THREAD          6
#define LJL_GCT_PROTO           7
#define LJL_GCT_FUNC            8
#define LJL_TFUNC               (-9)    /* a TValue's type, bits 47.. */

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

/* GCproto: its bytecode follows it */
#define LJL_PT_SIZEBC           12
#define LJL_PT_CHUNKNAME        64
#define LJL_PT_FIRSTLINE        72
#define LJL_PT_NUMLINE          76
#define LJL_PT_LINEINFO         80
#define LJL_PT_SIZE             104

/* GCstr: its bytes follow it */
#define LJL_STR_LEN             20
#define LJL_STR_DATA            24

/* The C frame of an activation of the VM (L->cframe points to it). */
#define LJL_CF_L                16
#define LJL_CF_PC               24
#define LJL_CF_PREV             32
#define LJL_CFRAME_RAWMASK      (~(uint64_t) 3)

/* A frame's link: its type in the low bits */
#define LJL_FRAME_TYPEP         7
#define LJL_FRAME_LUA           0
#define LJL_FRAME_C             1
#define LJL_FRAME_CONT          2
#define LJL_FRAME_VARG          3
#define LJL_FRAME_LUAP          4
#define LJL_FRAME_CP            5

/* Bytecodes that call and leave a Lua frame's link */
#define LJL_BC_CALLM            65
#define LJL_BC_CALL             66
#define LJL_BC_ITERC            69
#define LJL_BC_ITERN            70


#endif /* PROF_LUA_LAYOUT_H */
