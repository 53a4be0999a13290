/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of shared/common/utf8.h: what is valid, what becomes U+FFFD and how
 * many of them (Unicode's substitution of maximal subparts), JSON
 * escaping; and, against Python's decoder ("replace" for the expected
 * text, "strict" and json.loads for the output), random byte strings
 * built from the bytes where UTF-8 decoders go wrong.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "common/buffer.h"
#include "common/utf8.h"


#define FFFD  "\xef\xbf\xbd"


/* s[0, length) sanitized, through both the copy and the buffer API. */

static char *
sanitized(const char *s, size_t length, size_t *out_length)
{
    char           *out;
    size_t          n;
    prof_buffer_t   b = { NULL, 0, 0 };

    out = malloc(PROF_UTF8_SANITIZED_MAX(length) + 1);
    assert_non_null(out);

    n = prof_utf8_sanitize(out, s, length);
    assert_true(n <= PROF_UTF8_SANITIZED_MAX(length));
    assert_int_equal(out[n], '\0');

    assert_int_equal(prof_buffer_append(&b, "<", 1), 0);
    assert_int_equal(prof_utf8_append(&b, s, length), 0);
    assert_int_equal(b.length, n + 1);
    assert_memory_equal(b.data + 1, out, n);
    assert_int_equal(b.data[b.length], '\0');
    prof_buffer_free(&b);

    *out_length = n;

    return out;
}


static void
expect(const char *in, size_t in_length, const char *want)
{
    char    *out;
    size_t   n;

    out = sanitized(in, in_length, &n);

    if (n != strlen(want) || memcmp(out, want, n) != 0) {
        fail_msg("sanitized \"%.*s\" (%zu bytes) as \"%s\", not \"%s\"",
                 (int) in_length, in, in_length, out, want);
    }

    /* what comes out is valid, and valid text is left alone */
    assert_true(prof_utf8_valid(out, n));
    assert_int_equal(prof_utf8_valid(in, in_length),
                     n == in_length && memcmp(in, out, n) == 0);

    free(out);
}


#define EXPECT(in, want)  expect(in, sizeof(in) - 1, want)


static char *
json(const char *s, size_t length)
{
    char           *out;
    prof_buffer_t   b = { NULL, 0, 0 };

    assert_int_equal(prof_utf8_append_json(&b, s, length), 0);
    assert_int_equal(b.data[b.length], '\0');
    assert_int_equal(strlen((char *) b.data), b.length);

    out = (char *) b.data;

    return out;
}


static int
run_status(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}


static void
test_valid_text_is_kept_byte_for_byte(void **state)
{
    size_t       i;
    const char  *valid[] = {
        "",
        "GET /api/v1/items",
        "caf\xc3\xa9 na\xc3\xafve",                 /* 2 bytes */
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",    /* 3 bytes */
        "\xf0\x9f\x98\x80 smile",                   /* 4 bytes */
        "\xc2\x80 \xdf\xbf",                        /* U+0080, U+07FF */
        "\xe0\xa0\x80 \xef\xbf\xbf",                /* U+0800, U+FFFF */
        "\xed\x9f\xbf \xee\x80\x80",                /* around surrogates */
        "\xf0\x90\x80\x80 \xf4\x8f\xbf\xbf",        /* U+10000, U+10FFFF */
        FFFD,
        "\x01\x1f\x7f tab\there",                   /* controls are valid */
        "std::vector<int>::operator[](unsigned long)",
    };

    for (i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        assert_true(prof_utf8_valid(valid[i], strlen(valid[i])));
        expect(valid[i], strlen(valid[i]), valid[i]);
    }
}


static void
test_the_three_uri_shapes(void **state)
{
    /* /%ff%fe/a decoded by nginx, /caf%c3 cut short, raw /\xff\xfe */

    EXPECT("GET /\xff\xfe/a", "GET /" FFFD FFFD "/a");
    EXPECT("GET /caf\xc3", "GET /caf" FFFD);
    EXPECT("/\xff\xfe", "/" FFFD FFFD);

    /* the same, undecoded, is plain ASCII */
    EXPECT("GET /%ff%fe/a", "GET /%ff%fe/a");
}


static void
test_overlong_forms_are_replaced(void **state)
{
    /* C0 and C1 never start a sequence: one U+FFFD per byte */
    EXPECT("a\xc0\x80z", "a" FFFD FFFD "z");
    EXPECT("a\xc1\xbfz", "a" FFFD FFFD "z");

    /* E0 80..9F and F0 80..8F: the lead alone is the maximal subpart */
    EXPECT("a\xe0\x80\x80z", "a" FFFD FFFD FFFD "z");
    EXPECT("a\xe0\x9f\xbfz", "a" FFFD FFFD FFFD "z");
    EXPECT("a\xf0\x80\x80\x80z", "a" FFFD FFFD FFFD FFFD "z");
    EXPECT("a\xf0\x8f\xbf\xbfz", "a" FFFD FFFD FFFD FFFD "z");
}


