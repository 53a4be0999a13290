#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots over HTTP/3 (QUIC), with two real clients: t/h3client
# (quic-go) sends trace headers, ngtcp2's gtlsclient sends none of ours
# (its ids come from the query string). Each request's CPU, in its handler
# and in its filters (SSI over a large page), carries its endpoint and its
# span ids, streams of one connection each their own.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX ();
use Test::More;

use ProfEnv;
use ProfFiles;
use ProfHotspots qw(endpoint_is);
use ProfNginx;
use ProfPprof;
use ProfWorkload;

plan(skip_all => 'nginx without HTTP/3 (--with-http_v3_module)')
    unless ProfEnv::nginx_has('--with-http_v3_module');

my $H3CLIENT = ProfEnv::build_dir() . '/test/h3client';
plan(skip_all => "no $H3CLIENT: make test-modules with go and Debian's "
                 . 'golang-github-lucas-clemente-quic-go-dev')
    unless -x $H3CLIENT;
my ($GTLSCLIENT) = grep { -x } map { "$_/gtlsclient" } split /:/, $ENV{PATH};
plan(skip_all => 'no gtlsclient: install the Debian package ngtcp2-client')
    unless $GTLSCLIENT;
my ($OPENSSL) = grep { -x } map { "$_/openssl" } split /:/, $ENV{PATH};
plan(skip_all => 'no openssl to make a certificate') unless $OPENSSL;

my %ID = (a => 'a3a3a3a3a3a3a3a3', b => '0b3b0b3b0b3b0b3b',
          ssi => '5555555555555555', ssiq => '7777777777777777');
my %U64 = map { $_ => ProfHotspots::hex_to_u64($ID{$_}) } keys %ID;

my $t = ProfNginx->new(workers => 1);
my $p = $t->prefix;
my $req = `$OPENSSL req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $p/key.pem -out $p/cert.pem -days 30 -subj /CN=localhost 2>&1`;
$? == 0 or die "openssl req failed: $req";

# A large page of SSI commands: the SSI filter parses it as it goes out.
mkdir("$p/html") or die;
chmod(0755, "$p/html");
{
    my $words = ProfWorkload::write_words_file("$p/html/words.txt", 200_000);
    open(my $fh, '>', "$p/html/ssi.html") or die;
    print $fh join('<!--# echo var="uri" -->', split(/\n/, $words))
        for 1 .. 40;
    close($fh);
    chmod(0644, "$p/html/ssi.html");
}

$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    log_format hotspots '$uri $server_protocol $status $profiling_span_id';

    server {
        listen 127.0.0.1:%%PORT%% quic;
        listen 127.0.0.1:%%PORT%% ssl;
        http3 on;
        ssl_certificate %%PREFIX%%/cert.pem;
        ssl_certificate_key %%PREFIX%%/key.pem;
        access_log %%PREFIX%%/access.log hotspots;
        root %%PREFIX%%/html;

        location /h3a { profiling_burn 30ms; }
        location /h3b { profiling_burn 30ms; }
        location /h3none { profiling_burn 30ms; }
        location = /ssi.html { ssi on; }
        location = /ssiq.html {
            ssi on;
            profiling_span_id $arg_span;
            alias %%PREFIX%%/html/ssi.html;
        }
    }
EOF
$t->run;
my ($worker) = $t->worker_pids;
my $base = 'https://127.0.0.1:' . $t->port;

# One h3client run: its requests as concurrent streams of one connection.
sub h3client {
    my (@specs) = @_;
    my $args = join(' ', map { "'$base$_'" } @specs);
    my $out = `$H3CLIENT $args 2>&1`;
    return ($? >> 8, $out);
}

