#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The three backends at once under a workload this project did not write:
# Debian's nginx, 2 workers, wrk on 8 connections for 15 s against gzip'd
# static files (4-100 KB), the same files proxied through a second server
# of the same nginx (gzip'd by the front), and Lua (Debian's lua-dkjson
# encoding and decoding records, then an HTML list made of them with
# string functions); 1,000 distinct URIs, every request with a W3C
# traceparent of its own (trace and parent span ids). The profiles go every
# 5 s to the stand-in agent, Pyroscope and OTLP receiver.
#
# Per worker and period (matched by the profile's start time):
# - the CPU time is the same in the three, within 1%;
# - "the CPU of traced requests" is the CPU of the samples of the Datadog
#   pprof that carry a span label (every request here is traced, so these
#   are the samples taken while a request ran); of it, at least 95% must
#   carry span_id and trace_id (the request's own) in Pyroscope's
#   profiles, and a Link (the request's trace and span ids) in OTLP's,
#   each span given no more CPU than its Datadog labels give it;
# - Pyroscope gets fewer than 50 series for the 1,000 URIs.
# The load is what it says: gzip, the proxy's event pipe, Lua and the
# static files each take at least 5% of the CPU, and the agent's
# endpoint_counts count 1,000 URIs.
#
# Then a second nginx, the same with a profile every 2 s: warmed up, 6 s of
# load with every backend answering, then 6 s with the agent hanging (it never
# answers; the upload gives up after 10 s), the same with Pyroscope, with
# the OTLP receiver, and again all answering. Against the mean of the two
# answering runs, each hanging run keeps at least half the throughput, at
# most twice the median latency (+2 ms) and at most 1.3 times the workers'
# CPU a request (the machine is noisy: two shared cores); the other two
# backends go on getting profiles.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use HTTP::Tiny;
use JSON::PP;
use Test::More;

use ProfAgent;
use ProfCommand qw(run_capture);
use ProfEnv;
use ProfFiles ();
use ProfHTTP;
use ProfHotspots ();
use ProfLog qw(last_exit_counters);
use ProfNginx;
use ProfOtlp;
use ProfPprof;
use ProfProc ();
use ProfPyroscope;
use ProfWait;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (Debian\'s nginx with '
                 . 'libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;
plan(skip_all => 'wrk is missing: ci/install-deps')
    unless grep { -x "$_/wrk" } split /:/, $ENV{PATH};
my $DKJSON = '/usr/share/lua/5.1/dkjson.lua';
plan(skip_all => "no $DKJSON (lua-dkjson: ci/install-deps)")
    unless -r $DKJSON;

my $WRK_CONNECTIONS = 8;
my $WRK_THREADS = 2;
my @SIZES = (4_000, 8_000, 16_000, 24_000, 32_000, 48_000, 64_000, 100_000);

sub hex_of { unpack('H*', $_[0]) }

# The trace id the wrk script gives the request of parent span id $span.
sub trace_of_span { "e2e0$_[0]00000000cafe" }

# A span id of the wrk script's (its thread, then its request's number).
sub our_span {
    my ($span) = @_;
    return $span =~ /^000[1-9a-f][0-9a-f]{12}$/ && $span ne '0001000000000000';
}

# An nginx with the workload, its profiles to the three receivers.
sub start_nginx {
    my ($agent, $py, $otlp, $period) = @_;
    $period //= '5s';
    my $t = ProfNginx->new(workers => 2, modules => \@MODULES,
                           agent_url => "http://$agent");
    my $p = $t->prefix;
    my $upstream = ProfHTTP::free_port();

    for my $dir ("$p/html", "$p/html/files", "$p/lua") {
        mkdir($dir) or die "$dir: $!";
        chmod(0755, $dir);
    }
    chmod(0755, $p);
    ProfWorkload::write_words_file("$p/html/files/f$_.txt", $SIZES[$_])
        for 0 .. $#SIZES;

    open(my $fh, '>', "$p/lua/render.lua") or die;
    print $fh <<'EOF';
local json = require("dkjson")
return function(uri)
    local items = {}
    for i = 1, 120 do
        items[i] = { id = i, uri = uri, name = "item " .. i,
                     price = i * 1.25,
                     tags = { "a" .. i % 7, "b" .. i % 11, "c" } }
    end
    local doc = json.decode(json.encode({ uri = uri, items = items }))
    local out = {}
    for _, it in ipairs(doc.items) do
        out[#out + 1] = ("<li id=\"%d\">%s: %.2f [%s] %s</li>"):format(
            it.id, it.name:upper(), it.price, table.concat(it.tags, ","),
            it.uri:gsub("/", " / "))
    end
    local page = table.concat(out, "\n"):gsub("ITEM (%d+)", "Item #%1")
    return "<ul>\n" .. page .. "\n</ul>\n"
end
EOF
    close($fh);
    chmod(0644, "$p/lua/render.lua");

    my $lua_path = ProfEnv::lua_package_path_directive();
    $lua_path =~ s/"(.*)";/"$p\/lua\/?.lua;$1\/usr\/share\/lua\/5.1\/?.lua";/
        or $lua_path = "    lua_package_path "
                       . "\"$p/lua/?.lua;;/usr/share/lua/5.1/?.lua\";\n";

    $t->write_config(<<"EOF");
$lua_path
    profiling on;
    profiling_agent_url http://$agent;
    profiling_pyroscope_url http://$py;
    profiling_otlp_url http://$otlp;
    profiling_period $period;
    profiling_upload_timeout 10s;

    gzip on;
    gzip_comp_level 6;
    gzip_min_length 256;
    gzip_types text/plain text/html;
    access_log off;

    upstream files { server 127.0.0.1:$upstream; keepalive 8; }

    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location ~ ^/static/\\d+/(?<f>f\\d\\.txt)\$ {
            alias $p/html/files/\$f;
        }
        location ~ ^/proxy/\\d+/(?<f>f\\d\\.txt)\$ {
            proxy_pass http://files/files/\$f;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Accept-Encoding "";
        }
        location /lua/ {
            default_type text/html;
            content_by_lua_block {
                ngx.print(require("render")(ngx.var.uri))
            }
        }
        location = /status { profiling_status; }
    }
    server {
        listen 127.0.0.1:$upstream reuseport;
        gzip off;
        root $p/html;
    }
EOF
    $t->run;
    return $t;
}

