/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unit tests of the pprof encoder (shared/profiler/pprof.h): a profile
 * built through the aggregator (real symbolizer; frames in functions of
 * this binary, in libc, and the truncated marker) is encoded, written to a
 * temporary file and decoded by independent tools: gzip and protoc (text
 * format, parsed here), and go tool pprof when Go is installed. $PROTO is
 * shared/profiler/profile.proto.
 * Strings made of invalid UTF-8 (a client's URI, a symbol, a file name)
 * must reach the pprof as valid UTF-8: protoc refuses the profile
 * otherwise, and Python decodes the string table strictly.
 */

#include <ctype.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>

#include "profiler/pprof.h"
#include "unit.h"


#define SPAN_ID           0x8000000000000a01ULL    /* above 2^63 */
#define ROOT_SPAN_ID      0xfedcba9876543210ULL
#define ENDPOINT          "GET /api/v1/items"
#define T1_REALTIME_NS    (UNIT_START_REALTIME_NS + 30000000000LL)
#define T1_MONOTONIC_NS   (UNIT_START_MONOTONIC_NS + 29999999000LL)
#define T2_REALTIME_NS    (T1_REALTIME_NS + 60000000000LL)
#define T2_MONOTONIC_NS   (T1_MONOTONIC_NS + 60000012345LL)

#define FFFD              "\xef\xbf\xbd"

/* A symbol of invalid bytes: FF FE, a cut sequence, C0 80, a surrogate. */
#define BAD_SYMBOL        "unit_pprof_bad_\xff\xfe_caf\xc3_\xc0\x80_" \
                          "\xed\xa0\x80"
#define BAD_SYMBOL_SHOWN  "unit_pprof_bad_" FFFD FFFD "_caf" FFFD "_" FFFD \
                          FFFD "_" FFFD FFFD FFFD
#define BAD_THREAD        "nginx: worker\xc3\x28\xf4\x90\x80\x80"
#define BAD_THREAD_SHOWN  "nginx: worker" FFFD "(" FFFD FFFD FFFD FFFD
#define BAD_PATH          "/opt/\xff\xfe/lib\xe2\x82.so"
#define BAD_PATH_SHOWN    "/opt/" FFFD FFFD "/lib" FFFD ".so"
#define BAD_BUILD_ID      "abc\x80"
#define BAD_BUILD_ID_SHOWN  "abc" FFFD


/* A node of protoc's text output: a field, or a message of fields. */

typedef struct node_s  node_t;

struct node_s {
    char    *name;
    char    *value;             /* NULL: a message; strings unescaped */
    node_t  *child;
    node_t  *last;
    node_t  *next;
    node_t  *parent;
};


/* A profile encoded and decoded. */

typedef struct {
    char               path[64];
    prof_buffer_t      gzip;
    prof_pprof_info_t  info;
    node_t            *root;
} decoded_t;


static unit_agg_t  *agg;
static decoded_t    main_profile;
static char         self_path[PATH_MAX];
static uint64_t     leaf_pc, caller_pc, libc_pc, other_pc;
static int64_t      main_start_ns;      /* the profile's, as closed */


/* Functions of the test binary, for the frames. */

int __attribute__((noinline))
unit_pprof_leaf(int x)
{
    volatile int  v;

    v = x;

    return v * 3 + 1;
}


int __attribute__((noinline))
unit_pprof_caller(int x)
{
    volatile int  v;

    v = unit_pprof_leaf(x);

    return v * 11 - 2;
}


int __attribute__((noinline))
unit_pprof_other(int x)
{
    volatile int  v;

    v = x;

    return v ^ 0x5a5a;
}


int unit_pprof_bad(int x) __asm__(BAD_SYMBOL);

int __attribute__((noinline))
unit_pprof_bad(int x)
{
    volatile int  v;

    v = x;

    return v + 7;
}


/* the protoc text format parser */

static node_t *
node_add(node_t *parent, const char *name, size_t len)
{
    node_t  *n;

    n = calloc(1, sizeof(node_t));
    assert_non_null(n);

    n->name = strndup(name, len);
    assert_non_null(n->name);
    n->parent = parent;

    if (parent->last) {
        parent->last->next = n;

    } else {
        parent->child = n;
    }

    parent->last = n;

    return n;
}


static void
node_free(node_t *n)
{
    node_t  *c, *next;

    if (n == NULL) {
        return;
    }

    for (c = n->child; c; c = next) {
        next = c->next;
        node_free(c);
    }

    free(n->name);
    free(n->value);
    free(n);
}


/* A C-escaped text format string "..." (at s) without its quotes. */

static char *
unescape(const char *s)
{
    int        i;
    char      *out, *o;
    unsigned   octal;

    assert_int_equal(*s, '"');
    s++;

    out = malloc(strlen(s) + 1);
    assert_non_null(out);

    for (o = out; *s && *s != '"'; s++) {
        if (*s != '\\') {
            *o++ = *s;
            continue;
        }

        s++;

        switch (*s) {
        case 'n':
            *o++ = '\n';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case '0': case '1': case '2': case '3':
        case '4': case '5': case '6': case '7':
            octal = 0;
            for (i = 0; i < 3 && *s >= '0' && *s <= '7'; i++, s++) {
                octal = (octal << 3) | (*s - '0');
            }
            *o++ = (char) octal;
            s--;
            break;
        default:
            *o++ = *s;       /* \" \' \\ */
        }
    }

    assert_int_equal(*s, '"');
    *o = '\0';

    return out;
}


static node_t *
parse_text(FILE *f)
{
    char     *line, *p, *colon;
    size_t    size, len;
    node_t   *root, *cur, *n;

    root = calloc(1, sizeof(node_t));
    assert_non_null(root);

    cur = root;
    line = NULL;
    size = 0;

    while (getline(&line, &size, f) != -1) {
        line[strcspn(line, "\n")] = '\0';

        for (p = line; *p == ' '; p++) { /* void */ }

        len = strlen(p);
        if (len == 0) {
            continue;
        }

        if (strcmp(p, "}") == 0) {
            assert_non_null(cur->parent);
            cur = cur->parent;
            continue;
        }

        if (len > 2 && strcmp(p + len - 2, " {") == 0) {
            cur = node_add(cur, p, len - 2);
            continue;
        }

        colon = strstr(p, ": ");
        assert_non_null(colon);

        n = node_add(cur, p, colon - p);
        n->value = (colon[2] == '"') ? unescape(colon + 2)
                                     : strdup(colon + 2);
        assert_non_null(n->value);
    }

    free(line);
    assert_ptr_equal(cur, root);

    return root;
}


/* The i-th field or message called name in msg, NULL when absent. */

static node_t *
field(const node_t *msg, const char *name, unsigned i)
{
    node_t  *n;

    for (n = msg->child; n; n = n->next) {
        if (strcmp(n->name, name) == 0 && i-- == 0) {
            return n;
        }
    }

    return NULL;
}


static unsigned
field_count(const node_t *msg, const char *name)
{
    unsigned  count;
    node_t   *n;

    count = 0;

    for (n = msg->child; n; n = n->next) {
        count += strcmp(n->name, name) == 0;
    }

    return count;
}


/* A scalar field; proto3 leaves zero values out of the text. */

static int64_t
field_int(const node_t *msg, const char *name)
{
    node_t  *n;

    n = field(msg, name, 0);
    if (n == NULL) {
        return 0;
    }

    assert_non_null(n->value);

    return strtoll(n->value, NULL, 10);
}


static uint64_t
field_uint(const node_t *msg, const char *name)
{
    node_t  *n;

    n = field(msg, name, 0);
    if (n == NULL) {
        return 0;
    }

    assert_non_null(n->value);

    return strtoull(n->value, NULL, 10);
}


static const char *
string_at(const node_t *root, int64_t index)
{
    node_t  *n;

    assert_true(index >= 0);
    n = field(root, "string_table", index);
    assert_non_null(n);

    return n->value;
}


/* The message called name whose "id" is id. */

static node_t *
by_id(const node_t *root, const char *name, uint64_t id)
{
    unsigned  i;
    node_t   *n;

    for (i = 0; (n = field(root, name, i)) != NULL; i++) {
        if (field_uint(n, "id") == id) {
            return n;
        }
    }

    fail_msg("no %s with id %" PRIu64, name, id);

    return NULL;
}


/* The name of the function of a location, NULL when it has none. */

static const char *
location_function(const node_t *root, const node_t *loc)
{
    node_t  *line, *fn;

    line = field(loc, "line", 0);
    if (line == NULL) {
        return NULL;
    }

    fn = by_id(root, "function", field_uint(line, "function_id"));

    return string_at(root, field_int(fn, "name"));
}


/* The location whose function is called name. */

static node_t *
location_of(const node_t *root, const char *name)
{
    unsigned     i;
    node_t      *loc;
    const char  *fn;

    for (i = 0; (loc = field(root, "location", i)) != NULL; i++) {
        fn = location_function(root, loc);
        if (fn != NULL && strcmp(fn, name) == 0) {
            return loc;
        }
    }

    fail_msg("no location of function %s", name);

    return NULL;
}


/* The label whose key is the string key, NULL when absent. */

static node_t *
label(const node_t *root, const node_t *sample, const char *key)
{
    unsigned  i;
    node_t   *l;

    for (i = 0; (l = field(sample, "label", i)) != NULL; i++) {
        if (strcmp(string_at(root, field_int(l, "key")), key) == 0) {
            return l;
        }
    }

    return NULL;
}


static void
assert_values(const node_t *sample, int64_t cpu_ns, int64_t cpu_samples,
    int64_t wall_ns, int64_t wall_samples, int64_t off_cpu_ns)
{
    int64_t   expected[PROF_VALUE_COUNT];
    unsigned  i;

    expected[PROF_VALUE_CPU_TIME] = cpu_ns;
    expected[PROF_VALUE_CPU_SAMPLES] = cpu_samples;
    expected[PROF_VALUE_WALL_TIME] = wall_ns;
    expected[PROF_VALUE_WALL_SAMPLES] = wall_samples;
    expected[PROF_VALUE_OFF_CPU_TIME] = off_cpu_ns;

    assert_int_equal(field_count(sample, "value"), PROF_VALUE_COUNT);

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        assert_int_equal(strtoll(field(sample, "value", i)->value, NULL, 10),
                         expected[i]);
    }
}


