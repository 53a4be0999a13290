#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Code that a timer resumes belongs to its request: Lua after ngx.sleep,
# an njs setTimeout callback (where Debian's js module loads), a request
# limit_req delayed. Clients send
# them at once, each request with ids of its own that say which path it
# asked for; the CPU spent after the timer carries that request's ids and
# endpoint, never another's.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX ();
use Test::More;
use ProfEnv;
use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my @MODULES = ProfWorkload::jit_workload_modules();
plan(skip_all => 'no lua for this nginx (OpenResty, or Debian\'s nginx '
                 . 'with libnginx-mod-http-lua: ci/install-deps)')
    unless @MODULES;

# njs where Debian's js module loads (Debian's nginx).
my $NJS = ProfEnv::engines()->{njs};

my $t = ProfNginx->new(workers => 1, modules => \@MODULES);
my $p = $t->prefix;

open(my $fh, '>', "$p/timer.js") or die "$p/timer.js: $!";
print $fh <<'EOF';
function later(r) {
    setTimeout(function () {
        var s = 0;
        for (var i = 0; i < 200000; i++) {
            s += Math.sin(i);
        }
        r.return(200, "njs " + s + "\n");
    }, 2);
}
export default { later };
EOF
close($fh);
chmod(0644, "$p/timer.js");

# The loops call sin (libm): the CPU of each path after its timer.
my $js_import = $NJS ? "js_import timer from $p/timer.js;" : '';
my $js_location = $NJS ? 'location /njs { js_content timer.later; }' : '';
$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;
    profiling_interval 1ms;

    $js_import
    limit_req_zone \$server_port zone=slow:1m rate=50r/s;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /lua {
            content_by_lua_block {
                jit.off()
                ngx.sleep(0.002)
                local s = 0
                for i = 1, 200000 do s = s + math.sin(i) end
                ngx.say(s)
            }
        }
        $js_location
        location /limited {
            limit_req zone=slow burst=100;
            profiling_burn 5ms;
        }
    }
EOF
$t->run;

# A request's span id: 1, 2 or 3 (its path), its client, its number.
my @PATHS = ('/lua', ($NJS ? '/njs' : ()), '/limited');

sub span_hex {
    my ($path_no, $client, $n) = @_;
    return sprintf('%x%03x%012x', $path_no + 1, $client, $n);
}

my @clients;
for my $client (1 .. 3) {
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 1);
        my $end = time() + 4;
        my $n = 0;
        while (time() < $end) {
            my $k = ($n + $client) % @PATHS;
            my $span = span_hex($k, $client, ++$n);
            my $r = ProfHTTP::get_with(
                $t, $PATHS[$k],
                { traceparent => ProfHotspots::traceparent($span) }, $http);
            POSIX::_exit(1) unless $r->{status} == 200;
        }
        POSIX::_exit(0);
    }
    push @clients, $pid;
}

my $failed = 0;
for my $pid (@clients) {
    waitpid($pid, 0);
    $failed++ if $? != 0;
}
is($failed, 0, 'every request was answered 200');

ok($t->stop, 'stopped');
my ($stopped) = $t->error_log =~ /profiling: stopped: (.*)/;
$stopped //= '';
my @samples = ProfHotspots::hotspot_samples(
                  ProfPprof::decode_dump_dir($t->dump_dir));

# Which path a span id was sent for (its first hex digit), or undef.
sub path_of_span {
    my ($span) = @_;
    return undef unless defined $span;
    my $hex = sprintf('%016x', $span);
    my $k = hex(substr($hex, 0, 1)) - 1;
    return $k >= 0 && $k < @PATHS ? $PATHS[$k] : undef;
}

my %marker = (
    '/lua'     => sub { grep { /libm\.so/ } @{ $_[0]{objects} } },
    '/njs'     => sub { grep { /libm\.so/ } @{ $_[0]{objects} } },
    '/limited' => sub {
        ProfHotspots::stack_has($_[0], 'ngx_http_profiling_burn_spin') },
);

# The sin loops run in /lua and /njs alone; the burn in /limited alone.
my @work = grep {
    $_->{cpu} > 0 && ($marker{'/lua'}->($_) || $marker{'/limited'}->($_))
} @samples;

# nginx's own loops of timers and posted events, which run what the
# wrapper left (nothing, with this nginx's loop): CPU there is no request's.
my $NGINX_LOOPS = qr/^ngx_event_(expire_timers|process_posted)$/;

my ($total, $right, $wrong, $outside) = (0, 0, 0, 0);
my (%by_path, %unlabelled);
for my $s (@work) {
    $total += $s->{cpu};
    $outside += $s->{cpu} if ProfHotspots::stack_has($s, $NGINX_LOOPS);
    my $sent = path_of_span($s->{span});
    my $ok = defined $sent && defined $s->{endpoint}
             && $s->{endpoint} eq "GET $sent"
             && $marker{$sent}->($s)
             && same_root($s);
    if ($ok) {
        $right += $s->{cpu};
        $by_path{$sent} += $s->{cpu};
    } elsif (defined $s->{span}) {
        $wrong += $s->{cpu};
    } else {
        $unlabelled{ $s->{leaf} } += $s->{cpu};
    }
}

sub same_root {
    my ($s) = @_;
    return defined $s->{root} && $s->{root} eq $s->{span};
}

diag(sprintf('%s: %.0fms', $_, ($by_path{$_} // 0) / 1e6)) for @PATHS;
ok($total > 200e6, sprintf('%.0fms of CPU after the timers', $total / 1e6));
ok($right >= 0.95 * $total,
   sprintf('%.1f%% of it carries the ids and endpoint of its own request',
           $total ? 100 * $right / $total : 0))
    or diag(join("\n",
                 'unlabelled by leaf: '
                 . ProfHotspots::format_cpu_by(\%unlabelled),
                 sprintf('run by nginx\'s own loops, after the wrapper: '
                         . '%.0fms', $outside / 1e6),
                 'the profiler\'s drops and interval: '
                 . join(' ', $stopped =~ /\b((?:labels_dropped|ring_full
                                              |dropped_samples|interval_ns
                                              |throttled_ns)=\d+)/gx)));
is($wrong, 0, 'none carries another request\'s ids');
for my $path (@PATHS) {
    ok(($by_path{$path} // 0) > 20e6, "$path has its share");
}

done_testing();
