#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots across a request's life: a keep-alive connection's next
# request does not inherit the previous one's ids, internal redirects,
# error_page and subrequests keep the request's ids, a "profiling off"
# location is not labelled, an idle worker is not labelled, and
# $profiling_span_id / $profiling_request_cpu in the access log; a
# request that outlives the event it was read in (it waits for a mirror
# subrequest) has the ids for the work done in that event.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use HTTP::Tiny;
use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ProfFiles;
use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWait;

my %ID = (
    ka    => 'abcdef0123456789',
    pipe  => '0123456789abcdef',
    ep    => '0e0e0e0e0e0e0e0e',
    rw    => '0f0f0f0f0f0f0f0f',
    tf    => '1010101010101010',
    nf    => '1111111111111112',
    named => '1212121212121212',
    auth  => '1313131313131313',
    on    => '1414141414141414',
    off   => '1515151515151515',
);
my %U64 = map { $_ => ProfHotspots::hex_to_u64($ID{$_}) } keys %ID;
my $TF_OTHER = '42';    # what the try_files target would resolve

my $t = ProfNginx->new(workers => 1);
mkdir($t->prefix . '/html') or die;
open(my $fh, '>', $t->prefix . '/html/index.html') or die;
print $fh "static\n";
close($fh);
chmod(0755, $t->prefix . '/html');
chmod(0644, $t->prefix . '/html/index.html');

$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;

    log_format hotspots '$connection $connection_requests $request_uri '
                        '$status $profiling_span_id $profiling_request_cpu';

    server {
        listen 127.0.0.1:%%PORT%%;
        root %%PREFIX%%/html;
        access_log %%PREFIX%%/access.log hotspots;

        location /ka1 { profiling_burn 30ms; }
        location /ka2 { profiling_burn 30ms; }
        location /pipe1 { profiling_burn 30ms; }
        location /pipe2 { profiling_burn 30ms; }

        # redirected before the preaccess phase
        location /ep { error_page 418 = /burn-ep; return 418; }
        location /burn-ep { profiling_burn 30ms; }
        location /rw { rewrite ^ /burn-rw last; }
        location /burn-rw { profiling_burn 30ms; }

        # redirected after it: the ids come from where it runs
        location /tf {
            profiling_span_id $http_x_other;
            try_files /nonexistent /burn-tf;
        }
        location /burn-tf {
            profiling_span_id $http_x_tf;
            profiling_burn 30ms;
        }
        location /nf { error_page 404 = /burn-nf; }
        location /burn-nf { profiling_burn 30ms; }
        location /named { try_files /nonexistent @named; }
        location @named { profiling_burn 30ms; }

        # a subrequest works for its main request
        location /auth { auth_request /burn-auth; profiling_burn 1ms; }
        location = /burn-auth { internal; profiling_burn 30ms; }

        location /on { profiling_burn 30ms; }
        location /off { profiling off; profiling_burn 30ms; }

        location /ret { return 204; }
    }
EOF
$t->run;
my ($worker) = $t->worker_pids;
my $N = 5;

sub tp { return { traceparent => ProfHotspots::traceparent($ID{ $_[0] }) } }

# Keep-alive: on one connection, a request with ids, then one without.
{
    my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
    my @status;
    for (1 .. $N) {
        push @status, ProfHTTP::get_with($t, '/ka1', tp('ka'), $http)
                      ->{status};
        push @status, ProfHTTP::get_with($t, '/ka2', {}, $http)->{status};
    }
    is("@status", join(' ', (200) x (2 * $N)),
       "keep-alive: $N pairs of requests answered 200");
}

