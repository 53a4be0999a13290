#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause
# A stand-in for the Datadog agent's profiling endpoint, for the tests.
#
#   t/agent.pl --listen 127.0.0.1:PORT|unix:/path --dir DIR [--mode MODE]
#
# Each POST /profiling/v1/input is recorded in DIR/upload-<n>/: "request"
# (request line and headers) and one file per multipart part, named after
# the part (event, profile.pprof, code-provenance.json), plus
# "parts" (name, filename, content type of each part, in order).
# Anything else a tracer sends (POST /v0.4/traces: msgpack; telemetry,
# remote configuration) is recorded in DIR/other-<n>/: "request" and
# "body", and answered 200 "{}".
# MODE: ok (200, default), status=N, hang (never answers), slow=SECONDS
# (answers 200 after that long), close (closes after reading the headers).
# The mode can be changed while running by writing it to DIR/mode.
# Stops after --lifetime seconds (default 600).

use strict;
use warnings;

use Getopt::Long;
use IO::Socket::INET;
use IO::Socket::UNIX;
use POSIX ();

my ($listen, $dir, $mode, $lifetime) = ('', '', 'ok', 600);
GetOptions('listen=s' => \$listen, 'dir=s' => \$dir, 'mode=s' => \$mode,
           'lifetime=i' => \$lifetime) or die "bad options\n";
die "--listen and --dir are required\n" unless $listen && $dir;

my $server;
if ($listen =~ /^unix:(.*)$/) {
    unlink $1;
    $server = IO::Socket::UNIX->new(Local => $1, Listen => 64)
        or die "listen $1: $!\n";
    chmod 0777, $1;     # nginx workers run as another user
} else {
    $server = IO::Socket::INET->new(LocalAddr => $listen, Listen => 64,
                                    ReuseAddr => 1)
        or die "listen $listen: $!\n";
}

# Its own process group: the tests stop it and every connection it holds.
setpgrp(0, 0);

$SIG{CHLD} = 'IGNORE';
$SIG{ALRM} = sub { exit 0 };
alarm $lifetime;

open my $ready, '>', "$dir/ready" or die; close $ready;

my $n = 0;
while (1) {
    my $client = $server->accept or next;
    $n++;
    my $pid = fork;
    if (!defined $pid) { close $client; next; }
    if ($pid == 0) {
        handle($client, "$dir/upload-" . time() . "-$$-$n");
        POSIX::_exit(0);
    }
    close $client;
}

sub current_mode {
    if (open my $f, '<', "$dir/mode") {
        my $m = <$f>;
        close $f;
        chomp $m if defined $m;
        return $m if defined $m && length $m;
    }
    return $mode;
}

sub read_exactly {
    my ($sock, $len) = @_;
    my $buf = '';
    while (length($buf) < $len) {
        my $r = sysread($sock, $buf, $len - length($buf), length($buf));
        return undef unless $r;
    }
    return $buf;
}

sub handle {
    my ($sock, $out) = @_;
    binmode $sock;

    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        my $r = sysread($sock, $head, 4096, length $head);
        return unless $r;
    }
    my ($headers, $rest) = split /\r\n\r\n/, $head, 2;

    my $m = current_mode();
    if ($m eq 'close') {
        close $sock;
        return;
    }

    my ($len) = $headers =~ /^content-length:\s*(\d+)/mi;
    $len //= 0;
    my $body = $rest;
    if (length($body) < $len) {
        my $more = read_exactly($sock, $len - length $body);
        return unless defined $more;
        $body .= $more;
    }

    my ($path) = $headers =~ m{^\S+\s+(\S+)};
    if (($path // '') !~ m{^/profiling/}) {
        record_other($out =~ s{/upload-([^/]*)$}{/other-$1}r, $headers, $body);
        print $sock "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  . "Content-Length: 2\r\nConnection: close\r\n\r\n{}";
        close $sock;
        return;
    }

    if ($m eq 'hang') {
        # Until the agent is stopped (it is the parent).
        my $parent = getppid();
        sleep 1 while getppid() == $parent;
        return;
    }
    if ($m =~ /^slow=(\d+(?:\.\d+)?)$/) {
        select(undef, undef, undef, $1);
    }

    my $status = 200;
    $status = $1 if $m =~ /^status=(\d+)$/;

    record($out, $headers, $body);

    my $reason = $status == 200 ? 'OK' : 'Test';
    print $sock "HTTP/1.1 $status $reason\r\nContent-Length: 0\r\n"
              . "Connection: close\r\n\r\n";
    close $sock;
}

sub record {
    my ($out, $headers, $body) = @_;
    my $tmp = "$out.tmp";
    mkdir $tmp or return;

    write_file("$tmp/request", $headers . "\r\n");

    my ($boundary) = $headers =~ /^content-type:\s*multipart\/form-data;\s*boundary=("?)([^\r\n"]+)\1/mi
        ? ($2) : ();
    my @parts;
    if (defined $boundary) {
        for my $chunk (split /--\Q$boundary\E/, $body) {
            next if $chunk eq '' || $chunk =~ /^--/;
            $chunk =~ s/^\r\n//;
            my ($ph, $data) = split /\r\n\r\n/, $chunk, 2;
            next unless defined $data;
            $data =~ s/\r\n$//;
            my ($name) = $ph =~ /name="([^"]*)"/i;
            my ($filename) = $ph =~ /filename="([^"]*)"/i;
            my ($type) = $ph =~ /^content-type:\s*(\S+)/mi;
            next unless defined $name;
            push @parts, join("\t", $name, $filename // '', $type // '');
            write_file("$tmp/$name", $data);
        }
    }
    write_file("$tmp/parts", join("\n", @parts) . "\n");
    rename $tmp, $out;
}

sub record_other {
    my ($out, $headers, $body) = @_;
    my $tmp = "$out.tmp";
    mkdir $tmp or return;
    write_file("$tmp/request", $headers . "\r\n");
    write_file("$tmp/body", $body);
    rename $tmp, $out;
}

sub write_file {
    my ($path, $data) = @_;
    open my $f, '>', $path or return;
    binmode $f;
    print $f $data;
    close $f;
}
