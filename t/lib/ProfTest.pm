# SPDX-License-Identifier: BSD-2-Clause
package ProfTest;

# A small harness for the profiling module's integration tests, in the
# spirit of Test::Nginx: each test writes an http block, starts nginx in a
# temporary prefix with the built modules loaded, talks to it, and reads the
# profiles it writes -- decoded independently of the module, with protoc.
#
#   my $t = ProfTest->new(workers => 1);
#   $t->write_config(<<'EOF');
#       profiling on;
#       profiling_dump_dir %%DUMP%%;
#       server {
#           listen 127.0.0.1:%%PORT%%;
#           location /burn { profiling_burn 20ms; }
#       }
#   EOF
#   $t->run;
#   my ($worker) = $t->worker_pids;
#   $t->get('/burn');
#   my ($file) = $t->wait_for_files(qr/^nginx\.$worker\.1\.pprof$/);
#   my $p = decode_profile($file);
#   $t->stop;
#
# run() returns once the port answers and every worker has set its title
# ("worker process"), which nginx does after the modules' init_process:
# by then a worker's profiler threads exist.
#
# Hermetic: the DD_* variables the module reads for its defaults (service,
# env, tags, agent address) are removed from the environment nginx starts
# with, and "profiling_agent_url off;" is added to the http block unless it
# sets profiling_agent_url itself (or new(agent_url => undef)): profiles go
# to the dump dir only, whatever listens on the machine.
#
# Placeholders in the http block: %%PORT%% (a free loopback port),
# %%PREFIX%% (the temporary prefix), %%DUMP%% (%%PREFIX%%/dump, created,
# writable by the workers' user).
#
# Every nginx started here is killed in an END block if a test leaves it
# running (a failed test, a die). Waits poll a condition until a deadline.

use strict;
use warnings;

use Carp qw(croak);
use Cwd ();
use Exporter qw(import);
use File::Basename qw(dirname);
use File::Spec;
use File::Temp qw(tempdir);
use HTTP::Tiny;
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(
    wait_until poll_sleep
    process_alive children_of proc_cmdline proc_uid proc_status
    thread_ids thread_count thread_named thread_cpu_ns profiler_of
    profiler_ready listening_sockets_held
    decode_profile decode_profile_text
    pstr sample_types value_index profile_total leaf_totals
    function_names sample_labels leaf_function
    profile_files
);


delete $ENV{$_} for grep { /^DD_/ } keys %ENV;


# Where things are: t/ is the parent of this file's directory.

my $T_DIR = File::Spec->rel2abs(dirname(dirname(__FILE__)));
my $TOP_DIR = dirname($T_DIR);

sub t_dir      { $T_DIR }
sub proto_dir { File::Spec->catdir($TOP_DIR, 'shared', 'profiler') }

sub build_dir {
    my $b = $ENV{PROFILING_BUILD};
    $b = File::Spec->catdir($T_DIR, '..', 'build') unless defined $b
                                                         && length $b;
    return File::Spec->rel2abs($b);
}

sub nginx_binary { $ENV{PROFILING_NGINX} || '/usr/sbin/nginx' }

# Whether nginx_binary() is a wrapper script (t/sanitizer-nginx) rather
# than nginx itself.
sub nginx_wrapped {
    open(my $fh, '<', nginx_binary()) or return 0;
    my $magic = '';
    read($fh, $magic, 2);
    return $magic eq '#!';
}

# The nginx binary that runs (under a wrapper, the one it runs:
# $PROFILING_NGINX_REAL, as t/sanitizer-nginx reads it).
sub nginx_real {
    return nginx_binary() unless nginx_wrapped();
    return $ENV{PROFILING_NGINX_REAL} || '/usr/sbin/nginx';
}

# What nginx -V says of the nginx under test (version, configure
# arguments, modules built in).
my $NGINX_V;
sub nginx_v {
    $NGINX_V //= (_run_capture(nginx_binary(), '-V'))[1];
    return $NGINX_V;
}

# Its version as nginx_version is in C (1.25.1: 1025001); OpenResty's
# first three numbers are its nginx's.
sub nginx_version {
    my ($maj, $min, $pat) = nginx_version_string() =~ /^(\d+)\.(\d+)\.(\d+)$/
        or croak "no version in nginx -V: " . nginx_v();
    return $maj * 1000000 + $min * 1000 + $pat;
}

# Its version as the module reports it (NGINX_VERSION: "1.25.3").
sub nginx_version_string {
    my ($v) = nginx_v() =~ m{(?:nginx|openresty)/(\d+\.\d+\.\d+)};
    return $v // '';
}

# OpenResty's Lua libraries (lua-resty-core, which its lua module loads
# at start): the http directive that finds them, for an nginx with lua
# built in; '' for any other.
sub lua_package_path_directive {
    return '' unless nginx_has('lua-nginx-module') || nginx_has('ngx_lua');
    my ($prefix) = nginx_v() =~ /--prefix=(\S+)/;
    return '' unless defined $prefix && -d "$prefix/lualib";
    return "    lua_package_path \"$prefix/lualib/?.lua;;\";\n";
}

# Whether it was configured with $arg (e.g. "--with-http_v3_module", or
# a module added: "lua-nginx-module").
sub nginx_has {
    my ($arg) = @_;
    my ($args) = nginx_v() =~ /^configure arguments: (.*)$/m;
    return defined $args && index($args, $arg) >= 0;
}

# A module built by the tests, or any module by its path.
sub module_path {
    my ($name) = @_;
    return $name if $name =~ m{/};
    return File::Spec->catfile(build_dir(), 'test', "$name.so");
}

# The nginx-datadog module (../shared/fixtures, or PROFILING_DATADOG_MODULE):
# the fixture is built for Debian's nginx, undef for another.
sub datadog_module {
    my $m = $ENV{PROFILING_DATADOG_MODULE};
    unless (defined $m && length $m) {
        return undef
            unless (Cwd::realpath(nginx_real()) // '') eq '/usr/sbin/nginx';
        $m = File::Spec->catfile(dirname($TOP_DIR), 'shared', 'fixtures',
                                 'nginx-datadog',
                                 'ngx_http_datadog_module.so');
    }
    return -f $m ? $m : undef;
}


# Waiting: a condition polled until a deadline.

# Polls $cond every $step seconds (default 20 ms) until it returns true or
# $timeout seconds pass; returns the condition's last value.
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


# /proc helpers.

sub _slurp {
    my ($path) = @_;
    open(my $fh, '<', $path) or return undef;
    local $/;
    my $s = <$fh>;
    close($fh);
    return $s;
}

# Fields of /proc/PID[/task/TID]/stat after the command name: index 0 is
# the state (field 3 of proc(5)), 1 the ppid, 11 utime, 12 stime.
sub _stat_fields {
    my ($path) = @_;
    my $s = _slurp($path);
    return () unless defined $s;
    $s =~ s/^.*\)\s+//s or return ();
    return split(/\s+/, $s);
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
    my $s = _slurp("/proc/$pid/cmdline") // '';
    $s =~ s/\0+$//;
    $s =~ s/\0/ /g;
    return $s;
}

