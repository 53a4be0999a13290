#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# profiling_ui: the flame graph page, in a real browser (Chromium driven
# by t/ui.js), against nginx under load with no dump directory and no
# agent: the page renders; the function a workload burns is there with
# the width of its share in the pprof the page's link downloads (decoded
# with protoc); a click zooms, a search highlights; a span id shows only
# that request's code; the Lua-land view shows the Lua functions; 10,000
# distinct stacks render in time. The page's data is served while
# profiles close; methods other than GET and HEAD are refused. The
# screenshots stay in the build directory.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(make_path);
use File::Temp;
use HTTP::Tiny;
use POSIX ();
use Time::HiRes qw(time);
use JSON::PP;
use Test::More;

use ProfCommand qw(run_capture);
use ProfEnv;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;

my $modules = $ENV{PROFILING_NODE_MODULES}
              // '/opt/profiling-test/node/node_modules';
my $chromium = $ENV{CHROMIUM} // '/usr/bin/chromium';

my ($node_rc) = run_capture('node', '--version');
plan skip_all => 'no node in PATH (ci/install-deps installs nodejs)'
    if $node_rc != 0;
plan skip_all => "no playwright-core in $modules (ci/install-deps "
                 . 'installs it; PROFILING_NODE_MODULES names another)'
    unless -e "$modules/playwright-core/package.json";
plan skip_all => "no $chromium (ci/install-deps installs chromium)"
    unless -x $chromium;

my @lua_modules = ProfWorkload::jit_workload_modules();
my $lua = @lua_modules ? 1 : 0;

my $t = ProfNginx->new(workers => 2, no_dump_dir => 1,
                       $lua ? (modules => \@lua_modules) : ());
my $p = $t->prefix;

my $SPAN = 'b7ad6b7169203331';
my $TRACE = '0af7651916cd43dd8448eb211c80319c';
my $BURN = 'ngx_http_profiling_burn_spin';

my $lua_conf = '';
my $lua_location = '';
if ($lua) {
    mkdir("$p/lua") or die "$p/lua: $!";
    chmod(0755, "$p/lua");
    open my $fh, '>', "$p/lua/uiapp.lua" or die "$p/lua/uiapp.lua: $!";
    print $fh <<'EOF';
local _M = {}
local sin, clock = math.sin, os.clock

function _M.lua_ui_burn(ms)
    local stop = clock() + ms / 1000
    local s = 0
    while clock() < stop do
        for i = 1, 2000 do s = s + sin(i) end
    end
    return s
end

return _M
EOF
    close $fh;
    chmod(0644, "$p/lua/uiapp.lua");
    $lua_conf = ProfEnv::lua_package_path_directive();
    $lua_conf =~ s/"(.*)";/"$p\/lua\/?.lua;$1";/
        or $lua_conf = "    lua_package_path \"$p/lua/?.lua;;\";\n";
    $lua_location = '        location = /lua { content_by_lua_block {'
                  . ' ngx.say(require("uiapp").lua_ui_burn(3)) } }';
}

$t->write_config(<<"EOF");
    profiling on;
    profiling_period 2s;
    profiling_stall_threshold 10ms;
    profiling_ui_store 4m;
$lua_conf
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 3ms; }
        location /libc { profiling_burn_libc 20ms; }
$lua_location
        location /profiles/ {
            profiling_ui;
            allow 127.0.0.1;
            deny all;
        }
        location = /status { profiling_status; }
    }
EOF
$t->run;

my $base = 'http://127.0.0.1:' . $t->port . '/profiles/';

# Load beside the page: /burn, one request's /libc with its trace, Lua.
my $load = fork() // die "fork: $!";
if ($load == 0) {
    my $http = HTTP::Tiny->new(timeout => 10);
    my $end = time() + 7;
    my $n = 0;
    while (time() < $end) {
        $http->get("${base}../burn");
        $http->get("${base}../lua") if $lua;
        $http->get("${base}../libc", { headers => {
            traceparent => "00-$TRACE-$SPAN-01" } }) if $n++ % 10 == 0;
    }
    POSIX::_exit(0);    # (not exit: the harness would stop nginx)
}

