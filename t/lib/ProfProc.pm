# SPDX-License-Identifier: BSD-2-Clause
package ProfProc;

# Readers of /proc for the tests, the benchmarks and t/stall.pl:
# processes (alive, state, children, command line, status, uid, resident
# and proportional memory, mappings, CPU time), their threads (ids,
# names, CPU time, by name for a worker and its profiler process), the
# listening sockets a process holds, and the profiler process of an nginx
# worker.
#
#   my $profiler = profiler_ready($worker);   # its threads running
#   my $ns = thread_cpu_ns($worker);          # the main thread's CPU

use strict;
use warnings;

use Exporter qw(import);
use List::Util qw(sum);
use POSIX ();

use ProfFiles qw(slurp);

our @EXPORT = qw(
    process_alive children_of proc_cmdline proc_uid proc_status
    thread_ids thread_count thread_named thread_cpu_ns profiler_of
    profiler_ready listening_sockets_held
);
our @EXPORT_OK = qw(
    proc_state stat_cpu_ns rss_kb pss_kb pss_mappings thread_names
    cpu_ns_by_thread process_cpu_ns under_qemu
);


# Fields of /proc/PID[/task/TID]/stat after the command name: index 0 is
# the state (field 3 of proc(5)), 1 the ppid, 11 utime, 12 stime.
sub _stat_fields {
    my ($path) = @_;
    my $s = slurp($path);
    return () unless defined $s;
    $s =~ s/^.*\)\s+//s or return ();
    return split(/\s+/, $s);
}

# The state letter of a process, or of one of its threads (R, S, Z, ...),
# or undef when it is gone.
sub proc_state {
    my ($pid, $tid) = @_;
    my @f = _stat_fields(defined $tid ? "/proc/$pid/task/$tid/stat"
                                      : "/proc/$pid/stat");
    return @f ? $f[0] : undef;
}

# CPU time of a process (or of one of its threads) from its stat, utime +
# stime, in ns (clock tick resolution); a zombie's covers its whole life.
# undef when it is gone.
sub stat_cpu_ns {
    my ($pid, $tid) = @_;
    my @f = _stat_fields(defined $tid ? "/proc/$pid/task/$tid/stat"
                                      : "/proc/$pid/stat");
    return undef unless @f;
    my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
    return ($f[11] + $f[12]) * 1e9 / $hz;
}

# Alive and not a zombie.
sub process_alive {
    my ($pid) = @_;
    return 0 unless $pid;
    my @f = _stat_fields("/proc/$pid/stat");
    return @f && $f[0] ne 'Z' && $f[0] ne 'X';
}

# Pids whose parent is $ppid (living ones), sorted.
sub children_of {
    my ($ppid) = @_;
    my @kids;

    opendir(my $dh, '/proc') or return ();
    for my $pid (grep { /^\d+$/ } readdir($dh)) {
        my @f = _stat_fields("/proc/$pid/stat");
        next unless @f && $f[1] == $ppid && $f[0] ne 'Z';
        push @kids, $pid;
    }
    closedir($dh);

    return sort { $a <=> $b } @kids;
}

sub proc_cmdline {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/cmdline") // '';
    $s =~ s/\0+$//;
    $s =~ s/\0/ /g;
    return qemu_title($pid) // $s if $s =~ m{^\S*qemu[^ ]*[-/]};
    return $s;
}

# Under qemu-user (an arm64 nginx on this machine) the host shows qemu's
# command line, not the title nginx writes over its own: the title is
# taken from the process's threads (a profiler process runs prof-*
# threads) and its place in the tree (a master's child is a worker: cache
# helpers cannot be told apart); undef for another program.
my $qemu_nginx = qr{qemu[^\0]*\0\S*nginx\b};

sub qemu_title {
    my ($pid) = @_;
    return undef unless under_qemu($pid);
    my $ppid = _parent($pid) // return undef;
    return "nginx: profiler of worker $ppid"
        if grep { /^prof-/ } thread_names($pid);
    return under_qemu($ppid) ? 'nginx: worker process'
                             : 'nginx: master process';
}

# Whether a process is nginx run by qemu-user.
sub under_qemu {
    my ($pid) = @_;
    return (slurp("/proc/$pid/cmdline") // '') =~ $qemu_nginx;
}

sub _parent {
    my ($pid) = @_;
    my $st = slurp("/proc/$pid/stat") // return undef;
    return $st =~ /\) \S+ (\d+)/ ? $1 : undef;
}

# /proc/PID[/task/TID]/status as a hash.
sub proc_status {
    my ($pid, $tid) = @_;
    my $path = defined $tid ? "/proc/$pid/task/$tid/status"
                            : "/proc/$pid/status";
    my $s = slurp($path) // return undef;
    my %h;
    for (split /\n/, $s) {
        $h{$1} = $2 if /^([^:]+):\s*(.*)$/;
    }
    return \%h;
}

# The real uid of a process.
sub proc_uid {
    my ($pid) = @_;
    my $st = proc_status($pid) or return undef;
    return (split /\s+/, $st->{Uid})[0];
}

