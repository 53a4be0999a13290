#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The CPU time in the profiles is the CPU time the worker used, and each
# profile accounts for all the wall time of its period.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);
use ProfNginx;
use ProfPprof;
use ProfProc;
use ProfWait;
use ProfWorkload;

my $t = ProfNginx->new(workers => 1);
$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 3s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 30ms; }
    }
EOF
$t->run;

my ($worker) = $t->worker_pids;
ok($worker, "a worker runs (pid $worker)");

# Busy about 60% of the time: 30ms of CPU, then 20ms of nothing, for 7s,
# across two complete 3s periods and part of a third.
my ($profiler, $sampler);
wait_until(sub {
    $profiler = profiler_of($worker);
    $sampler = $profiler && thread_named($profiler, 'prof-sampler');
}, 5);
my $sampler_ns = thread_cpu_ns($profiler, $sampler) // 0;
my $t0 = time();
my $served = ProfWorkload::drive($t, '/burn', 7, 0.020);
my $elapsed = time() - $t0;
ok($served > 50, "$served requests burning 30ms each in "
   . sprintf('%.1fs', $elapsed));

# The sampler thread looks at a busy worker ten times a second: ~0.1% of
# a core here, nearly all of it the kernel's cost of a futex wake-up on
# this kind of VM (~100 us each), more under ASan. This fails only well
# above that: a sampler thread that spins takes 5-60%.
$sampler_ns = (thread_cpu_ns($profiler, $sampler) // 1e12) - $sampler_ns;
ok($sampler_ns / 1e9 / $elapsed < 0.01,
   sprintf('the sampler thread took %.3f%% of a core (%.2fms in %.1fs)',
           100 * $sampler_ns / 1e9 / $elapsed, $sampler_ns / 1e6,
           $elapsed));

# What the worker's main thread used in its whole life, just before it
# quits; it writes its last, partial, profile as it exits.
my $cpu_ns = thread_cpu_ns($worker, $worker);
# (About 4.2 s on a quiet machine; a second is enough to compare with, and
# a busy 2-core host has left the worker less than half of its share.)
ok($cpu_ns > 1e9, sprintf('the worker used %.0fms of CPU', $cpu_ns / 1e6));

ok($t->stop, 'nginx quits');

my @files = profile_files($t->dump_dir, qr/^nginx\.$worker\.\d+\.pprof$/);
my @seq = map { /\.(\d+)\.pprof$/ ? $1 : () } @files;
is_deeply(\@seq, [ 0 .. scalar(@seq) - 1 ], 'the profiles are numbered 0..'
          . scalar(@seq) . ', none missing');
ok(@files >= 3, scalar(@files) . ' profiles: two complete periods and the '
   . 'last partial one');

my @p = map { decode_profile($_) } @files;

my $profiled_ns = 0;
$profiled_ns += profile_total($_, 'cpu-time') for @p;

my $err = $cpu_ns ? ($profiled_ns - $cpu_ns) / $cpu_ns : 1;
ok(abs($err) <= 0.05,
   sprintf('cpu-time of all profiles (%.0fms) is the CPU time the worker '
           . 'used (%.0fms) within 5%% (%+.1f%%)', $profiled_ns / 1e6,
           $cpu_ns / 1e6, 100 * $err));

# Wall time: every tick of every period is somewhere in the profile.
for my $i (0 .. $#p) {
    my $p = $p[$i];
    my $n = $i + 1;
    my $complete = $i < $#p;
    my $dur = $p->{duration_nanos};
    my $wall = profile_total($p, 'wall-time');
    my $werr = $dur ? ($wall - $dur) / $dur : 1;

    # (A period ends at the worker's first turn after its time: a
    # descheduled worker's is late by as long; 10%.)
    if ($complete) {
        ok(abs($dur - 3e9) <= 0.3e9,
           sprintf('profile %d covers the 3s period (%.3fs)', $n, $dur / 1e9));
    }

    ok(abs($werr) <= 0.02,
       sprintf('profile %d%s: wall-time %.0fms is its duration %.0fms '
               . 'within 2%% (%+.2f%%)', $n, $complete ? '' : ' (last)',
               $wall / 1e6, $dur / 1e6, 100 * $werr));

    diag(sprintf('profile %d: cpu-time %.0fms, wall-time %.0fms, '
                 . 'off-cpu-time %.0fms, duration %.0fms', $n,
                 profile_total($p, 'cpu-time') / 1e6, $wall / 1e6,
                 profile_total($p, 'off-cpu-time') / 1e6, $dur / 1e6));
}

# Consecutive profiles tile time: each starts where the previous ended.
for my $i (1 .. $#p) {
    my $gap = $p[$i]{time_nanos}
              - ($p[$i - 1]{time_nanos} + $p[$i - 1]{duration_nanos});
    ok(abs($gap) < 5_000_000, sprintf('profile %d starts where profile %d '
                                      . 'ended (%+.1fms)', $i + 1, $i,
                                      $gap / 1e6));
}

done_testing();
