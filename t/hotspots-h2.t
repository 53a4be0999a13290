#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots over HTTP/2 (cleartext, prior knowledge): every stream is a
# request of its own, with its own ids, even when the streams of one
# connection are processed in the same event.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ProfEnv;
use ProfFiles;
use ProfHTTP;
use ProfHotspots qw(endpoint_is);
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my %ID = (a => 'a1a1a1a1a1a1a1a1', b => '0b0b0b0b0b0b0b0b',
          curl => 'c0c0c0c0c0c0c0c0', x1 => '1000000000000001',
          x2 => '2000000000000002', gz => '9999999999999999');
my %U64 = map { $_ => ProfHotspots::hex_to_u64($ID{$_}) } keys %ID;

# Both ways of enabling HTTP/2: the listen option (deprecated from nginx
# 1.25.1 on) and, where it exists, the http2 directive.
my @modes = (['listen option', 'listen 127.0.0.1:%%PORT%% http2;']);
push @modes, ['http2 directive',
              "listen 127.0.0.1:%%PORT%%;\n        http2 on;"]
    if ProfEnv::nginx_version() >= 1025001;

for my $mode (@modes) {
    my ($how, $listen) = @$mode;
    note("HTTP/2 enabled by the $how");
    h2_case($how, $listen);
}

