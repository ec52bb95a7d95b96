/* common/strbuf.h, common/utf8.h and common/json_str.h: the string buffer, UTF-8 and JSON string
 * helpers the engine, the router and the tokenizer share. JSON string literals are checked against
 * jansson's json_dumps on every byte and on random well-formed text. UTF-8 validation is checked exhaustively for every sequence of up to
 * three bytes, and for four-byte leads over every second byte, against a reference written from
 * the Unicode definition (decode, then reject overlongs, surrogates and > U+10FFFF). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/json_str.h"
#include "common/strbuf.h"
#include "common/utf8.h"

/* ---- strbuf ---- */

static void test_sb_append(void **st) {
  gt_sb_t b = {0};
  assert_int_equal(gt_sb_add(&b, NULL, 0), 0); /* an empty append still gives "" */
  assert_non_null(b.p);
  assert_string_equal(b.p, "");
  assert_int_equal(b.len, 0);
  /* many appends across several regrowths keep every byte, NUL-terminated */
  char want[5000];
  size_t n = 0;
  for (int i = 0; i < 1000; i++) {
    char piece[8];
    const size_t k = (size_t)(i % 5) + 1;
    for (size_t j = 0; j < k; j++) piece[j] = (char)('a' + (i + (int)j) % 26);
    assert_int_equal(gt_sb_add(&b, piece, k), 0);
    memcpy(want + n, piece, k);
    n += k;
  }
  assert_int_equal(b.len, n);
  assert_true(b.cap > n);
  assert_memory_equal(b.p, want, n);
  assert_int_equal(b.p[n], 0);
  assert_int_equal(gt_sb_adds(&b, "xyz"), 0);
  assert_int_equal(gt_sb_addc(&b, '!'), 0);
  assert_string_equal(b.p + n, "xyz!");
  assert_false(b.oom);
  gt_sb_free(&b);
  assert_null(b.p);
  assert_int_equal(b.len + b.cap, 0);
}

static void test_sb_reuse(void **st) {
  gt_sb_t b = {0};
  gt_sb_adds(&b, "hello");
  b.len = 0; /* empty it, keep the memory */
  gt_sb_adds(&b, "hi");
  assert_string_equal(b.p, "hi");
  assert_int_equal(b.len, 2);
  gt_sb_free(&b);
}

static void test_sb_printf(void **st) {
  gt_sb_t b = {0};
  assert_int_equal(gt_sb_printf(&b, "%s", ""), 0);
  assert_non_null(b.p);
  assert_string_equal(b.p, "");
  gt_sb_adds(&b, "x=");
  char big[3000];
  memset(big, 'y', sizeof big - 1);
  big[sizeof big - 1] = 0;
  for (int i = 0; i < 3; i++) /* each one past the capacity: grown, then written whole */
    assert_int_equal(gt_sb_printf(&b, "%d:%s;", i, big), 0);
  assert_int_equal(b.len, 2 + 3 * (2 + sizeof big - 1 + 1));
  assert_memory_equal(b.p, "x=0:yy", 6);
  assert_string_equal(b.p + b.len - 4, "yyy;");
  assert_int_equal(b.p[b.len], 0);
  gt_sb_free(&b);
}

/* An append that cannot fit fails without touching the buffer and leaves oom set. */
static void test_sb_oom(void **st) {
  gt_sb_t b = {0};
  gt_sb_adds(&b, "keep");
  assert_int_equal(gt_sb_add(&b, "x", SIZE_MAX), -1);
  assert_true(b.oom);
  assert_string_equal(b.p, "keep");
  assert_int_equal(b.len, 4);
  assert_int_equal(gt_sb_addc(&b, '!'), 0); /* later appends still work; oom stays set */
  assert_string_equal(b.p, "keep!");
  assert_true(b.oom);
  gt_sb_free(&b);
  assert_false(b.oom);
}

/* ---- UTF-8 ---- */

/* Reference: length of the well-formed character at s[0..n), 0 if ill formed or truncated. */
static size_t ref_char(const unsigned char *s, size_t n) {
  const unsigned c = s[0];
  const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (!len || len > n) return 0;
  uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}
