#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Names of static functions in stripped libraries from a debuginfod server
# (Debian's debuginfod, serving a directory of debug files), as
# DEBUGINFOD_URLS passed to the workers with "env" names it: a library
# whose debug file the server has gets its static function named; one it
# lacks is asked once and stays unnamed; one with its own .symtab is never
# asked; the cache keeps to its bound; with "profiling_debuginfod off"
# nothing is asked and nothing is named.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfCommand;
use ProfHotspots;
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfServers;
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;
for my $tool (qw(gcc objcopy readelf debuginfod curl)) {
    plan(skip_all => "no $tool")
        unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}
plan(skip_all => 'no libdebuginfod.so.1 (Debian package libdebuginfod1)')
    unless grep { -e "$_/libdebuginfod.so.1" }
           qw(/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64);

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

# A shell command run in $p/lib (its output; dies when it fails).
sub sh { ProfCommand::shell_in("$p/lib", $_[0]) }

# debuginfod_burn(ms) spins in a static function for ms of CPU; SALT makes
# each build of it an object of its own (its own build id).
mkdir("$p/lib") or die;
open(my $fh, '>', "$p/lib/burn.c") or die;
print $fh <<'EOF';
#include <time.h>

static double __attribute__((noinline, noclone))
debuginfod_hidden_spin(long n)
{
    double  s = 0;
    long    i;

    for (i = 0; i < n; i++) {
        s += (double) (i % SALT) * 0.5;
        __asm__ volatile ("" : : : "memory");
    }

    return s;
}

static long
cpu_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double
debuginfod_burn(long ms)
{
    long    end;
    double  s = 0;

    end = cpu_ms() + ms;

    while (cpu_ms() < end) {
        s += debuginfod_hidden_spin(200000);
    }

    return s;
}
EOF
close($fh);

# served: stripped, its debug file on the server; unserved: stripped, the
# server lacks it; named: not stripped (its .symtab names everything).
my (%LIB, %ID);
mkdir("$p/lib/served-debug") or die;
for my $way (qw(served unserved named)) {
    my $salt = { served => 7, unserved => 11, named => 13 }->{$way};
    sh("mkdir $way && gcc -O2 -g -DSALT=$salt -shared -fPIC -Wl,--build-id"
       . " -o $way/full.so burn.c");
    if ($way eq 'named') {
        sh("cp $way/full.so $way/libburn.so");
    } else {
        sh("objcopy --strip-all $way/full.so $way/libburn.so");
    }
    ($ID{$way}) = sh("readelf -n $way/full.so") =~ /Build ID: ([0-9a-f]+)/
        or die "no build id";
    $LIB{$way} = "$p/lib/$way/libburn.so";
}
sh('objcopy --only-keep-debug served/full.so served-debug/served.debug'
   . ' && chmod -R a+rX .');

# The server, ready once it serves the debug file.
my $url = ProfServers::debuginfod_server($t, "$p/lib/served-debug",
                                         $ID{served});
ok($url, 'the debuginfod server serves the debug file');
my $dlog = "$p/debuginfod.log";

