#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Functions inlined where a sample was taken, from the DWARF of the file
# the names come from: a stripped library whose debug file its
# .gnu_debuglink names burns in a function inlined into one inlined into
# a static one. The
# pprof Location of such a pc lists the inlined function first, with the
# line running in it, then the function around it with the line of the
# call (pprof's order), as decoded by protoc; without DWARF (MiniDebugInfo
# has none) the Location has the one function.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfCommand;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;
for my $tool (qw(gcc objcopy xz)) {
    plan(skip_all => "no $tool")
        unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

# A shell command run in $p/lib (its output; dies when it fails).
sub sh { ProfCommand::shell_in("$p/lib", $_[0]) }

mkdir("$p/lib") or die;
my $source = <<'EOF';
#include <time.h>

static inline __attribute__((always_inline)) double
inline_step(long i)
{
    double  v = (double) (i % 7) * 0.5;             /* STEP */

    __asm__ volatile ("" : : : "memory");
    return v;
}

static inline __attribute__((always_inline)) double
inline_mid(long i)
{
    return inline_step(i) * 1.5;                    /* MID */
}

static double __attribute__((noinline, noclone))
inline_outer_spin(long n)
{
    double  s = 0;
    long    i;

    for (i = 0; i < n; i++) {
        s += inline_mid(i);                         /* CALL */
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
inline_burn(long ms)
{
    long    end;
    double  s = 0;

    end = cpu_ms() + ms;

    while (cpu_ms() < end) {
        s += inline_outer_spin(200000);
    }

    return s;
}
EOF
open(my $fh, '>', "$p/lib/burn.c") or die;
print $fh $source;
close($fh);
my @lines = split /\n/, $source;
my ($STEP) = grep { $lines[$_ - 1] =~ m{/\* STEP \*/} } 1 .. @lines;
my ($CALL) = grep { $lines[$_ - 1] =~ m{/\* CALL \*/} } 1 .. @lines;
my ($MID) = grep { $lines[$_ - 1] =~ m{/\* MID \*/} } 1 .. @lines;

# beside: a debug file with DWARF; minidebuginfo: a .symtab only.
sh('gcc -O2 -g -shared -fPIC -Wl,--build-id -o full.so burn.c'
   . ' && objcopy --only-keep-debug full.so full.debug'
   . ' && objcopy --strip-all full.so stripped.so'
   . ' && mkdir beside minidebuginfo'
   . ' && objcopy --add-gnu-debuglink=full.debug stripped.so beside/libinl.so'
   . ' && cp full.debug beside/'
   . ' && objcopy --strip-debug --remove-section .comment full.debug mini'
   . ' && xz mini && objcopy --add-section .gnu_debugdata=mini.xz'
   . '    stripped.so minidebuginfo/libinl.so && chmod -R a+rX .');

my %LIB = map { $_ => "$p/lib/$_/libinl.so" } qw(beside minidebuginfo);
my $locations = join('', map { <<"EOF" } sort keys %LIB);
        location /$_ {
            content_by_lua_block {
                local lib = ffi.load("$LIB{$_}")
                ngx.say(lib.inline_burn(30))
            }
        }
EOF

$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    init_by_lua_block {
        ffi = require "ffi"
        ffi.cdef[[double inline_burn(long ms);]]
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

# Each leaf Location in the library: its Lines (function, line).
my (%cpu, $total);
for my $prof (ProfPprof::decode_dump_dir($t->dump_dir)) {
    ProfPprof::index_profile($prof);
    my %map = map { $_->{id} => ProfPprof::pstr($prof, $_->{filename}) }
              @{ $prof->{mapping} };
    my $icpu = ProfPprof::value_index($prof, 'cpu-time');
    for my $s (@{ $prof->{sample} }) {
        my $loc = $prof->{_loc}{ $s->{location_id}[0] // 0 } or next;
        my $obj = $map{ $loc->{mapping_id} } // '';
        my ($way) = grep { $LIB{$_} eq $obj } keys %LIB or next;
        my $lines = join(' < ', map {
            my $f = $prof->{_fn}{ $_->{function_id} // 0 };
            ($f ? ProfPprof::pstr($prof, $f->{name}) : '?')
            . ':' . ((ref $_->{line} ? $_->{line}[0] : $_->{line}) // 0)
        } @{ $loc->{line} });
        $cpu{$way}{$lines} += $s->{value}[$icpu] // 0;
        $total->{$way} += $s->{value}[$icpu] // 0;
    }
}

# Two functions deep: inline_step in inline_mid in inline_outer_spin.
my $chain = "inline_step:$STEP < inline_mid:$MID < inline_outer_spin:$CALL";
my $share = ($cpu{beside}{$chain} // 0) / ($total->{beside} || 1);
ok(($total->{beside} // 0) >= 200e6 && $share >= 0.3,
   sprintf('beside: %.0f%% of the cpu-time is at %s', 100 * $share,
           $chain))
    or diag(ProfHotspots::format_cpu_by($cpu{beside} // {}));
my @beside = keys %{ $cpu{beside} // {} };
is(scalar(grep { /^inline_step:/ && $_ ne $chain } @beside), 0,
   'beside: inline_step is always in inline_mid in inline_outer_spin, '
   . 'at their calls')
    or diag(ProfHotspots::format_cpu_by($cpu{beside} // {}));
is(scalar(grep { /^inline_mid:/ && !/ < inline_outer_spin:$CALL$/ }
           @beside), 0,
   'beside: inline_mid is always in inline_outer_spin at its call')
    or diag(ProfHotspots::format_cpu_by($cpu{beside} // {}));
is(scalar(grep { /:0( |$)/ } @beside), 0,
   'beside: every Line has its line number')
    or diag(ProfHotspots::format_cpu_by($cpu{beside} // {}));

my $mini = $cpu{minidebuginfo} // {};
my $outer = 0;
$outer += $mini->{$_} for grep { /^inline_outer_spin:0$/ } keys %$mini;
ok(($total->{minidebuginfo} // 0) >= 200e6
   && $outer >= 0.9 * $total->{minidebuginfo},
   'minidebuginfo (no DWARF): one function a Location, no line')
    or diag(ProfHotspots::format_cpu_by($mini));

done_testing();
