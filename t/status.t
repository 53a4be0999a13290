#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# profiling_status: one location answers for every worker (pid, whether it
# profiles, its counters, its last upload and error), from memory the
# workers share; JSON by default, text with ?format=text. A failing agent
# shows with its cause within a period; a reload's exited workers go.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use ProfHTTP;
use ProfNginx;
use ProfProc;
use ProfWait;
use ProfWorkload;

my $refused = ProfHTTP::free_port();    # nobody listens there

my $t = ProfNginx->new(workers => 2);
$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;
    profiling_upload_timeout 500ms;
    profiling_agent_url http://127.0.0.1:$refused;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 2ms; }
        location = /status { profiling_status; }
    }
EOF
$t->run;
my $started = time();

sub status {
    my ($query) = @_;
    my $r = $t->get('/status' . ($query // ''));
    return $r unless $r->{status} == 200 && !defined $query;
    return { %$r, json => decode_json($r->{content}) };
}

sub workers_of {
    my ($s) = @_;
    return { map { $_->{pid} => $_ } @{ $s->{json}{workers} } };
}

my @pids = sort { $a <=> $b } $t->worker_pids;
is(scalar @pids, 2, 'two workers');

my $s;
ok(wait_until(sub {
        $s = status();
        my $w = workers_of($s);
        return @pids == grep { $w->{$_} && $w->{$_}{running} } @pids;
    }, 10), 'both workers are on the page, profiling')
    or diag(explain($s->{json}));
like($s->{headers}{'content-type'}, qr{^application/json}, 'as JSON');

my $w = workers_of($s);
for my $pid (@pids) {
    my $c = $w->{$pid}{counters};
    ok($c->{unwind_table_bytes} > 100_000 && $c->{unwind_objects} > 3,
       "worker $pid: its unwind tables ($c->{unwind_objects} objects, "
       . "$c->{unwind_table_bytes} bytes)");
    ok(exists $c->{$_}, "worker $pid: $_") for
        qw(cpu_samples dropped_samples ring_full wall_dropped
           profiles_exported uploads_succeeded uploads_failed_connect
           uploads_failed_timeout uploads_failed_5xx);
    ok(exists $w->{$pid}{handler_ns}{p99}, "worker $pid: handler p99");
    ok(exists $w->{$pid}{handler_wall_ns}{p99},
       "worker $pid: the handler's wall time p99");
    ok(exists $c->{$_}, "worker $pid: $_")
        for qw(handler_preempted handler_preempted_ns);
}
is($s->{json}{totals}{workers}, 2, 'totals: two workers');

# Some CPU for the samples, then the first profile fails to upload.
ProfWorkload::drive($t, '/burn', 1, 0);

my ($fail_at, $fail);
ok(wait_until(sub {
        $s = status();
        $w = workers_of($s);
        my @failed = grep {
            ($w->{$_}{last_upload}{outcome} // '') =~ /^failed:/
                && $w->{$_}{counters}{uploads_failed_connect} > 0
        } @pids;
        return 0 unless @failed == @pids;
        $fail_at = time();
        $fail = $w->{$pids[0]};
        return 1;
    }, 10), 'the failing agent shows on the page');
diag(sprintf('visible %.1f s after the start (period 2 s)',
             ($fail_at // time()) - $started));
ok($fail_at && $fail_at - $started < 2 + 0.5 + 1 + 1,
   'within a period, the upload time and a second of publishing');
like($fail->{last_upload}{outcome}, qr/connect/i,
     "with its cause: $fail->{last_upload}{outcome}");
like($fail->{last_error}{message} // '', qr/127\.0\.0\.1:$refused/,
     'and the last error names the agent');
ok($s->{json}{totals}{counters}{uploads_failed_connect} >= 2,
   'totals add the workers up');
ok($s->{json}{totals}{counters}{cpu_samples}
   >= $w->{$pids[0]}{counters}{cpu_samples}
      + $w->{$pids[1]}{counters}{cpu_samples},
   'cpu_samples too');

# What each profiler process holds: its PSS as the kernel says, its
# queue against the ceiling (the default, 8m), its tables and symbols.
for my $pid (@pids) {
    my $m = $w->{$pid}{memory};
    my $profiler = $w->{$pid}{profiler_pid};
    my $kb = ProfProc::pss_kb($profiler) // 0;
    ok($m->{pss} > 0 && $m->{pss} < 4 * $kb * 1024
       && $m->{pss} * 4 > $kb * 1024,
       "worker $pid: its profiler's PSS, $m->{pss} bytes ($kb kB now)");
    is($m->{queue_limit}, 8 * 1024 * 1024, "worker $pid: the queue's ceiling");
    ok($m->{queued} > 0 && $m->{queued} <= $m->{queue_limit},
       "worker $pid: queued $m->{queued} bytes");
    ok($m->{tables} > 0, "worker $pid: tables, $m->{tables} bytes");
    ok($m->{functions} > 1000 && $m->{function_bytes} > 0,
       "worker $pid: $m->{functions} functions named");
    ok(exists $m->{$_}, "worker $pid: memory $_")
        for qw(heap dwarf_open symbol_store symbol_store_images
               symbol_store_mapped);
}

my $text = $t->get('/status?format=text');
like($text->{headers}{'content-type'}, qr{^text/plain}, '?format=text');
for my $pid (@pids) {
    like($text->{content}, qr/^worker $pid: profiling/m,
         "names worker $pid");
}
like($text->{content}, qr/ uploads_failed_connect=[1-9]/,
     'with the counters');
like($text->{content}, qr/last upload: \S+ failed: /, 'and the outcome');
like($text->{content}, qr/^  memory: pss [1-9]\d*, heap \d+, queued [1-9]\d* of 8388608, /m,
     'and what the profiler process holds');

my $post = $t->http->post("http://127.0.0.1:" . $t->port . "/status");
is($post->{status}, 405, 'POST is not allowed');

# A reload: new workers claim slots, the old ones' go when they exit.
$t->reload;
my @new;
ok(wait_until(sub {
        @new = sort { $a <=> $b } $t->worker_pids;
        return @new == 2 && !grep { my $n = $_; grep { $_ == $n } @pids }
                                  @new;
    }, 20), 'reloaded: two new workers');
ok(wait_until(sub {
        $s = status();
        my @shown = sort { $a <=> $b } keys %{ workers_of($s) };
        return "@shown" eq "@new";
    }, 10), 'the page shows the new workers only')
    or diag(explain([ keys %{ workers_of($s) } ], \@new, \@pids));

$t->reload;
my @third;
ok(wait_until(sub {
        @third = sort { $a <=> $b } $t->worker_pids;
        return @third == 2 && !grep { my $n = $_; grep { $_ == $n } @new }
                                    @third;
    }, 20), 'reloaded again');
ok(wait_until(sub {
        $s = status();
        my @shown = sort { $a <=> $b } keys %{ workers_of($s) };
        return "@shown" eq "@third";
    }, 10), 'and again, only the live workers');

ok($t->stop, 'stopped');
unlike($t->error_log, qr/\[(alert|emerg|crit)\]/, 'no alert in the log');

# The line for bug reports: once, from one worker, when the agent's first
# answer is known.
my @lines = grep { /profiling: ngx_http_profiling_module / } split /\n/, $t->error_log;
ok(@lines >= 1, 'the identification line is logged');
like($lines[0] // '', qr/\[notice\].*ngx_http_profiling_module \S+ \(nginx \S+, \S+\): unwind tables for \d+ objects .*symbols: nginx [^;]+; libraries: \d+ with .*agent http:\/\/127\.0\.0\.1:$refused: not reachable \(failed: /,
     'with the version, the tables, the symbols and the agent');

done_testing();
