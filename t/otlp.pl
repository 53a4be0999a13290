#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause
# A stand-in for an OTLP/HTTP profiles receiver (the Collector's, or
# Pyroscope's OTLP intake), for the tests.
#
#   t/otlp.pl --listen 127.0.0.1:PORT --dir DIR [--mode MODE]
#
# Each POST <prefix>/v1development/profiles (application/x-protobuf,
# the body gzip'd or not) is decoded with protoc against
# t/proto/otlp_profiles.proto (opentelemetry-proto v1.10.0's field
# numbers, written for the tests) and judged by the rules of the schema:
#
#   - the dictionary is there, and each of its seven tables starts with
#     its zero value (string_table[0] "", the others an empty message)
#     and holds no item twice;
#   - every index (stack, location, mapping, function, link, attribute,
#     string) points into its table, and every item but the zero one is
#     pointed at (no orphan: the schema says there SHOULD be none; a
#     receiver takes them, the stand-in does not, to catch them);
#   - a Link (past the zero one) has a trace id of 16 bytes and a span
#     id of 8, neither all zero;
#   - a resource with a service.name;
#   - each Profile has a sample type and a period type (Pyroscope names
#     the profile after it), a profile id of 16 bytes not all zero, a
#     time within an hour before and ten minutes after now, one value a
#     sample (one sample type), and no two samples of the same identity
#     (stack, attributes, link).
#
# A request breaking a rule is answered 400 with a google.rpc.Status
# (code 3, the reason), as the Collector answers; one that keeps them
# 200 with an empty ExportProfilesServiceResponse.
#
# Recorded in DIR/export-<time>-<pid>-<n>/: "request" (request line and
# headers), "verdict" (the status and reason), "export.txt" (protoc's
# text of the request, once decoded). Other paths: 404, other-*.
#
# MODE: ok (default), partial=N (200 with a partial success: N profiles
# rejected), status=N (N with a Status), limit (429, code 8
# RESOURCE_EXHAUSTED), hang (never answers), slow=SECONDS, close (closes
# after reading the headers). It can be changed while running by writing
# it to DIR/mode. Stops after --lifetime seconds (default 600).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode ();
use File::Temp ();
use Getopt::Long;
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Time::HiRes ();

use ProfOtlp qw(decode_otlp_text otlp_one);

my ($listen, $dir, $mode, $lifetime) = ('', '', 'ok', 600);
GetOptions('listen=s' => \$listen, 'dir=s' => \$dir, 'mode=s' => \$mode,
           'lifetime=i' => \$lifetime) or die "bad options\n";
die "--listen and --dir are required\n" unless $listen && $dir;

my $PROTO_DIR = "$FindBin::Bin/proto";
my %LIMIT = (past_s => 3600, future_s => 600);

my $server = IO::Socket::INET->new(LocalAddr => $listen, Listen => 64,
                                   ReuseAddr => 1)
    or die "listen $listen: $!\n";

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
        $SIG{CHLD} = 'DEFAULT';         # protoc's exit status is read
        handle($client, "$dir/export-" . time() . "-$$-$n");
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

sub answer {
    my ($sock, $status, $type, $body) = @_;
    print $sock "HTTP/1.1 $status Test\r\nContent-Type: $type\r\n"
              . "Content-Length: " . length($body) . "\r\n"
              . "Connection: close\r\n\r\n$body";
    close $sock;
}

# Protobuf, written by hand: a varint, a length-delimited field.
sub pb_varint {
    my ($v) = @_;
    my $out = '';
    while ($v >= 0x80) {
        $out .= chr(($v & 0x7f) | 0x80);
        $v >>= 7;
    }
    return $out . chr($v);
}

sub pb_len {
    my ($field, $bytes) = @_;
    return chr(($field << 3) | 2) . pb_varint(length $bytes) . $bytes;
}

