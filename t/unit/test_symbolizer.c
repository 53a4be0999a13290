/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unit tests of the symbolizer (shared/profiler/symbolizer.h and the files
 * that implement it). Build and run from the repository root:
 *
 *   make $PWD/build/unit/test_symbolizer && build/unit/test_symbolizer
 *
 * and the same with EXTRA_CFLAGS="-fsanitize=address,undefined
 * -fno-sanitize-recover=all" given to make. The tests shell out to the
 * compiler the tests are built with (TEST_CC), and binutils' objcopy, nm
 * and readelf (TEST_TOOLS: their prefix, cross-compiling), to build and
 * inspect fixtures in a mkdtemp directory under /tmp (removed at the end).
 */

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TEST_CC
#define TEST_CC     "gcc"
#endif
#ifndef TEST_TOOLS
#define TEST_TOOLS  ""
#endif

#include <cmocka.h>

#include "profiler/inline_table.h"
#include "profiler/symbol_store.h"
#include "profiler/symbolizer.h"


/* a shared object with a static function, for the debug file test */

static const char  fixture_source[] =
    "static int __attribute__((noinline))\n"
    "fixture_hidden_function(int x)\n"
    "{\n"
    "    return x * 3 + 1;\n"
    "}\n"
    "\n"
    "void *\n"
    "fixture_hidden_address(void)\n"
    "{\n"
    "    return (void *) fixture_hidden_function;\n"
    "}\n";


/* code in .text that no function symbol covers */

__asm__(".text\n"
        ".globl test_no_symbol_label\n"
        "test_no_symbol_label:\n"
        "    nop\n"
        "    nop\n"
        "    nop\n"
        "    nop\n");

extern char  test_no_symbol_label[];

/* a function without a size (hand-written assembly), then a label */

__asm__(".text\n"
        ".globl test_unsized_function\n"
        ".type test_unsized_function, @function\n"
        "test_unsized_function:\n"
        "    nop\n"
        "    nop\n"
        "    ret\n"
        ".globl test_after_unsized_label\n"
        "test_after_unsized_label:\n"
        "    nop\n");

extern char  test_unsized_function[], test_after_unsized_label[];

static char  tmp_dir[] = "/tmp/test-symbolizer-XXXXXX";
static char  self_path[PATH_MAX];


int __attribute__((noinline))
test_target_function(int x)
{
    return x * 7 + 3;
}


static void
run(const char *fmt, ...)
{
    char     cmd[3 * PATH_MAX];
    va_list  args;

    va_start(args, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, args);
    va_end(args);

    if (system(cmd) != 0) {
        fail_msg("command failed: %s", cmd);
    }
}


/* The first line of a command's output starting with prefix, after it. */

static int
command_value(const char *cmd, const char *prefix, char *out, size_t size)
{
    FILE   *f;
    char    line[1024], *p;
    int     found;

    f = popen(cmd, "r");
    assert_non_null(f);

    found = 0;

    while (!found && fgets(line, sizeof(line), f)) {
        p = strstr(line, prefix);
        if (p == NULL) {
            continue;
        }

        p += strlen(prefix);
        p[strcspn(p, " \n")] = '\0';
        snprintf(out, size, "%s", p);
        found = 1;
    }

    pclose(f);

    return found ? 0 : -1;
}


static void
readelf_build_id(const char *path, char *out, size_t size)
{
    char  cmd[PATH_MAX + 64];

    snprintf(cmd, sizeof(cmd), TEST_TOOLS "readelf -n '%s'", path);
    assert_int_equal(command_value(cmd, "Build ID: ", out, size), 0);
}


/* st_value of a function per nm -P ("name[@version] type value size") */

static uint64_t
nm_value(const char *opts, const char *path, const char *name)
{
    char  cmd[2 * PATH_MAX], value[64];

    snprintf(cmd, sizeof(cmd),
             TEST_TOOLS "nm -P %s '%s' | awk '{ n = $1; sub(/@.*/, \"\", n) }"
             " n == \"%s\" { print \"value: \" $3; exit }'",
             opts, path, name);

    assert_int_equal(command_value(cmd, "value: ", value, sizeof(value)), 0);

    return strtoull(value, NULL, 16);
}


static void *
map_exec(const char *path, uint64_t offset, size_t len)
{
    int    fd;
    void  *p;

    fd = open(path, O_RDONLY);
    assert_true(fd != -1);

    p = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, offset);
    close(fd);
    assert_true(p != MAP_FAILED);

    return p;
}


static int
group_setup(void **state)
{
    FILE  *f;

    if (mkdtemp(tmp_dir) == NULL || realpath("/proc/self/exe", self_path)
        == NULL)
    {
        return -1;
    }

    if (chdir(tmp_dir) != 0) {
        return -1;
    }

    f = fopen("fixture.c", "w");
    if (f == NULL) {
        return -1;
    }

    fputs(fixture_source, f);
    fclose(f);

    return system("mkdir empty"
                  " && " TEST_CC " -O0 -g -shared -fPIC -Wl,--build-id"
                  "    -o full.so fixture.c"
                  " && " TEST_TOOLS "objcopy --only-keep-debug"
                  "    full.so full.debug"
                  " && " TEST_TOOLS "objcopy --strip-all full.so stripped.so"
                  " && cp stripped.so refresh.so"
                  " && " TEST_CC " -O0 -g -shared -fPIC -Wl,--build-id"
                  "    -Wl,-Ttext-segment=0x400000 -o based.so fixture.c")
           == 0 ? 0 : -1;
}


static int
group_teardown(void **state)
{
    char  cmd[PATH_MAX];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);

    return system(cmd) == 0 ? 0 : -1;
}


static int
setup(void **state)
{
    prof_symbolizer_t  *sym;

    sym = prof_symbolizer_create();
    assert_non_null(sym);

    /* no debug files unless a test says so */

    assert_int_equal(prof_symbolizer_set_debug_dir(sym, "/nonexistent"), 0);

    *state = sym;

    return 0;
}


static int
teardown(void **state)
{
    prof_symbolizer_destroy(*state);

    return 0;
}


static void
test_resolves_function_in_this_binary(void **state)
{
    uint64_t              pc;
    const char           *function;
    const prof_object_t  *obj;

    pc = (uintptr_t) test_target_function + 1;

    obj = prof_symbolize(*state, pc, &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, self_path);
    assert_true(obj->start <= pc && pc < obj->end);
    assert_true(obj->id >= 1);
    assert_non_null(function);
    assert_string_equal(function, "test_target_function");
}


/*
 * The DWARF of an object no pc asked for since the last release is
 * released, and read again when a pc asks: the same line then.
 */
