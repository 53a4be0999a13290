#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Configuration: nginx -t accepts every directive with valid values and
# names the directive and the bad value when it rejects one; profiler
# threads run in workers only where profiling is on.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfNginx;
use ProfProc;

my $t = ProfNginx->new(workers => 1);

sub http_with {
    my ($main_directives) = @_;
    return <<"EOF";
    $main_directives
    server {
        listen 127.0.0.1:%%PORT%%;
        profiling on;
        location / { return 204; }
    }
EOF
}


# A full valid configuration.

$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%/;
    profiling_agent_url http://127.0.0.1:8126;
    profiling_upload_timeout 5s;
    profiling_period 30s;
    profiling_interval 10ms;
    profiling_max_frames 64;
    profiling_memory_limit 8m;
    profiling_service my-service;
    profiling_env staging;
    profiling_version 1.2.3;
    profiling_tags team:web region:eu-west-1;
    profiling_tags k:v k2:v2;
    profiling_ui_store 2m;

    server {
        listen 127.0.0.1:%%PORT%%;
        profiling on;

        location / {
            profiling on;
            return 204;
        }

        location /profiles/ {
            profiling_ui;
        }

        location /quiet {
            profiling off;
            return 204;
        }
    }

    server {
        listen 127.0.0.1:%%PORT%%;
        server_name other;
        profiling off;
    }
EOF

my ($rc, $out) = $t->test_config;
is($rc, 0, 'nginx -t accepts a full profiling configuration')
    or diag($out);
like($out, qr/test is successful/, 'nginx -t reports success');


# Profiling on only in a location is valid as well.

$t->write_config(<<'EOF');
    server {
        listen 127.0.0.1:%%PORT%%;
        location /p { profiling on; return 204; }
    }
EOF
($rc, $out) = $t->test_config;
is($rc, 0, 'profiling on in a location only') or diag($out);


# The bounds of every ranged directive are valid.

for my $ok (
    'profiling_period 1s;', 'profiling_period 10m;',
    'profiling_period 1000ms;', 'profiling_period 600s;',
    'profiling_interval 1ms;', 'profiling_interval 1s;',
    'profiling_interval 1000ms;',
    'profiling_max_frames 8;', 'profiling_max_frames 512;',
    'profiling_memory_limit 256k;', 'profiling_memory_limit 1024m;',
    # the bound as the directive's own error message and docs/directives.md
    # write it
    'profiling_memory_limit 1g;',
    'profiling_tags a:b;', 'profiling_tags url:http://x;',
    # commas in values are replaced when the tags are sent (docs/directives.md)
    'profiling_tags a:b,c;',
    'profiling_upload_timeout 100ms;', 'profiling_upload_timeout 10m;',
    'profiling_agent_url off;', 'profiling_agent_url http://agent:8126;',
    'profiling_agent_url https://agent:8126;',
    'profiling_agent_url unix:/var/run/datadog/apm.socket;',
    'profiling_service "my svc/1";',
    'profiling on;', 'profiling off;',
    'profiling_debuginfod off;',
    'profiling_debuginfod https://debuginfod.debian.net;',
    "profiling_debuginfod http://a:8002 https://b/x;\n"
        . '    profiling_debuginfod_cache debuginfod-cache max_size=64m;',
)
{
    $t->write_config(http_with($ok));
    ($rc, $out) = $t->test_config;
    is($rc, 0, "nginx -t accepts $ok") or diag($out);
}


# Invalid values: rejected, with the directive and the value named.

for my $bad (
    [ 'profiling_period', '500ms' ],
    [ 'profiling_period', '11m' ],
    [ 'profiling_period', 'abc' ],
    [ 'profiling_interval', '0' ],
    [ 'profiling_interval', '2s' ],
    [ 'profiling_max_frames', '7' ],
    [ 'profiling_max_frames', '513' ],
    [ 'profiling_max_frames', 'x' ],
    [ 'profiling_memory_limit', '1k' ],
    [ 'profiling_memory_limit', 'junk' ],
    [ 'profiling_tags', 'novalue' ],
    [ 'profiling_tags', ':x' ],
    [ 'profiling_tags', 'x:' ],
    [ 'profiling', 'maybe' ],
    [ 'profiling_dump_dir', '' ],
    [ 'profiling_upload_timeout', '50ms' ],
    [ 'profiling_upload_timeout', '11m' ],
    [ 'profiling_agent_url', 'ftp://agent:21' ],
    [ 'profiling_agent_url', 'http://' ],
    [ 'profiling_agent_url', 'localhost:8126' ],
    [ 'profiling_debuginfod', 'on' ],
    [ 'profiling_debuginfod', 'ftp://debuginfod' ],
    [ 'profiling_debuginfod', 'http://' ],
    [ 'profiling_debuginfod_cache', '' ],
    [ 'profiling_ui_store', '1k' ],
    [ 'profiling_ui_store', '1g' ],
    [ 'profiling_ui_store', 'lots' ],
)
{
    my ($directive, $value) = @$bad;

    $t->write_config(http_with(qq{$directive "$value";}));
    ($rc, $out) = $t->test_config;

    my $what = qq{$directive "$value"};
    isnt($rc, 0, "nginx -t rejects $what");
    like($out, qr/\Q"$directive"\E/, "the error for $what names the "
         . 'directive') or diag($out);
    like($out, qr/\Q"$value"\E/, "the error for $what names the value")
        or diag($out);
}