/* encoding and decoding */

static int
run_status(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}


static void
encode(decoded_t *d, const prof_profile_t *p, prof_aggregator_t *a)
{
    int   fd;

    memset(d, 0, sizeof(decoded_t));

    assert_int_equal(prof_pprof_encode_info(p, a, &d->gzip, &d->info), 0);
    assert_true(d->gzip.length > 0);

    strcpy(d->path, "/tmp/test-pprof-XXXXXX");
    fd = mkstemp(d->path);
    assert_true(fd != -1);
    assert_int_equal(write(fd, d->gzip.data, d->gzip.length),
                     d->gzip.length);
    assert_int_equal(close(fd), 0);
}


/* gzip -t checks the trailer, then protoc decodes what gzip gives. */

static void
decode(decoded_t *d)
{
    FILE        *f;
    char         cmd[3 * PATH_MAX], dir[PATH_MAX], *slash;
    node_t      *root;
    const char  *proto;

    proto = getenv("PROTO");
    if (proto == NULL) {
        fail_msg("$PROTO (the path of shared/profiler/profile.proto) is not set");
    }

    snprintf(dir, sizeof(dir), "%s", proto);
    slash = strrchr(dir, '/');
    assert_non_null(slash);
    *slash = '\0';

    snprintf(cmd, sizeof(cmd),
             "gzip -t '%s' && gzip -dc '%s'"
             " | protoc --decode=perftools.profiles.Profile -I '%s' '%s'",
             d->path, d->path, dir, slash + 1);

    f = popen(cmd, "r");
    assert_non_null(f);

    root = parse_text(f);

    if (run_status(pclose(f)) != 0) {
        node_free(root);
        fail_msg("gzip or protoc failed on %s", d->path);
    }

    d->root = root;
}


