# SPDX-License-Identifier: BSD-2-Clause
# The stand-in Pyroscope (t/pyroscope.pl) against a client nobody here
# wrote: Pyroscope's Node.js SDK (@pyroscope/nodejs, installed by
# ci/install-deps) pushing to it unchanged must be accepted, so that the
# stand-in is no stricter than Pyroscope; the same profiles made invalid
# must be refused, so that it is as strict.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Spec;
use HTTP::Tiny;
use Test::More;

use ProfCommand qw(run_capture);
use ProfFiles qw(slurp);
use ProfHTTP;
use ProfPprof;
use ProfPyroscope;
use ProfWait;

my $modules = $ENV{PROFILING_NODE_MODULES}
              // '/opt/profiling-test/node/node_modules';

my ($rc) = run_capture('node', '--version');
plan skip_all => 'no node in PATH (ci/install-deps installs nodejs)'
    if $rc != 0;
plan skip_all => "no \@pyroscope/nodejs in $modules (ci/install-deps "
                 . 'installs it; PROFILING_NODE_MODULES names another)'
    unless -e "$modules/\@pyroscope/nodejs/package.json";

my $port = ProfHTTP::free_port();
my $r = start_pyroscope("127.0.0.1:$port");

{
    local $ENV{NODE_PATH} = $modules;
    my ($node_rc, $out) = run_capture('node', "$FindBin::Bin/pyroscope-sdk.js",
                                      "http://127.0.0.1:$port", 4);
    is($node_rc, 0, 'the SDK ran and stopped') or diag($out);
}

my @p;
ok(wait_until(sub { @p = pushes($r); @p >= 4 }, 15),
   'the SDK pushed its profiles') or diag(scalar @p);

my @refused = grep { $_->{status} != 200 } @p;
is(scalar @refused, 0, 'the stand-in accepted every one of them')
    or diag(explain([ map { "$_->{status} $_->{reason}" } @refused ]));

like($p[0]{request}, qr{^POST /ingest\?format=pprof&}, 'through /ingest');

my ($wall) = grep { $_->{series}[0]{labels}{__name__} eq 'wall' } @p;
ok($wall, 'a wall profile') or BAIL_OUT('no wall profile to judge');
my $labels = $wall->{series}[0]{labels};
is($labels->{service_name}, 'sdk-check', 'service_name: the app name');
is($labels->{region}, 'eu-west', 'its tag');
is($labels->{'otel.scope.name'}, 'com.grafana.pyroscope/nodejs',
   'a label name with dots, taken (Pyroscope takes it)');
my ($x) = push_profiles($wall);
ok(@{ $x->{profile}{sample} } > 0, 'with samples');

# The same profile, made invalid, is refused as Pyroscope refuses it.
my $raw = slurp("$wall->{dir}/profile-0-0.pb");
my $http = HTTP::Tiny->new(timeout => 10);
for my $case (
    [ 'a label name twice', 'sdk-check%7Ba%3D1%2Ca%3D2%7D',
      qr/duplicate label name: 'a'/ ],
    [ 'no service name', '%7Bservice_name%3D%7D',
      qr/service name is not provided/ ],
    [ 'a label value over 2,048 bytes',
      'sdk-check%7Bv%3D' . ('x' x 2049) . '%7D',
      qr/label value too long/ ],
) {
    my ($name, $app, $re) = @$case;
    my $res = $http->post("http://127.0.0.1:$port/ingest?format=pprof"
                          . "&name=$app",
                          { headers => { 'Content-Type'
                                         => 'application/octet-stream' },
                            content => $raw });
    is($res->{status}, 400, "refused: $name");
    like($res->{content}, $re, '  with the reason') or diag($res->{content});
}

my $res = $http->post("http://127.0.0.1:$port/ingest?format=pprof"
                      . "&name=sdk-check",
                      { content => substr($raw, 0, length($raw) / 2) });
is($res->{status}, 400, 'refused: a cut profile');

stop_pyroscope($r);

done_testing();
