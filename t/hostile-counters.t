#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The upload counters of a worker's exit line tell the truth about an
# agent that fails: what the stand-in agent (t/agent.pl) received (one
# request per try, the bytes of each body) is what the worker counted
# (uploads_attempted, bytes_sent), and every profile submitted ended in
# exactly one outcome (submitted = succeeded + failed_* + dropped). Against
# an agent answering 500 (each profile tried twice), and one too slow for
# the upload timeout (timeouts, and profiles dropped for newer ones).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;

use ProfFiles qw(slurp);
use ProfHTTP;
use ProfLog;
use ProfNginx;
use ProfWait;
use ProfWorkload;
use ProfAgent;

my @FAILED = qw(uploads_failed_connect uploads_failed_timeout
                uploads_failed_4xx uploads_failed_5xx uploads_failed_other);

sub run_against {
    my ($mode, $timeout, $seconds) = @_;

    my $agent_port = ProfHTTP::free_port();
    my $agent = start_agent("127.0.0.1:$agent_port", mode => $mode);

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF");
    profiling on;
    profiling_agent_url http://127.0.0.1:$agent_port;
    profiling_upload_timeout $timeout;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 10ms; }
    }
EOF
    $t->run;
    my ($worker) = $t->worker_pids;
    ProfWorkload::drive($t, '/burn', $seconds, 0.02);
    ok($t->stop, "$mode: nginx quits");
    $t->ok_no_worker_died($mode);

    my ($c) = grep { $_->{pid} == $worker }
              ProfLog::exit_counters($t->error_log);
    ok($c, "$mode: the worker logged its counters") or return;

    # Tries still running at the quit reach the agent afterwards.
    my @u;
    wait_until(sub {
        @u = ProfAgent::agent_uploads($agent);
        @u >= $c->{uploads_attempted};
    }, 10);
    wait_until(sub { 0 }, 0.5);     # and nothing more comes
    @u = ProfAgent::agent_uploads($agent);
    stop_agent($agent);

    my $bytes = 0;
    $bytes += $_->{content_length} // 0 for @u;
    my %tries;
    for my $x (@u) {
        my $e = eval { decode_json(slurp("$x->{dir}/event") // '') };
        my ($seq) = ($e ? $e->{tags_profiler} : '') =~ /profile_seq:(\d+)/;
        $tries{ $seq // '?' }++;
    }

    note("$mode: " . join(' ', map { "$_=$c->{$_}" }
                                grep { /^uploads_|^bytes_sent/ } sort keys %$c)
         . '; the agent received ' . scalar(@u) . " requests, $bytes bytes"
         . '; tries by profile_seq: ' . join(' ', map { "$_:$tries{$_}" }
                                             sort keys %tries));

    # A try the close deadline cut before it reached the agent is counted
    # as attempted and dropped, and the agent never saw it: allowed for the
    # last profile only (sequences count from 0, as no encoding fails
    # here), and only when none of its tries arrived. (A count one too
    # high exactly then would pass.)
    my $last = $c->{uploads_submitted} - 1;
    my $cut = !$tries{$last} && $c->{uploads_dropped} >= 1
              && $c->{uploads_attempted} == @u + 1 ? 1 : 0;
    is($c->{uploads_attempted} - $cut, scalar(@u), "$mode: uploads_attempted "
       . 'is the number of requests the agent received'
       . ($cut ? ' (and the last profile\'s try cut at the close)' : ''));
    is($c->{bytes_sent}, $bytes, "$mode: bytes_sent is the bytes of the "
       . 'bodies the agent received');

    my $ended = $c->{uploads_succeeded} + $c->{uploads_dropped};
    $ended += $c->{$_} for @FAILED;
    is($c->{uploads_submitted}, $ended, "$mode: uploads_submitted = "
       . 'succeeded + failed_* + dropped');

    my @too_many = grep { $tries{$_} > 2 } sort keys %tries;
    ok(!@too_many, "$mode: no profile was tried more than twice")
        or diag(explain(\%tries));
    ok(!exists $tries{'?'}, "$mode: every request carried its profile_seq");

    return ($c, \%tries, $cut);
}


subtest 'an agent answering 500' => sub {
    my ($c, $tries, $cut) = run_against('status=500', '2s', 4.5);
    return unless $c;

    ok($c->{uploads_submitted} >= 4, "$c->{uploads_submitted} profiles "
       . 'submitted');
    is($c->{uploads_succeeded}, 0, 'none succeeded');
    is($c->{uploads_failed_5xx} + $c->{uploads_dropped},
       $c->{uploads_submitted}, 'each failed with a 5xx, or was dropped');
    # (A profile dropped for a newer one may have been tried or not.)
    my $tried = grep { /^\d+$/ } keys %$tries;
    is($c->{uploads_retried}, $c->{uploads_attempted} - $cut - $tried,
       "uploads_retried: the tries after the first of each ($tried "
       . 'profiles tried)');
    # The last one, at the quit, is not retried.
    my ($last) = sort { $b <=> $a } grep { /^\d+$/ } keys %$tries;
    my @once = grep { $tries->{$_} != 2 && $_ != $last } keys %$tries;
    ok(!@once || $c->{uploads_dropped}, 'each profile but the last was tried '
       . 'twice (a 5xx is retried once)') or diag(explain($tries));
};


subtest 'an agent slower than the upload timeout' => sub {
    my ($c) = run_against('slow=1.5', '1s', 4.5);
    return unless $c;

    ok($c->{uploads_failed_timeout} >= 1, "$c->{uploads_failed_timeout} "
       . 'timed out');
    ok($c->{uploads_dropped} >= 1, "$c->{uploads_dropped} dropped for newer "
       . 'profiles or at the quit');
    is($c->{uploads_succeeded}, 0, 'none succeeded');
};

done_testing();
