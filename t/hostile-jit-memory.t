#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# A worker's memory stays flat while JIT code makes new code addresses
# without end: LuaJIT compiles a chunk of Lua generated for each request
# (loadstring: a new trace, new machine code every request; its code areas
# kept small so that it flushes them and maps new ones at new addresses),
# sampled every millisecond. From 40 s to 70 s of load, the worker's RSS
# grows no more than that of the same nginx without the profiler, running
# side by side, plus a small allowance: it does not grow with the number
# of distinct JIT addresses. (Its tables fill in the first 20-40 s, the
# longer the slower the machine; ci/bench-jit-memory: the same for 10
# minutes.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use HTTP::Tiny;
use POSIX qw(WNOHANG);
use Cwd ();
use Test::More;
use Time::HiRes qw(time);

use ProfEnv;
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfProc;
use ProfWait;

my $WARMUP_S = 40;
my $END_S = 70;
my $ALLOWANCE_KB = 256;

# Under a sanitizer (t/sanitizer-nginx) the allocator is the sanitizer's
# (freed memory held in quarantine): the RSS says nothing of the
# profiler's. The workload then runs for a while, for the sanitizer.
my $SANITIZED = ProfEnv::nginx_wrapped();
$END_S = 20 if $SANITIZED;

# Lua: OpenResty's built in, or Debian's modules for Debian's nginx.
my $LUA = ProfEnv::engines()->{lua};
if (!$LUA && $> == 0
    && (Cwd::realpath(ProfEnv::nginx_real()) // '') eq '/usr/sbin/nginx')
{
    # What ci/install-deps installs; a machine without it gets it here.
    system('sh', '-c', 'DEBIAN_FRONTEND=noninteractive apt-get install -y '
           . '-qq --no-install-recommends libnginx-mod-http-ndk '
           . 'libnginx-mod-http-lua >/dev/null 2>&1');
    $LUA = ProfEnv::engines()->{lua};
}
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua and -ndk)') unless $LUA;
my @LUA = @$LUA;

my $LOCATIONS = <<'EOF';
    init_worker_by_lua_block { jit.opt.start("sizemcode=8", "maxmcode=64") }
    server {
        listen 127.0.0.1:%%PORT%%;
        location /luanew {
            content_by_lua_block {
                local k = tostring(math.random(1, 1000000000))
                local src = "local s = 0 for i = 1, 1000000 do "
                            .. "s = s + (i % " .. k .. ") * 1.5"
                for j = 1, math.random(1, 8) do
                    src = src .. " + (i % " .. (j + 1) .. ")"
                end
                ngx.say(loadstring(src .. " end return s")())
            }
        }
    }
EOF

my $base = ProfNginx->new(workers => 1, modules => [ @LUA ]);
$base->write_config($LOCATIONS);
$base->run;

my $cand = ProfNginx->new(workers => 1,
                          modules => [ 'ngx_http_profiling_module', @LUA ]);
$cand->write_config(<<'EOF' . $LOCATIONS);
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_dump_keep 100;
    profiling_interval 1ms;
    profiling_period 5s;
EOF
$cand->run;

my %worker = (base => ($base->worker_pids)[0],
              cand => ($cand->worker_pids)[0]);

# The load: one client process per nginx.
my %load;
for my $t ($base, $cand) {
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        $SIG{TERM} = sub { POSIX::_exit(0) };
        my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
        my $url = 'http://127.0.0.1:' . $t->port . '/luanew';
        while (1) {
            my $r = $http->get($url);
            POSIX::_exit(1) unless $r->{status} == 200;
        }
    }
    $load{$pid} = $t;
}
END { kill('TERM', keys %load) if %load; }

my $start = time();
my (%at, @timeline);
for (my $s = 0; $s <= $END_S; $s += 10) {
    wait_until(sub { time() >= $start + $s }, 11, 0.1);
    my %now = map { $_ => ProfProc::rss_kb($worker{$_}) // 0 } keys %worker;
    push @timeline, sprintf('%ds %d/%d', $s, $now{base}, $now{cand});
    $at{$s} = \%now;
}
my %alive = map { $_ => (waitpid($_, WNOHANG) == 0) } keys %load;
kill('TERM', keys %load);
waitpid($_, 0) for keys %load;
%load = ();

note('RSS KiB (without / with the profiler): ' . join(', ', @timeline));
ok(!grep({ !$_ } values %alive), 'every request of the load got a 200');

ok($base->stop, 'nginx without the profiler quits');
ok($cand->stop, 'nginx with the profiler quits');
$cand->ok_no_worker_died('JIT memory');

# The load made what it means to: many distinct JIT addresses.
my %jit;
for my $p (ProfPprof::decode_dump_dir($cand->dump_dir)) {
    $jit{ $_->{address} } = 1 for grep { !$_->{mapping_id} }
                                  @{ $p->{location} };
}
my $min_jit = $SANITIZED ? 100 : 1000;
ok(keys %jit >= $min_jit, scalar(keys %jit) . ' distinct JIT code '
   . "addresses in the profiles (at least $min_jit)");

my %counters = %{ (ProfLog::exit_counters($cand->error_log))[0] // {} };
note("addresses_evicted=" . ($counters{addresses_evicted} // '?')
     . " cpu_samples=" . ($counters{cpu_samples} // '?'));

SKIP: {
    skip('RSS under a sanitizer\'s allocator', 1) if $SANITIZED;

    my $growth_base = $at{$END_S}{base} - $at{$WARMUP_S}{base};
    my $growth_cand = $at{$END_S}{cand} - $at{$WARMUP_S}{cand};
    ok($growth_cand - $growth_base <= $ALLOWANCE_KB,
       sprintf('from %ds to %ds the worker\'s RSS grew %d KiB with the '
               . 'profiler, %d KiB without: %d KiB more (at most %d)',
               $WARMUP_S, $END_S, $growth_cand, $growth_base,
               $growth_cand - $growth_base, $ALLOWANCE_KB))
        or diag('  RSS KiB (without / with): ' . join(', ', @timeline));
}

done_testing();
