#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The profiler process beside each worker: it outlives its worker only to
# finish the worker's last profile, and its own death never touches the
# worker.
#
# - A worker killed outright (SIGKILL): its profiler process writes the
#   profile the worker was collecting, then exits; nginx's new worker gets
#   a profiler process of its own.
# - The profiler process killed: the worker goes on serving, notices at its
#   next period, logs it, stops sampling, and the status page counts it.
# - With reuseport (a listening socket per worker), no profiler process
#   holds one: every connection reaches a worker.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfProc qw(:DEFAULT stat_cpu_ns);
use ProfWait;
use ProfWorkload;


# A worker killed: its last profile is written after it.
{
    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 60s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 20ms; }
    }
EOF
    $t->run;
    my ($worker) = $t->worker_pids;
    my $profiler;
    wait_until(sub { $profiler = profiler_of($worker) }, 5);
    ok($profiler, "worker $worker has its profiler process $profiler");

    # Burn until the worker has used 400 ms of CPU (a loaded machine
    # gives it less in a given time), then kill it at once.
    my $burned;
    wait_until(sub {
        ProfWorkload::drive($t, '/burn', 0.1, 0.01);
        ($burned = stat_cpu_ns($worker) // 0) >= 400e6;
    }, 30);
    kill('KILL', $worker);
    $burned /= 1e6;

    my @f = $t->wait_for_files(qr/^nginx\.$worker\.0\.pprof$/, 1, 10);
    ok(@f, 'the killed worker\'s profile is written by its profiler '
       . 'process');
    if (@f) {
        my $p = decode_profile($f[0]);
        my $cpu = profile_total($p, 'cpu-time') / 1e6;
        # The worker's CPU since its start: the burn, and its own start
        # (the samples of a start under the first interval are few).
        ok($burned >= 400 && $cpu > 0.75 * $burned,
           sprintf('it holds the CPU time the worker burned (%.0f ms of '
                   . '%.0f ms)', $cpu, $burned));
        # Named after the worker is gone (its maps were read while it ran):
        # the spin, or what it calls (its clock, a system call that takes
        # a tenth of its time on some VMs) under it.
        my $named = ProfHotspots::sum_cpu(ProfHotspots::burn_samples(
                        ProfHotspots::hotspot_samples($p)));
        ok($named > 0.8 * $cpu * 1e6, sprintf('%.0f%% of it is named '
           . 'ngx_http_profiling_burn_spin or under it',
           100 * $named / ($cpu * 1e6 || 1)));
    }
    ok(wait_until(sub { !process_alive($profiler) }, 5),
       'then the profiler process exits');

    my $new;
    wait_until(sub {
        ($new) = grep { $_ != $worker } $t->worker_pids;
        $new && profiler_of($new);
    }, 10);
    ok($new && profiler_of($new), 'the new worker has a profiler process');
    ok($t->stop, 'nginx quits');
}


# The profiler process killed: the worker serves on, and says so.
{
    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 2ms; }
        location = /status { profiling_status; }
    }
EOF
    $t->run;
    my ($worker) = $t->worker_pids;
    my $profiler;
    wait_until(sub { $profiler = profiler_of($worker) }, 5);
    ok($profiler, "worker $worker has its profiler process $profiler");

    kill('KILL', $profiler);
    ok(wait_until(sub { !process_alive($profiler) }, 5),
       'the profiler process is gone');

    my $served = ProfWorkload::drive($t, '/burn', 2, 0.01);
    ok($served > 50, "the worker serves on ($served requests)");
    is(($t->worker_pids)[0], $worker, 'the same worker, never restarted');

    ok($t->wait_for_log(
           qr/profiling: the profiler process $profiler exited /, 1, 5),
       'the worker logs that its profiler process exited');

    my $s;
    ok(wait_until(sub {
        my $r = $t->get('/status');
        return 0 unless $r->{status} == 200;
        $s = eval { decode_json($r->{content}) } or return 0;
        my ($w) = grep { $_->{pid} == $worker } @{ $s->{workers} || [] };
        return $w && $w->{profiler_crashes} == 1;
    }, 5), 'the status page counts the crash');
    my ($w) = grep { $_->{pid} == $worker } @{ $s->{workers} || [] };
    ok($w && !$w->{running}, 'and says the worker is not profiling');

    ok($t->stop, 'nginx quits');
    # nginx's worker reaps the child it does not know, and says so.
    my @deaths = grep { !/unknown process $profiler exited on signal 9/ }
                 $t->worker_deaths;
    is_deeply(\@deaths, [], 'no other process died');
}


# reuseport: each worker's own listening socket, none held elsewhere.
{
    my $t = ProfNginx->new(workers => 2);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;

    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location / { return 204; }
    }
EOF
    $t->run;
    my @workers = $t->worker_pids;
    is(scalar(@workers), 2, 'two workers with reuseport');
    for my $worker (@workers) {
        my $profiler;
        wait_until(sub { $profiler = profiler_ready($worker) }, 5);
        ok($profiler, "worker $worker has its profiler process");
        is_deeply([ listening_sockets_held($profiler) ], [],
                  'which holds no listening socket');
    }

    my $ok = 0;
    for (1 .. 40) {
        my $r = $t->get('/');
        $ok++ if $r->{status} == 204;
    }
    is($ok, 40, 'every connection is answered');
    ok($t->stop, 'nginx quits');
}

done_testing();
