#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Signals from outside: a SIGPROF sent to a worker (kill -PROF) while it is
# idle and while it is busy neither kills it nor counts as CPU time in its
# profile; a module started after the profiler that installs actions of its
# own for SIGPROF and SIGSEGV does not stop the sampling nor the Lua walk;
# without a master (master_process off), a reload (SIGHUP) applies the new
# profiling settings.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX ();
use Test::More;

use ProfEnv;
use ProfHTTP;
use ProfHotspots;
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfProc;
use ProfWait;

my $BURN_MS = 1500;


subtest 'a foreign SIGPROF, idle and busy' => sub {
    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF", main => $t->core_main);
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
        location /burn { profiling_burn ${BURN_MS}ms; }
    }
EOF
    $t->run;
    my ($worker) = $t->worker_pids;
    my $sent = 0;

    # Idle: 30 signals, 20 ms apart.
    for (1 .. 30) {
        $sent += kill('PROF', $worker);
        ProfWait::poll_sleep(0.02);
    }
    ok(process_alive($worker), "the idle worker lives after $sent SIGPROF");
    is($t->get('/')->{status}, 204, 'and serves');

    # Busy: signals every 5 ms while it burns.
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        my $r = ProfHTTP::get_with($t, '/burn');
        POSIX::_exit($r->{status} == 200 ? 0 : 1);
    }
    my $cpu0 = thread_cpu_ns($worker);
    wait_until(sub { thread_cpu_ns($worker) - $cpu0 > 20e6 }, 5, 0.005);
    my $busy_sent = 0;
    while (waitpid($pid, POSIX::WNOHANG()) == 0) {
        $busy_sent += kill('PROF', $worker);
        ProfWait::poll_sleep(0.005);
    }
    is($?, 0, 'the busy request is answered');
    ok($busy_sent >= 100, "$busy_sent SIGPROF sent while the worker burned");
    ok(process_alive($worker), 'the busy worker lives');

    for (1 .. 30) {
        $sent += kill('PROF', $worker);
        ProfWait::poll_sleep(0.02);
    }
    is($t->get('/')->{status}, 204, 'the worker serves after '
       . ($sent + $busy_sent) . ' SIGPROF');

    my $used_ns = thread_cpu_ns($worker);
    is_deeply([ $t->worker_pids ], [ $worker ], 'the same worker throughout');
    ok($t->stop, 'nginx quits');
    $t->ok_no_worker_died('SIGPROF');

    my ($file) = profile_files($t->dump_dir, qr/^nginx\.$worker\.0\.pprof$/);
    my $p = $file ? decode_profile($file) : undef;
    my $cpu_ns = $p ? profile_total($p, 'cpu-time') : 0;
    my $burn_ns = 0;
    if ($p) {
        $burn_ns = ProfHotspots::sum_cpu(ProfHotspots::burn_samples(
            ProfHotspots::hotspot_samples($p)));
    }

    # The worker's CPU clock read before it quit (it used a little more
    # while quitting); the profile counts CPU in 10 ms intervals.
    ok($cpu_ns <= $used_ns * 1.1 + 30e6,
       sprintf('the profile counts %.0fms of cpu-time, the worker used '
               . '%.0fms: not more (signals are not samples)', $cpu_ns / 1e6,
               $used_ns / 1e6));
    ok($burn_ns >= 0.8 * $BURN_MS * 1e6 && $burn_ns <= 1.1 * $BURN_MS * 1e6,
       sprintf('the burn counts %.0fms of cpu-time for %dms burned',
               $burn_ns / 1e6, $BURN_MS));
};


