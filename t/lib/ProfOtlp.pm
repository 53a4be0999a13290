# SPDX-License-Identifier: BSD-2-Clause
package ProfOtlp;

# The stand-in OTLP profiles receiver (t/otlp.pl) for the tests: start
# it, switch its mode, stop it, read what it took; and protoc's text of
# an ExportProfilesServiceRequest read into a tree (every field a list).
#
#   my $r = start_otlp("127.0.0.1:$port");
#   my @e = exports($r);    # { dir, request, status, reason, export }
#   my @p = otlp_profiles($e[0]{export});
#   stop_otlp($r);

use strict;
use warnings;

use Exporter qw(import);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use File::Temp ();
use POSIX ();

use ProfFiles qw(slurp);
use ProfWait qw(wait_until);

our @EXPORT = qw(start_otlp stop_otlp set_otlp_mode exports
                 decode_otlp_text otlp_profiles otlp_str otlp_one
                 otlp_resource otlp_total otlp_leaf_totals);

my $RECEIVER = dirname(dirname(__FILE__)) . '/otlp.pl';
my %RECEIVERS;

# protoc's escapes in text format
my %ESC = (n => "\n", r => "\r", t => "\t", a => "\a", b => "\b",
           f => "\f", v => "\x0b");

# Starts the receiver on $listen. Options: mode (default ok), lifetime
# (seconds, default 300). Returns { pid, dir } once it listens.
sub start_otlp {
    my ($listen, %opts) = @_;
    my $dir = tempdir('otlp-XXXXXX', TMPDIR => 1,
                      CLEANUP => !$ENV{PROFILING_KEEP_TMP});
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        exec($^X, $RECEIVER, '--listen', $listen, '--dir', $dir,
             '--mode', $opts{mode} // 'ok',
             '--lifetime', $opts{lifetime} // 300)
            or POSIX::_exit(127);
    }
    $RECEIVERS{$pid} = 1;
    wait_until(sub { -e "$dir/ready" }, 10) or die "receiver did not start";
    return { pid => $pid, dir => $dir };
}

# It runs in its own process group: its connections go with it.
sub stop_otlp {
    my ($r) = @_;
    kill('TERM', -$r->{pid});
    waitpid($r->{pid}, 0);
    delete $RECEIVERS{ $r->{pid} };
}

END { kill('TERM', map { -$_ } keys %RECEIVERS) if %RECEIVERS; }

sub set_otlp_mode {
    my ($r, $mode) = @_;
    open(my $f, '>', "$r->{dir}/mode.tmp") or die;
    print $f "$mode\n";
    close($f);
    rename("$r->{dir}/mode.tmp", "$r->{dir}/mode") or die;
}

# The requests received (complete), oldest first: { dir, request (its
# head), status, reason, export (the decoded request, when it was one) }.
sub exports {
    my ($r) = @_;
    opendir(my $dh, $r->{dir}) or return ();
    my @d = sort { ($a =~ /-(\d+)$/)[0] <=> ($b =~ /-(\d+)$/)[0] }
            grep { /^export-\d+-\d+-\d+$/ } readdir($dh);
    closedir($dh);
    my @e;
    for my $d (map { "$r->{dir}/$_" } @d) {
        my $verdict = slurp("$d/verdict") // next;
        my ($status, $reason) = $verdict =~ /^(\d+) (.*)$/;
        my $text = slurp("$d/export.txt");
        push @e, { dir => $d, request => slurp("$d/request"),
                   status => $status, reason => $reason,
                   export => defined $text ? decode_otlp_text($text)
                                           : undef };
    }
    return @e;
}

