#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Stalls of the event loop (profiling_stall_threshold): on Debian's nginx
# with the lua module, a worker held 300 ms by a CPU-bound Lua function,
# by a call blocked in the kernel (usleep through LuaJIT's FFI), by a Lua
# timer, by init_worker_by_lua and by an HTTP/2 stream's handler each gets
# one warn line: its length within 20% of the truth (the client's time
# for a request, the time the Lua code measured for the others), what it
# ran for (the request line and host, or the phase) and the code (the Lua
# function, or usleep's). The blocked worker's stack is read from outside
# (no signal): its one usleep(300 ms) is not cut short. Fast requests
# between them get none. A burst of stalls is rate-limited (10 lines a
# minute), every one counted on the status page, with the longest and the
# loop's turns. The samples taken in a stall carry the stall_ms label in
# the profiles (protoc-decoded). "off" reports none; a bad value fails
# nginx -t naming it. A worker that may not be read from outside (not
# dumpable) says so once, and its stack is asked for with the signal.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time);
use ProfEnv;
use ProfHTTP;
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

# (With the lines a minute passed, the next says how many were not; a
# stall that no sample past the threshold caught is told by one before.)
my $STALL_RE = qr/\[warn\].*profiling: a stall of (\d+) ms in worker \d+(?: \(and \d+ more not logged since the last line\))?(?:, \d+ ms of it on CPU)?, in (.*); code(?: \(sampled before the threshold\))?: (.*)$/;
# How much of a stall the worker was on CPU (its samples' CPU).
my $ON_CPU_RE = qr/profiling: a stall of \d+ ms in worker [^,]+, (\d+) ms of it on CPU, in /;

# The Lua code: a CPU-bound spin, a blocked usleep, both timed by Lua.
my $HTTP = <<'EOF';
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;
    profiling_stall_threshold 100ms;

    lua_shared_dict stall_times 1m;

    init_worker_by_lua_block {
        local t0 = ngx.now()
        ngx.update_time()
        local start = os.clock()
        local function init_spin()
            while os.clock() - start < 0.3 do end
        end
        init_spin()
    }

    init_by_lua_block {
        local ffi = require "ffi"
        ffi.cdef[[int usleep(unsigned int usec);]]
        function spin_cpu(seconds)
            local stop = os.clock() + seconds
            local x = 0
            while os.clock() < stop do x = x + 1 end
            return x
        end
        -- One sleep: its return code (-1 when a signal ended it early,
        -- EINTR) and the time it took.
        function block_usleep(seconds)
            ngx.update_time()
            local start = ngx.now()
            local rc = ffi.C.usleep(seconds * 1000000)
            ngx.update_time()
            return rc, ngx.now() - start
        end
    }

    server {
        listen 127.0.0.1:%%PORT%%;
        listen 127.0.0.1:%%H2PORT%% http2;
        server_name stalls.example;

        location /cpu {
            content_by_lua_block {
                spin_cpu(tonumber(ngx.var.arg_ms or 300) / 1000)
                ngx.say("ok")
            }
        }

        location /block {
            content_by_lua_block {
                local rc, slept = block_usleep(0.3)
                ngx.say(rc, " ", slept)
            }
        }

        location /timer {
            content_by_lua_block {
                ngx.timer.at(0, function()
                    ngx.update_time()
                    local t0 = ngx.now()
                    local function timer_spin()
                        local stop = os.clock() + 0.3
                        while os.clock() < stop do end
                    end
                    timer_spin()
                    ngx.update_time()
                    ngx.shared.stall_times:set("timer", ngx.now() - t0)
                end)
                ngx.say("ok")
            }
        }

        location /timer_time {
            content_by_lua_block {
                ngx.say(ngx.shared.stall_times:get("timer") or "")
            }
        }

        location /fast { return 200 "fast\n"; }
        location /status { profiling_status; }
    }
EOF

my $h2port = ProfHTTP::free_port();
(my $http = $HTTP) =~ s/%%H2PORT%%/$h2port/g;

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
$t->write_config($http);
$t->run;

sub stall_lines { ProfLog::log_lines($t->error_log, $STALL_RE) }

sub timed_get {
    my ($path) = @_;
    my $start = time;
    my $r = $t->get($path);
    return ($r, time - $start);
}

