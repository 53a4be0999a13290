# SPDX-License-Identifier: BSD-2-Clause
package ProfPprof;

# Reading the profiles the module writes (gzipped pprof), independently
# of the module: decoded with gzip and protoc (shared/profiler's
# profile.proto) into nested hashes, then read: the string table, sample
# types and totals, the functions of a location and its Lua frames, leaf
# functions, labels; the profile files of a dump dir in order.
#
#   my $p = decode_profile($file);
#   my $cpu = profile_total($p, 'cpu-time');
#   my $by_leaf = leaf_totals($p, 'cpu-time');

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use File::Temp ();

use ProfCommand qw(run_capture);
use ProfEnv;

our @EXPORT = qw(
    decode_profile decode_profile_text
    pstr sample_types value_index profile_total leaf_totals
    function_names sample_labels leaf_function
    profile_files
);
our @EXPORT_OK = qw(decode_dump_dir index_profile lua_frames_of decode_raw);


# Profile files of a dump dir.

# Paths of the files of a dump dir matching a regex.
sub profile_files {
    my ($dir, $re) = @_;
    opendir(my $dh, $dir) or return ();
    my @f = grep { $_ =~ $re } readdir($dh);
    closedir($dh);
    # by sequence number when the name has one
    return map { "$dir/$_" } sort {
        my ($x) = $a =~ /\.(\d+)\.pprof$/;
        my ($y) = $b =~ /\.(\d+)\.pprof$/;
        ($x // 0) <=> ($y // 0) or $a cmp $b
    } @f;
}

# Every .pprof file of a dump dir, decoded, in order of sequence number.
sub decode_dump_dir {
    my ($dir) = @_;
    return map { decode_profile($_) } profile_files($dir, qr/\.pprof$/);
}


# Profiles: decoded with protoc into a Perl structure.

my %ESCAPES = (n => "\n", r => "\r", t => "\t", a => "\a", b => "\b",
               f => "\f", v => "\x0b");

sub _unescape {
    my ($oct, $hex, $c) = @_;
    return chr(oct($oct)) if defined $oct;
    return chr(hex($hex)) if defined $hex;
    return $ESCAPES{$c} // $c;
}

# Numbers, strings (C-escaped, as protoc prints them), and enum names.
sub _text_value {
    my ($v) = @_;
    if ($v =~ /^"(.*)"$/s) {
        my $s = $1;
        $s =~ s{\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))}
               {_unescape($1, $2, $3)}ges;
        return $s;
    }
    return $v eq 'true' ? 1 : $v eq 'false' ? 0 : $v;
}

my %REPEATED = map { $_ => 1 } qw(
    sample_type sample mapping location function string_table comment
    location_id value label line
);

# protoc's text format into nested hashes: repeated fields are arrays
# (possibly empty), scalars plain values.
sub decode_profile_text {
    my ($text) = @_;
    my $root = {};
    my @stack = ($root);

    for my $line (split /\n/, $text) {
        next if $line =~ /^\s*$/;
        if ($line =~ /^\s*(\w+)\s*\{\s*$/) {
            my $m = {};
            _add($stack[-1], $1, $m);
            push @stack, $m;
        } elsif ($line =~ /^\s*\}\s*$/) {
            pop @stack;
            croak "unbalanced protoc output" unless @stack;
        } elsif ($line =~ /^\s*(\w+):\s*(.*?)\s*$/) {
            _add($stack[-1], $1, _text_value($2));
        } else {
            croak "cannot parse protoc output line: $line";
        }
    }

    croak "unbalanced protoc output" unless @stack == 1;

    $root->{$_} //= [] for qw(sample_type sample mapping location function
                              string_table comment);
    $root->{$_} //= 0 for qw(drop_frames keep_frames time_nanos
                             duration_nanos period default_sample_type);
    for my $s (@{ $root->{sample} }) {
        $s->{$_} //= [] for qw(location_id value label);
        $_->{str} //= 0, $_->{num} //= 0 for @{ $s->{label} };
    }
    for my $l (@{ $root->{location} }) {
        $l->{line} //= [];
        $l->{$_} //= 0 for qw(mapping_id address);
    }
    for my $x (@{ $root->{mapping} }, @{ $root->{function} },
               @{ $root->{sample_type} },
               ($root->{period_type} ? $root->{period_type} : ()))
    {
        $x->{$_} //= 0 for qw(filename build_id name type unit);
    }

    return $root;
}

sub _add {
    my ($h, $k, $v) = @_;
    if ($REPEATED{$k}) {
        push @{ $h->{$k} }, $v;
    } else {
        $h->{$k} = $v;
    }
}