# The cache's bound, its second value.
for my $bad ('max_size=1k', 'max_size=x', 'size=1g') {
    $t->write_config(http_with("profiling_debuginfod_cache /tmp/c $bad;"));
    ($rc, $out) = $t->test_config;
    isnt($rc, 0, "nginx -t rejects profiling_debuginfod_cache /tmp/c $bad");
    like($out, qr/"\Q$bad\E" in "profiling_debuginfod_cache"/,
         'and names the value and the directive') or diag($out);
}

# A second tag among good ones is checked too.
$t->write_config(http_with('profiling_tags a:b c: d:e;'));
($rc, $out) = $t->test_config;
isnt($rc, 0, 'nginx -t rejects a tag without a value among good ones');
like($out, qr/"c:".*"profiling_tags"/, 'and names it') or diag($out);

# Directives that take one value are not silently repeated.
$t->write_config(http_with("profiling_period 2s;\n    profiling_period 3s;"));
($rc, $out) = $t->test_config;
isnt($rc, 0, 'nginx -t rejects a repeated profiling_period');
like($out, qr/"profiling_period" directive is duplicate/, 'as duplicate')
    or diag($out);


# Threads: none with profiling off everywhere, two more with it on.

sub worker_threads_of {
    my ($http) = @_;
    my $t = ProfNginx->new(workers => 1);
    $t->write_config($http);
    $t->run;

    my ($worker) = $t->worker_pids;
    my $log = $t->error_log;

    # The profiler starts in init_process, before the worker's event loop:
    # once a request is served, every thread it starts exists.
    my $r = $t->get('/');
    is($r->{status}, 204, 'the worker serves a request');

    my $threads = ProfProc::thread_count($worker);
    my $profiler = ProfProc::profiler_of($worker);
    $t->stop;
    return ($threads, $t->error_log, $profiler);
}

my ($threads, $log, $profiler) = worker_threads_of(<<'EOF');
    profiling off;
    profiling_dump_dir %%DUMP%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        profiling off;
        location / { profiling off; return 204; }
    }
EOF
is($threads, 1, 'with profiling off everywhere, a worker has 1 thread');
ok(!$profiler, 'and no profiler process');
unlike($log, qr/profiling: sampling/, 'and logs no profiler start');

($threads, $log, $profiler) = worker_threads_of(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF
is($threads, 1, 'with profiling on, a worker still has 1 thread');
ok($profiler, 'and a profiler process beside it');
like($log, qr/profiling: sampling every 10ms, a profile every 60000ms/,
     'the worker logs the profiler start with the defaults');


# Agent URLs: every form nginx -t must refuse names the directive and the
# value; the forms docs/directives.md gives pass. A unix socket path holds
# at most 107 bytes (sun_path).

my $SUN_PATH_MAX = 107;
my $long_path = '/' . ('s' x $SUN_PATH_MAX);           # 108 bytes
my $longest_path = '/' . ('s' x ($SUN_PATH_MAX - 1));  # 107 bytes

for my $url ('http://127.0.0.1:8126', 'http://[::1]:8126',
             'https://agent.example.com', 'unix:/var/run/datadog/apm.socket',
             "unix:$longest_path", 'off')
{
    $t->write_config(http_with(qq{profiling_agent_url "$url";}));
    ($rc, $out) = $t->test_config;
    is($rc, 0, "nginx -t accepts profiling_agent_url $url") or diag($out);
}

for my $url ('http://[::1', 'http://a b', 'http://h:99999', 'ftp://h:1',
             'unix:relative', "unix:$long_path", 'http://h:1?x',
             "http://h\x01:1", "unix:/s\x7f")
{
    $t->write_config(http_with(qq{profiling_agent_url "$url";}));
    ($rc, $out) = $t->test_config;
    (my $shown = $url) =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord($1))/ge;
    isnt($rc, 0, "nginx -t rejects profiling_agent_url $shown") or next;
    like($out, qr/"profiling_agent_url"/, "the error for $shown names the "
         . 'directive') or diag($out);
    like($out, qr/\Q"$url"\E/, "the error for $shown names the value")
        or diag($out);
}

