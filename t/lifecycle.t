#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The profiler follows nginx's processes: it runs in workers (and in a
# single process), not in helpers; every worker leaves its last profile
# when it exits, on quit and on reload; the dump dir is made if missing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfNginx;
use ProfPprof;
use ProfEnv ();
use ProfProc;
use ProfWait;

# A worker runs no thread of the profiler's; its profiler process does,
# holds none of nginx's listening sockets, and blocks nginx's signals.
sub runs_profiler {
    my ($pid, $what) = @_;
    is(thread_count($pid), 1, "$what has one thread");

    my $prof;
    ProfWait::wait_until(sub { $prof = profiler_of($pid) }, 5);
    ok($prof, "$what has its profiler process") or return;

    # Its threads start once it has closed what it inherited.
    my %names;
    ProfWait::wait_until(sub {
        %names = map { $_ => 1 } ProfProc::thread_names($prof);
        $names{'prof-sampler'} && $names{'prof-loop'};
    }, 5);
    ok($names{'prof-sampler'} && $names{'prof-loop'},
       "its profiler process $prof runs the sampler and loop threads");

    is_deeply([ listening_sockets_held($prof) ], [],
              'it holds no listening socket');

    my $status = proc_status($prof);
    my $blocked = do { no warnings "portable"; hex($status->{SigBlk} // 0) };
    ok(($blocked & (1 << 0)) && ($blocked & (1 << 2)) && ($blocked & (1 << 14)),
       'it blocks HUP, QUIT and TERM');
}

my $HTTP = <<'EOF';
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
        location /burn { profiling_burn 20ms; }
    }
EOF

sub last_profile_ok {
    my ($file, $pid, $what) = @_;
    my $p = eval { decode_profile($file) };
    ok($p, "$what: the profile decodes") or diag($@);
    return unless $p;
    ok($p->{duration_nanos} > 0 && $p->{duration_nanos} < 60e9,
       sprintf("$what: it covers the process's life (%.3fs)",
               $p->{duration_nanos} / 1e9));
    my $l = @{ $p->{sample} } ? sample_labels($p, $p->{sample}[0]) : {};
    is($l->{'thread id'}{num}, $pid, "$what: its samples are of pid $pid");
    return $p;
}


# Quit right after start: the period is far from over, the last profile
# is written at exit.
{
    my $t = ProfNginx->new(workers => 1);
    $t->write_config($HTTP);
    $t->run;
    my ($worker) = $t->worker_pids;
    runs_profiler($worker, 'the worker');

    ok($t->stop, 'nginx quits right after start');

    my @f = profile_files($t->dump_dir, qr/\.pprof$/);
    is_deeply([ map { s{.*/}{}r } @f ], [ "nginx.$worker.0.pprof" ],
              'the worker wrote its only profile as it quit');
    last_profile_ok($f[0], $worker, 'quit') if @f;

    like($t->error_log, qr/\[notice\] $worker#\d+: profiling: stopped: .*exported=1 /,
         'the worker logs its counters as it stops');
    like($t->error_log, qr/$worker#\d+: profiling: stopped: .* unwind_tables=0 unwind_table_bytes=[1-9]/,
         'the worker walks stacks with the unwind tables the master built');
}


# A single process (master_process off), in the foreground, stopped with
# SIGQUIT.
{
    my $t = ProfNginx->new(master_process => 0, daemon => 0);
    $t->write_config($HTTP);
    $t->run;
    my $pid = $t->master_pid;
    is($t->get('/')->{status}, 204, 'a single nginx process serves');
    runs_profiler($pid, 'the single process');

    ok($t->stop, 'it quits on SIGQUIT');
    ok(defined $t->exit_status && $t->exit_status == 0,
       'with exit status 0');

    my @f = $t->wait_for_files(qr/\.pprof$/, 1, 1);
    is_deeply([ map { s{.*/}{}r } @f ], [ "nginx.$pid.0.pprof" ],
              'it wrote its profile as it quit');
    last_profile_ok($f[0], $pid, 'single process') if @f;
    like($t->error_log, qr/profiling: stopped: .* unwind_tables=1 unwind_table_bytes=[1-9]/,
         'without a master, the process builds its own unwind tables');
}


# Cache manager and cache loader processes: helpers, without profiler.
# (Not under qemu-user: the host shows no nginx titles to tell them from
# workers.)
if (ProfEnv::guest_root() eq '') {
    my $t = ProfNginx->new(workers => 2);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    proxy_cache_path %%PREFIX%%/cache keys_zone=one:1m;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF
    $t->run;

    my (%role, @workers, @helpers);
    # The helpers are forked after the workers: wait for all four, each
    # under its own title (a child just forked still has the master's).
    ProfWait::wait_until(sub {
        %role = map { $_ => proc_cmdline($_) } $t->children_pids;
        return 4 <= grep { /worker process|cache (?:manager|loader) process/ }
                      values %role;
    }, 10);
    @workers = grep { $role{$_} =~ /worker process/ } keys %role;
    @helpers = grep { $role{$_} =~ /cache (?:manager|loader) process/ }
               keys %role;
    is(scalar(@workers), 2, 'two workers run');
    ok((grep { $role{$_} =~ /cache manager/ } @helpers),
       'a cache manager runs');

    # Each worker's profiler is up before it serves: its threads exist.
    runs_profiler($_, "worker $_") for sort @workers;
    is(thread_count($_), 1, "$role{$_} $_ has 1 thread (no profiler)")
        for sort @helpers;

    ok($t->stop, 'nginx quits');

    my @f = profile_files($t->dump_dir, qr/\.pprof$/);
    my %by_pid = map { /nginx\.(\d+)\.\d+\.pprof$/ ? ($1 => 1) : () } @f;
    is_deeply([ sort keys %by_pid ], [ sort @workers ],
              'profiles come from the workers only');
}


# Reload: new workers start their own profilers (with the new period),
# old workers write their last profile as they exit.
{
    my $t = ProfNginx->new(workers => 1);
    $t->write_config($HTTP);
    $t->run;
    my ($old) = $t->worker_pids;

    $t->get('/burn');
    $t->write_config($HTTP =~ s/profiling_period 10m/profiling_period 1s/r);
    $t->reload;

    my @new;
    my $done = ProfWait::wait_until(sub {
        @new = grep { $_ != $old } $t->worker_pids;
        return @new && !process_alive($old);
    }, 15);
    ok($done, "after reload a new worker (@new) replaced worker $old");

    my @f = $t->wait_for_files(qr/^nginx\.$old\.\d+\.pprof$/, 1, 5);
    is_deeply([ map { s{.*/}{}r } @f ], [ "nginx.$old.0.pprof" ],
              'the old worker wrote its last profile as it exited');
    last_profile_ok($f[0], $old, 'old worker') if @f;

    my ($new) = @new;
    if ($new) {
        runs_profiler($new, 'the new worker');
        @f = $t->wait_for_files(qr/^nginx\.$new\.0\.pprof$/, 1, 5);
        ok(@f, 'the new worker writes its own profiles, every 1s now');
        my $p = @f ? decode_profile($f[0]) : undef;
        ok($p && abs($p->{duration_nanos} - 1e9) < 0.1e9,
           'with the reloaded period');
        my $l = $p && @{ $p->{sample} }
                ? sample_labels($p, $p->{sample}[0]) : {};
        is($l->{'thread id'}{num}, $new, "its samples are of pid $new");
    }

    ok($t->stop, 'nginx quits');
}


# A missing dump dir is made by nginx, for the workers' user.
{
    my $t = ProfNginx->new(workers => 1, no_dump_dir => 1);
    my $dir = $t->prefix . '/made-by-nginx';
    $t->write_config($HTTP =~ s/%%DUMP%%/%%PREFIX%%\/made-by-nginx/r);
    ok(!-e $dir, 'the dump dir does not exist before start');

    $t->run;
    my ($worker) = $t->worker_pids;
    # Its profiler process starts after the worker changed its user.
    ProfWait::wait_until(sub { profiler_ready($worker) }, 10);
    my $uid = proc_uid($worker);

    my @st = stat($dir);
    ok(@st && -d _, 'nginx made the dump dir');
    is($st[4], $uid, "owned by the workers' user (uid $uid)");
    is($st[2] & 07777, 0700, 'with mode 0700');

    ok($t->stop, 'nginx quits');
    my @f = profile_files($dir, qr/\.pprof$/);
    is_deeply([ map { s{.*/}{}r } @f ], [ "nginx.$worker.0.pprof" ],
              'the worker wrote its profile there');
}

done_testing();