# Decodes a gzipped pprof file. Returns the structure, or dies with the
# reason (not gzip, not a Profile).
sub decode_profile {
    my ($file) = @_;

    my $tmp = File::Temp->new(TEMPLATE => 'profile-XXXXXX', TMPDIR => 1);
    my $raw = $tmp->filename;

    my ($rc, $out) = run_capture('sh', '-c', 'gzip -dc "$1" > "$2"',
                                 'sh', $file, $raw);
    croak "gzip -dc $file failed (exit $rc): $out" if $rc != 0;

    ($rc, $out) = run_capture('sh', '-c',
        'protoc --decode=perftools.profiles.Profile -I "$1" profile.proto'
        . ' < "$2"', 'sh', ProfEnv::proto_dir(), $raw);
    croak "protoc --decode $file failed (exit $rc): $out" if $rc != 0;

    my $p = decode_profile_text($out);
    $p->{file} = $file;
    return $p;
}

# Decodes an uncompressed pprof file (what a receiver recorded).
sub decode_raw {
    my ($file) = @_;

    my ($rc, $out) = run_capture('sh', '-c',
        'protoc --decode=perftools.profiles.Profile -I "$1" profile.proto'
        . ' < "$2"', 'sh', ProfEnv::proto_dir(), $file);
    croak "protoc --decode $file failed (exit $rc): $out" if $rc != 0;

    my $p = decode_profile_text($out);
    $p->{file} = $file;
    return $p;
}

# A string of the profile's string table.
sub pstr {
    my ($p, $i) = @_;
    return $p->{string_table}[$i // 0] // '';
}

# "type/unit" of every sample type, in order.
sub sample_types {
    my ($p) = @_;
    return map { pstr($p, $_->{type}) . '/' . pstr($p, $_->{unit}) }
           @{ $p->{sample_type} };
}

# Index of the sample type named $type in each sample's values.
sub value_index {
    my ($p, $type) = @_;
    my $i = 0;
    for my $st (@{ $p->{sample_type} }) {
        return $i if pstr($p, $st->{type}) eq $type;
        $i++;
    }
    croak "no sample type $type in $p->{file}";
}

# Sum of a sample type over all samples.
sub profile_total {
    my ($p, $type) = @_;
    my $i = value_index($p, $type);
    my $sum = 0;
    $sum += $_->{value}[$i] // 0 for @{ $p->{sample} };
    return $sum;
}

# Indexes a decoded profile for lookups: $p->{_loc} (location id =>
# location) and $p->{_fn} (function id => function).
sub index_profile {
    my ($p) = @_;
    $p->{_loc} //= { map { $_->{id} => $_ } @{ $p->{location} } };
    $p->{_fn}  //= { map { $_->{id} => $_ } @{ $p->{function} } };
}

# Names of the functions of a location, innermost (inlined) first; a
# location without a function is named by its address.
sub function_names {
    my ($p, $location_id) = @_;
    index_profile($p);
    my $loc = $p->{_loc}{$location_id};
    return ("[unknown location $location_id]") unless $loc;
    my @names = map {
        my $f = $p->{_fn}{ $_->{function_id} // 0 };
        $f ? pstr($p, $f->{name}) : '[unknown function]'
    } @{ $loc->{line} };
    return @names ? @names : (sprintf('0x%x', $loc->{address}));
}

# The Lua frames of a location (functions with a file: what the module
# writes for Lua), each { name, file, start_line, line }.
sub lua_frames_of {
    my ($p, $location_id) = @_;
    index_profile($p);
    my $loc = $p->{_loc}{$location_id} or return ();
    my @out;
    for my $l (@{ $loc->{line} }) {
        my $f = $p->{_fn}{ $l->{function_id} // 0 } or next;
        next unless $f->{filename};
        # A Line's line: a list, as the decoder makes every "line" field.
        my $line = ref $l->{line} ? $l->{line}[0] : $l->{line};
        push @out, { name => pstr($p, $f->{name}),
                     file => pstr($p, $f->{filename}),
                     start_line => $f->{start_line} // 0,
                     line => $line // 0 };
    }
    return @out;
}

# The leaf function of a sample.
sub leaf_function {
    my ($p, $s) = @_;
    my $id = $s->{location_id}[0];
    return '[no stack]' unless defined $id;
    return (function_names($p, $id))[0];
}

# { leaf function name => sum of $type }.
sub leaf_totals {
    my ($p, $type) = @_;
    my $i = value_index($p, $type);
    my %t;
    for my $s (@{ $p->{sample} }) {
        $t{ leaf_function($p, $s) } += $s->{value}[$i] // 0;
    }
    return \%t;
}

# The labels of a sample: { key => { str => string or undef, num => n } }.
sub sample_labels {
    my ($p, $s) = @_;

    my %l;
    for my $lb (@{ $s->{label} }) {
        $l{ pstr($p, $lb->{key}) } = {
            str => $lb->{str} ? pstr($p, $lb->{str}) : undef,
            num => $lb->{num},
        };
    }
    return \%l;
}

1;
