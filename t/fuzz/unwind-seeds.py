#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Writes the seed corpus of t/fuzz/fuzz_unwind.c into DIR.

Each seed is the memory image of an ELF object from its first executable
segment to the end of the segment holding .eh_frame_hdr (code, .eh_frame_hdr
and .eh_frame at their distances in memory, as the loader maps them), after
the fuzzer's header: hdr_offset and hdr_size (u32, little endian). Objects:
small shared objects built here (optimised, and with frame pointers), and
some of the system's own libraries; plus a few cut short.

Usage: t/fuzz/unwind-seeds.py DIR [MAX_BYTES] (CC: the compiler, default cc)
"""

import os
import struct
import subprocess
import sys
import tempfile

PT_LOAD = 1
PT_GNU_EH_FRAME = 0x6474E550
PF_X = 1

SEED_C = r"""
#include <stdio.h>
#include <stdlib.h>

static int __attribute__((noinline))
seed_leaf(int x)
{
    return x * 3 + 1;
}

int __attribute__((noinline))
seed_frames(int x, char *buf)
{
    char local[64];

    snprintf(local, sizeof(local), "%d", seed_leaf(x));
    return buf[0] + local[0];
}

int
seed_alloca(int n)
{
    char *p = __builtin_alloca(n);

    p[0] = (char) n;
    return seed_frames(n, p);
}
"""


def image_of(path, max_bytes):
    """(hdr_offset, hdr_size, image bytes) of an ELF object, or None."""
    with open(path, "rb") as f:
        elf = f.read()

    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return None

    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)

    loads, eh = [], None
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = \
            struct.unpack_from("<IIQQQQQQ", elf, phoff + i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
        elif p_type == PT_GNU_EH_FRAME:
            eh = (p_vaddr, p_memsz)

    code = [l for l in loads if l[0] & PF_X]
    if eh is None or not code:
        return None

    holder = [l for l in loads if l[2] <= eh[0] < l[2] + l[4]]
    if not holder:
        return None

    start = min(l[2] for l in code)
    end = holder[0][2] + holder[0][3]
    if end <= start or end - start > max_bytes:
        return None

    image = bytearray(end - start)
    for _, offset, vaddr, filesz, _ in loads:
        lo, hi = max(vaddr, start), min(vaddr + filesz, end)
        if lo < hi:
            image[lo - start:hi - start] = \
                elf[offset + lo - vaddr:offset + hi - vaddr]

    return eh[0] - start, eh[1], bytes(image)


def write_seed(directory, name, hdr_offset, hdr_size, image):
    with open(os.path.join(directory, name), "wb") as f:
        f.write(struct.pack("<II", hdr_offset, hdr_size) + image)


def main():
    directory = sys.argv[1]
    max_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else 262144
    os.makedirs(directory, exist_ok=True)

    objects = []
    tmp = tempfile.mkdtemp()
    src = os.path.join(tmp, "seed.c")
    with open(src, "w") as f:
        f.write(SEED_C)

    cc = os.environ.get("CC", "cc")
    for name, flags in (("seed-o2", ["-O2"]),
                        ("seed-fp", ["-O0", "-fno-omit-frame-pointer"]),
                        ("seed-compact", ["-O1", "-Wl,-z,noseparate-code",
                                          "-Wl,-z,max-page-size=16",
                                          "-Wl,-z,common-page-size=16"])):
        out = os.path.join(tmp, name + ".so")
        rc = subprocess.call([cc, "-shared", "-fPIC", "-g0", "-o", out, src]
                             + flags, stderr=subprocess.DEVNULL)
        if rc == 0:
            objects.append((name, out))

    multiarch = subprocess.run([cc, "-print-multiarch"],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL,
                               universal_newlines=True).stdout.strip()
    for lib in ("libz.so.1", "libgcc_s.so.1", "libcrypt.so.1",
                "libuv.so.1", "libunwind.so.8"):
        path = os.path.join("/usr/lib", multiarch, lib)
        if not os.path.exists(path):
            path = os.path.join("/lib", multiarch, lib)
        if os.path.exists(path):
            objects.append((lib, path))

    written = 0
    for name, path in objects:
        im = image_of(path, max_bytes)
        if im is None:
            continue
        hdr_offset, hdr_size, image = im
        write_seed(directory, name, hdr_offset, hdr_size, image)
        # cut inside .eh_frame, and inside the header's table
        write_seed(directory, name + ".cut", hdr_offset, hdr_size,
                   image[:hdr_offset + hdr_size + 64])
        write_seed(directory, name + ".hdr-cut", hdr_offset, hdr_size // 2,
                   image)
        written += 1

    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)

    if written == 0:
        sys.exit("unwind-seeds: no object gave a seed")


if __name__ == "__main__":
    main()
