#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Retention of the dump directory (profiling_dump_keep): with a profile a
# second for about ten seconds, the directory never holds more profiles
# than the bound on their count or their size (polled, and counted exactly
# from inotify's record of every entry made and removed); the oldest go
# first, profiles of another worker (pid) of the service included; files
# that are not this service's profiles (other names, another owner, links,
# directories, young temporary files) are never touched; temporary files
# of the module older than a minute are removed at start.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);

use ProfLog;
use ProfNginx;
use ProfHostile;

plan(skip_all => 'run as root: the workers run as nobody') unless $> == 0;
plan(skip_all => 'python3 is missing')
    unless grep { -x "$_/python3" } split /:/, $ENV{PATH};

my ($NOBODY_UID, $NOBODY_GID) = (getpwnam('nobody'))[2, 3];
my $RUN_S = 10;
my $PROFILE = qr/^nginx\.\d+\.\d+\.pprof$/;

sub plant {
    my ($path, %o) = @_;
    open(my $fh, '>', $path) or die "$path: $!";
    print $fh $o{content} // "planted $path\n";
    close($fh);
    chmod($o{mode} // 0644, $path);
    chown($o{uid} // $NOBODY_UID, $o{gid} // $NOBODY_GID, $path);
    system('touch', '-h', '-d', $o{age}, $path) == 0 or die
        if defined $o{age};
}

# What identifies an entry: type, inode, size, mtime, owner; of a link
# its target.
sub identity {
    my ($path) = @_;
    my @st = lstat($path) or return 'missing';
    my $kind = -l _ ? 'link ' . readlink($path) : -d _ ? 'dir' : 'file';
    return join(' ', $kind, @st[1, 4, 7, 9]);
}

# Profiles the module counts: this service's names, regular files of the
# workers' user. { name => size }.
sub counted {
    my ($dir) = @_;
    opendir(my $dh, $dir) or return {};
    my %h;
    for my $n (grep { $_ =~ $PROFILE } readdir($dh)) {
        my @st = lstat("$dir/$n") or next;
        next unless -f _ && $st[4] == $NOBODY_UID;
        $h{$n} = $st[7];
    }
    closedir($dh);
    return \%h;
}

sub seq_of { my ($pid, $seq) = $_[0] =~ /^nginx\.(\d+)\.(\d+)\./; $seq }

# Starts nginx with the keep directive over a directory prepared by
# $prepare, loads it for $RUN_S seconds while polling the directory, and
# stops it. Returns what was seen.
sub run_retention {
    my ($keep, $prepare) = @_;

    my $t = ProfNginx->new(workers => 1);
    my $d = $t->dump_dir;
    chmod(0755, $d);
    my $planted = $prepare->($t, $d);
    my %before = map { $_ => identity("$d/$_") } @{ $planted->{untouched} };
    my $initial = counted($d);

    $t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_dump_keep $keep;
    profiling_period 1s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 10ms; }
    }
EOF

    my $w = ProfHostile::watch(dirs => [ $d ]);
    $t->run;
    my ($worker) = $t->worker_pids;

    # Load, and poll the directory between requests.
    my %seen = (max_files => 0, max_bytes => 0);
    my $end = time() + $RUN_S;
    while (time() < $end) {
        $t->get('/burn');
        my $c = counted($d);
        my $bytes = 0;
        $bytes += $_ for values %$c;
        $seen{max_files} = keys %$c if keys %$c > $seen{max_files};
        $seen{max_bytes} = $bytes if $bytes > $seen{max_bytes};
        $seen{sizes}{$_} //= $c->{$_} for keys %$c;
    }
    ok($t->stop, 'nginx quits');
    $w->stop;
    $t->ok_no_worker_died("profiling_dump_keep $keep");

    # The directory's history from inotify: entries renamed in (written
    # profiles), deleted, in order.
    # Sizes: of the planted files, and of the new ones as polled.
    my %size = (%$initial, %{ $seen{sizes} // {} }, %{ counted($d) });
    my %now = %$initial;
    my (@deleted, @events);
    my $bytes = 0;
    $bytes += $_ for values %now;
    $seen{exact_max_files} = keys %now;
    $seen{exact_max_bytes} = $bytes;
    for my $e ($w->events) {
        my (undef, $what, $name) = @$e;
        push @events, "$what $name";
        if ($what =~ /MOVED_TO/ && $name =~ $PROFILE) {
            $now{$name} = 1;
            $bytes += $size{$name} // 0;
        } elsif ($what =~ /DELETE/ && exists $now{$name}) {
            delete $now{$name};
            $bytes -= $size{$name} // 0;
            push @deleted, $name;
        }
        if (keys %now > $seen{exact_max_files}) {
            $seen{exact_max_files} = keys %now;
            $seen{exact_max_at} = $#events;
        }
        $seen{exact_max_bytes} = $bytes if $bytes > $seen{exact_max_bytes};
    }

    $seen{t} = $t;
    $seen{worker} = $worker;
    $seen{deleted} = \@deleted;
    $seen{events} = \@events;
    $seen{final} = counted($d);
    $seen{changed} = [ grep { identity("$d/$_") ne $before{$_} }
                       sort keys %before ];
    $seen{planted} = $planted;
    ($seen{counters}) = grep { $_->{pid} == $worker }
                        ProfLog::exit_counters($t->error_log);
    return \%seen;
}

# Names that are not this service's profiles, or not the module's to
# delete; all old, so that they would go first if they were counted.
sub plant_strangers {
    my ($t, $d) = @_;
    my @names = ('notes.txt', 'nginx.pprof', 'nginx.1.pprof',
                 'other.123.4.pprof', 'nginx.12.3.pprof.bak',
                 'nginx.x.1.pprof', 'Nginx.1.2.pprof', 'nginx.1.2.pprof.tmp',
                 'nginx.-1.2.pprof', 'nginx..1.2.pprof',
                 '.nginx.1.2.0123456789ABCDEF.tmp', '.nginx.1.2.zz.tmp',
                 '.nginx.1.2.0123456789abcdef.tmp.old');
    plant("$d/$_", age => '1 day ago') for @names;

    # Named like profiles, but another user's, a link, a directory.
    plant("$d/nginx.7.7.pprof", uid => 0, gid => 0, age => '1 day ago');
    plant($t->prefix . '/victim', age => '1 day ago');
    symlink($t->prefix . '/victim', "$d/nginx.8.8.pprof") or die $!;
    mkdir("$d/nginx.9.9.pprof") or die $!;
    chown($NOBODY_UID, $NOBODY_GID, "$d/nginx.9.9.pprof");

    # Temporary files: young (kept), another user's (kept), stale
    # (removed at start, of any service).
    plant("$d/.nginx.1.2.00112233445566ff.tmp");
    plant("$d/.nginx.4243.3.0123456789abcdef.tmp", uid => 0, gid => 0,
          age => '2 minutes ago');
    plant("$d/.nginx.4242.3.0123456789abcdef.tmp", age => '2 minutes ago');
    plant("$d/.other.1.2.fedcba9876543210.tmp", age => '2 minutes ago');

    return [ @names, 'nginx.7.7.pprof', 'nginx.8.8.pprof', 'nginx.9.9.pprof',
             '.nginx.1.2.00112233445566ff.tmp',
             '.nginx.4243.3.0123456789abcdef.tmp' ];
}

my @STALE = ('.nginx.4242.3.0123456789abcdef.tmp',
             '.other.1.2.fedcba9876543210.tmp');

sub check_common {
    my ($s, $name) = @_;

    ok(!@{ $s->{changed} }, "$name: files that are not this service's "
       . 'profiles are untouched')
        or diag('  changed: ' . join(', ', @{ $s->{changed} }));

    my $d = $s->{t}->dump_dir;
    ok(!grep({ -e "$d/$_" } @STALE), "$name: stale temporary files are "
       . 'removed');
    # At start: before the first profile is written.
    my @ev = @{ $s->{events} };
    my ($first) = grep { $ev[$_] =~ /^MOVED_TO nginx\./ } 0 .. $#ev;
    my @late = grep {
        my $stale = $_;
        my ($at) = grep { $ev[$_] eq "DELETE $stale" } 0 .. $#ev;
        !defined $at || !defined $first || $at > $first
    } @STALE;
    ok(!@late, "$name: at start, before the first profile")
        or diag('  events: ' . join(', ', @ev[0 .. ($#ev < 15 ? $#ev : 15)]));
    is($s->{counters}{dump_temps_removed}, scalar(@STALE),
       "$name: dump_temps_removed=" . scalar(@STALE));
    is($s->{counters}{dump_files_deleted}, scalar(@{ $s->{deleted} }),
       "$name: dump_files_deleted counts the profiles deleted");
}


subtest 'profiling_dump_keep 5: at most 5 profiles, the oldest go first'
        => sub {
    my $s = run_retention(5, sub {
        my ($t, $d) = @_;
        my $untouched = plant_strangers($t, $d);
        # Another worker's profiles of this service, older than any new one.
        plant("$d/nginx.1.$_.pprof", age => (3 - $_) . ' hours ago')
            for 0 .. 2;
        return { untouched => $untouched };
    });
    my $w = $s->{worker};

    my @written = sort { seq_of($a) <=> seq_of($b) }
                  grep { /^nginx\.$w\./ } keys %{ $s->{sizes} },
                  keys %{ $s->{final} };
    my %u;
    @written = grep { !$u{$_}++ } @written;
    ok(@written >= 8, scalar(@written) . ' profiles written');

    ok($s->{max_files} <= 5, "polled: never more than 5 profiles "
       . "(at most $s->{max_files})");
    ok($s->{exact_max_files} <= 5, 'inotify: never more than 5 profiles '
       . "at any moment (at most $s->{exact_max_files})")
        or diag('  the directory\'s entries: ... ' . join(', ',
                @{ $s->{events} }[$s->{exact_max_at} - 4
                                  .. $s->{exact_max_at} + 1]) . ' ...');
    is(scalar(keys %{ $s->{final} }), 5, '5 profiles at the end');

    my @expected = ((map { "nginx.1.$_.pprof" } 0 .. 2),
                    @written[0 .. $#written - 5]);
    is_deeply($s->{deleted}, \@expected, 'deleted oldest first: the other '
              . 'worker\'s, then this worker\'s by sequence');
    is_deeply([ sort { seq_of($a) <=> seq_of($b) } keys %{ $s->{final} } ],
              [ @written[-5 .. -1] ], 'the newest 5 are kept');

    check_common($s, 'keep 5');
};


subtest 'profiling_dump_keep 64k: at most 64 KiB of profiles' => sub {
    my $s = run_retention('64k', sub {
        my ($t, $d) = @_;
        my $untouched = plant_strangers($t, $d);
        # 60000 bytes of another worker's older profiles.
        plant("$d/nginx.1.$_.pprof", content => 'x' x 15000,
              age => (4 - $_) . ' hours ago') for 0 .. 3;
        return { untouched => $untouched };
    });

    my $bytes = 0;
    $bytes += $_ for values %{ $s->{final} };
    ok(@{ $s->{deleted} } >= 1, scalar(@{ $s->{deleted} }) . ' profiles '
       . 'deleted');
    ok($s->{max_bytes} <= 65536, 'polled: never more than 65536 bytes of '
       . "profiles (at most $s->{max_bytes})");
    ok($s->{exact_max_bytes} <= 65536, 'inotify: never more than 65536 '
       . "bytes of profiles at any moment (at most $s->{exact_max_bytes})");
    ok($bytes <= 65536, "$bytes bytes of profiles at the end");
    my @old = grep { /^nginx\.1\./ } @{ $s->{deleted} };
    is_deeply(\@old, [ map { "nginx.1.$_.pprof" } 0 .. $#old ],
              'the other worker\'s oldest went first');
    ok(!grep({ /^nginx\.$s->{worker}\./ } @{ $s->{deleted} })
       || @old == 4, 'and before any of this worker\'s');

    check_common($s, 'keep 64k');
};

done_testing();
