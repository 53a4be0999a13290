#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Lua-land stacks: a Lua app whose functions each burn a known CPU time in
# their own location (JIT-compiled; with jit.off; an interpreted loop of
# integer arithmetic and modulo, under a Lua caller; in a light thread; after
# ngx.sleep; after a cosocket's reads; in a timer; in the init_worker,
# rewrite, access, header filter, body filter, log, balancer and
# ssl_certificate phases; in
# a coroutine that Lua's own coroutine.resume and a coroutine.wrap
# function resume, under its resumer's frames). At least 90% of each
# location's Lua CPU (the samples under the lua module's entry) carries
# its function's frame, with the right file and first line, and none
# another's, named as its caller calls it; three functions called in one
# location get shares within 5 points of what LuaJIT's own profiler
# (jit.profile) reports of them in a worker without our sampler. The
# LuaJIT of the lua module (Debian's libluajit2, or the nginx's own:
# OpenResty), then OpenResty's luajit2 from ../shared/fixtures/openresty
# in its place where Debian's lua module loads it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfEnv;
use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

mkdir("$p/lua") or die "$p/lua: $!";
chmod(0755, $p, "$p/lua");

# Each burner: a loop over math.sin (libm under it) for ms of CPU time.
my @PHASES = qw(rewrite_burn access_burn header_burn log_burn balancer_burn);
my @BURNERS = (qw(jit_burn interp_burn thread_burn sleep_burn timer_burn
                  filter_burn coro_burn cosocket_burn ssl_burn init_burn
                  share_a share_b share_c), @PHASES);
my $BODY = <<'EOF';
    local stop = clock() + ms / 1000
    local s = 0
    while clock() < stop do
        for i = 1, 2000 do s = s + sin(i) end
    end
    return s
end
EOF
my $app = "local M = {}\nlocal sin, clock = math.sin, os.clock\n\n";
$app .= "local function $_(ms) -- burner $_\n${BODY}M.$_ = $_\n\n"
    for @BURNERS;
$app .= "jit.off(interp_burn)\n\n";

# Burners called the other ways a caller names a function: a global, an
# upvalue, a method, a local holding it.
my @NAMED = qw(global_burn upvalue_burn method_burn local_burn);
my @OWN = qw(mod_burn);     # its own body
$app .= <<"EOF";
rawset(_G, "global_burn", function(ms) -- burner global_burn
${BODY})
local function upvalue_burn(ms) -- burner upvalue_burn
${BODY}local obj = {}
function obj:method_burn(ms) -- burner method_burn
${BODY}local function local_burn(ms) -- burner local_burn
${BODY}-- An interpreted loop of integer arithmetic and modulo (the interpreter
-- runs % in a subroutine of its own), called from a Lua function whose
-- concatenation leaves the caller's frame the last one LuaJIT saved.
local function mod_burn(n) -- burner mod_burn
    local s = 0
    for i = 1, n do
        s = (s * 31 + i) % 1000003
    end
    return s
end
jit.off(mod_burn)
function M.mod_caller(ms)
    local stop = clock() + ms / 1000
    local t, last = 0, ""
    while clock() < stop do
        last = "round " .. t
        t = t + mod_burn(5000)
    end
    return t .. last
end

-- inl_outer's loop: the JIT compiles it with the two others inlined.
local function inl_inner(x) -- inlined inl_inner
    local y = x % 7
    if y > 3 then y = y * 2 end
    return y + x * 0.5
end
local function inl_middle(x) -- inlined inl_middle
    return inl_inner(x) + inl_inner(x + 1)
end
function M.inl_outer(ms) -- inlined inl_outer
    local stop = clock() + ms / 1000
    local t = 0
    while clock() < stop do
        for i = 1, 100000 do t = t + inl_middle(i) end
    end
    return t
end

-- Lua's own coroutines (the lua module's are not used in a body filter):
-- coro_burn's frames above coro_outer's, resumed and as a wrap function.
function M.coro_outer(ms) -- resumer coro_outer
    local co = coroutine.create(M.coro_burn)
    local _, s = coroutine.resume(co, ms)
    local w = coroutine.wrap(M.coro_burn)
    return s + w(ms)
end

function M.names(ms)
    local alias = local_burn
    return global_burn(ms) + upvalue_burn(ms) + obj:method_burn(ms)
           + alias(ms)
end

return M
EOF

my $file = "$p/lua/app.lua";
open(my $fh, '>', $file) or die "$file: $!";
print $fh $app;
close($fh);
chmod(0644, $file);

