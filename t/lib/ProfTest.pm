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
    thread_ids thread_count thread_cpu_ns
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
sub shared_dir { File::Spec->catdir($TOP_DIR, 'shared') }

sub build_dir {
    my $b = $ENV{PROFILING_BUILD};
    $b = File::Spec->catdir($T_DIR, '..', 'build') unless defined $b
                                                         && length $b;
    return File::Spec->rel2abs($b);
}

sub nginx_binary { $ENV{PROFILING_NGINX} || '/usr/sbin/nginx' }

sub module_path {
    my ($name) = @_;
    return File::Spec->catfile(build_dir(), 'test', "$name.so");
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

    for my $m (qw(ngx_http_profiling_module ngx_http_profiling_burn_module))
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

sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, Proto => 'tcp',
                                  ReuseAddr => 1)
        or croak "no free port: $!";
    my $port = $s->sockport;
    close($s);
    return $port;
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

    my @kids = $self->children_pids;
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
        . ' < "$2"', 'sh', shared_dir(), $raw);
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
