#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Lua apps nobody here wrote: Debian's lua-markdown (markdown.lua, its
# functions globals of its own environment, gsub callbacks called from C)
# turning a document into HTML, and lua-dkjson (dkjson.lua) encoding and
# decoding a table of records, each in its location. Every Lua frame of
# theirs is a function of their file (its first line starts a function,
# its line is one of the file's, its name one the file has); at least 90%
# of each location's Lua CPU carries a frame of its app (the JIT on:
# traces too). With the JIT off, where
# LuaJIT's own profiler (jit.profile, in a worker without our sampler)
# counts code the interpreter runs (its state "I") at the instruction:
# the innermost Lua function of the samples taken in Lua code itself, as
# file and name (or first line where LuaJIT can tell no name), has about
# the share jit.profile gives it: a check of gross misattribution (a
# caller in place of its callee), within 20 points, at least 75% alike
# (total variation distance). They agree to 82-92% here, not closer:
# jit.profile takes a sample at the next safe point, so time in a C
# function goes to the Lua code after it (a gsub's to its callback), and,
# likely, it counts the string functions LuaJIT runs without leaving its
# interpreter (string.sub making a string) as Lua code, which a native
# stack shows as C (dkjson's scanvalue: 8-13 points more in jit.profile).
# On the LuaJIT of the lua module, then OpenResty's luajit2 from
# ../shared/fixtures/openresty in its place.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfEnv;
use ProfFiles;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

my %APP = (md => '/usr/share/lua/5.1/markdown.lua',
           json => '/usr/share/lua/5.1/dkjson.lua');
for (values %APP) {
    plan(skip_all => "no $_ (lua-markdown, lua-dkjson: ci/install-deps)")
        unless -r $_;
}

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

mkdir("$p/lua") or die "$p/lua: $!";
chmod(0755, $p, "$p/lua");

# The work of each location, a module of its own. The document: this
# project's README and docs/ in name order (headers, lists, code, links),
# their first 26 KB cut at a line's end: a size that does not move as the
# README does.
my $doc = join('', map { ProfFiles::slurp($_) }
                       "$FindBin::Bin/../README.md",
                       sort glob("$FindBin::Bin/../docs/*.md"));
$doc = substr($doc, 0, index($doc, "\n", 26000) + 1);
my %WORK = (
    md => <<"EOF",
local markdown = require("markdown")
local doc = [=====[$doc]=====]
return function() return #markdown(doc) end
EOF
    json => <<'EOF',
local json = require("dkjson")
local data = {}
for i = 1, 600 do
    data[i] = { id = i, name = "item " .. i, price = i * 1.25,
                tags = { "a" .. i % 7, "b" .. i % 11, "c" },
                note = ("text \"quoted\" \\ and \t tab " .. i):rep(2) }
end
return function()
    local s = json.encode(data, { indent = true })
    return #s + #json.decode(s)
end
EOF
);
for my $app (keys %WORK) {
    my $file = "$p/lua/work_$app.lua";
    open(my $fh, '>', $file) or die "$file: $!";
    print $fh $WORK{$app};
    close($fh);
    chmod(0644, $file);
}

# The apps where Debian installs them (not on OpenResty's default path),
# after the nginx's own Lua libraries (OpenResty's resty.core, not
# Debian's).
my $lua_path = ProfEnv::lua_package_path_directive();
$lua_path =~ s/"(.*)";/"$p\/lua\/?.lua;$1\/usr\/share\/lua\/5.1\/?.lua";/
    or $lua_path = "    lua_package_path "
                   . "\"$p/lua/?.lua;;/usr/share/lua/5.1/?.lua\";\n";