static void
test_dwarf_released_when_idle_and_read_again(void **state)
{
    size_t                n;
    uint32_t              line, again;
    uint64_t              pc;
    const char           *function;
    prof_inline_t         frames[PROF_INLINES_MAX];
    const prof_object_t  *obj;

    pc = (uintptr_t) test_target_function + 1;

    obj = prof_symbolize(*state, pc, &function);
    assert_non_null(obj);

    n = prof_symbolizer_inlines(*state, obj, pc, frames, PROF_INLINES_MAX,
                                &line);
    assert_int_equal(n, 0);
    assert_true(line > 0);

    /* Asked since the last release: kept; then idle: released. */
    assert_int_equal(prof_symbolizer_release_dwarf(*state), 0);
    assert_int_equal(prof_symbolizer_release_dwarf(*state), 1);
    assert_int_equal(prof_symbolizer_release_dwarf(*state), 0);

    n = prof_symbolizer_inlines(*state, obj, pc, frames, PROF_INLINES_MAX,
                                &again);
    assert_int_equal(n, 0);
    assert_int_equal(again, line);

    assert_int_equal(prof_symbolizer_release_dwarf(*state), 0);
    assert_int_equal(prof_symbolizer_release_dwarf(*state), 1);
}


/*
 * With the instance's symbol store, an object's symbol table and inline
 * table come from images the first process built: the same name and
 * lines as without it, and no libdw table held (none to release);
 * another process (a fork, as profiler processes are) maps the same
 * images without building them; a file without DWARF is remembered as
 * such.
 */
static void
test_symbols_and_inlines_from_the_symbol_store(void **state)
{
    int                         fd, err, status, exe;
    pid_t                       child;
    size_t                      n, len;
    uint32_t                    line, stored;
    uint64_t                    pc;
    const char                 *function;
    prof_inline_t               frames[PROF_INLINES_MAX];
    prof_symbolizer_t          *other;
    prof_symbol_store_t        *store;
    const prof_object_t        *obj;
    prof_symbolizer_stats_t     ss;
    prof_symbol_store_stats_t   st;

    pc = (uintptr_t) test_target_function + 1;

    obj = prof_symbolize(*state, pc, &function);
    assert_non_null(obj);
    (void) prof_symbolizer_inlines(*state, obj, pc, frames, PROF_INLINES_MAX,
                                   &line);
    assert_true(line > 0);

    fd = prof_symbol_store_create();
    assert_true(fd > 0);
    store = prof_symbol_store_open(fd);
    assert_non_null(store);

    other = prof_symbolizer_create();
    assert_non_null(other);
    prof_symbolizer_set_store(other, store);

    obj = prof_symbolize(other, pc, &function);
    assert_non_null(obj);
    assert_string_equal(function, "test_target_function");
    n = prof_symbolizer_inlines(other, obj, pc, frames, PROF_INLINES_MAX,
                                &stored);
    assert_int_equal(n, 0);
    assert_int_equal(stored, line);

    /* The symbol table, then the inline table; no libdw table held. */
    prof_symbol_store_stats(store, &st);
    assert_int_equal(st.images, 2);
    assert_int_equal(st.built, 2);
    assert_int_equal(st.mapped, 2);
    assert_true(st.bytes > 0);
    prof_symbolizer_stats(other, &ss);
    assert_int_equal(ss.dwarf_open, 0);
    assert_int_equal(prof_symbolizer_release_dwarf(other), 0);
    assert_int_equal(prof_symbolizer_release_dwarf(other), 0);
    n = prof_symbolizer_inlines(other, obj, pc, frames, PROF_INLINES_MAX,
                                &stored);
    assert_int_equal(stored, line);

    child = fork();
    assert_true(child >= 0);

    if (child == 0) {
        prof_symbol_store_t        *s;
        prof_symbolizer_t          *sym;
        prof_symbol_store_stats_t   cst;

        s = prof_symbol_store_open(fd);
        sym = prof_symbolizer_create();
        if (s == NULL || sym == NULL) {
            _exit(10);
        }
        prof_symbolizer_set_store(sym, s);
        obj = prof_symbolize(sym, pc, &function);
        if (obj == NULL || function == NULL
            || strcmp(function, "test_target_function") != 0)
        {
            _exit(11);
        }
        (void) prof_symbolizer_inlines(sym, obj, pc, frames,
                                       PROF_INLINES_MAX, &stored);
        prof_symbol_store_stats(s, &cst);
        _exit(stored != line ? 12 : cst.built != 0 ? 13
              : cst.mapped != 2 ? 14 : cst.images != 2 ? 15 : 0);
    }

    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* A file without DWARF (this machine's true(1)): none, remembered. */
    exe = open("/bin/true", O_RDONLY | O_CLOEXEC);
    assert_true(exe >= 0);
    assert_null(prof_symbol_store_get(store, exe, PROF_STORE_INLINES,
                                      prof_inline_table_build, NULL, &len,
                                      &err));
    assert_int_equal(err, -ENOENT);
    assert_null(prof_symbol_store_get(store, exe, PROF_STORE_INLINES,
                                      prof_inline_table_build, NULL, &len,
                                      &err));
    assert_int_equal(err, -ENOENT);
    prof_symbol_store_stats(store, &st);
    assert_int_equal(st.images, 2);
    assert_int_equal(st.built, 2);
    (void) close(exe);

    prof_symbolizer_destroy(other);
    prof_symbol_store_close(store);
    (void) close(fd);
}


/*
 * Another process's pcs (a profiler process names its worker's): its maps
 * are read. Once it has exited (a zombie: empty maps) the objects known
 * keep naming their pcs, and a frozen symbolizer reads no maps at all.
 */
static void
test_another_process_and_its_exit(void **state)
{
    pid_t                 child;
    int                   status;
    uint64_t              pc;
    const char           *function;
    prof_symbolizer_t    *sym;
    const prof_object_t  *obj;
    int                   pipefd[2];
    char                  c;

    assert_int_equal(pipe(pipefd), 0);

    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(pipefd[1]);
        (void) read(pipefd[0], &c, 1);    /* until the parent says */
        _exit(0);
    }
    close(pipefd[0]);

    sym = prof_symbolizer_create();
    assert_non_null(sym);
    prof_symbolizer_set_pid(sym, child);

    /* The child is a copy of this process: the same objects, addresses. */
    pc = (uintptr_t) test_target_function + 1;
    obj = prof_symbolize(sym, pc, &function);
    assert_non_null(obj);
    assert_string_equal(function, "test_target_function");

    /* It exits, not reaped yet: its maps are empty. */
    close(pipefd[1]);
    for ( ;; ) {
        char  path[64], st[256];
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) child);
        f = fopen(path, "r");
        if (f == NULL || fgets(st, sizeof(st), f) == NULL) {
            if (f != NULL) {
                fclose(f);
            }
            break;
        }
        fclose(f);
        if (strstr(st, ") Z ") != NULL) {
            break;
        }
        usleep(1000);
    }

    assert_int_equal(prof_symbolizer_refresh(sym), -ESRCH);
    obj = prof_symbolize(sym, pc, &function);
    assert_non_null(obj);
    assert_string_equal(function, "test_target_function");

    prof_symbolizer_freeze(sym);
    assert_int_equal(prof_symbolizer_refresh(sym), -ESRCH);
    assert_non_null(prof_symbolize(sym, pc, &function));

    assert_int_equal(waitpid(child, &status, 0), child);
    prof_symbolizer_destroy(sym);
}