sub h2_case {
    my ($how, $listen) = @_;

    my $t = ProfNginx->new(workers => 1);
    mkdir($t->prefix . '/html') or die;
    chmod(0755, $t->prefix . '/html');
    my $big = ProfWorkload::write_words_file($t->prefix . '/html/big.txt',
                                             4_000_000);

    (my $config = <<'EOF') =~ s/%%LISTEN%%/$listen/;
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    log_format hotspots '$request_uri $server_protocol $status '
                        '$profiling_span_id';

    server {
        %%LISTEN%%
        access_log %%PREFIX%%/access.log hotspots;

        location /h2a { profiling_burn 30ms; }
        location /h2b { profiling_burn 30ms; }
        location /h2c { profiling_burn 30ms; }
        location /h2curl { profiling_burn 30ms; }
        location /h2x1 { profiling_burn 20ms; }
        location /h2x2 { profiling_burn 20ms; }
        location = /big.txt {
            root %%PREFIX%%/html;
            gzip on;
            gzip_comp_level 9;
            gzip_types text/plain;
        }
    }
EOF
    $t->write_config($config);
    $t->run;
    my ($worker) = $t->worker_pids;

    # One connection, 18 streams sent at once: a (ids), c (none), b (ids), ...
    my @req;
    for (1 .. 6) {
        push @req, { path => '/h2a',
                     headers => [ traceparent =>
                                  ProfHotspots::traceparent($ID{a}) ] },
                   { path => '/h2c' },
                   { path => '/h2b',
                     headers => [ 'x-datadog-trace-id' => '77',
                                  'x-datadog-parent-id' => $U64{b} ] };
    }
    my @res = ProfHTTP::h2_requests($t->port, \@req, 20);
    my @bad = grep { ($_->{status} // 0) != 200 || $_->{error} } @res;
    ok(@res == 18 && !@bad, '18 multiplexed streams on one connection answered '
       . '200') or diag(join(', ', map { ($_->{status} // '-') . ' '
                                         . ($_->{error} // '') } @bad));

    # Two connections at once, each with its own ids, for 2 seconds.
    my @kids;
    for my $k (qw(x1 x2)) {
        my $pid = fork();
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            my $end = time() + 2;
            my $fail = 0;
            while (time() < $end) {
                my @r = ProfHTTP::h2_requests($t->port, [ map { {
                    path => "/h2$k",
                    headers => [ traceparent =>
                                 ProfHotspots::traceparent($ID{$k}) ],
                } } 1 .. 3 ], 20);
                $fail += grep { ($_->{status} // 0) != 200 } @r;
            }
            POSIX::_exit($fail ? 1 : 0);
        }
        push @kids, $pid;
    }
    for my $pid (@kids) {
        waitpid($pid, 0);
        is($? >> 8, 0, "client $pid: every stream answered 200");
    }

    # A real client: curl with prior knowledge.
    my ($CURL) = grep { -x } map { "$_/curl" } split /:/, $ENV{PATH} // '';
    SKIP: {
        skip 'no curl', 1 unless $CURL;
        my $tp = ProfHotspots::traceparent($ID{curl});
        my $url = 'http://127.0.0.1:' . $t->port . '/h2curl';
        # One request per curl: curl 7.88 fails ("Error in the HTTP2 framing
        # layer") reusing a prior-knowledge connection, profiling or not.
        my $out = '';
        $out .= `$CURL -sS --http2-prior-knowledge -H 'traceparent: $tp' -o /dev/null -w '%{http_version} %{response_code}\\n' $url 2>&1`
            for 1 .. 4;
        is($out, "2 200\n" x 4, 'curl --http2-prior-knowledge: 4 requests '
           . 'answered 200 over HTTP/2');
    }

    # A gzipped response larger than the stream's flow control window: the
    # stream goes on when the client's WINDOW_UPDATE frames arrive.
    my @gz = map { ProfHTTP::h2_requests($t->port, [ {
        path => '/big.txt',
        headers => [ traceparent => ProfHotspots::traceparent($ID{gz}),
                     'accept-encoding' => 'gzip' ] } ], 20) } 1 .. 3;
    my @gz_bad = grep { ($_->{status} // 0) != 200 || $_->{error} } @gz;
    ok(!@gz_bad, '3 gzipped responses of 4 MB over HTTP/2 answered 200')
        or diag(join(', ', map { ($_->{status} // '-') . ' '
                                 . ($_->{error} // '') } @gz_bad));

    is(join(',', $t->worker_pids), $worker, 'the same worker served them all');
    ok($t->stop, 'nginx quits (and writes its last profile)');

    my @S = ProfHotspots::hotspot_samples(
        ProfPprof::decode_dump_dir($t->dump_dir));

    ProfHotspots::ok_burn_ids(
        name => 'streams with a traceparent',
        samples => \@S, filter => endpoint_is('GET /h2a'),
        span => $U64{a}, root => $U64{a});
    ProfHotspots::ok_burn_ids(
        name => 'streams without trace headers, between them',
        samples => \@S, filter => endpoint_is('GET /h2c'),
        span => undef, root => undef);
    ProfHotspots::ok_burn_ids(
        name => 'streams with x-datadog headers',
        samples => \@S, filter => endpoint_is('GET /h2b'),
        span => $U64{b}, root => $U64{b});
    for my $k (qw(x1 x2)) {
        ProfHotspots::ok_burn_ids(
            name => "concurrent connection $k",
            samples => \@S, filter => endpoint_is("GET /h2$k"),
            span => $U64{$k}, root => $U64{$k});
    }
    SKIP: {
        skip 'no curl', 1 unless $CURL;
        ProfHotspots::ok_burn_ids(
            name => 'curl', samples => \@S,
            filter => endpoint_is('GET /h2curl'),
            span => $U64{curl}, root => $U64{curl},
            min_ns => 60e6);
    }

    # The CPU gzip spent on them, wherever the stream went on from.
    my @z = grep { $_->{cpu} > 0 && grep { /libz\.so/ } @{ $_->{objects} } } @S;
    my $z_total = ProfHotspots::sum_cpu(@z);
    my $z_good = ProfHotspots::sum_cpu(grep {
        ProfHotspots::same_value($_->{span}, $U64{gz})
        && ProfHotspots::same_value($_->{endpoint}, 'GET /big.txt') } @z);
    ok($z_total >= 100e6 && $z_good >= 0.95 * $z_total,
       sprintf('gzip over HTTP/2: %.1f%% of %.0fms of cpu-time in libz has the '
               . 'stream\'s span id %s and endpoint GET /big.txt',
               $z_total ? 100 * $z_good / $z_total : 0, $z_total / 1e6, $U64{gz}))
        or diag('libz cpu-time by span / endpoint: '
                . ProfHotspots::format_cpu_by(ProfHotspots::cpu_by(
                    sub { ($_[0]{span} // '-') . ' / '
                          . ($_[0]{endpoint} // '-') }, @z)));

    my %sent = map { $_ => 1 } values %U64;
    my @unknown = grep { !$sent{$_} }
                  map { grep { defined } $_->{span}, $_->{root} } @S;
    is(scalar(@unknown), 0, 'no sample carries an id that was not sent')
        or diag("unknown ids: @unknown[0 .. ($#unknown < 5 ? $#unknown : 5)]");

    # $profiling_span_id per stream.
    my @log = ProfFiles::file_lines($t->prefix . '/access.log');
    my %want = ('/h2a' => $U64{a}, '/h2b' => $U64{b}, '/h2c' => '-',
                '/big.txt' => $U64{gz},
                '/h2curl' => $U64{curl}, '/h2x1' => $U64{x1},
                '/h2x2' => $U64{x2});
    my @wrong = grep {
        my ($uri, $proto, $status, $span) = split ' ';
        $proto ne 'HTTP/2.0' || !defined $want{$uri} || $span ne $want{$uri}
    } @log;
    ok(@log >= 22 && !@wrong, scalar(@log) . ' access log lines: '
       . 'HTTP/2.0, $profiling_span_id the stream\'s parent id ("-" without)')
        or diag(join("\n", @wrong[0 .. ($#wrong < 5 ? $#wrong : 5)]));
}

done_testing();
