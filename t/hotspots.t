#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots: while a worker executes a request, its samples carry the
# request's span ids (from traceparent, x-datadog-* or the tracer's
# variables) and its endpoint; concurrent requests in one worker do not
# mix them up.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use HTTP::Tiny;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ProfHotspots;
use ProfNginx;
use ProfPprof;

# Parent ids: one above 2^63 (a negative int64 label), one below.
my %KIND = (
    a => { path => '/a', burn_ms => 20, parent => 'f067aa0ba902b7ff',
           trace => '4bf92f3577b34da6a3ce929d0e0e4736' },
    b => { path => '/b', burn_ms => 40, parent => '00f067aa0ba902b7',
           trace => '0af7651916cd43dd8448eb211c80319c' },
    c => { path => '/c', burn_ms => 10 },            # no trace header
);

# Forks one client per spec, each sending its request back to back on its
# own keep-alive connection for $seconds; returns { name => 200 answers }.
sub concurrent_clients {
    my ($t, $seconds, %specs) = @_;
    my %kids;

    for my $name (sort keys %specs) {
        pipe(my $r, my $w) or die "pipe: $!";
        my $pid = fork();
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            close($r);
            my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
            my $url = 'http://127.0.0.1:' . $t->port . $specs{$name}{path};
            my ($ok, $bad) = (0, 0);
            my $end = time() + $seconds;
            while (time() < $end) {
                my $res = $http->get($url,
                                     { headers => $specs{$name}{headers} });
                $res->{status} == 200 ? $ok++ : $bad++;
            }
            print $w "$ok $bad\n";
            close($w);
            POSIX::_exit(0);
        }
        close($w);
        $kids{$name} = { pid => $pid, fh => $r };
    }

    my %count;
    for my $name (sort keys %kids) {
        my $fh = $kids{$name}{fh};
        my $line = <$fh> // '0 0';
        close($fh);
        waitpid($kids{$name}{pid}, 0);
        my ($ok, $bad) = split ' ', $line;
        $count{$name} = $ok;
        is($bad, 0, "client $name: no failed request") if $bad;
    }
    return \%count;
}


subtest 'concurrent requests in one worker each carry their own ids' => sub {
    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /a { profiling_burn 20ms; }
        location /b { profiling_burn 40ms; }
        location /c { profiling_burn 10ms; }
    }
