#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code hotspots: malformed trace context (headers, the tracer's variables)
# never crashes a worker and never changes a response: the same request
# without the header, and the same request to an nginx without the
# profiling module, get the same status and body. And it gives no ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);

use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;

my $TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
my $PARENT = '00f067aa0ba902b7';
my $VALID = "00-$TRACE-$PARENT-01";

# [ name, [ header => value, ... ] ]
my @CASES = (
    [ 'traceparent too long (version 00 with more)', [ traceparent => "$VALID-00" ] ],
    [ 'traceparent far too long', [ traceparent => '00-' . ('a' x 200) ] ],
    [ 'traceparent bad hex', [ traceparent => "00-${\ substr($TRACE, 0, 31)}g-$PARENT-01" ] ],
    [ 'traceparent uppercase', [ traceparent => uc $VALID ] ],
    [ 'traceparent version ff', [ traceparent => "ff-$TRACE-$PARENT-01" ] ],
    [ 'traceparent zero trace id', [ traceparent => '00-' . ('0' x 32) . "-$PARENT-01" ] ],
    [ 'traceparent zero parent id', [ traceparent => "00-$TRACE-" . ('0' x 16) . '-01' ] ],
    [ 'traceparent short', [ traceparent => '00-4bf92f35' ] ],
    [ 'traceparent empty', [ traceparent => '' ] ],
    [ 'traceparent dashes', [ traceparent => '-' x 55 ] ],
    [ 'traceparent misplaced dashes', [ traceparent => "00$TRACE--$PARENT-01" ] ],
    [ 'traceparent with \\x01', [ traceparent => "00-${\ substr($TRACE, 0, 16)}\x01${\ substr($TRACE, 17)}-$PARENT-01" ] ],
    [ 'traceparent with \\x7f', [ traceparent => "00-$TRACE-${\ substr($PARENT, 0, 15)}\x7f-01" ] ],
    [ 'traceparent with \\xff\\xfe', [ traceparent => "00-$TRACE-$PARENT-\xff\xfe" ] ],
    [ 'traceparent with a NUL', [ traceparent => "00-${\ substr($TRACE, 0, 16)}\0${\ substr($TRACE, 17)}-$PARENT-01" ] ],
    [ 'traceparent of 10 KB', [ traceparent => '00-' . ('a' x 10240) ] ],
    [ 'valid traceparent then 10 KB', [ traceparent => "$VALID-" . ('x' x 10240) ] ],
    [ 'traceparent version 01, no dash after', [ traceparent => "01-$TRACE-$PARENT-01x" ] ],
    [ 'two traceparent, the first bad', [ traceparent => 'zz', traceparent => 'yy' ] ],
    [ 'x-datadog overflow', [ 'x-datadog-trace-id' => '99999999999999999999999',
                              'x-datadog-parent-id' => '18446744073709551616' ] ],
    [ 'x-datadog negative', [ 'x-datadog-trace-id' => '-1', 'x-datadog-parent-id' => '-2' ] ],
    [ 'x-datadog hex', [ 'x-datadog-trace-id' => '0x10', 'x-datadog-parent-id' => 'ff' ] ],
    [ 'x-datadog zero', [ 'x-datadog-trace-id' => '0', 'x-datadog-parent-id' => '0' ] ],
    [ 'x-datadog parent only', [ 'x-datadog-parent-id' => '' ] ],
    [ 'x-datadog of 10 KB', [ 'x-datadog-trace-id' => '1' x 10240,
                              'x-datadog-parent-id' => '2' x 10240 ] ],
    [ 'x-datadog with \\x01', [ 'x-datadog-trace-id' => "12\x0134",
                                'x-datadog-parent-id' => "5\x016" ] ],
    [ 'x-datadog with spaces', [ 'x-datadog-trace-id' => '12 34',
                                 'x-datadog-parent-id' => '5 6' ] ],
);

