#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Names of the static functions of a library nobody here wrote, as
# distributions ship their names: OpenResty's LuaJIT (the luajit2 sources
# of ../shared/fixtures/openresty), built with -g and stripped, loaded by
# Debian's lua module in place of Debian's own (LD_LIBRARY_PATH), its CPU
# in table.sort's static C functions (auxsort, sort_comp, index2adr). For
# each source of names (the debug file its .gnu_debuglink names, beside
# it; MiniDebugInfo made as Fedora's find-debuginfo makes it; a debuginfod
# server) at least 95% of that CPU carries its real name; with none, none.

use strict;
use warnings;

use Cwd qw(realpath);
use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfCommand;
use ProfEnv;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfServers;
use ProfWait;
use ProfWorkload;

my ($tarball) = glob(realpath("$FindBin::Bin/../..")
                     . '/shared/fixtures/openresty/luajit2-*.tar.gz');
plan(skip_all => 'no luajit2 sources in ../shared/fixtures/openresty')
    unless $tarball;
my $lua_module = ProfEnv::debian_module('ngx_http_lua_module');
plan(skip_all => 'Debian\'s nginx with libnginx-mod-http-lua only')
    unless $lua_module
           && grep { $_ eq $lua_module } ProfWorkload::jit_workload_modules();
plan(skip_all => 'the lua module does not load libluajit-5.1.so.2')
    unless `ldd $lua_module` =~ /libluajit-5\.1\.so\.2/;
for my $tool (qw(gcc make objcopy nm xz readelf debuginfod curl)) {
    plan(skip_all => "no $tool")
        unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}

my $t = ProfNginx->new(workers => 1,
                       modules => [ ProfWorkload::jit_workload_modules() ]);
my $p = $t->prefix;

# A shell command run in $p/lj (its output; dies when it fails).
sub sh { ProfCommand::shell_in("$p/lj", $_[0]) }

# The library as its sources build it, with its symbols and DWARF.
mkdir("$p/lj") or die;
sh("tar xzf '$tarball' && cd luajit2-* && make -j2 BUILDMODE=dynamic"
   . " CCDEBUG=-g PREFIX=/usr >../build.log && cp src/libluajit.so ../full.so");
my $so = 'libluajit-5.1.so.2';
my ($id) = sh('readelf -n full.so') =~ /Build ID: ([0-9a-f]+)/
    or die 'no build id';

# Its static functions: name => [start, end) as ELF addresses.
my %STATIC;
for (split /\n/, sh('nm -S --defined-only full.so')) {
    my ($addr, $size, $type, $name) = split ' ';
    next unless defined $name && $type eq 't';
    $STATIC{$name} = [ hex($addr), hex($addr) + hex($size) ];
}
sub static_of {
    my ($leaf) = @_;
    return $leaf if exists $STATIC{$leaf};
    return undef unless $leaf =~ /^0x([0-9a-f]+)$/;
    my $a = hex($1);
    for (keys %STATIC) {
        return $_ if $a >= $STATIC{$_}[0] && $a < $STATIC{$_}[1];
    }
    return undef;
}

# Each way in a directory of its own, the library under its soname.
sh('objcopy --only-keep-debug full.so libluajit.debug'
   . ' && objcopy --strip-all full.so stripped.so'
   . " && mkdir beside minidebuginfo debuginfod none served"
   . " && objcopy --add-gnu-debuglink=libluajit.debug stripped.so beside/$so"
   . ' && cp libluajit.debug beside/ && cp libluajit.debug served/'
   . " && cp stripped.so debuginfod/$so && cp stripped.so none/$so");
sh('nm -D full.so --format=posix --defined-only | awk \'{ print $1 }\''
   . '    | sort > dynsyms'
   . ' && nm full.so --format=posix --defined-only'
   . '    | awk \'{ if ($2 == "T" || $2 == "t") print $1 }\' | sort > funcsyms'
   . ' && comm -13 dynsyms funcsyms > keep_symbols'
   . ' && objcopy -S --remove-section .gdb_index --remove-section .comment'
   . '    --keep-symbols=keep_symbols libluajit.debug mini_debuginfo'
   . ' && xz mini_debuginfo'
   . ' && objcopy --add-section .gnu_debugdata=mini_debuginfo.xz'
   . "    stripped.so minidebuginfo/$so && chmod -R a+rX .");

# The debuginfod server for the debuginfod way.
my $url = ProfServers::debuginfod_server($t, "$p/lj/served", $id);
ok($url, 'the debuginfod server serves the debug file');

for my $way (qw(beside minidebuginfo debuginfod none)) {
    my $main = $way eq 'debuginfod' ? "env DEBUGINFOD_URLS=$url;" : '';
    $t->write_config(<<'EOF', main => $main);
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_debuginfod_cache %%PREFIX%%/debuginfod-cache;

    server {
        listen 127.0.0.1:%%PORT%%;
        location = /status { profiling_status; }
        location /sort {
            content_by_lua_block {
                local clock = os.clock
                local stop = clock() + 0.03
                local n = 0
                while clock() < stop do
                    local t = {}
                    for i = 1, 2000 do t[i] = (i * 7919) % 2003 end
                    table.sort(t)
                    n = n + 1
                end
                ngx.say(n)
            }
        }
    }
EOF
    {
        local $ENV{LD_LIBRARY_PATH} = "$p/lj/$way";
        $t->run;
    }
    my @bad = grep { ($t->get('/sort')->{status} // 0) != 200 } 1 .. 30;
    is(scalar(@bad), 0, "$way: 30 requests answered 200");
    if ($way eq 'debuginfod') {
        my $text = '';
        ok(ProfWait::wait_until(sub {
               $text = $t->get('/status?format=text')->{content} // '';
               $text =~ /\Q$so\E debuginfod/ }, 30),
           'debuginfod: the status page says the names came from it')
            or diag($text);
    }
    ok($t->stop, "$way: nginx quits (and writes its last profile)");

    my (%by, $total, $named);
    $total = $named = 0;
    for my $s (ProfHotspots::hotspot_samples(
                   ProfPprof::decode_dump_dir($t->dump_dir)))
    {
        next unless $s->{cpu} > 0
                    && ($s->{objects}[0] // '') eq "$p/lj/$way/$so";
        my $static = static_of($s->{funcs}[0] // '') // next;
        $total += $s->{cpu};
        $named += $s->{cpu} if $s->{funcs}[0] eq $static;
        $by{ $s->{funcs}[0] } += $s->{cpu};
    }
    unlink(glob($t->dump_dir . '/*'));

    if ($way eq 'none') {
        ok($total >= 100e6 && $named == 0,
           sprintf('none: %.0fms of cpu-time in static functions, none '
                   . 'named', $total / 1e6))
            or diag('by leaf: ' . ProfHotspots::format_cpu_by(\%by));
    } else {
        ok($total >= 100e6 && $named >= 0.95 * $total,
           sprintf('%s: %.1f%% of the %.0fms of cpu-time in static '
                   . 'functions carries their names', $way,
                   $total ? 100 * $named / $total : 0, $total / 1e6))
            or diag('by leaf: ' . ProfHotspots::format_cpu_by(\%by));
    }
}

done_testing();
