#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots through proxying and body filters: the upstream connection
# events of a proxied request carry the client request's ids, a backend
# request (another server of the same worker) carries its own, and the CPU
# gzip spends compressing a response is labelled with the request it
# works for.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use Test::More;
use Time::HiRes qw(time);

use ProfHTTP;
use ProfHotspots qw(endpoint_is);
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my $t = ProfNginx->new(workers => 1);
my $backend = ProfHTTP::free_port();

# A large text file that compresses with some effort.
my $html = $t->prefix . '/html';
mkdir($html) or die;
mkdir("$html/gz") or die;
chmod(0755, $html, "$html/gz");
my $big = ProfWorkload::write_words_file("$html/gz/big.txt", 4_000_000);

my %ID = (
    pass   => '1111111111111111',   # passed through to the backend
    front  => '2222222222222222',   # the front request of /child/
    child  => '3333333333333333',   # what /child/ sends the backend
    bare   => '4444444444444444',   # /bare/ sends the backend none
    gzprox => 'c555555555555555',   # gzip of a proxied response
    gzstat => '6666666666666666',   # gzip of a static file
);
my %U64 = map { $_ => ProfHotspots::hex_to_u64($ID{$_}) } keys %ID;
my $CHILD_TP = ProfHotspots::traceparent($ID{child});

$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;
        root %%PREFIX%%/html;

        location /front/ { proxy_pass http://127.0.0.1:$backend/pass/; }
        location /child/ {
            proxy_set_header traceparent "$CHILD_TP";
            proxy_pass http://127.0.0.1:$backend/kid/;
        }
        location /bare/ {
            proxy_set_header traceparent "";
            proxy_pass http://127.0.0.1:$backend/plain/;
        }
        location /gzproxy/ {
            gzip on;
            gzip_comp_level 9;
            gzip_types text/plain;
            proxy_pass http://127.0.0.1:$backend/files/;
        }
        location /gz/ {
            gzip on;
            gzip_comp_level 9;
            gzip_types text/plain;
        }
    }

    server {
        listen 127.0.0.1:$backend;
        location /pass/ { profiling_burn 30ms; }
        location /kid/ { profiling_burn 30ms; }
        location /plain/ { profiling_burn 30ms; }
        location /files/ { alias %%PREFIX%%/html/gz/; }
    }
EOF
$t->run;
my ($worker) = $t->worker_pids;

