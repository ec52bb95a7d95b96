/* engine/sched/bad_words.c: which token each sequence bans after a given output tail. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/sched/bad_words.h"

static void test_apply(void **st) {
  (void)st;
  /* sequences: [5] (always banned), [1 2 3], [7 2] */
  const int32_t ids[] = {5, 1, 2, 3, 7, 2}, lens[] = {1, 3, 2};
  badw_t b;
  assert_int_equal(badw_copy(&b, ids, lens, 3), 0);
  float lg[8];
  const struct { int32_t out[3]; int n; int banned[8]; } cases[] = {
      {{0}, 0, {[5] = 1}},                 /* empty output: only the one-token word */
      {{1, 2}, 2, {[5] = 1, [3] = 1}},     /* tail 1 2: 3 would complete [1 2 3] */
      {{9, 1}, 2, {[5] = 1}},              /* tail 1 only: [1 2 3] needs 1 2 */
      {{1, 2, 7}, 3, {[5] = 1, [2] = 1}},  /* tail 7: 2 would complete [7 2] */
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    for (int i = 0; i < 8; i++) lg[i] = 1.0f;
    badw_apply(&b, cases[c].out, cases[c].n, lg, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(isinf(lg[i]) && lg[i] < 0, cases[c].banned[i]);
  }
  badw_free(&b);
  assert_int_equal(badw_copy(&b, NULL, NULL, 0), 0);
  assert_int_equal(b.n, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_apply)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
