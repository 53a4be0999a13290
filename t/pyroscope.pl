#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause
# A stand-in for Grafana Pyroscope's push API, for the tests.
#
#   t/pyroscope.pl --listen 127.0.0.1:PORT --dir DIR [--mode MODE]
#
# Each POST /push.v1.PusherService/Push (Connect unary, application/proto,
# the body gzip'd or not) is decoded with protoc against t/proto/push.proto
# (written from the published field numbers), each raw profile with protoc
# against pprof's profile.proto, and judged as Pyroscope's distributor
# judges it with its default limits (pkg/validation): the series' labels
# (at least one; at most 30 names; __name__ a valid metric name;
# service_name not empty; names valid, at most 1,024 bytes; values valid
# UTF-8, at most 2,048 bytes; no name twice), each profile (at most 4 MiB
# uncompressed and 16,000 samples; at most 100 labels a sample; no
# location or function id 0; no '-' in a sample type; time_nanos within
# an hour before and ten minutes after now), and the series its string
# sample labels make (every one but span_id, trace_id and profile_id
# becomes a series label, unless the series has one of that name: the
# series' wins) judged again. A request breaking a rule is
# answered 400 with Connect's JSON error and the reason, as Pyroscope
# does; one that keeps them 200 with an empty PushResponse.
#
# POST /ingest?format=pprof&name=APP{k=v,...} (Pyroscope's older way in,
# which its SDKs for Node.js and others still use: a raw pprof body) is
# judged by the same rules, its series labelled as Pyroscope labels it
# (service_name the application's name unless a label gives it).
#
# Label names: Pyroscope takes names with dots (its Node.js SDK sends
# otel.scope.name; t/pyroscope-sdk.t), so the stand-in takes the legacy
# names ([a-zA-Z_][a-zA-Z0-9_]*) and those with dots, and refuses others
# (a Pyroscope validating names as UTF-8 may take more).
#
# Recorded in DIR/push-<time>-<pid>-<n>/: "request" (request line and
# headers), "verdict" (the status and reason), "push.json" (the series:
# labels, and each sample's id and profile file), and profile-<s>-<k>.pb
# (each raw profile, uncompressed). Every series that its profiles make
# is appended to DIR/series, one a line ("name=value,..." sorted).
# Requests to any other path are answered 404 and recorded as other-*.
#
# MODE: ok (default), status=N (answers N with a Connect error),
# limit (429, resource_exhausted: Pyroscope rate-limiting), hang (never
# answers), slow=SECONDS, close (closes after reading the headers). It can
# be changed while running by writing it to DIR/mode. Stops after
# --lifetime seconds (default 600).

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

use ProfPprof qw(decode_profile_text);

my ($listen, $dir, $mode, $lifetime) = ('', '', 'ok', 600);
GetOptions('listen=s' => \$listen, 'dir=s' => \$dir, 'mode=s' => \$mode,
           'lifetime=i' => \$lifetime) or die "bad options\n";
die "--listen and --dir are required\n" unless $listen && $dir;

my $PROTO_DIR = "$FindBin::Bin/proto";
my $PPROF_DIR = "$FindBin::Bin/../shared/profiler";

my %LIMIT = (label_names => 30, name_length => 1024, value_length => 2048,
             profile_bytes => 4 * 1024 * 1024, samples => 16000,
             sample_labels => 100, past_s => 3600, future_s => 600);

# protoc's escapes in text format
my %ESC = (n => "\n", r => "\r", t => "\t", a => "\a", b => "\b",
           f => "\f", v => "\x0b");

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
        handle($client, "$dir/push-" . time() . "-$$-$n");
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

