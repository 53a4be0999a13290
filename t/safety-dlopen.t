#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Libraries loaded and unloaded at run time while the profiler samples
# every 1 ms: under load for 60 s, every request of a Lua location loads
# system libraries with ffi.load, calls a function of each and lets the
# garbage collector unload them (dlopen and dlclose), and requires a Lua C
# module (lua-cjson), with MALLOC_ARENA_MAX=1 in nginx's environment (one
# malloc arena for all threads). Requests keep completing every second on
# every worker, and no worker dies.
#
# PROFILING_DLOPEN_SECONDS shortens or lengthens the load (default 60).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use List::Util qw(max min);
use Test::More;

use ProfEnv;
use ProfFiles;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my $SECONDS = $ENV{PROFILING_DLOPEN_SECONDS} || 60;

my $LUA = ProfEnv::engines()->{lua};
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless $LUA;
plan(skip_all => 'wrk is missing: ci/install-deps')
    unless grep { -x "$_/wrk" } split /:/, $ENV{PATH};
plan(skip_all => 'lua-cjson is missing: ci/install-deps')
    unless -e '/usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so';

$ENV{MALLOC_ARENA_MAX} = 1;

my $t = ProfNginx->new(workers => 2,
                       modules => [ 'ngx_http_profiling_module', @$LUA ]);

# Libraries nginx does not load itself (bz2, expat, uuid) are mapped and
# unmapped on every round; the others only counted.
$t->write_config(<<'EOF', main => $t->core_main);
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;
    profiling_interval 1ms;
    lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";

    init_by_lua_block {
        local ffi = require "ffi"
        ffi.cdef[[
            const char *zlibVersion(void);
            double cbrt(double x);
            const char *BZ2_bzlibVersion(void);
            const char *lzma_version_string(void);
            const char *XML_ExpatVersion(void);
            void uuid_generate(unsigned char out[16]);
        ]]
    }

    log_format safety '$pid $msec $status';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%PREFIX%%/access.log safety;

        location /dl {
            content_by_lua_block {
                local ffi = require "ffi"
                local calls = {
                    { "libz.so.1", function (l)
                          return ffi.string(l.zlibVersion()) end },
                    { "libm.so.6", function (l)
                          return tostring(l.cbrt(27)) end },
                    { "libbz2.so.1.0", function (l)
                          return ffi.string(l.BZ2_bzlibVersion()) end },
                    { "liblzma.so.5", function (l)
                          return ffi.string(l.lzma_version_string()) end },
                    { "libexpat.so.1", function (l)
                          return ffi.string(l.XML_ExpatVersion()) end },
                    { "libuuid.so.1", function (l)
                          local u = ffi.new("unsigned char[16]")
                          l.uuid_generate(u)
                          return "uuid" end },
                }
                local out = {}
                for round = 1, 3 do
                    for _, c in ipairs(calls) do
                        out[c[1]] = c[2](ffi.load(c[1]))
                    end
                    collectgarbage()
                end
                package.loaded.cjson = nil
                local cjson = require "cjson"
                ngx.say(cjson.encode(out))
            }
        }
    }
EOF
$t->run;
my @workers = $t->worker_pids;

my $first = $t->get('/dl');
like($first->{content} // '', qr/"libbz2\.so\.1\.0":"1\.0/,
     'a request loads the libraries and calls them');

my $r = ProfWorkload::wrk($t, path => '/dl', seconds => $SECONDS,
                          connections => 8,
                          headers => [ 'Connection: close' ]);
ok($r->{requests} > $SECONDS && $r->{non2xx} == 0
   && $r->{socket_errors} == 0,
   "wrk for ${SECONDS}s: $r->{requests} requests, $r->{non2xx} not 2xx, "
   . "$r->{socket_errors} socket errors") or diag($r->{output});

is_deeply([ $t->worker_pids ], \@workers,
          "the same workers (@workers) served the load");
is($t->get('/dl')->{status}, 200, 'nginx serves after the load');
ok($t->stop, 'nginx quits');
$t->ok_no_worker_died('dlopen');

# Completions by second of the load, over all workers and for each.
my (%by_second, %by_worker_second, $from, $to);
for (ProfFiles::file_lines($t->prefix . '/access.log')) {
    my ($pid, $msec, $status) = split ' ';
    next unless $status && $status == 200;
    my $s = int($msec);
    $by_second{$s}++;
    $by_worker_second{$pid}{$s}++;
    $from = $s if !defined $from || $s < $from;
    $to = $s if !defined $to || $s > $to;
}

# The first and last seconds are partial: the whole ones in between.
my @seconds = defined $from ? ($from + 1 .. $to - 1) : ();
my @empty = grep { !$by_second{$_} } @seconds;
ok(@seconds >= $SECONDS - 3 && !@empty,
   sprintf('requests completed in every second of the load (%d seconds, '
           . '%d to %d a second)', scalar(@seconds),
           min(map { $by_second{$_} // 0 } @seconds) // 0,
           max(map { $by_second{$_} // 0 } @seconds) // 0))
    or diag('seconds without a request: '
            . join(' ', map { $_ - $from } @empty));

# A worker that hangs answers nothing for good: every worker answers in
# every 2 s of the load (connections go to whichever worker is free).
for my $w (@workers) {
    my @gaps = grep { !$by_worker_second{$w}{$_}
                      && !$by_worker_second{$w}{$_ + 1} }
               @seconds[0 .. $#seconds - 1];
    ok(!@gaps, "worker $w answered in every 2s of the load")
        or diag('2s without a request from ' . join(' ',
                map { $_ - $from } @gaps));
}

my @profiles = ProfPprof::decode_dump_dir($t->dump_dir);
my @S = ProfHotspots::hotspot_samples(@profiles);
my $dl_ns = ProfHotspots::sum_cpu(grep {
    grep { m{/ld-linux|libbz2|libexpat|libuuid} } @{ $_->{objects} } } @S);
ok($dl_ns > 0, sprintf('the profiles (%d) hold %.0fms of cpu-time in the '
   . 'dynamic loader and the libraries it loads', scalar(@profiles),
   $dl_ns / 1e6));

done_testing();