static void
test_resolves_libc_function_via_dynsym(void **state)
{
    uint64_t              pc;
    const char           *function;
    const prof_object_t  *obj;

    pc = (uintptr_t) dlsym(RTLD_DEFAULT, "getpid");
    assert_true(pc != 0);

    obj = prof_symbolize(*state, pc + 2, &function);

    assert_non_null(obj);
    assert_non_null(strstr(obj->path, "/libc"));
    assert_non_null(function);

    if (strcmp(function, "getpid") != 0 && strcmp(function, "__getpid") != 0)
    {
        fail_msg("getpid resolved to %s", function);
    }
}


static void
test_address_outside_any_symbol_has_no_function(void **state)
{
    const char           *function;
    const prof_object_t  *obj;

    function = "unset";

    obj = prof_symbolize(*state, (uintptr_t) test_no_symbol_label + 1,
                         &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, self_path);
    assert_null(function);
}


/* An unsized function names its bytes up to the next symbol, a label. */
static void
test_unsized_function_named_to_the_next_symbol(void **state)
{
    const char  *function;

    assert_non_null(prof_symbolize(*state,
                                   (uintptr_t) test_unsized_function + 2,
                                   &function));
    assert_non_null(function);
    assert_string_equal(function, "test_unsized_function");

    function = "unset";
    assert_non_null(prof_symbolize(*state,
                                   (uintptr_t) test_after_unsized_label,
                                   &function));
    assert_null(function);
}


static void
test_unmapped_address_returns_null(void **state)
{
    int          i;
    char        *heap;
    uint64_t     pcs[3];
    const char  *function;

    heap = malloc(16);
    assert_non_null(heap);

    pcs[0] = 0;
    pcs[1] = 4096;
    pcs[2] = (uintptr_t) heap;

    for (i = 0; i < 3; i++) {
        function = "unset";
        assert_null(prof_symbolize(*state, pcs[i], &function));
        assert_null(function);
    }

    free(heap);
}


static void
test_build_id_matches_readelf(void **state)
{
    char                  expected[256];
    const char           *function;
    const prof_object_t  *obj;

    readelf_build_id(self_path, expected, sizeof(expected));

    obj = prof_symbolize(*state, (uintptr_t) test_target_function, &function);

    assert_non_null(obj);
    assert_true(strlen(expected) >= 16);
    assert_string_equal(obj->build_id, expected);
}


static void
test_elf_vaddr(void **state)
{
    void                 *lib;
    char                  path[PATH_MAX];
    uint64_t              pc;
    const char           *function;
    const prof_object_t  *obj;

    /* the PIE test binary */

    pc = (uintptr_t) test_target_function;
    obj = prof_symbolize(*state, pc, &function);

    assert_non_null(obj);
    assert_true(obj->load_bias != 0);
    assert_int_equal(pc - obj->load_bias,
                     nm_value("", self_path, "test_target_function"));

    /* a shared library */

    pc = (uintptr_t) dlsym(RTLD_DEFAULT, "getpid");
    obj = prof_symbolize(*state, pc, &function);

    assert_non_null(obj);
    assert_non_null(function);
    assert_int_equal(pc - obj->load_bias,
                     nm_value("-D", obj->path, function));

    /* ELF virtual addresses not equal to file offsets */

    snprintf(path, sizeof(path), "%s/based.so", tmp_dir);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);

    pc = (uintptr_t) dlsym(lib, "fixture_hidden_address");
    obj = prof_symbolize(*state, pc, &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, path);
    assert_int_equal(pc - obj->load_bias,
                     nm_value("", path, "fixture_hidden_address"));

    dlclose(lib);
}


static void
test_debug_file_by_build_id(void **state)
{
    void                 *lib, *(*address)(void);
    char                  id[256], dir[PATH_MAX], path[PATH_MAX];
    uint64_t              pc;
    const char           *function;
    prof_symbolizer_t    *plain;
    const prof_object_t  *obj;

    readelf_build_id("stripped.so", id, sizeof(id));

    snprintf(dir, sizeof(dir), "%s/debug/.build-id", tmp_dir);
    run("mkdir -p '%s/%.2s' && cp full.debug '%s/%.2s/%s.debug'",
        dir, id, dir, id, id + 2);

    assert_int_equal(prof_symbolizer_set_debug_dir(*state, dir), 0);

    snprintf(path, sizeof(path), "%s/stripped.so", tmp_dir);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);

    *(void **) &address = dlsym(lib, "fixture_hidden_address");
    assert_non_null(address);
    pc = (uintptr_t) address();

    obj = prof_symbolize(*state, pc, &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, path);
    assert_string_equal(obj->build_id, id);
    assert_non_null(function);
    assert_string_equal(function, "fixture_hidden_function");

    /* without the debug file the stripped object does not know it */

    plain = prof_symbolizer_create();
    assert_non_null(plain);
    assert_int_equal(prof_symbolizer_set_debug_dir(plain, "empty"), 0);

    assert_non_null(prof_symbolize(plain, pc, &function));
    assert_null(function);

    prof_symbolizer_destroy(plain);
    dlclose(lib);
}


/*
 * The name the symbolizer (debug files under debug_dir) gives the static
 * function of the fixture library at path, loaded for the test.
 */
static const char *
hidden_function_name(const char *debug_dir, const char *path, char *name,
    size_t size, prof_symbols_e *kind)
{
    size_t                i;
    void                 *lib, *(*address)(void);
    const char           *function;
    prof_symbols_e        probed;
    prof_symbolizer_t    *sym;
    const prof_object_t  *obj;

    sym = prof_symbolizer_create();
    assert_non_null(sym);
    assert_int_equal(prof_symbolizer_set_debug_dir(sym, debug_dir), 0);

    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);

    *(void **) &address = dlsym(lib, "fixture_hidden_address");
    assert_non_null(address);

    /* What the identification line says of it before a lookup... */
    assert_int_equal(prof_symbolizer_refresh(sym), 0);
    probed = PROF_SYMBOLS_NONE;
    for (i = 0; i < prof_symbolizer_object_count(sym); i++) {
        if (strcmp(prof_symbolizer_object(sym, i)->path, path) == 0) {
            probed = prof_symbolizer_symbols(sym, i);
        }
    }

    obj = prof_symbolize(sym, (uintptr_t) address(), &function);
    assert_non_null(obj);
    assert_string_equal(obj->path, path);

    snprintf(name, size, "%s", function ? function : "(none)");

    /* ...and after it: where the names came from. */
    *kind = PROF_SYMBOLS_NONE;
    for (i = 0; i < prof_symbolizer_object_count(sym); i++) {
        if (prof_symbolizer_object(sym, i) == obj) {
            *kind = prof_symbolizer_symbols(sym, i);
        }
    }
    assert_int_equal(probed, *kind);

    /* Exported functions keep their names whatever the source. */
    assert_non_null(prof_symbolize(sym, (uintptr_t) address, &function));
    assert_non_null(function);
    assert_string_equal(function, "fixture_hidden_address");

    prof_symbolizer_destroy(sym);
    dlclose(lib);

    return name;
}


