/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Unit tests of the inline tables (shared/profiler/inline_table.h): the
 * table's answer at a pc is libdw's, asked pc by pc as the symbolizer
 * asked it before the tables (dwarf_addrdie, dwarf_getsrc_die,
 * dwarf_getscopes and the scopes of its innermost DIE), at every pc of a
 * fixture built with inlined functions, and at pcs spread over libc's
 * debug file where libc6-dbg is installed (INLINE_TABLE_PCS of them,
 * default 20000; 0: every line row's pc and the pcs either side). The
 * fixture is built with the compiler the tests are built with (TEST_CC),
 * and stripped with binutils' strip (TEST_TOOLS: its prefix,
 * cross-compiling). Build and run from the repository root:
 *
 *   make $PWD/build/unit/test_inline_table && build/unit/test_inline_table
 */

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <unistd.h>

#ifndef TEST_CC
#define TEST_CC     "gcc"
#endif
#ifndef TEST_TOOLS
#define TEST_TOOLS  ""
#endif

#include <cmocka.h>

#include "profiler/inline_table.h"
#include "profiler/inline_table_image.h"


/* Inlined functions two deep, in two callers, and a lexical block. */
static const char  fixture_source[] =
    "static inline __attribute__((always_inline)) int\n"
    "inner_step(int x)\n"
    "{\n"
    "    return x * 7 + (x >> 3);\n"
    "}\n"
    "\n"
    "static inline __attribute__((always_inline)) int\n"
    "outer_step(int x)\n"
    "{\n"
    "    int y = inner_step(x);\n"
    "    return inner_step(y + 1) ^ x;\n"
    "}\n"
    "\n"
    "int\n"
    "fixture_a(int n)\n"
    "{\n"
    "    int s = 0;\n"
    "    for (int i = 0; i < n; i++) {\n"
    "        int t = outer_step(i);\n"
    "        s += t;\n"
    "    }\n"
    "    return s;\n"
    "}\n"
    "\n"
    "int\n"
    "fixture_b(int n)\n"
    "{\n"
    "    return outer_step(n) + inner_step(n * 3);\n"
    "}\n";


static char  tmpdir[] = "/tmp/test_inline_table.XXXXXX";
static char  fixture_path[256];


/* libdw's answer at pc, as dwarf_inlines.c asked it before the tables. */
static size_t
reference_inlines(Dwarf *dwarf, uint64_t vaddr, prof_inline_t *frames,
    size_t max, uint32_t *line)
{
    int               i, nscopes, lineno;
    size_t            n;
    Dwarf_Die         cudie, die, *inner, *scopes;
    Dwarf_Line       *l;
    Dwarf_Word        v;
    Dwarf_Attribute   attr;
    const char       *name;

    *line = 0;

    if (dwarf_addrdie(dwarf, vaddr, &cudie) == NULL) {
        return 0;
    }

    l = dwarf_getsrc_die(&cudie, vaddr);
    if (l != NULL && dwarf_lineno(l, &lineno) == 0 && lineno > 0) {
        *line = (uint32_t) lineno;
    }

    nscopes = dwarf_getscopes(&cudie, vaddr, &scopes);
    if (nscopes <= 0) {
        *line = (nscopes < 0) ? 0 : *line;
        return 0;
    }

    inner = dwarf_offdie(dwarf, dwarf_dieoffset(&scopes[0]), &die);
    free(scopes);

    nscopes = (inner != NULL) ? dwarf_getscopes_die(inner, &scopes) : -1;
    if (nscopes <= 0) {
        *line = 0;
        return 0;
    }

    n = 0;

    for (i = 0; i < nscopes; i++) {
        if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) {
            break;
        }
        if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) {
            continue;
        }

        name = NULL;
        if (dwarf_attr_integrate(&scopes[i], DW_AT_linkage_name, &attr)
            != NULL)
        {
            name = dwarf_formstring(&attr);
        }
        if (name == NULL
            && dwarf_attr_integrate(&scopes[i], DW_AT_name, &attr) != NULL)
        {
            name = dwarf_formstring(&attr);
        }

        if (n == max || name == NULL) {
            n = 0;
            *line = 0;
            break;
        }

        frames[n].function = name;
        frames[n].line = *line;
        n++;

        *line = 0;
        if (dwarf_attr_integrate(&scopes[i], DW_AT_call_line, &attr) != NULL
            && dwarf_formudata(&attr, &v) == 0 && v <= UINT32_MAX)
        {
            *line = (uint32_t) v;
        }
    }

    free(scopes);

    return n;
}