# Only for the location that takes the ids from variables.
my @VAR_CASES = (
    [ 'variable "-"', [ 'x-my-span' => '-' ] ],
    [ 'variable "zz"', [ 'x-my-span' => 'zz' ] ],
    [ 'variable "0"', [ 'x-my-span' => '0' ] ],
    [ 'variable of 33 hex digits', [ 'x-my-span' => 'f' x 33 ] ],
    [ 'variable of 10 KB digits', [ 'x-my-span' => '9' x 10240 ] ],
    [ 'variable with \\x01', [ 'x-my-span' => "12\x01" ] ],
    [ 'variable with \\xff', [ 'x-my-span' => "\xff" x 16 ] ],
    [ 'variable root invalid', [ 'x-my-span' => '42', 'x-root' => 'zz' ] ],
    [ 'variable trace of 10 KB', [ 'x-my-span' => '42',
                                   'x-trace' => 'a' x 10240 ] ],
);

my $h2_port = ProfHTTP::free_port();

my $t = ProfNginx->new(workers => 1);
my $locations = <<'EOF';
        root %%PREFIX%%/html;
        location = /index.html { }
        location /var/ {
            profiling_span_id $http_x_my_span;
            profiling_root_span_id $http_x_root;
            profiling_trace_id $http_x_trace;
            alias %%PREFIX%%/html/;
        }
        location /burn { profiling_burn 20ms; }
        location /varburn {
            profiling_span_id $http_x_my_span;
            profiling_root_span_id $http_x_root;
            profiling_trace_id $http_x_trace;
            profiling_burn 20ms;
        }
EOF
$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 10m;
    large_client_header_buffers 4 32k;

    server {
        listen 127.0.0.1:%%PORT%%;
$locations
    }
    server {
        listen 127.0.0.1:$h2_port http2;
        large_client_header_buffers 4 32k;
$locations
    }
EOF

# The same static locations in an nginx without the profiling module.
my $ref = ProfNginx->new(workers => 1,
                         modules => [ 'ngx_http_profiling_burn_module' ]);
my $ref_h2_port = ProfHTTP::free_port();
(my $ref_locations = $locations) =~ s/^\s*profiling_\w+ .*\n//mg;
$ref->write_config(<<"EOF");
    large_client_header_buffers 4 32k;
    server {
        listen 127.0.0.1:%%PORT%%;
$ref_locations
    }
    server {
        listen 127.0.0.1:$ref_h2_port http2;
        large_client_header_buffers 4 32k;
$ref_locations
    }
EOF

for my $x ($t, $ref) {
    mkdir($x->prefix . '/html') or die;
    open(my $fh, '>', $x->prefix . '/html/index.html') or die;
    print $fh "static page\n";
    close($fh);
    chmod(0755, $x->prefix . '/html');
    chmod(0644, $x->prefix . '/html/index.html');
    $x->run;
}
my ($worker) = $t->worker_pids;