# Where the CPU went (by frame 0, and its caller) and the profiler's
# counters, when a count is short.
sub diag_samples {
    my ($t, @s) = @_;
    diag('cpu-time by leaf < caller: ' . ProfHotspots::format_cpu_by(
        ProfHotspots::cpu_by(sub { join(' < ', grep { defined }
                                        @{ $_[0]{funcs} }[0, 1])
                                   || '[no stack]' }, @s)));
    my $c = ProfLog::exit_counters_by_pid($t->error_log);
    diag(join("\n", map { my $w = $_; "worker $w: " . join(' ', map {
         "$_=" . ($c->{$w}{$_} // '?') } qw(cpu_samples ring_full
         dropped_samples dropped_batches unwind_stops truncated_stacks
         interval_ns throttled_ns)) } sort keys %$c));
}


subtest 'a module started after the profiler installs its own actions'
    => sub {
    # (the lua module: the SIGSEGV guard of the Lua walk is retaken too;
    # 1 ms: more walks than between two of the walk's own checks of it)
    my $lua = ProfEnv::engines()->{lua};
    my $t = ProfNginx->new(workers => 1,
                           modules => [ qw(ngx_http_profiling_module
                                           ngx_http_profiling_burn_module),
                                        @{ $lua // [] } ]);
    my $lua_location = $lua ? 'location /lua { content_by_lua_block {
            local stop, s = os.clock() + 0.3, 0
            while os.clock() < stop do s = s + math.sin(s) end
            ngx.say(s) } }' : '';
    $t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_interval 1ms;
    profiling_burn_signals;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 300ms; }
        $lua_location
    }
EOF
    $t->run;
    # Its profiler process draining (the ring holds 64 samples, 64 ms at
    # this interval, until it does: a start-up starved on a busy machine
    # is not what this looks at).
    my ($worker) = $t->worker_pids;
    ok(wait_until(sub { profiler_ready($worker) }, 20),
       'its profiler process drains the samples');
    is($t->get('/burn')->{status}, 200, 'a burn request answered');
    is($t->get('/lua')->{status}, 200, 'a Lua request answered') if $lua;
    ok($t->stop, 'nginx quits');
    $t->ok_no_worker_died('own actions');

    my @s = ProfHotspots::hotspot_samples(
                ProfPprof::decode_dump_dir($t->dump_dir));
    my $burn_ns = ProfHotspots::sum_cpu(ProfHotspots::burn_samples(@s));
    ok($burn_ns >= 0.8 * 300e6, sprintf('the profiler samples the worker '
       . '(its SIGPROF handler back in front): %.0fms of the 300ms burned',
       $burn_ns / 1e6)) or diag_samples($t, @s);
    SKIP: {
        skip('no lua', 1) unless $lua;
        my @with = grep { @{ $_->{lua} } } @s;
        my $lua_ns = ProfHotspots::sum_cpu(@with);
        ok($lua_ns >= 0.5 * 300e6, sprintf('Lua frames in %.0fms of samples '
           . '(its SIGSEGV guard back in front)', $lua_ns / 1e6))
           or diag_samples($t, @s);
    }
};


subtest 'a SIGSEGV sent to a worker with the Lua guard kills it' => sub {
    # The guard of the Lua walk holds SIGSEGV's action; a signal sent (not
    # a fault, which runs again) must still reach the action it displaced:
    # here nginx's default, the worker's death, as without the module.
    my $lua = ProfEnv::engines()->{lua};
    plan skip_all => 'no lua module' unless $lua;
    # Under a sanitizer its own SIGSEGV handler takes the signal, reports
    # it and exits: not nginx's default action.
    plan skip_all => 'under a sanitizer (t/sanitizer-nginx)'
        if ProfEnv::nginx_wrapped();
    my $t = ProfNginx->new(workers => 1,
                           modules => [ 'ngx_http_profiling_module', @$lua ]);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_interval 1ms;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /lua { content_by_lua_block {
            local stop, s = os.clock() + 0.2, 0
            while os.clock() < stop do s = s + math.sin(s) end
            ngx.say(s) } }
    }
EOF
    $t->run;
    is($t->get('/lua')->{status}, 200, 'a Lua request answered');
    my ($victim) = $t->worker_pids;
    kill('SEGV', $victim);
    my @new;
    ok(wait_until(sub {
        @new = grep { $_ != $victim } $t->worker_pids;
        return @new == 1;
    }, 10), "worker $victim died, the master respawned it as @new");
    ok($t->stop, 'nginx quits');
    my @deaths = $t->worker_deaths;
    ok(@deaths == 1 && $deaths[0] =~ /process $victim exited on signal 11/,
       'its death is the SIGSEGV sent')
        or diag(join("\n", map { "  $_" } @deaths));
};


subtest 'master_process off: a reload applies the profiling settings' => sub {
    my $t = ProfNginx->new(master_process => 0, daemon => 0);
    my $http = <<'EOF';
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;
    profiling_service before-reload;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 5ms; }
    }
EOF
    $t->write_config($http, main => $t->core_main);
    $t->run;
    my $pid = $t->master_pid;
    is($t->get('/burn')->{status}, 200, 'a single process serves');
    # (The first profile waits for its names: an instance builds libc's
    # inline tables first, seconds on a busy host or under a sanitizer.)
    ok($t->wait_for_files(qr/^before-reload\.$pid\.\d+\.pprof$/, 1, 15),
       'it writes profiles named before-reload.*');

    $t->write_config($http =~ s/before-reload/after-reload/r
                           =~ s/profiling_period 1s/profiling_period 2s/r,
                     main => $t->core_main);
    $t->reload;

    my @f = $t->wait_for_files(qr/^after-reload\.$pid\.\d+\.pprof$/, 2, 20);
    ok(@f == 2, 'after SIGHUP it writes profiles named after-reload.*');
    my $p = @f ? eval { decode_profile($f[-1]) } : undef;
    ok($p && abs($p->{duration_nanos} - 2e9) < 0.2e9,
       'every 2s, the new period (' . ($p ? $p->{duration_nanos} / 1e9
                                          : 'none') . 's)');
    ok(process_alive($pid), 'the process lives');

    my $before = () = profile_files($t->dump_dir, qr/^before-reload\./);
    ok($t->stop, 'it quits on SIGQUIT');
    is(scalar(() = profile_files($t->dump_dir, qr/^before-reload\./)),
       $before, 'no profile of the old settings after the reload');
    unlike($t->error_log, qr/\[(?:alert|emerg|crit)\]|exited on signal/,
           'no alert in the error log');
    ok(!$t->core_files, 'no core file');
};

done_testing();
