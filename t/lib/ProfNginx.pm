# SPDX-License-Identifier: BSD-2-Clause
package ProfNginx;

# The nginx harness of the integration tests and the benchmarks, in the
# spirit of Test::Nginx: each test writes an http block, starts nginx in a
# temporary prefix with the built modules loaded, talks to it, and reads
# the profiles it writes (ProfPprof decodes them independently of the
# module, with protoc).
#
#   my $t = ProfNginx->new(workers => 1);
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
# It holds an instance's life: its configuration (the main context it
# writes, the http block given), starting it (daemon or in the
# foreground, with or without a master), its processes (master, workers,
# their profiler processes), signals, reloads and binary upgrades, the
# graceful stop, its error log (and waits for lines of it), the profile
# files it writes, and what a worker that died leaves (log lines, core
# files).
#
# run() returns once the port answers and every worker has set its title
# ("worker process"), which nginx does after the modules' init_process:
# by then a worker's profiler process is forked (its threads: see
# ProfProc::profiler_ready).
#
# Hermetic: the DD_* variables the module reads for its defaults (service,
# env, tags, agent address) are removed from the environment nginx starts
# with, and "profiling_agent_url off;" is added to the http block unless it
# sets profiling_agent_url itself (or new(agent_url => undef)): profiles go
# to the dump dir only, whatever listens on the machine.
#
# Placeholders in the http block: %%PORT%% (a free loopback port),
# %%PREFIX%% (the prefix), %%DUMP%% (%%PREFIX%%/dump, created, writable by
# the workers' user).
#
# Every nginx started here is killed in an END block if a test leaves it
# running (a failed test, a die). Waits poll a condition until a deadline.

use strict;
use warnings;

use Carp qw(croak);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use HTTP::Tiny;
use POSIX qw(WNOHANG);
use Test::More;

use ProfCommand qw(run_capture);
use ProfEnv;
use ProfFiles qw(read_pid slurp spew);
use ProfHTTP qw(free_port port_answers);
use ProfLog qw(log_lines);
use ProfPprof qw(profile_files);
use ProfProc qw(children_of proc_cmdline process_alive proc_state thread_ids);
use ProfWait qw(wait_until);


delete $ENV{$_} for grep { /^DD_/ } keys %ENV;


my %RUNNING;    # master (or single process) pid => instance, for END
my %SEEN;       # every nginx child pid seen, for END