# google.rpc.Status{code, message}: OTLP/HTTP's error body.
sub rpc_status {
    my ($code, $message) = @_;
    return chr(1 << 3) . pb_varint($code)
           . pb_len(2, Encode::encode('UTF-8', $message));
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

    my ($method, $path) = $headers =~ m{^(\S+)\s+(\S+)};
    if (($method // '') ne 'POST'
        || ($path // '') !~ m{^(?:/[^?]*)?/v1development/profiles$})
    {
        record_other($out =~ s{/export-([^/]*)$}{/other-$1}r, $headers,
                     $body);
        answer($sock, 404, 'text/plain', "404 page not found\n");
        return;
    }

    if ($m eq 'hang') {
        # Until the receiver is stopped (it is the parent).
        my $parent = getppid();
        sleep 1 while getppid() == $parent;
        return;
    }
    if ($m =~ /^slow=(\d+(?:\.\d+)?)$/) {
        select(undef, undef, undef, $1);
    }

    my $tmp = "$out.tmp";
    mkdir $tmp or return;
    write_file("$tmp/request", $headers . "\r\n");

    my ($status, $code, $reason, $answer);
    if ($m eq 'limit') {
        ($status, $code, $reason) = (429, 8, 'too many requests');
    } elsif ($m =~ /^status=(\d+)$/) {
        ($status, $code, $reason) = ($1, 14, 'test status');
    } else {
        $reason = judge($tmp, $headers, $body);
        ($status, $code) = defined $reason ? (400, 3) : (200, 0);
        if (!defined $reason && $m =~ /^partial=(\d+)$/) {
            my $rejected = $1;
            $reason = "partial: $rejected rejected";
            $answer = pb_len(1, chr(1 << 3) . pb_varint($rejected)
                                . pb_len(2, 'test: some profiles were '
                                            . 'dropped'));
        }
    }

    write_file("$tmp/verdict", "$status " . ($reason // 'ok') . "\n");
    rename $tmp, $out;

    if ($status == 200) {
        answer($sock, 200, 'application/x-protobuf', $answer // '');
    } else {
        answer($sock, $status, 'application/x-protobuf',
               rpc_status($code, $reason));
    }
}

# protoc --decode of bytes: the text, or undef.
sub protoc_decode {
    my ($type, $bytes) = @_;
    my $in = File::Temp->new(TEMPLATE => 'otlp-XXXXXX', TMPDIR => 1);
    binmode $in;
    print $in $bytes;
    close $in;
    my $text = `protoc --decode=$type -I '$PROTO_DIR' otlp_profiles.proto < '$in' 2>&1`;
    return $? == 0 ? $text : undef;
}

sub gunzip {
    my ($bytes) = @_;
    my $in = File::Temp->new(TEMPLATE => 'otlp-XXXXXX', TMPDIR => 1);
    binmode $in;
    print $in $bytes;
    close $in;
    my $raw = `gzip -dc '$in' 2>/dev/null`;
    return $? == 0 ? $raw : undef;
}

sub canonical {
    return JSON::PP->new->canonical->encode([ $_[0] ]);
}

# Each index of a list (field of a message) within [0, size).
sub bad_index {
    my ($m, $field, $size) = @_;
    for my $i (@{ $m->{$field} // [] }) {
        return "$field $i out of range (table of $size)"
            if $i < 0 || $i >= $size;
    }
    return undef;
}

# The dictionary's rules: undef, or why not.
sub check_dictionary {
    my ($d) = @_;
    my %size;
    for my $t (qw(mapping_table location_table function_table link_table
                  string_table attribute_table stack_table))
    {
        my $list = $d->{$t} // [];
        return "$t is empty: its zero value must be present" unless @$list;
        my $zero = $t eq 'string_table' ? ($list->[0] eq '')
                                        : !%{ $list->[0] };
        return "$t\[0] is not the zero value" unless $zero;
        my %seen;
        for my $i (0 .. $#$list) {
            my $key = canonical($list->[$i]);
            return "$t\[$i] duplicates $t\[$seen{$key}]"
                if defined $seen{$key};
            $seen{$key} = $i;
        }
        $size{$t} = @$list;
    }

    my $why;
    for my $m (@{ $d->{mapping_table} }) {
        $why = bad_index($m, 'filename_strindex', $size{string_table})
               // bad_index($m, 'attribute_indices', $size{attribute_table});
        return "mapping: $why" if $why;
    }
    for my $l (@{ $d->{location_table} }) {
        $why = bad_index($l, 'mapping_index', $size{mapping_table})
               // bad_index($l, 'attribute_indices', $size{attribute_table});
        return "location: $why" if $why;
        for my $line (@{ $l->{lines} // [] }) {
            $why = bad_index($line, 'function_index', $size{function_table});
            return "line: $why" if $why;
            return 'a line without a function'
                unless otlp_one($line, 'function_index', 0);
        }
    }
    for my $f (@{ $d->{function_table} }) {
        for my $k (qw(name_strindex system_name_strindex filename_strindex)) {
            $why = bad_index($f, $k, $size{string_table});
            return "function: $why" if $why;
        }
    }
    for my $i (1 .. $#{ $d->{link_table} }) {
        my $l = $d->{link_table}[$i];
        my ($trace, $span) = (otlp_one($l, 'trace_id', ''),
                              otlp_one($l, 'span_id', ''));
        return "link $i: a trace id of " . length($trace) . ' bytes'
            unless length $trace == 16;
        return "link $i: a span id of " . length($span) . ' bytes'
            unless length $span == 8;
        return "link $i: an id all zeroes"
            if $trace eq "\0" x 16 || $span eq "\0" x 8;
    }
    for my $a (@{ $d->{attribute_table} }) {
        $why = bad_index($a, 'key_strindex', $size{string_table})
               // bad_index($a, 'unit_strindex', $size{string_table});
        return "attribute: $why" if $why;
    }
    for my $s (@{ $d->{stack_table} }) {
        $why = bad_index($s, 'location_indices', $size{location_table});
        return "stack: $why" if $why;
        return 'a stack refers to location 0'
            if grep { $_ == 0 } @{ $s->{location_indices} // [] };
    }
    return (undef, \%size);
}

sub check_profile {
    my ($p, $d, $size) = @_;
    my $str = sub { $d->{string_table}[ $_[0] // 0 ] // '' };
    my $st = otlp_one($p, 'sample_type') or return 'no sample type';
    my $pt = otlp_one($p, 'period_type')
        or return 'no period type: the profile has no name';
    return 'a sample type without a type'
        unless length $str->(otlp_one($st, 'type_strindex', 0));
    return 'a period type without a type'
        unless length $str->(otlp_one($pt, 'type_strindex', 0));
    my $id = otlp_one($p, 'profile_id', '');
    return 'profile_id: ' . length($id) . ' bytes, not 16'
        unless length $id == 16;
    return 'profile_id all zeroes' if $id eq "\0" x 16;
    my $t = otlp_one($p, 'time_unix_nano', 0) / 1e9;
    my $now = Time::HiRes::time();
    return "profile time $t out of bounds (now $now)"
        if $t < $now - $LIMIT{past_s} || $t > $now + $LIMIT{future_s};

    my %identity;
    for my $s (@{ $p->{samples} // [] }) {
        my $why = bad_index($s, 'stack_index', $size->{stack_table})
                  // bad_index($s, 'link_index', $size->{link_table})
                  // bad_index($s, 'attribute_indices',
                               $size->{attribute_table});
        return "sample: $why" if $why;
        my $n = @{ $s->{values} // [] };
        return "a sample with $n values for one sample type" if $n != 1;
        my $key = join(';', otlp_one($s, 'stack_index', 0),
                       join(',', sort { $a <=> $b }
                                 @{ $s->{attribute_indices} // [] }),
                       otlp_one($s, 'link_index', 0));
        return "two samples of the same identity ($key)"
            if $identity{$key}++;
    }
    return undef;
}

# Items of the dictionary nothing points at (past the zero ones): undef,
# or the first found.
sub check_orphans {
    my ($e, $d) = @_;
    my %used;
    my $use = sub {
        my ($table, $m, @fields) = @_;
        for my $f (@fields) {
            $used{$table}{$_} = 1 for @{ $m->{$f} // [] };
        }
    };
    my @profiles = map { @{ $_->{profiles} // [] } }
                   map { @{ $_->{scope_profiles} // [] } }
                   @{ $e->{resource_profiles} // [] };
    for my $p (@profiles) {
        for my $vt (map { @{ $p->{$_} // [] } } qw(sample_type period_type)) {
            $use->('string_table', $vt, qw(type_strindex unit_strindex));
        }
        $use->('attribute_table', $p, 'attribute_indices');
        for my $s (@{ $p->{samples} // [] }) {
            $use->('stack_table', $s, 'stack_index');
            $use->('link_table', $s, 'link_index');
            $use->('attribute_table', $s, 'attribute_indices');
        }
    }
    $use->('location_table', $_, 'location_indices')
        for @{ $d->{stack_table} };
    for my $l (@{ $d->{location_table} }) {
        $use->('mapping_table', $l, 'mapping_index');
        $use->('attribute_table', $l, 'attribute_indices');
        $use->('function_table', $_, 'function_index')
            for @{ $l->{lines} // [] };
    }
    for my $m (@{ $d->{mapping_table} }) {
        $use->('string_table', $m, 'filename_strindex');
        $use->('attribute_table', $m, 'attribute_indices');
    }
    $use->('string_table', $_,
           qw(name_strindex system_name_strindex filename_strindex))
        for @{ $d->{function_table} };
    $use->('string_table', $_, qw(key_strindex unit_strindex))
        for @{ $d->{attribute_table} };

    for my $t (qw(mapping_table location_table function_table link_table
                  string_table attribute_table stack_table))
    {
        for my $i (1 .. $#{ $d->{$t} }) {
            next if $used{$t}{$i};
            my $what = $t eq 'string_table' ? " (\"$d->{$t}[$i]\")" : '';
            return "$t\[$i]$what is an orphan: nothing points at it";
        }
    }
    return undef;
}

# The whole request judged: undef (accepted), or the reason.
sub judge {
    my ($tmp, $headers, $body) = @_;

    my ($type) = $headers =~ /^content-type:\s*([^;\r\n]+)/mi;
    return 'unsupported content type "' . ($type // '') . '"'
        unless lc($type // '') eq 'application/x-protobuf';

    if ($headers =~ /^content-encoding:\s*gzip/mi) {
        $body = gunzip($body);
        return 'invalid gzip body' unless defined $body;
    }

    my $text = protoc_decode('otlp.ExportProfilesServiceRequest', $body);
    return 'proto: cannot parse invalid wire-format data'
        unless defined $text;
    write_file("$tmp/export.txt", $text);

    my $e = eval { decode_otlp_text($text) }
        or return 'cannot read protoc\'s text';
    my $d = otlp_one($e, 'dictionary') or return 'no dictionary';
    my ($why, $size) = check_dictionary($d);
    return $why if defined $why;
    $why = check_orphans($e, $d);
    return $why if defined $why;

    my @rp = @{ $e->{resource_profiles} // [] };
    return 'no resource profiles' unless @rp;
    for my $rp (@rp) {
        my $res = otlp_one($rp, 'resource', {});
        my ($service) = grep { otlp_one($_, 'key', '') eq 'service.name' }
                        @{ $res->{attributes} // [] };
        return 'a resource without service.name' unless $service;
        for my $sp (@{ $rp->{scope_profiles} // [] }) {
            for my $p (@{ $sp->{profiles} // [] }) {
                $why = check_profile($p, $d, $size);
                return $why if defined $why;
            }
        }
    }
    return undef;
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
