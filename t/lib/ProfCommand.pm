# SPDX-License-Identifier: BSD-2-Clause
package ProfCommand;

# Running external commands for their output: nginx -V and -t, protoc,
# wrk, gzip, the tools a test prepares its files with.
#
#   my ($rc, $out) = run_capture('nginx', '-V');   # stdout and stderr

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use POSIX ();

our @EXPORT_OK = qw(run_capture run_stdout);

sub _capture {
    my ($stderr_too, @cmd) = @_;
    my $pid = open(my $fh, '-|');
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open(STDERR, '>&', \*STDOUT) if $stderr_too;
        exec(@cmd) or POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh> // '';
    close($fh);
    return ($? >> 8, $out);
}

# Runs a command (no shell): (exit status, its stdout and stderr).
sub run_capture { return _capture(1, @_) }

# The same with its stderr left where ours goes: (exit status, stdout).
sub run_stdout { return _capture(0, @_) }

1;
