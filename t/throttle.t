#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# profiling_max_cpu: with profiling_interval 1ms over deep Lua stacks (the
# costliest samples there are: 240 interpreted Lua frames and the native
# ones under them, profiling_max_frames 512), the profiler's own share of
# the worker's CPU (the handler's time in the worker plus its profiler
# process's CPU but for naming new code, against the worker's CPU, the
# median of seven seconds once settled): measured without a ceiling; with a
# ceiling of a third of what it took without one, lower than without:
# the interval widened (a NOTICE line
# says so, the status page shows the interval and the time throttled),
# and the profiles' cpu-time stays within 5% of the CPU time /proc gives
# the worker, each sample weighing the interval it was taken at. A bad
# value fails nginx -t naming it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time);
use ProfEnv;
use ProfNginx;
use ProfPprof;
use ProfProc qw(:DEFAULT process_cpu_ns);
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

my $HTTP = <<'EOF';
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 60s;
    profiling_interval 1ms;
    profiling_max_frames 512;
    %%MAX_CPU%%

    init_by_lua_block {
        local clock = os.clock
        function deep(n, stop)
            if n > 0 then
                return deep(n - 1, stop) + 1
            end
            local x = 0
            while clock() < stop do x = x + math.sin(x) end
            return x
        end
        -- interpreted: every call a frame of the Lua stack
        jit.off(deep)
    }

    server {
        listen 127.0.0.1:%%PORT%%;
        location /deep {
            content_by_lua_block {
                ngx.say(deep(240, os.clock() + 0.03))
            }
        }
        location /status { profiling_status; }
    }
EOF

sub counters {
    my ($t) = @_;
    my $s = decode_json($t->get('/status')->{content});
    return $s->{workers}[0]{counters};
}

# Runs the load: (the profiler's share over the settled part, the worker's
# CPU, the profiles' cpu-time, the instance).
sub run_load {
    my ($max_cpu) = @_;
    (my $http = $HTTP) =~ s/%%MAX_CPU%%/$max_cpu/;
    my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
    $t->write_config($http);
    $t->run;
    my ($worker) = $t->worker_pids;

    # Settling: the symbols read (naming_cpu_ns still for two seconds; a
    # library's inline tables take seconds under a sanitizer), the
    # interval found.
    ProfWorkload::drive($t, '/deep', 3, 0.005);
    my ($naming, $still) = (-1, 0);
    for (1 .. 20) {
        my $n = counters($t)->{naming_cpu_ns};
        $still = ($n == $naming) ? $still + 1 : 0;
        $naming = $n;
        last if $still >= 2;
        ProfWorkload::drive($t, '/deep', 1, 0.005);
    }

    # The share second by second, the median of seven: the handler's time
    # as the status page counts it (as batches arrive), the profiler
    # process's CPU from /proc but for what naming new code took (the
    # status page's naming_cpu_ns: the ceiling leaves it out), against
    # the worker's CPU from /proc, all read at the same moments. A second
    # that the machine took from the test, or a naming that spans a
    # reading, is one of seven the median leaves out.
    my $profiler = profiler_of($worker);
    my @shares;
    my $read = sub {
        my $c = counters($t);
        return ($c->{handler_total_ns} - $c->{naming_cpu_ns}
                    + process_cpu_ns($profiler),
                thread_cpu_ns($worker, $worker));
    };
    my ($o0, $w0) = $read->();
    for (1 .. 7) {
        ProfWorkload::drive($t, '/deep', 1, 0.005);
        my ($o1, $w1) = $read->();
        push @shares, ($o1 - $o0) / ($w1 - $w0) if $w1 > $w0;
        ($o0, $w0) = ($o1, $w1);
    }
    @shares = sort { $a <=> $b } @shares;
    my $share = @shares ? $shares[$#shares / 2] : 1;
    diag(sprintf('%s: the share each second: %s', $max_cpu,
                 join(' ', map { sprintf('%.3f%%', 100 * $_) } @shares)));
    my $c1 = counters($t);

    my $cpu_ns = thread_cpu_ns($worker, $worker);
    ok($t->stop, "nginx quits ($max_cpu)");

    my $profiled = 0;
    $profiled += profile_total(decode_profile($_), 'cpu-time')
        for profile_files($t->dump_dir, qr/^nginx\.$worker\.\d+\.pprof$/);

    return ($share, $cpu_ns, $profiled, $t, $c1);
}

my ($free) = run_load('profiling_max_cpu off;');
diag(sprintf('without a ceiling: the profiler took %.3f%% of the worker\'s '
             . 'CPU', 100 * $free));

# (No absolute bound: on a 2-core VM the share of the same load varies
# about twofold between runs; the same run's share without a ceiling is
# the baseline. Profiles close every 60 s, after the windows measured:
# a close's work, which no interval lowers, stays out of them, and what
# is measured is what the ceiling governs, the samples' cost.)

# A ceiling a third of what the load costs without one: the interval
# widens, the share falls, the profiles still hold the worker's CPU.
my $ceiling = sprintf('%.2f', 100 * $free / 3);
$ceiling = '0.01' if $ceiling < 0.01;
my ($share, $cpu_ns, $profiled, $t, $c) =
    run_load("profiling_max_cpu $ceiling%;");
ok($share < 0.85 * $free,
   sprintf('with profiling_max_cpu %s%%: the profiler took %.3f%%, less '
           . 'than without (%.3f%%)', $ceiling, 100 * $share, 100 * $free));
ok($c->{interval_ns} > 1_000_000,
   sprintf('the interval widened: %.1f ms', $c->{interval_ns} / 1e6));
ok($c->{throttled_ns} > 1e9, sprintf('throttled for %.1f s',
                                     $c->{throttled_ns} / 1e9));
ok($c->{handler_total_ns} > 0 && $c->{profiler_cpu_ns} > 0,
   'the handler\'s and the profiler process\'s time counted');

my @notice = ProfLog::log_lines($t->error_log,
    qr/\[notice\].*profiling: sampling every [\d.]+ ms instead of 1\.0 ms: the profiler used more than profiling_max_cpu \Q$ceiling\E% of the worker's CPU/);
ok(@notice >= 1, 'a NOTICE line when throttling starts')
    or diag($t->error_log);
like($t->error_log, qr/profiling: stopped:.* handler_total_ns=\d+ profiler_cpu_ns=\d+ interval_ns=\d+ throttled_ns=\d+/,
     'the exit line has the figures');

my $err = $cpu_ns ? ($profiled - $cpu_ns) / $cpu_ns : 1;
ok(abs($err) <= 0.05,
   sprintf('cpu-time of the profiles (%.0fms) is the worker\'s CPU time '
           . '(%.0fms) within 5%% (%+.1f%%)', $profiled / 1e6,
           $cpu_ns / 1e6, 100 * $err));

# Bad values.
for my $bad ('0', '0%', '101%', 'two', '1.234%', '-1') {
    (my $http = $HTTP) =~ s/%%MAX_CPU%%/profiling_max_cpu $bad;/;
    my $b = ProfNginx->new(workers => 1, modules => \@MODULES);
    $b->write_config($http);
    my ($rc, $out) = $b->test_config;
    ok($rc != 0 && $out =~ /invalid value "\Q$bad\E" in "profiling_max_cpu" directive/,
       "profiling_max_cpu $bad fails nginx -t, naming it");
}

done_testing();
