#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The dump directory against what a local user plants in it or in its
# place: a symbolic link where the directory should be, a file in its
# place, a directory the workers cannot open or write, a missing parent,
# and symbolic links, a FIFO and files under the final profile names. A
# directory the module cannot use is refused with one message per process
# naming the path and the reason, at start and never again (not once a
# minute: the instances run past a minute); nothing is written through a
# link; a planted target is never opened, read or written (inotify says
# so); a planted name is replaced as a directory entry. The directory the
# master creates is the workers' user's, mode 0700, its profiles 0600.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);

use ProfEnv;
use ProfFiles qw(slurp);
use ProfLog;
use ProfNginx;
use ProfPprof;
use ProfWait;
use ProfWorkload;
use ProfHostile;

plan(skip_all => 'run as root: the workers run as nobody') unless $> == 0;
plan(skip_all => 'python3 is missing')
    unless grep { -x "$_/python3" } split /:/, $ENV{PATH};

# Past the once-a-minute limit of repeated errors; under a sanitizer
# (t/sanitizer-nginx) a few seconds: the limit's logic is the same code,
# run without one by the plain build's run of this test.
my $LONG_S = ProfEnv::nginx_wrapped() ? 5 : 66;

my ($NOBODY_UID, $NOBODY_GID) = (getpwnam('nobody'))[2, 3];

