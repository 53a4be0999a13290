#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Bytes that are not UTF-8 never break a profile: URIs with invalid,
# truncated and overlong sequences (percent-encoded and raw), NUL and
# control characters, a 64 KiB URI, profiling_endpoint values, headers
# and configured values (service, env, version, tags) holding them, and a
# worker whose thread name is not UTF-8. Every profile, written to the
# dump dir and uploaded, decodes with protoc and with a strict UTF-8
# decoder of every string of its string table; every event.json loads as
# strict UTF-8 JSON; the endpoint labels and the endpoint_counts keys show
# U+FFFD where the bytes were invalid, and the same string for the same
# request.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;

use ProfHTTP;
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfAgent;
use ProfHostile;

plan(skip_all => 'python3 is missing')
    unless grep { -x "$_/python3" } split /:/, $ENV{PATH};

my $ENDPOINT_MAX = 128;     # bytes of an endpoint kept (sample.h)
my $SENT = 2;               # requests of each case (30 ms of CPU each)

my $STATIC = "static \xc3\x28 \xf4\x90\x80\x80 \xed\xa0\x80 \xf0\x80\x80\x80";
my $HEADER = "a\xff\x01\xc3 \x7f\xed\xa0\x80 \xe2\x82";
my $BIG = '/' . ("\xc3\xa9" x 32767) . 'x';                  # 64 KiB
my $BIG_EP = '/ep/' . ("\xff" x 65532);                      # 64 KiB
my $CONTROLS = join('', map { sprintf('%%%02x', $_) } 1 .. 31, 127);

# [ name, request target (bytes on the wire), endpoint (bytes), headers ]
my @CASES = (
    [ 'percent-encoded \xff\xfe', '/%ff%fe/a', "GET /\xff\xfe/a" ],
    [ 'truncated sequence', '/caf%c3', "GET /caf\xc3" ],
    [ 'raw \xff\xfe', "/\xff\xfe", "GET /\xff\xfe" ],
    [ 'overlong 2 bytes', '/%c0%af', "GET /\xc0\xaf" ],
    [ 'overlong 3 bytes', '/%e0%80%af', "GET /\xe0\x80\xaf" ],
    [ 'control characters', "/c$CONTROLS",
      "GET /c" . join('', map { chr } 1 .. 31, 127) ],
    [ '64 KiB URI', $BIG, "GET $BIG" ],
    [ 'profiling_endpoint with $uri and \xff\xfe', '/ep/%ff%c3',
      "EP /ep/\xff\xc3 \xff\xfe" ],
    [ 'profiling_endpoint with a 64 KiB $uri', $BIG_EP,
      "EP $BIG_EP \xff\xfe" ],
    [ 'profiling_endpoint constant', '/static/x', $STATIC ],
    [ 'profiling_endpoint with a NUL byte', '/nul/a', "n\0ul /nul/a" ],
    [ 'profiling_endpoint from a header', '/hdr', "H $HEADER",
      "X-Ep: $HEADER\r\n" ],
);

my $THREAD_NAME = "ngx\xff\xfe\xc3";

my $agent_port = ProfHTTP::free_port();
my $agent = start_agent("127.0.0.1:$agent_port");

my $t = ProfNginx->new(workers => 1);
$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_period 1s;
    profiling_service "svc\xff\xfe";
    profiling_env "env\xc3";
    profiling_version "1.\xe0\x80\xaf";
    profiling_tags "team:\xf4\x90\x80\x80" "k\xed\xa0\x80:v";
    large_client_header_buffers 4 128k;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { profiling_burn 30ms; }
        location /ep/ {
            profiling_endpoint "EP \$uri \xff\xfe";
            profiling_burn 30ms;
        }
        location /static/ {
            profiling_endpoint "$STATIC";
            profiling_burn 30ms;
        }
        location /nul/ {
            profiling_endpoint "n\0ul \$uri";
            profiling_burn 30ms;
        }
        location /hdr {
            profiling_endpoint "H \$http_x_ep";
            profiling_burn 30ms;
        }
    }
EOF

# The worker's thread name is its executable's name.
$ENV{PROFILING_NGINX} = ProfHostile::nginx_named($t, $THREAD_NAME);
$t->run;
my ($worker) = $t->worker_pids;