# Connect's error body for a unary call.
sub connect_error {
    my ($sock, $status, $code, $message) = @_;
    answer($sock, $status, 'application/json',
           JSON::PP->new->utf8->canonical->encode(
               { code => $code, message => $message }));
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
    my $ingest = ($path // '') =~ m{^(?:/[^?]*)?/ingest(?:\?|$)};
    if (($method // '') ne 'POST'
        || (!$ingest
            && ($path // '') !~ m{^(?:/[^?]*)?/push\.v1\.PusherService/Push$}))
    {
        record_other($out =~ s{/push-([^/]*)$}{/other-$1}r, $headers, $body);
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
    write_file("$tmp/body", $body);

    my ($status, $code, $reason);
    if ($m eq 'limit') {
        ($status, $code, $reason) = (429, 'resource_exhausted',
            'push rate limit (1 MiB) exceeded while adding 1 KiB');
    } elsif ($m =~ /^status=(\d+)$/) {
        ($status, $code, $reason) = ($1, 'unavailable', 'test status');
    } else {
        $reason = $ingest ? judge_ingest($tmp, $headers, $path, $body)
                          : judge($tmp, $headers, $body);
        ($status, $code) = defined $reason ? (400, 'invalid_argument')
                                           : (200, undef);
    }

    write_file("$tmp/verdict", "$status " . ($reason // 'ok') . "\n");
    rename $tmp, $out;

    if ($status == 200) {
        answer($sock, 200, $ingest ? 'text/plain' : 'application/proto', '');
    } else {
        connect_error($sock, $status, $code, $reason);
    }
}

# protoc --decode of bytes: the text, or undef.
sub protoc_decode {
    my ($type, $include, $file, $bytes) = @_;
    my $in = File::Temp->new(TEMPLATE => 'push-XXXXXX', TMPDIR => 1);
    binmode $in;
    print $in $bytes;
    close $in;
    my $text = `protoc --decode=$type -I '$include' $file < '$in' 2>&1`;
    return $? == 0 ? $text : undef;
}

sub gunzip {
    my ($bytes) = @_;
    my $in = File::Temp->new(TEMPLATE => 'push-XXXXXX', TMPDIR => 1);
    binmode $in;
    print $in $bytes;
    close $in;
    my $raw = `gzip -dc '$in' 2>/dev/null`;
    return $? == 0 ? $raw : undef;
}

sub unquote {
    my ($s) = @_;
    $s =~ s/^"(.*)"$/$1/s;
    $s =~ s{\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))}
           {defined $1 ? chr(oct $1) : defined $2 ? chr(hex $2)
                       : ($ESC{$3} // $3)}ges;
    return $s;
}

# The PushRequest's text into [ { labels => [[n, v]...], samples =>
# [ { id, raw } ] } ].
sub parse_push {
    my ($text) = @_;
    my (@series, $s, $l, $r, @stack);
    for my $line (split /\n/, $text) {
        if ($line =~ /^\s*(\w+)\s*\{\s*$/) {
            push @stack, $1;
            if ($1 eq 'series') { $s = { labels => [], samples => [] };
                                  push @series, $s; }
            elsif ($1 eq 'labels') { $l = ['', '']; push @{ $s->{labels} }, $l; }
            elsif ($1 eq 'samples') { $r = { id => '', raw => '' };
                                      push @{ $s->{samples} }, $r; }
        } elsif ($line =~ /^\s*\}\s*$/) {
            pop @stack;
        } elsif ($line =~ /^\s*(\w+):\s*(.*?)\s*$/) {
            my ($k, $v) = ($1, unquote($2));
            my $in = $stack[-1] // '';
            if ($in eq 'labels') { $l->[$k eq 'name' ? 0 : 1] = $v; }
            elsif ($in eq 'samples') {
                $r->{$k eq 'raw_profile' ? 'raw' : 'id'} = $v;
            }
        }
    }
    return \@series;
}

sub valid_utf8 {
    my ($s) = @_;
    return eval { Encode::decode('UTF-8', my $c = $s, Encode::FB_CROAK); 1 };
}

# Pyroscope's ValidateLabels: undef, or why not.
sub check_labels {
    my ($labels) = @_;
    my $text = join(', ', map { "$_->[0]=\"$_->[1]\"" } @$labels);
    return 'error at least one label pair is required per profile'
        unless @$labels;
    my @sorted = sort { $a->[0] cmp $b->[0] } @$labels;
    return "profile series '{$text}' has " . scalar(@sorted)
           . " label names; limit $LIMIT{label_names}"
        if @sorted > $LIMIT{label_names};
    my %v = map { $_->[0] => $_->[1] } @sorted;
    return "invalid labels '{$text}' with error: invalid metric name"
        unless ($v{__name__} // '') =~ /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
    return "invalid labels '{$text}' with error: service name is not "
           . "provided" unless length($v{service_name} // '');
    my $last = '';
    for my $p (@sorted) {
        my ($name, $value) = @$p;
        return "profile with labels '{$text}' has label name too long: "
               . "'$name'" if length($name) > $LIMIT{name_length};
        return "profile with labels '{$text}' has label value too long: "
               . "'$value'" if length($value) > $LIMIT{value_length};
        return "invalid labels '{$text}' with error: invalid label name "
               . "'$name'" unless $name =~ /^[a-zA-Z_][a-zA-Z0-9_.]*$/;
        return "invalid labels '{$text}' with error: invalid label value "
               . "'$value'" unless valid_utf8($value);
        return "profile with labels '{$text}' has duplicate label name: "
               . "'$name'" if $name eq $last;
        $last = $name;
    }
    return undef;
}

# Pyroscope's ValidateProfile and its time bounds: undef, or why not.
sub check_profile {
    my ($p, $size, $text) = @_;
    return "the profile with labels '$text' exceeds the size limit "
           . "(max_profile_size_byte, actual: $size, limit: "
           . "$LIMIT{profile_bytes})" if $size > $LIMIT{profile_bytes};
    my $samples = @{ $p->{sample} };
    return "the profile with labels '$text' exceeds the samples count "
           . "limit (max_profile_stacktrace_samples, actual: $samples, "
           . "limit: $LIMIT{samples})" if $samples > $LIMIT{samples};
    for my $s (@{ $p->{sample} }) {
        my $n = @{ $s->{label} };
        return "the profile with labels '$text' exceeds the sample labels "
               . "limit (max_profile_stacktrace_sample_labels, actual: $n, "
               . "limit: $LIMIT{sample_labels})"
            if $n > $LIMIT{sample_labels};
        return 'malformed profile: a sample has '
               . scalar(@{ $s->{value} }) . ' values for '
               . scalar(@{ $p->{sample_type} }) . ' sample types'
            if @{ $s->{value} } != @{ $p->{sample_type} };
    }
    return 'location id is 0' if grep { !$_->{id} } @{ $p->{location} };
    return 'function id is 0' if grep { !$_->{id} } @{ $p->{function} };
    return 'malformed profile: string_table[0] is not ""'
        if @{ $p->{string_table} } && $p->{string_table}[0] ne '';
    for my $st (@{ $p->{sample_type} }) {
        return 'sample type contains -'
            if ($p->{string_table}[ $st->{type} ] // '') =~ /-/;
    }
    my $t = $p->{time_nanos} / 1e9;
    my $now = Time::HiRes::time();
    return "profile time $t out of bounds (now $now)"
        if $t && ($t < $now - $LIMIT{past_s} || $t > $now + $LIMIT{future_s});
    return undef;
}

# The series a profile makes once split by its string sample labels (a
# sample label named as one of the series' is left out, as Pyroscope
# does: the series' wins).
sub split_series {
    my ($p, $labels) = @_;
    my %series;
    my %named = map { $_->[0] => 1 } @$labels;
    for my $s (@{ $p->{sample} }) {
        my @l = @$labels;
        for my $lb (@{ $s->{label} }) {
            next unless $lb->{str};
            my $k = $p->{string_table}[ $lb->{key} ] // '';
            next if $k eq 'span_id' || $k eq 'trace_id' || $k eq 'profile_id';
            next if $named{$k};         # the series' own wins
            push @l, [$k, $p->{string_table}[ $lb->{str} ] // ''];
        }
        my $key = join(',', map { "$_->[0]=$_->[1]" }
                            sort { $a->[0] cmp $b->[0] } @l);
        $series{$key} //= \@l;
    }
    return \%series;
}

# The whole request judged: undef (accepted), or the reason.
sub judge {
    my ($tmp, $headers, $body) = @_;

    my ($type) = $headers =~ /^content-type:\s*([^;\r\n]+)/mi;
    return "invalid content-type: \"" . ($type // '') . '"'
        unless ($type // '') =~ m{^application/(?:proto|json)$}i;
    return 'this stand-in decodes application/proto only'
        if lc $type eq 'application/json';

    if ($headers =~ /^content-encoding:\s*gzip/mi) {
        $body = gunzip($body);
        return 'invalid gzip body' unless defined $body;
    }

    my $text = protoc_decode('push.v1.PushRequest', $PROTO_DIR,
                             'push.proto', $body);
    unless (defined $text) {
        return 'unmarshal message: proto: cannot parse invalid wire-format '
               . 'data';
    }

    my $push = parse_push($text);
    my @out;
    my @series_lines;
    for my $si (0 .. $#$push) {
        my $s = $push->[$si];
        my $why = check_labels($s->{labels});
        return $why if defined $why;
        my $ltext = '{' . join(', ', map { "$_->[0]=\"$_->[1]\"" }
                                     @{ $s->{labels} }) . '}';

        my @samples;
        for my $k (0 .. $#{ $s->{samples} }) {
            my $raw = $s->{samples}[$k]{raw};
            if (substr($raw, 0, 2) eq "\x1f\x8b") {
                my $unzipped = gunzip($raw);
                unless (defined $unzipped) {
                    write_file("$tmp/profile-$si-$k.gz", $raw);
                    return 'failed to decompress profile';
                }
                $raw = $unzipped;
            }
            my $ptext = protoc_decode('perftools.profiles.Profile',
                                      $PPROF_DIR, 'profile.proto', $raw);
            return 'failed to parse profile' unless defined $ptext;
            my $p = eval { decode_profile_text($ptext) }
                or return 'failed to parse profile';
            $why = check_profile($p, length $raw, $ltext);
            return $why if defined $why;

            my $split = split_series($p, $s->{labels});
            for my $key (sort keys %$split) {
                $why = check_labels($split->{$key});
                return $why if defined $why;
                push @series_lines, $key;
            }

            my $file = "profile-$si-$k.pb";
            write_file("$tmp/$file", $raw);
            push @samples, { id => $s->{samples}[$k]{id}, profile => $file };
        }
        push @out, { labels => { map { Encode::decode('UTF-8', $_) }
                                 map { @$_ } @{ $s->{labels} } },
                     samples => \@samples };
    }

    write_file("$tmp/push.json", JSON::PP->new->utf8->canonical
                                             ->encode(\@out));
    if (open my $f, '>>', "$dir/series") {
        print $f map { "$_\n" } @series_lines;
        close $f;
    }
    return undef;
}

sub url_decode {
    my ($s) = @_;
    $s =~ tr/+/ /;
    $s =~ s/%([0-9a-fA-F]{2})/chr(hex $1)/ge;
    return $s;
}

# The older ingest API, format=pprof with a raw body: undef, or why not.
sub judge_ingest {
    my ($tmp, $headers, $path, $body) = @_;

    my ($query) = $path =~ /\?(.*)$/;
    my %q = map { my ($k, $v) = split /=/, $_, 2; (url_decode($k),
                                                  url_decode($v // '')) }
            split /&/, $query // '';
    return 'this stand-in decodes format=pprof only'
        unless ($q{format} // '') eq 'pprof';
    return 'this stand-in decodes a raw pprof body only'
        if $headers =~ m{^content-type:\s*multipart/}mi;

    my ($app, $labels) = ($q{name} // '') =~ /^([^{]*)(?:\{(.*)\})?$/
        or return "invalid name \"$q{name}\"";
    my @labels;
    for my $pair (split /,/, $labels // '') {
        my ($k, $v) = split /=/, $pair, 2;
        return "invalid label \"$pair\"" unless defined $v;
        push @labels, [$k, $v];
    }
    push @labels, ['service_name', $app]
        unless grep { $_->[0] eq 'service_name' } @labels;

    my $raw = $body;
    if (substr($raw, 0, 2) eq "\x1f\x8b") {
        $raw = gunzip($raw);
        return 'failed to decompress profile' unless defined $raw;
    }
    my $ptext = protoc_decode('perftools.profiles.Profile', $PPROF_DIR,
                              'profile.proto', $raw);
    return 'failed to parse profile' unless defined $ptext;
    my $p = eval { decode_profile_text($ptext) }
        or return 'failed to parse profile';

    # A series a profile type: __name__ as Pyroscope names it.
    my %types = map { ($p->{string_table}[ $_->{type} ] // '') => 1 }
                @{ $p->{sample_type} };
    my $name = $types{cpu} ? 'process_cpu' : $types{wall} ? 'wall'
             : 'memory';
    my @series_labels = (['__name__', $name], @labels);
    my $ltext = '{' . join(', ', map { "$_->[0]=\"$_->[1]\"" }
                                 @series_labels) . '}';

    my $why = check_labels(\@series_labels)
              // check_profile($p, length $raw, $ltext);
    return $why if defined $why;

    my $split = split_series($p, \@series_labels);
    for my $key (sort keys %$split) {
        $why = check_labels($split->{$key});
        return $why if defined $why;
    }

    write_file("$tmp/profile-0-0.pb", $raw);
    write_file("$tmp/push.json", JSON::PP->new->utf8->canonical->encode([
        { labels => { map { Encode::decode('UTF-8', $_) }
                      map { @$_ } @series_labels },
          samples => [ { id => '', profile => 'profile-0-0.pb' } ] } ]));
    if (open my $f, '>>', "$dir/series") {
        print $f map { "$_\n" } sort keys %$split;
        close $f;
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