# The same through the environment the master starts with (the harness
# removes DD_*: set here for nginx -t only), without profiling_agent_url.

my $e = ProfNginx->new(workers => 1, agent_url => undef);
$e->write_config(http_with(''));

for my $env ([ DD_TRACE_AGENT_URL => 'http://127.0.0.1:8126' ],
             [ DD_TRACE_AGENT_URL => 'unix:/var/run/datadog/apm.socket' ],
             [ DD_TRACE_AGENT_URL => '/var/run/datadog/apm.socket' ],
             [ DD_TRACE_AGENT_URL => $longest_path ],
             [ DD_AGENT_HOST => '::1' ],
             [ DD_AGENT_HOST => 'agent.example.com',
               DD_TRACE_AGENT_PORT => '8126' ])
{
    my %vars = @$env;
    local @ENV{ keys %vars } = values %vars;
    ($rc, $out) = $e->test_config;
    my $what = join(' ', map { "$_=$vars{$_}" } sort keys %vars);
    is($rc, 0, "nginx -t accepts $what") or diag($out);
}

for my $env ([ DD_TRACE_AGENT_URL => 'http://[::1' ],
             [ DD_TRACE_AGENT_URL => 'http://a b' ],
             [ DD_TRACE_AGENT_URL => 'http://h:99999' ],
             [ DD_TRACE_AGENT_URL => 'ftp://h:1' ],
             [ DD_TRACE_AGENT_URL => 'unix:relative' ],
             [ DD_TRACE_AGENT_URL => 'unix://relative' ],
             [ DD_TRACE_AGENT_URL => "unix:$long_path" ],
             [ DD_TRACE_AGENT_URL => $long_path ],
             [ DD_TRACE_AGENT_URL => "unix://$long_path" ],
             [ DD_TRACE_AGENT_URL => "/s\x01s" ],
             [ DD_TRACE_AGENT_URL => 'http://h:1?x' ],
             [ DD_AGENT_HOST => 'a b' ],
             [ DD_AGENT_HOST => '[::1' ],
             [ DD_AGENT_HOST => 'h/x' ],
             [ DD_AGENT_HOST => 'h?x' ],
             [ DD_TRACE_AGENT_PORT => '99999' ],
             [ DD_TRACE_AGENT_PORT => 'x' ])
{
    my ($var, $value) = @$env;
    local $ENV{$var} = $value;
    ($rc, $out) = $e->test_config;
    (my $shown = $value) =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord($1))/ge;
    isnt($rc, 0, "nginx -t rejects $var=$shown") or next;
    like($out, qr/\Q$var\E/, "the error for $var=$shown names the variable")
        or diag($out);
    like($out, qr/\Q$value\E/, "the error for $var=$shown names the value")
        or diag($out);
}


# profiling_dump_keep: a count and/or a size, or off; a bad one is named
# (the offending word of several).

for my $keep ('5', '64k', '10 1m', '1m 10', 'off', '100000') {
    $t->write_config(http_with("profiling_dump_keep $keep;"));
    ($rc, $out) = $t->test_config;
    is($rc, 0, "nginx -t accepts profiling_dump_keep $keep") or diag($out);
}

for my $bad ([ 'x', 'x' ], [ '0', '0' ], [ '10 20', '20' ], [ '1k', '1k' ],
             [ 'off 5', 'off' ], [ '5 off', 'off' ], [ '100001', '100001' ],
             [ '1m 2m', '2m' ], [ '-1', '-1' ])
{
    my ($keep, $word) = @$bad;
    $t->write_config(http_with("profiling_dump_keep $keep;"));
    ($rc, $out) = $t->test_config;
    isnt($rc, 0, "nginx -t rejects profiling_dump_keep $keep") or next;
    like($out, qr/"profiling_dump_keep"/, "the error for profiling_dump_keep "
         . "$keep names the directive") or diag($out);
    like($out, qr/\Q"$word"\E/, "the error for profiling_dump_keep $keep "
         . "names \"$word\"") or diag($out);
}

done_testing();