# Pipelined: both requests in one write, the second without ids.
{
    my @status;
    for (1 .. $N) {
        my ($st, $body, $raw) = ProfHTTP::raw_request($t->port,
            "GET /pipe1 HTTP/1.1\r\nHost: x\r\ntraceparent: "
            . ProfHotspots::traceparent($ID{pipe}) . "\r\n\r\n"
            . "GET /pipe2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        push @status, join('+', $raw =~ m{^HTTP/1\.1 (\d+)}mg);
    }
    is("@status", join(' ', ('200+200') x $N),
       "pipelined: $N pairs of requests answered 200");
}

my %paths = (ep => '/ep', rw => '/rw', tf => '/tf', nf => '/nf/missing',
             named => '/named', auth => '/auth', on => '/on', off => '/off');
for my $k (sort keys %paths) {
    my $headers = tp($k);
    $headers->{'x-tf'} = $ID{tf} if $k eq 'tf';
    $headers->{'x-other'} = $TF_OTHER if $k eq 'tf';
    my @status = map { ProfHTTP::get_with($t, $paths{$k}, $headers)->{status} }
                 1 .. $N;
    is("@status", join(' ', (200) x $N), "$paths{$k}: $N requests answered "
       . '200');
}

my @ret = map { ProfHTTP::get_with($t, '/ret', tp('on'))->{status} } 1 .. $N;
is("@ret", join(' ', (204) x $N), "/ret: $N requests answered 204");
my @static = map { ProfHTTP::get_with($t, '/index.html')->{status} } 1 .. $N;
is("@static", join(' ', (200) x $N), "/index.html: $N requests answered 200");

# The last request has ids; then the worker idles: a profile of a period
# that starts after it has no request labels.
is(ProfHTTP::get_with($t, '/on', tp('on'))->{status}, 200,
   'a last request with ids answered 200');
my $last_request = time();
my $idle;
ProfWait::wait_until(sub {
    for my $f (profile_files($t->dump_dir, qr/\.pprof$/)) {
        my $p = eval { decode_profile($f) } or next;
        if ($p->{time_nanos} / 1e9 > $last_request + 0.05) {
            $idle = $p;
            return 1;
        }
    }
    return 0;
}, 5, 0.1);

is(join(',', $t->worker_pids), $worker, 'the same worker served them all');
ok($t->stop, 'nginx quits (and writes its last profile)');

my @S = ProfHotspots::hotspot_samples(
    ProfPprof::decode_dump_dir($t->dump_dir));
my @log = ProfFiles::file_lines($t->prefix . '/access.log');
my %log;        # uri => [ [connection, n, status, span, cpu], ... ]
for (@log) {
    my ($c, $n, $uri, $status, $span, $cpu) = split ' ';
    push @{ $log{$uri} }, [ $c, $n, $status, $span, $cpu ];
}

sub endpoint_in {
    my %e = map { $_ => 1 } @_;
    return sub { $e{ $_[0]{endpoint} // '' } };
}

# The logged $profiling_span_id of every request to $uri.
sub logged_spans {
    my ($uri) = @_;
    return join(' ', map { $_->[3] } @{ $log{$uri} // [] });
}


subtest 'keep-alive: the next request does not inherit the ids' => sub {
    my %conns = map { $_->[0] => 1 } @{ $log{'/ka1'} // [] },
                                     @{ $log{'/ka2'} // [] };
    is(scalar(keys %conns), 1, 'the keep-alive requests shared one '
       . 'connection') or diag(explain \%log);

    ProfHotspots::ok_burn_ids(
        name => 'first requests (traceparent)',
        samples => \@S, filter => endpoint_in('GET /ka1'),
        span => $U64{ka}, root => $U64{ka});
    ProfHotspots::ok_burn_ids(
        name => 'next requests, without trace headers',
        samples => \@S, filter => endpoint_in('GET /ka2'),
        span => undef, root => undef);
    is(logged_spans('/ka1'), join(' ', ($U64{ka}) x $N),
       '$profiling_span_id of the first requests is the parent id');
    is(logged_spans('/ka2'), join(' ', ('-') x $N),
       '$profiling_span_id of the next requests is "-"');

    ProfHotspots::ok_burn_ids(
        name => 'pipelined first requests',
        samples => \@S, filter => endpoint_in('GET /pipe1'),
        span => $U64{pipe}, root => $U64{pipe});
    ProfHotspots::ok_burn_ids(
        name => 'pipelined next requests, without trace '
                . 'headers', samples => \@S,
        filter => endpoint_in('GET /pipe2'),
        span => undef, root => undef);
    is(logged_spans('/pipe2'), join(' ', ('-') x $N),
       '$profiling_span_id of the pipelined next requests is "-"');
};


subtest 'internal redirects, error_page and subrequests keep the ids' => sub {
    # [ key, endpoints its samples may have (before or after the redirect) ]
    for my $c ([ 'ep', 'GET /ep', 'GET /burn-ep' ],
               [ 'rw', 'GET /rw', 'GET /burn-rw' ],
               [ 'tf', 'GET /tf', 'GET /burn-tf' ],
               [ 'nf', 'GET /nf/missing', 'GET /burn-nf' ],
               [ 'named', 'GET /named' ],
               [ 'auth', 'GET /auth', 'GET /burn-auth' ])
    {
        my ($k, @endpoints) = @$c;
        ProfHotspots::ok_burn_ids(
            name => "$paths{$k} (" . join(', ', @endpoints)
                    . ')',
            samples => \@S,
            filter => endpoint_in(@endpoints),
            span => $U64{$k}, root => $U64{$k});
        is(logged_spans($paths{$k}), join(' ', ($U64{$k}) x $N),
           "$paths{$k}: \$profiling_span_id is the request's span id");
    }

    # The try_files source would resolve other ids: after the redirect,
    # the target's directives say.
    my @other = grep { ($_->{span} // '') eq $TF_OTHER } @S;
    is(scalar(@other), 0, 'after the internal redirect of try_files, the '
       . 'ids come from the directives of the location it went to');
};


subtest '"profiling off" in a location; an idle worker' => sub {
    ProfHotspots::ok_burn_ids(
        name => 'a location with profiling on',
        samples => \@S, filter => endpoint_in('GET /on'),
        span => $U64{on}, root => $U64{on});

    my @labelled = grep { ($_->{span} // '') eq $U64{off}
                          || ($_->{endpoint} // '') =~ m{/off} } @S;
    is(scalar(@labelled), 0, 'no sample carries the span id or endpoint of '
       . 'the requests to the "profiling off" location')
        or diag(ProfHotspots::format_cpu_by(ProfHotspots::cpu_by(
            sub { ($_[0]{span} // '-') . ' / ' . ($_[0]{endpoint} // '-') },
            @labelled)));

    # Their burn is there, without labels (nothing else burns unlabelled).
    ProfHotspots::ok_burn_ids(
        name => '"profiling off"', samples => \@S,
        filter => sub { !$_[0]{has_span_label}
                        && !$_[0]{has_endpoint_label} },
        span => undef, root => undef, endpoint => undef,
        min_ns => 0.5 * $N * 30e6);

    ok($idle, 'a profile of a period after the last request was written')
        or return;
    my @is = ProfHotspots::hotspot_samples($idle);
    my @with = grep { $_->{has_span_label} || $_->{has_root_label}
                      || $_->{has_endpoint_label} } @is;
    my $wall = 0;
    $wall += $_->{wall} for @is;
    ok(@is > 0 && $wall > 0.5e9, sprintf('it has %d samples, %.0fms of '
                                         . 'wall-time', scalar(@is),
                                         $wall / 1e6));
    is(scalar(@with), 0, 'none of them has a span id or an endpoint')
        or diag(ProfHotspots::format_cpu_by(ProfHotspots::cpu_by(
            sub { ($_[0]{span} // '-') . ' / ' . ($_[0]{endpoint} // '-') },
            @with)));
};


subtest '$profiling_request_cpu' => sub {
    for my $uri (qw(/ka1 /ka2 /pipe1 /pipe2 /ep /rw /on /off)) {
        my @cpu = map { $_->[4] } @{ $log{$uri} // [] };
        my @bad = grep { !/^\d+$/ || $_ < 25000 || $_ > 60000 } @cpu;
        ok(@cpu >= $N && !@bad, "$uri (burns 30ms): \$profiling_request_cpu "
           . "between 25000 and 60000 (@cpu)");
    }
    for my $uri (qw(/index.html /ret)) {
        my @cpu = map { $_->[4] } @{ $log{$uri} // [] };
        my @bad = grep { !/^\d+$/ || $_ >= 2000 } @cpu;
        ok(@cpu == $N && !@bad, "$uri: \$profiling_request_cpu below 2000 "
           . "(@cpu)");
    }
};

# A request made in an event it outlives: its first event (the new
# connection's) reads it and burns in its content handler, then it waits
# for its mirror subrequest, which a slow backend answers 300ms later. The
# burn's samples were taken before the worker knew the request, and it no
# longer runs when that event ends: they are its all the same.
subtest 'a request that outlives the event it was read in' => sub {
    my $id = '1414141414141414';
    my $slow = ProfHTTP::free_port();
    my $listen = IO::Socket::INET->new(Listen => 16, LocalAddr => '127.0.0.1',
                                       LocalPort => $slow, ReuseAddr => 1)
        or die "listen: $!";
    my $backend = fork();
    die "fork: $!" unless defined $backend;
    if ($backend == 0) {
        while (my $c = $listen->accept) {
            my $req = '';
            while ($req !~ /\r\n\r\n/) {
                last unless sysread($c, $req, 4096, length $req);
            }
            select(undef, undef, undef, 0.3);
            print $c "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
            close($c);
        }
        POSIX::_exit(0);
    }
    close($listen);

    my $o = ProfNginx->new(workers => 1);
    $o->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;

    log_format outlive '\$request_uri \$status \$request_time';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%PREFIX%%/outlive.log outlive;

        location /outlive { mirror /mirror; profiling_burn 30ms; }
        location = /mirror { internal; proxy_pass http://127.0.0.1:$slow; }
    }
EOF
    $o->run;

    my @status = map {
        ProfHTTP::get_with($o, '/outlive',
                           { traceparent => ProfHotspots::traceparent($id) })
            ->{status}
    } 1 .. 5;
    is("@status", '200 200 200 200 200', '5 requests answered 200');

    ok($o->stop, 'nginx quits');
    kill('TERM', $backend);
    waitpid($backend, 0);

    # Logged when the mirror was answered, in a later event.
    my @took = map { (split ' ')[2] }
               grep { m{^/outlive 200 } }
               ProfFiles::file_lines($o->prefix . '/outlive.log');
    ok(@took == 5 && !grep({ $_ < 0.3 } @took), 'each ended 0.3s or more '
       . "after it was read (@took)");

    ProfHotspots::ok_burn_ids(
        name => 'the burn in the event that read them',
        samples => [ ProfHotspots::hotspot_samples(
                         ProfPprof::decode_dump_dir($o->dump_dir)) ],
        filter => sub { 1 }, min_ns => 100_000_000,
        span => ProfHotspots::hex_to_u64($id),
        root => ProfHotspots::hex_to_u64($id),
        endpoint => 'GET /outlive');
};

done_testing();