# /APP runs the work for about 100 ms; /jitp/APP the same under
# jit.profile (1 ms, at function granularity) and says how many samples
# in Lua code had which innermost Lua function ("path:name" or
# "path:firstline").
my $conf = <<"EOF";
$lua_path
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_interval 2ms;
    # The shares compared with jit.profile's: sampled at 2 ms throughout
    # (under a sanitizer the profiler's own CPU passes the default 2%).
    profiling_max_cpu off;

    server {
        listen 127.0.0.1:%%PORT%%;
        location = /status { profiling_status; }
        location ~ ^/(md|json)\$ { content_by_lua_block {
            local work = require("work_" .. ngx.var[1])
            local stop = os.clock() + 0.1
            local n = 0
            repeat n = n + work() until os.clock() > stop
            ngx.say(n) } }
        location ~ ^/jitp/(md|json)\$ { content_by_lua_block {
            local profile = require("jit.profile")
            local work = require("work_" .. ngx.var[1])
            local n = {}
            profile.start("fi1", function(th, samples, state)
                if state ~= "I" and state ~= "N" then return end
                for f in profile.dumpstack(th, "pF\\n", 50):gmatch("[^\\n]+")
                do
                    if not f:find("^%[builtin#") and not f:find("^\@0x") then
                        n[f] = (n[f] or 0) + samples
                        return
                    end
                end
            end)
            local stop = os.clock() + 0.06
            repeat work() until os.clock() > stop
            profile.stop()
            for f, c in pairs(n) do ngx.say(c, " ", f) end } }
    }
EOF

my $ENTRY = qr/^ngx_http_lua_run_thread/;

# The apps compared with jit.profile: dkjson. markdown.lua spends nearly
# all its time in string functions (C), which jit.profile counts at the
# Lua instruction after them: its samples in Lua code are too few.
my %COMPARE = (json => 1);
my $ROUNDS = 40;

# Each file's lines, and the names it has (words).
my (%LINES, %WORDS);
for my $file (values %APP) {
    my @l = split /\n/, ProfFiles::slurp($file);
    $LINES{$file} = \@l;
    $WORDS{$file} = { map { $_ => 1 } map { /(\w+)/g } @l };
}