static void
decoded_free(decoded_t *d)
{
    if (d->path[0]) {
        unlink(d->path);
    }

    prof_buffer_free(&d->gzip);
    node_free(d->root);
    memset(d, 0, sizeof(decoded_t));
}


/*
 * The profile under test, between barriers T1 and T2:
 *
 *   A: leaf, caller, getpid, [truncated]; span SPAN_ID of ROOT_SPAN_ID on
 *      ENDPOINT, a CPU sample and a wall sample
 *   B: the same stack outside a request, a CPU sample
 *   C: other, getpid outside a request, two wall samples
 */

static int
group_setup(void **state)
{
    uint64_t         a[4], c[2];
    prof_batch_t    *b;
    prof_profile_t  *p;

    if (realpath("/proc/self/exe", self_path) == NULL) {
        return -1;
    }

    libc_pc = (uintptr_t) dlsym(RTLD_DEFAULT, "getpid");
    if (libc_pc == 0) {
        return -1;
    }

    leaf_pc = (uintptr_t) unit_pprof_leaf + 2;
    caller_pc = (uintptr_t) unit_pprof_caller + 5;     /* return addresses */
    libc_pc += 3;
    other_pc = (uintptr_t) unit_pprof_other + 1;

    a[0] = leaf_pc;
    a[1] = caller_pc;
    a[2] = libc_pc;
    a[3] = PROF_FRAME_TRUNCATED;

    c[0] = other_pc;
    c[1] = libc_pc;

    agg = unit_agg_create(1);

    /* the first profile only sets the start of the second */

    b = unit_batch(0);
    unit_batch_barrier(b, T1_REALTIME_NS, T1_MONOTONIC_NS);
    unit_consume(agg, b);

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 10000000,
                   .cpu_samples = 1, .span_id = SPAN_ID,
                   .local_root_span_id = ROOT_SPAN_ID }, a, 4, ENDPOINT);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 7000000,
                   .cpu_samples = 1 }, a, 4, NULL);
    unit_batch_add(b, &(unit_sample_t) { .wall_ns = 10000000,
                   .wall_samples = 1, .off_cpu_ns = 9000000 }, c, 2, NULL);
    unit_batch_add(b, &(unit_sample_t) { .wall_ns = 10000000,
                   .wall_samples = 1, .off_cpu_ns = 6000000, .cpu_ns = 4000000,
                   .span_id = SPAN_ID, .local_root_span_id = ROOT_SPAN_ID },
                   a, 4, ENDPOINT);
    unit_batch_add(b, &(unit_sample_t) { .wall_ns = 20000000,
                   .wall_samples = 1, .off_cpu_ns = 20000000 }, c, 2, NULL);
    unit_batch_barrier(b, T2_REALTIME_NS, T2_MONOTONIC_NS);
    unit_consume(agg, b);

    assert_int_equal(agg->nprofiles, 2);
    p = agg->profiles[1];

    main_start_ns = p->start_realtime_ns;
    encode(&main_profile, p, agg->agg);

    return 0;
}