# /proc/PID[/task/TID]/status as a hash.
sub proc_status {
    my ($pid, $tid) = @_;
    my $path = defined $tid ? "/proc/$pid/task/$tid/status"
                            : "/proc/$pid/status";
    my $s = _slurp($path) // return undef;
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

sub thread_ids {
    my ($pid) = @_;
    opendir(my $dh, "/proc/$pid/task") or return ();
    my @t = sort { $a <=> $b } grep { /^\d+$/ } readdir($dh);
    closedir($dh);
    return @t;
}

sub thread_count { scalar(thread_ids($_[0])) }

# The descriptors of $pid that are listening TCP sockets (by inode, from
# /proc/net/tcp and tcp6).
sub listening_sockets_held {
    my ($pid) = @_;
    my %listening;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        my $s = _slurp($f) // next;
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

# The profiler process of a worker once it runs its threads (it has then
# closed what it inherited), or undef.
sub profiler_ready {
    my ($pid) = @_;
    my $p = profiler_of($pid) // return undef;
    return thread_named($p, 'prof-loop') && thread_named($p, 'prof-sampler')
           ? $p : undef;
}

# The profiler process a worker (or single process) forked, or undef.
sub profiler_of {
    my ($pid) = @_;
    for my $c (children_of($pid)) {
        return $c if proc_cmdline($c) =~ /^nginx: profiler of worker $pid\b/;
    }
    return undef;
}

# The id of a process's thread of that name (/proc/.../comm), or undef.
sub thread_named {
    my ($pid, $name) = @_;
    for my $tid (thread_ids($pid)) {
        my $comm = _slurp("/proc/$pid/task/$tid/comm") // next;
        chomp $comm;
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

    my $s = _slurp("/proc/$pid/task/$tid/schedstat");
    if (defined $s && $s =~ /^(\d+)\s/) {
        return $1;
    }

    my @f = _stat_fields("/proc/$pid/task/$tid/stat");
    return undef unless @f;
    my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
    return ($f[11] + $f[12]) * 1e9 / $hz;
}


# Profile files: name => path for files of a dump dir matching a regex.
sub profile_files {
    my ($dir, $re) = @_;
    opendir(my $dh, $dir) or return ();
    my @f = grep { $_ =~ $re } readdir($dh);
    closedir($dh);
    # by sequence number when the name has one
    return map { "$dir/$_" } sort {
        my ($x) = $a =~ /\.(\d+)\.pprof$/;
        my ($y) = $b =~ /\.(\d+)\.pprof$/;
        ($x // 0) <=> ($y // 0) or $a cmp $b
    } @f;
}


# An nginx instance.

my %RUNNING;    # master (or single process) pid => instance, for END
my %SEEN;       # every nginx child pid seen, for END

sub new {
    my ($class, %opts) = @_;

    for my $m (@{ $opts{modules} // [qw(ngx_http_profiling_module
                                          ngx_http_profiling_burn_module)] })
    {
        my $path = module_path($m);
        BAIL_OUT("$path is missing: run make test-modules "
                 . "(PROFILING_BUILD=" . build_dir() . ")") unless -f $path;
    }

    my $prefix = tempdir('proftest-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    # The workers (user nobody) reach the dump dir through the prefix.
    chmod(0755, $prefix);

    my $self = bless {
        prefix         => $prefix,
        workers        => $opts{workers} // 1,
        user           => exists $opts{user} ? $opts{user} : 'nobody',
        master_process => $opts{master_process} // 1,
        daemon         => $opts{daemon} // 1,
        main           => $opts{main} // '',
        modules        => $opts{modules}
                          // [qw(ngx_http_profiling_module
                                 ngx_http_profiling_burn_module)],
        port           => $opts{port} // free_port(),
        agent_url      => exists $opts{agent_url} ? $opts{agent_url} : 'off',
    }, $class;

    $self->{dump} = "$prefix/dump";
    unless ($opts{no_dump_dir}) {
        mkdir($self->{dump}) or croak "mkdir $self->{dump}: $!";
        $self->chown_to_user($self->{dump});
    }

    return $self;
}

sub prefix   { $_[0]{prefix} }
sub port     { $_[0]{port} }
sub dump_dir { $_[0]{dump} }
sub conf     { "$_[0]{prefix}/nginx.conf" }
sub pid_file { "$_[0]{prefix}/nginx.pid" }
sub error_log_path { "$_[0]{prefix}/error.log" }

sub error_log {
    my ($self) = @_;
    return _slurp($self->error_log_path) // '';
}

# uid and gid of the workers' user (undef: nginx runs as we do).
sub user_ids {
    my ($self) = @_;
    return () unless defined $self->{user} && $> == 0;
    my @pw = getpwnam($self->{user}) or croak "no user $self->{user}";
    return ($pw[2], $pw[3]);
}

sub chown_to_user {
    my ($self, $path) = @_;
    my ($uid, $gid) = $self->user_ids;
    chown($uid, $gid, $path) if defined $uid;
}

# A port nothing listens on, never one given before in this process: the
# kernel may hand the same free port to two calls in a row (a test's
# nginx and its backend would then share it).
my %PORTS_GIVEN;

sub free_port {
    for (1 .. 100) {
        my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                      LocalPort => 0, Proto => 'tcp',
                                      ReuseAddr => 1)
            or croak "no free port: $!";
        my $port = $s->sockport;
        close($s);
        return $port unless $PORTS_GIVEN{$port}++;
    }
    croak "no free port not given before";
}

sub _expand {
    my ($self, $text) = @_;
    $text =~ s/%%PORT%%/$self->{port}/g;
    $text =~ s/%%PREFIX%%/$self->{prefix}/g;
    $text =~ s/%%DUMP%%/$self->{dump}/g;
    return $text;
}

# Writes nginx.conf: the main context (modules, pid, error log, processes),
# then the given http block body, with temporary paths in the prefix.
sub write_config {
    my ($self, $http, %opts) = @_;
    my $p = $self->{prefix};

    my $conf = '';
    $conf .= "load_module " . module_path($_) . ";\n"
        for @{ $self->{modules} };

    my ($uid) = $self->user_ids;
    if (defined $uid) {
        my $group = getgrgid((getpwnam($self->{user}))[3]);
        $conf .= "user $self->{user} $group;\n";
    }

    $conf .= "pid $p/nginx.pid;\n"
           . "lock_file $p/nginx.lock;\n"
           . "error_log $p/error.log info;\n"
           . "daemon " . ($self->{daemon} ? 'on' : 'off') . ";\n"
           . "master_process " . ($self->{master_process} ? 'on' : 'off')
           . ";\n"
           . "worker_processes $self->{workers};\n"
           . $self->_expand($opts{main} // $self->{main}) . "\n"
           . "events {\n    worker_connections 256;\n}\n\n"
           . "http {\n"
           . "    access_log off;\n"
           . "    client_body_temp_path $p/client_body_temp;\n"
           . "    proxy_temp_path $p/proxy_temp;\n"
           . "    fastcgi_temp_path $p/fastcgi_temp;\n"
           . "    uwsgi_temp_path $p/uwsgi_temp;\n"
           . "    scgi_temp_path $p/scgi_temp;\n"
           . (defined $self->{agent_url}
              && grep({ $_ eq 'ngx_http_profiling_module' }
                      @{ $self->{modules} })
              && $http !~ /\bprofiling_agent_url\b/
              ? "    profiling_agent_url $self->{agent_url};\n" : '')
           . ($http =~ /\blua_package_path\b/
              ? '' : lua_package_path_directive())
           . "\n"
           . $self->_expand($http)
           . "\n}\n";

    open(my $fh, '>', $self->conf) or croak "write " . $self->conf . ": $!";
    print $fh $conf;
    close($fh);

    $self->{config_text} = $conf;
    return $self;
}

sub config_text { $_[0]{config_text} }

sub _nginx_cmd {
    my ($self, @args) = @_;
    return (nginx_binary(), '-p', "$self->{prefix}/", '-c', $self->conf,
            '-e', $self->error_log_path, @args);
}

sub _run_capture {
    my (@cmd) = @_;
    my $pid = open(my $fh, '-|');
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open(STDERR, '>&', \*STDOUT);
        exec(@cmd) or POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh> // '';
    close($fh);
    return ($? >> 8, $out);
}

# nginx -t: (exit status, output).
sub test_config {
    my ($self) = @_;
    return _run_capture($self->_nginx_cmd('-t'));
}

sub _port_answers {
    my ($self) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $self->{port},
                                  Proto => 'tcp', Timeout => 1);
    return 0 unless $s;
    close($s);
    return 1;
}

