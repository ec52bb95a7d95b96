/* Sampler: greedy, temperature, top-k, top-p, min-p, penalties; seeded and deterministic. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/sampler.h"

#define V 8

/* logits of a known distribution: p ∝ {8, 4, 2, 1, 1, 0, 0, 0} (zeros as -inf-ish) */
static void fill(float *l) {
  const float w[V] = {8, 4, 2, 1, 1, 1e-30f, 1e-30f, 1e-30f};
  for (int i = 0; i < V; i++) l[i] = logf(w[i]);
}

static sampler_t *mk(sampler_params_t p) {
  sampler_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sampler_create(&p, V, &s, &err), 0);
  return s;
}

/* counts[V] of n draws */
static void draw(sampler_params_t p, int n, int *counts) {
  sampler_t *s = mk(p);
  float l[V];
  memset(counts, 0, sizeof(int) * V);
  for (int i = 0; i < n; i++) {
    fill(l);
    counts[sampler_sample(s, l)]++;
  }
  sampler_free(s);
}

static void test_greedy(void **st) {
  sampler_params_t p = sampler_defaults();
  sampler_t *s = mk(p);
  float l[V] = {0, 3, 3, -1, 2, 0, 0, 0};
  assert_int_equal(sampler_sample(s, l), 1); /* lowest id on ties */
  sampler_free(s);
  p.temperature = 1;
  p.top_k = 1; /* top-k 1 is greedy whatever the temperature */
  s = mk(p);
  float l2[V] = {0, 1, 5, -1, 2, 0, 0, 0};
  for (int i = 0; i < 10; i++) assert_int_equal(sampler_sample(s, l2), 2);
  sampler_free(s);
}

static void test_temperature_distribution(void **st) {
  sampler_params_t p = sampler_defaults();
  p.temperature = 1;
  p.seed = 42;
  int c[V], n = 16000;
  draw(p, n, c);
  const double want[V] = {8 / 16., 4 / 16., 2 / 16., 1 / 16., 1 / 16., 0, 0, 0};
  for (int i = 0; i < V; i++) {
    double f = (double)c[i] / n, sd = sqrt(want[i] * (1 - want[i]) / n);
    assert_true(fabs(f - want[i]) <= 5 * sd + 1e-9); /* deterministic (seeded); 5 sigma */
  }
  /* determinism: the same seed draws the same sequence; another seed another one */
  int c2[V];
  draw(p, n, c2);
  assert_memory_equal(c, c2, sizeof c);
  p.seed = 43;
  draw(p, n, c2);
  assert_true(memcmp(c, c2, sizeof c) != 0);
}

static void test_filters(void **st) {
  sampler_params_t p = sampler_defaults();
  p.temperature = 1;
  p.seed = 7;
  int c[V];
  p.top_k = 2; /* only ids 0, 1 in ratio 2:1 */
  draw(p, 6000, c);
  assert_true(c[0] + c[1] == 6000 && c[0] > c[1] && c[1] > 1500);
  p.top_k = 0;
  p.top_p = 0.7f; /* 0.5 + 0.25 reaches 0.7: ids 0, 1 */
  draw(p, 6000, c);
  assert_true(c[0] + c[1] == 6000 && c[1] > 1500);
  p.top_p = 0.4f; /* the first token alone has 0.5 >= 0.4 */
  draw(p, 1000, c);
  assert_int_equal(c[0], 1000);
  p.top_p = 1;
  p.min_p = 0.2f; /* keeps p >= 0.2 * 0.5 = 0.1: ids 0, 1, 2 */
  draw(p, 6000, c);
  assert_true(c[0] + c[1] + c[2] == 6000 && c[2] > 400);
  p.min_p = 0;
  p.temperature = 0.05f; /* near-greedy */
  draw(p, 1000, c);
  assert_int_equal(c[0], 1000);
}

