#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# Native stacks whole, whatever the C library: under gzip, proxying and
# static files (zlib's code, nginx's, the C library's system calls), with
# a traceparent on every request:
# - the CPU samples' stacks end where the program starts, not at an
#   unwind stop (at the nginx binary's _start, when it has a symbol table
#   to say so), through the worker's start (ngx_spawn_process) and main;
# - a location whose C library calls (pread, memcpy, getppid, malloc,
#   free) all come from one function of the test module has that
#   function as the first frame out of the library;
# - any sample whose leaf is in the C library keeps, below the library's
#   frames, a caller that called into it (a call through the PLT or a
#   pointer just before its return address), as musl's libc, built
#   without unwind tables, makes hard;
# - the requests' CPU carries their span ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);

use ProfCommand qw(run_capture run_stdout);
use ProfEnv;
use ProfHTTP;
use ProfHotspots;
use ProfNginx;
use ProfPprof;
use ProfWorkload;

my $t = ProfNginx->new(workers => 1);
my $backend = ProfHTTP::free_port();

my $html = $t->prefix . '/html';
mkdir($html) or die;
chmod(0755, $html);
ProfWorkload::write_words_file("$html/big.txt", 1_000_000);
open(my $fh, '>', "$html/small.txt") or die;
print $fh "x" x 2000;
close($fh);
chmod(0644, "$html/big.txt", "$html/small.txt");

