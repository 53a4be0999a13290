#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# A coroutine that runs a trace, in a worker that has served many
# requests: its Lua frames stay above its resumer's in every sample. A
# coroutine's C frame (LuaJIT's lj_vm_resume) is linked to none; its
# resumer is found from the native frame right after it, which the walk
# reaches from the trace's machine code through LuaJIT's own state (the
# running state's C frame), never by scanning the stack: the words a
# scan met there are left by the worker's earlier calls (the longer it
# has run, the more), and a scan that took one lost the resumer (a
# third of the coroutine's CPU after 400 requests). So no sample may have
# the coroutine's frames without its resumer's: 0 asked, by construction.
# A sample with neither (the resumer's own code, LuaJIT's entry or exit
# of the coroutine, where its state names no C frame of it) is right.
# The LuaJIT of the lua module, then OpenResty's luajit2 from
# ../shared/fixtures/openresty in its place where Debian's lua module
# loads it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfEnv;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

# Requests to /coro: the worker's age at which a third went wrong.
my $REQUESTS = $ENV{PROFILING_CORO_REQUESTS} // 400;

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

mkdir("$p/lua") or die "$p/lua: $!";
chmod(0755, $p, "$p/lua");

# coro_burn: a loop over math.sin for ms of CPU time (a trace, libm under
# it), resumed by coroutine.resume and as a coroutine.wrap function.
my $app = <<'EOF';
local M = {}
local sin, clock = math.sin, os.clock

function M.coro_burn(ms) -- burner coro_burn
    local stop = clock() + ms / 1000
    local s = 0
    while clock() < stop do
        for i = 1, 2000 do s = s + sin(i) end
    end
    return s
end

function M.coro_outer(ms) -- resumer coro_outer
    local co = coroutine.create(M.coro_burn)
    local _, s = coroutine.resume(co, ms)
    local w = coroutine.wrap(M.coro_burn)
    return s + w(ms)
end

return M
EOF

my $file = "$p/lua/app.lua";
open(my $fh, '>', $file) or die "$file: $!";
print $fh $app;
close($fh);
chmod(0644, $file);

my $lua_path = ProfEnv::lua_package_path_directive();
$lua_path =~ s/"(.*)";/"$p\/lua\/?.lua;$1";/
    or $lua_path = "    lua_package_path \"$p/lua/?.lua;;\";\n";

# (Lua's own coroutines: the lua module's are not used in a body filter.)
my $conf = <<"EOF";
$lua_path
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_interval 5ms;
    profiling_max_cpu off;

    server {
        listen 127.0.0.1:%%PORT%%;
        location = /status { profiling_status; }
        location = /coro {
            content_by_lua_block { ngx.say("ok") }
            body_filter_by_lua_block {
                if ngx.arg[2] then require("app").coro_outer(10) end } }
    }
EOF

# coro_burn's frame is the one of its first line; the resumer's name.
my $coro_first = 0;
my $n = 0;
for (split /\n/, $app) {
    $n++;
    $coro_first = $n if /-- burner coro_burn$/;
}
my $BURN = "$file:$coro_first";

sub check_run {
    my ($what) = @_;

    $t->write_config($conf);
    $t->run;

    my $text = '';
    ok(ProfWait::wait_until(sub {
           $text = $t->get('/status?format=text')->{content} // '';
           $text =~ /^  lua: LuaJIT \S+ \(\S+\): Lua frames/m }, 10),
       "$what: the status page names the LuaJIT found")
        or diag(join("", grep { /profiling|lua/i }
                         split /^/m, $t->error_log));

    for (1 .. $REQUESTS) {
        my $r = $t->get('/coro');
        die "/coro: " . ($r->{status} // 'no answer') . "\n"
            unless ($r->{status} // 0) == 200;
    }
    ok($t->stop, "$what: nginx quits (and writes its last profile)");

    my @s = grep { $_->{cpu} > 0 && ($_->{endpoint} // '') eq 'GET /coro' }
            ProfHotspots::hotspot_samples(
                ProfPprof::decode_dump_dir($t->dump_dir));
    unlink(glob($t->dump_dir . '/*'));

    my ($right, $total, $wrong_ns, @wrong) = (0, 0, 0);
    for my $s (@s) {
        $total += $s->{cpu};
        my @names = map { $_->{name} } grep { $_->{file} eq "\@$file" }
                    @{ $s->{lua} };
        if ("@names" !~ /^(($BURN )?coro_outer)?$/) {
            $wrong_ns += $s->{cpu};
            push @wrong, "@names: " . join(' < ', @{ $s->{funcs} });
        }
        $right += $s->{cpu} if "@names" eq "$BURN coro_outer";
    }

    ok($total >= 0.5 * $REQUESTS * 20e6 && $right >= 0.9 * $total
       && !@wrong,
       sprintf('%s: after %d requests, %.1f%% of %.0fms of CPU in /coro has '
               . 'coro_burn above its resumer coro_outer; %d samples '
               . '(%.1f%%) the coroutine\'s without its resumer\'s',
               $what, $REQUESTS, $total ? 100 * $right / $total : 0,
               $total / 1e6, scalar @wrong,
               $total ? 100 * $wrong_ns / $total : 0))
        or diag(join("\n", grep { defined } @wrong[0 .. 4]));
}

check_run(ProfEnv::nginx_has('lua-nginx-module')
          ? 'the nginx\'s own LuaJIT' : 'Debian\'s libluajit2');

# OpenResty's luajit2 in place of Debian's, built from the fixture.
SKIP: {
    skip('OpenResty\'s luajit2: Debian\'s lua module and the fixture only',
         1)
        unless ProfEnv::openresty_luajit("$p/lj");
    local $ENV{LD_LIBRARY_PATH} = "$p/lj";
    check_run('OpenResty\'s luajit2');
}

done_testing();
