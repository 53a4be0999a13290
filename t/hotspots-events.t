#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots for request work that does not start from a plain ready
# event of the request's connection: requests resumed by a timer
# (limit_req delays, limit_rate), the events of a worker that holds the
# accept mutex (accept_mutex on, which makes nginx ask the event module to
# queue the ready events), and those of an event module other than epoll
# (use poll: the wrapper has it queue them).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Uncompress::Gunzip qw(gunzip);
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ProfEnv;
use ProfFiles;
use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my %ID = (lr => '1a1a1a1a1a1a1a1a', rate => '2b2b2b2b2b2b2b2b',
          mutex => '3c3c3c3c3c3c3c3c', poll => '4d4d4d4d4d4d4d4d');
my %U64 = map { $_ => ProfHotspots::hex_to_u64($ID{$_}) } keys %ID;

sub libz_samples {
    return grep { $_->{cpu} > 0 && grep { /libz\.so/ } @{ $_->{objects} } }
           @_;
}

# A test: at least 95% of the cpu-time of @samples (at least $min_ns) has
# the span id and endpoint.
sub ok_labelled {
    my ($name, $span, $endpoint, $min_ns, @samples) = @_;
    my $total = ProfHotspots::sum_cpu(@samples);
    my $good = ProfHotspots::sum_cpu(grep {
        ProfHotspots::same_value($_->{span}, $span)
        && ProfHotspots::same_value($_->{root}, $span)
        && ProfHotspots::same_value($_->{endpoint}, $endpoint) } @samples);
    ok($total >= $min_ns && $good >= 0.95 * $total,
       sprintf('%s: %.1f%% of %.0fms of cpu-time has span id %s and '
               . 'endpoint %s', $name, $total ? 100 * $good / $total : 0,
               $total / 1e6, $span, $endpoint))
        or diag('by span / endpoint: ' . ProfHotspots::format_cpu_by(
            ProfHotspots::cpu_by(sub { ($_[0]{span} // '-') . ' / '
                                       . ($_[0]{endpoint} // '-') },
                                 @samples)));
}

sub gzip_get {
    my ($t, $path, $id, $big) = @_;
    my $r = ProfHTTP::get_with($t, $path,
        { traceparent => ProfHotspots::traceparent($ID{$id}),
          'accept-encoding' => 'gzip' });
    my $plain = '';
    gunzip(\$r->{content} => \$plain)
        if ($r->{headers}{'content-encoding'} // '') eq 'gzip';
    return $r->{status} == 200 && $plain eq $big;
}


subtest 'requests resumed by a timer: limit_req delays, limit_rate' => sub {
    my $t = ProfNginx->new(workers => 1);
    mkdir($t->prefix . '/html') or die;
    chmod(0755, $t->prefix . '/html');
    my $big = ProfWorkload::write_words_file($t->prefix . '/html/big.txt',
                                             4_000_000);

    $t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    limit_req_zone $server_port zone=slow:1m rate=10r/s;
    log_format hotspots '$request_uri $status $profiling_span_id '
                        '$profiling_request_cpu';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%PREFIX%%/access.log hotspots;
        root %%PREFIX%%/html;

        location /lr { limit_req zone=slow burst=20; profiling_burn 30ms; }
        location = /big.txt {
            gzip on;
            gzip_comp_level 9;
            gzip_types text/plain;
            limit_rate 4m;
        }
    }
EOF
    $t->run;

    # 8 requests at once: the first runs, the others wait 100ms, 200ms, ...
    my @kids;
    for (1 .. 8) {
        my $pid = fork();
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            my $r = ProfHTTP::get_with($t, '/lr',
                { traceparent => ProfHotspots::traceparent($ID{lr}) });
            POSIX::_exit($r->{status} == 200 ? 0 : 1);
        }
        push @kids, $pid;
    }
    my $failed = 0;
    for (@kids) {
        waitpid($_, 0);
        $failed++ if $?;
    }
    is($failed, 0, '8 concurrent requests to a limit_req location (delayed '
       . 'by 100ms each) answered 200');

    my $ok = grep { gzip_get($t, '/big.txt', 'rate', $big) } 1 .. 3;
    is($ok, 3, '3 gzipped responses sent at limit_rate 4m');

    ok($t->stop, 'nginx quits');
    my @S = ProfHotspots::hotspot_samples(
        ProfPprof::decode_dump_dir($t->dump_dir));

    ok_labelled('limit_req: burn of the delayed requests', $U64{lr},
                'GET /lr', 100e6, ProfHotspots::burn_samples(@S));
    ok_labelled('limit_rate: gzip', $U64{rate}, 'GET /big.txt', 100e6,
                libz_samples(@S));

    my @cpu = map { (split ' ')[3] }
              grep { m{^/lr } } ProfFiles::file_lines($t->prefix
                                                      . '/access.log');
    my @bad = grep { !/^\d+$/ || $_ < 25000 || $_ > 60000 } @cpu;
    ok(@cpu == 8 && !@bad, 'limit_req: $profiling_request_cpu of every '
       . "request (30ms of burn) between 25000 and 60000 (@cpu)");
};


# gzip of proxied responses, with $directive in the events block.
sub proxied_gzip {
    my ($directive, $id) = @_;
    my $t = ProfNginx->new(workers => 2);
    my $backend = ProfHTTP::free_port();
    mkdir($t->prefix . '/html') or die;
    chmod(0755, $t->prefix . '/html');
    my $big = ProfWorkload::write_words_file($t->prefix . '/html/big.txt',
                                             4_000_000);

    $t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /gzproxy/ {
            gzip on;
            gzip_comp_level 9;
            gzip_types text/plain;
            proxy_pass http://127.0.0.1:$backend/;
        }
    }
    server {
        listen 127.0.0.1:$backend;
        root %%PREFIX%%/html;
    }
EOF
    $t->add_events_directives($directive);
    $t->run;

    my $ok = grep { gzip_get($t, '/gzproxy/big.txt', $id, $big) } 1 .. 4;
    is($ok, 4, '4 gzipped proxied responses');

    ok($t->stop, 'nginx quits');
    unlike($t->error_log, qr/ready events are posted and run after/,
           'with epoll, the wrapper runs the events from its instance')
        if $directive !~ /^use /;
    my @S = ProfHotspots::hotspot_samples(
        ProfPprof::decode_dump_dir($t->dump_dir));
    ok_labelled('gzip of the proxied responses (upstream events)',
                $U64{$id}, 'GET /gzproxy/big.txt', 200e6, libz_samples(@S));
}

subtest 'accept_mutex on: the events of the worker holding it' => sub {
    proxied_gzip('accept_mutex on;', 'mutex');
};

subtest 'use poll: events the event module queues, the wrapper runs' => sub {
    plan skip_all => 'nginx without the poll module (--with-poll_module; '
                     . 'ci/nginx-matrix builds it)'
        unless ProfEnv::nginx_v() =~ /--with-poll_module/;
    proxied_gzip('use poll;', 'poll');
};

done_testing();