sub start_with_dump {
    my ($dump, %o) = @_;
    my $t = ProfNginx->new(workers => 1, no_dump_dir => 1);
    $o{setup}->($t) if $o{setup};
    (my $conf_dump = $dump) =~ s/%%PREFIX%%/$t->prefix/ge;
    $t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir $conf_dump;
    profiling_period ${\ ($o{period} // '1s')};
    ${\ ($o{extra} // '')}
    server {
        listen 127.0.0.1:%%PORT%%;
        location /burn { profiling_burn 20ms; }
    }
EOF
    $t->{dump_path} = $conf_dump;
    $o{before_run}->($t) if $o{before_run};
    $t->run;
    return $t;
}

sub write_file {
    my ($path, $text, $mode, $uid, $gid) = @_;
    open(my $fh, '>', $path) or die "$path: $!";
    print $fh $text;
    close($fh);
    chmod($mode // 0644, $path);
    chown($uid // 0, $gid // 0, $path);
}

# Error log lines naming the dump path, by pid: { pid => [lines] }.
sub messages_by_pid {
    my ($t) = @_;
    my $path = $t->{dump_path};
    my %by;
    for my $line (ProfLog::log_lines($t->error_log, qr/\Q$path\E/)) {
        next if $line =~ /profiling: sampling every/;
        my ($pid) = $line =~ /\s(\d+)#\d+: /;
        push @{ $by{$pid // '?'} }, $line;
    }
    return \%by;
}


# The instances that cannot use their directory run through the whole
# test, past a minute.

my @LONG = (
    {
        name => 'a symbolic link in place of the directory',
        dump => '%%PREFIX%%/dump-link',
        reason => qr/symbolic link/,
        setup => sub {
            my ($t) = @_;
            my $target = $t->prefix . '/target';
            mkdir($target);
            chown($NOBODY_UID, $NOBODY_GID, $target);
            chmod(0777, $target);
            write_file("$target/existing", "existing\n", 0666,
                       $NOBODY_UID, $NOBODY_GID);
            symlink($target, $t->prefix . '/dump-link') or die $!;
            $t->{watch_files} = [ "$target/existing" ];
            $t->{watch_dirs} = [ $target ];
        },
    },
    {
        name => 'a regular file in place of the directory',
        dump => '%%PREFIX%%/dump-file',
        reason => qr/Not a directory/,
        setup => sub {
            my ($t) = @_;
            write_file($t->prefix . '/dump-file', "a file\n", 0666,
                       $NOBODY_UID, $NOBODY_GID);
            $t->{watch_files} = [ $t->prefix . '/dump-file' ];
        },
    },
    {
        name => 'a directory of root, mode 0700',
        dump => '%%PREFIX%%/dump-root',
        reason => qr/Permission denied/,
        setup => sub {
            my ($t) = @_;
            mkdir($t->prefix . '/dump-root');
            chmod(0700, $t->prefix . '/dump-root');
            $t->{watch_dirs} = [ $t->prefix . '/dump-root' ];
        },
    },
    {
        name => 'a directory of the workers\' user, mode 0555',
        dump => '%%PREFIX%%/dump-ro',
        reason => qr/cannot create files.*Permission denied/,
        setup => sub {
            my ($t) = @_;
            mkdir($t->prefix . '/dump-ro');
            chown($NOBODY_UID, $NOBODY_GID, $t->prefix . '/dump-ro');
            chmod(0555, $t->prefix . '/dump-ro');
            $t->{watch_dirs} = [ $t->prefix . '/dump-ro' ];
        },
    },
    {
        name => 'a directory whose parent is missing',
        dump => '%%PREFIX%%/no/such',
        reason => qr/No such file or directory/,
    },
);

my $long_start = time();
for my $l (@LONG) {
    my $t = start_with_dump($l->{dump}, setup => $l->{setup},
        before_run => sub {
            my ($t) = @_;
            $l->{watch} = ProfHostile::watch(files => $t->{watch_files},
                                             dirs => $t->{watch_dirs})
                if $t->{watch_files} || $t->{watch_dirs};
        });
    $l->{t} = $t;
    $l->{worker} = ($t->worker_pids)[0];
}

# The worker says why at its start, before its first profile.
for my $l (@LONG) {
    my $t = $l->{t};
    my $worker = $l->{worker};
    my $said = wait_until(sub { messages_by_pid($t)->{$worker} }, 5);
    ok($said && grep({ $_ =~ $l->{reason} } @$said),
       "$l->{name}: the worker says so, with the path and the reason")
        or diag($t->error_log);
    is($t->get('/burn')->{status}, 200, "$l->{name}: nginx serves");
}


subtest 'symbolic links, a FIFO and files planted under the final names '
        . 'are replaced, never followed, opened or written' => sub {
    my $w;
    my $t = start_with_dump('%%DUMP%%', period => '3s', setup => sub {
        my ($t) = @_;
        my $p = $t->prefix;
        mkdir($t->dump_dir);
        chown($NOBODY_UID, $NOBODY_GID, $t->dump_dir);
        chmod(0755, $t->dump_dir);

        # Targets a follower could write: the workers' own, mode 0666.
        write_file("$p/victim", "victim\n", 0666, $NOBODY_UID, $NOBODY_GID);
        write_file("$p/victim-old", "old\n", 0666, $NOBODY_UID,
                   $NOBODY_GID);
        system('mkfifo', '-m', '0666', "$p/victim-fifo") == 0 or die;
        chown($NOBODY_UID, $NOBODY_GID, "$p/victim-fifo");
    }, before_run => sub {
        my ($t) = @_;
        my $p = $t->prefix;
        $w = ProfHostile::watch(files => [ "$p/victim", "$p/victim-old",
                                           "$p/victim-fifo" ],
                                dirs => [ $p ]);
    });
    my $p = $t->prefix;
    my $d = $t->dump_dir;
    my ($worker) = $t->worker_pids;

    # The names of its first profiles (numbered from 0), planted before
    # the first one closes; and links among older profiles.
    my $planted = symlink("$p/victim", "$d/nginx.$worker.0.pprof")
                  && symlink("$p/victim-missing", "$d/nginx.$worker.1.pprof")
                  && symlink("$p/victim-fifo", "$d/nginx.$worker.2.pprof");
    ok($planted, 'links planted under the names of the first 3 profiles '
       . 'before the first one closed') or diag("symlink: $!");
    write_file("$d/nginx.$worker.3.pprof", "planted\n", 0644, $NOBODY_UID,
               $NOBODY_GID);
    symlink("$p/victim-old", "$d/nginx.1.0.pprof") or die $!;
    mkdir("$d/nginx.1.1.pprof") or die $!;

    # Profiles 0 and 1 close at 3 and 6 s, 2 at the quit; 3 never.
    ProfWorkload::drive($t, '/burn', 7, 0.05);
    ok($t->stop, 'nginx quits');
    $w->stop;

    for my $seq (0 .. 2) {
        my $f = "$d/nginx.$worker.$seq.pprof";
        my @st = lstat($f);
        ok(@st && -f _ && !-l _ && ($st[2] & 07777) == 0600
           && $st[4] == $NOBODY_UID,
           "nginx.$worker.$seq.pprof is now a profile of the workers' user, "
           . 'mode 0600, not a link');
        ok(eval { decode_profile($f) }, "nginx.$worker.$seq.pprof decodes")
            or diag($@);
    }

    is(slurp("$p/victim"), "victim\n", 'the first link\'s target is as it '
       . 'was');
    is(slurp("$p/victim-old"), "old\n", 'the old profile link\'s target is '
       . 'as it was');
    ok(!-e "$p/victim-missing", 'a dangling link\'s target is not created');
    ok(-p "$p/victim-fifo", 'the FIFO is still there');
    is(slurp("$d/nginx.$worker.3.pprof"), "planted\n", 'a planted file '
       . 'under a name not written yet is not read or changed');
    ok(-l "$d/nginx.1.0.pprof", 'a link named like an old profile is left '
       . 'alone');
    ok(-d "$d/nginx.1.1.pprof", 'a directory named like an old profile is '
       . 'left alone');

    my @touched = grep { $_->[0] ne $p || $_->[2] =~ /^victim/ } $w->events;
    ok(!@touched, 'no planted target was opened, read, written, created '
       . 'or changed') or diag('  ' . join("\n  ", map { "@$_" } @touched));

    $t->ok_no_worker_died('planted names');
};


subtest 'the directory nginx makes: the workers\' user\'s, mode 0700; '
        . 'an existing one is left as it is' => sub {
    my $t = start_with_dump('%%PREFIX%%/made');
    my ($worker) = $t->worker_pids;
    my $dir = $t->prefix . '/made';
    my @st = stat($dir);
    ok(-d _, 'the missing directory was made');
    is(sprintf('%o', $st[2] & 07777), '700', 'mode 0700');
    is($st[4], $NOBODY_UID, 'owned by the workers\' user');
    ProfWorkload::drive($t, '/burn', 1.2, 0.05);
    my ($f) = $t->wait_for_files(qr/^nginx\.$worker\.0\.pprof$/, 1, 10, $dir);
    ok($f, 'a profile is written in it');
    @st = stat($f // '/');
    is(sprintf('%o', $st[2] & 07777), '600', 'the profile has mode 0600');
    is($st[4], $NOBODY_UID, 'the profile is the workers\' user\'s');
    ok($t->stop, 'nginx quits');

    my $e = start_with_dump('%%PREFIX%%/existing', setup => sub {
        my ($e) = @_;
        mkdir($e->prefix . '/existing');
        chown($NOBODY_UID, $NOBODY_GID, $e->prefix . '/existing');
        chmod(0751, $e->prefix . '/existing');
    });
    @st = stat($e->prefix . '/existing');
    is(sprintf('%o', $st[2] & 07777), '751', 'an existing directory keeps its '
       . 'mode');
    ok($e->stop, 'nginx quits');
};


# Past a minute (but under a sanitizer): still one message a process,
# nothing written.

my $until = $long_start + $LONG_S;
while (time() < $until) {
    $_->{t}->get('/burn') for @LONG;
    wait_until(sub { time() >= $until }, 3, 0.2);
}

for my $l (@LONG) {
    my $t = $l->{t};
    ok($t->stop, "$l->{name}: nginx quits after "
       . sprintf('%.0f', time() - $long_start) . ' s');
    $t->ok_no_worker_died($l->{name});

    my $by = messages_by_pid($t);
    my @twice = grep { @{ $by->{$_} } > 1 } keys %$by;
    ok(!@twice, "$l->{name}: each process said it once (pids "
       . join(', ', map { "$_: " . scalar(@{ $by->{$_} }) } sort keys %$by)
       . ')') or diag('  ' . join("\n  ", map { @{ $by->{$_} } } @twice));

    my ($c) = grep { $_->{pid} == $l->{worker} }
              ProfLog::exit_counters($t->error_log);
    ok($c && $c->{profiles_exported} == 0 && $c->{export_failures} == 0,
       "$l->{name}: the worker wrote no profile and tried none")
        or diag(explain($c));

    if ($l->{watch}) {
        $l->{watch}->stop;
        my @ev = $l->{watch}->events;
        ok(!@ev, "$l->{name}: nothing was opened or created there")
            or diag('  ' . join("\n  ", map { "@$_" } @ev));
    }
}

my $target = $LONG[0]{t}->prefix . '/target';
opendir(my $dh, $target) or die;
my @in_target = sort grep { !/^\.\.?$/ } readdir($dh);
closedir($dh);
is_deeply(\@in_target, ['existing'], 'the link\'s target directory holds '
          . 'only what it held');
is(slurp("$target/existing"), "existing\n", 'and its file is unchanged');
is(slurp($LONG[1]{t}->prefix . '/dump-file'), "a file\n",
   'the file in place of the directory is unchanged');

done_testing();
