# SPDX-License-Identifier: BSD-2-Clause
package ProfHotspots;

# Code hotspots in decoded profiles (t/hotspots*.t and the tests and
# benchmarks that read stacks): samples flattened into hashes with their
# request labels (span id, local root span id, endpoint) and stacks
# (function names, objects, Lua frames), selections and sums of them, the
# burn module's samples and the test that they carry the right ids; W3C
# traceparent values and the u64 ids they give.
#
#   my @s = ProfHotspots::hotspot_samples(decode_dump_dir($t->dump_dir));
#   ProfHotspots::ok_burn_ids(name => ..., samples => \@s,
#                             filter => endpoint_is('GET /burn'), ...);
#
# Not exported unless asked: call them as ProfHotspots::x.

use strict;
use warnings;

use Exporter qw(import);
use Test::More;

use ProfPprof qw(function_names index_profile lua_frames_of pstr
                 sample_labels value_index);

our @EXPORT_OK = qw(endpoint_is);

# A numeric label as the u64 it carries, in decimal (protoc prints int64
# labels signed); undef stays undef.
sub u64 {
    my ($n) = @_;
    return undef unless defined $n;
    return sprintf('%u', $n);
}

# A W3C traceparent with the given parent id (16 hex digits) and a trace id
# (32 hex digits, default a fixed one).
sub traceparent {
    my ($parent_hex, $trace_hex) = @_;
    $trace_hex //= '4bf92f3577b34da6a3ce929d0e0e4736';
    return "00-$trace_hex-$parent_hex-01";
}

# The hex parent id of a traceparent as a decimal u64.
sub hex_to_u64 {
    my ($hex) = @_;
    no warnings 'portable';
    $hex = substr($hex, -16) if length($hex) > 16;
    return sprintf('%u', hex($hex));
}

# The samples of decoded profiles, flattened into hashes: cpu (ns),
# cpu_samples, wall (ns), span and root (u64 decimal strings or undef),
# endpoint (string or undef), thread (the "thread id" label), funcs (the
# function names of all its frames, leaf first), objects (the mapping file
# name of each frame), lua (its Lua frames, leaf first: lua_frames_of),
# lua_leaf (its leaf frame is a Lua one), leaf, and has_span_label /
# has_root_label / has_endpoint_label (whether the label is present at
# all).
sub hotspot_samples {
    my (@profiles) = @_;
    my @out;

    for my $p (@profiles) {
        index_profile($p);
        my %map = map { $_->{id} => pstr($p, $_->{filename}) }
                  @{ $p->{mapping} };
        my $icpu = value_index($p, 'cpu-time');
        my $icpus = value_index($p, 'cpu-samples');
        my $iwall = value_index($p, 'wall-time');

        for my $s (@{ $p->{sample} }) {
            my $l = sample_labels($p, $s);
            my (@funcs, @objects, @lua);
            for my $id (@{ $s->{location_id} }) {
                push @lua, lua_frames_of($p, $id);
                my @names = function_names($p, $id);
                push @funcs, @names;
                my $loc = $p->{_loc}{$id};
                my $mapping = ($loc && $loc->{mapping_id})
                              ? $map{ $loc->{mapping_id} } // '' : '';
                # One object a name: a location's inlined functions too.
                push @objects, ($mapping) x @names;
            }
            push @out, {
                cpu         => $s->{value}[$icpu] // 0,
                cpu_samples => $s->{value}[$icpus] // 0,
                wall        => $s->{value}[$iwall] // 0,
                span        => $l->{'span id'} ? u64($l->{'span id'}{num})
                                               : undef,
                root        => $l->{'local root span id'}
                               ? u64($l->{'local root span id'}{num}) : undef,
                endpoint    => $l->{'trace endpoint'}
                               ? $l->{'trace endpoint'}{str} : undef,
                thread      => $l->{'thread id'} ? $l->{'thread id'}{num}
                                                 : undef,
                has_span_label     => exists $l->{'span id'},
                has_root_label     => exists $l->{'local root span id'},
                has_endpoint_label => exists $l->{'trace endpoint'},
                funcs       => \@funcs,
                objects     => \@objects,
                lua         => \@lua,
                # Lua code itself running (no native frame above it).
                lua_leaf    => @{ $s->{location_id} }
                               && lua_frames_of($p, $s->{location_id}[0])
                               ? 1 : 0,
                leaf        => $funcs[0] // '[no stack]',
            };
        }
    }

    return @out;
}