/* The main profile as protoc decodes it (decoded once, by the first test). */

static node_t *
main_root(void)
{
    if (main_profile.root == NULL) {
        decode(&main_profile);
    }

    return main_profile.root;
}


static int
group_teardown(void **state)
{
    decoded_free(&main_profile);
    unit_agg_destroy(agg);

    return 0;
}


static void
test_output_is_gzip(void **state)
{
    const unsigned char  *data = main_profile.gzip.data;

    assert_true(main_profile.gzip.length > 18);
    assert_int_equal(data[0], 0x1f);
    assert_int_equal(data[1], 0x8b);
    assert_int_equal(data[2], 8);                      /* deflate */
}


static void
test_decoded_by_protoc_has_the_sample_types(void **state)
{
    unsigned     i;
    node_t      *root, *vt;
    const char  *types[PROF_VALUE_COUNT][2] = {
        { "cpu-time", "nanoseconds" },
        { "cpu-samples", "count" },
        { "wall-time", "nanoseconds" },
        { "wall-samples", "count" },
        { "off-cpu-time", "nanoseconds" },
    };

    root = main_root();

    assert_string_equal(string_at(root, 0), "");

    assert_int_equal(field_count(root, "sample_type"), PROF_VALUE_COUNT);

    for (i = 0; i < PROF_VALUE_COUNT; i++) {
        vt = field(root, "sample_type", i);
        assert_string_equal(string_at(root, field_int(vt, "type")),
                            types[i][0]);
        assert_string_equal(string_at(root, field_int(vt, "unit")),
                            types[i][1]);
    }

    vt = field(root, "period_type", 0);
    assert_non_null(vt);
    assert_string_equal(string_at(root, field_int(vt, "type")), "cpu-time");
    assert_string_equal(string_at(root, field_int(vt, "unit")),
                        "nanoseconds");
    assert_int_equal(field_int(root, "period"), UNIT_PERIOD_NS);

    assert_string_equal(string_at(root, field_int(root,
                                                  "default_sample_type")),
                        "cpu-time");

    assert_int_equal(field_int(root, "time_nanos"), main_start_ns);
    assert_int_equal(field_int(root, "duration_nanos"),
                     T2_MONOTONIC_NS - T1_MONOTONIC_NS);
}


static void
test_samples_carry_values_and_labels(void **state)
{
    unsigned   i, seen;
    node_t    *root, *s, *l;

    root = main_root();

    assert_int_equal(field_count(root, "sample"), 3);

    seen = 0;

    for (i = 0; (s = field(root, "sample", i)) != NULL; i++) {

        /* every sample: the thread */

        l = label(root, s, "thread id");
        assert_non_null(l);
        assert_int_equal(field_int(l, "num"), UNIT_THREAD_ID);
        assert_null(field(l, "str", 0));

        l = label(root, s, "thread name");
        assert_non_null(l);
        assert_string_equal(string_at(root, field_int(l, "str")),
                            UNIT_THREAD_NAME);
        assert_null(field(l, "num", 0));

        if (label(root, s, "span id") != NULL) {

            /* A: the request's labels, ids as the same 64 bits */

            seen |= 1;
            assert_int_equal(field_count(s, "location_id"), 4);
            assert_int_equal(field_count(s, "label"), 5);
            assert_values(s, 14000000, 1, 10000000, 1, 6000000);

            l = label(root, s, "span id");
            assert_int_equal(field_int(l, "num"), (int64_t) SPAN_ID);
            assert_true(field_int(l, "num") < 0);

            l = label(root, s, "local root span id");
            assert_non_null(l);
            assert_int_equal(field_int(l, "num"), (int64_t) ROOT_SPAN_ID);

            l = label(root, s, "trace endpoint");
            assert_non_null(l);
            assert_string_equal(string_at(root, field_int(l, "str")),
                                ENDPOINT);
            continue;
        }

        /* B and C: outside a request, no request labels */

        assert_int_equal(field_count(s, "label"), 2);

        assert_null(label(root, s, "span id"));
        assert_null(label(root, s, "local root span id"));
        assert_null(label(root, s, "trace endpoint"));

        if (field_count(s, "location_id") == 4) {
            seen |= 2;
            assert_values(s, 7000000, 1, 0, 0, 0);

        } else {
            seen |= 4;
            assert_int_equal(field_count(s, "location_id"), 2);
            assert_values(s, 0, 0, 30000000, 2, 29000000);
        }
    }

    assert_int_equal(seen, 7);
}


