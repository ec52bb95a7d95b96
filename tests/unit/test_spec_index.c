/* The n-gram index of prompt lookup (engine/sched/spec_index.h) and the suffix cache across
 * requests (engine/sched/spec_suffix.h), without a model:
 *   - spec_index_draft gives spec_ngram_draft's drafts (the scan) at every length of random
 *     sequences grown a token at a time, over small and large alphabets and gram ranges (the
 *     index's chains, table growth and rebuilds), and after a reset when the sequence changes;
 *   - negative ids separate runs (no gram across one or ending before one);
 *   - the suffix cache drafts the continuation of the newest run of the same salt, stops at the
 *     end of a run, finds an output's start from its prompt's end, never crosses salts, and
 *     keeps the newer half (whole runs) when full. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sched/spec.h"
#include "engine/sched/spec_index.h"
#include "engine/sched/spec_suffix.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* the index and the scan agree at every n of one sequence of n_max tokens over `alpha` ids */
static void agree(int n_max, int alpha, int min_n, int max_n, int k) {
  int32_t *t = malloc(sizeof(int32_t) * (size_t)n_max);
  assert_non_null(t);
  spec_index_t x = {0};
  int found = 0;
  for (int n = 0; n < n_max; n++) {
    /* mostly random, now and then a copy of an earlier stretch (long matches) */
    t[n] = n > 8 && rnd() % 4 == 0 ? t[rnd() % (unsigned)(n - 1)] : (int32_t)(rnd() % (unsigned)alpha);
    const int len = n + 1;
    int32_t a[8], b[8];
    memset(a, 0x7f, sizeof a);
    memset(b, 0x7f, sizeof b);
    int g = -1;
    const int na = spec_ngram_draft(t, len, k, min_n, max_n, a), nb = spec_index_draft(&x, t, len, k, min_n, max_n, b, &g);
    if (na != nb || memcmp(a, b, sizeof(int32_t) * (size_t)(na > 0 ? na : 0)) != 0)
      fail_msg("n %d alpha %d grams %d..%d k %d: scan %d drafts, index %d", len, alpha, min_n, max_n, k, na, nb);
    assert_true(na == 0 ? g == 0 : g >= min_n && g <= max_n);
    found += na > 0;
  }
  assert_true(found > 0);
  spec_index_free(&x);
  free(t);
}

static void test_index_equals_scan(void **state) {
  (void)state;
  agree(3000, 2, 2, 4, 3);     /* long chains: every gram recurs */
  agree(3000, 50, 2, 4, 3);
  agree(5000, 100000, 2, 4, 3); /* few matches but the copied stretches */
  agree(2000, 7, 1, 8, 8);
  agree(2000, 30, 3, 3, 1);
}

static void test_index_reset_and_params(void **state) {
  (void)state;
  spec_index_t x = {0};
  int32_t out[4], g;
  const int32_t a[] = {1, 2, 3, 4, 5, 1, 2, 3};
  assert_int_equal(spec_index_draft(&x, a, 8, 3, 2, 4, out, &g), 3);
  assert_int_equal(g, 3);
  assert_int_equal(out[0], 4);
  /* a shorter, different sequence: the index starts again (n_in past it) */
  const int32_t b[] = {9, 8, 7, 9, 8};
  assert_int_equal(spec_index_draft(&x, b, 5, 3, 2, 4, out, &g), 3); /* "9 8" at 0: 7 9 8 */
  assert_int_equal(g, 2);
  assert_int_equal(out[0], 7);
  assert_int_equal(out[2], 8);
  /* other gram lengths: rebuilt for them ("8" recurs at 1: 7 9 8) */
  assert_int_equal(spec_index_draft(&x, b, 5, 3, 1, 1, out, &g), 3);
  assert_int_equal(out[0], 7);
  assert_int_equal(out[2], 8);
  assert_int_equal(spec_index_draft(&x, b, 5, 0, 1, 1, out, &g), 0);
  assert_int_equal(spec_index_draft(&x, b, 1, 3, 1, 4, out, &g), 0);
  spec_index_free(&x);
}

static void test_index_separators(void **state) {
  (void)state;
  spec_index_t x = {0};
  spec_index_reset(&x, 2, 3);
  /* 5 6 | 7 8 9 -1 | 5 6 7: "6 7" spans no separator only in the last run; "8 9" is followed by -1 */
  const int32_t t[] = {5, 6, -1, 7, 8, 9, -1, 5, 6, 7};
  assert_int_equal(spec_index_extend(&x, t, NULL, 10), 0);
  int e = -1;
  const int32_t k1[] = {8, 9};
  assert_int_equal(spec_index_find(&x, t, NULL, 0, k1, 2, 8, &e), 0); /* ends before a separator */
  const int32_t k2[] = {-1, 7};
  assert_int_equal(spec_index_find(&x, t, NULL, 0, k2 + 1, 1, 8, &e), 0); /* shorter than min_n */
  const int32_t k3[] = {6, 7};
  assert_int_equal(spec_index_find(&x, t, NULL, 0, k3, 2, 8, &e), 2); /* the last run's, not one across -1 */
  assert_int_equal(e, 9);
  const int32_t k4[] = {7, 8};
  assert_int_equal(spec_index_find(&x, t, NULL, 0, k4, 2, 8, &e), 2);
  assert_int_equal(e, 4);
  spec_index_free(&x);
  /* tagged: only occurrences whose end carries the tag */
  spec_index_t y = {0};
  spec_index_reset(&y, 2, 3);
  const uint64_t tags[10] = {1, 1, 1, 2, 2, 2, 2, 3, 3, 3};
  assert_int_equal(spec_index_extend(&y, t, tags, 10), 0);
  assert_int_equal(spec_index_find(&y, t, tags, 3, k4, 2, 8, &e), 0);
  assert_int_equal(spec_index_find(&y, t, tags, 2, k4, 2, 8, &e), 2);
  assert_int_equal(e, 4);
  assert_int_equal(spec_index_find(&y, t, tags, 3, k3, 2, 8, &e), 2);
  assert_int_equal(e, 9);
  spec_index_free(&y);
}

