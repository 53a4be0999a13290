# SPDX-License-Identifier: BSD-2-Clause
package ProfServers;

# Servers the tests point the module at, besides the stand-in agent
# (ProfAgent): one that accepts connections and never answers (an agent
# or a debuginfod server that hangs), and Debian's debuginfod serving a
# directory of debug files. Each is stopped when the test ends.
#
#   my $silent = ProfServers::start_silent_server();
#   ... $silent->{port} ... $silent->{accepted}->() ...
#   ProfServers::stop_silent_server($silent);
#
# Not exported: call them as ProfServers::x.

use strict;
use warnings;

use Carp qw(croak);
use File::Temp ();
use IO::Select;
use IO::Socket::INET;
use POSIX ();

use ProfFiles qw(file_lines);
use ProfHTTP qw(free_port);
use ProfWait qw(wait_until);

# A server on a free loopback port that accepts every connection, reads
# what it is sent and never answers: an agent that hangs. Returns
# { pid, port, accepted }: accepted() is how many connections it accepted.
# Stop it with stop_silent_server (or it goes at exit).
my %SILENT;

sub start_silent_server {
    my $listen = IO::Socket::INET->new(Listen => 128, LocalAddr => '127.0.0.1',
                                       LocalPort => 0, Proto => 'tcp',
                                       ReuseAddr => 1)
        or croak "listen: $!";
    my $port = $listen->sockport;
    my $log = File::Temp->new(TEMPLATE => 'silent-XXXXXX', TMPDIR => 1);
    my $path = $log->filename;

    my $pid = fork();
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        my @held;
        my $sel = IO::Select->new($listen);
        open(my $fh, '>>', $path) or POSIX::_exit(1);
        $fh->autoflush(1);
        for (;;) {
            for my $s ($sel->can_read(1)) {
                if ($s == $listen) {
                    my $c = $listen->accept or next;
                    push @held, $c;
                    $sel->add($c);
                    print $fh "accepted\n";
                } elsif (!sysread($s, my $buf, 65536)) {
                    $sel->remove($s);   # closed by the client: forget it
                    @held = grep { $_ != $s } @held;
                    close($s);
                }
            }
        }
    }
    close($listen);
    $SILENT{$pid} = 1;
    return { pid => $pid, port => $port, log => $log,
             accepted => sub { scalar(() = file_lines($path)) } };
}

sub stop_silent_server {
    my ($server) = @_;
    kill('KILL', $server->{pid});
    waitpid($server->{pid}, 0);
    delete $SILENT{ $server->{pid} };
}

END {
    my $status = $?;
    for my $pid (keys %SILENT) {
        kill('KILL', $pid);
        waitpid($pid, 0);
    }
    $? = $status;
}

# Debian's debuginfod serving the debug files of $dir, its requests logged
# (-v) to debuginfod.log in the prefix of the nginx under test $t; killed
# when the test ends. Returns its URL once it serves the debug file of
# $build_id, or undef after 60 s.
my @DEBUGINFOD_PIDS;
END { kill('TERM', @DEBUGINFOD_PIDS) if @DEBUGINFOD_PIDS; }

sub debuginfod_server {
    my ($t, $dir, $build_id) = @_;
    my $port = free_port();
    my $p = $t->prefix;

    my $pid = fork();
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open(STDOUT, '>', "$p/debuginfod.log") or exit 1;
        open(STDERR, '>&', \*STDOUT) or exit 1;
        exec('debuginfod', '-F', $dir, '-p', $port,
             '-d', "$p/debuginfod.sqlite", '-v') or exit 1;
    }
    push @DEBUGINFOD_PIDS, $pid;

    my $url = "http://127.0.0.1:$port";
    return wait_until(sub {
        `curl -s -o /dev/null -w '%{http_code}' $url/buildid/$build_id/debuginfo`
            eq '200' }, 60, 0.1) ? $url : undef;
}

1;