# wrk's script: 1,000 distinct URIs (a third static, a third proxied, a
# third Lua), each request a traceparent of its own: parent span id = the
# thread and the request's number, trace id made of it (trace_of_span).
sub wrk_script {
    my ($t) = @_;
    my $file = $t->prefix . '/wrk-traced.lua';
    open(my $fh, '>', $file) or die "$file: $!";
    print $fh <<'EOF';
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end
local counter = 0
function request()
    counter = counter + 1
    local id = tid or 15
    local n = (counter * 7 + id * 331) % 1000
    local path
    if n % 3 == 0 then
        path = "/static/" .. n .. "/f" .. (n % 8) .. ".txt"
    elseif n % 3 == 1 then
        path = "/proxy/" .. n .. "/f" .. (n % 8) .. ".txt"
    else
        path = "/lua/" .. n
    end
    local span = string.format("%04x%012x", id, counter)
    local trace = "e2e0" .. span .. "00000000cafe"
    return wrk.format("GET", path, {
        ["Accept-Encoding"] = "gzip",
        ["traceparent"] = "00-" .. trace .. "-" .. span .. "-01" })
end
EOF
    close($fh);
    return $file;
}

# Seconds of a wrk latency ("812.00us", "3.41ms", "1.02s").
sub seconds_of {
    my ($v) = @_;
    my ($n, $u) = $v =~ /^([\d.]+)(us|ms|s|m)$/ or return undef;
    return $n * { us => 1e-6, ms => 1e-3, s => 1, m => 60 }->{$u};
}

