# SPDX-License-Identifier: BSD-2-Clause
# Pushes to Grafana Pyroscope: a stand-in (t/pyroscope.pl) decodes each
# push with protoc and judges it as Pyroscope's distributor does; what it
# accepted must show the service and its labels, CPU and wall time under
# Pyroscope's SDKs' profile types, span profiles, and no series per URI.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use HTTP::Tiny;
use JSON::PP;
use File::Temp ();
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time);

use ProfAgent;
use ProfEnv;
use ProfFiles qw(slurp);
use ProfHTTP;
use ProfLog qw(exit_counters last_exit_counters log_lines);
use ProfNginx;
use ProfPprof;
use ProfPyroscope;
use ProfWait;
use ProfWorkload;


# The pushes answered $status, at least $n, within $timeout seconds.
sub wait_pushes {
    my ($r, $n, $timeout, $status) = @_;
    $status //= 200;
    my @p;
    wait_until(sub {
        @p = grep { $_->{status} == $status } pushes($r);
        @p >= $n
    }, $timeout // 15);
    return @p;
}

# The series of a push by __name__.
sub series_by_name {
    my ($push) = @_;
    return { map { $_->{labels}{__name__} => $_ } @{ $push->{series} } };
}

# The total of a sample type over a push's profiles of one series.
sub series_total {
    my ($push, $name, $type) = @_;
    my $sum = 0;
    for my $x (push_profiles($push)) {
        next unless $x->{labels}{__name__} eq $name;
        $sum += profile_total($x->{profile}, $type);
    }
    return $sum;
}


subtest 'each period reaches Pyroscope, labelled as its SDKs label' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_pyroscope("127.0.0.1:$port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_pyroscope_url http://127.0.0.1:$port/prefix/;
    profiling_period 2s;
    profiling_service checkout;
    profiling_env staging;
    profiling_version 2.4.1;
    profiling_tags team:edge "region:eu,west" 9lives.x:yes;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 20ms; }
        location = /status { profiling_status; }
    }