# A new instance, not started. Options: workers (default 1), user (of the
# workers, default nobody when we are root; undef: no user directive),
# master_process and daemon (default on), main (main-context directives),
# modules (names of the test build's modules or paths; default the
# profiling and burn modules), port (default a free one), agent_url
# (default off), no_dump_dir, prefix (a directory to use, kept at exit;
# default a temporary one, removed), error_log_level (default info),
# worker_connections (default 256).
sub new {
    my ($class, %opts) = @_;

    for my $m (@{ $opts{modules} // [qw(ngx_http_profiling_module
                                          ngx_http_profiling_burn_module)] })
    {
        my $path = ProfEnv::module_path($m);
        BAIL_OUT("$path is missing: run make test-modules "
                 . "(PROFILING_BUILD=" . ProfEnv::build_dir() . ")")
            unless -f $path;
    }

    my $prefix = $opts{prefix};
    if (defined $prefix) {
        make_path($prefix);
        -d $prefix or croak "mkdir $prefix: $!";
    } else {
        $prefix = tempdir('proftest-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    }
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
        error_log_level    => $opts{error_log_level} // 'info',
        worker_connections => $opts{worker_connections} // 256,
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
    return slurp($self->error_log_path) // '';
}

# Lines of the error log matching $re: waits until there are at least $n
# of them (default 1) or $timeout seconds (default 10) pass; returns the
# lines (their number in scalar context).
sub wait_for_log {
    my ($self, $re, $n, $timeout) = @_;
    $n //= 1;
    my @lines;
    wait_until(sub { @lines = log_lines($self->error_log, $re); @lines >= $n },
               $timeout // 10);
    return @lines;
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
    $conf .= "load_module " . ProfEnv::module_path($_) . ";\n"
        for @{ $self->{modules} };

    my ($uid) = $self->user_ids;
    if (defined $uid) {
        my $group = getgrgid((getpwnam($self->{user}))[3]);
        $conf .= "user $self->{user} $group;\n";
    }

    $conf .= "pid $p/nginx.pid;\n"
           . "lock_file $p/nginx.lock;\n"
           . "error_log $p/error.log $self->{error_log_level};\n"
           . "daemon " . ($self->{daemon} ? 'on' : 'off') . ";\n"
           . "master_process " . ($self->{master_process} ? 'on' : 'off')
           . ";\n"
           . "worker_processes $self->{workers};\n"
           . $self->_expand($opts{main} // $self->{main}) . "\n"
           . "events {\n    worker_connections "
           . "$self->{worker_connections};\n}\n\n"
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
              ? '' : ProfEnv::lua_package_path_directive())
           # Under a sanitizer the profiler's own CPU passes the default
           # profiling_max_cpu (its instrumentation slows the profiler,
           # not nginx): the tests' shares are taken at the configured
           # interval unless they set the ceiling (t/throttle.t).
           . (ProfEnv::nginx_wrapped()
              && grep({ $_ eq 'ngx_http_profiling_module' }
                      @{ $self->{modules} })
              && $http !~ /\bprofiling_max_cpu\b/
              ? "    profiling_max_cpu off;\n" : '')
           . "\n"
           . $self->_expand($http)
           . "\n}\n";

    spew($self->conf, $conf);

    $self->{config_text} = $conf;
    return $self;
}

sub config_text { $_[0]{config_text} }


# Starting and stopping it, its processes.

sub _nginx_cmd {
    my ($self, @args) = @_;
    return (ProfEnv::nginx_binary(), '-p', "$self->{prefix}/",
            '-c', $self->conf, '-e', $self->error_log_path, @args);
}

# nginx -t: (exit status, output).
sub test_config {
    my ($self) = @_;
    return run_capture($self->_nginx_cmd('-t'));
}

# Starts nginx; returns once the port answers and, with a master, the
# configured number of workers runs. Dies when nginx does not start.
sub run {
    my ($self, %opts) = @_;
    my $timeout = $opts{timeout} // 10;

    croak "already running" if $self->{master};
    unlink($self->pid_file);

    if ($self->{daemon}) {
        my ($rc, $out) = run_capture($self->_nginx_cmd());
        croak "nginx failed to start (exit $rc): $out\n"
              . $self->error_log if $rc != 0;

        my $pid = wait_until(sub { read_pid($self->pid_file) // 0 },
                             $timeout);
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
        return 0 unless port_answers($self->{port});
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

    my ($rc, $out) = run_capture($self->_nginx_cmd('-s', $sig));
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
    $self->diag_lingering($self->{master}, @kids);
    $self->kill_all;
    return 0;
}

# What a process that should have gone is doing: its title, and each
# thread's name, state, the system call it is in (/proc's syscall: its
# number, or "running") and kernel wait channel; then its last lines in
# the error log.
sub diag_lingering {
    my ($self, @pids) = @_;
    my @log = ProfLog::log_lines($self->error_log, qr/./);

    for my $pid (grep { process_alive($_) } @pids) {
        diag("  $pid: " . proc_cmdline($pid));
        for my $tid (thread_ids($pid)) {
            my $d = "/proc/$pid/task/$tid";
            my ($name, $call, $wchan) = map { slurp("$d/$_") // '?' }
                qw(comm syscall wchan);
            chomp($name, $call);
            diag("    thread $tid $name: state "
                 . (proc_state($pid, $tid) // '?') . ", syscall "
                 . (split(/ /, $call))[0] . ", wchan $wchan");
        }
        my @mine = grep { /\s$pid#\d+: / } @log;
        diag("    log: $_") for @mine[ ($#mine > 9 ? $#mine - 9 : 0)
                                         .. $#mine ];
    }
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


# HTTP to this instance, and what it writes.

# Its HTTP::Tiny client, one keep-alive connection.
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

# Adds directives to the events block of the nginx.conf write_config wrote
# (e.g. "accept_mutex on;").
sub add_events_directives {
    my ($self, $text) = @_;
    my $conf = slurp($self->conf) // croak "no " . $self->conf;
    $conf =~ s/^(events \{\n)/$1    $text\n/m or croak "no events block";
    spew($self->conf, $conf);
    $self->{config_text} = $conf;
    return $self;
}


# Workers that die (the safety tests): core files, log lines.

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
    return log_lines($self->error_log,
                     qr/exited on signal|process \d+ exited with code [1-9]/);
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

1;