sub raw_get {
    my ($port, $path, $headers) = @_;
    my $req = "GET $path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
    my @h = @$headers;
    while (my ($k, $v) = splice(@h, 0, 2)) {
        $req .= "$k: $v\r\n";
    }
    my ($status, $body) = ProfHTTP::raw_request($port, "$req\r\n");
    return ($status // 'none') . ' ' . $body;
}

sub printable {
    my ($s) = @_;
    $s =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge;
    return length($s) > 80 ? substr($s, 0, 80) . '...' : $s;
}


subtest 'HTTP/1.1: responses are the same with and without the header' => sub {
    for my $path ('/index.html', '/var/index.html') {
        my $plain = raw_get($t->port, $path, []);
        like($plain, qr/^200 static page\n$/, "$path without trace headers: "
             . '200 and the page');
        for my $c (@CASES, $path =~ /var/ ? @VAR_CASES : ()) {
            my ($name, $headers) = @$c;
            my $got = raw_get($t->port, $path, $headers);
            my $reference = raw_get($ref->port, $path, $headers);
            # nginx itself refuses some (a NUL in a header: 400): the
            # module must not change what nginx answers.
            my $want = $reference eq $plain ? $plain : $reference;
            is(printable($got), printable($want), "$path, $name: "
               . ($want eq $plain ? 'same response as without it'
                                  : 'same response as nginx without the '
                                    . 'module'));
        }
    }
};


subtest 'HTTP/2: responses are the same with and without the header' => sub {
    my $plain = join(' ', map { ($_->{status} // '-') . " $_->{body}" }
                          ProfHTTP::h2_requests($h2_port,
                              [ { path => '/var/index.html' } ]));
    is($plain, "200 static page\n", 'without trace headers: 200 and the page');
    for my $c (@CASES, @VAR_CASES) {
        my ($name, $headers) = @$c;
        my @r = ProfHTTP::h2_requests($h2_port,
            [ { path => '/var/index.html', headers => $headers } ]);
        my @ref = ProfHTTP::h2_requests($ref_h2_port,
            [ { path => '/var/index.html', headers => $headers } ]);
        my $got = ($r[0]{status} // '-') . " $r[0]{body}";
        my $reference = ($ref[0]{status} // '-') . " $ref[0]{body}";
        my $want = $reference eq $plain ? $plain : $reference;
        is(printable($got), printable($want), "$name: "
           . ($want eq $plain ? 'same response as without it'
                              : 'same response as nginx without the module'));
    }
};


subtest 'malformed trace context gives no ids' => sub {
    my @status;
    for my $c (@CASES) {
        my $r = raw_get($t->port, '/burn', $c->[1]);
        push @status, $r =~ /^(\S+)/ if $r !~ /^(200 burned [01]\n|400 )/s;
    }
    for my $c (@VAR_CASES) {
        my $r = raw_get($t->port, '/varburn', $c->[1]);
        push @status, $r =~ /^(\S+)/ if $r !~ /^200 burned [01]\n$/s;
    }
    is("@status", '', 'the burn locations answered 200 (or nginx\'s 400)');

    # And a valid one after all that: the worker still labels.
    my $ok = raw_get($t->port, '/burn', [ traceparent => $VALID ]);
    like($ok, qr/^200 burned/, 'a valid traceparent afterwards: 200');
    $ok = raw_get($t->port, '/burn', [ traceparent => $VALID ]);
    $ok = raw_get($t->port, '/burn', [ traceparent => $VALID ]);
};

my $log_before_stop = $t->error_log;
is(join(',', $t->worker_pids), $worker, "the worker is still $worker");
unlike($log_before_stop, qr/signal|\[alert\]|\[crit\]|\[emerg\]/,
       'no signal, alert, crit or emerg in the error log');

ok($t->stop, 'nginx quits (and writes its last profile)');
$ref->stop;
unlike($t->error_log, qr/exited on signal|\[alert\]|\[crit\]/,
       'no worker exited on a signal');

my @S = ProfHotspots::hotspot_samples(
    ProfPprof::decode_dump_dir($t->dump_dir));
my $valid = ProfHotspots::hex_to_u64($PARENT);
my @burn = ProfHotspots::burn_samples(@S);
my $labelled = ProfHotspots::sum_cpu(grep { defined $_->{span} } @burn);
my $total = ProfHotspots::sum_cpu(@burn);
my %spans = map { $_->{span} => 1 } grep { defined $_->{span} } @S;
is_deeply([ sort keys %spans ], [ $valid ], 'the only span id in the '
          . "profile is the valid traceparent's ($valid)");
ok($labelled <= 0.1 * $total && $labelled >= 40e6,
   sprintf('%.0fms of the %.0fms of burn cpu-time has it: the 3 valid '
           . 'requests', $labelled / 1e6, $total / 1e6));

done_testing();