static void
test_functions_and_mappings(void **state)
{
    char                  c;
    unsigned              i, checked;
    node_t               *root, *s, *loc, *m;
    uint64_t              expected[4];
    const char           *build_id, *fn;
    const prof_object_t  *self, *libc;

    root = main_root();

    self = prof_symbolize(agg->sym, leaf_pc, NULL);
    assert_non_null(self);
    libc = prof_symbolize(agg->sym, libc_pc - 1, NULL);
    assert_non_null(libc);

    /* the test binary: path, build id, ELF virtual addresses */

    loc = location_of(root, "unit_pprof_leaf");
    assert_int_equal(field_uint(loc, "address"), leaf_pc - self->load_bias);

    m = by_id(root, "mapping", field_uint(loc, "mapping_id"));
    assert_string_equal(string_at(root, field_int(m, "filename")), self_path);

    build_id = string_at(root, field_int(m, "build_id"));
    assert_true(strlen(build_id) >= 16);
    for (i = 0; build_id[i]; i++) {
        c = build_id[i];
        assert_true(isdigit((unsigned char) c) || (c >= 'a' && c <= 'f'));
    }
    assert_string_equal(build_id, self->build_id);

    /* a caller: the address moved back into the call */

    loc = location_of(root, "unit_pprof_caller");
    assert_int_equal(field_uint(loc, "address"),
                     caller_pc - 1 - self->load_bias);
    assert_ptr_equal(by_id(root, "mapping", field_uint(loc, "mapping_id")),
                     m);

    /* libc */

    fn = prof_aggregator_address(agg->agg, libc_pc - 1)->function;
    assert_non_null(fn);
    loc = location_of(root, fn);
    assert_int_equal(field_uint(loc, "address"),
                     libc_pc - 1 - libc->load_bias);
    m = by_id(root, "mapping", field_uint(loc, "mapping_id"));
    assert_string_equal(string_at(root, field_int(m, "filename")),
                        libc->path);
    assert_non_null(strstr(libc->path, "libc"));

    /* the truncated marker: a function, no mapping */

    loc = location_of(root, "[truncated]");
    assert_int_equal(field_uint(loc, "mapping_id"), 0);

    /* the stacks, leaf first */

    expected[0] = field_uint(location_of(root, "unit_pprof_leaf"), "id");
    expected[1] = field_uint(location_of(root, "unit_pprof_caller"), "id");
    expected[2] = field_uint(location_of(root, fn), "id");
    expected[3] = field_uint(location_of(root, "[truncated]"), "id");

    checked = 0;

    for (i = 0; (s = field(root, "sample", i)) != NULL; i++) {
        if (field_count(s, "location_id") != 4) {
            continue;
        }

        checked++;

        assert_int_equal(strtoull(field(s, "location_id", 0)->value, NULL,
                                  10), expected[0]);
        assert_int_equal(strtoull(field(s, "location_id", 1)->value, NULL,
                                  10), expected[1]);
        assert_int_equal(strtoull(field(s, "location_id", 2)->value, NULL,
                                  10), expected[2]);
        assert_int_equal(strtoull(field(s, "location_id", 3)->value, NULL,
                                  10), expected[3]);
    }

    assert_int_equal(checked, 2);                       /* A and B */

    /* every location has a function: so has every mapping, and the
       profile needs no symbols from elsewhere */

    for (i = 0; (m = field(root, "mapping", i)) != NULL; i++) {
        assert_non_null(field(m, "has_functions", 0));
        assert_string_equal(field(m, "has_functions", 0)->value, "true");
    }
    assert_int_equal(i, 2);

    assert_int_equal(main_profile.info.locations, 5);
    assert_int_equal(main_profile.info.unnamed_locations, 0);
    assert_int_equal(main_profile.info.unmapped_locations, 0);
}


