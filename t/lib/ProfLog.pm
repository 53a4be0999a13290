# SPDX-License-Identifier: BSD-2-Clause
package ProfLog;

# Readers of nginx's error log text: its lines matching a pattern, and
# the profiler's exit line. Each worker's profiler process logs, as it
# stops, one NOTICE line of its counters:
#
#   ... 1234#1234: profiling: stopped: handler_ns_p50=300 ... bytes_sent=0
#
# exit_counters() is the one parser of these lines; the others build on
# it.
#
#   my $c = last_exit_counters($t->error_log) or die "no exit line";
#   print $c->{samples_recorded};
#
# Not exported unless asked: call them as ProfLog::x or import them.

use strict;
use warnings;

use Exporter qw(import);

our @EXPORT_OK = qw(exit_counters last_exit_counters exit_counters_by_pid
                    log_lines);

# The counters of every "profiling: stopped:" line of an error log, in
# order: ( { pid => the logging pid, name => value, ... }, ... ).
sub exit_counters {
    my ($log) = @_;
    my @lines;
    for my $line (split /\n/, $log // '') {
        next unless $line =~ /\s(\d+)#\d+: profiling: stopped: (.*)$/;
        my ($pid, $tail) = ($1, $2);
        my %c = (pid => $pid);
        $c{$1} = $2 while $tail =~ /\b(\w+)=(\d+)/g;
        push @lines, \%c;
    }
    return @lines;
}

# The counters of the last exit line (as exit_counters), or undef when
# the log has none.
sub last_exit_counters {
    my ($log) = @_;
    my @c = exit_counters($log);
    return @c ? $c[-1] : undef;
}

# The counters of the exit lines by pid: { pid => { name => value } } (a
# pid's last line).
sub exit_counters_by_pid {
    my ($log) = @_;
    return { map { $_->{pid} => $_ } exit_counters($log) };
}

# The error log's lines matching $re.
sub log_lines {
    my ($log, $re) = @_;
    return grep { $_ =~ $re } split /\n/, $log // '';
}

1;