EOF
    $t->run;
    my $burns = ProfWorkload::drive($t, '/burn', 2.5, 0);

    my @p = wait_pushes($r, 1);
    ok(@p >= 1, 'a push was accepted') or do {
        diag(explain([ pushes($r) ]));
        return;
    };
    my $p = $p[0];

    like($p->{request},
         qr{^POST /prefix/push\.v1\.PusherService/Push HTTP/1\.1\r\n},
         'POST <prefix>/push.v1.PusherService/Push');
    like($p->{request}, qr{^Content-Type: application/proto\r$}mi,
         'Content-Type: application/proto');

    my $s = series_by_name($p);
    is_deeply([ sort keys %$s ], [ 'process_cpu', 'wall' ],
              'two series: process_cpu and wall');
    my $cpu = $s->{process_cpu}{labels};
    is($cpu->{service_name}, 'checkout', 'service_name');
    is($cpu->{environment}, 'staging', 'environment');
    is($cpu->{version}, '2.4.1', 'version');
    is($cpu->{team}, 'edge', 'a tag');
    is($cpu->{region}, 'eu,west', 'a tag value as it is');
    is($cpu->{_lives_x}, 'yes', 'a tag name made valid');
    is_deeply({ %{ $s->{wall}{labels} }, __name__ => 'process_cpu' }, $cpu,
              'the wall series has the same labels');

    my @x = push_profiles($p);
    my ($c) = grep { $_->{labels}{__name__} eq 'process_cpu' } @x;
    my ($w) = grep { $_->{labels}{__name__} eq 'wall' } @x;
    is_deeply([ sample_types($c->{profile}) ],
              [ 'cpu/nanoseconds', 'samples/count' ],
              'CPU: cpu/nanoseconds and samples/count');
    is(pstr($c->{profile}, $c->{profile}{period_type}{type}) . '/'
       . pstr($c->{profile}, $c->{profile}{period_type}{unit}),
       'cpu/nanoseconds',
       'CPU period type cpu/nanoseconds: process_cpu:cpu:nanoseconds:cpu:'
       . 'nanoseconds');
    is_deeply([ sample_types($w->{profile}) ],
              [ 'wall/nanoseconds', 'samples/count' ],
              'wall: wall/nanoseconds and samples/count');
    is(pstr($w->{profile}, $w->{profile}{period_type}{type}), 'wall',
       'wall period type: wall:wall:nanoseconds:wall:nanoseconds');
    like($_->{id}, qr/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
         'each raw profile has a UUID') for @x;

    ok(leaf_totals($c->{profile}, 'cpu')->{ngx_http_profiling_burn_spin},
       'CPU time in the burn handler, named');
    my %labels;
    for my $sample (@{ $c->{profile}{sample} }) {
        $labels{$_} = 1 for keys %{ sample_labels($c->{profile}, $sample) };
    }
    is_deeply([ sort keys %labels ], [],
              'no sample label without a trace (no thread labels)');

    my $st = $t->get('/status');
    like($st->{content}, qr/"pyroscope_succeeded":[1-9]/,
         'the status page counts the pushes');
    my $slot = decode_json($st->{content})->{workers}[0];
    like($slot->{last_push}{outcome} // '', qr/^uploaded \(HTTP 200\)$/,
         'and says what the last push became');
    is($slot->{last_upload}, undef, 'no agent: no last upload');

    $t->stop;
    my $counters = last_exit_counters($t->error_log);
    ok($counters && $counters->{pyroscope_succeeded} >= 1,
       'the exit line counts them') or diag($t->error_log);

    # Every period, the last one at the stop too: the CPU the burns spun.
    @p = grep { $_->{status} == 200 } pushes($r);
    is(scalar @p, $counters->{pyroscope_succeeded},
       'every push counted succeeded was accepted');
    my $cpu_ns = 0;
    $cpu_ns += series_total($_, 'process_cpu', 'cpu') for @p;
    ok($cpu_ns > 0.8 * $burns * 20e6,
       'the CPU time pushed is at least what the burns spun')
        or diag("$cpu_ns ns for $burns burns of 20 ms");
    stop_pyroscope($r);
};


subtest 'span profiles: local root span and trace ids; no series per URI; '
      . 'the same CPU as the Datadog agent gets' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_pyroscope("127.0.0.1:$port");
    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_period 2s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn/ { profiling_burn 3ms; }
    }