$t->write_config(<<"EOF");
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_interval 2ms;
    profiling_period 10m;

    server {
        listen 127.0.0.1:%%PORT%%;
        root %%PREFIX%%/html;
        gzip on;
        gzip_types text/plain;
        gzip_min_length 0;

        location /proxy/ { proxy_pass http://127.0.0.1:$backend/; }
        location /libc { profiling_burn_libc 20ms; gzip off; }
    }

    server {
        listen 127.0.0.1:$backend;
        root %%PREFIX%%/html;
    }
EOF
$t->run;

# /libc's requests carry a span id of their own: its samples are found by
# that label, not by their stacks.
my %SPAN = (any => '1234123412341234', libc => 'abcdabcdabcdabcd');
my %U64 = map { $_ => ProfHotspots::hex_to_u64($SPAN{$_}) } keys %SPAN;
my ($served, $total) = (0, 0);
my $end = time() + 6;
while (time() < $end) {
    for my $path ('/big.txt', '/proxy/big.txt', '/proxy/small.txt',
                  '/small.txt', '/libc')
    {
        my $r = $t->http->get('http://127.0.0.1:' . $t->port . $path,
            { headers => { 'accept-encoding' => 'gzip',
                           traceparent => ProfHotspots::traceparent(
                               $SPAN{ $path eq '/libc' ? 'libc' : 'any' }) }
            });
        $total++;
        $served++ if $r->{status} == 200;
    }
}
is($served, $total, "$served requests answered (gzip, proxied, static)");

$t->ok_no_worker_died('under the load');
ok($t->stop, 'nginx quits');

my @p = ProfPprof::decode_dump_dir($t->dump_dir);
ok(@p, scalar(@p) . ' profiles');

# The nginx binary's _start, when its symbols name it.
my $nginx = ProfEnv::nginx_real();
my (undef, $nm) = run_capture('nm', $nginx);
my $named_start = ($nm // '') =~ /\s_start$/m;

# Whether the instruction that ends at $ret (a virtual address of $file)
# is a call that may lead into another object: "call rel32" ("bl" on
# AArch64) to the PLT, or a call through a pointer (a GOT slot, as code built with -fno-plt calls;
# a callback, such as zlib's zfree, that calls the library in turn).
my (%sections, %machine);
sub calls_out {
    my ($file, $ret) = @_;
    $sections{$file} //= [
        map { /\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)/
                  ? [ $1, hex($2), hex($3), hex($4) ] : () }
            split /\n/, (run_stdout('readelf', '-SW', $file))[1] // '' ];
    my $in = sub {
        my ($addr, $re) = @_;
        return grep { $_->[0] =~ $re && $_->[1] && $addr >= $_->[1]
                      && $addr < $_->[1] + $_->[3] } @{ $sections{$file} };
    };
    my ($text) = $in->($ret - 1, qr/^\./) or return 0;
    $machine{$file} //= (run_stdout('readelf', '-h', $file))[1]
                        =~ /Machine:\s+AArch64/ ? 'aarch64' : 'x86-64';
    if ($machine{$file} eq 'aarch64') {
        # bl to the PLT; blr, blraa and the like through a register
        return 0 if $ret - 4 < $text->[1];
        open(my $fh, '<:raw', $file) or return 0;
        my $word = '';
        seek($fh, $ret - 4 - $text->[1] + $text->[2], 0)
            && read($fh, $word, 4);
        close($fh);
        return 0 unless length($word) == 4;
        my $insn = unpack('V', $word);
        return 1 if ($insn & 0xfffffc1f) == 0xd63f0000
                    || ($insn & 0xfefff800) == 0xd63f0800;
        return 0 unless ($insn & 0xfc000000) == 0x94000000;
        my $imm = $insn & 0x3ffffff;
        $imm -= 1 << 26 if $imm & (1 << 25);
        return scalar $in->($ret - 4 + 4 * $imm, qr/^\.plt/);
    }
    return 0 if $ret - 7 < $text->[1];
    open(my $fh, '<:raw', $file) or return 0;
    my $code = '';
    seek($fh, $ret - 7 - $text->[1] + $text->[2], 0) && read($fh, $code, 7);
    close($fh);
    return 0 unless length($code) == 7;
    my @b = unpack('C7', $code);
    return 1 if $b[2] == 0xe8
                && $in->($ret + unpack('l<', substr($code, 3, 4)),
                         qr/^\.plt/);
    # ff /2, by its ModRM byte's length (as the unwinder reads it too)
    for my $len (2 .. 7) {
        my ($op, $modrm) = @b[7 - $len, 8 - $len];
        next unless $op == 0xff && (($modrm >> 3) & 7) == 2;
        my ($mod, $rm) = ($modrm >> 6, $modrm & 7);
        my $sib = $rm == 4;
        my $want = $mod == 3 ? 2 : $mod == 1 ? 3 + $sib
                 : $mod == 2 ? 6 + $sib : $rm == 5 ? 6
                 : $sib && $len > 2 && ($b[9 - $len] & 7) == 5 ? 7
                 : 2 + $sib;
        return 1 if $len == $want;
    }
    return 0;
}

# The C library, and a sanitizer's runtime, whose interceptors stand
# between nginx and it (t/sanitizer-nginx).
my $LIBRARY = qr{/(?:libc[.-][^/]*|ld-musl[^/]*|libasan[^/]*|libubsan[^/]*)$};

my ($cpu, $stopped, $at_start, $through, $libc_leaf, $libc_kept) = (0) x 6;
my ($known_leaf, $known_kept) = (0, 0);
my (%missed, %bottoms);
for my $p (@p) {
    ProfPprof::index_profile($p);
    my $i = value_index($p, 'cpu-time');
    my %mapping = map { $_->{id} => $_ } @{ $p->{mapping} // [] };
    my $file_of = sub {
        my $loc = $p->{_loc}{ $_[0] } or return '';
        my $m = $mapping{ $loc->{mapping_id} // 0 } or return '';
        return pstr($p, $m->{filename});
    };
    for my $s (@{ $p->{sample} }) {
        my $v = $s->{value}[$i] // 0;
        next unless $v > 0;
        my @loc = @{ $s->{location_id} };
        my @names = map { (function_names($p, $_))[-1] } @loc;
        my @all = map { function_names($p, $_) } @loc;      # inlined too
        my $l = sample_labels($p, $s);
        my $span = $l->{'span id'} ? ProfHotspots::u64($l->{'span id'}{num})
                                   : '';
        $cpu += $v;
        $stopped += $v if $names[-1] eq '[unwind stopped]';
        $at_start += $v if $names[-1] eq '_start';
        # the frames between: through the worker's start, to main
        $through += $v if grep({ $_ eq 'ngx_spawn_process' } @all)
                          && grep({ $_ eq 'main' } @all);
        $bottoms{ join(' < ', @names[($#names > 2 ? $#names - 2 : 0)
                                     .. $#names]) } += $v;

        next unless $file_of->($loc[0]) =~ $LIBRARY;
        $libc_leaf += $v;
        # The outermost of the C library's frames from the leaf on.
        my $k = 0;
        $k++ while $k + 1 < @loc && $file_of->($loc[$k + 1]) =~ $LIBRARY;
        # Where the caller is known: /libc's calls, all from one function.
        if ($span eq $U64{libc}) {
            $known_leaf += $v;
            $known_kept += $v
                if ($names[$k + 1] // '') eq 'ngx_http_profiling_burn_libc';
        }
        # (a caller's location is its return address - 1)
        if ($k + 1 < @loc && $names[$k + 1] !~ /^\[/
            && calls_out($file_of->($loc[$k + 1]),
                         $p->{_loc}{ $loc[$k + 1] }{address} + 1))
        {
            $libc_kept += $v;
        } else {
            my $last = $k + 1 < $#names ? $k + 1 : $#names;
            $missed{ join(' < ', @names[0 .. $last]) } += $v;
        }
    }
}

ok($cpu > 0.5e9, sprintf('%.0f ms of CPU sampled', $cpu / 1e6));

# Every request (the backend's too: proxy_pass passes the header) carried
# the traceparent: the CPU of frames that run only for a request carries
# its span id.
my ($request_cpu, $with_ids) = (0, 0);
for my $s (ProfHotspots::hotspot_samples(@p)) {
    next unless ProfHotspots::stack_has($s, qr/^(?:ngx_http_core_run_phases
        |ngx_http_output_filter|ngx_http_upstream_\w+)$/x);
    $request_cpu += $s->{cpu};
    $with_ids += $s->{cpu}
        if defined $s->{span} && grep { $s->{span} eq $_ } values %U64;
}
ok($with_ids >= 0.95 * $request_cpu && $request_cpu > 0.2e9,
   sprintf('%.1f%% of the requests\' CPU (%.0f ms) carries their span id '
           . '(95%% at least)', 100 * $with_ids / ($request_cpu || 1),
           $request_cpu / 1e6));
ok($stopped <= 0.05 * $cpu,
   sprintf('%.1f%% of the CPU in stacks that stopped unwinding (5%% at '
           . 'most)', 100 * $stopped / ($cpu || 1)));
SKIP: {
    skip("$nginx has no symbol table to name _start", 1) unless $named_start;
    ok($at_start >= 0.95 * $cpu,
       sprintf('%.1f%% of the CPU in stacks that end at _start (95%% at '
               . 'least)', 100 * $at_start / ($cpu || 1)))
        or diag(join("\n", map { sprintf('%6.1f ms  %s', $bottoms{$_} / 1e6,
                                          $_) }
                           grep { defined }
                           (sort { $bottoms{$b} <=> $bottoms{$a} }
                            keys %bottoms)[0 .. 4]));
}
ok($through >= 0.95 * $cpu,
   sprintf('%.1f%% of the CPU in stacks through ngx_spawn_process and main '
           . '(95%% at least)', 100 * $through / ($cpu || 1)));
ok($known_leaf > 0.2e9,
   sprintf('%.0f ms of /libc\'s CPU (pread, memcpy, getppid, malloc, free) '
           . 'with its leaf in the C library', $known_leaf / 1e6));
ok($known_kept >= 0.9 * $known_leaf,
   sprintf('%.1f%% of it has ngx_http_profiling_burn_libc, which made all '
           . 'its calls, as the first frame out of the C library (90%% at '
           . 'least)', 100 * $known_kept / ($known_leaf || 1)));
ok($libc_leaf > 0.02 * $cpu,
   sprintf('%.1f%% of the CPU with its leaf in the C library',
           100 * $libc_leaf / ($cpu || 1)));
ok($libc_kept >= 0.9 * $libc_leaf,
   sprintf('%.1f%% of that keeps the caller that called into the C '
           . 'library (90%% at least)', 100 * $libc_kept / ($libc_leaf || 1)))
    or diag(join("\n", map { sprintf('%6.1f ms  %s', $missed{$_} / 1e6, $_) }
                       grep { defined }
                       (sort { $missed{$b} <=> $missed{$a} } keys %missed)
                       [0 .. 9]));

done_testing();
