#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Processes replaced under the profiler: a worker killed with SIGKILL is
# respawned by the master and the new worker profiles, the other worker
# goes on; a binary upgrade (USR2: a new master with the same binary and
# module, WINCH: the old workers stop, QUIT: the old master goes) leaves
# the new workers profiling. No crash.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use ProfFiles;
use ProfNginx;
use ProfPprof;
use ProfProc;
use ProfWait;

# env: under t/sanitizer-nginx, the new binary of an upgrade needs the
# sanitizer runtime too (nginx passes only these variables to it).
my $MAIN = "env LD_PRELOAD;\nenv ASAN_OPTIONS;\nenv UBSAN_OPTIONS;\n";

my $HTTP = <<'EOF';
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;

    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
        location /burn { profiling_burn 5ms; }
    }
EOF

sub start_nginx {
    my $t = ProfNginx->new(workers => 2);
    $t->write_config($HTTP, main => $MAIN . $t->core_main);
    $t->run;
    return $t;
}

# A test: a worker writes profiles (at least one, sequence $from or later,
# within 5 s) of its own samples.
sub ok_profiles_of {
    my ($t, $pid, $from, $name) = @_;
    my @f;
    wait_until(sub {
        @f = grep { /\.(\d+)\.pprof$/ && $1 >= $from }
             profile_files($t->dump_dir, qr/^nginx\.$pid\.\d+\.pprof$/);
        return @f;
    }, 5);
    my $p = @f ? eval { decode_profile($f[0]) } : undef;
    my @pids = $p ? map { sample_labels($p, $_)->{'thread id'}{num} // 0 }
                    @{ $p->{sample} } : ();
    ok($p && @pids && !grep({ $_ != $pid } @pids),
       "$name: worker $pid writes profiles of its own samples ("
       . ($f[0] // 'none') =~ s{.*/}{}r . ')');
}

# Requests for both workers, between steps.
sub serve {
    my ($t) = @_;
    my $ok = grep { ($t->get('/burn')->{status} // 0) == 200 } 1 .. 20;
    return $ok == 20;
}


subtest 'kill -9 of a worker' => sub {
    my $t = start_nginx();
    my @workers = $t->worker_pids;
    my ($victim, $other) = @workers;
    ok(serve($t), 'nginx serves');
    my @before = profile_files($t->dump_dir,
                               qr/^nginx\.$other\.\d+\.pprof$/);

    kill('KILL', $victim);
    my @new;
    ok(wait_until(sub {
        @new = grep { $_ != $other } $t->worker_pids;
        return @new == 1 && $new[0] != $victim;
    }, 10), "the master respawned worker $victim as @new");

    ok(serve($t), 'nginx serves');
    ok_profiles_of($t, $new[0], 0, 'respawned') if @new == 1;
    ok(process_alive($other), "the other worker ($other) lives on");
    ok_profiles_of($t, $other, scalar(@before) + 1, 'the other worker');

    ok($t->stop, 'nginx quits');
    my @deaths = $t->worker_deaths;
    ok(@deaths == 1 && $deaths[0] =~ /process $victim exited on signal 9/,
       'the only worker death is the kill')
        or diag(join("\n", map { "  $_" } @deaths));
    ok(!$t->core_files, 'no core file');
};


subtest 'binary upgrade: USR2, WINCH, QUIT' => sub {
    my $t = start_nginx();
    my $old_master = $t->master_pid;
    my @old = $t->worker_pids;
    ok(serve($t), 'nginx serves');

    kill('USR2', $old_master);
    my ($new_master, @new);
    ok(wait_until(sub {
        $new_master = ProfFiles::read_pid($t->pid_file);
        return 0 unless $new_master && $new_master != $old_master
                        && -e $t->pid_file . '.oldbin';
        @new = grep { proc_cmdline($_) =~ /worker process/ }
               children_of($new_master);
        return @new == 2;
    }, 15), 'USR2: a new master (' . ($new_master // 'none')
       . ") runs with its workers (@new)");

    kill('WINCH', $old_master);
    ok(wait_until(sub { !grep { process_alive($_) } @old }, 10),
       "WINCH: the old workers (@old) exit");
    ok(serve($t), 'the new workers serve');

    kill('QUIT', $old_master);
    ok(wait_until(sub { !process_alive($old_master) }, 10),
       'QUIT: the old master exits');

    $t->adopt_master($new_master);
    ok(serve($t), 'nginx serves');
    ok_profiles_of($t, $_, 1, 'after the upgrade') for @new;
    # (Its profiler process writes it after the worker is gone, at its
    # own pace.)
    for my $w (@old) {
        my @f;
        wait_until(sub {
            @f = profile_files($t->dump_dir, qr/^nginx\.$w\.\d+\.pprof$/);
        }, 15);
        ok(@f && eval { decode_profile($f[-1]) },
           "old worker $w left its last profile as it quit");
    }

    ok($t->stop, 'nginx quits');
    $t->ok_no_worker_died('binary upgrade');
    unlike($t->error_log, qr/\[(?:alert|emerg|crit)\]/,
           'no alert in the error log');
};

done_testing();
