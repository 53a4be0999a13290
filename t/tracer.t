#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Beside Datadog's nginx tracer (nginx-datadog, prebuilt in the team's
# fixtures) with "profiling on" and no other directive: every profile has
# the tracer's runtime-id, service, env and version of its worker, and the
# CPU of traced requests carries the span ids the tracer sent for that
# worker (never a caller's), whichever module is loaded first, over
# HTTP/1.1 and HTTP/2, with and without an incoming traceparent, and with
# datadog_trace_locations on.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use ProfAgent;
use ProfEnv;
use ProfFiles qw(slurp);
use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfPyroscope;
use ProfWait;

my $DATADOG = ProfEnv::datadog_module();
plan(skip_all => 'nginx-datadog (../shared/fixtures/nginx-datadog, built '
               . 'for Debian\'s nginx, or PROFILING_DATADOG_MODULE) is '
               . 'absent for this nginx') unless $DATADOG;

my $PYTHON = '/usr/bin/python3';
plan(skip_all => 'python3-msgpack is absent (Debian package)')
    unless system($PYTHON, '-c', 'import msgpack') == 0;

my $CALLER = '0af7651916cd43dd8448eb211c80319c';     # an incoming trace
my $CALLER_SPAN = 'b7ad6b7169203331';


# The spans the tracer sent: { span_id, parent_id, name, resource, service,
# runtime_id, env, version, pid } with ids as decimal strings.
sub tracer_spans {
    my ($agent) = @_;
    my @spans;

    opendir(my $dh, $agent->{dir}) or return ();
    for my $d (sort grep { /^other-/ } readdir($dh)) {
        my $req = slurp("$agent->{dir}/$d/request") // '';
        next unless $req =~ m{^POST /v0\.4/traces};
        my $json = `$PYTHON -c '
import json, msgpack, sys
traces = msgpack.unpackb(open(sys.argv[1], "rb").read(), raw=False)
print(json.dumps([[{
    "span_id": str(s["span_id"]), "parent_id": str(s["parent_id"]),
    "trace_id": str(s["trace_id"]),
    "name": s["name"], "resource": s["resource"], "service": s["service"],
    "runtime_id": s["meta"].get("runtime-id"), "env": s["meta"].get("env"),
    "version": s["meta"].get("version"),
    "pid": str(int(s.get("metrics", {}).get("process_id", 0)))}
    for s in t] for t in traces]))' '$agent->{dir}/$d/body'`;
        push @spans, map { @$_ } @{ decode_json($json) };
    }
    closedir($dh);

    return @spans;
}


# The profiles uploaded: [ { tags => {...}, samples => [...] } ].
sub uploaded_profiles {
    my ($agent) = @_;
    my @out;

    for my $d (ProfAgent::upload_dirs($agent)) {
        my $e = eval { decode_json(slurp("$d/event")) } or next;
        my %tags = map { split(/:/, $_, 2) } split(/,/, $e->{tags_profiler});
        my $p = eval { decode_profile("$d/profile.pprof") } or next;
        push @out, { tags => \%tags,
                     samples => [ ProfHotspots::hotspot_samples($p) ] };
    }

    return @out;
}


