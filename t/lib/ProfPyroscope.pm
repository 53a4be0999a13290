# SPDX-License-Identifier: BSD-2-Clause
package ProfPyroscope;

# The stand-in Pyroscope (t/pyroscope.pl) for the tests: start it, switch
# its mode, stop it, and read what it accepted or refused.
#
#   my $r = start_pyroscope("127.0.0.1:$port");
#   my @p = pushes($r);     # { dir, request, status, reason, series }
#   stop_pyroscope($r);

use strict;
use warnings;

use Exporter qw(import);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use JSON::PP;
use POSIX ();

use ProfFiles qw(slurp);
use ProfPprof;
use ProfWait qw(wait_until);

our @EXPORT = qw(start_pyroscope stop_pyroscope set_pyroscope_mode pushes
                 push_profiles series_seen);

my $RECEIVER = dirname(dirname(__FILE__)) . '/pyroscope.pl';
my %RECEIVERS;

# Starts the receiver on $listen. Options: mode (default ok), lifetime
# (seconds, default 300). Returns { pid, dir } once it listens.
sub start_pyroscope {
    my ($listen, %opts) = @_;
    my $dir = tempdir('pyroscope-XXXXXX', TMPDIR => 1,
                       CLEANUP => !$ENV{PROFILING_KEEP_TMP});
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        exec($^X, $RECEIVER, '--listen', $listen, '--dir', $dir,
             '--mode', $opts{mode} // 'ok',
             '--lifetime', $opts{lifetime} // 300)
            or POSIX::_exit(127);
    }
    $RECEIVERS{$pid} = 1;
    wait_until(sub { -e "$dir/ready" }, 10) or die "receiver did not start";
    return { pid => $pid, dir => $dir };
}

# It runs in its own process group: its connections go with it.
sub stop_pyroscope {
    my ($r) = @_;
    kill('TERM', -$r->{pid});
    waitpid($r->{pid}, 0);
    delete $RECEIVERS{ $r->{pid} };
}

END { kill('TERM', map { -$_ } keys %RECEIVERS) if %RECEIVERS; }

sub set_pyroscope_mode {
    my ($r, $mode) = @_;
    open(my $f, '>', "$r->{dir}/mode.tmp") or die;
    print $f "$mode\n";
    close($f);
    rename("$r->{dir}/mode.tmp", "$r->{dir}/mode") or die;
}

# The pushes received (complete), oldest first: { dir, request, status,
# reason, series (accepted ones: [ { labels, samples } ]) }.
sub pushes {
    my ($r) = @_;
    opendir(my $dh, $r->{dir}) or return ();
    my @d = sort grep { /^push-\d+-\d+-\d+$/ } readdir($dh);
    closedir($dh);
    my @p;
    for my $d (map { "$r->{dir}/$_" } @d) {
        my $verdict = slurp("$d/verdict") // next;
        my ($status, $reason) = $verdict =~ /^(\d+) (.*)$/;
        my $json = slurp("$d/push.json");
        push @p, { dir => $d, request => slurp("$d/request"),
                   status => $status, reason => $reason,
                   series => defined $json ? decode_json($json) : [] };
    }
    return @p;
}

# The profiles of an accepted push, decoded: [ { labels, profile } ].
sub push_profiles {
    my ($push) = @_;
    my @out;
    for my $s (@{ $push->{series} }) {
        for my $sample (@{ $s->{samples} }) {
            my $text = ProfPprof::decode_raw("$push->{dir}/$sample->{profile}");
            push @out, { labels => $s->{labels}, id => $sample->{id},
                         profile => $text };
        }
    }
    return @out;
}

# The distinct series every accepted profile made, as the receiver saw
# them ("name=value,..." sorted by name).
sub series_seen {
    my ($r) = @_;
    my $all = slurp("$r->{dir}/series") // '';
    my %s = map { $_ => 1 } grep { length } split /\n/, $all;
    my @s = sort keys %s;
    return @s;
}

1;