sub unquote {
    my ($s) = @_;
    return $s unless $s =~ /^"(.*)"$/s;
    $s = $1;
    $s =~ s{\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))}
           {defined $1 ? chr(oct $1) : defined $2 ? chr(hex $2)
                       : ($ESC{$3} // $3)}ges;
    return $s;
}

# protoc --decode's text into a tree: a message is a hash of its fields,
# each a list of values (messages or scalars), in the order written.
sub decode_otlp_text {
    my ($text) = @_;
    my @stack = ({});
    for my $line (split /\n/, $text) {
        if ($line =~ /^\s*(\w+)\s*\{\s*$/) {
            my $m = {};
            push @{ $stack[-1]{$1} }, $m;
            push @stack, $m;
        } elsif ($line =~ /^\s*\}\s*$/) {
            pop @stack;
            die "unbalanced text\n" unless @stack;
        } elsif ($line =~ /^\s*(\w+):\s*(.*?)\s*$/) {
            push @{ $stack[-1]{$1} }, unquote($2);
        } elsif ($line =~ /\S/) {
            die "unexpected line: $line\n";
        }
    }
    die "unbalanced text\n" unless @stack == 1;
    return $stack[0];
}

# The message of a google.rpc.Status (an error's body), by protoc.
sub status_message {
    my ($bytes) = @_;
    my $in = File::Temp->new(TEMPLATE => 'status-XXXXXX', TMPDIR => 1);
    binmode $in;
    print $in $bytes;
    close $in;
    my $proto = dirname(dirname(__FILE__)) . '/proto';
    my $text = `protoc --decode=otlp.Status -I '$proto' otlp_profiles.proto < '$in' 2>&1`;
    return '' unless $? == 0;
    return otlp_one(decode_otlp_text($text), 'message', '');
}

# A field's one value (the first), or $default.
sub otlp_one {
    my ($m, $field, $default) = @_;
    my $v = $m->{$field};
    return $v && @$v ? $v->[0] : $default;
}

# A string of the request's dictionary.
sub otlp_str {
    my ($e, $i) = @_;
    my $d = otlp_one($e, 'dictionary', {});
    return ($d->{string_table} // [])->[$i // 0] // '';
}

# The resource's attributes of the first ResourceProfiles: name => value.
sub otlp_resource {
    my ($e) = @_;
    my $rp = otlp_one($e, 'resource_profiles', {});
    my $res = otlp_one($rp, 'resource', {});
    my %a;
    for my $kv (@{ $res->{attributes} // [] }) {
        my $v = otlp_one($kv, 'value', {});
        $a{ otlp_one($kv, 'key', '') } = otlp_one($v, 'string_value')
                                         // otlp_one($v, 'int_value');
    }
    return \%a;
}

# Every Profile of the request: { type => "cpu/nanoseconds", period =>
# "cpu/nanoseconds", profile }.
sub otlp_profiles {
    my ($e) = @_;
    my @out;
    for my $rp (@{ $e->{resource_profiles} // [] }) {
        for my $sp (@{ $rp->{scope_profiles} // [] }) {
            for my $p (@{ $sp->{profiles} // [] }) {
                my $st = otlp_one($p, 'sample_type', {});
                my $pt = otlp_one($p, 'period_type', {});
                push @out, {
                    type => otlp_str($e, otlp_one($st, 'type_strindex', 0))
                            . '/' . otlp_str($e, otlp_one($st, 'unit_strindex',
                                                          0)),
                    period => otlp_str($e, otlp_one($pt, 'type_strindex', 0))
                              . '/' . otlp_str($e, otlp_one($pt,
                                                   'unit_strindex', 0)),
                    profile => $p };
            }
        }
    }
    return @out;
}

# The sum of a Profile's values.
sub otlp_total {
    my ($p) = @_;
    my $sum = 0;
    $sum += otlp_one($_, 'values', 0) for @{ $p->{samples} // [] };
    return $sum;
}

# A Profile's values by the name of each sample's leaf function.
sub otlp_leaf_totals {
    my ($e, $p) = @_;
    my $d = otlp_one($e, 'dictionary', {});
    my %t;
    for my $s (@{ $p->{samples} // [] }) {
        my $stack = $d->{stack_table}[ otlp_one($s, 'stack_index', 0) ] // {};
        my $leaf = ($stack->{location_indices} // [])->[0] // next;
        my $loc = $d->{location_table}[$leaf] // next;
        for my $line (@{ $loc->{lines} // [] }) {
            my $f = $d->{function_table}[ otlp_one($line, 'function_index',
                                                   0) ] // next;
            $t{ otlp_str($e, otlp_one($f, 'name_strindex', 0)) }
                += otlp_one($s, 'values', 0);
        }
    }
    return \%t;
}

1;
