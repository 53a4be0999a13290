#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Names of static functions in stripped libraries, found as distributions
# ship them: a debug file named by .gnu_debuglink (beside the library, or
# in its .debug/ directory, its CRC checked) and MiniDebugInfo (an
# xz-compressed .gnu_debugdata, made as Fedora's find-debuginfo makes it).
# A library calls its static function from nginx through LuaJIT's FFI;
# the CPU in it must carry the function's real name, and without any
# source of names none.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfCommand;
use ProfEnv ();
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;
# (The compiler and binutils of the build: a cross build's for an arm64
# nginx.)
my ($CC, $OBJCOPY, $NM) = map { ProfEnv::build_tool($_) } qw(cc objcopy nm);
for my $tool ((split ' ', $CC)[0], $OBJCOPY, $NM, 'xz') {
    plan(skip_all => "no $tool")
        unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

# A shell command run in $p/lib (its output; dies when it fails).
sub sh { ProfCommand::shell_in("$p/lib", $_[0]) }

# The library: debug_burn(ms) spins in a static function for ms of CPU.
mkdir("$p/lib") or die;
open(my $fh, '>', "$p/lib/burn.c") or die;
print $fh <<'EOF';
#include <time.h>

static double __attribute__((noinline, noclone))
debug_hidden_spin(long n)
{
    double  s = 0;
    long    i;

    for (i = 0; i < n; i++) {
        s += (double) (i % 7) * 0.5;
        __asm__ volatile ("" : : : "memory");
    }

    return s;
}

static long
cpu_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double
debug_burn(long ms)
{
    long    end;
    double  s = 0;

    end = cpu_ms() + ms;

    while (cpu_ms() < end) {
        s += debug_hidden_spin(200000);
    }

    return s;
}
EOF
close($fh);

sh("$CC -O2 -g -shared -fPIC -Wl,--build-id -o full.so burn.c"
   . " && $OBJCOPY --only-keep-debug full.so full.debug"
   . " && $OBJCOPY --strip-all full.so stripped.so");

# Each way in a directory of its own, the library under the same name.
my %LIB = map { $_ => "$p/lib/$_/libburn.so" }
          qw(beside dotdebug minidebuginfo none);
sh('mkdir beside dotdebug dotdebug/.debug minidebuginfo none'
   . " && $OBJCOPY --add-gnu-debuglink=full.debug stripped.so"
   . '    beside/libburn.so && cp full.debug beside/'
   . ' && cp beside/libburn.so dotdebug/ && cp full.debug dotdebug/.debug/'
   . ' && cp stripped.so none/libburn.so');
sh("$NM -D full.so --format=posix --defined-only | awk '{ print \$1 }'"
   . '    | sort > dynsyms'
   . " && $NM full.so --format=posix --defined-only"
   . '    | awk \'{ if ($2 == "T" || $2 == "t") print $1 }\' | sort > funcsyms'
   . ' && comm -13 dynsyms funcsyms > keep_symbols'
   . " && $OBJCOPY -S --remove-section .gdb_index --remove-section .comment"
   . '    --keep-symbols=keep_symbols full.debug mini_debuginfo'
   . ' && xz mini_debuginfo'
   . " && $OBJCOPY --add-section .gnu_debugdata=mini_debuginfo.xz"
   . '    stripped.so minidebuginfo/libburn.so');
sh('chmod -R a+rX .');

my $locations = join('', map { <<"EOF" } sort keys %LIB);
        location /$_ {
            content_by_lua_block {
                local lib = ffi.load("$LIB{$_}")
                ngx.say(lib.debug_burn(30))
            }
        }
EOF

$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    init_by_lua_block {
        ffi = require "ffi"
        ffi.cdef[[double debug_burn(long ms);]]
    }

    server {
        listen 127.0.0.1:%%PORT%%;
$locations
    }
EOF
$t->run;

for my $way (sort keys %LIB) {
    my @bad = grep { ($t->get("/$way")->{status} // 0) != 200 } 1 .. 15;
    is(scalar(@bad), 0, "/$way: 15 requests answered 200");
}
ok($t->stop, 'nginx quits (and writes its last profile)');

my @S = grep { $_->{cpu} > 0 }
        ProfHotspots::hotspot_samples(
            ProfPprof::decode_dump_dir($t->dump_dir));

for my $way (qw(beside dotdebug minidebuginfo)) {
    my ($by) = ProfHotspots::leaf_cpu_in(\@S, $LIB{$way});
    my $total = 0;
    $total += $_ for values %$by;
    my $named = $by->{debug_hidden_spin} // 0;
    ok($total >= 200e6 && $named >= 0.95 * $total,
       sprintf('%s: %.1f%% of the %.0fms of cpu-time in the stripped '
               . 'library carries debug_hidden_spin', $way,
               $total ? 100 * $named / $total : 0, $total / 1e6))
        or diag('by leaf: ' . ProfHotspots::format_cpu_by($by));
}

my ($none) = ProfHotspots::leaf_cpu_in(\@S, $LIB{none});
my $none_total = 0;
$none_total += $_ for values %$none;
ok($none_total >= 200e6 && !$none->{debug_hidden_spin},
   sprintf('without any source of names: %.0fms of cpu-time in the library, '
           . 'none of it named debug_hidden_spin', $none_total / 1e6))
    or diag('by leaf: ' . ProfHotspots::format_cpu_by($none));

done_testing();
