/* SPDX-License-Identifier: BSD-2-Clause */
/* The macros that gnulib's argp.h and obstack.h expect from the config.h
   of a gnulib build, for elfutils, which includes them with its own
   config.h. ci/musl-deps puts this header ahead of copies of those two.
   The definitions are gnulib's own for GCC (its config.h and stdio.h). */
#ifndef MUSL_DEPS_GNULIB_MACROS_H
#define MUSL_DEPS_GNULIB_MACROS_H

#ifndef _GL_ATTRIBUTE_FORMAT
# define _GL_ATTRIBUTE_FORMAT(spec) __attribute__ ((__format__ spec))
#endif
#ifndef _GL_ATTRIBUTE_SPEC_PRINTF_STANDARD
# define _GL_ATTRIBUTE_SPEC_PRINTF_STANDARD __printf__
#endif
#ifndef _GL_ATTRIBUTE_SPEC_PRINTF_SYSTEM
# define _GL_ATTRIBUTE_SPEC_PRINTF_SYSTEM __printf__
#endif
#ifndef _GL_ATTRIBUTE_PURE
# define _GL_ATTRIBUTE_PURE __attribute__ ((__pure__))
#endif

/* argp.h's inline functions: C99 inline, whose external definitions are
   in gnulib's library (argp-xinl.c). */
#ifndef _GL_INLINE
# if defined __GNUC_STDC_INLINE__ && __GNUC_STDC_INLINE__
#  define _GL_INLINE inline
# else
#  define _GL_INLINE extern inline __attribute__ ((__gnu_inline__))
# endif
#endif
#ifndef _GL_INLINE_HEADER_BEGIN
# define _GL_INLINE_HEADER_BEGIN
# define _GL_INLINE_HEADER_END
#endif

#endif