# What the server was asked by libdebuginfod (curl's own asks left out):
# the times build id was, or every build id and its times.
sub asks {
    open(my $in, '<', $dlog) or return ();
    my %n;
    for (<$in>) {
        $n{$1}++ if m{GET /buildid/([0-9a-f]+)/debuginfo } && !/UA:curl/;
    }
    return %n;
}
sub asked { my %n = asks(); return $n{ $_[0] } // 0 }

# The cache, with an old entry of 2 MB that its 1m bound must drop.
my $cache = "$p/debuginfod-cache";
my $stale = 'ab' x 20;
mkdir($cache) or die;

mkdir("$cache/$stale") or die;
open($fh, '>', "$cache/$stale/debuginfo") or die;
print $fh "\0" x (2 << 20);
close($fh);
utime(time - 86400, time - 86400, "$cache/$stale/debuginfo");
$t->chown_to_user($_)
    for ($cache, "$cache/$stale", "$cache/$stale/debuginfo");

sub config {
    my ($directive, $urls, $cache_dir) = @_;
    $urls //= $url;
    $cache_dir //= $cache;
    my $locations = join('', map { <<"EOF" } sort keys %LIB);
        location /$_ {
            content_by_lua_block {
                local lib = ffi.load("$LIB{$_}")
                ngx.say(lib.debuginfod_burn(30))
            }
        }
EOF
    $t->write_config(<<"EOF", main => "env DEBUGINFOD_URLS=$urls;");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    profiling_debuginfod_cache $cache_dir max_size=1m;
    $directive

    init_by_lua_block {
        ffi = require "ffi"
        ffi.cdef[[double debuginfod_burn(long ms);]]
    }

    server {
        listen 127.0.0.1:%%PORT%%;
        location = /status { profiling_status; }
$locations
    }
EOF
}

sub serve_and_profile {
    my ($status_has) = @_;
    for my $way (sort keys %LIB) {
        my @bad = grep { ($t->get("/$way")->{status} // 0) != 200 } 1 .. 15;
        is(scalar(@bad), 0, "/$way: 15 requests answered 200");
    }
    if ($status_has) {
        my $text = '';
        ok(ProfWait::wait_until(sub {
               $text = $t->get('/status?format=text')->{content} // '';
               $text =~ $status_has }, 10),
           "the status page says $status_has") or diag($text);
    }
    ok($t->stop, 'nginx quits (and writes its last profile)');
    my @s = grep { $_->{cpu} > 0 }
            ProfHotspots::hotspot_samples(
                ProfPprof::decode_dump_dir($t->dump_dir));
    unlink(glob($t->dump_dir . '/*'));
    return \@s;
}

config('');
$t->run;
my $S = serve_and_profile(qr/symbols: .*\Q$LIB{served}\E debuginfod/);

my ($by, $total) = ProfHotspots::leaf_cpu_in($S, $LIB{served});
my $named = $by->{debuginfod_hidden_spin} // 0;
ok($total >= 200e6 && $named >= 0.95 * $total,
   sprintf('served: %.1f%% of the %.0fms of cpu-time in the stripped '
           . 'library carries debuginfod_hidden_spin',
           $total ? 100 * $named / $total : 0, $total / 1e6))
    or diag('by leaf: ' . ProfHotspots::format_cpu_by($by));
is(asked($ID{served}), 1, 'served: its debug file was asked once');
ok(-s "$cache/$ID{served}/debuginfo", 'served: the debug file is cached');
ok(!-e "$cache/$stale", 'the cache kept to its bound: the old entry went');
is(`cat '$cache/cache_miss_s'` + 0, 600,
   'libdebuginfod remembers a missing file for the period, no longer');

($by, $total) = ProfHotspots::leaf_cpu_in($S, $LIB{unserved});
ok($total >= 200e6 && !$by->{debuginfod_hidden_spin},
   sprintf('unserved: %.0fms of cpu-time, none of it named',
           $total / 1e6))
    or diag('by leaf: ' . ProfHotspots::format_cpu_by($by));
is(asked($ID{unserved}), 1, 'unserved: asked once in the period');

($by, $total) = ProfHotspots::leaf_cpu_in($S, $LIB{named});
$named = $by->{debuginfod_hidden_spin} // 0;
ok($total >= 200e6 && $named >= 0.95 * $total,
   'named: its own .symtab names it')
    or diag('by leaf: ' . ProfHotspots::format_cpu_by($by));
is(asked($ID{named}), 0, 'named: never asked');

# Every ask of the profiler reached the server once (asked again, a file
# would come from libdebuginfod's cache: the counter tells).
my %asks = asks();
my %c = %{ ProfLog::last_exit_counters($t->error_log) // {} };
is($c{debuginfod_asked}, scalar(keys %asks),
   'each build id the profiler asked for, the server was asked once for')
    or diag(join(' ', %asks));
is(scalar(grep { $_ != 1 } values %asks), 0, 'none asked twice');
is($c{debuginfod_found}, 1, 'one debug file found (counted)');

like($t->error_log,
     qr/"\Q$LIB{served}\E": all functions named by the debug file of build id $ID{served} from debuginfod/,
     'a line says where the names came from');

# Off: nothing asked, nothing named (the cache emptied first).
system("rm -rf '$cache/$ID{served}'");
config('profiling_debuginfod off;');
$t->run;
$S = serve_and_profile();

($by, $total) = ProfHotspots::leaf_cpu_in($S, $LIB{served});
ok($total >= 200e6 && !$by->{debuginfod_hidden_spin},
   sprintf('off: %.0fms of cpu-time in the stripped library, none named',
           $total / 1e6))
    or diag('by leaf: ' . ProfHotspots::format_cpu_by($by));
is(asked($ID{served}) + asked($ID{unserved}), 2, 'off: nothing more asked');

# A server that takes connections and never answers: the first fetch is
# given up at the timeout, the server then counted down for the period (no
# other build id tried), the profile written at the exit as ever.
my $silent = ProfServers::start_silent_server();

mkdir("$p/silent-cache") or die;
$t->chown_to_user("$p/silent-cache");
config("profiling_upload_timeout 1s;",
       'http://127.0.0.1:' . $silent->{port}, "$p/silent-cache");
$t->run;
$S = serve_and_profile(qr/debuginfod_failed=(?:[2-9]|\d\d)/);
($by, $total) = ProfHotspots::leaf_cpu_in($S, $LIB{served});
ok($total >= 200e6, sprintf('a silent server: the profile has the '
                            . '%.0fms of cpu-time, unnamed', $total / 1e6));
%c = %{ ProfLog::last_exit_counters($t->error_log) // {} };
my $connections = $silent->{accepted}->();
ok(($c{debuginfod_failed} // 0) >= 2 && ($c{debuginfod_found} // 1) == 0,
   "a silent server: every fetch failed, counted "
   . "($c{debuginfod_failed} failed)");
ok($connections >= 1 && $connections <= 2,
   "a silent server: tried for one build id only ($connections "
   . 'connections)');

done_testing();
