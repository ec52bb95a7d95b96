/* The backend `sample` op on the CPU backend (engine/backend/backend.h): the same ids as sampler_sample
 * for random logits, parameters and seeds; and the scheduler and gen paths that use it give the
 * tokens of the host path (ops->sample NULLed through a copy of the ops table). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/models/gen.h"
#include "format/gguf.h"
#include "engine/models/model.h"
#include "engine/backend/sampler.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

/* Random logits with exact ties, -inf entries and a few large values. */
static void fill_logits(float *l, int V, float scale) {
  for (int i = 0; i < V; i++) {
    double r = urand();
    l[i] = (float)((urand() * 2 - 1) * scale);
    if (r < 0.05) l[i] = floorf(l[i]); /* ties */
    else if (r < 0.06) l[i] = -INFINITY;
  }
  if (urand() < 0.3) l[(int)(urand() * V)] = scale * 4; /* a dominant token */
}

static sampler_params_t rand_params(void) {
  sampler_params_t p = sampler_defaults();
  double r = urand();
  p.temperature = r < 0.15 ? 0 : (float)(0.05 + 2.5 * urand());
  if (urand() < 0.5) p.top_k = urand() < 0.1 ? 1 : (int)(urand() * 100);
  if (urand() < 0.5) p.top_p = (float)(0.05 + 0.95 * urand());
  if (urand() < 0.4) p.min_p = (float)(0.3 * urand());
  p.seed = g_rng;
  return p;
}

static void test_cpu_op_matches_sampler(void **st) {
  gt_err_t err = {0};
  be_t *be = NULL;
  assert_int_equal(be_cpu_create(1, &be, &err), 0);
  assert_non_null(be->ops->sample);
  const int vocabs[3] = {7, 1000, 30000};
  long n_checked = 0;
  for (int trial = 0; trial < 90; trial++) {
    const int V = vocabs[trial % 3], n_rows = 1 + trial % 9, steps = 4;
    float *logits = malloc(sizeof(float) * (size_t)n_rows * V), *row = malloc(sizeof(float) * (size_t)V);
    sampler_t *ref[9], *drw[9]; /* reference samplers, and twins that only draw u */
    be_sample_row_t rows[9];
    for (int r = 0; r < n_rows; r++) {
      sampler_params_t p = rand_params();
      assert_int_equal(sampler_create(&p, V, &ref[r], &err), 0);
      assert_int_equal(sampler_create(&p, V, &drw[r], &err), 0);
      rows[r] = (be_sample_row_t){.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p};
    }
    float *dev = be->ops->alloc(be, sizeof(float) * (size_t)n_rows * V);
    assert_non_null(dev);
    for (int s = 0; s < steps; s++) {
      fill_logits(logits, n_rows * V, (float)(1 + 20 * urand()));
      assert_int_equal(be->ops->upload(be, dev, logits, sizeof(float) * (size_t)n_rows * V), 0);
      int32_t ids[9];
      for (int r = 0; r < n_rows; r++) rows[r].u = sampler_next_u(drw[r]);
      assert_int_equal(be->ops->sample(be, dev, n_rows, V, rows, ids), 0);
      for (int r = 0; r < n_rows; r++) {
        memcpy(row, logits + (size_t)r * V, sizeof(float) * (size_t)V);
        assert_int_equal(ids[r], sampler_sample(ref[r], row));
        n_checked++;
      }
    }
    for (int r = 0; r < n_rows; r++) {
      sampler_free(ref[r]);
      sampler_free(drw[r]);
    }
    be->ops->free(be, dev);
    free(logits);
    free(row);
  }
  print_message("sample op == sampler_sample on %ld rows\n", n_checked);
  be_destroy(be);
}

/* ---- the scheduler and gen paths (qwen3-tiny on the CPU backend) ---- */

typedef tu_model_fx_t fx_t; /* tests/common/model_fx.h */

/* ops tables the tests swap in: the CPU's with `sample` counted, and with `sample` NULL */
static const be_ops_t *g_cpu_ops;
static long g_sample_calls;
static int counting_sample(be_t *be, const float *logits, int n_rows, int n_vocab, const be_sample_row_t *rows,
                           int32_t *ids) {
  g_sample_calls++;
  return g_cpu_ops->sample(be, logits, n_rows, n_vocab, rows, ids);
}

#define N_REQ 6
#define MAX_GEN 20

typedef struct {
  int32_t ids[MAX_GEN];
  int n, finals;
} out_t;

static void on_event(void *ud, const sched_event_t *ev) {
  out_t *o = ud;
  if (ev->is_final) {
    o->finals++;
    return;
  }
  for (int i = 0; i < ev->delta->n_ids && o->n < MAX_GEN; i++) o->ids[o->n++] = ev->delta->ids[i];
}

/* Runs N_REQ stochastic requests (and, with_penalty, one more with a repetition penalty, which
 * forces the host path for the steps it takes part in) to completion. */
