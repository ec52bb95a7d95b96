/* tests/unit/test_stop.c — stop-string matcher, every script split at every point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/utf8.h"
#include "engine/chat/chat.h"
#include "engine/chat/stop.h"

typedef struct outcome {
  char text[512];
  size_t n;
  int which; /* -1: no match (flushed at the end) */
} outcome_t;

/* Feeds text in pieces ending at cuts[], flushing if no match. Every piece handed out before
 * the end must be complete UTF-8 and must not contain the start of a stop string at its end
 * that later became a match (checked by comparing with the expected total). */
static outcome_t run(const char *const *stops, size_t ns, const char *text, const size_t *cuts,
                     size_t ncuts) {
  outcome_t o = {.which = -1};
  stop_matcher_t *m;
  gt_err_t err = {0};
  assert_int_equal(stop_matcher_new(stops, ns, &m, &err), GT_OK);
  size_t len = strlen(text), at = 0;
  stop_result_t r = {0};
  for (size_t i = 0; i <= ncuts; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    assert_int_equal(stop_matcher_feed(m, text + at, end - at, &r, &err), GT_OK);
    assert_true(o.n + r.emit_len < sizeof o.text);
    assert_int_equal(gt_utf8_complete_len(r.emit, r.emit_len), r.emit_len);
    memcpy(o.text + o.n, r.emit, r.emit_len);
    o.n += r.emit_len;
    at = end;
    if (r.matched) {
      o.which = r.which;
      assert_int_equal(stop_matcher_feed(m, "x", 1, &r, &err), GT_EINVAL);
      break;
    }
  }
  if (o.which < 0) {
    assert_int_equal(stop_matcher_flush(m, &r, &err), GT_OK);
    memcpy(o.text + o.n, r.emit, r.emit_len);
    o.n += r.emit_len;
  }
  o.text[o.n] = 0;
  stop_matcher_free(m);
  return o;
}

static void check(const char *const *stops, size_t ns, const char *text, const char *want, int which) {
  size_t len = strlen(text);
  outcome_t whole = run(stops, ns, text, NULL, 0);
  assert_string_equal(whole.text, want);
  assert_int_equal(whole.which, which);
  size_t cuts[512] = {0};
  for (size_t c = 0; c <= len; c++) {
    outcome_t o = run(stops, ns, text, &c, 1);
    if (strcmp(o.text, want) != 0 || o.which != which)
      fail_msg("%s split at %zu: got '%s' (%d), want '%s' (%d)", text, c, o.text, o.which, want, which);
  }
  for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
  outcome_t b = run(stops, ns, text, cuts, len ? len - 1 : 0);
  assert_string_equal(b.text, want);
  assert_int_equal(b.which, which);
  for (size_t i = 0; i + 2 < len; i++) { /* every pair of cut points */
    for (size_t j = i + 1; j + 1 < len; j++) {
      size_t two[2] = {i + 1, j + 1};
      outcome_t o = run(stops, ns, text, two, 2);
      if (strcmp(o.text, want) != 0 || o.which != which)
        fail_msg("%s split at %zu,%zu: got '%s'", text, i + 1, j + 1, o.text);
    }
  }
}

static void test_single_stop(void **state) {
  (void)state;
  const char *s[] = {"</s>"};
  check(s, 1, "Hello</s>world", "Hello", 0);
  check(s, 1, "Hello </ s>", "Hello </ s>", -1);
  check(s, 1, "</s>", "", 0);
  check(s, 1, "<</</s", "<</</s", -1);
  check(s, 1, "a<</s>", "a<", 0);
}

static void test_several_stops(void **state) {
  (void)state;
  const char *s[] = {"ST", "STOP", "\n\n"};
  check(s, 3, "xxSTOPyy", "xx", 0);  /* the first to complete wins */
  check(s, 3, "a\n\nbST", "a", 2);
  check(s, 3, "S T\nS", "S T\nS", -1);
  const char *o[] = {"abcd", "bc", "OP", "STOP"};
  check(o, 4, "abce", "a", 1);
  check(o, 4, "xabcd", "xa", 1);
  check(o, 4, "xSTOPy", "x", 3);     /* same end: the longest wins */
}

static void test_utf8(void **state) {
  (void)state;
  const char *s[] = {"終わり", "🙂!"};
  check(s, 2, "日本語終わりです", "日本語", 0);
  check(s, 2, "終わ🙂🙂!x", "終わ🙂", 1);
  check(s, 2, "終わ終わ", "終わ終わ", -1);
  /* No stop strings: only incomplete characters are held. */
  check(NULL, 0, "añ🙂", "añ🙂", -1);
  stop_matcher_t *m;
  gt_err_t err = {0};
  assert_int_equal(stop_matcher_new(NULL, 0, &m, &err), GT_OK);
  stop_result_t r;
  assert_int_equal(stop_matcher_feed(m, "a\xf0\x9f", 3, &r, &err), GT_OK);
  assert_int_equal(r.emit_len, 1);
  assert_int_equal(stop_matcher_pending(m), 2);
  assert_int_equal(stop_matcher_feed(m, "\x99\x82", 2, &r, &err), GT_OK);
  assert_int_equal(r.emit_len, 4);
  assert_int_equal(stop_matcher_pending(m), 0);
  stop_matcher_free(m);
}

static void test_holdback(void **state) {
  (void)state;
  const char *s[] = {"</s>", "END"};
  stop_matcher_t *m;
  gt_err_t err = {0};
  assert_int_equal(stop_matcher_new(s, 2, &m, &err), GT_OK);
  stop_result_t r;
  assert_int_equal(stop_matcher_feed(m, "Hello </", 8, &r, &err), GT_OK);
  assert_int_equal(r.emit_len, 6);
  assert_memory_equal(r.emit, "Hello ", 6);
  assert_false(r.matched);
  assert_int_equal(stop_matcher_pending(m), 2);
  assert_int_equal(stop_matcher_feed(m, "x EN", 4, &r, &err), GT_OK);
  assert_int_equal(r.emit_len, 4);
  assert_memory_equal(r.emit, "</x ", 4);
  assert_int_equal(stop_matcher_feed(m, "D", 1, &r, &err), GT_OK);
  assert_true(r.matched);
  assert_int_equal(r.which, 1);
  assert_int_equal(r.emit_len, 0);
  stop_matcher_free(m);
}

static void test_errors(void **state) {
  (void)state;
  stop_matcher_t *m;
  gt_err_t err = {0};
  const char *empty[] = {"ok", ""};
  assert_int_equal(stop_matcher_new(empty, 2, &m, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "stop string 1"));
  const char *bad[] = {"\xff"};
  assert_int_equal(stop_matcher_new(bad, 1, &m, &err), GT_EINVAL);
  const char *nul[] = {NULL};
  assert_int_equal(stop_matcher_new(nul, 1, &m, &err), GT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_stop), cmocka_unit_test(test_several_stops),
      cmocka_unit_test(test_utf8), cmocka_unit_test(test_holdback), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
