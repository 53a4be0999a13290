# SPDX-License-Identifier: BSD-2-Clause
package ProfHostile;

# Helpers for the tests of hostile input (t/hostile-*.t): strict decoders
# independent of the module and of protoc (Python: every string of a
# pprof's string table, every JSON document, decoded as strict UTF-8), the
# replacement a string must get (Python's decode('utf-8', 'replace')), a
# watch on files that must never be opened (inotify), and an nginx started
# under a name of invalid UTF-8 (its workers' thread name). (The workers'
# exit lines are read with ProfLog, the stand-in agent's recordings with
# ProfAgent.)
#
#   my $r = ProfHostile::check_pprof($file);   # { ok, error, labels }
#   my $e = ProfHostile::check_json($file);    # { ok, error, doc }
#   my @s = ProfHostile::replaced(@bytes);     # UTF-8 bytes, U+FFFD'd
#   my $w = ProfHostile::watch(files => [...], dirs => [...]);
#   ... $w->events ... $w->stop;
#
# Not exported: call them as ProfHostile::x.

use strict;
use warnings;

use Carp qw(croak);
use Encode ();
use File::Temp qw(tempdir);
use JSON::PP ();
use POSIX ();
use Time::HiRes qw(time);

use ProfCommand qw(run_stdout);
use ProfEnv;
use ProfWait qw(wait_until);


my $DIR = tempdir('hostile-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# The strict decoders, in Python: no protobuf module needed (a varint and
# length-delimited reader of the fields the checks need).
my $DECODER = <<'PY';
import gzip, json, sys

def varint(b, i):
    shift, value = 0, 0
    while True:
        if i >= len(b):
            raise ValueError("varint past the end")
        c = b[i]
        i += 1
        value |= (c & 0x7f) << shift
        shift += 7
        if not c & 0x80:
            return value, i
        if shift > 63:
            raise ValueError("varint too long")

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(b, i)
        elif wire == 1:
            value, i = b[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(b, i)
            value, i = b[i:i + n], i + n
            if len(value) != n:
                raise ValueError("field %d past the end" % number)
        elif wire == 5:
            value, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        if i > len(b):
            raise ValueError("field %d past the end" % number)
        yield number, wire, value

def pprof(path):
    data = gzip.decompress(open(path, "rb").read())
    strings, samples = [], []
    for number, wire, value in fields(data):
        if number == 6 and wire == 2:
            strings.append(value.decode("utf-8", "strict"))
        elif number == 2 and wire == 2:
            samples.append(value)
    if not strings or strings[0] != "":
        raise ValueError("string_table[0] is not empty")
    labels = {}
    for s in samples:
        for number, wire, value in fields(s):
            if number != 3 or wire != 2:
                continue
            key = string = 0
            for n, w, v in fields(value):
                if n == 1 and w == 0:
                    key = v
                elif n == 2 and w == 0:
                    string = v
            if string:
                by = labels.setdefault(strings[key], {})
                by[strings[string]] = by.get(strings[string], 0) + 1
    return {"strings": len(strings), "samples": len(samples),
            "labels": labels}

def no_constant(name):
    raise ValueError("not JSON: " + name)

def document(path):
    text = open(path, "rb").read().decode("utf-8", "strict")
    return {"doc": json.loads(text, parse_constant=no_constant)}

def replaced(hexes):
    return [bytes.fromhex(h).replace(b"\0", b"\xff").decode("utf-8", "replace")
            for h in hexes]

mode, args = sys.argv[1], sys.argv[2:]
if mode == "replaced":
    print(json.dumps(replaced(args)))
    sys.exit(0)
out = []
for path in args:
    try:
        r = pprof(path) if mode == "pprof" else document(path)
        r["ok"] = True
    except Exception as e:
        r = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
    out.append(r)
print(json.dumps(out))
PY

# A watch on files and directories (inotify through ctypes): one line per
# event, "<watched path>\t<event names>\t<name>", flushed.
my $WATCHER = <<'PY';
import ctypes, os, signal, struct, sys

out = open(sys.argv[1], "w", buffering=1)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
if fd < 0:
    sys.exit("inotify_init1: errno %d" % ctypes.get_errno())

NAMES = [(0x1, "ACCESS"), (0x2, "MODIFY"), (0x4, "ATTRIB"),
         (0x8, "CLOSE_WRITE"), (0x10, "CLOSE_NOWRITE"), (0x20, "OPEN"),
         (0x40, "MOVED_FROM"), (0x80, "MOVED_TO"), (0x100, "CREATE"),
         (0x200, "DELETE"), (0x400, "DELETE_SELF"), (0x800, "MOVE_SELF"),
         (0x4000, "Q_OVERFLOW"), (0x8000, "IGNORED")]
FILE_MASK = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x400 | 0x800
DIR_MASK = 0x40 | 0x80 | 0x100 | 0x200
DONT_FOLLOW = 0x02000000

watches = {}
for arg in sys.argv[2:]:
    kind, path = arg.split(":", 1)
    mask = (FILE_MASK if kind == "file" else DIR_MASK) | DONT_FOLLOW
    wd = libc.inotify_add_watch(fd, path.encode("utf-8", "surrogateescape"),
                                mask)
    if wd < 0:
        sys.exit("inotify_add_watch %s: errno %d" % (path, ctypes.get_errno()))
    watches[wd] = path

# TERM: what the kernel still holds is read out first, then exit (events
# of the last moments, made just before the caller stopped the watch).
def on_term(*a):
    os.set_blocking(fd, False)

signal.signal(signal.SIGTERM, on_term)
out.write("ready\n")

while True:
    try:
        buf = os.read(fd, 65536)
    except BlockingIOError:
        sys.exit(0)
    i = 0
    while i < len(buf):
        wd, mask, cookie, length = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + length].rstrip(b"\0")
        i += 16 + length
        what = "|".join(n for bit, n in NAMES if mask & bit)
        out.write("%s\t%s\t%s\n" % (watches.get(wd, "?"), what,
                                    name.decode("utf-8", "surrogateescape")))
PY

sub _script {
    my ($name, $text) = @_;
    my $path = "$DIR/$name";
    unless (-f $path) {
        open(my $fh, '>', $path) or croak "$path: $!";
        print $fh $text;
        close($fh);
    }
    return $path;
}

sub _python {
    my ($mode, @args) = @_;
    my ($rc, $out) = run_stdout('python3', _script('decode.py', $DECODER),
                                $mode, @args);
    croak "python3 decode.py $mode failed (exit $rc): $out" if $rc != 0;
    return JSON::PP->new->decode($out);
}

# UTF-8 bytes of a Perl string from Python's JSON.
sub _bytes {
    my ($s) = @_;
    return ref $s eq 'HASH' ? { map { _bytes($_) => _bytes($s->{$_}) }
                                keys %$s }
         : ref $s eq 'ARRAY' ? [ map { _bytes($_) } @$s ]
         : defined $s && !ref $s ? Encode::encode('UTF-8', $s)
         : $s;
}

# Strict decodes of gzipped pprof files: one { ok, error, strings,
# samples, labels => { key => { string value => samples } } } per file,
# strings as UTF-8 bytes.
sub check_pprof {
    my (@files) = @_;
    return () unless @files;
    return @{ _bytes(_python('pprof', @files)) };
}

# Strict decodes of JSON files (UTF-8, then JSON): one { ok, error, doc }
# per file, strings as UTF-8 bytes.
sub check_json {
    my (@files) = @_;
    return () unless @files;
    return @{ _bytes(_python('json', @files)) };
}

# What a document must show for these bytes: each NUL and each maximal
# ill-formed subpart replaced by U+FFFD, as UTF-8 bytes.
sub replaced {
    my (@bytes) = @_;
    return () unless @bytes;
    return @{ _bytes(_python('replaced', map { unpack('H*', $_) } @bytes)) };
}

# The string $s shown with its non-ASCII and control bytes escaped.
sub show {
    my ($s) = @_;
    return 'undef' unless defined $s;
    $s = substr($s, 0, 60) . '...(' . length($s) . ' bytes)'
        if length($s) > 64;
    $s =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord($1))/ge;
    return "\"$s\"";
}