# Starts nginx; returns once the port answers and, with a master, the
# configured number of workers runs. Dies when nginx does not start.
sub run {
    my ($self, %opts) = @_;
    my $timeout = $opts{timeout} // 10;

    croak "already running" if $self->{master};
    unlink($self->pid_file);

    if ($self->{daemon}) {
        my ($rc, $out) = _run_capture($self->_nginx_cmd());
        croak "nginx failed to start (exit $rc): $out\n"
              . $self->error_log if $rc != 0;

        my $pid = wait_until(sub {
            my $s = _slurp($self->pid_file);
            return $s && $s =~ /^(\d+)/ ? $1 : 0;
        }, $timeout);
        croak "no pid file\n" . $self->error_log unless $pid;
        $self->{master} = $pid;

    } else {
        my $pid = fork();
        croak "fork: $!" unless defined $pid;
        if ($pid == 0) {
            open(STDOUT, '>', "$self->{prefix}/stdout.log");
            open(STDERR, '>&', \*STDOUT);
            exec($self->_nginx_cmd()) or POSIX::_exit(127);
        }
        $self->{master} = $pid;
        $self->{foreground} = 1;
    }

    $RUNNING{ $self->{master} } = $self;

    my $ok = wait_until(sub {
        $self->_reap;
        return -1 unless process_alive($self->{master});
        return 0 unless $self->_port_answers;
        return 1 unless $self->{master_process};
        return scalar($self->worker_pids) >= $self->{workers};
    }, $timeout);

    if (!$ok || $ok == -1) {
        my $log = $self->error_log;
        $self->kill_all;
        croak "nginx did not come up on port $self->{port}\n$log";
    }

    return $self;
}

*start = \&run;

sub _reap {
    my ($self) = @_;
    return unless $self->{foreground} && $self->{master};
    my $r = waitpid($self->{master}, WNOHANG);
    if ($r == $self->{master}) {
        $self->{exit_status} = $?;
        $self->{reaped} = 1;
    }
}

sub master_pid { $_[0]{master} }

# With a master: its children running "worker process"; without: nginx.
sub worker_pids {
    my ($self) = @_;
    return () unless $self->{master};
    return ($self->{master}) unless $self->{master_process};
    my @w = grep { proc_cmdline($_) =~ /worker process/ }
            $self->children_pids;
    return @w;
}

sub children_pids {
    my ($self) = @_;
    return () unless $self->{master};
    my @c = children_of($self->{master});
    $SEEN{$_} = 1 for @c;
    return @c;
}

# The master's children and theirs (the workers' profiler processes).
sub family_pids {
    my ($self) = @_;
    my @c = $self->children_pids;
    my @g = map { children_of($_) } @c;
    $SEEN{$_} = 1 for @g;
    return (@c, @g);
}