# The first profiles load the symbol tables (slow under a sanitizer):
# once two are uploaded, the next ones are not delayed (and replaced
# while an upload runs).
ok(wait_until(sub { ProfAgent::agent_uploads($agent) >= 2 }, 30),
   'the first profiles are uploaded');

for my $c (@CASES) {
    my ($name, $target, undef, $headers) = @$c;
    my @status;
    for (1 .. $SENT) {
        my ($status) = ProfHTTP::raw_request($t->port,
            "GET $target HTTP/1.0\r\nHost: x\r\n" . ($headers // '')
            . "\r\n", 30);
        push @status, $status // 'none';
    }
    is("@status", join(' ', (200) x $SENT), "$name: answered 200");
}

# A NUL in a URI or a header is refused by nginx (400); the profiles
# must hold up all the same.
my ($nul_uri) = ProfHTTP::raw_request($t->port,
                                      "GET /n%00x HTTP/1.0\r\nHost: x\r\n\r\n");
is($nul_uri, 400, 'a URI with %00 is refused (400)');
my ($nul_header) = ProfHTTP::raw_request($t->port,
    "GET /hdr HTTP/1.0\r\nHost: x\r\nX-Ep: a\0b\r\n\r\n");
is($nul_header, 400, 'a header with a NUL byte is refused (400)');

ok($t->stop, 'nginx quits');
$t->ok_no_worker_died('hostile UTF-8');


# Every profile, decoded by protoc and by the strict decoder.

my @dumped = profile_files($t->dump_dir, qr/\.pprof$/);
my @uploads = ProfAgent::agent_uploads($agent);
my ($c) = grep { $_->{pid} == $worker }
          ProfLog::exit_counters($t->error_log);
ok(@dumped >= 3, scalar(@dumped) . ' profiles written');
ok($c && $c->{uploads_submitted} == @dumped
   && $c->{uploads_succeeded} == @uploads,
   'each profile was submitted for upload, ' . scalar(@uploads)
   . ' uploaded');

# A profile whose upload was replaced by a newer one (the agent slower
# than the period: a busy machine) takes its endpoint_counts with it.
my $complete = $c && $c->{uploads_dropped} == 0;
note("uploads_dropped=$c->{uploads_dropped}: endpoint_counts are checked "
     . 'for at most the requests sent') if $c && !$complete;
like($dumped[0] // '', qr{/svc__\.$worker\.\d+\.pprof$},
     'the file name has the service with "_" for its invalid bytes');

my @pprofs = (@dumped, map { "$_->{dir}/profile.pprof" } @uploads);
my (%protoc, $protoc_failed);
for my $f (@pprofs) {
    my $p = eval { decode_profile($f) };
    unless ($p) {
        $protoc_failed++;
        diag("protoc: $@");
        next;
    }
    $protoc{$f} = $p;
}
ok(!$protoc_failed, 'every profile (' . scalar(@pprofs) . ') decodes with '
   . 'protoc --decode');

my @strict = ProfHostile::check_pprof(@pprofs);
my @bad = grep { !$strict[$_]{ok} } 0 .. $#pprofs;
ok(!@bad, 'every string of every profile\'s string table is strict UTF-8')
    or diag("  $pprofs[$bad[0]]: $strict[$bad[0]]{error}");
my %strict = map { $pprofs[$_] => $strict[$_] } 0 .. $#pprofs;

my @docs = map { ("$_->{dir}/event", "$_->{dir}/code-provenance.json") }
           @uploads;
my @json = ProfHostile::check_json(@docs);
@bad = grep { !$json[$_]{ok} } 0 .. $#docs;
ok(@docs && !@bad, 'every event.json and code-provenance.json is strict '
   . 'UTF-8 JSON') or diag("  $docs[$bad[0]]: $json[$bad[0]]{error}");
my @events = map { $json[2 * $_]{doc} } 0 .. $#uploads;


# What the documents must show for each case.

my @expected = ProfHostile::replaced(
    map { substr($_->[2], 0, $ENDPOINT_MAX) } @CASES);
my %expected = map { $_ => 1 } @expected;

# Endpoint labels of the dump dir (protoc) and of all profiles (strict).
my (%labels_protoc, %labels_strict);
for my $f (@dumped) {
    my $p = $protoc{$f} or next;
    for my $s (@{ $p->{sample} }) {
        my $l = sample_labels($p, $s)->{'trace endpoint'} or next;
        $labels_protoc{ $l->{str} }++;
    }
}
for my $f (@pprofs) {
    my $r = $strict{$f};
    next unless $r->{ok};
    $labels_strict{$_} += $r->{labels}{'trace endpoint'}{$_}
        for keys %{ $r->{labels}{'trace endpoint'} // {} };
}

is_deeply([ sort keys %labels_protoc ], [ sort keys %labels_strict ],
          'protoc and the strict decoder read the same endpoint labels');

my %counts;
for my $e (@events) {
    my $c = $e && $e->{endpoint_counts} or next;
    $counts{$_} += $c->{$_} for keys %$c;
}

for my $i (0 .. $#CASES) {
    my $name = $CASES[$i][0];
    my $want = $expected[$i];
    my $show = ProfHostile::show($want);
    ok($labels_strict{$want}, "$name: samples are labelled $show")
        or diag('  labels: ' . join(', ', map { ProfHostile::show($_) }
                                         sort keys %labels_strict));
    my $sent = $SENT * grep { $expected[$_] eq $want } 0 .. $#CASES;
    my $got = $counts{$want} // 0;
    ok($complete ? $got == $sent : $got <= $sent,
       "$name: endpoint_counts has $show for its $sent requests ($got)")
        or diag('  keys: ' . join(', ', map { ProfHostile::show($_) }
                                       sort keys %counts));
}

my @unknown = grep { !$expected{$_} } sort keys %labels_strict;
ok(!@unknown, 'no endpoint label but those of the requests')
    or diag('  ' . join(', ', map { ProfHostile::show($_) } @unknown));

# The requests refused with 400 have no burn (no label); nginx gives them
# an empty $uri.
@unknown = grep { !$expected{$_} && !/^GET / } sort keys %counts;
ok(!@unknown, 'no endpoint_counts key but those of the requests')
    or diag('  ' . join(', ', map { ProfHostile::show($_) } @unknown));

ok(!grep({ /[\x00]/ } keys %labels_strict, keys %counts),
   'no NUL in an endpoint, in the labels or in endpoint_counts');

# The same profile, dumped and uploaded, has the same labels.
my %dump_by_seq = map { /\.(\d+)\.pprof$/ ? ($1 => $_) : () } @dumped;
my $same = 0;
for my $i (0 .. $#uploads) {
    my ($seq) = ($events[$i]{tags_profiler} // '')
                =~ /(?:^|,)profile_seq:(\d+)/;
    my $f = defined $seq ? $dump_by_seq{$seq} : undef;
    next unless $f && $strict{$f}{ok}
                && $strict{"$uploads[$i]{dir}/profile.pprof"}{ok};
    my $json = JSON::PP->new->canonical;
    $same++ if $json->encode($strict{$f}{labels})
               eq $json->encode($strict{"$uploads[$i]{dir}/profile.pprof"}
                                    {labels});
}
is($same, scalar(@uploads), 'each uploaded profile has the labels of the '
   . 'file of the same profile_seq');


# The thread name and the configured values.

my ($thread) = ProfHostile::replaced($THREAD_NAME);
my %threads;
for my $f (@pprofs) {
    next unless $strict{$f}{ok};
    $threads{$_} = 1 for keys %{ $strict{$f}{labels}{'thread name'} // {} };
}
is_deeply([ sort keys %threads ], [ $thread ],
          'the thread name label is ' . ProfHostile::show($thread));

my ($service, $env, $version, $team, $k) = ProfHostile::replaced(
    "svc\xff\xfe", "env\xc3", "1.\xe0\x80\xaf", "\xf4\x90\x80\x80",
    "k\xed\xa0\x80");
my @tags = split /,/, $events[0]{tags_profiler} // '';
for my $want ("service:$service", "env:$env", "version:$version",
              "team:$team", "$k:v")
{
    ok(grep({ $_ eq $want } @tags), 'event.json has the tag '
       . ProfHostile::show($want))
        or diag('  tags_profiler: '
                . ProfHostile::show($events[0]{tags_profiler}));
}

stop_agent($agent);

done_testing();