/* A pc of this binary's code that no symbol covers (the PLT, padding). */

static uint64_t
unnamed_pc(prof_symbolizer_t *sym, const prof_object_t **obj)
{
    uint64_t              pc;
    const char           *fn;
    const prof_object_t  *self;

    self = prof_symbolize(sym, leaf_pc, NULL);
    assert_non_null(self);

    for (pc = self->start; pc < self->end; pc++) {
        if (prof_symbolize(sym, pc, &fn) == self && fn == NULL) {
            *obj = self;
            return pc;
        }
    }

    fail_msg("no address without a symbol in %s", self->path);

    return 0;
}


/*
 * A frame without a function keeps its mapping (file name, build id) and
 * its ELF virtual address, so that a backend can name it; its mapping no
 * longer claims has_functions (libc's, all named, still does), and the
 * encoder says there are such frames (the upload's remote_symbols tag).
 * A frame in no object has neither.
 */

static void
test_unnamed_frames_keep_their_mapping(void **state)
{
    node_t               *root, *loc, *m, *n;
    uint64_t              pc, pcs[3], unmapped;
    unsigned              i, found;
    decoded_t             d;
    unit_agg_t           *u;
    prof_batch_t         *b;
    prof_profile_t       *p;
    const prof_object_t  *self;

    u = unit_agg_create(1);

    self = NULL;
    pc = unnamed_pc(u->sym, &self);
    assert_non_null(self);

    /* far below any mapping of a PIE process */
    unmapped = 0x10000;
    assert_null(prof_symbolize(u->sym, unmapped, NULL));

    pcs[0] = pc;                /* the leaf: its address as it is */
    pcs[1] = caller_pc;
    pcs[2] = libc_pc;

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1000, .cpu_samples = 1 },
                   pcs, 3, NULL);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1000, .cpu_samples = 1 },
                   &unmapped, 1, NULL);
    unit_batch_barrier(b, T1_REALTIME_NS, T1_MONOTONIC_NS);
    unit_consume(u, b);

    assert_int_equal(u->nprofiles, 1);
    p = u->profiles[0];

    encode(&d, p, u->agg);
    decode(&d);
    root = d.root;

    assert_int_equal(d.info.locations, 4);
    assert_int_equal(d.info.unnamed_locations, 1);
    assert_int_equal(d.info.unmapped_locations, 1);

    found = 0;

    for (i = 0; (loc = field(root, "location", i)) != NULL; i++) {
        if (location_function(root, loc) != NULL) {
            continue;
        }

        if (field_uint(loc, "mapping_id") == 0) {
            /* the unmapped frame: its runtime address, nothing else */
            found |= 2;
            assert_int_equal(field_uint(loc, "address"), unmapped);
            continue;
        }

        found |= 1;
        assert_int_equal(field_uint(loc, "address"), pc - self->load_bias);

        m = by_id(root, "mapping", field_uint(loc, "mapping_id"));
        assert_string_equal(string_at(root, field_int(m, "filename")),
                            self->path);
        assert_string_equal(string_at(root, field_int(m, "build_id")),
                            self->build_id);
        assert_true(strlen(self->build_id) >= 16);
        assert_null(field(m, "has_functions", 0));
    }

    assert_int_equal(found, 3);

    /* libc's mapping: every location in it is named */

    loc = location_of(root, prof_aggregator_address(u->agg,
                                                    libc_pc - 1)->function);
    m = by_id(root, "mapping", field_uint(loc, "mapping_id"));
    n = field(m, "has_functions", 0);
    assert_non_null(n);
    assert_string_equal(n->value, "true");

    decoded_free(&d);
    unit_agg_destroy(u);
}


static void
test_empty_profile_encodes(void **state)
{
    node_t          *root;
    decoded_t        d;
    prof_profile_t  *p;

    p = unit_flush(agg, T2_REALTIME_NS + 1000, T2_MONOTONIC_NS + 999);
    assert_int_equal(p->sample_count, 0);

    encode(&d, p, agg->agg);
    decode(&d);

    root = d.root;
    assert_int_equal(field_count(root, "sample"), 0);
    assert_int_equal(field_count(root, "location"), 0);
    assert_int_equal(field_count(root, "sample_type"), PROF_VALUE_COUNT);
    assert_string_equal(string_at(root, 0), "");
    assert_int_equal(field_int(root, "time_nanos"), p->start_realtime_ns);
    assert_int_equal(field_int(root, "duration_nanos"), 999);

    decoded_free(&d);
}


