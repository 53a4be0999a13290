#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# An idle worker stays idle: the profiler neither wakes it nor charges it
# CPU, and its profiles still account for the wall time spent waiting.

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

my $t = ProfNginx->new(workers => 1);
$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF
$t->run;

my ($worker) = $t->worker_pids;
ok($worker, "a worker runs (pid $worker)");

# Wakes of the worker's main thread over 3s without traffic: the flush
# timer (every 2s) may wake it once or twice; the sampler must not.
my $status = proc_status($worker, $worker);
my $before = $status->{voluntary_ctxt_switches};
my $cpu_before = thread_cpu_ns($worker);
my ($profiler, $sampler);
wait_until(sub {
    $profiler = profiler_of($worker);
    $sampler = $profiler && thread_named($profiler, 'prof-sampler');
}, 5);
ok($sampler, 'the worker\'s profiler process has its sampler thread');
my $sampler_before = thread_cpu_ns($profiler, $sampler);
my $t0 = time();

# Meanwhile the first two profiles are written (at 2s and 4s).
my @files = $t->wait_for_files(qr/^nginx\.$worker\.\d+\.pprof$/, 1, 10);
ok(@files, 'the first profile is written');

my $window_end = $t0 + 3;
ProfWait::wait_until(sub { time() >= $window_end }, 5, 0.05);

$status = proc_status($worker, $worker);
my $after = $status->{voluntary_ctxt_switches};
my $cpu_after = thread_cpu_ns($worker);
my $sampler_after = thread_cpu_ns($profiler, $sampler);
my $window = time() - $t0;

ok($after - $before <= 3,
   sprintf('the idle worker woke %d times in %.1fs (at most 3)',
           $after - $before, $window));
diag(sprintf('worker main thread: %d voluntary switches, %.2fms CPU in '
             . '%.1fs', $after - $before, ($cpu_after - $cpu_before) / 1e6,
             $window));

# The sampler thread sleeps through an idle worker's wait (it wakes for
# the profiles' closes here, every 2 s). This fails well above that: a
# thread that spins between looks takes 20-60%.
my $share = ($sampler_after - $sampler_before) / 1e9 / $window;
ok($share < 0.005, sprintf('the sampler thread took %.3f%% of a core '
                           . '(%.2fms in %.1fs; less than 0.5%%)',
                           100 * $share,
                           ($sampler_after - $sampler_before) / 1e6,
                           $window));

@files = $t->wait_for_files(qr/^nginx\.$worker\.[12]\.pprof$/, 2, 10);
is(scalar(@files), 2, 'two profiles are written without traffic');

for my $file (@files) {
    my $p = decode_profile($file);
    my ($n) = $file =~ /\.(\d+)\.pprof$/;
    my $cpu = profile_total($p, 'cpu-time');
    my $wall = profile_total($p, 'wall-time');
    my $dur = $p->{duration_nanos};
    my $err = $dur ? ($wall - $dur) / $dur : 1;

    ok($cpu < 1_000_000, sprintf('profile %d: cpu-time %.3fms (less than '
                                 . '1ms)', $n, $cpu / 1e6));
    ok(abs($err) <= 0.02,
       sprintf('profile %d: wall-time %.0fms is its duration %.0fms within '
               . '2%% (%+.2f%%)', $n, $wall / 1e6, $dur / 1e6, 100 * $err));

    my $leaves = leaf_totals($p, 'wall-time');
    my ($top) = sort { $leaves->{$b} <=> $leaves->{$a} } keys %$leaves;
    is($top, 'epoll_wait', "profile $n: the wall time is spent in "
       . 'epoll_wait');
}

ok($t->stop, 'nginx quits');

my $log = $t->error_log;
unlike($log, qr/epoll_wait\(\) failed \(4: Interrupted system call\)/,
       'no event wait was interrupted (the profiler did not signal the '
       . 'idle worker)');
unlike($log, qr/\[(?:alert|crit|emerg)\]/, 'no alert in the error log');

# Between profiles' closes an idle worker's profiler process does nothing:
# its sampler thread sleeps until the worker's wait ends, and its loop
# thread writes the status slot only when a drain changed it (no timer
# runs on its own). Counted in wake-ups, not time: each wake of a thread
# is a voluntary switch. (It looked four times a second, and wrote the
# status slot every second, before.)
{
    my $q = ProfNginx->new(workers => 1);
    $q->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
        location = /status { profiling_status; }
    }
EOF
    $q->run;
    my ($w) = $q->worker_pids;
    my $p;
    ProfWait::wait_until(sub { $p = profiler_ready($w) }, 10);
    my %tid = map { $_ => thread_named($p, $_) } qw(prof-sampler prof-loop);

    # Settled: the start's drains and status written, two looks taken.
    my $settled = time() + 2;
    ProfWait::wait_until(sub { time() >= $settled }, 5, 0.05);

    my %before = map {
        $_ => proc_status($p, $tid{$_})->{voluntary_ctxt_switches}
    } keys %tid;
    my $end = time() + 3;
    ProfWait::wait_until(sub { time() >= $end }, 5, 0.05);

    for my $name (sort keys %tid) {
        my $woke = proc_status($p, $tid{$name})->{voluntary_ctxt_switches}
                   - $before{$name};
        ok($woke <= 1, "idle, no profile closing: the profiler process's "
                       . "$name thread woke $woke times in 3 s (at most 1)");
    }

    ok($q->stop, 'nginx quits');
}

done_testing();