static void run_sched(fx_t *f, out_t *out, int with_penalty) {
  sched_config_t c = {.max_num_seqs = 8, .max_batch_tokens = 64, .n_ctx = 1024};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  memset(out, 0, sizeof(out_t) * (N_REQ + 1));
  for (int k = 0; k < N_REQ + with_penalty; k++) {
    sched_req_t r = {0};
    r.n_prompt = 5 + 7 * k;
    r.prompt = malloc(sizeof(int32_t) * (size_t)r.n_prompt);
    for (int i = 0; i < r.n_prompt; i++) r.prompt[i] = (int32_t)((k * 131 + i * 17 + 7) % 1000);
    r.sampling = sampler_defaults();
    r.sampling.temperature = k == 0 ? 0 : 0.7f + 0.2f * (float)k;
    r.sampling.top_k = k == 2 ? 40 : 0;
    r.sampling.top_p = k == 3 || k == 5 ? 0.9f : 1;
    r.sampling.min_p = k == 4 || k == 5 ? 0.05f : 0;
    r.sampling.seed = 1000 + (uint64_t)k;
    if (k == N_REQ) r.sampling.repetition_penalty = 1.3f;
    r.max_tokens = MAX_GEN - 4 * (k % 2); /* different lengths: the batch changes over time */
    r.ignore_eos = 1;
    r.logprobs = -1;
    r.on_event = on_event;
    r.ud = &out[k];
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  tu_sched_run_all(s, NULL); /* fails the test if it does not go idle */
  sched_free(s);
  for (int k = 0; k < N_REQ + with_penalty; k++) {
    assert_int_equal(out[k].finals, 1);
    assert_int_equal(out[k].n, MAX_GEN - 4 * (k % 2));
  }
}

static void test_sched_device_path(void **state) {
  fx_t *f = *state;
  static out_t dev[N_REQ + 1], host[N_REQ + 1], mixed[N_REQ + 1];
  g_cpu_ops = f->be->ops;
  be_ops_t counted = *g_cpu_ops, none = *g_cpu_ops;
  counted.sample = counting_sample;
  none.sample = NULL;

  f->be->ops = &counted;
  g_sample_calls = 0;
  run_sched(f, dev, 0);
  const long dev_calls = g_sample_calls;
  g_sample_calls = 0;
  run_sched(f, mixed, 1);
  const long mixed_calls = g_sample_calls;
  f->be->ops = &none;
  run_sched(f, host, 0);
  f->be->ops = g_cpu_ops;

  assert_true(dev_calls >= MAX_GEN); /* every step sampled on the backend */
  assert_true(mixed_calls < dev_calls); /* steps with the penalised request took the host path */
  for (int k = 0; k < N_REQ; k++) {
    assert_memory_equal(dev[k].ids, host[k].ids, sizeof(int32_t) * (size_t)dev[k].n);
    assert_memory_equal(mixed[k].ids, host[k].ids, sizeof(int32_t) * (size_t)dev[k].n);
  }
  print_message("sched: %ld device-sampled steps; tokens equal to the host path\n", dev_calls);
}

/* gen_feed_sample + sampler_next_u gives the tokens of gen_feed + sampler_sample. */
static void test_gen_device_path(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  const int V = f->m->hp.n_vocab, n_gen = 12;
  int32_t prompt[9] = {11, 22, 33, 44, 55, 66, 77, 88, 99}, a[12], b[12];
  sampler_params_t p = sampler_defaults();
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.min_p = 0.02f;
  p.seed = 5;
  float *logits = malloc(sizeof(float) * (size_t)V);
  for (int pass = 0; pass < 2; pass++) {
    gen_t *g = NULL;
    sampler_t *s = NULL;
    int32_t *out = pass ? b : a;
    assert_int_equal(gen_create(f->m, 64, &g, &err), 0);
    assert_int_equal(sampler_create(&p, V, &s, &err), 0);
    be_sample_row_t row = {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p};
    const int32_t *feed = prompt;
    int n_feed = 9;
    for (int i = 0; i < n_gen; i++) {
      if (pass == 0) {
        assert_int_equal(gen_feed(g, feed, n_feed, 0, NULL, logits, &err), 0);
        out[i] = sampler_sample(s, logits);
      } else {
        row.u = sampler_next_u(s);
        assert_int_equal(gen_feed_sample(g, feed, n_feed, 0, &row, &out[i], &err), 0);
      }
      feed = &out[i];
      n_feed = 1;
    }
    sampler_free(s);
    gen_free(g);
  }
  assert_memory_equal(a, b, sizeof a);
  free(logits);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpu_op_matches_sampler),
      cmocka_unit_test_setup_teardown(test_sched_device_path, tu_model_fx_setup, tu_model_fx_teardown),
      cmocka_unit_test_setup_teardown(test_gen_device_path, tu_model_fx_setup, tu_model_fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
