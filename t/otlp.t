# SPDX-License-Identifier: BSD-2-Clause
# Exports to an OTLP profiles receiver: a stand-in (t/otlp.pl) decodes
# each request with protoc and judges it by opentelemetry-proto v1.10's
# rules; what it accepted must show the resource, a Profile per sample
# type with its period type, a Link for the CPU of traced requests, and
# every period the same CPU time as Pyroscope and the Datadog agent got.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp ();
use HTTP::Tiny;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use Test::More;

use ProfAgent;
use ProfFiles ();
use ProfHTTP;
use ProfLog qw(exit_counters last_exit_counters log_lines);
use ProfNginx;
use ProfOtlp;
use ProfPprof;
use ProfPyroscope;
use ProfWait;
use ProfWorkload;


# The requests answered $status, at least $n, within $timeout seconds.
sub wait_exports {
    my ($r, $n, $timeout, $status) = @_;
    $status //= 200;
    my @e;
    wait_until(sub {
        @e = grep { $_->{status} == $status } exports($r);
        @e >= $n
    }, $timeout // 15);
    return @e;
}

# The status page's counters (one worker).
sub counters {
    my ($t) = @_;
    my $s = decode_json($t->get('/status')->{content});
    my %c = %{ $s->{totals}{counters} // {} };
    $c{$_} //= 0 for map { "otlp_$_" } qw(succeeded retried failed_4xx
        failed_5xx failed_timeout failed_connect dropped partial
        rejected_profiles);
    return \%c;
}

# The Profile of a request by its sample type and period type.
sub profile_of {
    my ($e, $type, $period) = @_;
    my ($p) = grep { $_->{type} eq $type && $_->{period} eq $period }
              otlp_profiles($e);
    return $p ? $p->{profile} : undef;
}

sub hex_of { unpack('H*', $_[0]) }


subtest 'each period reaches the receiver: resource, a Profile per sample '
      . 'type, the dictionary as the schema requires' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_otlp("127.0.0.1:$port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_otlp_url http://127.0.0.1:$port/prefix/;
    profiling_period 2s;
    profiling_service checkout;
    profiling_env staging;
    profiling_version 2.4.1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 20ms; }
        location = /status { profiling_status; }
    }