static void test_suffix_cache(void **state) {
  (void)state;
  spec_suffix_t *c = spec_suffix_create(256);
  assert_non_null(c);
  int32_t out[8];
  int g;
  /* request A (salt 1): prompt 100..139, output 500..529 */
  int32_t a[70];
  for (int i = 0; i < 40; i++) a[i] = 100 + i;
  for (int i = 0; i < 30; i++) a[40 + i] = 500 + i;
  assert_int_equal(spec_suffix_add(c, a, 70, 40, 1), 0);
  assert_int_equal(spec_suffix_tokens(c), SPEC_SUFFIX_CTX + 30 + 1);
  /* the same prompt again: its end finds A's output */
  assert_int_equal(spec_suffix_draft(c, a, 40, 1, 5, out, &g), 5);
  assert_int_equal(g, SPEC_SUFFIX_MAX_N);
  assert_int_equal(out[0], 500);
  assert_int_equal(out[4], 504);
  /* mid-output, and at the end of the run: up to its last token */
  assert_int_equal(spec_suffix_draft(c, a, 60, 1, 8, out, &g), 8);
  assert_int_equal(out[0], 520);
  assert_int_equal(spec_suffix_draft(c, a, 67, 1, 8, out, &g), 3);
  assert_int_equal(out[2], 529);
  assert_int_equal(spec_suffix_draft(c, a, 70, 1, 8, out, &g), 0); /* nothing follows A's end */
  /* another salt finds nothing; a key shorter than SPEC_SUFFIX_MIN_N neither */
  assert_int_equal(spec_suffix_draft(c, a, 40, 2, 5, out, &g), 0);
  assert_int_equal(g, 0);
  const int32_t short_key[] = {137, 138, 139};
  assert_int_equal(spec_suffix_draft(c, short_key, 3, 1, 5, out, &g), 0);
  /* only the prompt's last SPEC_SUFFIX_CTX tokens are kept */
  assert_int_equal(spec_suffix_draft(c, a, 20, 1, 5, out, &g), 0);
  /* a newer run with the same prompt end (salt 1) wins: output 600.. */
  int32_t b[50];
  memcpy(b, a, sizeof(int32_t) * 40);
  for (int i = 0; i < 10; i++) b[40 + i] = 600 + i;
  assert_int_equal(spec_suffix_add(c, b, 50, 40, 1), 0);
  assert_int_equal(spec_suffix_draft(c, a, 40, 1, 2, out, &g), 2);
  assert_int_equal(out[0], 600);
  /* a request without output adds nothing */
  const int before = spec_suffix_tokens(c);
  assert_int_equal(spec_suffix_add(c, b, 40, 40, 1), 0);
  assert_int_equal(spec_suffix_tokens(c), before);
  /* full: runs of other prompts push the oldest out, whole runs, at most cap tokens kept */
  for (int r = 0; r < 20; r++) {
    int32_t q[60];
    for (int i = 0; i < 60; i++) q[i] = 1000 * (r + 2) + i;
    assert_int_equal(spec_suffix_add(c, q, 60, 40, 1), 0);
    assert_true(spec_suffix_tokens(c) <= 256);
    /* the newest run is always found */
    assert_int_equal(spec_suffix_draft(c, q, 50, 1, 3, out, &g), 3);
    assert_int_equal(out[0], 1000 * (r + 2) + 50);
  }
  assert_int_equal(spec_suffix_draft(c, a, 40, 1, 2, out, &g), 0); /* A and B went */
  /* a run longer than half the cache keeps its newest tokens */
  int32_t big[400];
  for (int i = 0; i < 400; i++) big[i] = 50000 + i;
  assert_int_equal(spec_suffix_add(c, big, 400, 10, 7), 0);
  assert_true(spec_suffix_tokens(c) <= 256);
  assert_int_equal(spec_suffix_draft(c, big, 390, 7, 4, out, &g), 4);
  assert_int_equal(out[0], 50390);
  assert_int_equal(spec_suffix_draft(c, big, 100, 7, 4, out, &g), 0);
  spec_suffix_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index_equals_scan),
      cmocka_unit_test(test_index_reset_and_params),
      cmocka_unit_test(test_index_separators),
      cmocka_unit_test(test_suffix_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
