#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause
# Stops one thread of a running process -- only that thread, the others
# run on -- for a while, then lets it go:
#
#   t/stall.pl PID [--thread NAME] [--seconds S]
#
# NAME is the thread's /proc comm (default prof-loop, the profiler's event
# loop). Prints "stopped TID" once the thread is stopped and "released TID"
# once it runs again; holds it S seconds, or without --seconds until
# SIGINT, SIGTERM or SIGHUP (which also release it early). Exits non-zero
# when the thread cannot be stopped.
#
# How: PTRACE_SEIZE then PTRACE_INTERRUPT on the thread id. A seized thread
# is traced alone (unlike PTRACE_ATTACH, no SIGSTOP that would stop the
# whole process), and if this script dies however it dies, the kernel
# detaches it and the thread resumes: nothing can leave it stopped.
#
# The thread is only kept stopped inside its event wait (epoll_wait): there
# it holds no lock that the other threads need (the profiler's sample queue
# mutex is never held across the wait), so they run on as they would with
# a slow consumer, rather than blocking on a lock it took. Stopped anywhere
# else, it is let go and tried again a moment later.
#
# Needs root or CAP_SYS_PTRACE (or ptrace_scope 0 and the same user).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Getopt::Long qw(GetOptions);
use Time::HiRes qw(time sleep);

use ProfFiles qw(slurp);
use ProfProc qw(thread_named);

# x86_64 system call numbers and ptrace requests.
use constant {
    SYS_WAIT4        => 61,
    SYS_PTRACE       => 101,
    PTRACE_DETACH    => 17,
    PTRACE_SEIZE     => 0x4206,
    PTRACE_INTERRUPT => 0x4207,
    WALL             => 0x40000000,     # __WALL: wait for a thread too
};

# epoll_wait, epoll_pwait, epoll_pwait2: where a libuv loop waits.
my %WAIT_SYSCALLS = map { $_ => 1 } (232, 281, 441);

my $thread = 'prof-loop';
my $seconds;
GetOptions('thread=s' => \$thread, 'seconds=f' => \$seconds)
    and @ARGV == 1 and $ARGV[0] =~ /^\d+$/
    or die "usage: t/stall.pl PID [--thread NAME] [--seconds S]\n";
my $pid = $ARGV[0];

$| = 1;

sub find_thread {
    -d "/proc/$pid/task" or die "no process $pid\n";
    my $tid = thread_named($pid, $thread)
        // die "no thread named $thread in process $pid\n";
    return $tid + 0;     # a number for syscall()
}

sub ptrace {
    my ($request, $tid) = @_;
    return syscall(SYS_PTRACE, $request, $tid, 0, 0) == 0;
}

# Waits for the thread's stop after PTRACE_INTERRUPT.
sub wait_stop {
    my ($tid) = @_;
    my $status = pack('i', 0);
    my $r = syscall(SYS_WAIT4, $tid, $status, WALL, 0);
    die "wait4 $tid: $!\n" if $r != $tid;
    $status = unpack('i', $status);
    die sprintf("thread %d did not stop (status %#x)\n", $tid, $status)
        unless ($status & 0xff) == 0x7f;
}

# The system call the stopped thread is in (-1: none).
sub current_syscall {
    my ($tid) = @_;
    my $s = slurp("/proc/$pid/task/$tid/syscall") // '';
    return $s =~ /^(-?\d+)/ ? $1 : -1;
}

my $tid = find_thread();
my $release = 0;
$SIG{$_} = sub { $release = 1 } for qw(INT TERM HUP);

my $stopped = 0;
for my $try (1 .. 200) {
    ptrace(PTRACE_SEIZE, $tid) or die "PTRACE_SEIZE $tid: $!\n";
    ptrace(PTRACE_INTERRUPT, $tid) or die "PTRACE_INTERRUPT $tid: $!\n";
    wait_stop($tid);

    if ($WAIT_SYSCALLS{ current_syscall($tid) }) {
        $stopped = 1;
        last;
    }

    ptrace(PTRACE_DETACH, $tid) or die "PTRACE_DETACH $tid: $!\n";
    last if $release;
    sleep(0.02);
}
die "thread $tid was never stopped in its event wait\n" unless $stopped;

print "stopped $tid\n";

my $deadline = defined $seconds ? time() + $seconds : undef;
until ($release || (defined $deadline && time() >= $deadline)) {
    sleep(0.05);
}

ptrace(PTRACE_DETACH, $tid) or die "PTRACE_DETACH $tid: $!\n";
print "released $tid\n";