static void
test_debuglink_beside_in_debug_dir_and_under_root(void **state)
{
    char            name[256], path[PATH_MAX], root[PATH_MAX];
    prof_symbols_e  kind;

    /* The debug file beside the object. */
    run("mkdir -p beside "
        "&& " TEST_TOOLS "objcopy --add-gnu-debuglink=full.debug "
        "stripped.so beside/linked.so && cp full.debug beside/");
    snprintf(path, sizeof(path), "%s/beside/linked.so", tmp_dir);
    assert_string_equal(hidden_function_name("/nonexistent", path, name,
                                             sizeof(name), &kind),
                        "fixture_hidden_function");
    assert_int_equal(kind, PROF_SYMBOLS_DEBUG_FILE);

    /* In the object's .debug/ directory. */
    run("mkdir -p sub/.debug && cp beside/linked.so sub/ "
        "&& cp full.debug sub/.debug/");
    snprintf(path, sizeof(path), "%s/sub/linked.so", tmp_dir);
    assert_string_equal(hidden_function_name("/nonexistent", path, name,
                                             sizeof(name), &kind),
                        "fixture_hidden_function");

    /* Under the global directory, followed by the object's directory. */
    run("mkdir -p global/lib 'root/%s/global/lib' "
        "&& cp beside/linked.so global/lib/ "
        "&& cp full.debug 'root/%s/global/lib/'", tmp_dir, tmp_dir);
    snprintf(path, sizeof(path), "%s/global/lib/linked.so", tmp_dir);
    snprintf(root, sizeof(root), "%s/root/.build-id", tmp_dir);
    assert_string_equal(hidden_function_name(root, path, name, sizeof(name),
                                             &kind),
                        "fixture_hidden_function");
    assert_int_equal(kind, PROF_SYMBOLS_DEBUG_FILE);

    /* Not without that directory (the lookup is the root's). */
    assert_string_equal(hidden_function_name("/nonexistent", path, name,
                                             sizeof(name), &kind),
                        "(none)");
    assert_int_equal(kind, PROF_SYMBOLS_DYNSYM);
}


static void
test_debuglink_with_another_crc_is_not_taken(void **state)
{
    char            name[256], path[PATH_MAX];
    prof_symbols_e  kind;

    /* A file of that name, but not the one linked (its CRC differs). */
    run("mkdir -p stale "
        "&& " TEST_TOOLS "objcopy --add-gnu-debuglink=full.debug "
        "stripped.so stale/linked.so "
        "&& " TEST_TOOLS "objcopy --only-keep-debug "
        "based.so stale/full.debug");
    snprintf(path, sizeof(path), "%s/stale/linked.so", tmp_dir);
    assert_string_equal(hidden_function_name("/nonexistent", path, name,
                                             sizeof(name), &kind),
                        "(none)");
    assert_int_equal(kind, PROF_SYMBOLS_DYNSYM);
}


/*
 * MiniDebugInfo as Fedora's find-debuginfo makes it: the functions that
 * .dynsym lacks, in the .symtab of a stripped copy of the debug file,
 * xz-compressed into the object's .gnu_debugdata.
 */
static void
test_minidebuginfo_names_static_functions(void **state)
{
    char            name[256], path[PATH_MAX];
    prof_symbols_e  kind;

    run(TEST_TOOLS "nm -D full.so --format=posix --defined-only "
        "| awk '{ print $1 }' | sort > dynsyms "
        "&& " TEST_TOOLS "nm full.so --format=posix --defined-only "
        "| awk '{ if ($2 == \"T\" || $2 == \"t\") print $1 }' "
        "| sort > funcsyms "
        "&& comm -13 dynsyms funcsyms > keep_symbols "
        "&& " TEST_TOOLS "objcopy -S --remove-section .gdb_index "
        "--remove-section .comment "
        "--keep-symbols=keep_symbols full.debug mini_debuginfo "
        "&& rm -f mini_debuginfo.xz && xz mini_debuginfo "
        "&& " TEST_TOOLS "objcopy "
        "--add-section .gnu_debugdata=mini_debuginfo.xz "
        "stripped.so minidebug.so");
    snprintf(path, sizeof(path), "%s/minidebug.so", tmp_dir);
    assert_string_equal(hidden_function_name("/nonexistent", path, name,
                                             sizeof(name), &kind),
                        "fixture_hidden_function");
    assert_int_equal(kind, PROF_SYMBOLS_MINIDEBUGINFO);
}


static void
test_malformed_minidebuginfo_leaves_dynsym(void **state)
{
    char                name[256], path[PATH_MAX];
    size_t              i;
    prof_symbols_e      kind;
    static const char  *malformed[] = { "junk", "cut", "notelf" };

    /* Not xz; then xz, but truncated; then xz of something not ELF. */
    run(TEST_TOOLS "objcopy -S --keep-symbol=fixture_hidden_function "
        "full.debug mini_cut && xz -c mini_cut > mini_cut.xz "
        "&& head -c 4096 /dev/urandom > junk "
        "&& " TEST_TOOLS "objcopy --add-section .gnu_debugdata=junk "
        "stripped.so junk-minidebug.so "
        "&& head -c 200 mini_cut.xz > cut.xz "
        "&& " TEST_TOOLS "objcopy --add-section .gnu_debugdata=cut.xz "
        "stripped.so cut-minidebug.so "
        "&& head -c 100000 /dev/urandom | xz > notelf.xz "
        "&& " TEST_TOOLS "objcopy --add-section .gnu_debugdata=notelf.xz "
        "stripped.so notelf-minidebug.so");

    for (i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s-minidebug.so", tmp_dir,
                 malformed[i]);
        assert_string_equal(hidden_function_name("/nonexistent", path, name,
                                                 sizeof(name), &kind),
                            "(none)");
        assert_int_equal(kind, PROF_SYMBOLS_DYNSYM);
    }
}


