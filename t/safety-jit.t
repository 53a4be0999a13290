#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# JIT code never crashes a worker: LuaJIT (with the JIT on, off per request
# or for the whole VM, and compiling new traces on every request), njs,
# brotli and a page of hand-written machine code that runs with garbage in
# rbp (profiling_burn_jit) under load at a 1 ms sampling interval. No
# worker dies, every request is answered, and a stack through JIT code
# (code of no loaded object) either reaches nginx's frames below it or ends
# with an "[unwind stopped]" frame.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfEnv;
use ProfHotspots;
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

# The paths of the workload this nginx serves: njs and brotli where
# Debian's modules load.
my $ENGINES = ProfEnv::engines();
sub served {
    return grep { ($_ !~ m{njs} || $ENGINES->{njs})
                  && ($_ !~ m{big\.txt} || $ENGINES->{brotli}) } @_;
}
plan(skip_all => 'wrk is missing: ci/install-deps')
    unless grep { -x "$_/wrk" } split /:/, $ENV{PATH};

my $JIT_MS = 20;

# The locations: ProfWorkload::jit_workload.
sub start_nginx {
    my ($init) = @_;
    my $t = ProfNginx->new(workers => 2, modules => \@MODULES);
    my $w = ProfWorkload::jit_workload($t, jit_ms => $JIT_MS);

    # (native stacks through LuaJIT's traces: Lua frames, which stand in
    # for a trace's machine code, are t/lua-frames.t's)
    $t->write_config(<<"EOF", main => $t->core_main);
    profiling on;
    profiling_lua off;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;
    profiling_interval 1ms;

    $w->{http}
    $init
    log_format safety '\$uri \$status';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%PREFIX%%/access.log safety;
$w->{locations}
    }
EOF
    $t->run;
    return $t;
}

