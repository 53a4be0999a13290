# SPDX-License-Identifier: BSD-2-Clause
package ProfWorkload;

# Load for an nginx under test ($t, a ProfNginx): requests driven for a
# while (and the time they covered), wrk runs and their scripts, the
# counts of an access log, a file of words for gzip and brotli, and the
# JIT workload (hand-written JIT code, LuaJIT traces, njs, brotli) of
# t/safety-jit.t and ci/soak.
#
#   my $ok = ProfWorkload::drive($t, '/burn', 3, 0.01);
#   my $r = ProfWorkload::wrk($t, path => '/', seconds => 5);
#
# Not exported: call them as ProfWorkload::x.

use strict;
use warnings;

use Carp qw(croak);
use Time::HiRes qw(time);

use ProfCommand qw(run_capture);
use ProfEnv;
use ProfFiles qw(file_lines);
use ProfWait qw(poll_sleep);

# Sends requests to $path for $seconds: each request followed by a pause of
# $pause seconds (0: back to back). Returns the number of 200 answers; with
# $intervals (an array ref), pushes [start, end] (epoch seconds) of each.
sub drive {
    my ($t, $path, $seconds, $pause, $intervals) = @_;
    my $end = time() + $seconds;
    my $ok = 0;
    while (time() < $end) {
        my $start = time();
        my $r = $t->get($path);
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

# Writes a text file of about $size bytes of pseudo-random words (the same
# every time), readable by the workers: gzip has work to do on it. Returns
# its content.
sub write_words_file {
    my ($path, $size) = @_;
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

# Runs wrk against the nginx $t: $o{path} (default /) or $o{script} (a Lua
# file for wrk -s), $o{seconds}, $o{connections} (default 4), $o{threads}
# (default 2), $o{headers} (e.g. ["Connection: close"]). Returns
# { requests, non2xx, socket_errors, output }.
sub wrk {
    my ($t, %o) = @_;
    my @cmd = ('wrk', '-t', $o{threads} // 2, '-c', $o{connections} // 4,
               '-d', ($o{seconds} // 5) . 's', '--timeout', '30s');
    push @cmd, '-s', $o{script} if $o{script};
    push @cmd, map { ('-H', $_) } @{ $o{headers} // [] };
    push @cmd, 'http://127.0.0.1:' . $t->port . ($o{path} // '/');

    my ($rc, $out) = run_capture(@cmd);
    croak "wrk failed (exit $rc): $out" if $rc != 0;

    my %r = (requests => 0, non2xx => 0, socket_errors => 0, output => $out);
    $r{requests} = $1 if $out =~ /(\d+) requests in /;
    $r{non2xx} = $1 if $out =~ /Non-2xx or 3xx responses: (\d+)/;
    $r{socket_errors} = $1 + $2 + $3 + $4 if $out =~
        /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/;
    return \%r;
}

# A Lua script for wrk (wrk($t, script => ...)) that requests @paths in turn,
# accepting brotli. Returns its path (in the prefix).
sub wrk_paths_script {
    my ($t, @paths) = @_;
    my $file = $t->prefix . '/wrk-paths.lua';
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

# The JIT workload of t/safety-jit.t and ci/soak, for an nginx $t with lua
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
    my ($t, %o) = @_;
    my $jit_ms = $o{jit_ms} // 20;
    my $p = $t->prefix;

    mkdir("$p/html") unless -d "$p/html";
    chmod(0755, "$p/html");
    write_words_file("$p/html/big.txt", 200_000);

    my $e = ProfEnv::engines();
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

# The modules the JIT workload needs, in load order (the ndk before lua),
# after the profiling and burn modules; () when there is no lua.
sub jit_workload_modules {
    my $e = ProfEnv::engines();
    return () unless $e->{lua};
    return ('ngx_http_profiling_module', 'ngx_http_profiling_burn_module',
            map { @{ $e->{$_} // [] } } qw(lua njs brotli));
}
1;