# wrk with the traced script for $seconds: { requests, rps, p50, p99,
# non2xx, errors, output }.
sub run_wrk {
    my ($t, $seconds) = @_;
    my ($rc, $out) = run_capture('wrk', '-t', $WRK_THREADS,
                                 '-c', $WRK_CONNECTIONS, '-d', "${seconds}s",
                                 '--timeout', '30s', '--latency',
                                 '-s', wrk_script($t),
                                 'http://127.0.0.1:' . $t->port);
    die "wrk failed (exit $rc): $out" if $rc != 0;
    my %r = (output => $out, non2xx => 0, errors => 0);
    ($r{requests}) = $out =~ /(\d+) requests in /;
    ($r{rps}) = $out =~ /Requests\/sec:\s*([\d.]+)/;
    my ($p50) = $out =~ /^\s+50%\s+(\S+)/m;
    my ($p99) = $out =~ /^\s+99%\s+(\S+)/m;
    $r{p50} = seconds_of($p50 // '');
    $r{p99} = seconds_of($p99 // '');
    $r{non2xx} = $1 if $out =~ /Non-2xx or 3xx responses: (\d+)/;
    $r{errors} = $1 + $2 + $3 + $4 if $out =~
        /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/;
    return \%r;
}

sub otlp_cpu_profile {
    my ($e) = @_;
    my ($p) = grep { $_->{type} eq 'cpu/nanoseconds'
                     && $_->{period} eq 'cpu/nanoseconds' } otlp_profiles($e);
    return $p ? $p->{profile} : undef;
}


my $agent_port = ProfHTTP::free_port();
my $agent = start_agent("127.0.0.1:$agent_port");
my $py_port = ProfHTTP::free_port();
my $py = start_pyroscope("127.0.0.1:$py_port");
my $otlp_port = ProfHTTP::free_port();
my $otlp = start_otlp("127.0.0.1:$otlp_port");

my $t = start_nginx("127.0.0.1:$agent_port", "127.0.0.1:$py_port",
                    "127.0.0.1:$otlp_port");

# A look at each kind of request before the load.
{
    my $http = HTTP::Tiny->new(timeout => 10);
    for my $path ('/static/3/f3.txt', '/proxy/4/f4.txt', '/lua/5') {
        my $r = $http->get('http://127.0.0.1:' . $t->port . $path,
                           { headers => { 'Accept-Encoding' => 'gzip' } });
        is($r->{status}, 200, "$path: 200");
        is($r->{headers}{'content-encoding'} // '', 'gzip', "$path: gzip'd");
    }
}

my $load = run_wrk($t, 15);
ok($load->{requests} > 1000, "wrk: $load->{requests} requests in 15 s");
is($load->{non2xx} + $load->{errors}, 0, 'all answered 200')
    or diag($load->{output});
my %workers = map { $_ => 1 } $t->worker_pids;
ok($t->stop(timeout => 20), 'nginx stopped (its last profiles sent)');

my @exit = ProfLog::exit_counters($t->error_log);
is(scalar @exit, 2, 'both profiler processes ended with their exit line')
    or diag($t->error_log);
for my $c (@exit) {
    is($c->{$_} // 0, 0, "exit line: $_ 0")
        for qw(uploads_dropped pyroscope_dropped otlp_dropped);
}

# Per worker and period: the CPU each backend got, and its traced part.
my %period;   # start ns => { dd, dd_traced, py, py_traced, ot, ot_linked,
              #               pid }
my ($dd_bad, $py_bad, $ot_bad) = (0, 0, 0);
# The CPU of each span, by backend: { dd|py|ot => { start ns => { span =>
# ns } } }.
my %by_span;
# The CPU of each kind of work, from the Datadog profiles. Debian's nginx
# is stripped: only its exported functions have names (its static ones,
# ngx_http_static_handler among them, are addresses).
my $HAS = \&ProfHotspots::stack_has;
my %KIND = (
    gzip  => sub { $HAS->($_[0], qr/^(?:deflate|ngx_http_gzip_)/) },
    # the upstream's answer read and passed on
    proxy => sub { $HAS->($_[0],
                         qr/^(?:ngx_event_pipe$|ngx_http_upstream_)/) },
    lua   => sub { @{ $_[0]{lua} } || $HAS->($_[0], qr/^ngx_http_lua_/) },
    # the rest of the content phase: the static files (and the proxy's
    # content handler, little)
    static => sub {
        $HAS->($_[0], 'ngx_http_core_content_phase')
        && !@{ $_[0]{lua} } && !$HAS->($_[0], qr/^ngx_http_(?:lua|upstream)_/)
    },
);
my %kind_cpu;
my %endpoints;   # of the Datadog events' endpoint_counts

for my $u (ProfAgent::upload_dirs($agent)) {
    my $p = decode_profile("$u/profile.pprof");
    my $i = value_index($p, 'cpu-time');
    my $row = $period{ $p->{time_nanos} } //= {};
    for my $s (@{ $p->{sample} }) {
        my $v = $s->{value}[$i] // 0;
        $row->{dd} += $v;
        my $l = sample_labels($p, $s);
        next unless $l->{'span id'} || $l->{'local root span id'};
        $row->{dd_traced} += $v;
        my $span = sprintf('%016x', $l->{'local root span id'}{num} // 0);
        $dd_bad++ unless our_span($span);
        $by_span{dd}{ $p->{time_nanos} }{$span} += $v;
    }
    $row->{dd_uploads}++;
    my $event = decode_json(ProfFiles::slurp("$u/event") // '{}');
    $endpoints{$_} = 1 for keys %{ $event->{endpoint_counts} // {} };
    for my $x (ProfHotspots::hotspot_samples($p)) {
        $kind_cpu{all} += $x->{cpu};
        for my $k (keys %KIND) {
            $kind_cpu{$k} += $x->{cpu} if $KIND{$k}->($x);
        }
    }
}

my @pushes = pushes($py);
is(scalar(grep { $_->{status} != 200 } @pushes), 0,
   'Pyroscope: no push refused')
    or diag(explain([ map { $_->{reason} } @pushes ]));
for my $push (grep { $_->{status} == 200 } @pushes) {
    my ($row, $n);
    for my $x (push_profiles($push)) {
        next unless $x->{labels}{__name__} eq 'process_cpu';
        my $p = $x->{profile};
        $row //= $period{ $p->{time_nanos} } //= {};
        my $start = $p->{time_nanos};
        $row->{py_pushes}++ unless $n++;
        my $i = value_index($p, 'cpu');
        for my $s (@{ $p->{sample} }) {
            my $v = $s->{value}[$i] // 0;
            $row->{py} += $v;
            my $l = sample_labels($p, $s);
            next unless $l->{span_id} || $l->{trace_id};
            my $span = $l->{span_id} ? $l->{span_id}{str} // '' : '';
            my $trace = $l->{trace_id} ? $l->{trace_id}{str} // '' : '';
            if (our_span($span) && $trace eq trace_of_span($span)) {
                $row->{py_traced} += $v;
                $by_span{py}{$start}{$span} += $v;
            } else {
                $py_bad++;
            }
        }
    }
}

my @exports = exports($otlp);
is(scalar(grep { $_->{status} != 200 } @exports), 0,
   'OTLP: no export refused')
    or diag(explain([ map { $_->{reason} } @exports ]));
for my $e (grep { $_->{status} == 200 } @exports) {
    my $x = $e->{export};
    my $p = otlp_cpu_profile($x) or next;
    my $start = otlp_one($p, 'time_unix_nano', 0);
    my $row = $period{$start} //= {};
    $row->{ot_exports}++;
    $row->{pid} = otlp_resource($x)->{'process.pid'};
    my $d = otlp_one($x, 'dictionary', {});
    for my $s (@{ $p->{samples} // [] }) {
        my $v = otlp_one($s, 'values', 0);
        $row->{ot} += $v;
        my $li = otlp_one($s, 'link_index', 0) or next;
        my $l = $d->{link_table}[$li];
        my ($trace, $span) = (hex_of(otlp_one($l, 'trace_id', '')),
                              hex_of(otlp_one($l, 'span_id', '')));
        if (our_span($span) && $trace eq trace_of_span($span)) {
            $row->{ot_linked} += $v;
            $by_span{ot}{$start}{$span} += $v;
        } else {
            $ot_bad++;
        }
    }
}

diag(join(', ', map { sprintf('%s %.1f%%', $_,
                                  100 * ($kind_cpu{$_} // 0)
                                  / ($kind_cpu{all} || 1)) }
                     sort keys %KIND) . ' of the CPU (Datadog profiles)');
for my $k (sort keys %KIND) {
    ok(($kind_cpu{$k} // 0) >= 0.05 * ($kind_cpu{all} // 0),
       "the load's $k work: at least 5% of the CPU");
}

my @starts = sort { $a <=> $b } keys %period;
diag(sprintf("%-7s %-19s %12s %8s %8s %12s %8s %8s", 'pid', 'period start',
             'dd cpu ns', 'py/dd', 'otlp/dd', 'dd traced', 'py tr %',
             'otlp ln %'));
my ($worst, $missing, $dd_tr, $py_tr, $ot_ln, $dd_all) = (0, 0, 0, 0, 0, 0);
my %pids;
for my $k (@starts) {
    my $r = $period{$k};
    $r->{$_} //= 0 for qw(dd dd_traced py py_traced ot ot_linked);
    $missing++ unless $r->{dd_uploads} && $r->{py_pushes} && $r->{ot_exports};
    $pids{ $r->{pid} // '?' }++;
    for my $other ($r->{py}, $r->{ot}) {
        my $d = abs($other - $r->{dd}) / ($r->{dd} || 1);
        $worst = $d if $d > $worst;
    }
    $dd_all += $r->{dd};
    $dd_tr += $r->{dd_traced};
    $py_tr += $r->{py_traced};
    $ot_ln += $r->{ot_linked};
    diag(sprintf("%-7s %-19s %12d %8.4f %8.4f %12d %7.2f%% %7.2f%%",
                 $r->{pid} // '?', $k, $r->{dd},
                 $r->{py} / ($r->{dd} || 1), $r->{ot} / ($r->{dd} || 1),
                 $r->{dd_traced},
                 100 * $r->{py_traced} / ($r->{dd_traced} || 1),
                 100 * $r->{ot_linked} / ($r->{dd_traced} || 1)));
}

ok(@starts >= 4, scalar(@starts) . ' periods (both workers)');
is_deeply([ sort keys %pids ], [ sort keys %workers ],
          'periods of both workers');
is($missing, 0, 'every period reached the agent, Pyroscope and OTLP')
    or diag(explain(\%period));
ok($worst <= 0.01, 'every period: the same CPU time in the three, within 1%')
    or diag(sprintf('largest difference: %.4f%%', 100 * $worst));
diag(sprintf('largest CPU difference between backends: %.4f%%',
             100 * $worst));

ok($dd_tr > 0.5 * $dd_all, 'most of the CPU ran for traced requests')
    or diag("$dd_tr of $dd_all ns");
is($dd_bad, 0, 'Datadog: every span label one of the requests\'');
is($py_bad, 0, 'Pyroscope: every span_id and trace_id those of a request');
is($ot_bad, 0, 'OTLP: every Link the trace and span ids of a request');
diag(sprintf('traced CPU (Datadog labels): %.2f%% of %d ns; in Pyroscope '
             . 'with span_id+trace_id: %.2f%% of it; in OTLP with a Link: '
             . '%.2f%% of it', 100 * $dd_tr / ($dd_all || 1), $dd_all,
             100 * $py_tr / ($dd_tr || 1), 100 * $ot_ln / ($dd_tr || 1)));
ok($py_tr >= 0.95 * $dd_tr,
   'Pyroscope: >= 95% of the traced CPU carries span_id and trace_id');
ok($ot_ln >= 0.95 * $dd_tr,
   'OTLP: >= 95% of the traced CPU carries a Link');

# Their own span: per period and span, the CPU Pyroscope (OTLP) gives the
# span, up to what the Datadog labels give it.
my %own = (py => 0, ot => 0);
for my $b (qw(py ot)) {
    for my $k (keys %{ $by_span{dd} // {} }) {
        my $dd = $by_span{dd}{$k};
        my $x = $by_span{$b}{$k} // {};
        for my $span (keys %$dd) {
            my $v = $x->{$span} // 0;
            $own{$b} += $v < $dd->{$span} ? $v : $dd->{$span};
        }
    }
}
diag(sprintf('the same span as the Datadog labels: Pyroscope %.2f%%, OTLP '
             . '%.2f%% of the traced CPU', 100 * $own{py} / ($dd_tr || 1),
             100 * $own{ot} / ($dd_tr || 1)));
ok($own{py} >= 0.95 * $dd_tr,
   'Pyroscope: >= 95% of the traced CPU with its request\'s own span_id');
ok($own{ot} >= 0.95 * $dd_tr,
   'OTLP: >= 95% of the traced CPU with its request\'s own Link');

my $uris = grep { m{^GET /(?:static|proxy|lua)/\d+} } keys %endpoints;
is($uris, 1000, 'the agent\'s events counted requests of 1,000 URIs');
my @series = series_seen($py);
ok(@series < 50, scalar(@series) . ' Pyroscope series for 1,000 URIs')
    or diag(explain(\@series));

stop_otlp($otlp);


# A second nginx, the same but a profile every 2 s, its own receivers:
# 6 s of load with every backend answering, then 6 s with each in turn
# hanging (it never answers: nginx's upload gives up at its 10 s timeout).
my %addr = map { $_ => '127.0.0.1:' . ProfHTTP::free_port() }
           qw(agent pyroscope otlp);
my %rx = (agent => start_agent($addr{agent}),
          pyroscope => start_pyroscope($addr{pyroscope}),
          otlp => start_otlp($addr{otlp}));
my %set_mode = (agent => \&set_mode, pyroscope => \&set_pyroscope_mode,
                otlp => \&set_otlp_mode);
my %received = (agent => sub { scalar(() = ProfAgent::upload_dirs($_[0])) },
                pyroscope => sub { scalar(() = pushes($_[0])) },
                otlp => sub { scalar(() = exports($_[0])) });
my %prefix = (agent => 'uploads', pyroscope => 'pyroscope', otlp => 'otlp');

my $t2 = start_nginx($addr{agent}, $addr{pyroscope}, $addr{otlp}, '2s');
my $counters = sub {
    my $r = ProfHTTP::get_with($t2, '/status');
    return $r->{status} == 200
           ? decode_json($r->{content})->{totals}{counters} // {} : {};
};
# wrk for 6 s, with the CPU the workers and their profiler processes
# spent meanwhile.
my @w2 = $t2->worker_pids;
my @prof2 = grep { defined } map { ProfProc::profiler_of($_) } @w2;
is(scalar @prof2, 2, 'second nginx: two workers, each its profiler process');
my $cpu_of = sub { my $s = 0; $s += ProfProc::process_cpu_ns($_) // 0 for @_;
                   $s };
my $phase = sub {
    my ($name) = @_;
    my ($w0, $p0) = ($cpu_of->(@w2), $cpu_of->(@prof2));
    my $w = run_wrk($t2, 6);
    $w->{worker_us} = ($cpu_of->(@w2) - $w0) / 1e3 / ($w->{requests} || 1);
    $w->{profiler_ms} = ($cpu_of->(@prof2) - $p0) / 1e6;
    is($w->{non2xx} + $w->{errors}, 0, "$name: all 200")
        or diag($w->{output});
    diag(sprintf('%-18s %6.1f req/s, median %6.2f ms, p99 %6.2f ms, '
                 . 'workers %5.0f us CPU a request, profilers %4.0f ms CPU',
                 "$name:", $w->{rps}, 1e3 * $w->{p50}, 1e3 * $w->{p99},
                 $w->{worker_us}, $w->{profiler_ms}));
    return $w;
};

# Warmed up first (Lua's modules loaded, its traces compiled).
run_wrk($t2, 2);
my $before = $phase->('all answering');
my %hang;
for my $b (qw(agent pyroscope otlp)) {
    $set_mode{$b}->($rx{$b}, 'hang');
    my $c0 = $counters->();
    my %got = map { $_ => $received{$_}->($rx{$_}) } keys %rx;
    $hang{$b} = $phase->("$b hanging");
    my $c1 = $counters->();
    $set_mode{$b}->($rx{$b}, 'ok');
    my $p = $prefix{$b};
    my ($att, $succ) = map { ($c1->{"${p}_$_"} // 0)
                             - ($c0->{"${p}_$_"} // 0) }
                       qw(attempted succeeded);
    ok($att >= 1 && $succ <= 2,
       "$b hanging: it took requests, answered none but those under way")
        or diag("attempted $att, succeeded $succ");
    for my $other (grep { $_ ne $b } sort keys %rx) {
        ok($received{$other}->($rx{$other}) >= $got{$other} + 2,
           "$b hanging: $other still got profiles");
    }
}
# The hung requests time out (10 s); the last phase once all answer again.
my $c0 = $counters->();
ok(wait_until(sub {
       my $c = $counters->();
       !grep { ($c->{"${_}_succeeded"} // 0)
               <= ($c0->{"${_}_succeeded"} // 0) }
           values %prefix
   }, 30), 'each backend answered again');
my $after = $phase->('all answering again');

my %ref = map { $_ => ($before->{$_} + $after->{$_}) / 2 }
          qw(rps p50 worker_us);
for my $b (qw(agent pyroscope otlp)) {
    my $w = $hang{$b};
    ok($w->{rps} >= 0.5 * $ref{rps},
       "$b hanging: throughput at least half the answering runs'")
        or diag(sprintf('%.1f req/s, %.1f answering', $w->{rps}, $ref{rps}));
    ok($w->{p50} <= 2 * $ref{p50} + 0.002,
       "$b hanging: median latency at most twice theirs (+2 ms)")
        or diag(sprintf('%.2f ms, %.2f ms answering', 1e3 * $w->{p50},
                        1e3 * $ref{p50}));
    ok($w->{worker_us} <= 1.3 * $ref{worker_us},
       "$b hanging: the workers' CPU a request within 30% of theirs")
        or diag(sprintf('%.0f us, %.0f us answering', $w->{worker_us},
                        $ref{worker_us}));
}
stop_agent($rx{agent});
stop_pyroscope($rx{pyroscope});
stop_otlp($rx{otlp});
ok($t2->stop(timeout => 20), 'nginx stopped');
unlike($t->error_log . $t2->error_log, qr/exited on signal|AddressSanitizer/,
       'no process crashed');

stop_pyroscope($py);
stop_agent($agent);

done_testing();