# Requests to each path, then load for $seconds; then the checks every
# run shares: the same workers served it all, no worker died, every request
# got a 200 and each path at least $min of them. Returns the access log's
# counts and the samples of the profiles.
sub load_and_check {
    my ($t, $name, $seconds, $min, @paths) = @_;
    my @workers = $t->worker_pids;
    my %uniq = map { $_ => 1 } @paths;

    # (and ten to the JIT pages: enough of their CPU time to measure)
    my @failed = grep { ($t->get($_)->{status} // 0) != 200 }
                 map { ($_) x (m{^/jit} ? 10 : 2) } sort keys %uniq;
    ok(!@failed, "$name: two requests to each path (ten to /jit*) "
       . 'answered 200') or diag("  failed: @failed");

    my $r = ProfWorkload::wrk(
        $t, script => ProfWorkload::wrk_paths_script($t, @paths),
        seconds => $seconds, connections => 8);
    ok($r->{requests} > 0 && $r->{non2xx} == 0 && $r->{socket_errors} == 0,
       "$name: wrk: $r->{requests} requests, $r->{non2xx} not 2xx, "
       . "$r->{socket_errors} socket errors") or diag($r->{output});

    is_deeply([ $t->worker_pids ], \@workers,
              "$name: the same workers (@workers) served the load");
    ok($t->stop, "$name: nginx quits");
    $t->ok_no_worker_died($name);

    my $counts = ProfWorkload::access_counts($t->prefix . '/access.log');
    for my $path (sort keys %uniq) {
        my %st = %{ $counts->{$path} // {} };
        my $ok = $st{200} // 0;
        my @other = grep { $_ != 200 } keys %st;
        ok($ok >= $min && !@other,
           "$name: $path answered 200 $ok times (at least $min), nothing "
           . 'else') or diag(explain(\%st));
    }

    my @profiles = ProfPprof::decode_dump_dir($t->dump_dir);
    ok(@profiles >= 4, "$name: the workers wrote profiles ("
       . scalar(@profiles) . ')');
    my $c = ProfLog::exit_counters_by_pid($t->error_log);
    diag(join("\n", map { my $w = $_; "  worker $w: " . join(' ',
         map { "$_=" . ($c->{$w}{$_} // '?') }
         qw(cpu_samples dropped_samples dropped_batches ring_full
            labels_dropped unwind_stops scanned_frames)) } sort keys %$c));
    return ($counts, ProfHotspots::hotspot_samples(@profiles));
}

# A test: every sample of @samples with a JIT frame reaches
# ngx_http_core_run_phases, or ends with "[unwind stopped]"; says how
# much of each there is.
sub ok_jit_stacks {
    my ($name, $min_ns, @samples) = @_;
    my (%ns, @bad);

    for my $s (@samples) {
        my @f = @{ $s->{funcs} };
        next unless grep { ProfHotspots::is_jit_frame($s, $_) } 0 .. $#f;
        my $kind = ProfHotspots::stack_has($s, 'ngx_http_core_run_phases')
                   ? 'reach' : $f[-1] eq '[unwind stopped]' ? 'stopped'
                   : 'bad';
        $ns{$kind} += $s->{cpu} + $s->{wall};
        push @bad, join(' <- ', @f) if $kind eq 'bad';
    }

    my $total = ($ns{reach} // 0) + ($ns{stopped} // 0) + ($ns{bad} // 0);
    my $ok = ok($total >= $min_ns && !@bad,
       sprintf('%s: of %.0fms (cpu + wall) in stacks through JIT code, '
               . '%.0fms reach ngx_http_core_run_phases, %.0fms end with '
               . '[unwind stopped], %.0fms neither (at least %.0fms)',
               $name, $total / 1e6, ($ns{reach} // 0) / 1e6,
               ($ns{stopped} // 0) / 1e6, ($ns{bad} // 0) / 1e6,
               $min_ns / 1e6));
    diag("  $_") for @bad[0 .. ($#bad < 9 ? $#bad : 9)];
    return $ok;
}

# Tests of the page of hand-written code at $endpoint (profiling_burn_jit,
# called by the functions in @$caller, innermost first): its frame (no
# mapping, an address only) holds the CPU time burned there, and is
# followed by its callers, the first found past the junk words (among them
# a pointer to getppid, which is no return address) although rbp is
# garbage, then by the rest of the stack down to ngx_http_core_run_phases.
sub check_jit_page {
    my ($counts, $endpoint, $caller, @S) = @_;
    my ($path) = $endpoint =~ m{^GET (\S+)};

    my @jit = grep { ($_->{endpoint} // '') eq $endpoint && $_->{cpu} > 0
                     && ProfHotspots::is_jit_frame($_, 0) } @S;
    my $run_ns = ProfHotspots::sum_cpu(grep {
        ProfHotspots::stack_has($_, 'ngx_http_profiling_burn_jit_run') } @S);
    my $burned = ($counts->{$path}{200} // 0) * $JIT_MS * 1e6;
    my $jit_ns = ProfHotspots::sum_cpu(@jit);
    ok($jit_ns >= 0.5 * $burned, sprintf('%s: %.0fms of cpu-time with the '
       . 'JIT page as leaf, of %.0fms burned there (%.0fms in stacks with '
       . 'ngx_http_profiling_burn_jit_run, of both pages)', $path,
       $jit_ns / 1e6, $burned / 1e6, $run_ns / 1e6));

    ok_jit_stacks($path, 0.5 * $burned,
                  grep { ($_->{endpoint} // '') eq $endpoint } @S);

    my @frames = (@$caller, 'ngx_http_profiling_burn_jit_run',
                  'ngx_http_profiling_burn_handler');
    my $whole = ProfHotspots::sum_cpu(grep {
        my $s = $_;
        !grep({ ($s->{funcs}[$_ + 1] // '') ne $frames[$_] } 0 .. $#frames)
        && ProfHotspots::stack_has($s, 'ngx_http_core_run_phases') } @jit);
    my @invented = grep { ProfHotspots::stack_has($_, qr/getppid/) } @jit;
    ok($jit_ns > 0 && $whole >= 0.9 * $jit_ns && !@invented,
       sprintf('%s: %.1f%% of that cpu-time goes on to %s and '
               . 'ngx_http_core_run_phases; no frame is made of the junk',
               $path, $jit_ns ? 100 * $whole / $jit_ns : 0,
               join(', ', @frames)))
        or diag('  ' . ProfHotspots::format_cpu_by(ProfHotspots::cpu_by(
            sub { my @f = @{ $_[0]{funcs} };
                  join(' <- ', map { $f[$_] // '-' } 0 .. 4) }, @jit)));
}


subtest 'JIT on: LuaJIT traces, new traces every request, njs, brotli, '
        . 'hand-written JIT code' => sub {
    my $t = start_nginx('');
    my @paths = served(qw(/jit /lua /luanew /luaoff /lua /luanew /njs /luanew
                          /lua /luanew /big.txt /luanew /jitfp /luanew));
    my ($counts, @S) = load_and_check($t, 'JIT on', 8, 2, @paths);

    my %by = %{ ProfHotspots::cpu_by(sub { $_[0]{endpoint} }, @S) };
    for my $e (served('GET /lua', 'GET /luaoff', 'GET /luanew', 'GET /njs',
                      'GET /big.txt', 'GET /jit', 'GET /jitfp'))
    {
        ok(($by{$e} // 0) > 0, sprintf('the profiles hold %.0fms of '
           . 'cpu-time of %s', ($by{$e} // 0) / 1e6, $e));
    }

    check_jit_page($counts, 'GET /jit', [ 'ngx_http_profiling_burn_jit_call' ],
                   @S);

    # Callers that find their frames from rbp although the JIT code saved
    # no rbp (built with frame pointers, as code of distributions now is).
    check_jit_page($counts, 'GET /jitfp',
                   [ 'ngx_http_profiling_burn_jit_call_fp_in',
                     'ngx_http_profiling_burn_jit_call_fp' ], @S);
    ok_jit_stacks('LuaJIT traces', 50e6,
                  grep { ($_->{endpoint} // '') =~ m{^GET /lua} } @S);
    ok_jit_stacks('every stack', 1e6, @S);
};


subtest 'JIT off for the whole VM (jit.off() in init_by_lua)' => sub {
    my $t = start_nginx('init_by_lua_block { jit.off() }');
    my @paths = served(qw(/jit /lua /luanew /luaoff /njs /luanew));
    my (undef, @S) = load_and_check($t, 'JIT off', 4, 2, @paths);

    my %by = %{ ProfHotspots::cpu_by(sub { $_[0]{endpoint} }, @S) };
    ok(($by{'GET /lua'} // 0) > 0 && ($by{'GET /luanew'} // 0) > 0,
       sprintf('the profiles hold the interpreted Lua (%.0fms, %.0fms)',
               ($by{'GET /lua'} // 0) / 1e6, ($by{'GET /luanew'} // 0) / 1e6));
    ok_jit_stacks('every stack', 1e6, @S);
};

done_testing();
