#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# ./configure accepts an nginx whose event loop the wrapper reproduces,
# decided from the source it is given, and refuses any other naming the
# function that differs; a tree of headers only is decided on its
# version; arguments without --with-compat are warned about. The nginx
# arguments' compiler and options make the checks and the build, with
# pkg-config's flags and nanopb under their directories; a compiler of
# another C library (musl-gcc) never takes the system's.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use POSIX ();
use Test::More;

my $TOP = "$FindBin::Bin/..";
my ($ARCHIVE) = sort glob("$TOP/../shared/fixtures/nginx-src/nginx-*.tar.gz");
plan(skip_all => 'no nginx source in ../shared/fixtures/nginx-src')
    unless $ARCHIVE;

my $dir = tempdir('configure-XXXXXX', TMPDIR => 1, CLEANUP => 1);
system('tar', '-xzf', $ARCHIVE, '-C', $dir) == 0 or die "tar $ARCHIVE";
my ($pristine) = glob("$dir/nginx-*");

# A copy of the tree with $edit applied to the text of $file.
sub variant {
    my ($name, $file, $edit) = @_;
    my $copy = "$dir/$name";
    system('cp', '-a', $pristine, $copy) == 0 or die "cp";
    my $path = "$copy/$file";
    open(my $in, '<', $path) or die "$path: $!";
    my $text = do { local $/; <$in> };
    close($in);
    $edit->($text) or die "$name: the edit did not apply to $file";
    open(my $out, '>', $path) or die "$path: $!";
    print $out $text;
    close($out);
    return $copy;
}

sub configure {
    my ($tree, $args) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if ($pid == 0) {
        open(STDERR, '>&', \*STDOUT);
        chdir($TOP) or die "$TOP: $!";
        exec('./configure', "--with-nginx=$tree", "--builddir=$dir/build",
             "--nginx-configure-args=$args") or POSIX::_exit(127);
    }
    my $out = do { local $/; <$fh> } // '';
    close($fh);
    return ($? >> 8, $out);
}

my ($rc, $out) = configure($pristine, '--with-compat');
is($rc, 0, "the release's own source is accepted") or diag($out);
like($out, qr/event loop wrapper reproduces this nginx\.\.\. yes/,
     'and configure says why');
unlike($out, qr/--with-compat/, 'no warning with --with-compat');

my $swapped = variant('swapped', 'src/event/ngx_event.c', sub {
    $_[0] =~ s/(\n    ngx_event_expire_timers\(\);\n)(\n    ngx_event_process_posted\(cycle, &ngx_posted_events\);\n)/$2$1/
});
($rc, $out) = configure($swapped, '--with-compat');
isnt($rc, 0, 'timers run after the posted events: refused');
like($out, qr/ngx_process_events_and_timers\(\) in \S+ngx_event\.c differs/,
     'naming the function that differs') or diag($out);

my $timers = variant('timers', 'src/event/ngx_event_timer.c', sub {
    $_[0] =~ s/\n        ev->timedout = 1;\n/\n/
});
($rc, $out) = configure($timers, '--with-compat');
isnt($rc, 0, 'an expired timer handled otherwise: refused');
like($out, qr/ngx_event_expire_timers\(\) in \S+ngx_event_timer\.c differs/,
     'naming it') or diag($out);

my $posted = variant('posted', 'src/event/ngx_event_posted.c', sub {
    $_[0] =~ s/\n        ngx_delete_posted_event\(ev\);\n/\n/
});
($rc, $out) = configure($posted, '--with-compat');
isnt($rc, 0, 'a posted event left queued: refused');
like($out, qr/ngx_event_process_posted\(\) in \S+ngx_event_posted\.c differs/,
     'naming it') or diag($out);

