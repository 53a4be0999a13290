#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# A worker busy in a known function writes, every period, a pprof profile
# that any pprof reader can open and that shows where its CPU went.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);
use ProfFiles qw(slurp);
use ProfNginx;
use ProfPprof;
use ProfProc;
use ProfWorkload;

my $PERIOD_NS = 2_000_000_000;

my $t = ProfNginx->new(workers => 1);
$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;

    # When the worker had each request.
    log_format worker_side '$msec $request_time';

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn {
            profiling_burn 20ms;
            access_log %%PREFIX%%/requests.log worker_side;
        }
    }
EOF
$t->run;

my ($worker) = $t->worker_pids;
ok($worker, "a worker runs (pid $worker)");

# The worker burns CPU in ngx_http_profiling_burn_spin for the whole first
# period and a bit more.
my $served = ProfWorkload::drive($t, '/burn', 2.5, 0);
ok($served > 20, "the worker served $served requests burning 20ms each");
# (Read once it served: a worker just forked may not have changed its user
# yet.)
my $worker_uid = proc_uid($worker);

my $name = "nginx.$worker.0.pprof";
my ($file) = $t->wait_for_files(qr/^\Q$name\E$/, 1, 10);
ok($file, "the first profile is written as $name") or do {
    diag($t->error_log);
    done_testing();
    exit(1);
};
my $now_ns = time() * 1e9;

# How it is written.

my @st = stat($file);
is($st[2] & 07777, 0600, 'the profile file has mode 0600');
is($st[4], $worker_uid, "the profile file is owned by the worker's user "
   . "(uid $worker_uid)");

opendir(my $dh, $t->dump_dir) or die;
my @tmp = grep { /\.tmp$/ } readdir($dh);
closedir($dh);
is_deeply(\@tmp, [], 'no temporary file is left visible in the dump dir');

# What it holds, as protoc decodes it.

my $p = decode_profile($file);

is_deeply([ sample_types($p) ],
          [ 'cpu-time/nanoseconds', 'cpu-samples/count',
            'wall-time/nanoseconds', 'wall-samples/count',
            'off-cpu-time/nanoseconds' ],
          'sample types: cpu-time, cpu-samples, wall-time, wall-samples, '
          . 'off-cpu-time');
is(pstr($p, $p->{period_type}{type}) . '/' . pstr($p, $p->{period_type}{unit}),
   'cpu-time/nanoseconds', 'period type is cpu-time/nanoseconds');
is($p->{period}, 10_000_000, 'period is the 10ms sampling interval');

# The closing timer runs on nginx's event loop, after a burn under way
# (20 ms of CPU, longer in wall time on a busy machine, where the worker
# also waits for a CPU to wake up): within 20%.
my $dur = $p->{duration_nanos};
ok(abs($dur - $PERIOD_NS) <= 400_000_000,
   "duration_nanos $dur is the 2s period within 400ms");

my $start = $p->{time_nanos};
ok($start <= $now_ns && $now_ns - $start < 10e9,
   sprintf('time_nanos is the start of the period, %.2fs before now',
           ($now_ns - $start) / 1e9));
ok($start + $dur <= $now_ns + 1e9, 'and the period ended before now');

ok(@{ $p->{sample} } > 0, scalar(@{ $p->{sample} }) . ' samples');

