#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# accept_mutex on, two workers: while one worker is busy in a request's
# handler for 2 s, new connections are served by the other one, as quickly
# with the profiler as without it (nginx without the module, measured in
# the same run).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use List::Util qw(max);
use Test::More;
use Time::HiRes qw(time);

use ProfHTTP;
use ProfNginx;
use ProfProc;
use ProfWait;

my $BUSY_MS = 2000;
my $FAST_REQUESTS = 8;

my $HTTP = <<"EOF";
    server {
        listen 127.0.0.1:%%PORT%%;
        location /busy { profiling_burn ${BUSY_MS}ms; }
        location /fast { return 200 "fast\\n"; }
    }
EOF

# Seconds from connect to the end of the response of a new connection to
# /fast; undef when it was not a 200.
sub fast_request {
    my ($t) = @_;
    my $start = time();
    my ($status) = ProfHTTP::raw_request($t->port,
        "GET /fast HTTP/1.0\r\nHost: localhost\r\n\r\n", 10);
    return ($status // 0) == 200 ? time() - $start : undef;
}

# Starts a /busy request, waits until a worker spins in it, then makes
# $FAST_REQUESTS new connections to /fast, one at a time, before the busy
# request ends. Returns the latencies (seconds) of the fast requests.
sub measure {
    my ($t, $name) = @_;
    my @workers = $t->worker_pids;
    my %cpu0 = map { $_ => thread_cpu_ns($_) } @workers;

    # a few requests first: both workers have been through their loop
    fast_request($t) for 1 .. 4;

    my $busy = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $t->port, Proto => 'tcp')
        or die "connect: $!";
    syswrite($busy, "GET /busy HTTP/1.0\r\nHost: localhost\r\n\r\n");
    my $busy_start = time();

    my $spinning;
    wait_until(sub {
        ($spinning) = grep { thread_cpu_ns($_) - $cpu0{$_} > 50e6 } @workers;
        return $spinning;
    }, 5, 0.005);
    ok($spinning, "$name: a worker (" . ($spinning // 'none')
       . ') spins in the busy request');

    my @lat;
    while (@lat < $FAST_REQUESTS
           && time() - $busy_start < $BUSY_MS / 1000 - 0.5)
    {
        push @lat, fast_request($t);
        ProfWait::poll_sleep(0.05);
    }

    my $answer = '';
    $busy->blocking(1);
    local $SIG{ALRM} = sub { die "busy request timed out\n" };
    alarm(10);
    1 while sysread($busy, $answer, 4096, length $answer);
    alarm(0);
    like($answer, qr{^HTTP/1\.[01] 200}, "$name: the busy request is served");
    my $busy_s = time() - $busy_start;

    my @ok = grep { defined } @lat;
    ok(@lat >= 4 && @ok == @lat,
       "$name: " . scalar(@ok) . ' of ' . scalar(@lat) . ' fast requests '
       . 'served while the other worker was busy');
    ok($busy_s >= $BUSY_MS / 1000 - 0.1,
       sprintf('%s: all of them before the busy request ended (%.2fs)',
               $name, $busy_s));
    return map { $_ // 10 } @lat;
}

sub run_case {
    my ($name, @modules) = @_;
    my $t = ProfNginx->new(workers => 2, modules => \@modules);
    my $http = $HTTP;
    $http = "    profiling on;\n    profiling_dump_dir %%DUMP%%;\n"
            . "    profiling_period 1s;\n$http"
        if grep { $_ eq 'ngx_http_profiling_module' } @modules;
    $t->write_config($http);
    $t->add_events_directives('accept_mutex on;');
    $t->run;
    my @lat = measure($t, $name);
    ok($t->stop, "$name: nginx quits");
    return @lat;
}

my @without = run_case('without the module',
                       'ngx_http_profiling_burn_module');
my @with = run_case('with the profiler',
                    'ngx_http_profiling_module',
                    'ngx_http_profiling_burn_module');

# The first connection after the busy one may wait for the idle worker to
# try the accept mutex again (accept_mutex_delay, 500ms); the others find
# it holding the mutex.
# (No latency at all counts as 10 s: the test already failed.)
my ($first_without, @rest_without) = @without ? @without : (10);
my ($first_with, @rest_with) = @with ? @with : (10);
my $max_without = @rest_without ? max(@rest_without) : 10;
my $max_with = @rest_with ? max(@rest_with) : 10;

ok($first_with <= max($first_without, 0.5) + 0.150,
   sprintf('the first fast request takes %.0fms with the profiler, %.0fms '
           . 'without it: within 150ms of that, or of accept_mutex_delay '
           . '(500ms)', 1000 * $first_with, 1000 * $first_without));
ok($max_with <= $max_without + 0.150,
   sprintf('the slowest of the next ones takes %.0fms with the profiler, '
           . '%.0fms without it: within 150ms', 1000 * $max_with,
           1000 * $max_without));
diag(sprintf('latencies (ms) with the profiler: %s; without: %s',
             join(' ', map { sprintf('%.0f', 1000 * $_) } @with),
             join(' ', map { sprintf('%.0f', 1000 * $_) } @without)));

done_testing();