sub within {
    my ($ms, $truth_s, $what) = @_;
    my $truth = $truth_s * 1000;
    ok(abs($ms - $truth) <= 0.2 * $truth,
       "$what: $ms ms, within 20% of $truth ms")
        or diag($t->error_log);
}

# The worker's start: init_worker_by_lua spun 300 ms of CPU.
{
    my @l = $t->wait_for_log($STALL_RE, 1, 15);
    my ($ms, $what, $code) = $l[0] =~ $STALL_RE;
    ok(defined $ms, 'a stall line for the worker\'s start') or diag($t->error_log);
    like($what // '', qr/the worker's start/, 'named as the worker\'s start');
    # Its code: what ran as the start passed the threshold, the spin; and
    # its truth: at least the 300 ms the Lua code spun. Under a sanitizer
    # the start before the Lua code may take most of the threshold (the
    # sample past it then in init_worker_by_lua's first line), and more.
    my $slow = ProfEnv::nginx_wrapped();
    like($code // '', $slow ? qr/\(init_worker_by_lua/
                            : qr/init_spin \(init_worker_by_lua/,
         'with its Lua function');
    # Its length: at least the spin. How much more is the machine's: on
    # a busy one the worker also waits for a CPU (the check failed at a
    # load average of 6); what the worker did is its CPU, which the line
    # says apart: the spin, and little more (the start before the Lua
    # code).
    my ($cpu) = ($l[0] // '') =~ $ON_CPU_RE;
    ok(($ms // 0) >= 290, "its length: $ms ms, at least the spin");
    ok(defined $cpu && $cpu >= 150 && $cpu <= ($slow ? 700 : 400)
       && $cpu <= ($ms // 0) + 50,
       "on CPU about the 300 ms it spun (" . ($cpu // '?') . " ms of "
       . ($ms // '?') . ')');
}

my $seen = () = stall_lines();

# Fast requests: none.
sub fast_requests {
    for (1 .. 20) {
        my $r = $t->get('/fast');
        die "fast: $r->{status}" unless $r->{status} == 200;
    }
}

# One stalling request: its line, its length, its code.
sub one_stall {
    my ($path, $code_re, $name, $cpu_ms) = @_;
    fast_requests();
    my ($r, $secs) = timed_get($path);
    is($r->{status}, 200, "$name: served");
    my @l = $t->wait_for_log($STALL_RE, $seen + 1, 15);
    is(scalar(@l), $seen + 1, "$name: one stall line") or diag($t->error_log);
    $seen = @l;
    my ($ms, $what, $code) = ($l[-1] // '') =~ $STALL_RE;
    (my $p = $path) =~ s/\?/\\?/g;
    like($what // '', qr{request: "GET $p HTTP/1\.1", server: stalls\.example, host: "127\.0\.0\.1:\d+", client: 127\.0\.0\.1},
         "$name: names its request");
    like($code // '', $code_re, "$name: names its code");
    within($ms // 0, $secs, "$name: its length against the client's");
    # On CPU: the CPU it spun, whatever its length (on a busy machine it
    # also waits for a CPU): the samples follow the worker's CPU clock,
    # each standing for the CPU since the one before, which may have been
    # used before the turn began (a few intervals either way).
    my ($cpu) = ($l[-1] // '') =~ $ON_CPU_RE;
    ok(defined $cpu && $cpu >= 0.5 * $cpu_ms && $cpu <= $ms + 50,
       "$name: on CPU about the $cpu_ms ms it spun ("
       . ($cpu // '?') . " ms of $ms)");
    fast_requests();
}

one_stall('/cpu?ms=300', qr/spin_cpu \(init_by_lua/, 'CPU-bound Lua', 300);

# Blocked in the kernel: one usleep(300 ms) through LuaJIT's FFI. No CPU
# time passes, so no CPU sample: the profiler process reads the worker's
# stack from outside while it sleeps, without the signal that would end
# the sleep early. Native frames only (LuaJIT's are not read from
# outside). What ran is named when a sample of the worker's own tagged
# the request (a fraction of an interval of CPU before the sleep: seldom),
# else the line says the event is not named.
{
    fast_requests();
    my ($r, $secs) = timed_get('/block');
    is($r->{status}, 200, 'blocked in usleep (FFI): served');
    my ($rc, $slept) = ($r->{content} // '') =~ /^(-?\d+) (\S+)/;
    is($rc, 0, 'blocked in usleep (FFI): the sleep returned 0, not cut '
               . 'short by a signal (EINTR)');
    ok(($slept // 0) >= 0.299 && $secs >= 0.3,
       sprintf('blocked in usleep (FFI): it slept %.3f s, the client '
               . 'waited %.3f s', $slept // 0, $secs));
    my @l = $t->wait_for_log($STALL_RE, $seen + 1, 15);
    is(scalar(@l), $seen + 1, 'blocked in usleep (FFI): one stall line')
        or diag($t->error_log);
    $seen = @l;
    my ($ms, $what, $code) = ($l[-1] // '') =~ $STALL_RE;
    like($what // '', qr{^(?:request: "GET /block HTTP/1\.1", server: stalls\.example, host: "127\.0\.0\.1:\d+", client: 127\.0\.0\.1|an event not named \(its stack was read while it was blocked\))$},
         'blocked in usleep (FFI): names its request, or says it is not '
         . 'named');
    like($code // '', qr/\bnanosleep < usleep\b/,
         'blocked in usleep (FFI): names the sleep\'s code');
    my ($cpu) = ($l[-1] // '') =~ $ON_CPU_RE;
    ok(defined $cpu && $cpu <= ($ms // 0) / 3,
       'blocked in usleep (FFI): little of it on CPU ('
       . ($cpu // '?') . " ms of " . ($ms // '?') . ')');
    within($ms // 0, $secs, 'blocked in usleep (FFI): its length against '
                            . 'the client\'s');
    # (the status page is written every second)
    ok(wait_until(sub {
           my $s = decode_json($t->get('/status')->{content});
           ($s->{workers}[0]{counters}{stacks_read} // 0) >= 1
       }, 5), 'blocked in usleep (FFI): its stack read from outside');
    fast_requests();
}

# A Lua timer: named as nginx's timers, its function, its time.
{
    my $r = $t->get('/timer');
    is($r->{status}, 200, 'timer: set');
    my @l = $t->wait_for_log($STALL_RE, $seen + 1, 15);
    is(scalar(@l), $seen + 1, 'timer: one stall line');
    $seen = @l;
    my ($ms, $what, $code) = ($l[-1] // '') =~ $STALL_RE;
    like($what // '', qr/a timer/, 'timer: named as a timer');
    like($code // '', qr/timer_spin \(content_by_lua/, 'timer: its function');
    my $truth;
    wait_until(sub { $truth = $t->get('/timer_time')->{content};
                     $truth =~ /\d/ }, 10);
    within($ms // 0, $truth, 'timer: its length against Lua\'s');
}

# An HTTP/2 stream.
{
    my $start = time;
    my @res = ProfHTTP::h2_requests($h2port,
                                    [ { path => '/cpu?ms=300&h2=1' } ], 20);
    my $secs = time - $start;
    is($res[0]{status}, 200, 'HTTP/2 stream: served');
    my @l = $t->wait_for_log($STALL_RE, $seen + 1, 15);
    is(scalar(@l), $seen + 1, 'HTTP/2 stream: one stall line');
    $seen = @l;
    my ($ms, $what, $code) = ($l[-1] // '') =~ $STALL_RE;
    like($what // '', qr{request: "GET /cpu\?ms=300&h2=1 HTTP/2\.0"},
         'HTTP/2 stream: names its request');
    like($code // '', qr/spin_cpu/, 'HTTP/2 stream: names its code');
    within($ms // 0, $secs, 'HTTP/2 stream: its length');
}

unlike(join("\n", stall_lines()), qr{/fast}, 'no fast request stalled');

# The samples in a stall carry its label; a profile closes every second.
{
    my $found = wait_until(sub {
        for my $f (ProfPprof::profile_files($t->dump_dir, qr/\.pprof$/)) {
            my $p = eval { ProfPprof::decode_profile($f) } or next;
            for my $s (@{ $p->{sample} }) {
                my $l = ProfPprof::sample_labels($p, $s);
                next unless $l->{stall_ms} && $l->{stall_ms}{num} >= 100;
                for my $loc (@{ $s->{location_id} }) {
                    return 1 if grep { $_->{name} eq 'spin_cpu' }
                                     ProfPprof::lua_frames_of($p, $loc);
                }
            }
        }
        return 0;
    }, 15, 0.5);
    ok($found, 'a sample of spin_cpu in a stall carries stall_ms >= 100');
}

# The rate limit: 12 more stalls at once, 10 lines a minute in all.
{
    my $before = $seen;
    $t->get('/cpu?ms=120') for 1 .. 12;
    my $status;
    wait_until(sub {
        $status = decode_json($t->get('/status')->{content});
        $status->{workers}[0]{loop}{stalls} >= $before + 12
    }, 15);
    my $loop = $status->{workers}[0]{loop};
    is($loop->{stalls}, $before + 12,
       'the status page counts every stall');
    is($loop->{stalls_logged}, 10, '10 of them logged in the minute');
    # The lines reach the log through the profiler process's main
    # thread, after the status page counts them.
    $t->wait_for_log($STALL_RE, 10, 10);
    is(scalar(stall_lines()), 10, '10 lines in the log');
    ok($loop->{longest} && $loop->{longest}{ms} >= 250
       && $loop->{longest}{line} =~ /a stall of/,
       'the longest stall on the status page');
    my $turns = 0;
    $turns += $_->{count} for @{ $loop->{turns} };
    ok($turns > 50 && (grep { defined $_->{le_us} } @{ $loop->{turns} }),
       "the loop's turns counted: $turns");
    is($loop->{stall_threshold_ms}, 100, 'the threshold');
    like($t->get('/status?format=text')->{content},
         qr/loop: \d+ stalls over 100 ms \(10 logged\), the longest/,
         'and on the text page');
}

$t->ok_no_worker_died('through the stalls');
$t->stop;

# off: none; a bad value fails nginx -t.
{
    (my $off = $http) =~ s/profiling_stall_threshold 100ms/profiling_stall_threshold off/;
    my $o = ProfNginx->new(workers => 1, modules => \@MODULES);
    $o->write_config($off);
    $o->run;
    $o->get('/cpu?ms=300');
    $o->wait_for_log(qr/profiling: sampling every/, 1, 10);
    my $status = decode_json($o->get('/status')->{content});
    is($status->{workers}[0]{loop}{stall_threshold_ms}, 0, 'off: not looked for');
    is(scalar(ProfLog::log_lines($o->error_log, $STALL_RE)), 0, 'off: no stall line');
    $o->stop;

    (my $bad = $http) =~ s/profiling_stall_threshold 100ms/profiling_stall_threshold never/;
    my $b = ProfNginx->new(workers => 1, modules => \@MODULES);
    $b->write_config($bad);
    my ($rc, $out) = $b->test_config;
    isnt($rc, 0, 'a bad threshold fails nginx -t');
    like($out, qr/invalid value "never" in "profiling_stall_threshold" directive/,
         'naming the directive and the value');
}

# A worker that may not be read from outside (not dumpable: here it makes
# itself so, PR_SET_DUMPABLE 0): said once, at notice; its stack is asked
# for with the signal, which ends the sleep early (before the threshold
# at times: no stall then).
{
    (my $nd = $http) =~ s/(init_worker_by_lua_block \{)/$1\n        ffi_prctl(4, 0)/;
    $nd =~ s/(function spin_cpu)/function ffi_prctl(option, value)
            ffi.cdef[[int prctl(int, unsigned long, unsigned long,
                                unsigned long, unsigned long);]]
            return ffi.C.prctl(option, value, 0, 0, 0)
        end
        $1/;
    my $u = ProfNginx->new(workers => 1, modules => \@MODULES);
    $u->write_config($nd);
    $u->run;
    my $re = qr/\[notice\].*profiling: the profiler process may not read worker \d+'s stack \((?:Permission denied|Operation not permitted)\)/;
    $u->wait_for_log($STALL_RE, 1, 15);
    $u->get('/block') for 1 .. 2;
    my @n = $u->wait_for_log($re, 1, 15);
    is(scalar(@n), 1, 'not dumpable: said once, at notice')
        or diag($u->error_log);
    ok(wait_until(sub {
           my $s = decode_json($u->get('/status')->{content});
           my $c = $s->{workers}[0]{counters} // {};
           ($c->{stack_reads_refused} // 0) >= 1
               && ($c->{signals_sent} // 0) >= 1
               && ($c->{stacks_read} // 0) == 0
       }, 5), 'not dumpable: the stack asked for with the signal');
    is(scalar(ProfLog::log_lines($u->error_log, $re)), 1,
       'not dumpable: said once');
    $u->ok_no_worker_died('not dumpable');
    $u->stop;
}

done_testing();