my ($bad_id, $bad_name) = (0, 0);
for my $s (@{ $p->{sample} }) {
    my $l = sample_labels($p, $s);
    $bad_id++ unless $l->{'thread id'} && $l->{'thread id'}{num} == $worker;
    $bad_name++ unless $l->{'thread name'}
                       && ($l->{'thread name'}{str} // '') eq 'nginx';
}
is($bad_id, 0, "every sample has the label \"thread id\" = $worker");
is($bad_name, 0, 'every sample has the label "thread name" = "nginx"');

ok(@{ $p->{mapping} } > 0, scalar(@{ $p->{mapping} }) . ' mappings');
for my $m (@{ $p->{mapping} }) {
    my $fname = pstr($p, $m->{filename});
    my $bid = pstr($p, $m->{build_id});
    ok(length($fname), "mapping $m->{id} has a file name ($fname)");
    like($bid, qr/^[0-9a-f]{40}$/, "mapping $m->{id} ($fname) has a GNU "
         . 'build id');
}

# Code that ran in the vdso (clock_gettime, called by the burn loop) is
# named: the vdso has a .dynsym like any shared object.
my %vdso = map { $_->{id} => 1 }
           grep { pstr($p, $_->{filename}) eq '[vdso]' } @{ $p->{mapping} };
my @vdso_unnamed = grep { $vdso{ $_->{mapping_id} } && !@{ $_->{line} } }
                   @{ $p->{location} };
is(scalar(@vdso_unnamed), 0, 'locations in the vdso have function names')
    or diag('unnamed vdso locations: '
            . join(' ', map { sprintf('0x%x', $_->{address}) }
                        @vdso_unnamed));

my $loc_ok = grep { $_->{mapping_id} && @{ $_->{line} } } @{ $p->{location} };
ok($loc_ok > 0, 'locations have mappings and functions');

# Where the CPU went.

my $cpu = profile_total($p, 'cpu-time');
my $leaves = leaf_totals($p, 'cpu-time');
my ($top) = sort { $leaves->{$b} <=> $leaves->{$a} } keys %$leaves;
diag(sprintf('cpu-time %.0fms; by leaf: %s', $cpu / 1e6,
             join(', ', map { sprintf('%s %.0fms', $_, $leaves->{$_} / 1e6) }
                        sort { $leaves->{$b} <=> $leaves->{$a} }
                        keys %$leaves)));

ok($cpu >= 500_000_000, sprintf('cpu-time %.0fms: the worker burned for '
                                . 'most of the period', $cpu / 1e6));
is($top, 'ngx_http_profiling_burn_spin',
   'ngx_http_profiling_burn_spin is the top cpu-time leaf function');
my $share = $cpu ? ($leaves->{ngx_http_profiling_burn_spin} // 0) / $cpu : 0;
ok($share > 0.8, sprintf('it has %.1f%% of the cpu-time (more than 80%%)',
                         100 * $share));

# One thread: the time a function spends on the CPU is part of the wall
# time spent in it, and the event wait (the idle stack, leaf epoll_wait)
# gets only the wall time the worker spent waiting.
my $wall_leaves = leaf_totals($p, 'wall-time');
my $wall = profile_total($p, 'wall-time');
my $off_cpu = profile_total($p, 'off-cpu-time');
diag(sprintf('wall-time %.0fms, off-cpu-time %.0fms; wall by leaf: %s',
             $wall / 1e6, $off_cpu / 1e6,
             join(', ', map { sprintf('%s %.0fms', $_,
                                      $wall_leaves->{$_} / 1e6) }
                        sort { $wall_leaves->{$b} <=> $wall_leaves->{$a} }
                        keys %$wall_leaves)));

my $burn_cpu = $leaves->{ngx_http_profiling_burn_spin} // 0;
my $burn_wall = $wall_leaves->{ngx_http_profiling_burn_spin} // 0;
ok($burn_wall >= 0.9 * $burn_cpu,
   sprintf('wall-time in ngx_http_profiling_burn_spin (%.0fms) is not '
           . 'less than its cpu-time (%.0fms)', $burn_wall / 1e6,
           $burn_cpu / 1e6));

# The worker waits only while it has no request: outside the times its
# access log gives each, from the request's first byte read to the end of
# its burn (t/burn moves nginx's clock on then), so a woken worker's wait
# for a CPU on a busy machine, still in its event wait, and a client slow
# to read the answer are outside them too (slack for the log's
# millisecond resolution and the edges of each request: 40 ms and 2% of
# the period).
my @had;
for (split /\n/, slurp($t->prefix . '/requests.log') // '') {
    push @had, [ $1 - $2, $1 ] if /^(\d+\.\d+) (\d+\.\d+)$/;
}
my $idle_wall = $wall_leaves->{epoll_wait} // 0;
my $from = $p->{time_nanos} / 1e9;
my $busy = ProfWorkload::covered(\@had, $from, $from + $dur / 1e9);
my $no_request_ns = $dur - $busy * 1e9;
ok(@had > 20 && $idle_wall <= $no_request_ns + 40_000_000 + 0.02 * $dur,
   sprintf('wall-time at epoll_wait (%.0fms) is not more than the time '
           . 'the worker had no request (%.0fms, %d requests logged)',
           $idle_wall / 1e6, $no_request_ns / 1e6, scalar(@had)));

# Any pprof reader opens it.

my $top_out = `go tool pprof -top '$file' 2>&1`;
is($? >> 8, 0, 'go tool pprof -top reads the profile') or diag($top_out);
like($top_out, qr/ngx_http_profiling_burn_spin/,
     'and shows ngx_http_profiling_burn_spin');

ok($t->stop, 'nginx quits');


# A service name with a space and a slash still makes one file name in the
# dump dir.

my $s = ProfNginx->new(workers => 1);
$s->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_service "my svc/1";

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF
$s->run;
($worker) = $s->worker_pids;
$s->get('/');
ok($s->stop, 'nginx with profiling_service "my svc/1" quits');

my @files = ProfPprof::profile_files($s->dump_dir, qr/^[^.]/);
is_deeply([ map { s{.*/}{}r } @files ], [ "my_svc_1.$worker.0.pprof" ],
          'its profile is my_svc_1.<pid>.0.pprof: the space and the slash '
          . 'became underscores');
ok(!-e $s->dump_dir . '/my svc', 'no directory was made of the name');

done_testing();