# OpenResty's bundle: one more queue drained after the posted events.
my $delayed = variant('delayed', 'src/event/ngx_event.c', sub {
    $_[0] =~ s/(\n    ngx_event_process_posted\(cycle, &ngx_posted_events\);\n)(\}\n)/$1
    while (!ngx_queue_empty(&ngx_posted_delayed_events)) {
        \/* the events of ngx.sleep(0) *\/
        ngx_event_process_posted(cycle, &ngx_posted_delayed_events);
    }
$2/
});
($rc, $out) = configure($delayed, '--with-compat');
is($rc, 0, 'a queue of delayed events after the posted ones (OpenResty): '
   . 'accepted') or diag($out);

my $other = variant('other', 'src/event/ngx_event.c', sub {
    $_[0] =~ s/(\n    ngx_event_process_posted\(cycle, &ngx_posted_events\);\n)(\}\n)/$1    ngx_event_process_posted(cycle, &ngx_posted_next_events);\n$2/
});
($rc, $out) = configure($other, '--with-compat');
isnt($rc, 0, 'any other queue after the posted events: refused');
like($out, qr/ngx_process_events_and_timers\(\) in \S+ngx_event\.c differs/,
     'naming the function') or diag($out);

# A tree of headers only, as Debian's nginx-dev.
sub headers_only {
    my ($name, $version) = @_;
    my $tree = "$dir/$name";
    system('cp', '-a', $pristine, $tree) == 0 or die "cp";
    system("find '$tree/src' -name '*.c' -delete") == 0 or die "find";
    my $h = "$tree/src/core/nginx.h";
    open(my $in, '<', $h) or die "$h: $!";
    my $text = do { local $/; <$in> };
    close($in);
    $text =~ s/(#define NGINX_VERSION +)"[0-9.]+"/$1"$version"/ or die;
    open(my $out, '>', $h) or die "$h: $!";
    print $out $text;
    close($out);
    return $tree;
}

($rc, $out) = configure(headers_only('h126', '1.26.3'), '--with-compat');
is($rc, 0, 'headers only, 1.26.3 (Debian 13): accepted on its version')
    or diag($out);
($rc, $out) = configure(headers_only('h121', '1.21.6'), '--with-compat');
isnt($rc, 0, 'headers only, 1.21.6: refused');
like($out, qr/no src\/event\/ngx_event\.c .* 1\.21\.6 is not one whose sources were checked/s,
     'saying why') or diag($out);

# No arguments given, an installed nginx of the same version: its own.
{
    my ($version) = $pristine =~ /nginx-([0-9.]+)$/;
    mkdir("$dir/bin") or die;
    open(my $fh, '>', "$dir/bin/nginx") or die;
    print $fh "#!/bin/sh\necho 'nginx version: nginx/$version' >&2\n"
              . "[ \"\$1\" = -V ] && echo 'configure arguments: "
              . "--with-compat --with-threads' >&2\nexit 0\n";
    close($fh);
    chmod(0755, "$dir/bin/nginx");
    my $out = `cd '$TOP' && PATH='$dir/bin':\$PATH ./configure --with-nginx='$pristine' --builddir='$dir/build' 2>&1`;
    like($out, qr/the nginx arguments of \S+\/bin\/nginx \(nginx \Q$version\E\): --with-compat --with-threads/,
         'no arguments given: those of the installed nginx of this version')
        or diag($out);
    my $args = do { local (@ARGV, $/) = "$dir/build/nginx-args"; <> };
    is($args, "--with-compat --with-threads\n",
       'and nginx\'s configure runs with them');
}

# nginx -V's words as given: a module added by a path relative to the
# tree (as OpenResty's are) found from the build directory, nginx's own
# compiler options kept before the module's.
{
    mkdir("$dir/extmod") or die;
    open(my $fh, '>', "$dir/extmod/config") or die;
    print $fh "ngx_addon_name=ngx_http_extmod_module\n"
              . "HTTP_MODULES=\"\$HTTP_MODULES\"\n";
    close($fh);
    my ($rc, $out) = configure($pristine, "--with-compat "
        . "--add-module=../extmod --with-cc-opt='-DPROF_A=1 -DPROF_B=2'");
    is($rc, 0, 'configured with a relative module path and quoted options')
        or diag($out);
    my $log = `cd '$dir/build' && ./configure-nginx.sh '$dir/build/n' 2>&1`;
    is($? >> 8, 0, 'nginx\'s configure runs with them') or diag($log);
    like($log, qr{adding module in \Q$pristine\E/\.\./extmod},
         'the module is found relative to the nginx tree') or diag($log);
    my $mk = do { local (@ARGV, $/) = "$dir/build/n/objs/Makefile"; <> };
    like($mk // '', qr/-DPROF_A=1 -DPROF_B=2 -g -O2/,
         'nginx\'s compiler options come before the module\'s');
}


# The nginx arguments' compiler and options make every check and the
# build (an nginx built with another compiler, its libraries under a
# prefix of its own): nanopb found under their -I and -L directories
# before the system's; a library's pkg-config file gives its flags.
{
    my $log = "$dir/cc.log";
    open(my $fh, '>', "$dir/wrapped-cc") or die;
    print $fh "#!/bin/sh\necho \"\$*\" >> '$log'\nexec cc \"\$@\"\n";
    close($fh);
    chmod(0755, "$dir/wrapped-cc");
    my $pb = "$dir/nanopb-prefix";
    mkdir($_) or die "$_: $!" for $pb, "$pb/include", "$pb/lib", "$dir/pc";
    system('cp', glob('/usr/include/pb*.h'), "$pb/include") == 0 or die;
    system('cp', '/usr/lib/x86_64-linux-gnu/libprotobuf-nanopb.a', "$pb/lib")
        == 0 or die;
    open($fh, '>', "$dir/pc/libuv.pc") or die;
    print $fh "Name: libuv\nDescription: test\nVersion: 1.0\n"
              . "Libs: -L$dir/uv-lib -luv\nCflags: -DPROF_UV_PC=1\n";
    close($fh);
    local $ENV{PKG_CONFIG_PATH} = "$dir/pc";
    my ($rc, $out) = configure($pristine, "--with-compat "
        . "--with-cc=$dir/wrapped-cc --with-cc-opt='-I$pb/include' "
        . "--with-ld-opt='-L$pb/lib'");
    is($rc, 0, 'configured with the nginx arguments\' compiler and '
       . 'directories') or diag($out);
    like($out, qr/the compiler of the nginx arguments: \Q$dir\E\/wrapped-cc/,
         'their --with-cc is the compiler');
    my $calls = do { local (@ARGV, $/) = $log; <> } // '';
    like($calls, qr/-I\Q$pb\E\/include/, 'which compiled the checks, with '
         . 'their --with-cc-opt');
    like($calls, qr/-L\Q$pb\E\/lib/, 'and their --with-ld-opt');
    like($out, qr/checking for nanopb runtime\.\.\. \Q$pb\E\/lib\/libprotobuf-nanopb\.a/,
         'nanopb under their directories, not the system\'s') or diag($out);
    my $mk = do { local (@ARGV, $/) = "$dir/build/config.mk"; <> } // '';
    like($mk, qr/^CC = \Q$dir\E\/wrapped-cc$/m, 'config.mk builds with it');
    like($mk, qr/^PROFILING_LIBS = .*-L\Q$dir\E\/uv-lib -luv /m,
         'libuv linked as its pkg-config file says');
    like($mk, qr/^EXTRA_CFLAGS = .*-DPROF_UV_PC=1/m,
         'and compiled with its flags');
}

# A compiler of another C library (Debian's musl-gcc): the system's
# libraries and pkg-config files are glibc's, never taken; what is
# missing is named with Alpine's package too; a linker that makes no
# .eh_frame_hdr (Debian's musl-gcc wrapper) is refused with the fix.
SKIP: {
    skip('no musl-gcc (Debian package musl-tools)', 6)
        unless -x '/usr/bin/musl-gcc';
    my ($rc, $out) = configure($pristine, '--with-compat --with-cc=musl-gcc');
    isnt($rc, 0, 'musl-gcc without musl-built libraries: not configured');
    like($out, qr/checking the C library of musl-gcc\.\.\. not glibc/,
         'its C library told');
    like($out, qr/libuv not found with musl-gcc .*\(Alpine: libuv-dev\)/,
         'a missing library named with its Alpine package');
    like($out, qr/nanopb runtime not found .*the system's is built for its own C library, not for musl-gcc's/,
         'the system\'s glibc nanopb refused');
    like($out, qr/warning: no libgcc_s for musl-gcc \(Alpine: apk add libgcc\)/,
         'libgcc_s: linked where it is, said what changes without');
    like($out, qr/musl-gcc links without \.eh_frame_hdr.*-Wl,--eh-frame-hdr/,
         'a link without .eh_frame_hdr refused, with the fix');
}

# Cross-compiling with the machine's own compiler: refused, said why.
{
    my ($machine) = (`gcc -dumpmachine` // '') =~ /^([^-\s]+)/;
    $machine //= 'x86_64';
    my $other = $machine eq 'aarch64' ? 'x86_64-linux-gnu'
                                      : 'aarch64-linux-gnu';
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if ($pid == 0) {
        open(STDERR, '>&', \*STDOUT);
        chdir($TOP) or die "$TOP: $!";
        $ENV{CC} = 'gcc';
        exec('./configure', "--host=$other",
             "--with-nginx=$pristine", "--builddir=$dir/build-host",
             '--nginx-configure-args=--with-compat') or POSIX::_exit(127);
    }
    my $host_out = do { local $/; <$fh> } // '';
    close($fh);
    isnt($? >> 8, 0, '--host with a compiler for another machine: refused');
    like($host_out, qr/--host=\Q$other\E, but gcc targets \Q$machine\E/,
         'the compiler and its target named') or diag($host_out);
}

# Cross-compiling where the host's programs cannot run (no qemu in
# binfmt_misc): refused before nginx's configure, saying how to fix it.
# The machine's own registrations are hidden by a binfmt_misc of a new
# user namespace's (Linux 6.7 and later), empty.
SKIP: {
    my ($machine) = (`uname -m` // '') =~ /^(\S+)/;
    my $cross = ($machine // '') eq 'aarch64' ? 'x86_64-linux-gnu'
                                              : 'aarch64-linux-gnu';
    my $empty = 'mount -t binfmt_misc none /proc/sys/fs/binfmt_misc'
                . ' && ! ls /proc/sys/fs/binfmt_misc | grep -q qemu';
    skip("no $cross-gcc (ci/arm64-deps installs it)", 3)
        unless system("command -v $cross-gcc >/dev/null 2>&1") == 0;
    skip('no binfmt_misc of its own in a user namespace (Linux < 6.7)', 3)
        unless system('unshare', '-Urm', 'sh', '-c',
                      "$empty 2>/dev/null") == 0;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if ($pid == 0) {
        open(STDERR, '>&', \*STDOUT);
        chdir($TOP) or die "$TOP: $!";
        exec('unshare', '-Urm', 'sh', '-c',
             "$empty && exec ./configure --host=$cross "
             . "--with-nginx=$pristine --builddir=$dir/build-cross "
             . '--nginx-configure-args=--with-compat')
            or POSIX::_exit(127);
    }
    my $cross_out = do { local $/; <$fh> } // '';
    close($fh);
    isnt($? >> 8, 0, "--host=$cross where its programs do not run: "
                     . 'refused');
    like($cross_out, qr/--host=\Q$cross\E: its programs do not run on this/,
         'said why') or diag($cross_out);
    like($cross_out, qr/qemu-user-static binfmt-support/,
         'and how to fix it') or diag($cross_out);
}

($rc, $out) = configure($pristine, '--with-threads');
is($rc, 0, 'arguments without --with-compat: configured');
like($out, qr/warning: the nginx arguments lack --with-compat/,
     'with a warning') or diag($out);

done_testing();