EOF
    $t->run;

    # 1,000 distinct URIs, each request its own trace.
    my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
    my %trace_of;
    for my $i (1 .. 1000) {
        my $trace = sprintf('4bf92f3577b34da6%016x', 0x1000 + $i);
        my $parent = sprintf('%016x', 0xa0000 + $i);
        $trace_of{$parent} = $trace;
        ProfHTTP::get_with($t, "/burn/u$i",
                           { traceparent => "00-$trace-$parent-01" }, $http);
    }
    $t->stop;

    my @p = grep { $_->{status} == 200 } pushes($r);
    ok(@p >= 1, 'pushes accepted') or return;
    is(scalar(grep { $_->{status} != 200 } pushes($r)), 0, 'none refused')
        or diag(explain([ pushes($r) ]));

    my ($cpu, $traced_cpu, $bad) = (0, 0, 0);
    for my $x (map { push_profiles($_) } @p) {
        next unless $x->{labels}{__name__} eq 'process_cpu';
        my $i = value_index($x->{profile}, 'cpu');
        for my $sample (@{ $x->{profile}{sample} }) {
            my $l = sample_labels($x->{profile}, $sample);
            my $v = $sample->{value}[$i];
            $cpu += $v;
            next unless $l->{span_id};
            my ($span, $trace) = ($l->{span_id}{str}, $l->{trace_id}{str});
            if ($span =~ /^[0-9a-f]{16}$/ && defined $trace
                && ($trace_of{$span} // '') eq $trace)
            {
                $traced_cpu += $v;
            } else {
                $bad++;
            }
        }
    }
    is($bad, 0, 'every span_id is a request\'s parent id (16 lowercase hex '
                . 'digits), with its trace_id (32)');
    ok($traced_cpu >= 0.95 * $cpu,
       'at least 95% of the CPU carries span_id and trace_id')
        or diag("$traced_cpu of $cpu ns");

    my @series = series_seen($r);
    is(scalar @series, 2, 'two series for 1,000 URIs: process_cpu and wall')
        or diag(explain(\@series));

    # Each period's CPU the same in both (the same aggregated profile).
    my @dd_cpu;
    for my $u (ProfAgent::upload_dirs($agent)) {
        push @dd_cpu, profile_total(decode_profile("$u/profile.pprof"),
                                    'cpu-time');
    }
    my @py_cpu = sort { $a <=> $b }
                 map { series_total($_, 'process_cpu', 'cpu') } @p;
    @dd_cpu = sort { $a <=> $b } @dd_cpu;
    is_deeply(\@py_cpu, \@dd_cpu,
              'every period: the same CPU time to Pyroscope and the agent');

    stop_pyroscope($r);
    stop_agent($agent);
};


subtest 'the endpoint as a label: bounded a period, the rest "other"' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_pyroscope("127.0.0.1:$port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_pyroscope_endpoints 2;
    profiling_period 10m;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn/ { profiling_burn 5ms; }
    }
EOF
    $t->run;
    for my $round (1 .. 40) {
        $t->get("/burn/$_") for qw(a a a a b b b c d e);
    }
    $t->stop;

    my @p = grep { $_->{status} == 200 } pushes($r);
    is(scalar @p, 1, 'one period, pushed at the stop') or return;
    my %endpoints;
    for my $x (push_profiles($p[0])) {
        for my $sample (@{ $x->{profile}{sample} }) {
            my $e = sample_labels($x->{profile}, $sample)->{endpoint};
            $endpoints{ $e->{str} } = 1 if $e;
        }
    }
    is_deeply([ sort keys %endpoints ],
              [ 'GET /burn/a', 'GET /burn/b', 'other' ],
              'the two endpoints of most time, the others "other"');
    my $c = last_exit_counters($t->error_log);
    is($c->{pyroscope_endpoints_folded}, 3,
       'three endpoints folded, counted');
    ok(log_lines($t->error_log, qr/more endpoints than the 2 Pyroscope/),
       'and said in the log');
    # a, b, other, and the samples of no request (no endpoint label)
    ok(scalar(series_seen($r)) <= 2 * 4, 'at most 4 series a profile type')
        or diag(explain([ series_seen($r) ]));

    stop_pyroscope($r);
};


subtest 'auth: basic, bearer, tenant, headers; secrets never shown' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_pyroscope("127.0.0.1:$port");

    my $t = ProfNginx->new(workers => 1);
    my $secret_file = $t->prefix . '/pyroscope-token';
    open(my $f, '>', $secret_file) or die;
    print $f "s3cret-from-file\n";
    close($f);
    chmod(0600, $secret_file);

    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_pyroscope_basic_auth 123456 file:$secret_file;
    profiling_pyroscope_tenant team-a;
    profiling_pyroscope_header X-Extra "plain value";
    profiling_pyroscope_header X-Key env:PYRO_TEST_KEY;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
        location = /status { profiling_status; }
    }
EOF
    # nginx reads it again for its signals (nginx -s quit).
    local $ENV{PYRO_TEST_KEY} = 'k3y-from-env';
    $t->run;
    my @p = wait_pushes($r, 1);
    ok(@p, 'a push arrived') or return;
    my $basic = encode_base64('123456:s3cret-from-file', '');
    like($p[0]{request}, qr/^Authorization: Basic \Q$basic\E\r$/m,
         'basic auth: the user and the file\'s secret');
    like($p[0]{request}, qr/^X-Scope-OrgID: team-a\r$/m, 'X-Scope-OrgID');
    like($p[0]{request}, qr/^X-Extra: plain value\r$/m, 'a header');
    like($p[0]{request}, qr/^X-Key: k3y-from-env\r$/m,
         'a header from the environment');

    my $status = $t->get('/status')->{content};
    $t->stop;
    for my $where ([ 'the error log', $t->error_log ],
                   [ 'the status page', $status ])
    {
        ok($where->[1] !~ /s3cret|k3y|\Q$basic\E/,
           "no secret in $where->[0]");
    }

    # A bearer token instead, from the environment.
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_pyroscope_bearer_token env:PYRO_TEST_TOKEN;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
    }