/* Maps a file like the loader would map the test binary's text. */

static const char *
symbolize_copy(prof_symbolizer_t *sym, const char *name, uint64_t offset,
    size_t len, uint64_t delta, int *corrupt)
{
    char                  path[PATH_MAX];
    void                 *p;
    const char           *function;
    const prof_object_t  *obj;

    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    p = map_exec(path, offset, len);

    /* the address may be reused: an unknown pc alone would not refresh */

    assert_int_equal(prof_symbolizer_refresh(sym), 0);

    function = "unset";
    obj = prof_symbolize(sym, (uintptr_t) p + delta, &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, path);

    if (corrupt != NULL) {
        *corrupt = obj->corrupt;
    }

    munmap(p, len);

    return function;
}


static void
corrupt_sections(const char *name, int strtabs_only)
{
    int          fd;
    unsigned     i;
    Elf64_Ehdr   eh;
    Elf64_Shdr   sh;
    struct stat  st;

    run("cp '%s' %s", self_path, name);

    fd = open(name, O_RDWR);
    assert_true(fd != -1);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(pread(fd, &eh, sizeof(eh), 0), sizeof(eh));

    for (i = 0; i < eh.e_shnum; i++) {
        assert_int_equal(pread(fd, &sh, sizeof(sh), eh.e_shoff + i * 64), 64);

        if (strtabs_only) {
            sh.sh_size = sh.sh_type == SHT_STRTAB ? 1 : sh.sh_size;

        } else {
            sh.sh_offset = st.st_size - 10;
            sh.sh_size = 1000;
            sh.sh_link = 0x7fff;
        }

        assert_int_equal(pwrite(fd, &sh, sizeof(sh), eh.e_shoff + i * 64), 64);
    }

    close(fd);
}


/*
 * One way to damage a copy of the test binary: fd is the copy, size its
 * size, eh its ELF header (written back after the call).
 */

typedef void (*damage_pt)(int fd, uint64_t size, Elf64_Ehdr *eh);

typedef struct {
    const char  *name;
    damage_pt    damage;
    int          corrupt;       /* 0: still resolves test_target_function */
} damage_t;


/* The file position of the first section header of a type, and it. */

static uint64_t
section_of_type(int fd, const Elf64_Ehdr *eh, uint32_t type, Elf64_Shdr *sh)
{
    unsigned  i;
    uint64_t  pos;

    for (i = 0; i < eh->e_shnum; i++) {
        pos = eh->e_shoff + (uint64_t) i * sizeof(Elf64_Shdr);
        assert_int_equal(pread(fd, sh, sizeof(*sh), pos), sizeof(*sh));

        if (sh->sh_type == type) {
            return pos;
        }
    }

    fail_msg("no section of type %u", type);

    return 0;
}


static void
patch_symtab(int fd, uint64_t size, Elf64_Ehdr *eh, int what)
{
    uint64_t    pos;
    Elf64_Shdr  sh;

    pos = section_of_type(fd, eh, SHT_SYMTAB, &sh);

    switch (what) {
    case 0:     /* larger than the file */
        sh.sh_size = (size / sizeof(Elf64_Sym) + 1) * sizeof(Elf64_Sym);
        break;
    case 1:     /* starting inside it, ending past it */
        sh.sh_offset = size - sizeof(Elf64_Sym);
        sh.sh_size = 2 * sizeof(Elf64_Sym);
        break;
    case 2:
        sh.sh_entsize = 16;
        break;
    case 3:
        sh.sh_size -= 1;
        break;
    case 4:
        sh.sh_link = eh->e_shnum;
        break;
    default:
        sh.sh_link = 0;
        break;
    }

    assert_int_equal(pwrite(fd, &sh, sizeof(sh), pos), sizeof(sh));
}


static void
damage_symtab_past_end(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_symtab(fd, size, eh, 0);
}


static void
damage_symtab_across_end(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_symtab(fd, size, eh, 1);
}


static void
damage_symtab_entsize(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_symtab(fd, size, eh, 2);
}


static void
damage_symtab_partial_entry(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_symtab(fd, size, eh, 3);
}


static void
damage_symtab_link_out_of_range(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_symtab(fd, size, eh, 4);
}


static void
damage_symtab_link_null(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_symtab(fd, size, eh, 5);
}


/* One function's name starts just past the end of the string table. */

static void
damage_st_name(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    uint64_t    pos, i;
    Elf64_Sym   s;
    Elf64_Shdr  tab, str;

    (void) section_of_type(fd, eh, SHT_SYMTAB, &tab);
    pos = eh->e_shoff + tab.sh_link * sizeof(Elf64_Shdr);
    assert_int_equal(pread(fd, &str, sizeof(str), pos), sizeof(str));

    for (i = 0; i < tab.sh_size / sizeof(Elf64_Sym); i++) {
        pos = tab.sh_offset + i * sizeof(Elf64_Sym);
        assert_int_equal(pread(fd, &s, sizeof(s), pos), sizeof(s));

        if (ELF64_ST_TYPE(s.st_info) == STT_FUNC && s.st_size != 0) {
            s.st_name = str.sh_size;
            assert_int_equal(pwrite(fd, &s, sizeof(s), pos), sizeof(s));
            return;
        }
    }

    fail_msg("no function symbol");
}


/* The string table's last name not NUL-terminated: still readable. */

static void
damage_strtab_end(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    uint64_t    pos;
    Elf64_Shdr  tab, str;

    (void) section_of_type(fd, eh, SHT_SYMTAB, &tab);
    pos = eh->e_shoff + tab.sh_link * sizeof(Elf64_Shdr);
    assert_int_equal(pread(fd, &str, sizeof(str), pos), sizeof(str));
    assert_int_equal(pwrite(fd, "x", 1, str.sh_offset + str.sh_size - 1), 1);
}


static void
damage_shnum_huge(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    eh->e_shnum = 0xffff;
}


/* "More sections than SHN_LORESERVE": the count in the first header. */

static void
damage_shnum_extended_huge(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    Elf64_Shdr  sh;

    assert_int_equal(pread(fd, &sh, sizeof(sh), eh->e_shoff), sizeof(sh));
    sh.sh_size = 1ULL << 58;
    assert_int_equal(pwrite(fd, &sh, sizeof(sh), eh->e_shoff), sizeof(sh));
    eh->e_shnum = 0;
}


static void
damage_shoff_past_end(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    eh->e_shoff = UINT64_MAX - 32;
}


static void
damage_phnum_huge(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    eh->e_phoff = size - sizeof(Elf64_Phdr);
    eh->e_phnum = 0xfffe;
}


/* The first note of each PT_NOTE segment claims sizes past it. */