# Each burner's first line, as its Lua frame must say.
my (%FIRST, %INLINED, $n);
for (split /\n/, $app) {
    $n++;
    $FIRST{$1} = $n if /-- burner (\w+)$/;
    $INLINED{$1} = $n if /-- (?:inlined|resumer) (\w+)$/;
}

# Each burner's name, as its caller calls it (debug.getinfo's name): the
# field of the module a location calls; a light thread's function, called
# from C, has none: its chunk and first line; the local holding one.
my %NAME = map { $_ => $_ } @BURNERS, @NAMED, @OWN;
$NAME{$_} = "$file:$FIRST{$_}" for qw(thread_burn coro_burn);
$NAME{local_burn} = 'alias';

# ssl_certificate_by_lua: a TLS server of its own, which the worker's
# proxy connects to (a handshake a request), where nginx has TLS and
# openssl makes a key.
my ($OPENSSL) = grep { -x } map { "$_/openssl" } split /:/, $ENV{PATH};
undef $OPENSSL unless ProfEnv::nginx_v() =~ /--with-http_ssl_module/;
my ($tls_server, $tls_location) = ('', '');
if ($OPENSSL) {
    my $out = `$OPENSSL req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $p/key.pem -out $p/cert.pem -days 30 -subj /CN=localhost 2>&1`;
    $? == 0 or die "openssl req failed: $out";
    chmod(0644, "$p/key.pem", "$p/cert.pem");
    my $port = ProfHTTP::free_port();
    $tls_server = <<"EOF";
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate $p/cert.pem;
        ssl_certificate_key $p/key.pem;
        ssl_certificate_by_lua_block { require("app").ssl_burn(40) }
        location = /back { return 200 "back\n"; }
    }
EOF
    $tls_location = "location = /tls { proxy_pass https://127.0.0.1:$port/back; "
                    . "proxy_ssl_session_reuse off; }";
}

my $lua_path = ProfEnv::lua_package_path_directive();
$lua_path =~ s/"(.*)";/"$p\/lua\/?.lua;$1";/
    or $lua_path = "    lua_package_path \"$p/lua/?.lua;;\";\n";

# (No CPU ceiling: this checks where samples land, at a fixed interval.
# Under qemu-user the profiler's own CPU is over the default 2%, and a
# widened interval near a request's length samples the same point of
# each request.)
my $conf = <<"EOF";
$lua_path
    init_worker_by_lua_block { require("app").init_burn(200) }
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_interval 5ms;
    profiling_max_cpu off;