EOF
    $t->run;
    my $burns = ProfWorkload::drive($t, '/burn', 2.5, 0);

    my @e = wait_exports($r, 1);
    ok(@e >= 1, 'an export was accepted') or do {
        diag(explain([ map { [ $_->{status}, $_->{reason} ] } exports($r) ]));
        return;
    };
    my $x = $e[0];
    like($x->{request}, qr{^POST /prefix/v1development/profiles HTTP/1\.1\r\n},
         'POST <prefix>/v1development/profiles');
    like($x->{request}, qr{^Content-Type: application/x-protobuf\r$}mi,
         'Content-Type: application/x-protobuf');
    like($x->{request}, qr{^Content-Encoding: gzip\r$}mi,
         'Content-Encoding: gzip');

    my $res = otlp_resource($x->{export});
    is($res->{'service.name'}, 'checkout', 'service.name');
    is($res->{'service.version'}, '2.4.1', 'service.version');
    is($res->{'deployment.environment.name'}, 'staging',
       'deployment.environment.name');
    ok(length($res->{'host.name'} // ''), 'host.name');
    is($res->{'process.pid'}, ($t->worker_pids)[0], 'process.pid: the worker');
    is($res->{'process.executable.name'}, 'nginx',
       'process.executable.name');

    is_deeply([ map { "$_->{type} $_->{period}" } otlp_profiles($x->{export}) ],
              [ 'cpu/nanoseconds cpu/nanoseconds',
                'samples/count cpu/nanoseconds',
                'wall/nanoseconds wall/nanoseconds',
                'samples/count wall/nanoseconds',
                'off_cpu/nanoseconds wall/nanoseconds' ],
              'a Profile per sample type, each with its period type');
    my $cpu = profile_of($x->{export}, 'cpu/nanoseconds', 'cpu/nanoseconds');
    ok(otlp_leaf_totals($x->{export}, $cpu)->{ngx_http_profiling_burn_spin},
       'CPU time in the burn handler, named');
    is(otlp_one($cpu, 'period'), 10_000_000, 'the period: 10 ms');

    my $st = $t->get('/status');
    like($st->{content}, qr/"otlp_succeeded":[1-9]/,
         'the status page counts the exports');
    my $slot = decode_json($st->{content})->{workers}[0];
    like($slot->{last_otlp_export}{outcome} // '', qr/^uploaded \(HTTP 200\)$/,
         'and says what the last export became');

    $t->stop;
    like($t->error_log,
         qr{profiling: sampling every 10ms, a profile every 2000ms, to .*OTLP at http://127\.0\.0\.1:$port/prefix/$}m,
         'the start\'s line names the receiver');
    my $c = last_exit_counters($t->error_log);
    ok($c && $c->{otlp_succeeded} >= 1, 'the exit line counts them')
        or diag($t->error_log);

    @e = grep { $_->{status} == 200 } exports($r);
    is(scalar(grep { $_->{status} != 200 } exports($r)), 0, 'none refused')
        or diag(explain([ map { $_->{reason} } exports($r) ]));
    is(scalar @e, $c->{otlp_succeeded},
       'every export counted succeeded was accepted');
    my $cpu_ns = 0;
    for my $x (@e) {
        $cpu_ns += otlp_total(profile_of($x->{export}, 'cpu/nanoseconds',
                                         'cpu/nanoseconds') // {});
    }
    ok($cpu_ns > 0.8 * $burns * 20e6,
       'the CPU time exported is at least what the burns spun')
        or diag("$cpu_ns ns for $burns burns of 20 ms");
    stop_otlp($r);
};


subtest 'traced requests: a Link with their trace and span ids; every '
      . 'period the same CPU to OTLP, Pyroscope and the agent' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_otlp("127.0.0.1:$port");
    my $py_port = ProfHTTP::free_port();
    my $py = start_pyroscope("127.0.0.1:$py_port");
    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_pyroscope_url http://127.0.0.1:$py_port;
    profiling_otlp_url http://127.0.0.1:$port;
    profiling_period 2s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn/ { profiling_burn 3ms; }
    }
EOF
    $t->run;

    my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
    my %trace_of;
    for my $i (1 .. 1000) {
        my $trace = sprintf('4bf92f3577b34da6%016x', 0x1000 + $i);
        my $parent = sprintf('%016x', 0xa0000 + $i);
        $trace_of{$parent} = $trace;
        ProfHTTP::get_with($t, '/burn/u' . ($i % 7),
                           { traceparent => "00-$trace-$parent-01" }, $http);
    }
    $t->stop;

    my $exit = last_exit_counters($t->error_log);
    ok($exit && $exit->{uploads_succeeded} && $exit->{pyroscope_succeeded}
       && $exit->{otlp_succeeded},
       'the exit line counts all three, whole') or diag($t->error_log);

    my @e = grep { $_->{status} == 200 } exports($r);
    ok(@e >= 1, 'exports accepted') or return;
    is(scalar(grep { $_->{status} != 200 } exports($r)), 0, 'none refused')
        or diag(explain([ map { $_->{reason} } exports($r) ]));

    my ($cpu, $linked, $bad, %endpoints) = (0, 0, 0);
    for my $x (@e) {
        my $d = otlp_one($x->{export}, 'dictionary');
        my $p = profile_of($x->{export}, 'cpu/nanoseconds', 'cpu/nanoseconds');
        for my $s (@{ $p->{samples} // [] }) {
            my $v = otlp_one($s, 'values', 0);
            $cpu += $v;
            for my $a (@{ $s->{attribute_indices} // [] }) {
                my $kv = $d->{attribute_table}[$a];
                my $val = otlp_one(otlp_one($kv, 'value', {}),
                                   'string_value', '');
                $endpoints{$val} = 1
                    if otlp_str($x->{export}, otlp_one($kv, 'key_strindex'))
                       eq 'endpoint';
            }
            my $li = otlp_one($s, 'link_index', 0) or next;
            my $l = $d->{link_table}[$li];
            my ($trace, $span) = (hex_of(otlp_one($l, 'trace_id', '')),
                                  hex_of(otlp_one($l, 'span_id', '')));
            if (($trace_of{$span} // '') eq $trace) {
                $linked += $v;
            } else {
                $bad++;
            }
        }
    }
    is($bad, 0, 'every Link is a request\'s trace id and parent span id');
    ok($linked >= 0.95 * $cpu, 'at least 95% of the CPU carries a Link')
        or diag("$linked of $cpu ns");
    diag(sprintf('CPU with a Link: %.2f%% of %d ns', 100 * $linked / ($cpu || 1),
                 $cpu));
    is_deeply([ sort keys %endpoints ], [ map { "GET /burn/u$_" } 0 .. 6 ],
              'the endpoint as a sample attribute');

    # Each period's CPU the same in all three (the same aggregated
    # profile), within 1%.
    my @dd = sort { $a <=> $b }
             map { profile_total(decode_profile("$_/profile.pprof"),
                                 'cpu-time') }
             ProfAgent::upload_dirs($agent);
    my @py;
    for my $push (grep { $_->{status} == 200 } pushes($py)) {
        my $sum = 0;
        for my $x (push_profiles($push)) {
            next unless $x->{labels}{__name__} eq 'process_cpu';
            $sum += profile_total($x->{profile}, 'cpu');
        }
        push @py, $sum;
    }
    @py = sort { $a <=> $b } @py;
    my @ot = sort { $a <=> $b }
             map { otlp_total(profile_of($_->{export}, 'cpu/nanoseconds',
                                         'cpu/nanoseconds') // {}) } @e;
    is(scalar @ot, scalar @dd, 'as many periods to OTLP as to the agent');
    is(scalar @py, scalar @dd, 'and to Pyroscope');
    my $worst = 0;
    for my $i (0 .. $#dd) {
        for my $other ($ot[$i], $py[$i]) {
            my $d = abs(($other // 0) - $dd[$i]) / ($dd[$i] || 1);
            $worst = $d if $d > $worst;
        }
    }
    ok($worst <= 0.01, 'every period: the same CPU time within 1%')
        or diag(explain([ \@dd, \@ot, \@py ]));
    diag(sprintf('periods: %d; largest CPU difference between backends: '
                 . '%.4f%%', scalar @dd, 100 * $worst));

    stop_otlp($r);
    stop_pyroscope($py);
    stop_agent($agent);
};


subtest 'answers: a partial success counted and logged; a 400\'s reason '
      . 'logged; auth headers; secrets never shown' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_otlp("127.0.0.1:$port", mode => 'partial=2');

    my $t = ProfNginx->new(workers => 1);
    my $secret_file = $t->prefix . '/otlp-token';
    open(my $f, '>', $secret_file) or die;
    print $f "s3cret-from-file\n";
    close($f);

    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_otlp_url http://127.0.0.1:$port;
    profiling_otlp_basic_auth 123456 file:$secret_file;
    profiling_otlp_tenant team-a;
    profiling_otlp_header X-Key env:OTLP_TEST_KEY;
    profiling_upload_timeout 2s;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
        location = /status { profiling_status; }
    }
EOF
    local $ENV{OTLP_TEST_KEY} = 'k3y-from-env';
    $t->run;
    ok(wait_until(sub { counters($t)->{otlp_partial} >= 1 }, 15),
       'a partial success counted');
    ok(counters($t)->{otlp_rejected_profiles} >= 2,
       'with the profiles it rejected');
    ok(wait_until(sub { log_lines($t->error_log,
                                  qr/took profile \d+ in part: 2 profiles rejected \("test: some profiles were dropped"\)/) }, 10),
       'and logged with its message');
    my @e = exports($r);
    my $basic = encode_base64('123456:s3cret-from-file', '');
    like($e[0]{request}, qr/^Authorization: Basic \Q$basic\E\r$/m,
         'basic auth: the user and the file\'s secret');
    like($e[0]{request}, qr/^X-Scope-OrgID: team-a\r$/m, 'X-Scope-OrgID');
    like($e[0]{request}, qr/^X-Key: k3y-from-env\r$/m,
         'a header from the environment');

    set_otlp_mode($r, 'status=400');
    ok(wait_until(sub { counters($t)->{otlp_failed_4xx} >= 1 }, 15),
       '400 counted as 4xx');
    ok(wait_until(sub { log_lines($t->error_log,
                                  qr/OTLP receiver at "[^"]*" refused profile \d+ \(HTTP 400\): "test status"/) }, 10),
       'the reason in the Status logged');

    set_otlp_mode($r, 'limit');
    my $before = counters($t)->{otlp_failed_4xx};
    ok(wait_until(sub { counters($t)->{otlp_failed_4xx} > $before }, 15),
       '429 counted as 4xx');
    is(counters($t)->{otlp_retried}, 0, '4xx never retried');

    my $status = $t->get('/status')->{content};
    $t->stop;
    for my $where ([ 'the error log', $t->error_log ],
                   [ 'the status page', $status ])
    {
        ok($where->[1] !~ /s3cret|k3y|\Q$basic\E/,
           "no secret in $where->[0]");
    }
    stop_otlp($r);
};


subtest 'a receiver that hangs, a reload, then none: nginx unaffected, '
      . 'counted'
    => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_otlp("127.0.0.1:$port", mode => 'hang');

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_otlp_url http://127.0.0.1:$port;
    profiling_upload_timeout 1s;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
        location = /status { profiling_status; }
    }
EOF
    $t->run;
    my $served = ProfWorkload::drive($t, '/', 3, 0.01);
    ok($served > 50, "nginx served $served requests meanwhile");
    ok(wait_until(sub { counters($t)->{otlp_failed_timeout} >= 1 }, 15),
       'an export timed out');
    ok(wait_until(sub { counters($t)->{otlp_dropped} >= 1 }, 15),
       'profiles ready meanwhile dropped, counted');

    # A reload while it hangs: the old worker's profiler process ends at
    # its close deadline, with its exit line.
    $t->reload;
    ok(wait_until(sub { exit_counters($t->error_log) >= 1 }, 15),
       'the old worker\'s profiler process ended after the reload')
        or diag($t->error_log);
    my ($old) = exit_counters($t->error_log);
    ok($old && $old->{otlp_submitted} >= 2, 'its exit line counts OTLP');
    is($t->get('/')->{content}, 'ok', 'the new worker serves');

    stop_otlp($r);
    ok(wait_until(sub { counters($t)->{otlp_failed_connect} >= 1 }, 15),
       'nobody listening: failed_connect counted');
    is($t->get('/')->{content}, 'ok', 'nginx serves');
    ok($t->stop(timeout => 10), 'nginx stopped');
    unlike($t->error_log, qr/exited on signal|AddressSanitizer/,
           'no process crashed');
};


subtest 'nginx -t names the directive and the bad value' => sub {
    my $t = ProfNginx->new(workers => 1);
    my $with = 'profiling_otlp_url http://collector:4318;';
    for my $ok ('profiling_otlp_url off;', $with,
                'profiling_otlp_url https://otlp.example.net/p/;',
                "$with profiling_otlp_bearer_token env:HOME;",
                "$with profiling_otlp_tenant t1; "
                . 'profiling_pyroscope_tenant t2; '
                . 'profiling_pyroscope_url http://p:4040;')
    {
        $t->write_config("profiling on;\n$ok\n"
                         . "server { listen 127.0.0.1:%%PORT%%; }\n");
        my ($rc, $out) = $t->test_config;
        is($rc, 0, "accepted: $ok") or diag($out);
    }

    my $url = qr/in "profiling_otlp_url" directive/;
    for my $bad (
        [ 'profiling_otlp_url grpc://x:4317;',
          qr/invalid value "grpc:\/\/x:4317" $url \(the scheme must be http:\/\/ or https:\/\/\)/ ],
        [ 'profiling_otlp_url http://u:pw@host;',
          qr/invalid value "http:\/\/u:pw\@host" $url \(credentials go in profiling_otlp_basic_auth\)/ ],
        [ 'profiling_otlp_url off; profiling_otlp_url off;',
          qr/"profiling_otlp_url" directive is duplicate/ ],
        [ 'profiling_otlp_bearer_token literal-token;',
          qr/a secret must be "file:\/path" or "env:NAME"/ ],
        [ "$with profiling_otlp_header Content-Encoding x;",
          qr/invalid header name "Content-Encoding" in "profiling_otlp_header" directive: the pushes set it themselves/ ],
        [ "$with profiling_otlp_tenant a; profiling_otlp_tenant b;",
          qr/"profiling_otlp_tenant b" sets the "X-Scope-OrgID" header that "profiling_otlp_tenant" set already/ ],
        [ 'profiling_otlp_tenant t1;',
          qr/"profiling_otlp_tenant" is set but "profiling_otlp_url" is not: nothing is pushed to the OTLP receiver/ ],
        [ 'profiling_otlp_url off; profiling_otlp_header X-A b;',
          qr/"profiling_otlp_header" is set but "profiling_otlp_url" is off/ ],
    ) {
        my ($line, $re) = @$bad;
        $t->write_config("profiling on;\n$line\n"
                         . "server { listen 127.0.0.1:%%PORT%%; }\n");
        my ($rc, $out) = $t->test_config;
        isnt($rc, 0, "refused: $line");
        like($out, $re, '  and said why') or diag($out);
        unlike($out, qr/literal-token/, '  without the secret')
            if $line =~ /literal-token/;
    }
};


# The stand-in itself: it refuses what breaks the schema's rules, so that
# what it accepted above means something.
subtest 'the stand-in refuses what breaks the rules' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_otlp("127.0.0.1:$port");
    my $http = HTTP::Tiny->new(timeout => 30);
    my $now_ns = int(time() * 1e9);
    my $proto = "$FindBin::Bin/proto";

    my $encode = sub {
        my ($text) = @_;
        my $dir = File::Temp->newdir();
        open(my $f, '>', "$dir/e.txt") or die;
        print $f $text;
        close($f);
        system("protoc --encode=otlp.ExportProfilesServiceRequest "
               . "-I '$proto' otlp_profiles.proto < '$dir/e.txt' "
               . "> '$dir/e.pb'") == 0 or die 'protoc --encode failed';
        return ProfFiles::slurp("$dir/e.pb");
    };
    my $post = sub {
        return $http->post("http://127.0.0.1:$port/v1development/profiles",
                           { headers => { 'Content-Type'
                                          => 'application/x-protobuf' },
                             content => $_[0] });
    };
    my $dict = sub {
        my (%more) = @_;
        my $t = 'dictionary { ';
        for my $table (qw(mapping_table location_table function_table
                          link_table attribute_table stack_table))
        {
            $t .= $more{$table} // "$table { } ";
        }
        $t .= $more{string_table}
              // 'string_table: "" string_table: "cpu" '
                 . 'string_table: "nanoseconds" ';
        return $t . '} ';
    };
    my $profile = sub {
        my ($samples, $extra) = @_;
        return 'resource_profiles { resource { attributes { key: '
               . '"service.name" value { string_value: "s" } } } '
               . 'scope_profiles { profiles { sample_type { type_strindex: 1 '
               . 'unit_strindex: 2 } period_type { type_strindex: 1 '
               . 'unit_strindex: 2 } profile_id: "0123456789abcdef" '
               . "time_unix_nano: $now_ns " . ($samples // '')
               . ($extra // '') . ' } } } ';
    };

    my $res = $post->($encode->($profile->('samples { values: 1 }')
                                . $dict->()));
    is($res->{status}, 200, 'a request keeping the rules: accepted')
        or diag($res->{content});
    $res = $post->($encode->($profile->() . $dict->(string_table =>
                                                    'string_table: "cpu" ')));
    is($res->{status}, 400, 'string_table[0] not "": refused');
    $res = $post->($encode->($profile->() . $dict->(link_table =>
        'link_table { trace_id: "0123456789abcdef" span_id: "01234567" } ')));
    is($res->{status}, 400, 'link_table[0] not the zero value: refused');
    $res = $post->($encode->($profile->() . $dict->(link_table =>
        'link_table { } link_table { trace_id: "0123456789abcdef" '
        . 'span_id: "0123" } ')));
    is($res->{status}, 400, 'a span id of 4 bytes: refused');
    $res = $post->($encode->($profile->() . $dict->(string_table =>
        'string_table: "" string_table: "cpu" string_table: "nanoseconds" '
        . 'string_table: "cpu" ')));
    is($res->{status}, 400, 'a string twice: refused');
    like(ProfOtlp::status_message($res->{content}),
         qr/string_table\[3\] duplicates string_table\[1\]/,
         '  with the reason in a google.rpc.Status');
    $res = $post->($encode->($profile->('samples { stack_index: 5 '
                                        . 'values: 1 }') . $dict->()));
    is($res->{status}, 400, 'a stack index out of range: refused');
    $res = $post->($encode->($profile->('samples { values: 1 } '
                                        . 'samples { values: 2 }')
                             . $dict->()));
    is($res->{status}, 400, 'two samples of the same identity: refused');
    (my $no_period = $profile->('samples { values: 1 }'))
        =~ s/period_type \{[^}]*\} //;
    $res = $post->($encode->($no_period . $dict->()));
    is($res->{status}, 400, 'no period type: refused');
    $res = $post->($encode->($profile->('samples { values: 1 }')
                             . $dict->(string_table =>
        'string_table: "" string_table: "cpu" string_table: "nanoseconds" '
        . 'string_table: "thread id" ')));
    is($res->{status}, 400, 'a string nothing points at: refused');
    like(ProfOtlp::status_message($res->{content}),
         qr/string_table\[3\] \("thread id"\) is an orphan/,
         '  naming it');
    $res = $post->("\x0a\xff");
    is($res->{status}, 400, 'no ExportProfilesServiceRequest: refused');

    stop_otlp($r);
};


done_testing();