# Whether a flattened sample's stack has a frame in function $name (a
# string: exact name; a regex: matched).
sub stack_has {
    my ($s, $name) = @_;
    return scalar grep { ref $name ? $_ =~ $name : $_ eq $name }
                       @{ $s->{funcs} };
}

# The burn samples (CPU time in ngx_http_profiling_burn_spin).
sub burn_samples {
    return grep { $_->{cpu} > 0
                  && stack_has($_, 'ngx_http_profiling_burn_spin') } @_;
}

# { key => sum of cpu } over flattened samples, the key given by $key_of
# (undef keys count as "-").
sub cpu_by {
    my ($key_of, @samples) = @_;
    my %h;
    $h{ $key_of->($_) // '-' } += $_->{cpu} for @samples;
    return \%h;
}

# "key 12ms, key 3ms" for diagnostics of a cpu_by hash.
sub format_cpu_by {
    my ($h) = @_;
    return join(', ', map { sprintf('%s %.0fms', $_, $h->{$_} / 1e6) }
                      sort { $h->{$b} <=> $h->{$a} } keys %$h) || 'none';
}

sub sum_cpu {
    my $sum = 0;
    $sum += $_->{cpu} for @_;
    return $sum;
}

# Whether two optional values are equal (both undef, or the same string).
sub same_value {
    my ($x, $y) = @_;
    return !defined $x && !defined $y
           || defined $x && defined $y && $x eq $y;
}

# A test: of the burn CPU (ngx_http_profiling_burn_spin) of the flattened
# samples that $o{filter} selects, at least $o{share} (default 0.95) has
# span id $o{span} and root span id $o{root} (undef: without that label),
# and $o{endpoint} when given (exists with undef: without one); and there
# is at least $o{min_ns} (default 50ms) of it. Returns the test's result.
sub ok_burn_ids {
    my (%o) = @_;
    my $share = $o{share} // 0.95;
    my $min_ns = $o{min_ns} // 50_000_000;
    my @b = grep { $o{filter}->($_) } burn_samples(@{ $o{samples} });
    my $total = sum_cpu(@b);
    my @good = grep {
        same_value($_->{span}, $o{span}) && same_value($_->{root}, $o{root})
        && (!exists $o{endpoint}
            || same_value($_->{endpoint}, $o{endpoint}))
    } @b;
    my $got = $total ? sum_cpu(@good) / $total : 0;

    my $ok = ok($total >= $min_ns && $got >= $share,
        sprintf('%s: %.1f%% of %.0fms of burn cpu-time has span id %s, '
                . 'root span id %s%s', $o{name}, 100 * $got, $total / 1e6,
                $o{span} // 'none', $o{root} // 'none',
                exists $o{endpoint}
                ? ', endpoint ' . ($o{endpoint} // 'none') : ''));
    unless ($ok) {
        diag(sprintf('  (need at least %.0f%% of at least %.0fms)',
                     100 * $share, $min_ns / 1e6));
        diag('  burn cpu-time by span/root/endpoint: ' . format_cpu_by(
            cpu_by(sub { join(' / ', $_[0]{span} // '-', $_[0]{root} // '-',
                              $_[0]{endpoint} // '-') }, @b)));
    }
    return $ok;
}

# A filter of flattened samples (for ok_burn_ids): those of the endpoint
# $e ("GET /path").
sub endpoint_is {
    my ($e) = @_;
    return sub { ($_[0]{endpoint} // '') eq $e };
}

# Whether a frame of a flattened sample (hotspot_samples) is in code of no
# loaded object (JIT code): no mapping, no function, only an address.
sub is_jit_frame {
    my ($s, $i) = @_;
    return $s->{objects}[$i] eq '' && $s->{funcs}[$i] =~ /^0x[0-9a-f]+$/;
}

# The CPU in an object's own code (samples whose leaf frame is in the
# object $path), by the name of the leaf function: (\%by, total).
sub leaf_cpu_in {
    my ($samples, $path) = @_;
    my %by;
    for my $s (@$samples) {
        next unless ($s->{objects}[0] // '') eq $path;
        $by{ $s->{funcs}[0] // '(none)' } += $s->{cpu};
    }
    my $total = 0;
    $total += $_ for values %by;
    return (\%by, $total);
}

1;
