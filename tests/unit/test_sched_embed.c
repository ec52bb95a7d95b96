/* The scheduler as an embedding engine (sched_config_t.embed) on the CPU backend with qwen3-tiny:
 * - several prompts (one longer than a step: chunked) are batched into shared steps, and each
 *   final event carries the last token's hidden state, equal to gen_feed_hidden on the prompt
 *   alone (max relative error <= 1e-5: rows are computed independently);
 * - a repeated prompt hits the prefix cache and still gives the same embedding;
 * - generation parameters an embedding cannot take are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/models/gen.h"
#include "engine/sched/sched.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"

#define NP 4
static const int k_len[NP] = {5, 23, 40, 70}; /* 70 > 64 tokens per step: two chunks */

typedef struct {
  float emb[1024];
  int n_embd, finals, cached;
  sched_finish_t finish;
} got_t;

static void on_event(void *ud, const sched_event_t *ev) {
  got_t *g = ud;
  assert_true(ev->is_final); /* an embedding request emits no delta */
  g->finals++;
  g->finish = ev->finish;
  g->cached = ev->usage->cached_tokens;
  assert_int_equal(ev->usage->completion_tokens, 0);
  if (ev->embedding) {
    g->n_embd = ev->n_embd;
    memcpy(g->emb, ev->embedding, sizeof(float) * (size_t)ev->n_embd);
  }
}

static int32_t *prompt(int k, int n) {
  int32_t *p = malloc(sizeof *p * (size_t)n);
  for (int i = 0; i < n; i++) p[i] = (int32_t)((k * 131 + i * 17 + 7) % 1000);
  return p;
}

static sched_req_t embed_req(int k, got_t *g) {
  sched_req_t r = {0};
  r.prompt = prompt(k, k_len[k]);
  r.n_prompt = k_len[k];
  r.sampling = sampler_defaults();
  r.max_tokens = 1;
  r.logprobs = -1;
  r.on_event = on_event;
  r.ud = g;
  return r;
}

static void test_embed_batched(void **state) {
  tu_model_fx_t *f = *state;
  const int d = f->m->hp.n_embd;
  assert_true(d <= 1024);
  float ref[NP][1024];
  gt_err_t err = {0};
  gen_t *gen = NULL;
  assert_int_equal(gen_create(f->m, 128, &gen, &err), 0);
  for (int k = 0; k < NP; k++) {
    int32_t *p = prompt(k, k_len[k]);
    gen_reset(gen);
    assert_int_equal(gen_feed_hidden(gen, p, k_len[k], 0, ref[k], &err), 0);
    free(p);
  }
  gen_free(gen);

  sched_config_t cfg = {.max_num_seqs = 8, .max_batch_tokens = 64, .n_blocks = 64, .embed = 1};
  sched_t *s = NULL;
  assert_int_equal(sched_create(f->m, f->tok, &cfg, &s, &err), 0);
  got_t got[NP + 1];
  memset(got, 0, sizeof got);
  for (int k = 0; k < NP; k++) {
    sched_req_t r = embed_req(k, &got[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  int64_t steps = 0;
  tu_sched_run_all(s, &steps);
  /* 138 tokens at 64 per step: 3 shared steps; one prompt per step would take 5 */
  printf("embed: %d prompts (%d..%d tokens) in %lld steps\n", NP, k_len[0], k_len[NP - 1], (long long)steps);
  assert_int_equal(steps, 3);
  for (int k = 0; k < NP; k++) {
    assert_int_equal(got[k].finals, 1);
    assert_int_equal(got[k].finish, SCHED_FINISH_STOP);
    assert_int_equal(got[k].n_embd, d);
    const double e = tu_max_row_rel_err(got[k].emb, ref[k], 1, d);
    printf("  prompt %d: rel err %.3g vs gen_feed_hidden\n", k, e);
    assert_true(e <= 1e-5);
  }
  /* the same prompt again: prefix-cached blocks, same embedding */
  sched_req_t r = embed_req(2, &got[NP]);
  assert_true(sched_submit(s, &r, &err) > 0);
  tu_sched_run_all(s, NULL);
  assert_int_equal(got[NP].finals, 1);
  assert_true(got[NP].cached > 0);
  assert_true(tu_max_row_rel_err(got[NP].emb, ref[2], 1, d) <= 1e-5);

  /* generation parameters are refused, the prompt freed */
  got_t bad = {0};
  r = embed_req(0, &bad);
  r.max_tokens = 2;
  assert_true(sched_submit(s, &r, &err) == GT_EINVAL);
  assert_non_null(strstr(err.msg, "embedding engine"));
  r = embed_req(0, &bad);
  r.n = 2;
  assert_true(sched_submit(s, &r, &err) == GT_EINVAL);
  assert_int_equal(bad.finals, 0);
  sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_embed_batched, tu_model_fx_setup, tu_model_fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
