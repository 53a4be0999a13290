#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots: event.json's endpoint_counts, as the stand-in agent
# (t/agent.pl) receives it, counts the requests each endpoint completed in
# the profile's period; over the uploads of a run, every request once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use HTTP::Tiny;
use JSON::PP;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ProfFiles qw(slurp);
use ProfHTTP;
use ProfNginx;
use ProfWait;
use ProfAgent;


# Uploads by profile_seq: { seq => { start, end, counts, event } }.
sub uploads {
    my ($agent) = @_;
    my %u;
    for my $d (ProfAgent::upload_dirs($agent)) {
        my $e = eval { decode_json(slurp("$d/event") // '') } or next;
        my ($seq) = $e->{tags_profiler} =~ /(?:^|,)profile_seq:(\d+)/;
        next unless defined $seq;
        $u{$seq} = { start => epoch_of($e->{start}), end => epoch_of($e->{end}),
                     counts => $e->{endpoint_counts} // {}, event => $e };
    }
    return \%u;
}

sub wait_upload {
    my ($agent, $seq, $timeout) = @_;
    my $u;
    wait_until(sub { $u = uploads($agent)->{$seq} }, $timeout // 10);
    return $u;
}


my $agent_port = ProfHTTP::free_port();
my $agent = start_agent("127.0.0.1:$agent_port");

my $t = ProfNginx->new(workers => 1);
$t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_period 1s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /e1 { profiling_burn 10ms; }
        location /e2 { profiling_burn 10ms; }
        location /custom {
            profiling_endpoint "custom \$arg_n";
            profiling_burn 1ms;
        }
        location /ret { return 204; }
    }
EOF
$t->run;
my $http = HTTP::Tiny->new(timeout => 10, keep_alive => 1);

# Sends a burst: { path => n }; returns { endpoint => n } and whether every
# request ran within ($from, $to).
sub burst {
    my ($plan, $from, $to) = @_;
    my (%sent, $inside);
    $inside = 1;
    for my $path (sort keys %$plan) {
        for (1 .. $plan->{$path}) {
            my $t0 = time();
            my $r = $http->get('http://127.0.0.1:' . $t->port . $path);
            my $t1 = time();
            my ($uri, $n) = $path =~ /^([^?]*)(?:\?n=(\d+))?/;
            my $endpoint = $uri eq '/custom' ? "custom $n" : "GET $uri";
            $sent{$endpoint}++ if $r->{status} == 200 || $r->{status} == 204;
            $inside = 0 if $t0 <= $from || $t1 >= $to;
        }
    }
    return (\%sent, $inside);
}

# Bursts in the middle of three periods, each right after the previous
# period's profile was uploaded: [ seq of the profile covering it, sent,
# inside ].
my @plans = (
    { '/e1' => 3, '/e2' => 1, '/custom?n=1' => 2, '/ret' => 2 },
    { '/e1' => 1, '/e2' => 4, '/custom?n=2' => 1 },
    { '/e1' => 5, '/e2' => 2, '/custom?n=1' => 1, '/ret' => 3 },
);
my @bursts;
my $seq = 0;
for my $plan (@plans) {
    my $u;
    # The next period that has most of its second ahead.
    for (;;) {
        $u = wait_upload($agent, $seq, 10) or last;
        last if time() < $u->{end} + 0.4;
        $seq++;
    }
    ok($u, "profile $seq was uploaded") or last;
    wait_until(sub { time() >= $u->{end} + 0.15 }, 1, 0.01);
    my ($sent, $inside) = burst($plan, $u->{end} + 0.05, $u->{end} + 0.95);
    push @bursts, [ $seq + 1, $sent, $inside ];
    $seq++;
}

# The last requests, then a graceful quit in the middle of the period: the
# worker's last profile covers them.
my $last = wait_upload($agent, $seq, 10);
ok($last, "profile $seq was uploaded");
my ($final_sent) = burst({ '/e1' => 4, '/e2' => 3, '/custom?n=3' => 2 },
                         0, 9e9);
ok($t->stop, 'nginx quits');
my $final_seq = $seq + 1;
ok(wait_upload($agent, $final_seq, 15), "the last profile ($final_seq) "
   . 'was uploaded at exit');
my $all = uploads($agent);
stop_agent($agent);

diag(join("\n", map {
    "profile $_: " . encode_json($all->{$_}{counts})
} sort { $a <=> $b } keys %$all));

my %total_sent;
for my $b (@bursts, [ $final_seq, $final_sent, 1 ]) {
    $total_sent{$_} += $b->[1]{$_} for keys %{ $b->[1] };
}

sub counts_of {
    my ($seq, @endpoints) = @_;
    my $c = $all->{$seq} ? $all->{$seq}{counts} : {};
    my %e = map { $_ => 1 } @endpoints;
    return { map { $_ => $c->{$_} } grep { $e{$_} } keys %$c };
}

sub expected {
    my ($sent, @endpoints) = @_;
    my %e = map { $_ => 1 } @endpoints;
    return { map { $_ => $sent->{$_} } grep { $e{$_} && $sent->{$_} }
             keys %$sent };
}

my @BURN = ('GET /e1', 'GET /e2', 'custom 1', 'custom 2', 'custom 3');

subtest 'each period counts the requests completed in it' => sub {
    for my $b (@bursts) {
        my ($seq, $sent, $inside) = @$b;
        SKIP: {
            skip "the burst of profile $seq ran over a period boundary", 1
                unless $inside;
            is_deeply(counts_of($seq, @BURN), expected($sent, @BURN),
                      "profile $seq: endpoint_counts of the requests that "
                      . 'reached a location');
        }
    }
    my @quiet = grep { my $s = $_; !grep { $_->[0] == $s } @bursts }
                grep { $_ < $final_seq } keys %$all;
    my @noisy = grep { %{ counts_of($_, @BURN) } } @quiet;
    is_deeply(\@noisy, [], 'the profiles of periods without requests count '
              . 'none');
};

subtest 'the last profile, written at exit, counts the last requests' => sub {
    # (Should a period have ended meanwhile, the profiles after $seq.)
    my %got;
    for my $s (grep { $_ > $seq } keys %$all) {
        my $c = counts_of($s, @BURN);
        $got{$_} += $c->{$_} for keys %$c;
    }
    is_deeply(\%got, expected($final_sent, @BURN),
              "profile $final_seq: endpoint_counts of the requests sent "
              . "after profile $seq");
};

subtest 'over the run, every request is counted once' => sub {
    for my $e (@BURN) {
        my $sum = 0;
        $sum += $all->{$_}{counts}{$e} // 0 for keys %$all;
        is($sum, $total_sent{$e} // 0, "\"$e\": the counts of all the "
           . "profiles add up to the $total_sent{$e} requests sent");
    }
};

subtest 'requests answered by "return" are counted too' => sub {
    for my $b (@bursts) {
        my ($seq, $sent, $inside) = @$b;
        next unless $inside && $sent->{'GET /ret'};
        is($all->{$seq}{counts}{'GET /ret'} // 0, $sent->{'GET /ret'},
           "profile $seq: \"GET /ret\" counts the $sent->{'GET /ret'} "
           . 'requests answered 204 by "return"');
    }
};

done_testing();