# What jit.profile says of each app in a worker without our sampler,
# under config: { app => { key => samples } }.
sub jit_profile {
    my ($config) = @_;
    (my $off = $config) =~ s/profiling on;/profiling off;/;
    $t->write_config($off);
    $t->run;
    my %n;
    for (1 .. $ROUNDS) {
        for my $app (sort keys %APP) {
            my $r = $t->get("/jitp/$app");
            die "/jitp/$app: " . ($r->{status} // 'no answer') . "\n"
                unless ($r->{status} // 0) == 200;
            $n{$app}{$2} += $1 while $r->{content} =~ /^(\d+) (.+)$/mg;
        }
    }
    $t->stop or die "nginx did not quit\n";
    return \%n;
}

sub shares {
    my ($n) = @_;
    my $sum = 0;
    $sum += $_ for values %$n;
    return ({ map { $_ => $n->{$_} / $sum } keys %$n }, $sum) if $sum;
    return ({}, 0);
}

# The samples of the apps' locations (CPU, under the lua module) in a
# worker with our sampler, under config.
sub profiled {
    my ($what, $config) = @_;
    $t->write_config($config);
    $t->run;
    ok(ProfWait::wait_until(sub {
           ($t->get('/status?format=text')->{content} // '')
               =~ /^  lua: LuaJIT \S+ \(\S+\): Lua frames/m }, 10),
       "$what: the status page names the LuaJIT found");
    for (1 .. $ROUNDS) {
        for my $app (sort keys %APP) {
            my $r = $t->get("/$app");
            die "/$app: " . ($r->{status} // 'no answer') . "\n"
                unless ($r->{status} // 0) == 200;
        }
    }
    ok($t->stop, "$what: nginx quits (and writes its last profile)");
    my @s = grep { $_->{cpu} > 0 && ProfHotspots::stack_has($_, $ENTRY)
                   && ($_->{endpoint} // '') =~ m{^GET /(md|json)$} }
            ProfHotspots::hotspot_samples(
                ProfPprof::decode_dump_dir($t->dump_dir));
    unlink(glob($t->dump_dir . '/*'));
    return @s;
}

# A sample's app, and the innermost Lua function as jit.profile names it.
sub app_of { ($_[0]{endpoint} =~ m{^GET /(\w+)$})[0] }

sub leaf_key {
    my ($s) = @_;
    my $f = $s->{lua}[0] or return '(no Lua frame)';
    (my $path = $f->{file}) =~ s/^[@=]//;
    return $path . ':' . ($f->{name} =~ /:\d+$/ ? $f->{start_line}
                                                : $f->{name});
}

sub check_run {
    my ($what) = @_;

    # The JIT on: every frame of theirs a function there; the CPU theirs.
    my (%frames, %cpu, @wrong);
    for my $s (profiled($what, $conf)) {
        my $app = app_of($s);
        my $ours;
        for my $f (@{ $s->{lua} }) {
            (my $path = $f->{file}) =~ s/^[@=]//;
            my $l = $LINES{$path} or next;
            $frames{$app}++;
            $ours = 1 if $path eq $APP{$app};
            # A function of the file: its first line, its line, its name;
            # or the file's main chunk (first line 0), run by the first
            # require, on any line of it.
            next if $f->{start_line} == 0 && $f->{line} <= @$l;
            push @wrong, "$f->{name} $f->{file}:$f->{start_line} "
                         . "line $f->{line}"
                unless ($l->[ $f->{start_line} - 1 ] // '') =~ /\bfunction\b/
                       && $f->{line} <= @$l
                       && ($f->{line} == 0 || $f->{line} >= $f->{start_line})
                       && ($f->{name} =~ /:\d+$/
                           || $WORDS{$path}{ $f->{name} });
        }
        $cpu{$app}{total} += $s->{cpu};
        $cpu{$app}{ours} += $s->{cpu} if $ours;
    }
    for my $app (sort keys %APP) {
        my $c = $cpu{$app} // {};
        ok(($c->{total} // 0) >= 2e9
           && ($c->{ours} // 0) >= 0.9 * $c->{total},
           sprintf('%s: %s: %.1f%% of %.0f ms of Lua CPU in %d frames has '
                   . 'one of %s', $what, $app,
                   $c->{total} ? 100 * ($c->{ours} // 0) / $c->{total} : 0,
                   ($c->{total} // 0) / 1e6, $frames{$app} // 0,
                   $APP{$app}));
    }
    ok(!@wrong, "$what: every Lua frame of the apps' files is a function "
                . 'there (' . scalar(@wrong) . ' not)')
        or diag(join("\n", (@wrong)[0 .. ($#wrong < 9 ? $#wrong : 9)]));

    # The JIT off, where jit.profile is exact: the innermost Lua
    # function's share of the CPU in Lua code, ours and jit.profile's.
    (my $interp = $conf)
        =~ s/(profiling on;)/$1\n    init_worker_by_lua_block { jit.off() }/;
    my %n;
    for my $s (profiled("$what, the JIT off", $interp)) {
        $n{ app_of($s) }{ leaf_key($s) } += $s->{cpu} if $s->{lua_leaf};
    }
    my $jitp = jit_profile($interp);
    for my $app (sort keys %COMPARE) {
        my ($ours, $total) = shares($n{$app} // {});
        my ($ref, $samples) = shares($jitp->{$app} // {});
        my ($tvd, @apart) = (0);
        my %keys = map { $_ => 1 } keys %$ours, keys %$ref;
        my $table = '';
        for my $k (sort { ($ref->{$b} // 0) <=> ($ref->{$a} // 0) } keys %keys)
        {
            my ($a, $b) = ($ours->{$k} // 0, $ref->{$k} // 0);
            $tvd += abs($a - $b) / 2;
            push @apart, $k if abs($a - $b) > 0.20;
            $table .= sprintf("  %5.1f%% %5.1f%%  %s\n", 100 * $a, 100 * $b,
                              $k)
                if $a >= 0.01 || $b >= 0.01;
        }
        ok($total >= 1e9 && $samples >= 300 && $tvd <= 0.25 && !@apart,
           sprintf('%s, the JIT off: %s: %.1f%% of %.0f ms of CPU in Lua '
                   . 'code attributed as jit.profile does (%d samples), %d '
                   . 'functions more than 20 points apart', $what, $APP{$app},
                   100 * (1 - $tvd), $total / 1e6, $samples,
                   scalar @apart))
            or diag("  ours   jit.profile\n$table");
    }
}

check_run(ProfEnv::nginx_has('lua-nginx-module')
          ? 'the nginx\'s own LuaJIT' : 'Debian\'s libluajit2');

SKIP: {
    my $lib = ProfEnv::openresty_luajit("$p/lj");
    skip('OpenResty\'s luajit2: Debian\'s lua module and the fixture only',
         1)
        unless $lib;
    local $ENV{LD_LIBRARY_PATH} = "$p/lj";
    check_run('OpenResty\'s luajit2');
}

done_testing();