sub run_case {
    my (%c) = @_;

    my $port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$port");
    my $pyroscope_port = ProfHTTP::free_port();
    my $pyroscope = start_pyroscope("127.0.0.1:$pyroscope_port");
    my @modules = (ProfEnv::module_path('ngx_http_profiling_module'),
                   ProfEnv::module_path('ngx_http_profiling_burn_module'));
    @modules = $c{tracer_first} ? ($DATADOG, @modules)
                                : (@modules, $DATADOG);

    my $t = ProfNginx->new(workers => 2, modules => \@modules,
                           agent_url => undef);
    my $http2 = $c{http2} ? ' http2' : '';

    $t->write_config(<<"EOF");
    datadog_agent_url http://127.0.0.1:$port;
    datadog_service_name websvc;
    datadog_environment test;
    datadog_version 1.2.3;

    profiling on;
    profiling_agent_url http://127.0.0.1:$port;
    profiling_pyroscope_url http://127.0.0.1:$pyroscope_port;
    profiling_period 1s;

    server {
        listen 127.0.0.1:%%PORT%% reuseport$http2;
        location /burn { profiling_burn 30ms; }
        location /loc { datadog_trace_locations on; profiling_burn 30ms; }
    }
EOF
    $t->run;
    my @workers = $t->worker_pids;

    # Requests with and without a caller's trace, spread over the workers
    # (one connection each, reuseport).
    my $N = 12;
    my @paths = map { ("/burn", "/loc") } 1 .. $N;
    my $failed = 0;

    for my $i (0 .. $#paths) {
        my %h = ($i % 4 < 2)
                ? (traceparent => "00-$CALLER-$CALLER_SPAN-01") : ();
        if ($c{http2}) {
            my @r = ProfHTTP::h2_requests($t->port,
                        [ { path => $paths[$i], headers => [ %h ] } ], 20);
            $failed++ if ($r[0]{status} // 0) != 200;
        } else {
            my $r = ProfHTTP::get_with($t, $paths[$i], \%h);
            $failed++ if $r->{status} != 200;
        }
    }
    is($failed, 0, scalar(@paths) . ' requests answered 200');

    ok($t->stop, 'nginx quits');
    my $log = $t->error_log;

    # The tracer flushes every 2 s, the profiler at exit: both are in.
    wait_until(sub { grep { /^other-/ } glob("$agent->{dir}/*") }, 10);
    my @spans = tracer_spans($agent);
    my @profiles = uploaded_profiles($agent);
    stop_agent($agent);

    ok(@spans > 0 && @profiles > 0, scalar(@spans) . ' spans and '
       . scalar(@profiles) . ' profiles received');

    # Identity: each profile's is its worker's tracer's.
    my %tracer;
    for my $s (@spans) {
        $tracer{ $s->{pid} }{ join(' ', map { $_ // '-' }
            @$s{qw(runtime_id service env version)}) } = 1;
    }
    my @mismatch;
    for my $p (@profiles) {
        my $pid = $p->{tags}{process_id};
        my $id = join(' ', map { $p->{tags}{$_} // '-' }
                               qw(runtime-id service env version));
        push @mismatch, "$pid: $id" unless $tracer{$pid}{$id};
    }
    is_deeply(\@mismatch, [], 'every profile has the runtime-id, service, '
              . 'env and version of its worker\'s tracer')
        or diag(explain(\%tracer), join("\n", grep { /profiling/ }
                                             split /\n/, $log));
    my %rids = map { $_->{tags}{'runtime-id'} => 1 } @profiles;
    is(scalar(keys %rids), scalar(@workers), 'one runtime-id per worker');

    # Span ids: those the tracer sent for the worker (by its runtime-id).
    my (%by_rid, %request_span);
    for my $s (@spans) {
        $by_rid{ $s->{runtime_id} }{ $s->{span_id} } = $s;
    }

    my ($total, $good, $foreign, $caller, $roots_ok, $roots,
        $roots_missing) = (0) x 7;
    for my $p (@profiles) {
        my $sent = $by_rid{ $p->{tags}{'runtime-id'} } // {};
        for my $s (@{ $p->{samples} }) {
            next unless $s->{cpu} > 0
                && ProfHotspots::stack_has($s, 'ngx_http_profiling_burn_spin');
            $total += $s->{cpu};
            my $span = $s->{span};
            if (!defined $span) {
                next;
            }
            if (!$sent->{$span}) {
                $foreign += $s->{cpu};
                $caller += $s->{cpu}
                    if $span eq ProfHotspots::hex_to_u64($CALLER_SPAN);
                next;
            }
            $good += $s->{cpu};

            # The root: the nginx.request span of the same trace.
            my $sp = $sent->{$span};
            my $root = $sp->{name} eq 'nginx.request' ? $sp
                : $sent->{ $sp->{parent_id} };
            # nginx-datadog does not tell the request span of a location
            # span in a caller's trace: the root is left out then only.
            if (!defined $s->{root}) {
                next if $sp->{name} eq 'nginx.location'
                        && $sp->{trace_id}
                           eq ProfHotspots::hex_to_u64($CALLER);
                $roots_missing += $s->{cpu};
                diag("no root for $sp->{name} $sp->{resource} in trace "
                     . "$sp->{trace_id}");
                next;
            }

            $roots += $s->{cpu};
            if ($root && $root->{name} eq 'nginx.request'
                && $s->{root} eq $root->{span_id})
            {
                $roots_ok += $s->{cpu};
            } else {
                diag("root $s->{root} for $sp->{name} $span, the request "
                     . 'span is ' . ($root ? $root->{span_id} : 'unknown'));
            }

            is($s->{endpoint}, $root->{resource},
               'the endpoint is the request span\'s resource')
                if $root && !$request_span{ $p }{ $span }++
                   && defined $s->{endpoint}
                   && $s->{endpoint} ne $root->{resource};
        }
    }

    ok($total > 200e6 && $good >= 0.95 * $total,
       sprintf('%.1f%% of %.0fms of burn cpu-time carries a span id the '
               . 'tracer sent for that worker', $total ? 100 * $good / $total
               : 0, $total / 1e6));
    is($foreign, 0, 'no cpu-time carries a span id the tracer did not send '
       . sprintf('(%.0fms, of which the caller\'s %.0fms)', $foreign / 1e6,
                 $caller / 1e6));
    ok($roots > 0 && $roots_ok == $roots,
       sprintf('every local root span id is the nginx.request span of the '
               . 'trace (%.0fms of %.0fms)', $roots_ok / 1e6, $roots / 1e6));
    is($roots_missing, 0, 'a local root span id is left out only where the '
       . 'tracer does not tell it (a location span in a caller\'s trace)');

    # Pyroscope: the tracer's service, and its request spans' ids.
    my @pushes = pushes($pyroscope);
    stop_pyroscope($pyroscope);
    ok(@pushes > 0 && !grep({ $_->{status} != 200 } @pushes),
       scalar(@pushes) . ' pushes to Pyroscope, all accepted');
    my %identity;
    for my $series (map { @{ $_->{series} } } @pushes) {
        my $l = $series->{labels};
        $identity{ join(' ', map { $_ // '-' }
                             @$l{qw(service_name environment version)}) } = 1;
    }
    my %request_spans = map { $_->{span_id} => $_ }
                        grep { $_->{name} eq 'nginx.request' } @spans;
    my ($py_total, $py_good, @py_bad) = (0, 0);
    for my $x (map { push_profiles($_) } @pushes) {
        next unless $x->{labels}{__name__} eq 'process_cpu';
        my $i = value_index($x->{profile}, 'cpu');
        for my $sample (@{ $x->{profile}{sample} }) {
            my $leaf = leaf_function($x->{profile}, $sample);
            next unless $leaf eq 'ngx_http_profiling_burn_spin';
            my $v = $sample->{value}[$i];
            $py_total += $v;
            my $l = sample_labels($x->{profile}, $sample);
            next unless $l->{span_id};
            my $root = $request_spans{
                ProfHotspots::hex_to_u64($l->{span_id}{str}) };
            if ($root && $l->{trace_id}
                && ProfHotspots::hex_to_u64($l->{trace_id}{str})
                   eq $root->{trace_id})
            {
                $py_good += $v;
            } else {
                push @py_bad, "$l->{span_id}{str} "
                              . ($l->{trace_id} ? $l->{trace_id}{str} : '-');
            }
        }
    }
    is_deeply([ sort keys %identity ],
              [ 'websvc test 1.2.3' ],
              'every series: service_name, environment and version of the '
              . 'tracer') or diag(explain(\%identity));
    is_deeply(\@py_bad, [], 'every span_id is a request span the tracer '
              . 'sent, with its trace_id');
    ok($py_good > 0, sprintf('%.0fms of %.0fms of burn cpu-time in Pyroscope '
                             . 'carry them', $py_good / 1e6,
                             $py_total / 1e6));
}


for my $case ([ 'tracer loaded first, HTTP/1.1', tracer_first => 1 ],
              [ 'tracer loaded after the profiler, HTTP/1.1',
                tracer_first => 0 ],
              [ 'HTTP/2', tracer_first => 1, http2 => 1 ])
{
    my ($name, %c) = @$case;
    subtest $name => sub { run_case(%c) };
}

done_testing();