$tls_server
    upstream lua_balanced {
        server 127.0.0.1:%%PORT%%;
        balancer_by_lua_block { require("app").balancer_burn(40) }
    }

    server {
        listen 127.0.0.1:%%PORT%%;
        location = /status { profiling_status; }
        location = /jit { content_by_lua_block {
            ngx.say(require("app").jit_burn(40)) } }
        location = /interp { content_by_lua_block {
            ngx.say(require("app").interp_burn(40)) } }
        location = /thread { content_by_lua_block {
            local th = ngx.thread.spawn(require("app").thread_burn, 40)
            ngx.say(select(2, ngx.thread.wait(th))) } }
        location = /sleep { content_by_lua_block {
            ngx.sleep(0.002)
            ngx.say(require("app").sleep_burn(40)) } }
        location = /timer { content_by_lua_block {
            ngx.timer.at(0, function() require("app").timer_burn(40) end)
            ngx.say("ok") } }
        location = /filter {
            content_by_lua_block { ngx.say("ok") }
            body_filter_by_lua_block {
                if ngx.arg[2] then require("app").filter_burn(40) end } }
        location = /rewrite {
            rewrite_by_lua_block { require("app").rewrite_burn(40) }
            content_by_lua_block { ngx.say("ok") } }
        location = /access {
            access_by_lua_block { require("app").access_burn(40) }
            content_by_lua_block { ngx.say("ok") } }
        location = /header {
            content_by_lua_block { ngx.say("ok") }
            header_filter_by_lua_block { require("app").header_burn(40) } }
        location = /log {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block { require("app").log_burn(40) } }
        location = /balancer { proxy_pass http://lua_balanced/back; }
        $tls_location
        location = /back { return 200 "back\n"; }
        location = /cosocket { content_by_lua_block {
            local sock = ngx.socket.tcp()
            assert(sock:connect("127.0.0.1", ngx.var.server_port))
            assert(sock:send("GET /back HTTP/1.0\\r\\n\\r\\n"))
            assert(sock:receive("*a"))
            sock:close()
            ngx.say(require("app").cosocket_burn(40)) } }
        location = /coro {
            content_by_lua_block { ngx.say("ok") }
            body_filter_by_lua_block {
                if ngx.arg[2] then require("app").coro_outer(20) end } }
        location = /inline { content_by_lua_block {
            ngx.say(require("app").inl_outer(40)) } }
        location = /modulo { content_by_lua_block {
            ngx.say(require("app").mod_caller(40)) } }
        location = /names { content_by_lua_block {
            ngx.say(require("app").names(20)) } }
        location = /jitp { content_by_lua_block {
            local profile = require("jit.profile")
            local app = require("app")
            local n = {}
            profile.start("fi1", function(th, samples)
                local b = profile.dumpstack(th, "f;", 4):match("share_[abc]")
                if b then n[b] = (n[b] or 0) + samples end
            end)
            for i = 1, 3 do
                app.share_a(10) app.share_b(20) app.share_c(30)
            end
            profile.stop()
            for b, c in pairs(n) do ngx.say(c, " ", b) end } }
        location = /three { content_by_lua_block {
            local app = require("app")
            ngx.say(app.share_a(10) + app.share_b(20) + app.share_c(30)) } }
    }
EOF

# The native frames under which a location's Lua code runs (in the
# filter, log and balancer phases, lua_pcall under the lua module's
# handler for it).
my $ENTRY = qr/^(ngx_http_lua_(run_thread|timer_handler|body_filter)|lua_pcall$)/;

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

    for (1 .. 12) {
        # (/three thrice: enough samples for shares within 5 points)
        for my $path (qw(/jit /interp /thread /sleep /timer /filter
                         /three /three /three /names /inline /coro
                         /modulo
                         /rewrite /access /header /log /balancer
                         /cosocket), $OPENSSL ? ('/tls') : ())
        {
            my $r = $t->get($path);
            die "$path: " . ($r->{status} // 'no answer')
                unless ($r->{status} // 0) == 200;
        }
    }
    ok($t->stop, "$what: nginx quits (and writes its last profile)");
    like($t->error_log, qr/; Lua: LuaJIT \S+ \(/,
         "$what: the identification line names the LuaJIT");

    my @s = grep { $_->{cpu} > 0 && ProfHotspots::stack_has($_, $ENTRY) }
            ProfHotspots::hotspot_samples(
                ProfPprof::decode_dump_dir($t->dump_dir));
    unlink(glob($t->dump_dir . '/*'));

    # Which burner a sample's Lua frames show (undef: none; '*': two).
    my $wrong = 0;
    my (%frame_ok, %seen_frames);
    my $burner_of = sub {
        my ($s) = @_;
        my %seen;
        for my $f (@{ $s->{lua} }) {
            next unless $f->{file} eq "\@$file";
            my ($b) = grep { $FIRST{$_} == $f->{start_line} }
                      @BURNERS, @NAMED, @OWN;
            next unless $b;
            $seen{$b} = 1;
            $seen_frames{$b}{"$f->{name} $f->{file} $f->{start_line} "
                             . "$f->{line}"}++;
            # Its name; the line of the leaf where LuaJIT knows it, one
            # of its loop's (interpreted: always; in a trace: 0).
            $frame_ok{$b}{ $f->{name} eq $NAME{$b} ? 'name' : 'misnamed' }++;
            if ($f->{line} == 0) {
                $frame_ok{$b}{unknown}++;
            } elsif ($f->{line} > $FIRST{$b} && $f->{line} <= $FIRST{$b} + 6) {
                $frame_ok{$b}{lines}++;
            } else {
                $frame_ok{$b}{wrong}++;
            }
        }
        return (keys %seen) == 1 ? (keys %seen)[0]
               : (keys %seen) ? '*' : undef;
    };

    my %by;         # location or burner => { burner => cpu, total => cpu }
    for my $s (@s) {
        my $b = $burner_of->($s) // '-';
        my $where = $s->{endpoint}
            // (ProfHotspots::stack_has($s, qr/^ngx_http_lua_ssl_cert_handler/)
                ? 'no request (a TLS handshake)'
                : ProfHotspots::stack_has($s, qr/^ngx_http_lua_init_worker$/)
                ? 'no request (init_worker)' : 'no request (the timer)');
        $by{$where}{$b} += $s->{cpu};
        $by{$where}{total} += $s->{cpu};
    }

    my %location = (jit_burn => 'GET /jit', interp_burn => 'GET /interp',
                    thread_burn => 'GET /thread', sleep_burn => 'GET /sleep',
                    timer_burn => 'no request (the timer)',
                    init_burn => 'no request (init_worker)',
                    filter_burn => 'GET /filter', coro_burn => 'GET /coro',
                    cosocket_burn => 'GET /cosocket',
                    mod_burn => 'GET /modulo',
                    $OPENSSL ? (ssl_burn => 'no request (a TLS handshake)')
                             : (),
                    map { /^(\w+)_burn$/; ($_ => "GET /$1") } @PHASES);
    for my $b (sort keys %location) {
        my $c = $by{ $location{$b} } // {};
        my $total = $c->{total} // 0;
        my $right = $c->{$b} // 0;
        my $other = 0;
        $other += $c->{$_} // 0 for grep { $_ ne $b } @BURNERS, @OWN, '*';
        ok($total >= 100e6 && $right >= 0.9 * $total && $other == 0,
           sprintf('%s: %s: %.1f%% of %.0fms of Lua CPU in %s carries it, '
                   . '%.0fms another burner', $what, $b,
                   $total ? 100 * $right / $total : 0, $total / 1e6,
                   $location{$b}, $other / 1e6))
            or diag(explain($c), explain([ keys %by ]));
        my $fk = $frame_ok{$b} // {};
        ok($fk->{name} && !$fk->{misnamed} && !$fk->{wrong}
           && (($b ne 'interp_burn' && $b ne 'mod_burn') || $fk->{lines}),
           "$what: $b: named $NAME{$b}, file \@$file, first line "
           . "$FIRST{$b}, its lines")
            or diag(explain($seen_frames{$b}));
    }

    # Named by their callers: each one's frames, all of them.
    for my $b (@NAMED) {
        my $fk = $frame_ok{$b} // {};
        ok(($by{'GET /names'}{$b} // 0) >= 100e6 && $fk->{name}
           && !$fk->{misnamed} && !$fk->{wrong},
           sprintf('%s: %s: %.0fms of Lua CPU, named %s in %d frames, '
                   . 'otherwise in %d', $what, $b,
                   ($by{'GET /names'}{$b} // 0) / 1e6, $NAME{$b},
                   $fk->{name} // 0, $fk->{misnamed} // 0))
            or diag(explain($seen_frames{$b}));
    }

    # A trace that inlined two functions: its frame is the function it
    # runs in (inl_outer, line 0 there), the inlined ones not shown; where
    # they run interpreted (before the trace), inl_inner above inl_middle
    # above inl_outer, each on one of its lines; never another order.
    my ($inl, $inl_total, @inl_wrong) = (0, 0);
    for my $s (grep { ($_->{endpoint} // '') eq 'GET /inline' } @s) {
        $inl_total += $s->{cpu};
        my @f = grep { $_->{file} eq "\@$file" } @{ $s->{lua} };
        my @names = map { $_->{name} } @f;
        for my $f (@f) {
            my $first = $INLINED{ $f->{name} } // -1;
            push @inl_wrong, "$f->{name}:$f->{start_line}:$f->{line}"
                unless $f->{start_line} == $first
                       && ($f->{line} == 0
                           || ($f->{line} > $first
                               && $f->{line} <= $first + 6));
        }
        # (none of them: the chunk's own code, or a walk cut short)
        push @inl_wrong, "@names"
            unless "@names" =~ /^(((inl_inner )?inl_middle )?inl_outer)?$/;
        $inl += $s->{cpu} if @names && $names[-1] eq 'inl_outer';
    }
    ok($inl_total >= 100e6 && $inl >= 0.9 * $inl_total && !@inl_wrong,
       sprintf('%s: inlined: %.1f%% of %.0fms of Lua CPU in /inline has '
               . 'inl_outer, the inlined functions above it or absent; %d '
               . 'frames otherwise', $what,
               $inl_total ? 100 * $inl / $inl_total : 0, $inl_total / 1e6,
               scalar @inl_wrong))
        or diag(join("\n", grep { defined } @inl_wrong[0 .. 9]));

    # A coroutine resumed from Lua: its frames above its resumer's (or
    # none of the app's: the filter's own code, a walk cut short). None
    # without its resumer's, by construction: the walk reaches the
    # coroutine's C frame from LuaJIT's state, never by a scan (on from
    # it wherever it strays or stops below it), and the VM's unwind rule
    # there leads to its resumer's; where the state names no C frame of
    # the coroutine (its entry, its exit), no frame of it is shown
    # (t/lua-coroutines.t: in an older worker).
    my ($co, $co_total, @co_wrong) = (0, 0);
    for my $s (grep { ($_->{endpoint} // '') eq 'GET /coro' } @s) {
        $co_total += $s->{cpu};
        my @names = map { $_->{name} } grep { $_->{file} eq "\@$file" }
                    @{ $s->{lua} };
        # With its whole stack, innermost first: where the walk went.
        push @co_wrong, "@names: " . join(' < ', @{ $s->{funcs} })
            unless "@names" =~ /^(($NAME{coro_burn} )?coro_outer)?$/;
        $co += $s->{cpu} if "@names" eq "$NAME{coro_burn} coro_outer";
    }
    ok($co_total >= 100e6 && $co >= 0.9 * $co_total && !@co_wrong,
       sprintf('%s: coroutines: %.1f%% of %.0fms of Lua CPU in /coro has '
               . 'coro_burn above its resumer coro_outer; %d samples '
               . 'otherwise', $what,
               $co_total ? 100 * $co / $co_total : 0, $co_total / 1e6,
               scalar @co_wrong))
        or diag(join("\n", grep { defined } @co_wrong[0 .. 9]));

    # Three in one location (burning 1:2:3): shares within 5 points of
    # what LuaJIT's own profiler reports of the same code.
    my ($jitp, $jitp_samples) = jit_profile_shares();
    my $c = $by{'GET /three'} // {};
    my $sum = 0;
    $sum += $c->{$_} // 0 for qw(share_a share_b share_c);
    for my $b (sort keys %$jitp) {
        my $share = $sum ? ($c->{$b} // 0) / $sum : 0;
        ok($sum >= 200e6 && $jitp_samples >= 300
           && abs($share - $jitp->{$b}) <= 0.05,
           sprintf('%s: %s: %.1f%% of the three; jit.profile: %.1f%% (of '
                   . '%d samples; %.1f%% burned)', $what, $b, 100 * $share,
                   100 * $jitp->{$b}, $jitp_samples,
                   100 * { share_a => 1, share_b => 2, share_c => 3 }->{$b}
                       / 6));
    }
}

# LuaJIT's profiler (jit.profile, 1 ms) on the three functions of /three,
# in a worker without our sampler (both take SIGPROF): each one's share
# of the samples in them, and their count.
sub jit_profile_shares {
    (my $off = $conf) =~ s/profiling on;/profiling off;/;
    $t->write_config($off);
    $t->run;
    my %n;
    for (1 .. 16) {
        my $r = $t->get('/jitp');
        die "/jitp: " . ($r->{status} // 'no answer') . "\n"
            unless ($r->{status} // 0) == 200;
        $n{$2} += $1 while $r->{content} =~ /^(\d+) (share_[abc])$/mg;
    }
    $t->stop or die "nginx did not quit\n";
    my $sum = 0;
    $sum += $n{$_} // 0 for qw(share_a share_b share_c);
    return ({ map { $_ => $sum ? ($n{$_} // 0) / $sum : 0 }
              qw(share_a share_b share_c) }, $sum);
}

check_run(ProfEnv::nginx_has('lua-nginx-module')
          ? 'the nginx\'s own LuaJIT' : 'Debian\'s libluajit2');

# profiling_lua off: native stacks only, nothing said of Lua.
{
    (my $off = $conf) =~ s/profiling on;/profiling on;\n    profiling_lua off;/;
    $t->write_config($off);
    $t->run;
    $t->get($_) for qw(/jit /interp /three);
    my $text = $t->get('/status?format=text')->{content} // '';
    unlike($text, qr/^  lua:/m, 'profiling_lua off: no lua line on the '
                                . 'status page');
    ok($t->stop, 'profiling_lua off: nginx quits');
    my @lua = grep { @{ $_->{lua} } } ProfHotspots::hotspot_samples(
                  ProfPprof::decode_dump_dir($t->dump_dir));
    my @run = grep { ProfHotspots::stack_has($_, $ENTRY) }
              ProfHotspots::hotspot_samples(
                  ProfPprof::decode_dump_dir($t->dump_dir));
    ok(@run > 0 && @lua == 0, 'profiling_lua off: ' . scalar(@run)
       . ' samples under the lua module, ' . scalar(@lua)
       . ' with Lua frames');
    unlink(glob($t->dump_dir . '/*'));
}

# OpenResty's luajit2 in place of Debian's, built from the fixture.
SKIP: {
    skip('OpenResty\'s luajit2: Debian\'s lua module and the fixture only',
         1)
        unless ProfEnv::openresty_luajit("$p/lj");
    local $ENV{LD_LIBRARY_PATH} = "$p/lj";
    check_run('OpenResty\'s luajit2');
}

done_testing();
