#!/usr/bin/perl
# SPDX-License-Identifier: BSD-2-Clause

# The page's store (profiling_ui_store) keeps its bound whatever the
# profiles: a worker's profile larger than its share of the store (here
# 3,000 distinct stacks a second in a 1 MB store) has its lightest stacks
# folded into one "[other stacks]" frame, its CPU time kept: the page's
# totals are those of the profiles written to the dump directory.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp;
use JSON::PP;
use Test::More;

use ProfNginx;
use ProfPprof;
use ProfWait;

my $t = ProfNginx->new(workers => 1);
$t->write_config(<<'EOF');
    profiling on;
    profiling_dump_dir %%DUMP%%;
    profiling_period 1s;
    profiling_ui_store 1m;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /many { profiling_burn 1ms; profiling_burn_stacks 3000; }
        location /profiles/ { profiling_ui; }
    }
EOF
$t->run;

my $n = 0;
my $end = time() + 4;
while (time() < $end) {
    $t->get('/many?stack=' . ($n++ % 3000));
}

sub data {
    my $r = $t->get('/profiles/?data=1&window=900');
    return eval { decode_json($r->{content}) };
}

sub dumped_cpu {
    my $sum = 0;
    for my $p (ProfPprof::decode_dump_dir($t->dump_dir)) {
        $sum += ProfPprof::profile_total($p, 'cpu-time');
    }
    return $sum;
}

# Idle: the profiles closed meanwhile are in both places.
my ($d, $dumped);
ok(wait_until(sub {
        $d = data() or return 0;
        $dumped = dumped_cpu();
        return $d->{totals}[0] > 1e8 && $d->{totals}[0] == $dumped;
    }, 20), "the page's CPU time is that of the profiles written ($dumped ns)")
    or diag("page: $d->{totals}[0], dump directory: $dumped");

my %names = map { $_->[0] => 1 } @{ $d->{frames} };
ok($names{'[other stacks]'}, 'the lightest stacks folded into one frame');
ok($names{ngx_http_profiling_burn_spin}, 'the heaviest kept, named');

my $store = $d->{store};
ok($store->{records} > 0 && $store->{used} / $store->{records} <= 4096 + 8,
   sprintf('each profile within its share: %d bytes for %d profiles',
           $store->{used}, $store->{records}));
is($store->{too_large}, 0, 'none refused');

# A view as of a time (at, unix ms: the page's download link) holds the
# periods it held then, whatever closed since.
sub last_view {
    my ($query) = @_;
    my $r = $t->get("/profiles/?data=1&window=last$query");
    return eval { decode_json($r->{content}) };
}

my $then = last_view('');
ok($then && $then->{at_ms} >= $then->{to_ms},
   "the view says its time: $then->{at_ms}");
ok(wait_until(sub {
        $t->get('/many?stack=1');
        my $now = last_view('') or return 0;
        return $now->{to_ms} > $then->{to_ms};
    }, 20), 'a later period closed');

my $again = last_view("&at=$then->{at_ms}");
is($again->{to_ms}, $then->{to_ms}, 'as of the same time: the same period');
is_deeply($again->{totals}, $then->{totals}, 'with the same totals');

my $pprof = File::Temp->new(TEMPLATE => 'ui-store-XXXXXX', TMPDIR => 1);
my $dl = $t->http->mirror("http://127.0.0.1:$t->{port}"
                          . "/profiles/?pprof=1&at=$then->{at_ms}",
                          $pprof->filename);
ok($dl->{success}, 'its pprof downloaded');
is(ProfPprof::profile_total(ProfPprof::decode_raw($pprof->filename),
                            'cpu-time'),
   $then->{totals}[0], "its pprof's CPU time is the page's");

is($t->get('/profiles/?data=1&at=soon')->{status}, 400, 'a bad time: 400');

$t->stop;
done_testing();