EOF
    my $before = () = pushes($r);
    local $ENV{PYRO_TEST_TOKEN} = 'glc_t0ken';
    $t->run;
    ok(wait_until(sub { pushes($r) > $before }, 15), 'a push arrived');
    like((pushes($r))[-1]{request},
         qr/^Authorization: Bearer glc_t0ken\r$/m, 'Authorization: Bearer');
    $t->stop;
    unlike($t->error_log, qr/glc_t0ken/, 'the token is not in the log');

    stop_pyroscope($r);
};


subtest 'nginx -t names the directive and the bad value' => sub {
    my $t = ProfNginx->new(workers => 1);
    my $secret_file = $t->prefix . '/token';
    open(my $f, '>', $secret_file) or die;
    print $f "tok\n";
    close($f);

    my $with = 'profiling_pyroscope_url http://pyroscope:4040;';
    for my $ok ('profiling_pyroscope_url off;',
                'profiling_pyroscope_url http://pyroscope:4040;',
                'profiling_pyroscope_url https://profiles.example.net/p/;',
                "$with profiling_pyroscope_endpoints 0;",
                "$with profiling_pyroscope_endpoints 1000;",
                "$with profiling_pyroscope_bearer_token file:$secret_file;",
                "$with profiling_pyroscope_tenant t1;",
                "$with profiling_pyroscope_header X-A b;",
                "$with profiling_pyroscope_header Authorization "
                . "file:$secret_file; profiling_pyroscope_tenant t1;")
    {
        $t->write_config("profiling on;\n$ok\n"
                         . "server { listen 127.0.0.1:%%PORT%%; }\n");
        my ($rc, $out) = $t->test_config;
        is($rc, 0, "accepted: $ok") or diag($out);
    }

    my $url = qr/in "profiling_pyroscope_url" directive/;
    my $both = qr/header that "profiling_pyroscope_\w+" set already: give one of them/;
    my $own = qr/in "profiling_pyroscope_header" directive: the pushes set it themselves/;
    for my $bad (
        [ 'profiling_pyroscope_url ftp://x;',
          qr/invalid value "ftp:\/\/x" $url \(the scheme must be http:\/\/ or https:\/\/\)/ ],
        [ 'profiling_pyroscope_url http://h/p?x=1;',
          qr/invalid value "http:\/\/h\/p\?x=1" $url \(a URL has no query or fragment\)/ ],
        [ 'profiling_pyroscope_url unix:/run/p.sock;',
          qr/invalid value "unix:\/run\/p.sock" $url \(the scheme must be http:\/\/ or https:\/\/\)/ ],
        [ 'profiling_pyroscope_url http://u:pw@host;',
          qr/invalid value "http:\/\/u:pw\@host" $url \(credentials go in profiling_pyroscope_basic_auth\)/ ],
        [ 'profiling_pyroscope_url http://;', qr/invalid value "http:\/\/" $url/ ],
        [ 'profiling_pyroscope_endpoints 1001;',
          qr/invalid value "1001" in "profiling_pyroscope_endpoints"/ ],
        [ 'profiling_pyroscope_endpoints x;',
          qr/invalid value "x" in "profiling_pyroscope_endpoints"/ ],
        [ 'profiling_pyroscope_bearer_token glc_literal;',
          qr/a secret must be "file:\/path" or "env:NAME"/ ],
        [ 'profiling_pyroscope_bearer_token env:PYRO_UNSET_VAR;',
          qr/"PYRO_UNSET_VAR" is not set/ ],
        [ 'profiling_pyroscope_basic_auth u file:/nonexistent/x;',
          qr/"\/nonexistent\/x" failed/ ],
        [ 'profiling_pyroscope_basic_auth a:b env:HOME;',
          qr/invalid user "a:b" in "profiling_pyroscope_basic_auth"/ ],
        [ 'profiling_pyroscope_header "Bad Name" v;',
          qr/invalid header name "Bad Name" in "profiling_pyroscope_header"/ ],
        [ 'profiling_pyroscope_url off; profiling_pyroscope_url off;',
          qr/"profiling_pyroscope_url" directive is duplicate/ ],
        [ "$with profiling_pyroscope_basic_auth u file:$secret_file; "
          . "profiling_pyroscope_bearer_token file:$secret_file;",
          qr/"profiling_pyroscope_bearer_token file:\S+" sets the "Authorization" $both/ ],
        [ "$with profiling_pyroscope_basic_auth u file:$secret_file; "
          . 'profiling_pyroscope_header Authorization "Token x";',
          qr/"profiling_pyroscope_header Authorization" sets the "Authorization" $both/ ],
        [ "$with profiling_pyroscope_header authorization env:HOME; "
          . "profiling_pyroscope_basic_auth u file:$secret_file;",
          qr/"profiling_pyroscope_basic_auth u" sets the "authorization" header that "profiling_pyroscope_header" set already/ ],
        [ "$with profiling_pyroscope_tenant t1; profiling_pyroscope_tenant t2;",
          qr/"profiling_pyroscope_tenant t2" sets the "X-Scope-OrgID" $both/ ],
        [ "$with profiling_pyroscope_tenant t1; "
          . 'profiling_pyroscope_header X-Scope-OrgID t2;',
          qr/"profiling_pyroscope_header X-Scope-OrgID" sets the "X-Scope-OrgID" $both/ ],
        [ "$with profiling_pyroscope_header X-A b; profiling_pyroscope_header x-a c;",
          qr/"profiling_pyroscope_header x-a" sets the "X-A" $both/ ],
        (map { [ "$with profiling_pyroscope_header $_ x;",
                 qr/invalid header name "$_" $own/ ] }
             qw(Content-Type content-length Host Content-Encoding)),
        [ 'profiling_pyroscope_tenant t1;',
          qr/"profiling_pyroscope_tenant" is set but "profiling_pyroscope_url" is not: nothing is pushed/ ],
        [ "profiling_pyroscope_bearer_token file:$secret_file;",
          qr/"profiling_pyroscope_bearer_token" is set but "profiling_pyroscope_url" is not/ ],
        [ 'profiling_pyroscope_url off; profiling_pyroscope_endpoints 5;',
          qr/"profiling_pyroscope_endpoints" is set but "profiling_pyroscope_url" is off/ ],
        [ 'profiling_pyroscope_header X-A b;',
          qr/"profiling_pyroscope_header" is set but "profiling_pyroscope_url" is not/ ],
    ) {
        my ($line, $re) = @$bad;
        $t->write_config("profiling on;\n$line\n"
                         . "server { listen 127.0.0.1:%%PORT%%; }\n");
        my ($rc, $out) = $t->test_config;
        isnt($rc, 0, "refused: $line");
        like($out, $re, '  and said why') or diag($out);
        unlike($out, qr/glc_literal/, '  without the secret')
            if $line =~ /glc_literal/;
    }
};