# The page's data while the profiler processes close profiles.
my ($asked, $served) = (0, 0);
while (waitpid($load, POSIX::WNOHANG()) == 0) {
    my $r = $t->get('/profiles/?data=1&window=900');
    $asked++;
    $served++ if $r->{status} == 200
                 && eval { decode_json($r->{content}) };
}
ok($asked > 5 && $served == $asked,
   "the page's data served while profiles close ($served of $asked)");

# The closed profiles of the load (each worker's last one too).
my $data;
ok(wait_until(sub {
        my $r = $t->get('/profiles/?data=1&window=900');
        $data = eval { decode_json($r->{content}) } or return 0;
        return $data->{profiles} >= 4 && $data->{totals}[0] > 1e9;
    }, 20), 'the store holds the load\'s profiles')
    or diag(explain($data && { %$data, frames => undef, stacks => undef }));

my $r = $t->get('/profiles/');
is($r->{status}, 200, 'the page');
like($r->{headers}{'content-type'}, qr{^text/html}, 'as HTML');
is($r->{headers}{'cache-control'}, 'no-store', 'not cached');
like($r->{headers}{'content-security-policy'}, qr{script-src 'self'},
     'under a strict Content-Security-Policy');
unlike($r->{content}, qr{<script>|<style>|style=}, 'no inline script or style');
like($t->get('/profiles/?asset=ui.js')->{headers}{'content-type'},
     qr{^text/javascript}, 'its script from the same location');
is($t->http->request('POST', "$base?data=1")->{status}, 405,
   'POST refused');
is($t->http->request('HEAD', $base)->{status}, 200, 'HEAD answered');
is($t->get('/profiles/?data=1&span_id=xyz')->{status}, 400,
   'a malformed span id refused');
ok($data->{store}{size} > 4_000_000 && $data->{store}{size} <= 4 << 20,
   "the store: $data->{store}{size} bytes, $data->{store}{used} used, "
   . "$data->{store}{records} profiles");

my $status = eval { decode_json($t->get('/status')->{content}) } // {};
is($status->{ui_store}{size}, $data->{store}{size},
   'the status page shows the store');

