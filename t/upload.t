# SPDX-License-Identifier: BSD-2-Clause
# Uploads to a Datadog agent: a stand-in agent (t/agent.pl) records what
# each worker sends; healthy over TCP and a unix socket, the defaults taken
# from DD_* variables, and each way an agent can fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Cwd ();
use File::Temp qw(tempdir);
use JSON::PP;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ProfEnv;
use ProfFiles qw(slurp);
use ProfHTTP;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;
use ProfAgent;


# Recorded uploads, oldest first: { dir, request, parts, event, ... }.
sub uploads {
    my ($agent) = @_;
    my @u;
    for my $path (ProfAgent::upload_dirs($agent)) {
        my %u = (dir => $path);
        $u{request} = slurp("$path/request");
        $u{parts} = slurp("$path/parts");
        my $event = slurp("$path/event");
        $u{event} = eval { decode_json($event) } if defined $event;
        push @u, \%u;
    }
    my @sorted = sort { $a->{event}{start} cmp $b->{event}{start} } @u;
    return @sorted;
}


sub tags_of {
    my ($u) = @_;
    my %t;
    for (split /,/, $u->{event}{tags_profiler}) {
        my ($k, $v) = split /:/, $_, 2;
        $t{$k} = $v;
    }
    return \%t;
}

sub wait_uploads {
    my ($agent, $n, $timeout) = @_;
    my @u;
    wait_until(sub { @u = uploads($agent); @u >= $n }, $timeout // 10);
    return @u;
}


subtest 'a healthy agent over TCP gets every profile, complete' => sub {
    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port");

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_period 2s;
    profiling_service checkout;
    profiling_env staging;
    profiling_version 2.4.1;
    profiling_tags team:edge "region:eu,west";
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 20ms; }
    }