/* The pcs of the DWARF's line rows, sorted (malloc, *n). */
static uint64_t *
line_pcs(Dwarf *dwarf, size_t *count)
{
    size_t        i, n, cap, nlines;
    uint64_t     *pcs, *p;
    uint8_t       unit_type;
    Dwarf_CU     *cu, *next;
    Dwarf_Die     cudie, subdie;
    Dwarf_Addr    addr;
    Dwarf_Lines  *lines;

    pcs = NULL;
    n = cap = 0;

    for (cu = NULL; dwarf_get_units(dwarf, cu, &next, NULL, &unit_type,
                                    &cudie, &subdie) == 0; cu = next)
    {
        if (dwarf_getsrclines(&cudie, &lines, &nlines) != 0) {
            continue;
        }
        for (i = 0; i < nlines; i++) {
            if (dwarf_lineaddr(dwarf_onesrcline(lines, i), &addr) != 0) {
                continue;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                p = realloc(pcs, cap * sizeof(uint64_t));
                assert_non_null(p);
                pcs = p;
            }
            pcs[n++] = addr;
        }
    }

    *count = n;
    return pcs;
}


/* The table's and libdw's answers at pc are the same. */
static int
same_answer(Dwarf *dwarf, const void *table, uint64_t pc, size_t max)
{
    size_t         n, m, i;
    uint32_t       line, ref_line;
    prof_inline_t  frames[8], ref[8];

    n = prof_inline_table_lookup(table, pc, frames, max, &line);
    m = reference_inlines(dwarf, pc, ref, max, &ref_line);

    if (n != m || line != ref_line) {
        fprintf(stderr, "pc 0x%llx: table %zu frames line %u, libdw %zu "
                "frames line %u\n", (unsigned long long) pc, n, line, m,
                ref_line);
        return 0;
    }

    for (i = 0; i < n; i++) {
        if (strcmp(frames[i].function, ref[i].function) != 0
            || frames[i].line != ref[i].line)
        {
            fprintf(stderr, "pc 0x%llx frame %zu: table %s:%u, libdw %s:%u\n",
                    (unsigned long long) pc, i, frames[i].function,
                    frames[i].line, ref[i].function, ref[i].line);
            return 0;
        }
    }

    return 1;
}


/*
 * The table of the file at path against libdw at pcs: every pc from the
 * first line row to the last when every is set, else about want pcs
 * spread over the rows (each row's pc, the one before, the one after).
 * How many pcs had inlined functions.
 */
static size_t
compare_file(const char *path, int every, size_t want)
{
    int       fd, rc;
    void     *table;
    size_t    len, npcs, i, step, inlined, checked, bad;
    uint32_t  line;
    uint64_t *pcs, pc, lo, hi;
    Dwarf    *dwarf;
    prof_inline_t  frames[8];

    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);

    rc = prof_inline_table_build(fd, NULL, &table, &len);
    assert_int_equal(rc, 0);
    assert_true(prof_inline_table_valid(table, len));

    dwarf = dwarf_begin(fd, DWARF_C_READ);
    assert_non_null(dwarf);

    pcs = line_pcs(dwarf, &npcs);
    assert_true(npcs > 0);

    inlined = checked = bad = 0;

    if (every) {
        lo = UINT64_MAX;
        hi = 0;
        for (i = 0; i < npcs; i++) {
            lo = pcs[i] < lo ? pcs[i] : lo;
            hi = pcs[i] > hi ? pcs[i] : hi;
        }
        for (pc = lo - 1; pc <= hi + 1; pc++) {
            bad += !same_answer(dwarf, table, pc, 8);
            bad += !same_answer(dwarf, table, pc, 1);
            inlined += prof_inline_table_lookup(table, pc, frames, 8,
                                                &line) > 0;
            checked++;
        }

    } else {
        step = (want / 3 < npcs) ? npcs / (want / 3) : 1;
        for (i = 0; i < npcs && bad < 10; i += step) {
            for (pc = pcs[i] - 1; pc <= pcs[i] + 1; pc++) {
                bad += !same_answer(dwarf, table, pc, 8);
                inlined += prof_inline_table_lookup(table, pc, frames, 8,
                                                    &line) > 0;
                checked++;
            }
        }
    }

    fprintf(stderr, "%s: %zu bytes of table, %zu pcs compared, %zu with "
            "inlined functions, %zu different\n", path, len, checked,
            inlined, bad);
    assert_int_equal(bad, 0);

    free(pcs);
    dwarf_end(dwarf);
    free(table);
    close(fd);

    return inlined;
}