# A watch: files => [paths whose every open, read, write or change is
# an event], dirs => [directories whose entries created, deleted or
# renamed are events]. Returns an object: events() is the list of
# [path, "EVENT|...", name]; stop() ends the watch.
sub watch {
    my (%o) = @_;
    my $log = "$DIR/watch-" . time() . "-$$-" . int(rand(1e9));
    my @args = ((map { "file:$_" } @{ $o{files} // [] }),
                (map { "dir:$_" } @{ $o{dirs} // [] }));

    my $pid = fork();
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        exec('python3', _script('watch.py', $WATCHER), $log, @args)
            or POSIX::_exit(127);
    }

    my $self = bless { pid => $pid, log => $log }, __PACKAGE__ . '::Watch';
    my $ready = wait_until(sub {
        return -1 if waitpid($pid, POSIX::WNOHANG()) == $pid;
        my @l = $self->_lines;
        return @l && $l[0] eq 'ready';
    }, 10);
    croak "the inotify watch did not start" unless $ready && $ready != -1;
    return $self;
}

package ProfHostile::Watch;

sub _lines {
    my ($self) = @_;
    open(my $fh, '<', $self->{log}) or return ();
    my @l = <$fh>;
    close($fh);
    chomp(@l);
    return @l;
}

sub events {
    my ($self) = @_;
    my @l = $self->_lines;
    shift @l;
    return map { [ split /\t/, $_, 3 ] } @l;
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill('TERM', $self->{pid});
    waitpid($self->{pid}, 0);
    delete $self->{pid};
}

sub DESTROY { $_[0]->stop }

package ProfHostile;

# An nginx binary under the name $name (bytes, at most 15: the thread
# name of its processes): a symbolic link in the instance's prefix to the
# binary; when PROFILING_NGINX is a wrapper script (t/sanitizer-nginx),
# a copy of it that runs the link. Returns the path to put in
# PROFILING_NGINX.
sub nginx_named {
    my ($t, $name) = @_;
    my $dir = $t->prefix . '/bin';
    mkdir($dir) unless -d $dir;
    chmod(0755, $dir);

    my $link = "$dir/$name";
    unlink($link);
    symlink(ProfEnv::nginx_real(), $link) or croak "symlink $link: $!";

    return $link unless ProfEnv::nginx_wrapped();

    my $wrapper = "$dir/wrapper";
    open(my $out, '>', $wrapper) or croak "$wrapper: $!";
    print $out "#!/bin/sh\nPROFILING_NGINX_REAL=$link exec "
               . ProfEnv::nginx_binary() . " \"\$@\"\n";
    close($out);
    chmod(0755, $wrapper);
    return $wrapper;
}

1;
