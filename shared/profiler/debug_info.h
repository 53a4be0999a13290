/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Debug information as distributions ship it beside stripped objects, for
 * the symbolizer: the debug file an object's .gnu_debuglink names (found
 * as gdb finds it, its CRC checked), and MiniDebugInfo (.gnu_debugdata:
 * an xz-compressed ELF whose .symtab holds the functions .dynsym lacks,
 * as Fedora, RHEL and Amazon Linux ship every binary). The debug file by
 * build id is the symbolizer's own lookup.
 *
 * Bounded: a .gnu_debugdata of at most 64 MiB that decompresses to at
 * most 256 MiB (liblzma at most 128 MiB of memory), debug files of at
 * most 4 GiB. A malformed section means no debug information, never a
 * crash. Threading: none of its own. It reads files: never on a signal
 * handler or the event loop.
 */

#ifndef PROF_DEBUG_INFO_H
#define PROF_DEBUG_INFO_H

#include <stddef.h>


/*
 * The debug file the .gnu_debuglink of the ELF file object names, looked
 * for in the object's directory, then its .debug/ subdirectory, then
 * under root (NULL: nowhere) followed by the object's directory, and
 * taken when its CRC-32 is the link's. Writes its path (size bytes):
 * 0, -ENOENT when there is none, -ENOEXEC when the link is malformed,
 * -EFBIG when the section is larger than a link can be, -errno.
 */
int prof_debuglink_find(const char *object, const char *root, char *path,
    size_t size);

/*
 * The MiniDebugInfo of the ELF file object, decompressed into a memory
 * file (*fd, the caller closes it): 0, -ENOENT when it has none, -ENOEXEC
 * when it is malformed, -EFBIG when larger than the bounds, -errno.
 */
int prof_minidebuginfo_open(const char *object, int *fd);

/*
 * Whether the ELF file object has MiniDebugInfo with functions (1 or 0):
 * decompresses it, as prof_minidebuginfo_open() does.
 */
int prof_minidebuginfo_present(const char *object);


#endif /* PROF_DEBUG_INFO_H */
