#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# An agent that accepts connections and never answers, uploads bounded at
# 60 s: a fast shutdown (SIGTERM, "nginx -s stop") still ends nginx within
# a second, without the master killing a worker, and the workers leave
# their last profile in the dump dir; after six reloads 0.5 s apart no old
# worker is left 3 s after the last one.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);

use ProfLog qw(log_lines);
use ProfNginx;
use ProfPprof;
use ProfProc;
use ProfServers;
use ProfWait;

my $HTTP = <<'EOF';
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;
    profiling_upload_timeout 60s;
    profiling_agent_url http://127.0.0.1:%%AGENT%%;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
        location /burn { profiling_burn 5ms; }
    }
EOF

sub start_nginx {
    my ($agent) = @_;
    my $t = ProfNginx->new(workers => 2);
    $t->write_config($HTTP =~ s/%%AGENT%%/$agent->{port}/r,
                     main => $t->core_main);
    $t->run;
    return $t;
}

# The end of a profile (realtime, seconds).
sub profile_end {
    my ($p) = @_;
    return ($p->{time_nanos} + $p->{duration_nanos}) / 1e9;
}


subtest 'fast shutdown while uploads hang' => sub {
    my $agent = ProfServers::start_silent_server();
    my $t = start_nginx($agent);
    my @workers = $t->worker_pids;
    my $master = $t->master_pid;

    # Work for both workers, until each has an upload in flight.
    my $inflight = wait_until(sub {
        $t->get('/burn');
        return $agent->{accepted}->() >= 2;
    }, 10);
    ok($inflight, 'the workers connected to the agent: uploads hang');

    my $signalled = time();
    kill('TERM', $master);
    my $gone = wait_until(sub {
        !grep { process_alive($_) } $master, @workers
    }, 10, 0.005);
    my $took = time() - $signalled;
    ok($gone && $took <= 1.0,
       sprintf('SIGTERM: the master and its workers exit within 1s (%.3fs)',
               $took));

    my @killed = log_lines($t->error_log,
                           qr/sending signal 9|exited on signal 9/);
    ok(!@killed, 'no worker was killed with SIGKILL')
        or diag(join("\n", map { "  $_" } @killed));
    $t->ok_no_worker_died('SIGTERM');
    # Logged by the profiler processes as they exit, within 300 ms of
    # their workers.
    my @stopped = $t->wait_for_log(qr/profiling: stopped:/, 2, 2);
    is(scalar(@stopped), 2, 'each worker logs its counters as it stops');

    for my $w (@workers) {
        my @f = profile_files($t->dump_dir, qr/^nginx\.$w\.\d+\.pprof$/);
        my $last = @f ? eval { decode_profile($f[-1]) } : undef;
        ok($last && profile_end($last) >= $signalled - 0.005,
           sprintf('worker %d wrote its last profile at exit (%d files, '
                   . 'the last ends %.3fs after the signal)', $w,
                   scalar(@f), $last ? profile_end($last) - $signalled
                                     : -1));
    }

    $t->kill_all if $t->master_pid;
    ProfServers::stop_silent_server($agent);
};


subtest 'six reloads 0.5s apart while uploads hang' => sub {
    my $agent = ProfServers::start_silent_server();
    my $t = start_nginx($agent);
    my $master = $t->master_pid;

    # Every worker ever seen, until the last reload.
    my %seen;
    my $watch = sub {
        my $kids = ProfNginx::nginx_children($master);
        $seen{$_} = 1 for grep { $kids->{$_} =~ /worker process/ }
                          keys %$kids;
        return $kids;
    };
    $watch->();

    wait_until(sub { $t->get('/burn'); $agent->{accepted}->() >= 1 }, 10);

    # The workers of the generations before the last reload are "old".
    my (%old, $last_reload);
    for my $i (1 .. 6) {
        $watch->();
        %old = %seen;
        $last_reload = time();
        $t->reload;
        my $until = $last_reload + 0.5;
        while (time() < $until) {
            $watch->();
            $t->get('/burn');
            ProfWait::poll_sleep(0.05);
        }
    }
    ok($agent->{accepted}->() >= 2,
       'workers connected to the agent meanwhile ('
       . $agent->{accepted}->() . ' uploads hang)');

    my $kids;
    my $clean = wait_until(sub {
        $kids = $watch->();
        return !grep { $old{$_} || /shutting down/ }
               map { $kids->{$_} =~ /shutting down/ ? 'shutting down' : $_ }
               keys %$kids;
    }, $last_reload + 3 - time());

    my @left = grep { $old{$_} || $kids->{$_} =~ /shutting down/ }
               keys %$kids;
    ok($clean, sprintf('3s after the last reload no old worker is left '
                       . '(%d seen, %d left)', scalar(keys %old),
                       scalar(@left)))
        or diag('  ' . join("\n  ", map { "$_: $kids->{$_}" } sort @left));

    my @new = grep { $kids->{$_} =~ /worker process$/ } keys %$kids;
    is(scalar(@new), 2, 'two workers of the last configuration run');
    is($t->get('/')->{status}, 204, 'nginx serves');
    $t->ok_no_worker_died('reloads');
    my @killed = log_lines($t->error_log,
                           qr/sending signal 9|exited on signal 9/);
    ok(!@killed, 'no worker was killed with SIGKILL');

    kill('TERM', $master);
    wait_until(sub { !process_alive($master) }, 5);
    $t->kill_all if process_alive($master);
    ProfServers::stop_silent_server($agent);
};

done_testing();
