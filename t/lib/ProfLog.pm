# SPDX-License-Identifier: BSD-2-Clause
package ProfLog;

# Readers of nginx's error log text: its lines matching a pattern, and
# the profiler's exit line. Each worker's profiler process logs, as it
# stops, one NOTICE line of its counters:
#
#   ... 1234#1234: profiling: stopped: handler_ns_p50=300 ... bytes_sent=0
#
# Not exported unless asked: call them as ProfLog::x or import them.

use strict;
use warnings;

use Exporter qw(import);

our @EXPORT_OK = qw(exit_counters profiler_counters log_lines);

# The counters of every "profiling: stopped:" line of an error log, in
# order: ( { pid => the logging pid, name => value, ... }, ... ).
sub exit_counters {
    my ($log) = @_;
    my @lines;
    for my $line (split /\n/, $log) {
        next unless $line =~ /\s(\d+)#\d+: profiling: stopped: (.*)$/;
        my ($pid, $tail) = ($1, $2);
        my %c = (pid => $pid);
        $c{$1} = $2 while $tail =~ /\b(\w+)=(\d+)/g;
        push @lines, \%c;
    }
    return @lines;
}

# The counters each worker logged as its profiler stopped ("profiling:
# stopped: name=value ..."): { pid => { name => value } }.
sub profiler_counters {
    my ($log) = @_;
    my %c;
    for (split /\n/, $log) {
        next unless /(\d+)#\d+: profiling: stopped: (.*)$/;
        my ($pid, $rest) = ($1, $2);
        $c{$pid}{$1} = $2 while $rest =~ /(\w+)=(\S+)/g;
    }
    return \%c;
}

# The error log's lines matching $re.
sub log_lines {
    my ($log, $re) = @_;
    return grep { $_ =~ $re } split /\n/, $log;
}

1;
