#include "tests/common/gen_run.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "engine/models/gen.h"
#include "tests/common/testutil.h"

void tu_gen_prompt(int32_t *ids, int n, int V) {
  for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
}

float *tu_gen_greedy(model_t *m, int n_ctx, int n_prompt, int chunk, int n_greedy, int32_t *greedy) {
  const int V = m->hp.n_vocab;
  gen_t *gen;
  gt_err_t err = {0};
  if (gen_create(m, n_ctx, &gen, &err)) fail_msg("gen_create: %s", err.msg);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
  float *logits = malloc(sizeof(float) * (size_t)n_prompt * V);
  float *last = malloc(sizeof(float) * (size_t)V);
  assert_non_null(ids);
  assert_non_null(logits);
  assert_non_null(last);
  tu_gen_prompt(ids, n_prompt, V);
  if (gen_feed(gen, ids, n_prompt, chunk, logits, NULL, &err)) fail_msg("gen_feed: %s", err.msg);
  int32_t t = tu_argmax(logits + (size_t)(n_prompt - 1) * V, V);
  for (int i = 0; i < n_greedy; i++) {
    greedy[i] = t;
    if (gen_feed(gen, &t, 1, 0, NULL, last, &err)) fail_msg("gen_feed (decode): %s", err.msg);
    t = tu_argmax(last, V);
  }
  free(ids);
  free(last);
  gen_free(gen);
  return logits;
}