static void
patch_notes(int fd, Elf64_Ehdr *eh, int name)
{
    unsigned     i, found;
    Elf64_Phdr   ph;
    Elf64_Nhdr   nh;

    found = 0;

    for (i = 0; i < eh->e_phnum; i++) {
        assert_int_equal(pread(fd, &ph, sizeof(ph), eh->e_phoff + i * 56), 56);

        if (ph.p_type != PT_NOTE) {
            continue;
        }

        assert_int_equal(pread(fd, &nh, sizeof(nh), ph.p_offset), sizeof(nh));

        if (name) {
            nh.n_namesz = 0xfffffffd;

        } else {
            nh.n_descsz = 0xfffffff0;
        }

        assert_int_equal(pwrite(fd, &nh, sizeof(nh), ph.p_offset),
                         sizeof(nh));
        found++;
    }

    assert_true(found > 0);
}


static void
damage_note_namesz(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_notes(fd, eh, 1);
}


static void
damage_note_descsz(int fd, uint64_t size, Elf64_Ehdr *eh)
{
    patch_notes(fd, eh, 0);
}


static void
damage_copy(const damage_t *d)
{
    int          fd;
    Elf64_Ehdr   eh;
    struct stat  st;

    run("cp '%s' '%s'", self_path, d->name);

    fd = open(d->name, O_RDWR);
    assert_true(fd != -1);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(pread(fd, &eh, sizeof(eh), 0), sizeof(eh));

    d->damage(fd, st.st_size, &eh);

    assert_int_equal(pwrite(fd, &eh, sizeof(eh), 0), sizeof(eh));
    close(fd);
}