my $tp_a = ProfHotspots::traceparent($ID{a});
for (1 .. 8) {
    my ($rc, $out) = h3client("/h3a|traceparent: $tp_a", '/h3none',
                              "/h3b|x-datadog-trace-id: 77"
                              . "|x-datadog-parent-id: $U64{b}");
    is($rc . ($out =~ tr/\n//) . ($out =~ /^(\d \S+ \d+)/mg)[0],
       '030 HTTP/3.0 200', 'h3client: three streams on one connection, '
       . 'answered 200 over HTTP/3') or diag($out);
}

# Three clients of each kind at once, each fetching the SSI page twice.
my @kids;
for my $client ('h3client', 'gtlsclient') {
    for (1 .. 3) {
        my $pid = fork() // die "fork: $!";
        if ($pid == 0) {
            my $rc;
            if ($client eq 'h3client') {
                my $tp = ProfHotspots::traceparent($ID{ssi});
                ($rc) = h3client(("/ssi.html|traceparent: $tp") x 2);
            } else {
                my $url = "$base/ssiq.html?span=$ID{ssiq}";
                `$GTLSCLIENT -q --exit-on-all-streams-close --timeout=20s 127.0.0.1 @{[ $t->port ]} $url $url 2>&1`;
                $rc = $? >> 8;
            }
            POSIX::_exit($rc);
        }
        push @kids, [ $pid, $client ];
    }
}
for my $kid (@kids) {
    waitpid($kid->[0], 0);
    is($? >> 8, 0, "$kid->[1] $kid->[0]: the SSI page, twice");
}

is(join(',', $t->worker_pids), $worker, 'the same worker served them all');
ok($t->stop, 'nginx quits (and writes its last profile)');

my @log = ProfFiles::file_lines("$p/access.log");
my %want = ('/h3a' => $U64{a}, '/h3b' => $U64{b}, '/h3none' => '-',
            '/ssi.html' => $U64{ssi}, '/ssiq.html' => $U64{ssiq});
my @wrong = grep {
    my ($uri, $proto, $status, $span) = split ' ';
    $proto ne 'HTTP/3.0' || $status ne '200' || !defined $want{$uri}
    || $span ne $want{$uri}
} @log;
ok(@log == 36 && !@wrong, scalar(@log) . ' access log lines: HTTP/3.0, '
   . '200, $profiling_span_id the request\'s ("-" without)')
    or diag(join("\n", @wrong[0 .. ($#wrong < 5 ? $#wrong : 5)]));

my @S = ProfHotspots::hotspot_samples(
    ProfPprof::decode_dump_dir($t->dump_dir));

ProfHotspots::ok_burn_ids(
    name => 'streams with a traceparent',
    samples => \@S, filter => endpoint_is('GET /h3a'),
    span => $U64{a}, root => $U64{a});
ProfHotspots::ok_burn_ids(
    name => 'streams without trace headers, between them',
    samples => \@S, filter => endpoint_is('GET /h3none'),
    span => undef, root => undef);
ProfHotspots::ok_burn_ids(
    name => 'streams with x-datadog headers',
    samples => \@S, filter => endpoint_is('GET /h3b'),
    span => $U64{b}, root => $U64{b});

# The CPU of the SSI filter, wherever QUIC resumed the stream from: each
# page's carries its own ids, and together they are nearly all of it.
my @ssi = grep { $_->{cpu} > 0
                 && ProfHotspots::stack_has($_, qr/^ngx_http_ssi/) } @S;
for my $case (['/ssi.html', 'ssi', 'h3client, traceparent'],
              ['/ssiq.html', 'ssiq', 'gtlsclient, query string'])
{
    my ($uri, $id, $how) = @$case;
    my @mine = grep { ($_->{endpoint} // '') eq "GET $uri" } @ssi;
    my $good = ProfHotspots::sum_cpu(grep {
        ProfHotspots::same_value($_->{span}, $U64{$id})
        && ProfHotspots::same_value($_->{root}, $U64{$id}) } @mine);
    ok($good >= 50e6 && $good == ProfHotspots::sum_cpu(@mine),
       sprintf('SSI over HTTP/3 (%s): %.0fms of the SSI filter with '
               . 'endpoint GET %s, all of it with its span id', $how,
               $good / 1e6, $uri));
}
my $ssi_total = ProfHotspots::sum_cpu(@ssi);
my $ssi_good = ProfHotspots::sum_cpu(grep {
    my $s = $_;
    grep { ProfHotspots::same_value($s->{span}, $U64{$_->[1]})
           && ProfHotspots::same_value($s->{endpoint}, "GET $_->[0]") }
         ['/ssi.html', 'ssi'], ['/ssiq.html', 'ssiq'] } @ssi);
ok($ssi_good >= 0.95 * $ssi_total,
   sprintf('%.1f%% of the SSI filter\'s %.0fms of cpu-time carries its own '
           . 'request\'s span id and endpoint',
           $ssi_total ? 100 * $ssi_good / $ssi_total : 0, $ssi_total / 1e6))
    or diag('SSI cpu-time by span / endpoint: ' . ProfHotspots::format_cpu_by(
        ProfHotspots::cpu_by(sub { ($_[0]{span} // '-') . ' / '
                                   . ($_[0]{endpoint} // '-') }, @ssi)));

# QUIC's output (the packets of the connection's streams, encrypted and
# sent from the connection's own event) goes with the request that last
# ran on one of its streams, as HTTP/2's output goes with its streams;
# what it sends before the first request and after the last (the
# handshake, the closing) is no request's.
my @out = grep { $_->{cpu} > 0
                 && ProfHotspots::stack_has($_, 'ngx_quic_output') } @S;
my $out_total = ProfHotspots::sum_cpu(@out);
my $out_good = ProfHotspots::sum_cpu(grep { defined $_->{endpoint} } @out);
ok($out_total > 0 && $out_good >= 0.75 * $out_total,
   sprintf('%.1f%% of QUIC\'s output, %.0fms of cpu-time, carries a '
           . 'request\'s endpoint', $out_total ? 100 * $out_good / $out_total
                                              : 0, $out_total / 1e6))
    or diag('by leaf: ' . ProfHotspots::format_cpu_by(
        ProfHotspots::cpu_by(sub { $_[0]{leaf} },
                             grep { !defined $_->{endpoint} } @out)));

my %sent = map { $_ => 1 } values %U64;
my @unknown = grep { !$sent{$_} }
              map { grep { defined } $_->{span}, $_->{root} } @S;
is(scalar(@unknown), 0, 'no sample carries an id that was not sent')
    or diag("unknown ids: @unknown[0 .. ($#unknown < 5 ? $#unknown : 5)]");

done_testing();