# Sends a signal to the master through nginx -s (quit, reload, ...), or
# directly for a single process in the foreground.
sub signal {
    my ($self, $sig) = @_;
    croak "not running" unless $self->{master};

    if ($self->{foreground}) {
        my %map = (quit => 'QUIT', stop => 'TERM', reload => 'HUP',
                   reopen => 'USR1');
        kill($map{$sig} // $sig, $self->{master});
        return (0, '');
    }

    my ($rc, $out) = _run_capture($self->_nginx_cmd('-s', $sig));
    croak "nginx -s $sig failed (exit $rc): $out" if $rc != 0;
    return ($rc, $out);
}

sub reload { $_[0]->signal('reload') }

# Graceful stop: quit, then waits until the master (and its workers) are
# gone. Returns true when they went within the timeout.
sub stop {
    my ($self, %opts) = @_;
    my $timeout = $opts{timeout} // 20;
    return 1 unless $self->{master};

    # The workers' profiler processes finish the last profiles after them.
    my @kids = $self->family_pids;
    $self->signal('quit');

    my $gone = wait_until(sub {
        $self->_reap;
        return !process_alive($self->{master})
               && !grep { process_alive($_) } @kids;
    }, $timeout);

    if ($gone) {
        delete $RUNNING{ $self->{master} };
        $self->{last_master} = delete $self->{master};
        delete $self->{foreground};
        return 1;
    }

    diag("nginx did not quit within ${timeout}s, killing it");
    $self->kill_all;
    return 0;
}

sub exit_status { $_[0]{exit_status} }

# SIGKILL to the master and every nginx child of it or seen before.
sub kill_all {
    my ($self) = @_;
    my $m = $self->{master} or return;

    my @pids = ($m, children_of($m));
    push @pids, map { children_of($_) } @pids[1 .. $#pids];
    kill('KILL', @pids);
    wait_until(sub { !grep { process_alive($_) } @pids }, 5);
    $self->_reap;

    delete $RUNNING{$m};
    $self->{last_master} = delete $self->{master};
    delete $self->{foreground};
}

END {
    my $status = $?;
    for my $t (values %RUNNING) {
        $t->kill_all;
    }
    # workers left over by a killed master (e.g. old workers of a reload)
    for my $pid (keys %SEEN) {
        next unless process_alive($pid);
        next unless proc_cmdline($pid) =~ /^nginx: /;
        kill('KILL', $pid);
    }
    $? = $status;
}


# HTTP.

sub http {
    my ($self) = @_;
    $self->{http} //= HTTP::Tiny->new(timeout => 30, keep_alive => 1);
    return $self->{http};
}

# GET $path: the HTTP::Tiny response hash.
sub get {
    my ($self, $path) = @_;
    return $self->http->get("http://127.0.0.1:$self->{port}$path");
}

# Sends requests to $path for $seconds: each request followed by a pause of
# $pause seconds (0: back to back). Returns the number of 200 answers; with
# $intervals (an array ref), pushes [start, end] (epoch seconds) of each.
sub drive {
    my ($self, $path, $seconds, $pause, $intervals) = @_;
    my $end = time() + $seconds;
    my $ok = 0;
    while (time() < $end) {
        my $start = time();
        my $r = $self->get($path);
        push @$intervals, [ $start, time() ] if $intervals;
        $ok++ if $r->{status} == 200;
        poll_sleep($pause) if $pause;
    }
    return $ok;
}

# Seconds of [$from, $to] covered by the intervals (disjoint, in order).
sub covered {
    my ($intervals, $from, $to) = @_;
    my $sum = 0;
    for my $i (@$intervals) {
        my $s = $i->[0] > $from ? $i->[0] : $from;
        my $e = $i->[1] < $to ? $i->[1] : $to;
        $sum += $e - $s if $e > $s;
    }
    return $sum;
}


# Files in the dump dir matching $re: waits until there are at least $n
# of them (default 1); returns their paths, or () at the timeout.
sub wait_for_files {
    my ($self, $re, $n, $timeout, $dir) = @_;
    $n //= 1;
    $dir //= $self->{dump};
    my @f;
    wait_until(sub { @f = profile_files($dir, $re); @f >= $n },
               $timeout // 10);
    return @f >= $n ? @f : ();
}


# Profiles: decoded with protoc into a Perl structure.

my %ESCAPES = (n => "\n", r => "\r", t => "\t", a => "\a", b => "\b",
               f => "\f", v => "\x0b");

sub _unescape {
    my ($oct, $hex, $c) = @_;
    return chr(oct($oct)) if defined $oct;
    return chr(hex($hex)) if defined $hex;
    return $ESCAPES{$c} // $c;
}

# Numbers, strings (C-escaped, as protoc prints them), and enum names.
sub _text_value {
    my ($v) = @_;
    if ($v =~ /^"(.*)"$/s) {
        my $s = $1;
        $s =~ s{\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))}
               {_unescape($1, $2, $3)}ges;
        return $s;
    }
    return $v eq 'true' ? 1 : $v eq 'false' ? 0 : $v;
}

my %REPEATED = map { $_ => 1 } qw(
    sample_type sample mapping location function string_table comment
    location_id value label line
);

# protoc's text format into nested hashes: repeated fields are arrays
# (possibly empty), scalars plain values.
sub decode_profile_text {
    my ($text) = @_;
    my $root = {};
    my @stack = ($root);

    for my $line (split /\n/, $text) {
        next if $line =~ /^\s*$/;
        if ($line =~ /^\s*(\w+)\s*\{\s*$/) {
            my $m = {};
            _add($stack[-1], $1, $m);
            push @stack, $m;
        } elsif ($line =~ /^\s*\}\s*$/) {
            pop @stack;
            croak "unbalanced protoc output" unless @stack;
        } elsif ($line =~ /^\s*(\w+):\s*(.*?)\s*$/) {
            _add($stack[-1], $1, _text_value($2));
        } else {
            croak "cannot parse protoc output line: $line";
        }
    }

    croak "unbalanced protoc output" unless @stack == 1;

    $root->{$_} //= [] for qw(sample_type sample mapping location function
                              string_table comment);
    $root->{$_} //= 0 for qw(drop_frames keep_frames time_nanos
                             duration_nanos period default_sample_type);
    for my $s (@{ $root->{sample} }) {
        $s->{$_} //= [] for qw(location_id value label);
        $_->{str} //= 0, $_->{num} //= 0 for @{ $s->{label} };
    }
    for my $l (@{ $root->{location} }) {
        $l->{line} //= [];
        $l->{$_} //= 0 for qw(mapping_id address);
    }
    for my $x (@{ $root->{mapping} }, @{ $root->{function} },
               @{ $root->{sample_type} },
               ($root->{period_type} ? $root->{period_type} : ()))
    {
        $x->{$_} //= 0 for qw(filename build_id name type unit);
    }

    return $root;
}

sub _add {
    my ($h, $k, $v) = @_;
    if ($REPEATED{$k}) {
        push @{ $h->{$k} }, $v;
    } else {
        $h->{$k} = $v;
    }
}

# Decodes a gzipped pprof file. Returns the structure, or dies with the
# reason (not gzip, not a Profile).
sub decode_profile {
    my ($file) = @_;

    my $tmp = File::Temp->new(TEMPLATE => 'profile-XXXXXX', TMPDIR => 1);
    my $raw = $tmp->filename;

    my ($rc, $out) = _run_capture('sh', '-c', 'gzip -dc "$1" > "$2"',
                                  'sh', $file, $raw);
    croak "gzip -dc $file failed (exit $rc): $out" if $rc != 0;

    ($rc, $out) = _run_capture('sh', '-c',
        'protoc --decode=perftools.profiles.Profile -I "$1" profile.proto'
        . ' < "$2"', 'sh', proto_dir(), $raw);
    croak "protoc --decode $file failed (exit $rc): $out" if $rc != 0;

    my $p = decode_profile_text($out);
    $p->{file} = $file;
    return $p;
}