EOF
    $t->run;
    my ($worker) = $t->worker_pids;

    my %specs;
    for my $k (sort keys %KIND) {
        my $h = {};
        $h->{traceparent} = ProfHotspots::traceparent($KIND{$k}{parent},
                                                      $KIND{$k}{trace})
            if $KIND{$k}{parent};
        $specs{$k} = { path => $KIND{$k}{path}, headers => $h };
    }

    # Three clients at once: the worker interleaves their requests.
    my $count = concurrent_clients($t, 3.5, %specs);
    diag('requests served: '
         . join(', ', map { "$_ $count->{$_}" } sort keys %$count));
    ok($count->{$_} >= 10, "client $_ was served $count->{$_} requests")
        for sort keys %$count;

    ok($t->stop, 'nginx quits (and writes its last profile)');

    my @p = ProfPprof::decode_dump_dir($t->dump_dir);
    ok(@p >= 3, scalar(@p) . ' profiles') or return;
    my @s = ProfHotspots::hotspot_samples(@p);
    my @burn = ProfHotspots::burn_samples(@s);
    my $burn_total = ProfHotspots::sum_cpu(@burn);
    diag('burn cpu-time by span / endpoint: ' . ProfHotspots::format_cpu_by(
         ProfHotspots::cpu_by(sub { ($_[0]{span} // '-') . ' / '
                                    . ($_[0]{endpoint} // '-') }, @burn)));

    my %sent;
    for my $k (sort keys %KIND) {
        my $span = $KIND{$k}{parent}
                   ? ProfHotspots::hex_to_u64($KIND{$k}{parent}) : undef;
        $sent{$span} = 1 if defined $span;

        # The samples of a kind's requests, by their endpoint.
        ProfHotspots::ok_burn_ids(
            name => "requests $KIND{$k}{path}"
                    . ($span ? " (traceparent parent id $KIND{$k}{parent})"
                             : ' (no trace header)'),
            samples => \@s,
            filter => sub { ($_[0]{endpoint} // '') eq "GET $KIND{$k}{path}" },
            span => $span, root => $span);
    }

    # And the other way: the burn CPU labelled with a kind's span id is the
    # share of the burn that kind's requests asked for (ids and endpoint
    # stuck one request behind would agree with each other, not with this).
    my %expected;
    my $expected_total = 0;
    for my $k (sort keys %KIND) {
        $expected{$k} = $count->{$k} * $KIND{$k}{burn_ms};
        $expected_total += $expected{$k};
    }
    my $by_span = ProfHotspots::cpu_by(sub { $_[0]{span} }, @burn);
    for my $k (sort keys %KIND) {
        my $span = $KIND{$k}{parent}
                   ? ProfHotspots::hex_to_u64($KIND{$k}{parent}) : '-';
        my $want = $expected_total ? $expected{$k} / $expected_total : 0;
        my $got = $burn_total ? ($by_span->{$span} // 0) / $burn_total : 0;
        ok($want > 0 && abs($got - $want) <= 0.2 * $want + 0.02,
           sprintf('burn cpu-time with span id %s is %.1f%% of the burn, '
                   . 'as the requests of %s asked (%.1f%%)', $span,
                   100 * $got, $KIND{$k}{path}, 100 * $want));
    }

    # Every sample: no id that no request sent, root = span, nothing but
    # the worker's thread.
    my %unknown;
    my ($mismatch, $partial) = (0, 0);
    for my $x (@s) {
        for my $id (grep { defined } $x->{span}, $x->{root}) {
            $unknown{$id}++ unless $sent{$id};
        }
        $partial++ if $x->{has_span_label} != $x->{has_root_label};
        $mismatch++ if defined $x->{span} && defined $x->{root}
                       && $x->{span} ne $x->{root};
    }
    is_deeply(\%unknown, {}, 'no sample carries an id that was not sent');
    is($partial, 0, 'span id and local root span id labels come together');
    is($mismatch, 0, 'local root span id = span id (traceparent)');

    my $no_endpoint = ProfHotspots::sum_cpu(grep { !defined $_->{endpoint} }
                                            @burn);
    ok($burn_total && $no_endpoint / $burn_total < 0.05,
       sprintf('%.1f%% of the burn cpu-time has no endpoint (less than 5%%)',
               $burn_total ? 100 * $no_endpoint / $burn_total : 100));
};


# One nginx for the sequential cases: x-datadog headers, ids from
# variables, endpoints. Each case has its own endpoint.
my $t = ProfNginx->new(workers => 1);
$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /dd  { profiling_burn 20ms; }
        location /dd-tp  { profiling_burn 20ms; }
        location /dd-badtp  { profiling_burn 20ms; }

        location /v/ {
            profiling_endpoint "$uri $http_x_case";
            profiling_burn 20ms;

            location /v/span {
                profiling_span_id $http_x_my_span;
                profiling_burn 20ms;
            }
            location /v/root {
                profiling_span_id $http_x_my_span;
                profiling_root_span_id $http_x_root;
                profiling_burn 20ms;
            }
            location /v/trace {
                profiling_trace_id $http_x_trace;
                profiling_span_id $http_x_my_span;
                profiling_root_span_id $http_x_root;
                profiling_burn 20ms;
            }
        }

        location /burn { profiling_burn 20ms; }
        location /custom {
            profiling_endpoint "$request_method $uri custom";
            profiling_burn 20ms;
        }
    }
EOF
$t->run;

my $N = 6;      # requests per case, 20ms each: 120ms of burn

# Sends $N requests; all must answer 200 "burned ...".
sub send_case {
    my ($name, $path, $headers, $method) = @_;
    my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
    my $url = 'http://127.0.0.1:' . $t->port . $path;
    my @status;
    for (1 .. $N) {
        my $r = $http->request($method // 'GET', $url,
                               { headers => $headers });
        push @status, $r->{status};
    }
    my @bad = grep { $_ != 200 } @status;
    ok(!@bad, "$name: $N requests answered 200")
        or diag("statuses: @status");
}

my $DD_TRACE = '1234567890123456789';
my $DD_PARENT = '9876543210987654321';        # above 2^63
my $TP_PARENT = '00000000075bcd15';           # 123456789

send_case('x-datadog', '/dd', { 'x-datadog-trace-id' => $DD_TRACE,
                                'x-datadog-parent-id' => $DD_PARENT });
send_case('traceparent and x-datadog', '/dd-tp',
          { traceparent => ProfHotspots::traceparent($TP_PARENT),
            'x-datadog-trace-id' => $DD_TRACE,
            'x-datadog-parent-id' => $DD_PARENT });
send_case('invalid traceparent and x-datadog', '/dd-badtp',
          { traceparent => '00-zz-' . $TP_PARENT . '-01',
            'x-datadog-trace-id' => $DD_TRACE,
            'x-datadog-parent-id' => $DD_PARENT });

# ids from variables: [case, path, headers, span, root]
my $TP_IGNORED = ProfHotspots::traceparent('0000000000000bad');
my @VAR_CASES = (
    [ 'hex16', '/v/span', { 'x-my-span' => 'a3ce929d0e0e4736' },
      ProfHotspots::hex_to_u64('a3ce929d0e0e4736') ],
    [ 'hex16upper', '/v/span', { 'x-my-span' => '00F067AA0BA902B7' },
      ProfHotspots::hex_to_u64('00f067aa0ba902b7') ],
    [ 'hex32', '/v/span', { 'x-my-span' => '4bf92f3577b34da6a3ce929d0e0e4737' },
      ProfHotspots::hex_to_u64('a3ce929d0e0e4737') ],
    [ 'decimal', '/v/span', { 'x-my-span' => '1311768467294899695' },
      '1311768467294899695' ],
    [ 'decimal-max', '/v/span', { 'x-my-span' => '18446744073709551615' },
      '18446744073709551615' ],
    [ 'root', '/v/root', { 'x-my-span' => '42', 'x-root' => '1234' },
      '42', '1234' ],
    [ 'root-hex', '/v/root', { 'x-my-span' => '000000000000002b',
                               'x-root' => 'fedcba9876543210' },
      '43', ProfHotspots::hex_to_u64('fedcba9876543210') ],
    [ 'trace', '/v/trace', { 'x-trace' => '0af7651916cd43dd8448eb211c80319c',
                             'x-my-span' => '44', 'x-root' => '4444' },
      '44', '4444' ],
    # invalid: no ids, even with a valid traceparent (the variables rule)
    (map { [ "bad-span-$_->[0]", '/v/span',
             { 'x-my-span' => $_->[1], traceparent => $TP_IGNORED } ] }
         [ 'dash', '-' ], [ 'zz', 'zz' ], [ 'zero', '0' ],
         [ 'zero16', '0000000000000000' ], [ 'overflow', '18446744073709551616' ],
         [ 'hex15', 'a3ce929d0e0e473' ], [ 'negative', '-42' ]),
    [ 'bad-span-missing', '/v/span', { traceparent => $TP_IGNORED } ],
    [ 'bad-root', '/v/root', { 'x-my-span' => '42', 'x-root' => 'zz' } ],
    [ 'bad-trace', '/v/trace', { 'x-trace' => '-', 'x-my-span' => '44',
                                 'x-root' => '4444' } ],
    [ 'no-span', '/v/root', { 'x-root' => '1234' } ],
);

for my $c (@VAR_CASES) {
    my ($case, $path, $h) = @$c;
    send_case("variables $case", $path, { %$h, 'x-case' => $case });
}

send_case('endpoint with a query string', '/burn?a=b&c=d');
send_case('endpoint of a POST', '/burn', {}, 'POST');
send_case('custom endpoint', '/custom?x=1');

ok($t->stop, 'nginx quits (and writes its last profile)');
my @S = ProfHotspots::hotspot_samples(
    ProfPprof::decode_dump_dir($t->dump_dir));
ok(@S > 0, scalar(@S) . ' samples');

sub by_endpoint {
    my ($e) = @_;
    return sub { ($_[0]{endpoint} // '') eq $e };
}


subtest 'x-datadog-trace-id / x-datadog-parent-id (decimal)' => sub {
    ProfHotspots::ok_burn_ids(
        name => 'x-datadog headers', samples => \@S,
        filter => by_endpoint('GET /dd'),
        span => $DD_PARENT, root => $DD_PARENT,
        min_ns => 60_000_000);
    ProfHotspots::ok_burn_ids(
        name => 'traceparent wins over x-datadog',
        samples => \@S, filter => by_endpoint('GET /dd-tp'),
        span => '123456789', root => '123456789',
        min_ns => 60_000_000);
    ProfHotspots::ok_burn_ids(
        name => 'x-datadog when traceparent is invalid',
        samples => \@S,
        filter => by_endpoint('GET /dd-badtp'),
        span => $DD_PARENT, root => $DD_PARENT,
        min_ns => 60_000_000);
};


subtest 'ids from profiling_span_id / _root_span_id / _trace_id' => sub {
    for my $c (@VAR_CASES) {
        my ($case, $path, $h, $span, $root) = @$c;
        $root //= $span;
        ProfHotspots::ok_burn_ids(
            name => "variables $case ($path)",
            samples => \@S,
            filter => by_endpoint("$path $case"),
            span => $span, root => $root,
            min_ns => 60_000_000);
    }
};


subtest 'endpoint label' => sub {
    ProfHotspots::ok_burn_ids(
        name => 'GET /burn?a=b&c=d', samples => \@S,
        filter => sub { ($_[0]{endpoint} // '') =~ /burn/
                        && ($_[0]{endpoint} // '')
                       !~ /^POST/ },
        span => undef, root => undef,
        endpoint => 'GET /burn', min_ns => 60_000_000);
    ProfHotspots::ok_burn_ids(
        name => 'POST /burn', samples => \@S,
        filter => by_endpoint('POST /burn'),
        span => undef, root => undef,
        endpoint => 'POST /burn', min_ns => 60_000_000);
    ProfHotspots::ok_burn_ids(
        name => 'profiling_endpoint "$request_method $uri '
                . 'custom"', samples => \@S,
        filter => sub { ($_[0]{endpoint} // '')
                        =~ /custom/ },
        span => undef, root => undef,
        endpoint => 'GET /custom custom',
        min_ns => 60_000_000);

    my %endpoints = map { $_->{endpoint} => 1 }
                    grep { defined $_->{endpoint} } @S;
    my @query = grep { /\?/ } keys %endpoints;
    is_deeply(\@query, [], 'no endpoint has a query string');
    my @burn_no_endpoint = grep { !defined $_->{endpoint} }
                           ProfHotspots::burn_samples(@S);
    my $total = ProfHotspots::sum_cpu(ProfHotspots::burn_samples(@S));
    ok($total && ProfHotspots::sum_cpu(@burn_no_endpoint) / $total < 0.05,
       'the burn cpu-time of requests has an endpoint (95%)');
    diag('endpoints: ' . join(', ', map { "\"$_\"" } sort keys %endpoints));
};

done_testing();
