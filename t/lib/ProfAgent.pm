# SPDX-License-Identifier: BSD-2-Clause
package ProfAgent;

# The stand-in agent (t/agent.pl) for the tests and benchmarks: start it
# on a TCP port or a unix socket, switch its mode, stop it (and the
# connections it holds), and read what it recorded.
#
#   my $agent = start_agent("127.0.0.1:$port", mode => 'ok');
#   ... $agent->{dir}/upload-*/{request,parts,event,profile.pprof,...}
#   set_mode($agent, 'hang');
#   stop_agent($agent);

use strict;
use warnings;

use Exporter qw(import);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use POSIX ();

use ProfFiles qw(slurp);
use ProfWait qw(wait_until);

our @EXPORT = qw(start_agent stop_agent set_mode epoch_of);
our @EXPORT_OK = qw(upload_dirs agent_uploads);

my $AGENT_PL = dirname(dirname(__FILE__)) . '/agent.pl';
my %AGENTS;

# Starts the agent listening on $listen. Options: mode (default ok), dir
# (where it records, made if missing; default a temporary directory,
# removed at exit), lifetime (seconds, default 300), log (a file for its
# output, default ours). Returns { pid, dir } once it is ready.
sub start_agent {
    my ($listen, %opts) = @_;
    my $dir = $opts{dir}
              // tempdir('agent-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir($dir) unless -d $dir;
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        if (defined $opts{log}) {
            open(STDIN, '<', '/dev/null');
            open(STDOUT, '>', $opts{log}) or POSIX::_exit(127);
            open(STDERR, '>&', \*STDOUT);
        }
        exec($^X, $AGENT_PL, '--listen', $listen, '--dir', $dir,
             '--mode', $opts{mode} // 'ok',
             '--lifetime', $opts{lifetime} // 300)
            or POSIX::_exit(127);
    }
    $AGENTS{$pid} = 1;
    wait_until(sub { -e "$dir/ready" }, 10) or die "agent did not start";
    return { pid => $pid, dir => $dir };
}

# The agent runs in its own process group: its connections go with it.
sub stop_agent {
    my ($agent) = @_;
    kill('TERM', -$agent->{pid});
    waitpid($agent->{pid}, 0);
    delete $AGENTS{ $agent->{pid} };
}

END { kill('TERM', map { -$_ } keys %AGENTS) if %AGENTS; }

sub set_mode {
    my ($agent, $mode) = @_;
    open(my $f, '>', "$agent->{dir}/mode.tmp") or die;
    print $f "$mode\n";
    close($f);
    rename("$agent->{dir}/mode.tmp", "$agent->{dir}/mode") or die;
}

# The directories of the uploads the agent has received (upload-*: one a
# POST /profiling/v1/input, made as it comes in), oldest first.
sub upload_dirs {
    my ($agent) = @_;
    opendir(my $dh, $agent->{dir}) or return ();
    my @d = sort grep { /^upload-\d+-\d+-\d+$/ } readdir($dh);
    closedir($dh);
    return map { "$agent->{dir}/$_" } @d;
}

# The agent's recorded uploads, oldest first, once their request is
# written: { dir, request, content_length }.
sub agent_uploads {
    my ($agent) = @_;
    my @u;
    for my $path (upload_dirs($agent)) {
        my $request = slurp("$path/request") // next;
        my ($length) = $request =~ /^content-length:\s*(\d+)/mi;
        push @u, { dir => $path, request => $request,
                   content_length => $length };
    }
    return @u;
}

# Seconds since the epoch of an RFC 3339 UTC time with nanoseconds.
sub epoch_of {
    my ($rfc3339) = @_;
    my ($y, $mo, $d, $h, $mi, $s, $ns) =
        $rfc3339 =~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{9})Z$/
        or return undef;
    local $ENV{TZ} = 'UTC';
    POSIX::tzset();
    return POSIX::mktime($s, $mi, $h, $d, $mo - 1, $y - 1900) + $ns / 1e9;
}

1;