static void test_penalties(void **st) {
  sampler_params_t p = sampler_defaults();
  p.repetition_penalty = 4; /* id 0 seen: logit ln 8 / 4 < ln 4 */
  sampler_t *s = mk(p);
  float l[V];
  fill(l);
  sampler_accept(s, 0, 0);
  assert_int_equal(sampler_sample(s, l), 1);
  sampler_free(s);
  p = sampler_defaults();
  p.frequency_penalty = 0.5f; /* id 0 twice in the output: ln 8 - 1.0 < ln 4 */
  s = mk(p);
  fill(l);
  sampler_accept(s, 0, 1);
  sampler_accept(s, 0, 1);
  assert_int_equal(sampler_sample(s, l), 1);
  sampler_free(s);
  p = sampler_defaults();
  p.presence_penalty = 0.5f; /* prompt tokens do not count for presence */
  s = mk(p);
  fill(l);
  sampler_accept(s, 0, 0);
  assert_int_equal(sampler_sample(s, l), 0);
  sampler_free(s);
}

static void test_checks_and_logprobs(void **st) {
  gt_err_t err = {0};
  sampler_params_t p = sampler_defaults();
  p.top_p = 0;
  assert_int_equal(sampler_check(&p, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "top_p"));
  p = sampler_defaults();
  p.temperature = -1;
  assert_int_equal(sampler_check(&p, &err), GT_EINVAL);
  p = sampler_defaults();
  p.repetition_penalty = 0;
  assert_int_equal(sampler_check(&p, &err), GT_EINVAL);
  float l[V];
  fill(l);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += exp(sampler_logprob(l, V, i));
  assert_true(fabs(sum - 1) < 1e-5);
  assert_true(fabs(sampler_logprob(l, V, 0) - log(0.5)) < 1e-5);
  int32_t ids[3];
  assert_int_equal(sampler_top_ids(l, V, 3, ids), 3);
  assert_int_equal(ids[0], 0);
  assert_int_equal(ids[1], 1);
  assert_int_equal(ids[2], 2);
}

/* sampler_mask_logits: clear bits -> -inf, set bits keep their logit; every filter then draws
 * only allowed ids (greedy, temperature, top-k, top-p, min-p), whatever the logits prefer. */
static void test_mask(void **st) {
  float l[70];
  uint32_t m[3] = {0x80000001u, 0xffffffffu, 0x20u}; /* ids 0, 31, 32..63, 69 */
  for (int i = 0; i < 70; i++) l[i] = (float)i;
  sampler_mask_logits(l, m, 70);
  for (int i = 0; i < 70; i++) {
    const int keep = i == 0 || i == 31 || (i >= 32 && i < 64) || i == 69;
    if (keep) assert_true(l[i] == (float)i);
    else assert_true(isinf(l[i]) && l[i] < 0);
  }
  const uint32_t only[1] = {(1u << 3) | (1u << 6)}; /* ids 3 and 6: the model prefers 0 */
  const float tops[][3] = {{0, 0, 1}, {1, 0, 1}, {1, 2, 1}, {1, 0, 0.5f}, {2, 0, 1}};
  for (size_t k = 0; k < sizeof tops / sizeof tops[0]; k++) {
    sampler_params_t p = sampler_defaults();
    p.temperature = tops[k][0];
    p.top_k = (int)tops[k][1];
    p.top_p = tops[k][2];
    p.min_p = k == 4 ? 0.1f : 0;
    p.seed = k;
    sampler_t *s = mk(p);
    int seen[V] = {0};
    for (int i = 0; i < 200; i++) {
      float x[V];
      fill(x);
      sampler_mask_logits(x, only, V);
      seen[sampler_sample(s, x)]++;
    }
    assert_int_equal(seen[3] + seen[6], 200);
    sampler_free(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy), cmocka_unit_test(test_temperature_distribution), cmocka_unit_test(test_filters),
      cmocka_unit_test(test_penalties), cmocka_unit_test(test_checks_and_logprobs), cmocka_unit_test(test_mask),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