static void
test_surrogates_are_replaced(void **state)
{
    EXPECT("\xed\xa0\x80", FFFD FFFD FFFD);            /* U+D800 */
    EXPECT("\xed\xbf\xbf", FFFD FFFD FFFD);            /* U+DFFF */
    EXPECT("\xed\xa0\xbd\xed\xb8\x80",                  /* a CESU pair */
           FFFD FFFD FFFD FFFD FFFD FFFD);
    EXPECT("\xed\x9f\xbf", "\xed\x9f\xbf");            /* U+D7FF */
}


static void
test_above_10ffff_is_replaced(void **state)
{
    EXPECT("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD);   /* U+110000 */
    EXPECT("\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD);
    EXPECT("\xf7\xbf\xbf\xbf", FFFD FFFD FFFD FFFD);
    EXPECT("\xf8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD);
    EXPECT("\xfe\xff", FFFD FFFD);
}


static void
test_cut_sequences_are_one_replacement(void **state)
{
    EXPECT("\xe2\x82", FFFD);                           /* U+20AC cut */
    EXPECT("\xe2\x82z", FFFD "z");
    EXPECT("\xf0\x9f\x98", FFFD);                       /* U+1F600 cut */
    EXPECT("\xf0\x9f\x98z", FFFD "z");
    EXPECT("\xf0\x9f\xe2\x82\xac", FFFD "\xe2\x82\xac");
    EXPECT("\xc3", FFFD);
    EXPECT("\xc3\xc3\xa9", FFFD "\xc3\xa9");
}


static void
test_stray_continuation_bytes_are_replaced(void **state)
{
    EXPECT("\x80", FFFD);
    EXPECT("a\x80\xbf" "b", "a" FFFD FFFD "b");
    EXPECT("\xc3\xa9\xa9", "\xc3\xa9" FFFD);
    EXPECT("\xf0\x9f\x98\x80\x80", "\xf0\x9f\x98\x80" FFFD);
}


static void
test_nul_is_replaced_but_escaped_in_json(void **state)
{
    char  *j;

    assert_false(prof_utf8_valid("a\0b", 3));
    assert_true(prof_utf8_valid("a\0b", 1));
    expect("a\0b", 3, "a" FFFD "b");
    expect("\0", 1, FFFD);
    expect("12345678\0abcdefg", 16, "12345678" FFFD "abcdefg");
    expect("1234567\0abcdefgh", 16, "1234567" FFFD "abcdefgh");

    /* JSON: nothing cut at the NUL */
    j = json("a\0b\xff", 4);
    assert_string_equal(j, "\"a\\u0000b" FFFD "\"");
    free(j);
}


static void
test_json_escapes_every_control_character(void **state)
{
    char          *j, want[16];
    unsigned char  c;

    for (c = 0; c < 0x20; c++) {
        j = json((char *) &c, 1);
        snprintf(want, sizeof(want), "\"\\u%04x\"", c);
        assert_string_equal(j, want);
        free(j);
    }

    j = json("\x7f", 1);
    assert_string_equal(j, "\"\\u007f\"");
    free(j);

    j = json("a\"b\\c/d\n\xc3\xa9", 10);
    assert_string_equal(j, "\"a\\\"b\\\\c/d\\u000a\xc3\xa9\"");
    free(j);

    j = json("", 0);
    assert_string_equal(j, "\"\"");
    free(j);
}


static void
test_a_64k_string(void **state)
{
    char    *s, *out, *want;
    size_t   i, n, length, want_length;

    length = 64 * 1024;
    s = malloc(length);
    want = malloc(PROF_UTF8_SANITIZED_MAX(length));
    assert_non_null(s);
    assert_non_null(want);

    /* valid: ASCII and 2, 3 and 4 byte characters, kept as they are */

    for (i = 0; i + 10 <= length; i += 10) {
        memcpy(s + i, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10);
    }
    memset(s + i, 'z', length - i);

    assert_true(prof_utf8_valid(s, length));
    out = sanitized(s, length, &n);
    assert_int_equal(n, length);
    assert_memory_equal(out, s, length);
    free(out);

    /* every byte invalid: three times longer */

    memset(s, 0xff, length);
    assert_false(prof_utf8_valid(s, length));
    out = sanitized(s, length, &n);
    assert_int_equal(n, PROF_UTF8_SANITIZED_MAX(length));
    for (i = 0; i < length; i++) {
        assert_memory_equal(out + 3 * i, FFFD, 3);
    }
    free(out);

    /* ASCII with an invalid byte now and then */

    want_length = 0;

    for (i = 0; i < length; i++) {
        if (i % 4099 == 4098) {
            s[i] = (char) 0x80;
            memcpy(want + want_length, FFFD, 3);
            want_length += 3;

        } else {
            s[i] = 'a' + i % 26;
            want[want_length++] = s[i];
        }
    }

    assert_false(prof_utf8_valid(s, length));
    out = sanitized(s, length, &n);
    assert_int_equal(n, want_length);
    assert_memory_equal(out, want, n);
    free(out);

    free(want);
    free(s);
}


/*
 * Random strings of the bytes where decoders differ (boundaries of every
 * range of Table 3-7), written with what we make of them: Python checks
 * that the sanitized text is what decode("utf-8", "replace") gives (NUL
 * as U+FFFD), that prof_utf8_valid() says whether it is strict UTF-8
 * without NUL, and that json.loads() of the JSON, strictly decoded,
 * gives the text back (NUL kept as U+0000).
 */

static const char  *python_check =
    "import sys, json\n"
    "for n, line in enumerate(open(sys.argv[1])):\n"
    "    src, out, js, valid = line.split()\n"
    "    src, out, js = (bytes.fromhex(x.strip('-'))\n"
    "                    for x in (src, out, js))\n"
    "    text = src.decode('utf-8', 'replace')\n"
    "    want = text.replace('\\0', '\\ufffd').encode()\n"
    "    try:\n"
    "        src.decode('utf-8', 'strict')\n"
    "        strict = b'\\0' not in src\n"
    "    except UnicodeDecodeError:\n"
    "        strict = False\n"
    "    if out != want:\n"
    "        sys.exit('%d %s: got %s want %s' % (n, src, out, want))\n"
    "    if int(valid) != strict:\n"
    "        sys.exit('%d %s: valid %s' % (n, src, valid))\n"
    "    if json.loads(js.decode('utf-8', 'strict')) != text:\n"
    "        sys.exit('%d %s: json %s' % (n, src, js))\n";


static void
put_hex(FILE *f, const void *data, size_t length)
{
    size_t               i;
    const unsigned char  *p = data;

    if (length == 0) {
        fputs("--", f);             /* bytes.fromhex('') needs a token */
        return;
    }

    for (i = 0; i < length; i++) {
        fprintf(f, "%02x", p[i]);
    }
}


static void
test_random_strings_match_python(void **state)
{
    int            fd;
    FILE          *f;
    char           path[] = "/tmp/test-utf8-XXXXXX";
    char           script[] = "/tmp/test-utf8-py-XXXXXX";
    char           cmd[256], *out, *j, src[48];
    size_t         i, k, length, n;
    unsigned       seed;
    static const unsigned char  bytes[] = {
        0x00, 0x01, 0x22, 0x41, 0x5c, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0,
        0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef,
        0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff, 0x0a
    };

    fd = mkstemp(script);
    assert_true(fd != -1);
    assert_int_equal(write(fd, python_check, strlen(python_check)),
                     strlen(python_check));
    close(fd);

    fd = mkstemp(path);
    assert_true(fd != -1);
    f = fdopen(fd, "w");
    assert_non_null(f);

    seed = 12345;

    for (i = 0; i < 20000; i++) {
        length = rand_r(&seed) % sizeof(src);

        for (k = 0; k < length; k++) {
            src[k] = (char) bytes[rand_r(&seed) % sizeof(bytes)];
        }

        out = sanitized(src, length, &n);
        j = json(src, length);

        put_hex(f, src, length);
        fputc(' ', f);
        put_hex(f, out, n);
        fputc(' ', f);
        put_hex(f, j, strlen(j));
        fprintf(f, " %d\n", prof_utf8_valid(src, length));

        free(out);
        free(j);
    }

    assert_int_equal(fclose(f), 0);

    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s'", script, path);
    assert_int_equal(run_status(system(cmd)), 0);

    unlink(path);
    unlink(script);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_text_is_kept_byte_for_byte),
        cmocka_unit_test(test_the_three_uri_shapes),
        cmocka_unit_test(test_overlong_forms_are_replaced),
        cmocka_unit_test(test_surrogates_are_replaced),
        cmocka_unit_test(test_above_10ffff_is_replaced),
        cmocka_unit_test(test_cut_sequences_are_one_replacement),
        cmocka_unit_test(test_stray_continuation_bytes_are_replaced),
        cmocka_unit_test(test_nul_is_replaced_but_escaped_in_json),
        cmocka_unit_test(test_json_escapes_every_control_character),
        cmocka_unit_test(test_a_64k_string),
        cmocka_unit_test(test_random_strings_match_python),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