# Resident memory of a process (VmRSS), in kB; undef when it is gone.
sub rss_kb {
    my ($pid) = @_;
    my $st = proc_status($pid) or return undef;
    return ($st->{VmRSS} // '') =~ /^(\d+)/ ? $1 : undef;
}

# Proportional set size of a process (smaps_rollup's Pss: each page
# divided by the processes that map it), in kB; undef when it is gone.
sub pss_kb {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/smaps_rollup") // return undef;
    return $s =~ /^Pss:\s+(\d+)/m ? $1 : undef;
}

# The mappings of a process from its smaps, largest Pss first: [{ start,
# perm, name ("[anon]" for an anonymous one), size, rss, pss }], in kB.
sub pss_mappings {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/smaps") // return ();
    my (@maps, $m);
    for (split /\n/, $s) {
        if (/^([0-9a-f]+)-([0-9a-f]+)\s+(\S+)\s+\S+\s+\S+\s+\d+\s*(.*)$/) {
            # Page counts: hex() of a 48-bit address warns on 32 bits.
            no warnings 'portable';
            $m = { start => $1, perm => $3, name => $4 eq '' ? '[anon]' : $4,
                   size => (hex($2) - hex($1)) / 1024, rss => 0, pss => 0 };
            push @maps, $m;
        } elsif ($m && /^(Rss|Pss):\s+(\d+)/) {
            $m->{ lc $1 } = $2;
        }
    }
    return sort { $b->{pss} <=> $a->{pss} } @maps;
}

# A process's threads; under qemu-user, not qemu's own (its RCU thread,
# the second it starts in every process, before any of the program's).
sub thread_ids {
    my ($pid) = @_;
    opendir(my $dh, "/proc/$pid/task") or return ();
    my @t = sort { $a <=> $b } grep { /^\d+$/ } readdir($dh);
    closedir($dh);
    splice(@t, 1, 1) if @t > 1 && under_qemu($pid);
    return @t;
}

sub thread_count { scalar(thread_ids($_[0])) }

# The name (/proc/.../comm) of a thread, or undef.
sub _thread_name {
    my ($pid, $tid) = @_;
    my $comm = slurp("/proc/$pid/task/$tid/comm") // return undef;
    chomp $comm;
    return $comm;
}

# The names of a process's threads, in the order of their ids.
sub thread_names {
    my ($pid) = @_;
    return map { _thread_name($pid, $_) // () } thread_ids($pid);
}

# The id of a process's thread of that name (/proc/.../comm), or undef.
sub thread_named {
    my ($pid, $name) = @_;
    for my $tid (thread_ids($pid)) {
        my $comm = _thread_name($pid, $tid) // next;
        return $tid if $comm eq $name;
    }
    return undef;
}

# CPU time a thread used, in ns: schedstat's first field (the scheduler's
# sum_exec_runtime, what the thread's CPU clock reads), else utime + stime
# from stat in clock ticks.
sub thread_cpu_ns {
    my ($pid, $tid) = @_;
    $tid //= $pid;

    my $s = slurp("/proc/$pid/task/$tid/schedstat");
    if (defined $s && $s =~ /^(\d+)\s/) {
        return $1;
    }

    return stat_cpu_ns($pid, $tid);
}

# CPU time of a worker's threads by name, in ns: { main => ns, <thread
# name> => ns (summed over the threads of that name) }, its profiler
# process's too: its threads prof-sampler and prof-loop, its main thread
# as prof-main.
sub cpu_ns_by_thread {
    my ($pid) = @_;
    my %cpu;
    my $profiler = profiler_of($pid);
    for my $p ($pid, $profiler // ()) {
        for my $tid (thread_ids($p)) {
            my $ns = thread_cpu_ns($p, $tid) // next;
            my $name = $tid == $pid ? 'main'
                     : defined $profiler && $tid == $profiler ? 'prof-main'
                     : _thread_name($p, $tid) // '?';
            $cpu{$name} += $ns;
        }
    }
    return \%cpu;
}

# CPU time of every thread of a process (and of its profiler process, for
# a worker), in ns.
sub process_cpu_ns {
    my ($pid) = @_;
    return sum(0, values %{ cpu_ns_by_thread($pid) });
}

# The descriptors of $pid that are listening TCP sockets (by inode, from
# /proc/net/tcp and tcp6).
sub listening_sockets_held {
    my ($pid) = @_;
    my %listening;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        my $s = slurp($f) // next;
        for (split /\n/, $s) {
            my @c = split;
            $listening{ $c[9] } = 1 if @c > 9 && $c[3] eq '0A';
        }
    }
    my @held;
    opendir(my $dh, "/proc/$pid/fd") or return ();
    for my $fd (sort { $a <=> $b } grep { /^\d+$/ } readdir($dh)) {
        my $l = readlink("/proc/$pid/fd/$fd") // next;
        push @held, $fd if $l =~ /^socket:\[(\d+)\]/ && $listening{$1};
    }
    closedir($dh);
    return @held;
}

# The profiler process a worker (or single process) forked, or undef.
sub profiler_of {
    my ($pid) = @_;
    for my $c (children_of($pid)) {
        return $c if proc_cmdline($c) =~ /^nginx: profiler of worker $pid\b/;
    }
    return undef;
}

# The profiler process of a worker once it runs its threads (it has then
# closed what it inherited), or undef.
sub profiler_ready {
    my ($pid) = @_;
    my $p = profiler_of($pid) // return undef;
    return thread_named($p, 'prof-loop') && thread_named($p, 'prof-sampler')
           ? $p : undef;
}

1;
