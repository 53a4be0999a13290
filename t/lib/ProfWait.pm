# SPDX-License-Identifier: BSD-2-Clause
package ProfWait;

# Waiting in the tests and benchmarks: a condition polled until a deadline
# (never a fixed sleep standing in for one), and the pause of a load
# generator between its requests.
#
#   wait_until(sub { -e $file }, 10) or die "no $file";

use strict;
use warnings;

use Exporter qw(import);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(wait_until poll_sleep);

# Polls $cond every $step seconds (default 20 ms) until it returns true or
# $timeout seconds (default 10) pass; returns the condition's last value.
sub wait_until {
    my ($cond, $timeout, $step) = @_;
    $timeout //= 10;
    $step //= 0.02;

    my $deadline = time() + $timeout;

    for (;;) {
        my $v = $cond->();
        return $v if $v;
        return $v if time() >= $deadline;
        sleep($step);
    }
}

# A pause of the load generator (not a wait for a condition).
sub poll_sleep { sleep($_[0]) }

1;