# A string of the profile's string table.
sub pstr {
    my ($p, $i) = @_;
    return $p->{string_table}[$i // 0] // '';
}

# "type/unit" of every sample type, in order.
sub sample_types {
    my ($p) = @_;
    return map { pstr($p, $_->{type}) . '/' . pstr($p, $_->{unit}) }
           @{ $p->{sample_type} };
}

# Index of the sample type named $type in each sample's values.
sub value_index {
    my ($p, $type) = @_;
    my $i = 0;
    for my $st (@{ $p->{sample_type} }) {
        return $i if pstr($p, $st->{type}) eq $type;
        $i++;
    }
    croak "no sample type $type in $p->{file}";
}

# Sum of a sample type over all samples.
sub profile_total {
    my ($p, $type) = @_;
    my $i = value_index($p, $type);
    my $sum = 0;
    $sum += $_->{value}[$i] // 0 for @{ $p->{sample} };
    return $sum;
}

sub _index {
    my ($p) = @_;
    $p->{_loc} //= { map { $_->{id} => $_ } @{ $p->{location} } };
    $p->{_fn}  //= { map { $_->{id} => $_ } @{ $p->{function} } };
}

# Names of the functions of a location, innermost (inlined) first; a
# location without a function is named by its address.
sub function_names {
    my ($p, $location_id) = @_;
    _index($p);
    my $loc = $p->{_loc}{$location_id};
    return ("[unknown location $location_id]") unless $loc;
    my @names = map {
        my $f = $p->{_fn}{ $_->{function_id} // 0 };
        $f ? pstr($p, $f->{name}) : '[unknown function]'
    } @{ $loc->{line} };
    return @names ? @names : (sprintf('0x%x', $loc->{address}));
}

# The Lua frames of a location (functions with a file: what the module
# writes for Lua), each { name, file, start_line, line }.
sub lua_frames_of {
    my ($p, $location_id) = @_;
    _index($p);
    my $loc = $p->{_loc}{$location_id} or return ();
    my @out;
    for my $l (@{ $loc->{line} }) {
        my $f = $p->{_fn}{ $l->{function_id} // 0 } or next;
        next unless $f->{filename};
        # A Line's line: a list, as the decoder makes every "line" field.
        my $line = ref $l->{line} ? $l->{line}[0] : $l->{line};
        push @out, { name => pstr($p, $f->{name}),
                     file => pstr($p, $f->{filename}),
                     start_line => $f->{start_line} // 0,
                     line => $line // 0 };
    }
    return @out;
}

# The leaf function of a sample.
sub leaf_function {
    my ($p, $s) = @_;
    my $id = $s->{location_id}[0];
    return '[no stack]' unless defined $id;
    return (function_names($p, $id))[0];
}

# { leaf function name => sum of $type }.
sub leaf_totals {
    my ($p, $type) = @_;
    my $i = value_index($p, $type);
    my %t;
    for my $s (@{ $p->{sample} }) {
        $t{ leaf_function($p, $s) } += $s->{value}[$i] // 0;
    }
    return \%t;
}

# The labels of a sample: { key => { str => string or undef, num => n } }.
sub sample_labels {
    my ($p, $s) = @_;
    my %l;
    for my $lb (@{ $s->{label} }) {
        $l{ pstr($p, $lb->{key}) } = {
            str => $lb->{str} ? pstr($p, $lb->{str}) : undef,
            num => $lb->{num},
        };
    }
    return \%l;
}

1;


# Code hotspots (t/hotspots*.t): the request labels of samples, requests
# with trace headers, raw requests. Not exported: call them as ProfTest::x.

# A numeric label as the u64 it carries, in decimal (protoc prints int64
# labels signed); undef stays undef.
sub u64 {
    my ($n) = @_;
    return undef unless defined $n;
    return sprintf('%u', $n);
}

# A W3C traceparent with the given parent id (16 hex digits) and a trace id
# (32 hex digits, default a fixed one).
sub traceparent {
    my ($parent_hex, $trace_hex) = @_;
    $trace_hex //= '4bf92f3577b34da6a3ce929d0e0e4736';
    return "00-$trace_hex-$parent_hex-01";
}

# The hex parent id of a traceparent as a decimal u64.
sub hex_to_u64 {
    my ($hex) = @_;
    no warnings 'portable';
    $hex = substr($hex, -16) if length($hex) > 16;
    return sprintf('%u', hex($hex));
}

# Every .pprof file of a dump dir, decoded, in order of sequence number.
sub decode_dump_dir {
    my ($dir) = @_;
    return map { decode_profile($_) } profile_files($dir, qr/\.pprof$/);
}

# The samples of decoded profiles, flattened into hashes: cpu (ns),
# cpu_samples, wall (ns), span and root (u64 decimal strings or undef),
# endpoint (string or undef), thread (the "thread id" label), funcs (the
# function names of all its frames, leaf first), objects (the mapping file
# name of each frame), lua (its Lua frames, leaf first: lua_frames_of),
# lua_leaf (its leaf frame is a Lua one), leaf, and has_span_label /
# has_root_label / has_endpoint_label (whether the label is present at
# all).
sub hotspot_samples {
    my (@profiles) = @_;
    my @out;

    for my $p (@profiles) {
        _index($p);
        my %map = map { $_->{id} => pstr($p, $_->{filename}) }
                  @{ $p->{mapping} };
        my $icpu = value_index($p, 'cpu-time');
        my $icpus = value_index($p, 'cpu-samples');
        my $iwall = value_index($p, 'wall-time');

        for my $s (@{ $p->{sample} }) {
            my $l = sample_labels($p, $s);
            my (@funcs, @objects, @lua);
            for my $id (@{ $s->{location_id} }) {
                push @lua, lua_frames_of($p, $id);
                my @names = function_names($p, $id);
                push @funcs, @names;
                my $loc = $p->{_loc}{$id};
                my $mapping = ($loc && $loc->{mapping_id})
                              ? $map{ $loc->{mapping_id} } // '' : '';
                # One object a name: a location's inlined functions too.
                push @objects, ($mapping) x @names;
            }
            push @out, {
                cpu         => $s->{value}[$icpu] // 0,
                cpu_samples => $s->{value}[$icpus] // 0,
                wall        => $s->{value}[$iwall] // 0,
                span        => $l->{'span id'} ? u64($l->{'span id'}{num})
                                               : undef,
                root        => $l->{'local root span id'}
                               ? u64($l->{'local root span id'}{num}) : undef,
                endpoint    => $l->{'trace endpoint'}
                               ? $l->{'trace endpoint'}{str} : undef,
                thread      => $l->{'thread id'} ? $l->{'thread id'}{num}
                                                 : undef,
                has_span_label     => exists $l->{'span id'},
                has_root_label     => exists $l->{'local root span id'},
                has_endpoint_label => exists $l->{'trace endpoint'},
                funcs       => \@funcs,
                objects     => \@objects,
                lua         => \@lua,
                # Lua code itself running (no native frame above it).
                lua_leaf    => @{ $s->{location_id} }
                               && lua_frames_of($p, $s->{location_id}[0])
                               ? 1 : 0,
                leaf        => $funcs[0] // '[no stack]',
            };
        }
    }

    return @out;
}

# Whether a flattened sample's stack has a frame in function $name (a
# string: exact name; a regex: matched).
sub stack_has {
    my ($s, $name) = @_;
    return scalar grep { ref $name ? $_ =~ $name : $_ eq $name }
                       @{ $s->{funcs} };
}

# The burn samples (CPU time in ngx_http_profiling_burn_spin).
sub burn_samples {
    return grep { $_->{cpu} > 0
                  && stack_has($_, 'ngx_http_profiling_burn_spin') } @_;
}

# { key => sum of cpu } over flattened samples, the key given by $key_of
# (undef keys count as "-").
sub cpu_by {
    my ($key_of, @samples) = @_;
    my %h;
    $h{ $key_of->($_) // '-' } += $_->{cpu} for @samples;
    return \%h;
}

# "key 12ms, key 3ms" for diagnostics of a cpu_by hash.
sub format_cpu_by {
    my ($h) = @_;
    return join(', ', map { sprintf('%s %.0fms', $_, $h->{$_} / 1e6) }
                      sort { $h->{$b} <=> $h->{$a} } keys %$h) || 'none';
}

sub sum_cpu {
    my $sum = 0;
    $sum += $_->{cpu} for @_;
    return $sum;
}

# GET $path with extra headers (a hash ref), on a new HTTP::Tiny (no
# shared keep-alive connection unless $http is given).
sub get_with {
    my ($self, $path, $headers, $http) = @_;
    $http //= HTTP::Tiny->new(timeout => 30, keep_alive => 0);
    return $http->get("http://127.0.0.1:$self->{port}$path",
                      { headers => $headers // {} });
}

# Sends raw bytes on a new connection to $port and reads until the server
# closes it (or $timeout). Returns (status or undef, body, whole response).
sub raw_request {
    my ($port, $bytes, $timeout) = @_;
    $timeout //= 10;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => $timeout)
        or return (undef, '', '');
    binmode($s);
    syswrite($s, $bytes);

    my $resp = '';
    my $deadline = time() + $timeout;
    my $rin = '';
    vec($rin, fileno($s), 1) = 1;
    while (time() < $deadline) {
        my $r = select(my $rout = $rin, undef, undef, 0.1);
        next unless $r > 0;
        my $n = sysread($s, $resp, 65536, length $resp);
        last unless $n;
    }
    close($s);

    my ($status) = $resp =~ m{^HTTP/1\.[01] (\d{3})};
    my (undef, $body) = split /\r\n\r\n/, $resp, 2;
    return ($status, $body // '', $resp);
}

# Lines of a file (an access log), without newlines; () if it is missing.
sub file_lines {
    my ($path) = @_;
    my $s = _slurp($path);
    return () unless defined $s;
    return split /\n/, $s;
}

# Whether two optional values are equal (both undef, or the same string).
sub same_value {
    my ($x, $y) = @_;
    return !defined $x && !defined $y
           || defined $x && defined $y && $x eq $y;
}

# A test: of the burn CPU (ngx_http_profiling_burn_spin) of the flattened
# samples that $o{filter} selects, at least $o{share} (default 0.95) has
# span id $o{span} and root span id $o{root} (undef: without that label),
# and $o{endpoint} when given (exists with undef: without one); and there
# is at least $o{min_ns} (default 50ms) of it. Returns the test's result.
sub ok_burn_ids {
    my (%o) = @_;
    my $share = $o{share} // 0.95;
    my $min_ns = $o{min_ns} // 50_000_000;
    my @b = grep { $o{filter}->($_) } burn_samples(@{ $o{samples} });
    my $total = sum_cpu(@b);
    my @good = grep {
        same_value($_->{span}, $o{span}) && same_value($_->{root}, $o{root})
        && (!exists $o{endpoint}
            || same_value($_->{endpoint}, $o{endpoint}))
    } @b;
    my $got = $total ? sum_cpu(@good) / $total : 0;

    my $ok = ok($total >= $min_ns && $got >= $share,
        sprintf('%s: %.1f%% of %.0fms of burn cpu-time has span id %s, '
                . 'root span id %s%s', $o{name}, 100 * $got, $total / 1e6,
                $o{span} // 'none', $o{root} // 'none',
                exists $o{endpoint}
                ? ', endpoint ' . ($o{endpoint} // 'none') : ''));
    unless ($ok) {
        diag(sprintf('  (need at least %.0f%% of at least %.0fms)',
                     100 * $share, $min_ns / 1e6));
        diag('  burn cpu-time by span/root/endpoint: ' . format_cpu_by(
            cpu_by(sub { join(' / ', $_[0]{span} // '-', $_[0]{root} // '-',
                              $_[0]{endpoint} // '-') }, @b)));
    }
    return $ok;
}

# HTTP/2 without TLS (prior knowledge), just enough for the tests: sends
# every request as a stream of one connection at once (HEADERS with
# END_STREAM; header names lowercase), then reads until each stream ended.
# $requests: [ { path => ..., headers => [ name => value, ... ] } ].
# Returns one { status, body, error } per request, in order.
sub h2_requests {
    my ($port, $requests, $timeout) = @_;
    $timeout //= 20;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => $timeout)
        or croak "connect to $port: $!";
    binmode($s);

    my $frame = sub {
        my ($type, $flags, $stream, $payload) = @_;
        my $len = length $payload;
        return pack('C3 C C N', ($len >> 16) & 0xff, ($len >> 8) & 0xff,
                    $len & 0xff, $type, $flags, $stream) . $payload;
    };
    my $hpack_int = sub {          # a 7-bit prefix integer, H = 0
        my ($n) = @_;
        return chr($n) if $n < 127;
        my $out = chr(127);
        $n -= 127;
        while ($n >= 128) {
            $out .= chr(($n & 0x7f) | 0x80);
            $n >>= 7;
        }
        return $out . chr($n);
    };
    my $literal = sub {            # literal without indexing, new name
        my ($name, $value) = @_;
        return "\x00" . $hpack_int->(length $name) . $name
               . $hpack_int->(length $value) . $value;
    };

    my $out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" . $frame->(4, 0, 0, '');
    my (%by_stream, @results);
    my $id = 1;
    for my $req (@$requests) {
        my $block = $literal->(':method', $req->{method} // 'GET')
                  . $literal->(':scheme', 'http')
                  . $literal->(':authority', "127.0.0.1:$port")
                  . $literal->(':path', $req->{path});
        my @h = @{ $req->{headers} // [] };
        while (my ($k, $v) = splice(@h, 0, 2)) {
            $block .= $literal->(lc $k, $v);
        }
        # HEADERS, then CONTINUATION frames for what is past 16 KB.
        my @chunks = unpack('(a16384)*', $block);
        for my $i (0 .. $#chunks) {
            my $flags = ($i == 0 ? 0x1 : 0) | ($i == $#chunks ? 0x4 : 0);
            $out .= $frame->($i == 0 ? 1 : 9, $flags, $id, $chunks[$i]);
        }
        my $r = { status => undef, body => '', error => undef };
        push @results, $r;
        $by_stream{$id} = $r;
        $id += 2;
    }
    syswrite($s, $out) == length $out or croak "write: $!";

    my $in = '';
    my $open = scalar @results;
    my $deadline = time() + $timeout;
    my $rin = '';
    vec($rin, fileno($s), 1) = 1;

    while ($open > 0 && time() < $deadline) {
        my $n = select(my $rout = $rin, undef, undef, 0.1);
        next unless $n > 0;
        $n = sysread($s, $in, 65536, length $in);
        last unless $n;

        while (length($in) >= 9) {
            my ($l1, $l2, $l3, $type, $flags, $stream) =
                unpack('C3 C C N', $in);
            my $len = ($l1 << 16) | ($l2 << 8) | $l3;
            last if length($in) < 9 + $len;
            my $payload = substr($in, 9, $len);
            substr($in, 0, 9 + $len) = '';
            $stream &= 0x7fffffff;
            my $r = $by_stream{$stream};

            if ($type == 4 && $stream == 0 && !($flags & 1)) {
                syswrite($s, $frame->(4, 1, 0, ''));       # SETTINGS ack
            } elsif ($type == 6 && !($flags & 1)) {
                syswrite($s, $frame->(6, 1, 0, $payload)); # PING ack
            } elsif ($type == 7) {                          # GOAWAY
                for my $x (values %by_stream) {
                    $x->{error} //= 'GOAWAY' unless $x->{done};
                }
                $open = 0;
            } elsif ($r && $type == 1) {                    # HEADERS
                my $p = $payload;
                $p = substr($p, 1, length($p) - 1 - ord($p))
                    if $flags & 0x8;                        # PADDED
                $p = substr($p, 5) if $flags & 0x20;        # PRIORITY
                my $b = ord($p);
                my %indexed = (0x88 => 200, 0x89 => 204, 0x8a => 206,
                               0x8b => 304, 0x8c => 400, 0x8d => 404,
                               0x8e => 500);
                if ($indexed{$b}) {
                    $r->{status} //= $indexed{$b};
                } elsif (($b & 0xf0) == 0x40 || $b == 0x08 || $b == 0x00
                         || $b == 0x10)
                {
                    $r->{status} //= $1 if $p =~ /^.\x03(\d{3})/s;
                }
            } elsif ($r && $type == 0) {                    # DATA
                my $p = $payload;
                $p = substr($p, 1, length($p) - 1 - ord($p)) if $flags & 0x8;
                $r->{body} .= $p;
                if ($len > 0) {                             # flow control
                    my $inc = pack('N', $len);
                    syswrite($s, $frame->(8, 0, 0, $inc)
                                 . $frame->(8, 0, $stream, $inc));
                }
            } elsif ($r && $type == 3) {                    # RST_STREAM
                $r->{error} = 'RST_STREAM ' . unpack('N', $payload);
            }

            if ($r && !$r->{done}
                && (($type == 0 || $type == 1) && ($flags & 1)
                    || $type == 3))
            {
                $r->{done} = 1;
                $open--;
            }
        }
    }

    syswrite($s, $frame->(7, 0, 0, pack('N N', 0, 0)));
    close($s);

    for my $r (@results) {
        $r->{error} //= 'no end of stream' unless $r->{done};
    }
    return @results;
}

# Writes a text file of about $size bytes of pseudo-random words (the same
# every time), readable by the workers: gzip has work to do on it. Returns
# its content.
sub write_words_file {
    my ($self, $path, $size) = @_;
    my $x = 7;
    my $rand = sub { $x = ($x * 1103515245 + 12345) % 2147483648; $x };
    my @words = map {
        my $n = 2 + $rand->() % 8;
        join('', map { chr(97 + $rand->() % 26) } 1 .. $n)
    } 1 .. 5000;
    my @parts;
    my $len = 0;
    while ($len < $size) {
        my $w = $words[$rand->() % @words] . ($rand->() % 10 ? ' ' : "\n");
        push @parts, $w;
        $len += length $w;
    }
    my $text = join('', @parts);
    open(my $fh, '>', $path) or croak "write $path: $!";
    print $fh $text;
    close($fh);
    chmod(0644, $path);
    return $text;
}

# Adds directives to the events block of the nginx.conf write_config wrote
# (e.g. "accept_mutex on;").
sub add_events_directives {
    my ($self, $text) = @_;
    my $conf = _slurp($self->conf) // croak "no " . $self->conf;
    $conf =~ s/^(events \{\n)/$1    $text\n/m or croak "no events block";
    open(my $fh, '>', $self->conf) or croak "write " . $self->conf . ": $!";
    print $fh $conf;
    close($fh);
    $self->{config_text} = $conf;
    return $self;
}

1;


# Safety tests (t/safety-*.t): modules of Debian's nginx packages, load
# with wrk, workers that die, core files, an agent that never answers. Not
# exported: call them as ProfTest::x.

# A module of Debian's nginx packages (e.g. "ngx_http_lua_module"), or
# undef when its package is not installed.
sub debian_module {
    my ($name) = @_;
    my $path = "/usr/lib/nginx/modules/$name.so";
    return -f $path ? $path : undef;
}

# Main-context directives that make a crashing worker leave a core file in
# a directory of the prefix (cores/, writable by the workers), for
# core_files() and for diagnosis: put them in new(main => ...).
sub core_main {
    my ($self) = @_;
    my $dir = "$self->{prefix}/cores";
    mkdir($dir) unless -d $dir;
    chmod(0777, $dir);
    return "worker_rlimit_core 2g;\nworking_directory $dir;\n";
}

# The core files left in the prefix's cores/ (see core_main).
sub core_files {
    my ($self) = @_;
    opendir(my $dh, "$self->{prefix}/cores") or return ();
    my @f = map { "$self->{prefix}/cores/$_" } grep { /^core/ } readdir($dh);
    closedir($dh);
    return @f;
}

# Lines of the error log that tell of a worker that died: killed by a
# signal, or exiting with a non-zero status (a sanitizer report).
sub worker_deaths {
    my ($self) = @_;
    return grep { /exited on signal|process \d+ exited with code [1-9]/ }
           split /\n/, $self->error_log;
}

# A test: no worker died (worker_deaths), and no core file was left; on
# failure, says which and where the cores are (and copies them to
# $PROFILING_CORE_DIR when it is set, since the prefix is removed at exit).
sub ok_no_worker_died {
    my ($self, $name) = @_;
    my @deaths = $self->worker_deaths;
    my @cores = $self->core_files;
    my $ok = ok(!@deaths && !@cores, "$name: no worker died");
    unless ($ok) {
        diag("  $_") for @deaths;
        diag("  core file: $_") for @cores;
        if (@cores && $ENV{PROFILING_CORE_DIR}) {
            system('cp', @cores, $ENV{PROFILING_CORE_DIR});
            diag("  copied to $ENV{PROFILING_CORE_DIR}");
        }
    }
    return $ok;
}

# Runs wrk against this nginx: $o{path} (default /) or $o{script} (a Lua
# file for wrk -s), $o{seconds}, $o{connections} (default 4), $o{threads}
# (default 2), $o{headers} (e.g. ["Connection: close"]). Returns
# { requests, non2xx, socket_errors, output }.
sub wrk {
    my ($self, %o) = @_;
    my @cmd = ('wrk', '-t', $o{threads} // 2, '-c', $o{connections} // 4,
               '-d', ($o{seconds} // 5) . 's', '--timeout', '30s');
    push @cmd, '-s', $o{script} if $o{script};
    push @cmd, map { ('-H', $_) } @{ $o{headers} // [] };
    push @cmd, "http://127.0.0.1:$self->{port}" . ($o{path} // '/');

    my ($rc, $out) = _run_capture(@cmd);
    croak "wrk failed (exit $rc): $out" if $rc != 0;

    my %r = (requests => 0, non2xx => 0, socket_errors => 0, output => $out);
    $r{requests} = $1 if $out =~ /(\d+) requests in /;
    $r{non2xx} = $1 if $out =~ /Non-2xx or 3xx responses: (\d+)/;
    $r{socket_errors} = $1 + $2 + $3 + $4 if $out =~
        /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/;
    return \%r;
}

# Requests of an access log written with the format '$uri $status':
# { uri => { status => count } }.
sub access_counts {
    my ($path) = @_;
    my %h;
    for (file_lines($path)) {
        my ($uri, $status) = split ' ';
        $h{$uri}{$status}++ if defined $status;
    }
    return \%h;
}

# Whether a frame of a flattened sample (hotspot_samples) is in code of no
# loaded object (JIT code): no mapping, no function, only an address.
sub is_jit_frame {
    my ($s, $i) = @_;
    return $s->{objects}[$i] eq '' && $s->{funcs}[$i] =~ /^0x[0-9a-f]+$/;
}

# A server on a free loopback port that accepts every connection, reads
# what it is sent and never answers: an agent that hangs. Returns
# { pid, port, accepted }: accepted() is how many connections it accepted.
# Stop it with stop_silent_server (or it goes at exit).
my %SILENT;

sub start_silent_server {
    require IO::Select;
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

# The pids of the nginx processes that are children of $ppid, by their
# title: { pid => title } (e.g. "nginx: worker process is shutting down").
sub nginx_children {
    my ($ppid) = @_;
    my %h;
    for my $pid (children_of($ppid)) {
        my $cmd = proc_cmdline($pid);
        $SEEN{$pid} = 1 if $cmd =~ /^nginx: /;
        $h{$pid} = $cmd;
    }
    return \%h;
}

# Makes $pid the master of this instance (after a binary upgrade: the new
# master), for worker_pids, stop and kill_all; the old one is forgotten.
sub adopt_master {
    my ($self, $pid) = @_;
    delete $RUNNING{ $self->{master} } if $self->{master};
    $self->{master} = $pid;
    delete $self->{foreground};
    $RUNNING{$pid} = $self;
    return $self;
}

# The JIT workload of t/safety-jit.t and ci/soak, for an nginx with lua
# (and Debian's js and brotli modules where it can load them): writes its
# files into the prefix (html/big.txt, spin.js) and returns the http-level
# directives ({http}, to put before the server), the locations
# ({locations}) and the paths among these that this nginx serves ({paths}):
#   /jit     profiling_burn_jit $jit_ms: hand-written code of no object,
#            rbp garbage, called from a function that finds its caller from
#            rsp
#   /jitfp   the same, called from a function that finds its caller from
#            rbp (as code built with frame pointers does)
#   /lua     a loop LuaJIT compiles into a trace (calling math.sin)
#   /luaoff  the same loop, the JIT off for the request
#   /luanew  a chunk whose constant differs on every request: new traces
#            every request (and machine code flushed when LuaJIT's area is
#            full)
#   /njs     a loop in njs (with Debian's js module)
#   /big.txt 200 KB of text, brotli level 11 (with Debian's brotli module)
sub jit_workload {
    my ($self, %o) = @_;
    my $jit_ms = $o{jit_ms} // 20;
    my $p = $self->{prefix};

    mkdir("$p/html") unless -d "$p/html";
    chmod(0755, "$p/html");
    $self->write_words_file("$p/html/big.txt", 200_000);

    my $e = engines();
    open(my $fh, '>', "$p/spin.js") or croak "$p/spin.js: $!";
    print $fh <<'EOF';
function spin(r) {
    var s = 0;
    for (var i = 0; i < 300000; i++) {
        s += Math.sin(i) * (i % 7);
    }
    r.return(200, "njs " + s + "\n");
}
export default { spin };
EOF
    close($fh);
    chmod(0644, "$p/spin.js");

    my $njs = $e->{njs} ? "location /njs { js_content spin.spin; }" : '';
    my $brotli = $e->{brotli} ? "brotli on;\n            brotli_comp_level 11;"
                                . "\n            brotli_types text/plain;"
                              : '';
    return {
        http => $e->{njs} ? "js_import spin from $p/spin.js;\n" : '',
        paths => [ qw(/jit /jitfp /lua /luaoff /luanew),
                   ($e->{njs} ? '/njs' : ()),
                   ($e->{brotli} ? '/big.txt' : ()) ],
        locations => <<"EOF",
        root $p/html;
        location /jit { profiling_burn_jit ${jit_ms}ms; }
        location /jitfp { profiling_burn_jit ${jit_ms}ms frame_pointer; }
        location /lua {
            content_by_lua_block {
                local s = 0
                for i = 1, 1000000 do s = s + math.sin(i) end
                ngx.say(s)
            }
        }
        location /luaoff {
            content_by_lua_block {
                jit.off()
                local s = 0
                for i = 1, 1000000 do s = s + math.sin(i) end
                ngx.say(s)
            }
        }
        location /luanew {
            content_by_lua_block {
                local k = tostring(math.random(1, 1000000000))
                local f = loadstring("local s = 0 for i = 1, 200000 do "
                                     .. "s = s + (i % " .. k .. ") * 1.5 "
                                     .. "end return s")
                ngx.say(f())
            }
        }
        $njs
        location = /big.txt {
            $brotli
        }
EOF
    };
}

# The third-party engines the tests drive, for the nginx under test: name
# (lua, njs, brotli) => the modules to load for it ([] when built in, as
# OpenResty's lua); absent when there is none. Debian's packaged modules
# load into Debian's nginx only.
sub engines {
    my %e;
    $e{lua} = [] if nginx_has('lua-nginx-module') || nginx_has('ngx_lua');
    if ((Cwd::realpath(nginx_real()) // '') eq '/usr/sbin/nginx') {
        my @lua = map { debian_module($_) } qw(ndk_http_module
                                                ngx_http_lua_module);
        $e{lua} //= \@lua unless grep { !defined } @lua;
        my $js = debian_module('ngx_http_js_module');
        $e{njs} = [$js] if defined $js;
        my $br = debian_module('ngx_http_brotli_filter_module');
        $e{brotli} = [$br] if defined $br;
    }
    return \%e;
}

# Debian's debuginfod serving the debug files of $dir, its requests logged
# (-v) to $self->prefix/debuginfod.log; killed when the test ends. Returns
# its URL once it serves the debug file of $build_id, or undef after 60 s.
my @DEBUGINFOD_PIDS;
END { kill('TERM', @DEBUGINFOD_PIDS) if @DEBUGINFOD_PIDS; }

sub debuginfod_server {
    my ($self, $dir, $build_id) = @_;
    my $port = free_port();
    my $p = $self->{prefix};

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

# The modules the JIT workload needs, in load order (the ndk before lua),
# after the profiling and burn modules; () when there is no lua.
sub jit_workload_modules {
    my $e = engines();
    return () unless $e->{lua};
    return ('ngx_http_profiling_module', 'ngx_http_profiling_burn_module',
            map { @{ $e->{$_} // [] } } qw(lua njs brotli));
}

# OpenResty's luajit2 (../shared/fixtures/openresty), built into $dir as
# libluajit-5.1.so.2 for Debian's lua module to load in place of Debian's
# own (LD_LIBRARY_PATH=$dir). Its path; undef when there is no such lua
# module or no fixture. Dies when it does not build.
sub openresty_luajit {
    my ($dir) = @_;
    my ($tarball) = glob(Cwd::realpath(dirname(__FILE__) . '/../../..')
                         . '/shared/fixtures/openresty/luajit2-*.tar.gz');
    my $lua = debian_module('ngx_http_lua_module');
    return undef
        unless $tarball && $lua
               && grep({ $_ eq $lua } jit_workload_modules())
               && `ldd $lua` =~ /libluajit-5\.1\.so\.2/;
    mkdir($dir) or croak "$dir: $!";
    my $out = `cd '$dir' && tar xzf '$tarball' && cd luajit2-* && make -j2 BUILDMODE=dynamic PREFIX=/usr >../build.log 2>&1 && cp src/libluajit.so ../libluajit-5.1.so.2 2>&1`;
    croak "OpenResty's luajit2 does not build ($dir/build.log): $out"
        if $?;
    chmod(0755, $dir);
    chmod(0644, "$dir/libluajit-5.1.so.2");
    return "$dir/libluajit-5.1.so.2";
}

# A Lua script for wrk (wrk(script => ...)) that requests @paths in turn,
# accepting brotli. Returns its path (in the prefix).
sub wrk_paths_script {
    my ($self, @paths) = @_;
    my $file = "$self->{prefix}/wrk-paths.lua";
    open(my $fh, '>', $file) or croak "$file: $!";
    print $fh 'local paths = { ' . join(', ', map { "\"$_\"" } @paths)
              . " }\n" . <<'EOF';
local i = 0
request = function()
    i = i + 1
    return wrk.format("GET", paths[(i % #paths) + 1],
                      { ["Accept-Encoding"] = "br" })
end
EOF
    close($fh);
    return $file;
}

# The counters each worker logged as its profiler stopped ("profiling:
# stopped: name=value ..."): { pid => { name => value } }.
sub profiler_counters {
    my ($self) = @_;
    my %c;
    for (split /\n/, $self->error_log) {
        next unless /(\d+)#\d+: profiling: stopped: (.*)$/;
        my ($pid, $rest) = ($1, $2);
        $c{$pid}{$1} = $2 while $rest =~ /(\w+)=(\S+)/g;
    }
    return \%c;
}

1;