static int
setup(void **state)
{
    int    rc;
    char   cmd[1024];
    FILE  *f;

    (void) state;

    if (mkdtemp(tmpdir) == NULL) {
        return -1;
    }

    snprintf(cmd, sizeof(cmd), "%s/fixture.c", tmpdir);
    f = fopen(cmd, "w");
    if (f == NULL) {
        return -1;
    }
    fputs(fixture_source, f);
    fclose(f);

    snprintf(fixture_path, sizeof(fixture_path), "%s/fixture.so", tmpdir);
    snprintf(cmd, sizeof(cmd), "%s -O2 -g -shared -fPIC -o %s %s/fixture.c",
             TEST_CC, fixture_path, tmpdir);
    rc = system(cmd);

    return rc == 0 ? 0 : -1;
}


static int
teardown(void **state)
{
    char  cmd[512];

    (void) state;

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);

    return system(cmd) == 0 ? 0 : -1;
}


/* Every pc of an object with inlined functions: libdw's answer. */
static void
test_table_answers_as_libdw_at_every_pc(void **state)
{
    (void) state;

    assert_true(compare_file(fixture_path, 1, 0) > 0);
}


/*
 * A file without DWARF has no table; a truncated table is refused, and so
 * is one whose ranges' bytes do not decode within their blocks, or name a
 * node it does not have.
 */
static void
test_no_dwarf_no_table_and_truncated_refused(void **state)
{
    int                 fd;
    void               *table;
    size_t              len;
    size_t              i;
    uint8_t            *data, *copy;
    char                cmd[600], stripped[300];
    prof_inl_header_t  *h;

    (void) state;

    snprintf(stripped, sizeof(stripped), "%s/stripped.so", tmpdir);
    snprintf(cmd, sizeof(cmd), "%sstrip -g -o %s %s", TEST_TOOLS, stripped,
             fixture_path);
    assert_int_equal(system(cmd), 0);

    fd = open(stripped, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(prof_inline_table_build(fd, NULL, &table, &len),
                     -ENOENT);
    close(fd);

    fd = open(fixture_path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(prof_inline_table_build(fd, NULL, &table, &len), 0);
    close(fd);

    assert_true(prof_inline_table_valid(table, len));
    assert_false(prof_inline_table_valid(table, len - 1));
    assert_false(prof_inline_table_valid(table, 8));

    /* Ranges' bytes that never end, or name a node past the nodes. */
    h = table;
    data = (uint8_t *) prof_inl_data(h);
    copy = malloc(h->data_len);
    assert_non_null(copy);
    memcpy(copy, data, h->data_len);
    memset(data, 0xff, h->data_len);
    assert_false(prof_inline_table_valid(table, len));
    memcpy(data, copy, h->data_len);
    assert_true(prof_inline_table_valid(table, len));

    /* The first range: its start (0), its line, then its node's byte. */
    for (i = 1; data[i] & 0x80; i++) {
        /* void */
    }
    i++;
    assert_true(data[i] < 0x80 && h->nnodes < 0x80);
    data[i] = (uint8_t) h->nnodes;
    assert_false(prof_inline_table_valid(table, len));
    free(copy);
    free(table);
}


/* libc's debug file (libc6-dbg), where installed: pcs spread over it. */
static void
test_table_answers_as_libdw_in_libc_debug_file(void **state)
{
    FILE        *p;
    char         path[512], *nl;
    const char  *env;
    size_t       want;

    (void) state;

    p = popen("f=$(readelf -n /lib/x86_64-linux-gnu/libc.so.6 "
              "/lib/aarch64-linux-gnu/libc.so.6 2>/dev/null "
              "| sed -n 's/.*Build ID: \\(..\\)\\(.*\\)/\\1\\/\\2/p' "
              "| head -1); [ -n \"$f\" ] "
              "&& [ -f /usr/lib/debug/.build-id/$f.debug ] "
              "&& echo /usr/lib/debug/.build-id/$f.debug", "r");
    assert_non_null(p);
    path[0] = '\0';
    if (fgets(path, sizeof(path), p) == NULL) {
        path[0] = '\0';
    }
    pclose(p);

    nl = strchr(path, '\n');
    if (nl != NULL) {
        *nl = '\0';
    }

    if (path[0] == '\0') {
        skip();
    }

    env = getenv("INLINE_TABLE_PCS");
    want = (env != NULL) ? strtoul(env, NULL, 10) : 20000;

    assert_true(compare_file(path, 0, want ? want : SIZE_MAX / 4) > 0);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_answers_as_libdw_at_every_pc),
        cmocka_unit_test(test_no_dwarf_no_table_and_truncated_refused),
        cmocka_unit_test(test_table_answers_as_libdw_in_libc_debug_file),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