# The status page's counters (one worker).
sub counters {
    my ($t) = @_;
    my $s = decode_json($t->get('/status')->{content});
    my %c = %{ $s->{totals}{counters} // {} };
    $c{$_} //= 0 for map { "pyroscope_$_" } qw(succeeded retried failed_4xx
        failed_5xx failed_timeout failed_connect dropped);
    return \%c;
}

# Each way Pyroscope can fail, as the agent's (t/upload.t).
sub failing_pyroscope_test {
    my ($name, $mode, $check) = @_;

    subtest $name => sub {
        my $port = ProfHTTP::free_port();
        my $r = start_pyroscope("127.0.0.1:$port", mode => $mode);

        my $t = ProfNginx->new(workers => 1);
        $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_upload_timeout 1s;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
        location = /status { profiling_status; }
    }
EOF
        $t->run;
        $check->($t, $r);
        $t->stop(timeout => 10);
        stop_pyroscope($r);
    };
}

failing_pyroscope_test('5xx: one retry, then dropped; then it recovers',
    'status=503', sub {
        my ($t, $r) = @_;
        ok(wait_until(sub { counters($t)->{pyroscope_failed_5xx} >= 2 }, 15),
           'two profiles failed with 503');
        ok(counters($t)->{pyroscope_retried} >= 2, 'each was tried twice');
        set_pyroscope_mode($r, 'ok');
        ok(wait_until(sub { counters($t)->{pyroscope_succeeded} >= 1 }, 15),
           'then a push succeeds');
        is($t->get('/')->{content}, 'ok', 'nginx served throughout');
    });

