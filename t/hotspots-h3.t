#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots over HTTP/3 (QUIC), with a real client (ngtcp2's
# gtlsclient): each request's CPU, in its handler and in its filters (SSI
# over a large file), carries its endpoint and its span ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX ();
use Test::More;

use ProfTest;

plan(skip_all => 'nginx without HTTP/3 (--with-http_v3_module)')
    unless ProfTest::nginx_has('--with-http_v3_module');

my ($CLIENT) = grep { -x } map { "$_/gtlsclient" } split /:/, $ENV{PATH};
plan(skip_all => 'no HTTP/3 client: install the Debian package '
                 . 'ngtcp2-client') unless $CLIENT;
my ($OPENSSL) = grep { -x } map { "$_/openssl" } split /:/, $ENV{PATH};
plan(skip_all => 'no openssl to make a certificate') unless $OPENSSL;

# gtlsclient sends no headers of ours: the ids come from the query string.
my %ID = (a => 'a3a3a3a3a3a3a3a3', b => '0b3b0b3b0b3b0b3b',
          ssi => '5555555555555555');
my %U64 = map { $_ => ProfTest::hex_to_u64($ID{$_}) } keys %ID;

my $t = ProfTest->new(workers => 1);
my $p = $t->prefix;
my $req = `$OPENSSL req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $p/key.pem -out $p/cert.pem -days 30 -subj /CN=localhost 2>&1`;
$? == 0 or die "openssl req failed: $req";

# A large page of SSI commands: the SSI filter parses it as it goes out.
mkdir("$p/html") or die;
chmod(0755, "$p/html");
{
    my $words = $t->write_words_file("$p/html/words.txt", 200_000);
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
    profiling_span_id $arg_span;

    log_format hotspots '$request_uri $server_protocol $status '
                        '$profiling_span_id';

    server {
        listen 127.0.0.1:%%PORT%% quic;
        listen 127.0.0.1:%%PORT%% ssl;
        http3 on;
        ssl_certificate %%PREFIX%%/cert.pem;
        ssl_certificate_key %%PREFIX%%/key.pem;
        access_log %%PREFIX%%/access.log hotspots;

        location /h3a { profiling_burn 30ms; }
        location /h3b { profiling_burn 30ms; }
        location /h3none { profiling_burn 30ms; }
        location = /ssi.html {
            root %%PREFIX%%/html;
            ssi on;
        }
    }
EOF
$t->run;
my ($worker) = $t->worker_pids;

# One gtlsclient connection: its URIs as concurrent streams.
sub h3 {
    my (@uris) = @_;
    my @urls = map { 'https://127.0.0.1:' . $t->port . $_ } @uris;
    my $out = `$CLIENT -q --exit-on-all-streams-close --timeout=20s 127.0.0.1 @{[ $t->port ]} @urls 2>&1`;
    return ($? >> 8, $out);
}

for (1 .. 8) {
    my ($rc, $out) = h3("/h3a?span=$ID{a}", "/h3none",
                        "/h3b?span=$U64{b}");
    is($rc, 0, 'gtlsclient: three streams on one connection')
        or diag(substr($out, -2000));
}
# Three clients at once, each fetching the SSI page on two streams.
my @kids;
for (1 .. 3) {
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        my ($rc) = h3(("/ssi.html?span=$ID{ssi}") x 2);
        POSIX::_exit($rc);
    }
    push @kids, $pid;
}
for my $pid (@kids) {
    waitpid($pid, 0);
    is($? >> 8, 0, "gtlsclient $pid: the SSI page, twice");
}

is(join(',', $t->worker_pids), $worker, 'the same worker served them all');
ok($t->stop, 'nginx quits (and writes its last profile)');

my @log = ProfTest::file_lines("$p/access.log");
my %want = ('/h3a' => $U64{a}, '/h3b' => $U64{b}, '/h3none' => '-',
            '/ssi.html' => $U64{ssi});
my @wrong = grep {
    my ($uri, $proto, $status, $span) = split ' ';
    $uri =~ s/\?.*//;
    $proto ne 'HTTP/3.0' || $status ne '200' || !defined $want{$uri}
    || $span ne $want{$uri}
} @log;
ok(@log == 30 && !@wrong, scalar(@log) . ' access log lines: HTTP/3.0, '
   . '200, $profiling_span_id the request\'s')
    or diag(join("\n", @wrong[0 .. ($#wrong < 5 ? $#wrong : 5)]));

my @S = ProfTest::hotspot_samples(ProfTest::decode_dump_dir($t->dump_dir));

sub endpoint_is {
    my ($e) = @_;
    return sub { ($_[0]{endpoint} // '') eq $e };
}

ProfTest::ok_burn_ids(name => 'HTTP/3 streams with ids',
                      samples => \@S, filter => endpoint_is('GET /h3a'),
                      span => $U64{a}, root => $U64{a});
ProfTest::ok_burn_ids(name => 'HTTP/3 streams without, between them',
                      samples => \@S, filter => endpoint_is('GET /h3none'),
                      span => undef, root => undef);
ProfTest::ok_burn_ids(name => 'HTTP/3 streams with decimal ids',
                      samples => \@S, filter => endpoint_is('GET /h3b'),
                      span => $U64{b}, root => $U64{b});

# The CPU of the SSI filter, wherever QUIC resumed the stream from.
my @f = grep { $_->{cpu} > 0 && ProfTest::stack_has($_, qr/^ngx_http_ssi/) }
        @S;
my $f_total = ProfTest::sum_cpu(@f);
my $f_good = ProfTest::sum_cpu(grep {
    ProfTest::same_value($_->{span}, $U64{ssi})
    && ProfTest::same_value($_->{endpoint}, 'GET /ssi.html') } @f);
ok($f_total >= 50e6 && $f_good >= 0.95 * $f_total,
   sprintf('SSI over HTTP/3: %.1f%% of %.0fms of cpu-time in the SSI filter '
           . 'has the request\'s span id and endpoint GET /ssi.html',
           $f_total ? 100 * $f_good / $f_total : 0, $f_total / 1e6))
    or diag('SSI cpu-time by span / endpoint: ' . ProfTest::format_cpu_by(
        ProfTest::cpu_by(sub { ($_[0]{span} // '-') . ' / '
                               . ($_[0]{endpoint} // '-') }, @f)));

done_testing();
