#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# Writes the seed corpus of t/fuzz/fuzz_elf.c into DIR: a small shared
# object built here (whole, compact, truncated, stripped, its debug file,
# with MiniDebugInfo), and the first bytes of some of the system's own ELF
# objects, cut at several sizes.
# Usage: t/fuzz/elf-seeds.sh DIR (CC: the compiler, default cc)

set -eu

dir=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$dir"

cat > "$tmp/seed.c" <<'SRC'
static int __attribute__((noinline))
seed_hidden(int x)
{
    return x * 3 + 1;
}

int
seed_exported(int x)
{
    return seed_hidden(x) + 2;
}
SRC

${CC:-cc} -O1 -g0 -shared -fPIC -Wl,--build-id -o "$dir/small.so" \
    "$tmp/seed.c"

# without page-aligned padding; and cut before its last section headers
${CC:-cc} -O1 -g0 -shared -fPIC -Wl,--build-id -Wl,-z,noseparate-code \
    -Wl,-z,max-page-size=16 -Wl,-z,common-page-size=16 \
    -o "$dir/compact.so" "$tmp/seed.c" 2>/dev/null \
    || cp "$dir/small.so" "$dir/compact.so"
size=$(wc -c < "$dir/compact.so")
head -c $((size - 100)) "$dir/compact.so" > "$dir/compact-truncated.so"

if command -v objcopy >/dev/null 2>&1; then
    objcopy --strip-all "$dir/small.so" "$dir/small-stripped.so"
    objcopy --only-keep-debug "$dir/small.so" "$dir/small.debug"
    # MiniDebugInfo: .gnu_debugdata, the xz of a .symtab-only ELF
    if command -v xz >/dev/null 2>&1; then
        objcopy -S --keep-symbol=seed_hidden "$dir/small.debug" \
            "$tmp/mini" && xz -c "$tmp/mini" > "$tmp/mini.xz" \
            && objcopy --add-section .gnu_debugdata="$tmp/mini.xz" \
                "$dir/small-stripped.so" "$dir/small-minidebuginfo.so"
    fi
fi

multiarch=$(${CC:-cc} -print-multiarch 2>/dev/null || true)

for f in "/usr/lib/$multiarch/libz.so.1" "/usr/lib/$multiarch/libc.so.6" \
         /usr/sbin/nginx
do
    [ -f "$f" ] || continue
    name=${f##*/}
    for size in 1024 4096 16384 65536; do
        head -c "$size" "$f" > "$dir/$name.$size"
    done
done