/*
 * Python decodes every string of the string table (field 6 of Profile)
 * strictly, with a protobuf walker of its own (the protobuf module may be
 * missing), and refuses NUL.
 */

static const char  *python_strings =
    "import gzip, sys\n"
    "data = gzip.open(sys.argv[1]).read()\n"
    "def varint(i):\n"
    "    v, shift = 0, 0\n"
    "    while True:\n"
    "        c = data[i]\n"
    "        i += 1\n"
    "        v |= (c & 0x7f) << shift\n"
    "        shift += 7\n"
    "        if c < 0x80:\n"
    "            return v, i\n"
    "i, strings = 0, []\n"
    "while i < len(data):\n"
    "    key, i = varint(i)\n"
    "    if key & 7 == 0:\n"
    "        i = varint(i)[1]\n"
    "    elif key & 7 == 1:\n"
    "        i += 8\n"
    "    elif key & 7 == 5:\n"
    "        i += 4\n"
    "    elif key & 7 == 2:\n"
    "        n, i = varint(i)\n"
    "        if key >> 3 == 6:\n"
    "            strings.append(data[i:i + n])\n"
    "        i += n\n"
    "    else:\n"
    "        sys.exit('wire type %d' % (key & 7))\n"
    "if i != len(data) or not strings or strings[0] != b'':\n"
    "    sys.exit('malformed profile')\n"
    "for s in strings:\n"
    "    if '\\0' in s.decode('utf-8', 'strict'):\n"
    "        sys.exit('NUL in %r' % s)\n";


static void
python_decodes_strings(const char *pprof_path)
{
    int   fd;
    char  script[] = "/tmp/test-pprof-py-XXXXXX";
    char  cmd[PATH_MAX + 64];

    fd = mkstemp(script);
    assert_true(fd != -1);
    assert_int_equal(write(fd, python_strings, strlen(python_strings)),
                     strlen(python_strings));
    assert_int_equal(close(fd), 0);

    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s'", script, pprof_path);
    assert_int_equal(run_status(system(cmd)), 0);

    unlink(script);
}


static void
test_python_decodes_the_strings_strictly(void **state)
{
    (void) main_root();
    python_decodes_strings(main_profile.path);
}


/*
 * Invalid bytes everywhere a string comes from: endpoints (explicit
 * lengths, NUL included, as they come from the request), the thread
 * name, a function name (BAD_SYMBOL, from this binary's symbol table), a
 * mapping's file name and build id.
 */

#define RAW(s)  s, sizeof(s) - 1

static const struct {
    const char  *raw;
    size_t       length;
    const char  *shown;
} bad_endpoints[] = {
    { RAW("GET /\xff\xfe/a"), "GET /" FFFD FFFD "/a" },  /* /%ff%fe/a */
    { RAW("GET /caf\xc3"), "GET /caf" FFFD },             /* /caf%c3 */
    { RAW("GET /\xff\xfe"), "GET /" FFFD FFFD },           /* raw */
    { RAW("GET /\xfe\xff"), "GET /" FFFD FFFD },           /* the same */
    { RAW("GET /a\0b"), "GET /a" FFFD "b" },               /* /a%00b */
    { RAW("GET /a\0c"), "GET /a" FFFD "c" },
};

#define BAD_ENDPOINTS  (sizeof(bad_endpoints) / sizeof(bad_endpoints[0]))


