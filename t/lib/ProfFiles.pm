# SPDX-License-Identifier: BSD-2-Clause
package ProfFiles;

# Small file helpers shared by the tests, the benchmarks and the scripts
# they run: a file's content (or its lines, or the pid it holds) read
# whole, a file written whole.
#
#   my $text = slurp($path) // die "no $path";
#   spew("$dir/nginx.conf", $conf);

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);

our @EXPORT_OK = qw(slurp spew file_lines read_pid);

# The bytes of a file, or undef when it cannot be read.
sub slurp {
    my ($path) = @_;
    open(my $fh, '<', $path) or return undef;
    binmode($fh);
    local $/;
    my $s = <$fh>;
    close($fh);
    return $s;
}

# Writes $text to $path (replacing it); dies when it cannot.
sub spew {
    my ($path, $text) = @_;
    open(my $fh, '>', $path) or croak "write $path: $!";
    print $fh $text;
    close($fh) or croak "write $path: $!";
}

# Lines of a file (an access log), without newlines; () if it is missing.
sub file_lines {
    my ($path) = @_;
    my $s = slurp($path);
    return () unless defined $s;
    return split /\n/, $s;
}

# The pid at the start of a pid file, or undef (no file, no number yet).
sub read_pid {
    my ($path) = @_;
    my $s = slurp($path) // return undef;
    return $s =~ /^(\d+)/ ? $1 : undef;
}

1;