EOF
    $t->run;
    my ($worker) = $t->worker_pids;
    ProfWorkload::drive($t, '/burn', 2.5, 0);

    my @u = wait_uploads($agent, 1);
    ok(@u >= 1, 'an upload arrived') or return;
    my $u = $u[0];

    like($u->{request}, qr{^POST /profiling/v1/input HTTP/1\.1\r\n},
         'POST /profiling/v1/input');
    like($u->{request}, qr{^DD-EVP-ORIGIN: nginx-profiling\r$}mi,
         'DD-EVP-ORIGIN header');
    like($u->{request}, qr{^DD-EVP-ORIGIN-VERSION: \d+\.\d+\.\d+\r$}mi,
         'DD-EVP-ORIGIN-VERSION header');
    like($u->{request}, qr{^Content-Type: multipart/form-data; boundary=}mi,
         'multipart body');
    is($u->{parts},
       "event\tevent.json\tapplication/json\n"
       . "profile.pprof\tprofile.pprof\tapplication/octet-stream\n"
       . "code-provenance.json\tcode-provenance.json\tapplication/json\n",
       'parts: event.json, profile.pprof, code-provenance.json');

    my $e = $u->{event};
    ok($e, 'event.json is JSON') or return;
    is($e->{version}, '4', 'version "4"');
    is($e->{family}, 'native', 'family native');
    is_deeply($e->{attachments}, ['profile.pprof', 'code-provenance.json'],
              'attachments name the parts');
    ok(exists $e->{endpoint_counts} && exists $e->{internal}
       && exists $e->{info}, 'endpoint_counts, internal, info');

    my ($start, $end) = (epoch_of($e->{start}), epoch_of($e->{end}));
    ok(defined $start && defined $end, 'start and end are RFC 3339 UTC')
        or diag("$e->{start} $e->{end}");
    # The period, or a little more: a close is a timer of the profiler
    # process and a flush by the worker, both late on a loaded machine.
    ok(($end - $start) > 1.9 && ($end - $start) < 2.75,
       sprintf('end - start is the period (%.3f s of 2 s)', $end - $start));
    ok(abs($start - time()) < 60, 'start is now');

    my $tags = tags_of($u);
    is($tags->{service}, 'checkout', 'service tag');
    is($tags->{env}, 'staging', 'env tag');
    is($tags->{version}, '2.4.1', 'version tag');
    ok(length $tags->{host}, 'host tag');
    is($tags->{language}, 'native', 'language tag');
    is($tags->{runtime}, 'nginx', 'runtime tag');
    is($tags->{runtime_version}, ProfEnv::nginx_version_string(),
       'runtime_version tag: the version of the nginx under test');
    like($tags->{'runtime-id'},
         qr/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
         'runtime-id is a UUID');
    is($tags->{process_id}, $worker, 'process_id is the worker');
    like($tags->{profiler_version}, qr/^\d+\.\d+\.\d+$/, 'profiler_version');
    is($tags->{profile_seq}, 0, 'profile_seq starts at 0');
    is($tags->{team}, 'edge', 'user tag');
    is($tags->{region}, 'eu_west', 'comma in a tag value is replaced');
    unlike($e->{tags_profiler}, qr/(^|,)(,|$)|:(,|$)/, 'no empty tag');

    my $p = eval { decode_profile("$u->{dir}/profile.pprof") };
    ok($p, 'profile.pprof decodes with protoc') or diag($@);
    ok(profile_total($p, 'cpu-time') > 0, 'it has CPU time');

    # Frames of an object (with its build id) left without a name, e.g.
    # the static functions of a stripped nginx (Debian's): the backend may
    # name them, and the upload says so; an nginx with its symbols (built
    # from source) leaves none, and the upload does not say so.
    my %mapping = map { $_->{id} => $_ } @{ $p->{mapping} || [] };
    my $unnamed = grep {
        !@{ $_->{line} || [] } && $_->{mapping_id}
        && length pstr($p, $mapping{ $_->{mapping_id} }{build_id})
    } @{ $p->{location} || [] };
    my $stripped = `nm '@{[ ProfEnv::nginx_real() ]}' 2>&1`
                   =~ /no symbols/;
    if ($stripped) {
        ok($unnamed > 0, "$unnamed locations in the stripped nginx without "
           . "a function");
        is($tags->{remote_symbols}, 'yes', 'tagged remote_symbols:yes');
    } else {
        is($tags->{remote_symbols}, $unnamed ? 'yes' : undef,
           "$unnamed locations without a function: remote_symbols "
           . ($unnamed ? 'yes' : 'absent'));
    }
    my @wrong = grep { $_->{has_functions} } grep {
        my $id = $_->{id};
        grep { !@{ $_->{line} || [] } && ($_->{mapping_id} // 0) == $id }
             @{ $p->{location} || [] };
    } @{ $p->{mapping} || [] };
    is(scalar @wrong, 0, 'no mapping with such a location has_functions');

    my $prov = eval { decode_json(slurp("$u->{dir}/code-provenance.json")) };
    ok($prov && ref $prov->{v1} eq 'ARRAY', 'code-provenance.json is JSON');
    my $binary = Cwd::realpath(ProfEnv::nginx_real());
    my ($nginx) = grep { $_->{paths}[0] eq $binary } @{ $prov->{v1} };
    ok($nginx, "provenance lists the nginx binary $binary") or return;
    like($nginx->{build_id}, qr/^[0-9a-f]{40}$/, 'with its build id');
    # Its package's version, or none for an nginx built by hand.
    my $version = '';
    my ($package) = `dpkg-query -S '$binary' 2>/dev/null` =~ /^([^:]+):/;
    $version = `dpkg-query -W -f='\${Version}' '$package' 2>/dev/null`
        if defined $package;
    is($nginx->{version}, $version, 'and its package version ('
       . ($package // 'in no package') . ')');

    # Each profile once, in order, then the worker's last one at quit.
    $t->stop;
    my @all = wait_uploads($agent, 2);
    my @seq = map { tags_of($_)->{profile_seq} } @all;
    is_deeply(\@seq, [0 .. $#seq], 'profile_seq 0, 1, ... each once');
    my %ids = map { tags_of($_)->{'runtime-id'} => 1 } @all;
    is(scalar(keys %ids), 1, 'one runtime-id per worker process');
    like($t->error_log, qr/profiling: stopped: .*uploads_succeeded=\d+/,
         'the counters are logged at exit');

    stop_agent($agent);
};


subtest 'a unix socket agent, named by DD_TRACE_AGENT_URL' => sub {
    my $t = ProfNginx->new(workers => 1, agent_url => undef);
    my $sock = $t->prefix . "/apm.socket";
    my $agent = start_agent("unix:$sock");

    # "env NAME=value" is what the workers would see: it is the default.
    $t->write_config(<<"EOF", main => <<"MAIN");
    profiling on;
    profiling_period 1s;
    profiling_service from-directive;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF
env DD_TRACE_AGENT_URL=unix://$sock;
env DD_SERVICE=from-env;
env DD_ENV=from-env-env;
env DD_TAGS=a:1,b:2;
MAIN
    $t->run;

    my @u = wait_uploads($agent, 1);
    ok(@u, 'an upload arrived over the unix socket') or return;
    like($u[0]{request}, qr{^Host: localhost\r$}mi, 'Host: localhost');

    my $tags = tags_of($u[0]);
    is($tags->{service}, 'from-directive', 'the directive wins over DD_SERVICE');
    is($tags->{env}, 'from-env-env', 'DD_ENV is the default env');
    is($tags->{a}, '1', 'DD_TAGS are the default tags');
    is($tags->{b}, '2', 'DD_TAGS split on commas');

    $t->stop;
    stop_agent($agent);
};


subtest 'DD_AGENT_HOST and DD_TRACE_AGENT_PORT from the environment' => sub {
    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port");

    my $t = ProfNginx->new(workers => 1, agent_url => undef);
    $t->write_config(<<'EOF');
    profiling on;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF
    {
        # The master reads them when it reads the configuration.
        local $ENV{DD_AGENT_HOST} = '127.0.0.1';
        local $ENV{DD_TRACE_AGENT_PORT} = $agent_port;
        $t->run;
    }

    my @u = wait_uploads($agent, 1);
    ok(@u, 'the upload went to DD_AGENT_HOST:DD_TRACE_AGENT_PORT');
    is(tags_of($u[0])->{service}, 'nginx', 'the service defaults to nginx')
        if @u;

    $t->stop;
    stop_agent($agent);
};


# The failure cases share one agent whose mode changes.
sub failing_agent_test {
    my ($name, $mode, $check) = @_;

    subtest $name => sub {
        my $agent_port = ProfHTTP::free_port();
        my $agent = start_agent("127.0.0.1:$agent_port", mode => $mode);

        my $t = ProfNginx->new(workers => 1);
        $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_upload_timeout 1s;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
    }
EOF
        $t->run;
        $check->($t, $agent);
        $t->stop(timeout => 10);
        stop_agent($agent);
    };
}

failing_agent_test('500: one retry, then dropped; then it recovers', 'status=500',
    sub {
        my ($t, $agent) = @_;
        my @u = wait_uploads($agent, 4, 10);
        my %per_seq;
        $per_seq{ tags_of($_)->{profile_seq} }++ for @u;
        is($per_seq{0}, 2, 'profile 0 sent twice (one retry)');
        ok(!grep({ $_ > 2 } values %per_seq), 'never more than twice');

        set_mode($agent, 'ok');
        my $before = scalar uploads($agent);
        wait_until(sub { uploads($agent) >= $before + 2 }, 10);
        ok(scalar(uploads($agent)) >= $before + 2,
           'uploads go on once the agent recovers');

        # The identification line (NOTICE) repeats the first outcome.
        my @lines = grep { !/unwind tables for/ }
                    $t->error_log =~ /^(.*answered 500.*)$/mg;
        is(scalar @lines, 1, 'one log line for the repeated failure');
    });

failing_agent_test('4xx: dropped without retry; 404 is explained', 'status=404',
    sub {
        my ($t, $agent) = @_;
        my @u = wait_uploads($agent, 3, 10);
        my %per_seq;
        $per_seq{ tags_of($_)->{profile_seq} }++ for @u;
        ok(!grep({ $_ > 1 } values %per_seq), 'no retry after a 4xx')
            or diag(explain \%per_seq);
        like($t->error_log, qr/agent too old or APM disabled/,
             '404 explained in the log');
    });

subtest 'refused connections: retried once, counted, nginx unaffected' => sub {
    my $dead_port = ProfHTTP::free_port();
    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$dead_port;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
    }
EOF
    $t->run;
    my $ok = ProfWorkload::drive($t, '/', 3, 0.01);
    ok($ok > 50, 'nginx serves while uploads fail');
    my @failed = $t->error_log =~ /(profiling: upload to .* failed)/g;
    is(scalar @failed, 1, 'logged once, not per profile');
    $t->stop;
    like($t->error_log, qr/uploads_retried=[1-9]\d* uploads_failed_connect=[1-9]/,
         'retries and connection failures counted');
};

subtest 'a hanging agent: nginx serves, graceful quit is bounded' => sub {
    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port", mode => 'hang');

    my $t = ProfNginx->new(workers => 2);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_upload_timeout 2s;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "ok"; }
    }
EOF
    $t->run;

    my @times;
    my $ok = ProfWorkload::drive($t, '/', 2.5, 0.01, \@times);
    my @lat = sort { $a <=> $b } map { $_->[1] - $_->[0] } @times;
    ok($ok > 50, 'requests are served while uploads hang');
    ok($lat[int(@lat * 0.99)] < 0.1, 'p99 latency stays small')
        or diag("p99 $lat[int(@lat * 0.99)] s");

    my $t0 = time();
    ok($t->stop(timeout => 15), 'nginx quits');
    my $took = time() - $t0;
    ok($took < 2 + 1 + 0.5, 'within the upload timeout plus a second')
        or diag("took $took s");
    like($t->error_log, qr/timed out after 2000 ms/, 'the timeout is logged');

    stop_agent($agent);
};

done_testing();
