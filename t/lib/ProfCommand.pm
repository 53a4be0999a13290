# SPDX-License-Identifier: BSD-2-Clause
package ProfCommand;

# Running external commands for their output: nginx -V and -t, protoc,
# wrk, gzip, the tools a test prepares its files with.
#
#   my ($rc, $out) = run_capture('nginx', '-V');   # stdout and stderr
#   my $out = shell_in($dir, 'objcopy --only-keep-debug a.so a.debug');

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use POSIX ();

our @EXPORT_OK = qw(run_capture run_stdout shell_in);

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

# Runs a shell command line in $dir; returns its output (stdout and
# stderr), or dies with it when the command fails.
sub shell_in {
    my ($dir, $cmd) = @_;
    my $out = `cd '$dir' && ($cmd) 2>&1`;
    $? == 0 or die "$cmd: $out";
    return $out;
}

1;
