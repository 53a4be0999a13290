# SPDX-License-Identifier: BSD-2-Clause
package ProfEnv;

# What the tests and benchmarks run against: where the tree and the build
# are (t/, shared/profiler's profile.proto, the built modules), the nginx
# binary under test and what it was built with (nginx -V: version,
# configure arguments, modules built in), the modules beside it (Debian's
# packaged modules, the nginx-datadog fixture) and the third-party engines
# it can run (lua, njs, brotli; OpenResty's luajit2 built from its
# fixture).
#
#   ProfEnv::nginx_has('--with-http_v3_module') or plan skip_all => ...;
#   my $so = ProfEnv::module_path('ngx_http_profiling_module');
#
# Not exported: call them as ProfEnv::x.

use strict;
use warnings;

use Carp qw(croak);
use Cwd ();
use File::Basename qw(dirname);
use File::Spec;

use ProfCommand qw(run_capture);


# Where things are: t/ is the parent of this file's directory.

my $T_DIR = Cwd::realpath(File::Spec->rel2abs(dirname(dirname(__FILE__))));
my $TOP_DIR = dirname($T_DIR);

sub t_dir     { $T_DIR }
sub top_dir   { $TOP_DIR }
sub proto_dir { File::Spec->catdir($TOP_DIR, 'shared', 'profiler') }

sub build_dir {
    my $b = $ENV{PROFILING_BUILD};
    $b = File::Spec->catdir($T_DIR, '..', 'build') unless defined $b
                                                         && length $b;
    return File::Spec->rel2abs($b);
}

# A tool for code the nginx that runs loads: 'cc', the compiler the
# module was built with, or one of binutils ('objcopy'), by the prefix of
# a cross build (build_dir()'s config.mk: CC, TOOLS).
sub build_tool {
    my ($name) = @_;
    my %mk;
    if (open(my $fh, '<', File::Spec->catfile(build_dir(), 'config.mk'))) {
        while (my $line = <$fh>) {
            $mk{$1} = $2 if $line =~ /^(CC|TOOLS) = (.*?)\s*$/;
        }
        close($fh);
    }
    return $mk{CC} || 'gcc' if $name eq 'cc';
    return ($mk{TOOLS} // '') . $name;
}

# A module built by the tests, or any module by its path.
sub module_path {
    my ($name) = @_;
    return $name if $name =~ m{/};
    return File::Spec->catfile(build_dir(), 'test', "$name.so");
}


# The nginx under test.

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
    $NGINX_V //= (run_capture(nginx_binary(), '-V'))[1];
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

# Whether it was configured with $arg (e.g. "--with-http_v3_module", or
# a module added: "lua-nginx-module").
sub nginx_has {
    my ($arg) = @_;
    my ($args) = nginx_v() =~ /^configure arguments: (.*)$/m;
    return defined $args && index($args, $arg) >= 0;
}

# Whether the nginx that runs is Debian's (the one its packaged modules
# and the fixtures are built for).
sub _is_debian_nginx {
    return (Cwd::realpath(nginx_real()) // '')
           eq guest_root() . '/usr/sbin/nginx';
}

# Where another architecture's nginx (Debian's arm64 one, ci/arm64-deps)
# was unpacked, which qemu-user looks in first for every file it opens
# ($QEMU_LD_PREFIX); '' for the machine's own.
sub guest_root {
    my $root = $ENV{QEMU_LD_PREFIX} // '';
    $root =~ s{/+$}{};
    return $root;
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


# Modules beside it.

# A module of Debian's nginx packages (e.g. "ngx_http_lua_module"), or
# undef when its package is not installed.
sub debian_module {
    my ($name) = @_;
    my $path = "/usr/lib/nginx/modules/$name.so";
    return -f guest_root() . $path ? $path : undef;
}

# The nginx-datadog module (../shared/fixtures, or PROFILING_DATADOG_MODULE):
# the fixture is built for Debian's nginx, undef for another.
sub datadog_module {
    my $m = $ENV{PROFILING_DATADOG_MODULE};
    unless (defined $m && length $m) {
        return undef unless _is_debian_nginx();
        $m = File::Spec->catfile(dirname($TOP_DIR), 'shared', 'fixtures',
                                 'nginx-datadog',
                                 'ngx_http_datadog_module.so');
    }
    return -f $m ? $m : undef;
}

# The third-party engines the tests drive, for the nginx under test: name
# (lua, njs, brotli) => the modules to load for it ([] when built in, as
# OpenResty's lua); absent when there is none. Debian's packaged modules
# load into Debian's nginx only.
sub engines {
    my %e;
    $e{lua} = [] if nginx_has('lua-nginx-module') || nginx_has('ngx_lua');
    if (_is_debian_nginx()) {
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

# OpenResty's luajit2 (../shared/fixtures/openresty), built into $dir as
# libluajit-5.1.so.2 for Debian's lua module to load in place of Debian's
# own (LD_LIBRARY_PATH=$dir), for the nginx's machine (a cross build's
# binutils prefix: another architecture's). Its path; undef when there is
# no such lua module (the one engines() loads for lua) or no fixture. Dies
# when it does not build.
sub openresty_luajit {
    my ($dir) = @_;
    my ($tarball) = glob(dirname($TOP_DIR)
                         . '/shared/fixtures/openresty/luajit2-*.tar.gz');
    my $lua = debian_module('ngx_http_lua_module');
    my $objdump = build_tool('objdump');
    return undef
        unless $tarball && $lua
               && grep({ $_ eq $lua } @{ engines()->{lua} // [] })
               && `$objdump -p '@{[ guest_root() ]}$lua' 2>/dev/null`
                  =~ /NEEDED\s+libluajit-5\.1\.so\.2/;
    my $cross = build_tool('');
    $cross = $cross eq '' ? '' : "HOST_CC=gcc CROSS=$cross";
    mkdir($dir) or croak "$dir: $!";
    my $out = `cd '$dir' && tar xzf '$tarball' && cd luajit2-* && make -j2 BUILDMODE=dynamic PREFIX=/usr $cross >../build.log 2>&1 && cp src/libluajit.so ../libluajit-5.1.so.2 2>&1`;
    croak "OpenResty's luajit2 does not build ($dir/build.log): $out"
        if $?;
    chmod(0755, $dir);
    chmod(0644, "$dir/libluajit-5.1.so.2");
    return "$dir/libluajit-5.1.so.2";
}

1;