static void
test_invalid_utf8_becomes_replacement_characters(void **state)
{
    int                 inserted;
    size_t              i;
    node_t             *root, *s, *l, *loc, *m;
    int64_t             index, shared_string;
    uint64_t            pcs[2], seen;
    decoded_t           d;
    unit_agg_t         *bad;
    prof_batch_t       *b;
    prof_object_t      *self;
    prof_profile_t     *p;
    prof_sample_key_t   key;
    const char         *path, *build_id;

    bad = unit_agg_create(1);

    pcs[0] = (uintptr_t) unit_pprof_bad + 1;
    pcs[1] = leaf_pc;

    b = unit_batch(UNIT_BATCH_BYTES);
    unit_batch_add(b, &(unit_sample_t) { .cpu_ns = 1000, .cpu_samples = 1 },
                   pcs, 2, NULL);
    unit_batch_barrier(b, T1_REALTIME_NS, T1_MONOTONIC_NS);
    unit_consume(bad, b);

    assert_int_equal(bad->nprofiles, 1);
    p = bad->profiles[0];
    assert_int_equal(p->stacks.count, 1);

    /* a sample of the stack per endpoint, on a request */

    p->thread_name = BAD_THREAD;

    for (i = 0; i < BAD_ENDPOINTS; i++) {
        index = prof_intern(&p->endpoints, bad_endpoints[i].raw,
                            bad_endpoints[i].length, &inserted);
        assert_true(index >= 0 && inserted);

        memset(&key, 0, sizeof(key));
        key.stack = 0;
        key.endpoint = index + 1;
        key.span_id = 100 + i;
        key.local_root_span_id = 100 + i;

        index = prof_intern(&p->keys, &key, sizeof(key), &inserted);
        assert_true(index >= 0 && inserted);

        p->values = realloc(p->values, p->keys.count * PROF_VALUE_COUNT
                                       * sizeof(int64_t));
        assert_non_null(p->values);
        p->values_capacity = p->keys.count;
        memset(&p->values[index * PROF_VALUE_COUNT], 0,
               PROF_VALUE_COUNT * sizeof(int64_t));
        p->values[index * PROF_VALUE_COUNT + PROF_VALUE_CPU_TIME] = 1000;
        p->values[index * PROF_VALUE_COUNT + PROF_VALUE_CPU_SAMPLES] = 1;
    }

    /* the mapping of this binary, named with invalid bytes */

    self = (prof_object_t *) prof_symbolize(bad->sym, pcs[0], NULL);
    assert_non_null(self);
    path = self->path;
    build_id = self->build_id;
    self->path = BAD_PATH;
    self->build_id = BAD_BUILD_ID;

    encode(&d, p, bad->agg);

    self->path = path;
    self->build_id = build_id;

    /* protoc refuses a profile with an invalid string: it decodes it */

    decode(&d);
    root = d.root;

    python_decodes_strings(d.path);

    loc = location_of(root, BAD_SYMBOL_SHOWN);
    m = by_id(root, "mapping", field_uint(loc, "mapping_id"));
    assert_string_equal(string_at(root, field_int(m, "filename")),
                        BAD_PATH_SHOWN);
    assert_string_equal(string_at(root, field_int(m, "build_id")),
                        BAD_BUILD_ID_SHOWN);

    /* every endpoint whole (a NUL cuts nothing), the two that read the
       same share their string */

    assert_int_equal(field_count(root, "sample"), BAD_ENDPOINTS + 1);

    seen = 0;
    shared_string = -1;

    for (i = 0; (s = field(root, "sample", i)) != NULL; i++) {
        l = label(root, s, "thread name");
        assert_non_null(l);
        assert_string_equal(string_at(root, field_int(l, "str")),
                            BAD_THREAD_SHOWN);

        l = label(root, s, "span id");
        if (l == NULL) {
            continue;
        }

        index = field_int(l, "num") - 100;
        assert_true(index >= 0 && index < (int64_t) BAD_ENDPOINTS);
        seen |= 1 << index;

        l = label(root, s, "trace endpoint");
        assert_non_null(l);
        assert_string_equal(string_at(root, field_int(l, "str")),
                            bad_endpoints[index].shown);

        if (index == 2 || index == 3) {
            if (shared_string == -1) {
                shared_string = field_int(l, "str");
            }
            assert_int_equal(field_int(l, "str"), shared_string);
        }
    }

    assert_int_equal(seen, (1 << BAD_ENDPOINTS) - 1);

    decoded_free(&d);
    unit_agg_destroy(bad);
}


static void
test_go_pprof_reads_the_file(void **state)
{
    FILE  *f;
    char   cmd[PATH_MAX + 128], line[4096];
    int    found;

    if (system("command -v go > /dev/null 2>&1") != 0) {
        skip();
    }

    snprintf(cmd, sizeof(cmd),
             "go tool pprof -raw -symbolize=none '%s' 2>&1",
             main_profile.path);

    f = popen(cmd, "r");
    assert_non_null(f);

    found = 0;

    while (fgets(line, sizeof(line), f)) {
        found |= strstr(line, "unit_pprof_leaf") != NULL;
    }

    assert_int_equal(run_status(pclose(f)), 0);
    assert_true(found);

    snprintf(cmd, sizeof(cmd), "go tool pprof -top '%s' > /dev/null 2>&1",
             main_profile.path);
    assert_int_equal(run_status(system(cmd)), 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_output_is_gzip),
        cmocka_unit_test(test_decoded_by_protoc_has_the_sample_types),
        cmocka_unit_test(test_samples_carry_values_and_labels),
        cmocka_unit_test(test_functions_and_mappings),
        cmocka_unit_test(test_unnamed_frames_keep_their_mapping),
        cmocka_unit_test(test_empty_profile_encodes),
        cmocka_unit_test(test_python_decodes_the_strings_strictly),
        cmocka_unit_test(test_invalid_utf8_becomes_replacement_characters),
        cmocka_unit_test(test_go_pprof_reads_the_file),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