failing_pyroscope_test('429: never retried, counted as 4xx', 'limit', sub {
    my ($t, $r) = @_;
    ok(wait_until(sub { counters($t)->{pyroscope_failed_4xx} >= 2 }, 15),
       'profiles refused with 429 counted');
    is(counters($t)->{pyroscope_retried}, 0, 'never retried');
    ok(log_lines($t->error_log, qr/Pyroscope at "http:[^"]*" answered 429/),
       'the log says Pyroscope answered 429');
    is(counters($t)->{uploads_failed_4xx}, 0, 'the agent\'s counters apart');
});

failing_pyroscope_test('a hanging Pyroscope: timeouts, nginx unaffected',
    'hang', sub {
        my ($t, $r) = @_;
        my $served = ProfWorkload::drive($t, '/', 3, 0.01);
        ok($served > 50, "nginx served $served requests meanwhile");
        ok(wait_until(sub { counters($t)->{pyroscope_failed_timeout} >= 1 },
                      15), 'a push timed out');
        ok(wait_until(sub { counters($t)->{pyroscope_dropped} >= 1 }, 15),
           'profiles ready meanwhile dropped, counted');
    });

# Beside the agent, a Pyroscope that hangs: at a reload and at the stop
# the agent's uploader closes first and Pyroscope's push ends after it,
# at the close deadline; each profiler process ends with its exit line
# (under AddressSanitizer: no report, ci/test).
subtest 'the agent and a hanging Pyroscope: reload and stop end cleanly'
    => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_pyroscope("127.0.0.1:$port", mode => 'hang');
    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF2");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_upload_timeout 1s;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { profiling_burn 2ms; }
        location = /status { profiling_status; }
    }
