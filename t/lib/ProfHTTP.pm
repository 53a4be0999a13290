# SPDX-License-Identifier: BSD-2-Clause
package ProfHTTP;

# HTTP clients for the tests, on loopback: free ports to listen on,
# whether a port answers, GET with headers on a connection of its own,
# raw HTTP/1.x bytes on a new connection, and HTTP/2 without TLS (prior
# knowledge) with every request a stream of one connection. (The plain
# GET of an nginx under test is its get method, ProfNginx.)
#
#   my $port = free_port();
#   my ($status, $body) = ProfHTTP::raw_request($port, $bytes);
#   my @r = ProfHTTP::h2_requests($t->port, [ { path => '/' } ]);
#
# free_port is exported on request; the others are called as ProfHTTP::x.

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use HTTP::Tiny;
use IO::Socket::INET;
use Time::HiRes qw(time);

our @EXPORT_OK = qw(free_port port_answers);

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

# Whether something accepts connections on a loopback port.
sub port_answers {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $port,
                                  Proto => 'tcp', Timeout => 1);
    return 0 unless $s;
    close($s);
    return 1;
}

# GET $path of an nginx under test ($t) with extra headers (a hash ref),
# on a new HTTP::Tiny (no shared keep-alive connection unless $http is
# given).
sub get_with {
    my ($t, $path, $headers, $http) = @_;
    $http //= HTTP::Tiny->new(timeout => 30, keep_alive => 0);
    return $http->get("http://127.0.0.1:" . $t->port . $path,
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

1;