static int ref_valid(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    const size_t k = ref_char(s + i, n - i);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

static void test_utf8_exhaustive(void **st) {
  unsigned char s[4];
  long checked = 0;
  for (unsigned a = 0; a < 256; a++) {
    s[0] = (unsigned char)a;
    assert_int_equal(gt_utf8_valid((char *)s, 1), ref_valid(s, 1));
    for (unsigned b = 0; b < 256; b++) {
      s[1] = (unsigned char)b;
      assert_int_equal(gt_utf8_valid((char *)s, 2), ref_valid(s, 2));
      for (unsigned c = 0; c < 256; c++) {
        s[2] = (unsigned char)c;
        if (gt_utf8_valid((char *)s, 3) != ref_valid(s, 3)) fail_msg("%02x %02x %02x", a, b, c);
        checked++;
      }
      if (a >= 0xF0 && a <= 0xF4) /* four-byte leads: every second byte, fixed tails */
        for (unsigned c = 0x7F; c <= 0xC0; c++) {
          s[2] = (unsigned char)c;
          s[3] = 0x80;
          if (gt_utf8_valid((char *)s, 4) != ref_valid(s, 4)) fail_msg("%02x %02x %02x 80", a, b, c);
        }
    }
  }
  assert_int_equal(checked, 1L << 24);
}

static void test_utf8_cases(void **st) {
  assert_true(gt_utf8_valid("aé🙂", strlen("aé🙂")));
  assert_true(gt_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
  assert_true(gt_utf8_valid("", 0));
  assert_false(gt_utf8_valid("\xc0\x80", 2));         /* overlong */
  assert_false(gt_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
  assert_false(gt_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
  assert_false(gt_utf8_valid("\xe2\x82", 2));         /* truncated */
  assert_false(gt_utf8_valid("\xff", 1));
  assert_int_equal(gt_utf8_invalid_at("ab\xe2\x82\xac" "c\x80", 7), 6);
  /* complete_len: a truncated last character is held back, ill-formed bytes are not */
  assert_int_equal(gt_utf8_complete_len("a\xf0\x9f\x99", 4), 1);
  assert_int_equal(gt_utf8_complete_len("a\xf0\x9f\x99\x82", 5), 5);
  assert_int_equal(gt_utf8_complete_len("a\xc3", 2), 1);
  assert_int_equal(gt_utf8_complete_len("a\xff", 2), 2);
  assert_int_equal(gt_utf8_complete_len("a\xe0\x80", 3), 3); /* cannot become valid */
  assert_int_equal(gt_utf8_complete_len("\x80\x80\x80\x80", 4), 4);
  assert_int_equal(gt_utf8_complete_len("", 0), 0);
}

/* gt_utf8_next: lengths, INCOMPLETE for valid prefixes, maximal ill-formed subparts. */
static void test_utf8_next(void **st) {
  uint32_t cp = 0;
  size_t adv = 0;
  assert_int_equal(gt_utf8_next((const unsigned char *)"\xe2\x82\xac", 3, &cp, &adv), 3);
  assert_int_equal(cp, 0x20AC);
  assert_int_equal(gt_utf8_next((const unsigned char *)"\xe2\x82", 2, &cp, &adv), GT_UTF8_INCOMPLETE);
  assert_int_equal(gt_utf8_next((const unsigned char *)"\xe2\x28\xa1", 3, &cp, &adv), GT_UTF8_INVALID);
  assert_int_equal(adv, 1);
  assert_int_equal(gt_utf8_next((const unsigned char *)"\xf0\x9f\x28", 3, &cp, &adv), GT_UTF8_INVALID);
  assert_int_equal(adv, 2); /* F0 9F is a valid prefix: one U+FFFD for both */
  assert_int_equal(gt_utf8_next((const unsigned char *)"\xed\xa0\x80", 3, &cp, &adv), GT_UTF8_INVALID);
  assert_int_equal(adv, 1); /* surrogate: ED is a subpart of its own */
}

/* gt_utf8_put of every scalar value decodes back to itself. */
static void test_utf8_put_roundtrip(void **st) {
  for (uint32_t c = 0; c <= 0x10FFFF; c++) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    char buf[4];
    const int len = gt_utf8_put(c, buf);
    uint32_t back = 0;
    size_t adv = 0;
    if (gt_utf8_next((const unsigned char *)buf, (size_t)len, &back, &adv) != len || back != c)
      fail_msg("U+%04X", (unsigned)c);
  }
}

/* ---- json_str ---- */

/* s[0..n) as gt_sb_add_json_str writes it equals jansson's dump of the same string, and its
 * length is what gt_json_chars_len says. */
static void check_json_str(const char *s, size_t n, const char *want) {
  gt_sb_t b = {0};
  assert_int_equal(gt_sb_add_json_str(&b, s, n), 0);
  char *ref = NULL;
  if (!want) {
    json_t *j = json_stringn(s, n);
    assert_non_null(j);
    ref = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(j);
    want = ref;
  }
  assert_string_equal(b.p, want);
  assert_int_equal(gt_json_chars_len(s, n) + 2, b.len);
  free(ref);
  gt_sb_free(&b);
}

static void test_json_str(void **st) {
  (void)st;
  for (int c = 1; c < 0x80; c++) { /* every ASCII byte, alone and inside text */
    char one[1] = {(char)c}, mid[5] = {'a', 'b', (char)c, 'c', 'd'};
    check_json_str(one, 1, NULL);
    check_json_str(mid, 5, NULL);
  }
  check_json_str("", 0, NULL);
  check_json_str("\0 in the middle", 16, NULL);
  check_json_str("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15, NULL);
  check_json_str("a\0b", 3, "\"a\\u0000b\"");
  srand(7);
  for (int k = 0; k < 2000; k++) { /* random well-formed text, escapes included */
    char buf[256];
    size_t n = 0;
    while (n < sizeof buf - 4) {
      const uint32_t cp = (uint32_t)rand() % 5 == 0 ? (uint32_t)rand() % 0x80 : (uint32_t)rand() % 0x10FFFF;
      if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
      n += (size_t)gt_utf8_put(cp, buf + n);
    }
    check_json_str(buf, n, NULL);
  }
  /* ill-formed input: one U+FFFD per maximal ill-formed subpart, a truncated last character too */
  check_json_str("a\xff" "b", 3, "\"a\xef\xbf\xbd" "b\"");
  check_json_str("\xe2\x82", 2, "\"\xef\xbf\xbd\"");
  check_json_str("\xc0\xafx\"", 4, "\"\xef\xbf\xbd\xef\xbf\xbdx\\\"\"");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sb_append),       cmocka_unit_test(test_sb_reuse),
      cmocka_unit_test(test_sb_oom),          cmocka_unit_test(test_sb_printf),          cmocka_unit_test(test_utf8_exhaustive),
      cmocka_unit_test(test_utf8_cases),      cmocka_unit_test(test_utf8_next),
      cmocka_unit_test(test_utf8_put_roundtrip), cmocka_unit_test(test_json_str),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