EOF2
    $t->run;
    ok(wait_until(sub { (counters($t)->{uploads_succeeded} // 0) >= 1 }, 15),
       'the agent takes profiles');
    ProfWorkload::drive($t, '/', 1, 0.01);
    $t->reload;
    ok(wait_until(sub { exit_counters($t->error_log) >= 1 }, 15),
       'the old worker\'s profiler process ended after the reload')
        or diag($t->error_log);
    ProfWorkload::drive($t, '/', 1, 0.01);
    ok($t->stop(timeout => 15), 'nginx stopped');

    my @exits = exit_counters($t->error_log);
    is(scalar @exits, 2, 'both profiler processes logged their exit line')
        or diag($t->error_log);
    for my $c (@exits) {
        ok($c->{pyroscope_dropped} >= 1,
           'a push still hanging at the close deadline: dropped, counted');
    }
    unlike($t->error_log, qr/exited on signal|AddressSanitizer/,
           'no process crashed');

    stop_pyroscope($r);
    stop_agent($agent);
};


subtest 'nobody listening: connection failures counted' => sub {
    my $port = ProfHTTP::free_port();
    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url off;
    profiling_pyroscope_url http://127.0.0.1:$port;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
        location = /status { profiling_status; }
    }
EOF
    $t->run;
    ok(wait_until(sub { counters($t)->{pyroscope_failed_connect} >= 1 }, 15),
       'failed_connect counted');
    is($t->get('/')->{content}, 'ok', 'nginx serves');
    $t->stop;
};


# The stand-in itself: it refuses what Pyroscope refuses (its default
# limits), so that what it accepted above means something.
subtest 'the stand-in refuses what Pyroscope refuses' => sub {
    my $port = ProfHTTP::free_port();
    my $r = start_pyroscope("127.0.0.1:$port");
    my $http = HTTP::Tiny->new(timeout => 30);
    my $now_ns = int(time() * 1e9);

    # A pprof from its text form (protoc --encode).
    my $pprof = sub {
        my ($text) = @_;
        my $dir = File::Temp->newdir();
        open(my $f, '>', "$dir/p.txt") or die;
        print $f $text;
        close($f);
        my $proto = ProfEnv::proto_dir();
        system("protoc --encode=perftools.profiles.Profile -I '$proto' "
               . "profile.proto < '$dir/p.txt' > '$dir/p.pb'") == 0
            or die 'protoc --encode failed';
        return slurp("$dir/p.pb");
    };
    my $head = qq{string_table: ""\nstring_table: "cpu"\n}
               . qq{string_table: "nanoseconds"\n}
               . "sample_type { type: 1 unit: 2 }\n"
               . "time_nanos: $now_ns\n";
    my $ingest = sub {
        my ($body) = @_;
        return $http->post("http://127.0.0.1:$port/ingest?format=pprof"
                           . '&name=limits', { content => $body });
    };

    my $res = $ingest->($pprof->($head . "sample { value: 1 }\n"
                                 x 16000));
    is($res->{status}, 200, '16,000 samples: accepted');
    $res = $ingest->($pprof->($head . "sample { value: 1 }\n" x 16001));
    is($res->{status}, 400, '16,001 samples: refused');
    like($res->{content}, qr/samples count limit/, '  as Pyroscope says');

    $res = $ingest->($pprof->($head . 'string_table: "'
                              . ('x' x (4 * 1024 * 1024)) . "\"\n"));
    is($res->{status}, 400, 'over 4 MiB: refused');
    like($res->{content}, qr/exceeds the size limit/, '  as Pyroscope says');

    $res = $ingest->($pprof->(qq{string_table: ""\nstring_table: "cpu-time"}
                              . qq{\nstring_table: "nanoseconds"\n}
                              . "sample_type { type: 1 unit: 2 }\n"));
    is($res->{status}, 400, 'a sample type with "-": refused');

    $res = $ingest->($pprof->($head . "sample { value: 1 "
                              . join(' ', map { "label { key: 1 num: $_ }" }
                                          1 .. 101) . " }\n"));
    is($res->{status}, 400, '101 labels on a sample: refused');

    # A sample label named as a series label: the series' wins.
    $res = $http->post("http://127.0.0.1:$port/ingest?format=pprof"
                       . '&name=limits{endpoint=series}',
                       { content => $pprof->($head
                           . qq{string_table: "endpoint"\n}
                           . qq{string_table: "GET /a"\n}
                           . "sample { value: 1 label { key: 3 str: 4 } }\n")
                       });
    is($res->{status}, 200,
       'a sample label named as a series label: accepted')
        or diag($res->{content});

    my $old_ns = $now_ns - 2 * 3600 * 1e9;
    $res = $ingest->($pprof->($head =~ s/time_nanos: \d+/time_nanos: $old_ns/r
                              . "sample { value: 1 }\n"));
    is($res->{status}, 400, 'two hours old: refused');

    $res = $http->post("http://127.0.0.1:$port/push.v1.PusherService/Push",
                       { headers => { 'Content-Type' => 'application/proto' },
                         content => "\x0a\xff" });
    is($res->{status}, 400, 'a push that is no PushRequest: refused');
    like($res->{content}, qr/^\{"code":"invalid_argument"/,
         '  with Connect\'s error');

    stop_pyroscope($r);
};


done_testing();