static void
test_corrupt_elf_does_not_crash(void **state)
{
    int                   fd, corrupt;
    char                  junk[8192];
    uint64_t              delta, len;
    Elf64_Ehdr           *eh;
    Elf64_Phdr           *ph;
    Elf64_Nhdr           *nh;
    const char           *function;
    prof_symbolizer_t    *sym;
    const prof_object_t  *self;

    sym = *state;
    self = prof_symbolize(sym, (uintptr_t) test_target_function, &function);
    assert_non_null(self);

    delta = (uintptr_t) test_target_function - self->start;
    len = self->end - self->start;

    /* control: an intact copy of this binary resolves the function */

    run("cp '%s' intact", self_path);
    assert_string_equal(symbolize_copy(sym, "intact", self->file_offset, len,
                                       delta, &corrupt),
                        "test_target_function");
    assert_false(corrupt);

    /* section headers past the end of the file */

    run("head -c %llu '%s' > truncated", (unsigned long long)
        (self->file_offset + len), self_path);
    assert_null(symbolize_copy(sym, "truncated", self->file_offset, len,
                               delta, &corrupt));
    assert_true(corrupt);

    /* section offsets, sizes and links out of bounds */

    corrupt_sections("bad-sections", 0);
    assert_null(symbolize_copy(sym, "bad-sections", self->file_offset, len,
                               delta, &corrupt));
    assert_true(corrupt);

    /* string tables too small for the symbol names */

    corrupt_sections("bad-strtabs", 1);
    assert_null(symbolize_copy(sym, "bad-strtabs", self->file_offset, len,
                               delta, &corrupt));
    assert_true(corrupt);

    /* garbage, and an ELF file with bad counts, offsets and notes */

    memset(junk, 0xa5, sizeof(junk));
    fd = open("garbage", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_int_equal(write(fd, junk, sizeof(junk)), sizeof(junk));
    close(fd);
    assert_null(symbolize_copy(sym, "garbage", 0, 4096, 16, &corrupt));
    assert_true(corrupt);

    memset(junk, 0xff, sizeof(junk));
    eh = (Elf64_Ehdr *) junk;
    memcpy(eh->e_ident, ELFMAG, SELFMAG);
    eh->e_ident[EI_CLASS] = ELFCLASS64;
    eh->e_ident[EI_DATA] = ELFDATA2LSB;
    eh->e_phentsize = sizeof(Elf64_Phdr);
    eh->e_shentsize = sizeof(Elf64_Shdr);
    eh->e_phoff = sizeof(Elf64_Ehdr);
    eh->e_phnum = 2;
    eh->e_shoff = 4096;

    ph = (Elf64_Phdr *) (eh + 1);
    ph[0] = (Elf64_Phdr) { .p_type = PT_LOAD, .p_flags = PF_R | PF_X,
                           .p_filesz = 1 << 20, .p_align = 4096 };
    ph[1] = (Elf64_Phdr) { .p_type = PT_NOTE, .p_offset = 512,
                           .p_filesz = 32, .p_align = 4 };

    nh = (Elf64_Nhdr *) (junk + 512);
    *nh = (Elf64_Nhdr) { .n_namesz = 4, .n_descsz = 60,
                         .n_type = NT_GNU_BUILD_ID };
    memcpy(nh + 1, "GNU", 4);

    fd = open("bad-header", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_int_equal(write(fd, junk, sizeof(junk)), sizeof(junk));
    close(fd);
    assert_null(symbolize_copy(sym, "bad-header", 0, 4096, 16, &corrupt));
    assert_true(corrupt);
}


static void
test_each_malformed_table_gives_no_symbols(void **state)
{
    int                       corrupt;
    size_t                    i, functions;
    uint64_t                  delta, len;
    const char               *function;
    prof_symbolizer_t        *sym;
    const prof_object_t      *self, *obj;
    prof_symbolizer_stats_t   stats;
    static const damage_t     damages[] = {
        { "symtab-past-end", damage_symtab_past_end, 1 },
        { "symtab-across-end", damage_symtab_across_end, 1 },
        { "symtab-entsize", damage_symtab_entsize, 1 },
        { "symtab-partial-entry", damage_symtab_partial_entry, 1 },
        { "symtab-link-out-of-range", damage_symtab_link_out_of_range, 1 },
        { "symtab-link-null", damage_symtab_link_null, 1 },
        { "st-name-past-strtab", damage_st_name, 1 },
        { "strtab-unterminated", damage_strtab_end, 0 },
        { "shnum-huge", damage_shnum_huge, 1 },
        { "shnum-extended-huge", damage_shnum_extended_huge, 1 },
        { "shoff-past-end", damage_shoff_past_end, 1 },
        { "phnum-huge", damage_phnum_huge, 1 },
        { "note-namesz", damage_note_namesz, 1 },
        { "note-descsz", damage_note_descsz, 1 },
    };

    sym = *state;
    self = prof_symbolize(sym, (uintptr_t) test_target_function, &function);
    assert_non_null(self);

    delta = (uintptr_t) test_target_function - self->start;
    len = self->end - self->start;

    for (i = 0; i < sizeof(damages) / sizeof(damages[0]); i++) {
        damage_copy(&damages[i]);

        function = symbolize_copy(sym, damages[i].name, self->file_offset,
                                  len, delta, &corrupt);

        if (corrupt != damages[i].corrupt) {
            fail_msg("%s: corrupt is %d", damages[i].name, corrupt);
        }

        if (damages[i].corrupt) {
            if (function != NULL) {
                fail_msg("%s: resolved to %s", damages[i].name, function);
            }

            assert_int_equal(prof_symbolizer_parse_file_for_test(
                                 damages[i].name, &functions), -ENOEXEC);
            assert_int_equal(functions, 0);

        } else {
            assert_non_null(function);
            assert_string_equal(function, "test_target_function");
            assert_int_equal(prof_symbolizer_parse_file_for_test(
                                 damages[i].name, &functions), 0);
            assert_true(functions > 0);
        }
    }

    /* each corrupt object is reported once */

    for (i = 0; (obj = prof_symbolizer_corrupt_object(sym)) != NULL; i++) {
        assert_true(obj->corrupt);
        assert_non_null(strstr(obj->path, tmp_dir));
    }

    assert_int_equal(i, sizeof(damages) / sizeof(damages[0]) - 1);
    assert_null(prof_symbolizer_corrupt_object(sym));

    prof_symbolizer_stats(sym, &stats);
    assert_int_equal(stats.objects_corrupt, i);
}


static void
test_file_parser_counts_functions_and_rejects_non_elf(void **state)
{
    size_t  functions;

    assert_int_equal(prof_symbolizer_parse_file_for_test(self_path,
                                                         &functions), 0);
    assert_true(functions > 10);

    assert_int_equal(prof_symbolizer_parse_file_for_test("stripped.so",
                                                         &functions), 0);
    assert_true(functions >= 1);

    assert_int_equal(prof_symbolizer_parse_file_for_test("fixture.c",
                                                         &functions),
                     -ENOEXEC);
    assert_int_equal(functions, 0);

    assert_int_equal(prof_symbolizer_parse_file_for_test("/nonexistent",
                                                         &functions),
                     -ENOENT);
}


static void
test_vdso_has_build_id_and_functions(void **state)
{
    size_t                i, found;
    uint64_t              base, pc;
    const char           *function;
    const prof_object_t  *obj;

    base = getauxval(AT_SYSINFO_EHDR);
    if (base == 0) {
        skip();
    }

    obj = prof_symbolize(*state, base + 16, &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, "[vdso]");
    assert_int_equal(strlen(obj->build_id), 40);
    assert_int_equal(obj->load_bias, base);

    /* Its .dynsym names the time functions nginx calls. */
    found = 0;
    for (i = 0; i < obj->end - obj->start; i++) {
        pc = obj->start + i;
        if (prof_symbolize(*state, pc, &function) == obj && function != NULL
            && strstr(function, "clock_gettime") != NULL)
        {
            found++;
        }
    }

    assert_true(found > 0);
}


static void
test_deleted_file_is_an_object_without_file(void **state)
{
    void                 *p;
    char                  path[PATH_MAX];
    uint64_t              len;
    const char           *function;
    const prof_object_t  *self, *obj;

    self = prof_symbolize(*state, (uintptr_t) test_target_function,
                          &function);
    assert_non_null(self);
    len = self->end - self->start;

    snprintf(path, sizeof(path), "%s/deleted", tmp_dir);
    run("cp '%s' '%s'", self_path, path);
    p = map_exec(path, self->file_offset, len);
    assert_int_equal(unlink(path), 0);

    function = "unset";
    obj = prof_symbolize(*state, (uintptr_t) p + ((uintptr_t)
                         test_target_function - self->start), &function);

    strcat(path, " (deleted)");
    assert_non_null(obj);
    assert_string_equal(obj->path, path);
    assert_string_equal(obj->build_id, "");
    assert_null(function);

    munmap(p, len);
}


static void
test_refresh_keeps_object_ids(void **state)
{
    void                 *lib;
    char                  path[PATH_MAX];
    unsigned              id;
    const char           *function;
    prof_symbolizer_t    *sym;
    const prof_object_t  *self, *obj;

    sym = *state;
    self = prof_symbolize(sym, (uintptr_t) test_target_function, &function);
    assert_non_null(self);
    id = self->id;

    snprintf(path, sizeof(path), "%s/refresh.so", tmp_dir);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);

    /* unknown pc: refreshes and finds the new object */

    obj = prof_symbolize(sym, (uintptr_t) dlsym(lib, "fixture_hidden_address"),
                         &function);

    assert_non_null(obj);
    assert_string_equal(obj->path, path);
    assert_true(obj->id > id);
    assert_non_null(function);
    assert_string_equal(function, "fixture_hidden_address");

    assert_int_equal(prof_symbolizer_refresh(sym), 0);

    assert_ptr_equal(prof_symbolize(sym, (uintptr_t) test_target_function,
                                    &function), self);
    assert_int_equal(self->id, id);

    dlclose(lib);
}


/* Lookups of pcs in no object that the symbolizer's rate lets through. */

static void
exhaust_rereads(prof_symbolizer_t *sym)
{
    uint64_t  pc;

    for (pc = 4096; pc < 4096 + 100; pc++) {
        assert_null(prof_symbolize(sym, pc, NULL));
    }
}


static void
test_jit_addresses_do_not_reread_maps(void **state)
{
    char                     *jit;
    size_t                    i, len;
    const char               *function;
    prof_symbolizer_t        *sym;
    prof_symbolizer_stats_t   before, after;

    sym = *state;
    assert_non_null(prof_symbolize(sym, (uintptr_t) test_target_function,
                                   &function));

    /* anonymous executable memory, as a JIT compiler maps it */

    len = 3 * 4096;
    jit = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
    assert_true(jit != MAP_FAILED);

    prof_symbolizer_stats(sym, &before);

    for (i = 0; i < 10000; i++) {
        function = "unset";
        assert_null(prof_symbolize(sym, (uintptr_t) jit + i, &function));
        assert_null(function);
    }

    prof_symbolizer_stats(sym, &after);

    /* a burst of rereads at most, and nothing kept per pc */

    assert_true(after.maps_reads - before.maps_reads <= 5);
    assert_int_equal(after.objects_held, before.objects_held);
    assert_int_equal(prof_symbolizer_collect(sym), 0);

    munmap(jit, len);
}


static void
test_dlopen_is_seen_when_rereads_are_rate_limited(void **state)
{
    void                     *lib;
    char                      path[PATH_MAX];
    uint64_t                  pc;
    const char               *function;
    prof_symbolizer_t        *sym;
    const prof_object_t      *obj;
    prof_symbolizer_stats_t   before, after;

    sym = *state;
    exhaust_rereads(sym);

    snprintf(path, sizeof(path), "%s/refresh.so", tmp_dir);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    pc = (uintptr_t) dlsym(lib, "fixture_hidden_address");

    prof_symbolizer_stats(sym, &before);

    obj = prof_symbolize(sym, pc, &function);

    prof_symbolizer_stats(sym, &after);

    assert_non_null(obj);
    assert_string_equal(obj->path, path);
    assert_non_null(function);
    assert_string_equal(function, "fixture_hidden_address");
    assert_int_equal(after.maps_reads, before.maps_reads + 1);

    dlclose(lib);
}


static void
test_mapping_outside_loader_is_seen_within_a_second(void **state)
{
    void                 *p;
    char                  path[PATH_MAX];
    uint64_t              len, pc;
    const char           *function;
    prof_symbolizer_t    *sym;
    const prof_object_t  *self, *obj;

    sym = *state;
    self = prof_symbolize(sym, (uintptr_t) test_target_function, &function);
    assert_non_null(self);
    len = self->end - self->start;

    snprintf(path, sizeof(path), "%s/outside", tmp_dir);
    run("cp '%s' '%s'", self_path, path);

    exhaust_rereads(sym);

    p = map_exec(path, self->file_offset, len);
    pc = (uintptr_t) p + ((uintptr_t) test_target_function - self->start);

    assert_null(prof_symbolize(sym, pc, &function));

    usleep(1100 * 1000);

    obj = prof_symbolize(sym, pc, &function);
    assert_non_null(obj);
    assert_string_equal(obj->path, path);
    assert_non_null(function);
    assert_string_equal(function, "test_target_function");

    munmap(p, len);
}


static void
test_unloaded_object_stays_valid_until_collect(void **state)
{
    void                     *lib;
    char                      path[PATH_MAX];
    size_t                    i;
    uint64_t                  pc;
    const char               *function, *name;
    prof_symbolizer_t        *sym;
    const prof_object_t      *obj;
    prof_symbolizer_stats_t   stats;

    sym = *state;

    snprintf(path, sizeof(path), "%s/refresh.so", tmp_dir);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    pc = (uintptr_t) dlsym(lib, "fixture_hidden_address");

    obj = prof_symbolize(sym, pc, &name);
    assert_non_null(obj);
    assert_non_null(name);

    dlclose(lib);

    /* unmapped: no longer found or listed, but still readable */

    assert_int_equal(prof_symbolizer_refresh(sym), 0);
    assert_null(prof_symbolize(sym, pc, &function));

    for (i = 0; i < prof_symbolizer_object_count(sym); i++) {
        assert_ptr_not_equal(prof_symbolizer_object(sym, i), obj);
    }

    assert_string_equal(obj->path, path);
    assert_string_equal(name, "fixture_hidden_address");

    prof_symbolizer_stats(sym, &stats);
    assert_int_equal(stats.objects_evicted, 0);

    /* collect frees it */

    assert_int_equal(prof_symbolizer_collect(sym), 1);
    assert_int_equal(prof_symbolizer_collect(sym), 0);

    prof_symbolizer_stats(sym, &stats);
    assert_int_equal(stats.objects_evicted, 1);
}


/* dlopen and dlclose of a library under a new name each time. */

static void
test_open_close_cycles_keep_objects_bounded(void **state)
{
    int                       i;
    void                     *lib;
    char                      path[PATH_MAX], source[PATH_MAX];
    unsigned                  last_id;
    uint64_t                  pc;
    const char               *function;
    prof_symbolizer_t        *sym;
    const prof_object_t      *obj;
    prof_symbolizer_stats_t   first, stats;

    sym = *state;
    assert_non_null(prof_symbolize(sym, (uintptr_t) test_target_function,
                                   &function));

    snprintf(source, sizeof(source), "%s/cycle.so", tmp_dir);
    run("cp '%s/stripped.so' '%s'", tmp_dir, source);

    last_id = 0;

    for (i = 0; i < 1000; i++) {
        snprintf(path, sizeof(path), "%s/cycle-%d.so", tmp_dir, i);
        assert_int_equal(link(source, path), 0);

        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(lib);
        pc = (uintptr_t) dlsym(lib, "fixture_hidden_address");

        obj = prof_symbolize(sym, pc, &function);
        assert_non_null(obj);
        assert_string_equal(obj->path, path);
        assert_true(obj->id > last_id);
        last_id = obj->id;
        assert_non_null(function);
        assert_string_equal(function, "fixture_hidden_address");

        if (i == 0) {
            prof_symbolizer_stats(sym, &first);
        }

        dlclose(lib);
        assert_int_equal(unlink(path), 0);

        assert_int_equal(prof_symbolizer_collect(sym), 1);

        prof_symbolizer_stats(sym, &stats);
        assert_true(stats.objects_held < first.objects_held);
    }

    assert_int_equal(stats.objects_evicted, 1000);
    assert_int_equal(stats.objects_held, first.objects_held - 1);

    /* the loader's changes only: one read at the lookup, one at collect */

    assert_true(stats.maps_reads <= first.maps_reads + 2 * 1000);
}


static void
test_collect_before_any_read_frees_nothing(void **state)
{
    prof_symbolizer_stats_t  stats;

    assert_int_equal(prof_symbolizer_collect(*state), 0);

    prof_symbolizer_stats(*state, &stats);
    assert_int_equal(stats.maps_reads, 0);
    assert_int_equal(stats.objects_held, 0);
}


static void
test_set_debug_dir_rejects_null(void **state)
{
    assert_int_equal(prof_symbolizer_set_debug_dir(*state, NULL), -EINVAL);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup_teardown(test_resolves_function_in_this_binary,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_resolves_libc_function_via_dynsym,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_symbols_and_inlines_from_the_symbol_store,
                                        setup, teardown),
        cmocka_unit_test(test_another_process_and_its_exit),
        cmocka_unit_test_setup_teardown(
            test_address_outside_any_symbol_has_no_function, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_unsized_function_named_to_the_next_symbol, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmapped_address_returns_null,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_id_matches_readelf,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_elf_vaddr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_debug_file_by_build_id,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_debuglink_beside_in_debug_dir_and_under_root,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_debuglink_with_another_crc_is_not_taken, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_minidebuginfo_names_static_functions, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_malformed_minidebuginfo_leaves_dynsym, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_elf_does_not_crash,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_vdso_has_build_id_and_functions,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_deleted_file_is_an_object_without_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refresh_keeps_object_ids,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_dwarf_released_when_idle_and_read_again, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_each_malformed_table_gives_no_symbols, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_file_parser_counts_functions_and_rejects_non_elf,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_jit_addresses_do_not_reread_maps, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_dlopen_is_seen_when_rereads_are_rate_limited,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_mapping_outside_loader_is_seen_within_a_second,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_unloaded_object_stays_valid_until_collect, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_open_close_cycles_keep_objects_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_collect_before_any_read_frees_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_debug_dir_rejects_null,
                                        setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