# The browser.
my $out = ProfEnv::build_dir() . '/ui';
make_path($out);
my ($rc, $json);
{
    local $ENV{NODE_PATH} = $modules;
    local $ENV{CHROMIUM} = $chromium;
    ($rc, $json) = run_capture('node', "$FindBin::Bin/ui.js", $base, $out,
                               $SPAN, $BURN, $TRACE, 'GET /libc');
}
my ($line) = grep { /^\{/ } split /\n/, $json;
my $b = eval { decode_json($line // '') } // {};
is($rc, 0, 'the browser ran') or diag($json);
BAIL_OUT("the browser: $b->{fatal}") if $b->{fatal};
is($b->{error}, undef, 'the page loaded its data');
is_deeply($b->{errors}, [], 'no error in the page\'s console');
diag("screenshots: $out/ui.png, ui-zoom.png, ui-search.png, ui-lua.png, "
     . 'ui-10000.png');

ok(scalar(grep { $_ ne 'all' } @{ $b->{workers} }) == 2,
   'both workers to choose from') or diag(explain($b->{workers}));

# The function's width against its share in the downloaded pprof.
my $pprof = File::Temp->new(TEMPLATE => 'ui-XXXXXX', TMPDIR => 1);
like($b->{download}, qr{\?(?=.*pprof=1)(?=.*at=\d+)},
     "the download link, as of the data shown: $b->{download}");
my $dl = $t->http->mirror($b->{download}, $pprof->filename);
ok($dl->{success}, 'the pprof downloaded');
my $prof = ProfPprof::decode_raw($pprof->filename);
my $vi = ProfPprof::value_index($prof, 'cpu-time');
my ($in, $total) = (0, 0);
for my $s (@{ $prof->{sample} }) {
    my $v = $s->{value}[$vi] // 0;
    $total += $v;
    $in += $v if grep { $_ eq $BURN }
                 map { ProfPprof::function_names($prof, $_) }
                 @{ $s->{location_id} };
}
my $share = $total ? $in / $total : 0;
ok($share > 0.02, sprintf('%s: %.1f%% of the pprof\'s CPU', $BURN,
                         100 * $share));
ok(abs($b->{all}{share} - $share) < 0.03,
   sprintf('its width on the page: %.1f%% (pprof: %.1f%%)',
           100 * $b->{all}{share}, 100 * $share));

SKIP: {
    my ($go_rc) = run_capture('go', 'version');
    skip 'no go (golang-go) for go tool pprof', 2 if $go_rc != 0;
    my ($rc, $top) = run_capture('go', 'tool', 'pprof', '-top',
                                 '-nodecount=5', $pprof->filename);
    like($top, qr/^Type: cpu-time$/m,
         'go tool pprof opens it, on the sample type shown') or diag($top);
    like($top, qr/\Q$BURN\E/, 'with the same function');
}

is($b->{zoom}{name}, $BURN, 'a click zooms into the frame');
ok($b->{zoom}{width} > 0.99, 'which then spans the graph')
    or diag(explain($b->{zoom}));
like($b->{zoom}{url}, qr/zoom=/, 'the zoom is in the link');
is($b->{zoom}{again}, $BURN, 'which opens zoomed there');
ok($b->{search}{marked} > 0 && abs($b->{search}{share} - $share) < 0.03,
   "a search highlights, saying the share the pprof gives "
   . sprintf('(%.1f%%): %s', 100 * $share, $b->{search}{text}))
    or diag(explain($b->{search}));
like($b->{search}{url}, qr{search=}, 'the search is in the link');

my %span = map { $_ => 1 } @{ $b->{span}{names} };
ok($span{ngx_http_profiling_burn_libc},
   'the span id: that request\'s code') or diag(explain($b->{span}));
ok(!$span{$BURN}, 'and none of the other requests\'');

my %trace = map { $_ => 1 } @{ $b->{trace}{names} };
ok($trace{ngx_http_profiling_burn_libc} && !$trace{$BURN},
   'the trace id: that request\'s code only') or diag(explain($b->{trace}));
my %endpoint = map { $_ => 1 } @{ $b->{endpoint}{names} };
ok($endpoint{ngx_http_profiling_burn_libc} && !$endpoint{$BURN},
   'an endpoint: its requests\' code only')
    or diag(explain($b->{endpoint}));
is($b->{endpointChosen}, 'GET /libc', 'the endpoint chosen in its list');
my %stalls = map { $_ => 1 } @{ $b->{stalls}{names} };
ok($stalls{ngx_http_profiling_burn_libc},
   'stalls only: the code of the 20 ms requests (over the 10 ms threshold)')
    or diag(explain($b->{stalls}));
ok($b->{off} > 0, 'off-CPU time');

SKIP: {
    skip 'no lua module', 3 unless $lua;
    my %lua = map { $_ => 1 } @{ $b->{lua}{names} };
    ok(scalar(grep { /lua_ui_burn/ } keys %lua),
       'the Lua-land view: the Lua function') or diag(explain($b->{lua}));
    ok(!$lua{$BURN}, 'and no frame outside Lua-land');
    ok(scalar(grep { $_->[0] =~ /uiapp/ } @{ $b->{luaFiles} }),
       'CPU by Lua file: ' . join(', ', map { "@$_" } @{ $b->{luaFiles} }));
}

ok($b->{wall} > 0, 'wall time');
ok($b->{compared}, 'a comparison with the window before');

my $m = $b->{many};
diag(sprintf('10,000 stacks: drawn in %.0f ms (data to graph), the page '
             . 'in %d ms, %d frames drawn', $m->{render_ms}, $m->{page_ms},
             $m->{rects}));
ok($m->{rects} > 300,
   'the 10,000 stacks drawn (those of half a pixel or more)');
ok($m->{render_ms} < 3000, 'in under 3 s (1 s expected; the margin is '
                           . 'for a loaded machine)');

# A reload keeps the store: the old workers' profiles stay, the new
# workers' come beside them.
my @old = $t->worker_pids;
$t->reload;
my %old = map { $_ => 1 } @old;
my @new;
ok(wait_until(sub {
        @new = grep { !$old{$_} } $t->worker_pids;
        return @new == 2;
    }, 20), 'reloaded: two new workers');
ok(wait_until(sub {
        $t->get('/burn');
        my $d = eval { decode_json(
            $t->get('/profiles/?data=1&window=900')->{content}) } or return 0;
        my %pids = map { $_->{pid} => 1 } @{ $d->{workers} };
        return scalar(grep { $pids{$_} } @old) == 2
               && scalar(grep { $pids{$_} } @new) >= 1;
    }, 30), 'the store holds the old workers\' profiles and the new ones\'');

$t->stop;
done_testing();
