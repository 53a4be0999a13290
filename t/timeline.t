#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The timeline: by default every sample carries when its time ended
# (label end_timestamp_ns, unix ns, inside the profile's window), as
# Datadog's timeline view reads it; "profiling_timeline off" sums samples
# per stack and labels instead, with no timestamp.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

sub run_profile {
    my ($directive) = @_;

    my $t = ProfNginx->new(workers => 1);
    $t->write_config(<<"EOF2");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 2s;
    $directive

    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 20ms; }
    }
EOF2
    $t->run;
    my ($worker) = $t->worker_pids;
    ProfWorkload::drive($t, '/burn', 2.5, 0);
    my ($file) = $t->wait_for_files(qr/^nginx\.$worker\.0\.pprof$/, 1, 10);
    my $p = decode_profile($file);
    my $size = -s $file;
    $t->stop;
    return ($p, $size);
}

my ($on, $on_size) = run_profile('');
my ($off, $off_size) = run_profile('profiling_timeline off;');

my $start = $on->{time_nanos};
my $end = $start + $on->{duration_nanos};
my ($with, $inside, $cpu_samples) = (0, 0, 0);
my %seen;
for my $s (@{ $on->{sample} }) {
    my $l = sample_labels($on, $s);
    next unless exists $l->{end_timestamp_ns};
    $with++;
    my $ts = $l->{end_timestamp_ns}{num};
    $inside++ if $ts >= $start && $ts <= $end + 1e6;
    $seen{$ts}++ if $s->{value}[value_index($on, 'cpu-samples')] > 0;
}
my $n = scalar @{ $on->{sample} };
ok($n > 50 && $with == $n, "every one of the $n samples has an "
   . 'end_timestamp_ns label');
is($inside, $with, 'inside the profile\'s window');
my $cpu = grep { $_->{value}[value_index($on, 'cpu-samples')] > 0 }
          @{ $on->{sample} };
ok($cpu > 50 && keys(%seen) == $cpu, "each of the $cpu CPU samples has a "
   . 'timestamp of its own');

my $off_with = grep { exists sample_labels($off, $_)->{end_timestamp_ns} }
               @{ $off->{sample} };
is($off_with, 0, 'profiling_timeline off: no timestamp');
ok(@{ $off->{sample} } < $n / 4, 'and the samples are summed per stack ('
   . scalar(@{ $off->{sample} }) . " samples instead of $n)");

ok(abs(profile_total($on, 'cpu-time') - profile_total($off, 'cpu-time'))
   < 0.5 * profile_total($off, 'cpu-time'),
   'the same kind of cpu-time either way');

diag(sprintf('profile size: %d bytes with the timeline, %d without '
             . '(%.1fx)', $on_size, $off_size, $on_size / ($off_size || 1)));

done_testing();