sub send_n {
    my ($n, $path, $id, %extra) = @_;
    my @bad;
    for (1 .. $n) {
        my $r = ProfHTTP::get_with($t, $path,
            { traceparent => ProfHotspots::traceparent($ID{$id}), %extra });
        push @bad, "$r->{status} $r->{content}" if $r->{status} != 200;
        if ($extra{'accept-encoding'}) {
            my $plain;
            my $enc = $r->{headers}{'content-encoding'} // 'none';
            gunzip(\$r->{content} => \$plain) if $enc eq 'gzip';
            push @bad, "content-encoding $enc, "
                       . length($plain // '') . ' bytes'
                if $enc ne 'gzip' || ($plain // '') ne $big;
        }
    }
    ok(!@bad, "$n requests to $path (traceparent parent id $ID{$id}) "
       . 'answered 200' . ($extra{'accept-encoding'} ? ', gzipped' : ''))
        or diag(join("\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]));
}

send_n(5, '/front/x', 'pass');
send_n(5, '/child/x', 'front');
send_n(5, '/bare/x', 'bare');
send_n(4, '/gzproxy/big.txt', 'gzprox', 'accept-encoding' => 'gzip');
send_n(4, '/gz/big.txt', 'gzstat', 'accept-encoding' => 'gzip');

is(join(',', $t->worker_pids), $worker, 'the same worker served them all');
ok($t->stop, 'nginx quits (and writes its last profile)');

my @S = ProfHotspots::hotspot_samples(
    ProfPprof::decode_dump_dir($t->dump_dir));
ok(@S > 0, scalar(@S) . ' samples');


subtest 'proxied requests' => sub {
    # proxy_pass passes the client's traceparent: the backend request has
    # the same ids.
    ProfHotspots::ok_burn_ids(
        name => 'backend of /front/ (traceparent passed)',
        samples => \@S, filter => endpoint_is('GET /pass/x'),
        span => $U64{pass}, root => $U64{pass});

    # The front sends its own traceparent: the backend's burn is the
    # backend request's, not the front request's (one worker runs both).
    ProfHotspots::ok_burn_ids(
        name => 'backend of /child/ (proxy_set_header '
                . 'traceparent)',
        samples => \@S, filter => endpoint_is('GET /kid/x'),
        span => $U64{child}, root => $U64{child});
    ProfHotspots::ok_burn_ids(
        name => 'backend of /bare/ (no traceparent passed)',
        samples => \@S, filter => endpoint_is('GET /plain/x'),
        span => undef, root => undef);

    # Whatever sample the front requests got carries their own ids.
    for my $c ([ '/front/x', 'pass' ], [ '/child/x', 'front' ],
               [ '/bare/x', 'bare' ])
    {
        my ($path, $id) = @$c;
        my @wrong = grep { ($_->{endpoint} // '') eq "GET $path"
                           && !ProfHotspots::same_value($_->{span},
                                                        $U64{$id}) }
                    @S;
        my $n = grep { ($_->{endpoint} // '') eq "GET $path" } @S;
        is(scalar(@wrong), 0, "the $n samples with endpoint GET $path "
           . "carry its span id $U64{$id}")
            or diag(ProfHotspots::format_cpu_by(ProfHotspots::cpu_by(
                sub { $_[0]{span} }, @wrong)));
    }

    my %ids = map { $_ => 1 } grep { defined } map { $_->{span} } @S;
    my @unknown = grep { my $x = $_; !grep { $_ eq $x } values %U64 }
                  keys %ids;
    is_deeply(\@unknown, [], 'no sample carries an id that was not sent');
};


subtest 'gzip: the CPU in libz carries the request\'s ids' => sub {
    my @z = grep {
        $_->{cpu} > 0
        && (grep({ /libz\.so/ } @{ $_->{objects} })
            || ProfHotspots::stack_has($_, 'deflate'))
    } @S;
    diag('libz cpu-time by span / endpoint: ' . ProfHotspots::format_cpu_by(
         ProfHotspots::cpu_by(sub { ($_[0]{span} // '-') . ' / '
                                    . ($_[0]{endpoint} // '-') }, @z)));

    for my $c ([ 'gzip of a static file', 'gzstat', 'GET /gz/big.txt' ],
               [ 'gzip of a proxied response', 'gzprox',
                 'GET /gzproxy/big.txt' ])
    {
        my ($name, $id, $endpoint) = @$c;
        # The samples of a request, found by what is not a label: the
        # file's gzip runs in the content handler (ngx_http_static_module
        # has no exported frame), the proxied one in the upstream's event
        # pipe.
        my $piped = $id eq 'gzprox';
        my @mine = grep { ProfHotspots::stack_has($_, 'ngx_event_pipe')
                          == ($piped ? 1 : 0) } @z;
        my $total = ProfHotspots::sum_cpu(@mine);
        my $good = ProfHotspots::sum_cpu(grep {
            ProfHotspots::same_value($_->{span}, $U64{$id})
            && ProfHotspots::same_value($_->{root}, $U64{$id})
            && ProfHotspots::same_value($_->{endpoint}, $endpoint) } @mine);
        ok($total >= 100_000_000 && $good >= 0.95 * $total,
           sprintf('%s: %.1f%% of %.0fms of cpu-time in libz has span id '
                   . '%s and endpoint %s', $name,
                   $total ? 100 * $good / $total : 0, $total / 1e6,
                   $U64{$id}, $endpoint))
            or diag(ProfHotspots::format_cpu_by(ProfHotspots::cpu_by(
                sub { ($_[0]{span} // '-') . ' / '
                      . ($_[0]{endpoint} // '-') }, @mine)));
    }

    my $all = ProfHotspots::sum_cpu(@z);
    my $labelled = ProfHotspots::sum_cpu(grep {
        defined $_->{span} && ($_->{span} eq $U64{gzstat}
                               || $_->{span} eq $U64{gzprox}) } @z);
    ok($all > 0 && $labelled >= 0.95 * $all,
       sprintf('%.1f%% of all the cpu-time in libz carries the span id of '
               . 'a gzipped request', $all ? 100 * $labelled / $all : 0));
};

done_testing();
