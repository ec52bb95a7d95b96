/* Per-request output parameters at the engine level (qwen3-tiny bf16): logit_bias
 * (+100 forces a token, -100 bans it, logprobs stay raw, bad values are refused),
 * stop_token_ids (the output ends at the first one, finish STOP), and in the output pipeline
 * (seqout) skip_special_tokens (keep_special) and include_stop_str_in_output (include_stop), and
 * that a stream of tool calls does not keep every call's id and name until it ends.
 * Built twice: on the CPU backend (test_sched_params) and, with SCHED_PARAMS_CUDA, on the CUDA
 * backend, whose device sampler hands biased rows to the host sampler (test_cuda_sched_params;
 * exit 77 = skipped without a GPU). */
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sched/sched.h"
#include "engine/sched/seqout.h"
#include "format/tokenizer.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"
#ifdef SCHED_PARAMS_CUDA
#include "engine/backend/backend_cuda.h"
#endif

#define MAX_OUT 64

typedef struct {
  int32_t ids[MAX_OUT];
  int n;
  int finals;
  sched_finish_t finish;
  float lps[MAX_OUT]; /* the chosen token's logprob, when requested */
  seqout_logprob_t top[MAX_OUT]; /* with its top ids */
  int n_lps;
} out_t;

typedef tu_model_fx_t fx_t;

static void on_event(void *ud, const sched_event_t *ev) {
  out_t *o = ud;
  if (ev->is_final) {
    o->finals++;
    o->finish = ev->finish;
    return;
  }
  for (int i = 0; i < ev->delta->n_ids && o->n < MAX_OUT; i++) o->ids[o->n++] = ev->delta->ids[i];
  for (int i = 0; i < ev->delta->n_lps && o->n_lps < MAX_OUT; i++) {
    o->top[o->n_lps] = ev->delta->lps[i];
    o->lps[o->n_lps++] = ev->delta->lps[i].logprob;
  }
}

/* Runs one request of a fixed 12-token prompt with sampling sp and the given bias / stop ids to
 * completion on a fresh scheduler; fills *o. Returns sched_submit's result. */
static int64_t run(fx_t *f, sampler_params_t sp, int max_tokens, const int32_t *bias_ids, const float *bias_vals,
                   int n_bias, const int32_t *stop_ids, int n_stop_ids, int logprobs, out_t *o, gt_err_t *err) {
  sched_config_t c = {.max_num_seqs = 2, .max_batch_tokens = 64, .n_ctx = 512};
  sched_t *s = NULL;
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, err), 0);
  memset(o, 0, sizeof *o);
  sched_req_t r = {0};
  r.prompt = malloc(sizeof(int32_t) * 12);
  for (int i = 0; i < 12; i++) r.prompt[i] = (int32_t)(100 + i * 37);
  r.n_prompt = 12;
  r.sampling = sp;
  r.max_tokens = max_tokens;
  r.ignore_eos = 1;
  r.logprobs = logprobs;
  r.bias_ids = bias_ids;
  r.bias_vals = bias_vals;
  r.n_bias = n_bias;
  r.stop_ids = stop_ids;
  r.n_stop_ids = n_stop_ids;
  r.on_event = on_event;
  r.ud = o;
  int64_t id = sched_submit(s, &r, err);
  if (id < 0) free(r.prompt);
  if (id > 0) tu_sched_run_all(s, NULL); /* fails the test if it does not go idle */
  sched_free(s);
  return id;
}

static int contains(const int32_t *a, int n, int32_t x) {
  for (int i = 0; i < n; i++)
    if (a[i] == x) return 1;
  return 0;
}

static void test_logit_bias(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  static out_t base, o;
  sampler_params_t greedy = sampler_defaults();
  assert_true(run(f, greedy, 8, NULL, NULL, 0, NULL, 0, 0, &base, &err) > 0);
  assert_int_equal(base.n, 8);

  /* +100 forces a token that greedy decoding does not pick, at temperature 0 and 1 */
  int32_t x = (int32_t)(tok_n_vocab(f->tok) / 2);
  while (contains(base.ids, base.n, x)) x++;
  float plus = 100;
  assert_true(run(f, greedy, 8, &x, &plus, 1, NULL, 0, 0, &o, &err) > 0);
  for (int i = 0; i < 8; i++) assert_int_equal(o.ids[i], x);
  /* logprobs are of the raw logits: the forced token is not likely before the bias */
  assert_int_equal(o.n_lps, 8);
  assert_true(o.lps[0] < logf(0.5f));
  sampler_params_t hot = sampler_defaults();
  hot.temperature = 1.0f;
  hot.seed = 7;
  assert_true(run(f, hot, 8, &x, &plus, 1, NULL, 0, -1, &o, &err) > 0);
  for (int i = 0; i < 8; i++) assert_int_equal(o.ids[i], x);

  /* -100 bans: every token of the unbiased greedy output banned -> none of them appears */
  int32_t ban[8];
  float minus[8];
  for (int i = 0; i < 8; i++) {
    ban[i] = base.ids[i];
    minus[i] = -100;
  }
  assert_true(run(f, greedy, 8, ban, minus, 8, NULL, 0, -1, &o, &err) > 0);
  assert_int_equal(o.n, 8);
  for (int i = 0; i < 8; i++) assert_false(contains(ban, 8, o.ids[i]));

  /* bad values: an id outside the vocabulary, a bias beyond 100 */
  int32_t bad = 1 << 30;
  assert_int_equal(run(f, greedy, 8, &bad, &plus, 1, NULL, 0, -1, &o, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "logit_bias"));
  float big = 101;
  assert_int_equal(run(f, greedy, 8, &x, &big, 1, NULL, 0, -1, &o, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "logit_bias"));
  /* the one range check of a bias (the server passes it through): below -100 and NaN too */
  float out_of_range[2] = {-100.5f, NAN};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(run(f, greedy, 8, &x, &out_of_range[i], 1, NULL, 0, -1, &o, &err), GT_EINVAL);
    assert_non_null(strstr(err.msg, "must be in [-100, 100]"));
    assert_string_equal(err.param, "logit_bias");
  }
}

/* A biased request moves its whole batch to the host sampler; an unbiased, sampled neighbour
 * gets the same tokens as when it runs alone (on the backend's `sample` op). */
/* Top logprobs (greedy): the chosen id first with its own logprob, then descending, all of one
 * distribution (their probabilities sum to at most 1). */
static void test_top_logprobs(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  static out_t o;
  assert_true(run(f, sampler_defaults(), 8, NULL, NULL, 0, NULL, 0, 5, &o, &err) > 0);
  assert_int_equal(o.n_lps, 8);
  for (int i = 0; i < 8; i++) {
    const seqout_logprob_t *lp = &o.top[i];
    assert_int_equal(lp->id, o.ids[i]);
    assert_int_equal(lp->n_top, 5);
    assert_int_equal(lp->top_ids[0], o.ids[i]);
    assert_true(lp->top_lps[0] == lp->logprob);
    double sum = 0;
    for (int k = 0; k < 5; k++) {
      assert_true(lp->top_lps[k] <= 0);
      if (k > 0) assert_true(lp->top_lps[k] <= lp->top_lps[k - 1]);
      if (k > 0) assert_int_not_equal(lp->top_ids[k], lp->top_ids[0]);
      sum += exp(lp->top_lps[k]);
    }
    assert_true(sum <= 1.0 + 1e-6);
  }
}

static void test_logit_bias_batch(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  static out_t alone, a, b;
  sampler_params_t hot = sampler_defaults();
  hot.temperature = 1.0f;
  hot.seed = 11;
  assert_true(run(f, hot, 12, NULL, NULL, 0, NULL, 0, -1, &alone, &err) > 0);
  assert_int_equal(alone.n, 12);
  sched_config_t c = {.max_num_seqs = 2, .max_batch_tokens = 64, .n_ctx = 512};
  sched_t *s = NULL;
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  int32_t x = (int32_t)(tok_n_vocab(f->tok) / 3);
  float plus = 100;
  for (int k = 0; k < 2; k++) {
    sched_req_t r = {0};
    r.prompt = malloc(sizeof(int32_t) * 12);
    for (int i = 0; i < 12; i++) r.prompt[i] = (int32_t)(100 + i * 37);
    r.n_prompt = 12;
    r.sampling = hot;
    r.max_tokens = 12;
    r.ignore_eos = 1;
    r.logprobs = -1;
    if (k == 1) {
      r.bias_ids = &x;
      r.bias_vals = &plus;
      r.n_bias = 1;
    }
    r.on_event = on_event;
    r.ud = k ? &b : &a;
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  tu_sched_run_all(s, NULL);
  sched_free(s);
  assert_int_equal(a.n, 12);
  assert_memory_equal(a.ids, alone.ids, sizeof(int32_t) * 12);
  for (int i = 0; i < 12; i++) assert_int_equal(b.ids[i], x);
}

static void test_stop_token_ids(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  static out_t base, o;
  sampler_params_t greedy = sampler_defaults();
  assert_true(run(f, greedy, 10, NULL, NULL, 0, NULL, 0, -1, &base, &err) > 0);
  assert_int_equal(base.finish, SCHED_FINISH_LENGTH);
  int first = 0; /* the first position whose token did not occur before it */
  for (int i = 3; i < base.n && !first; i++)
    if (!contains(base.ids, i, base.ids[i])) first = i;
  assert_true(first > 0);
  int32_t stop[2] = {999999, base.ids[first]};
  assert_true(run(f, greedy, 10, NULL, NULL, 0, stop, 2, -1, &o, &err) > 0);
  assert_int_equal(o.finish, SCHED_FINISH_STOP);
  assert_int_equal(o.n, first + 1); /* the stop id is the last id of the output */
  assert_memory_equal(o.ids, base.ids, sizeof(int32_t) * (size_t)o.n);
}

/* Feeds the ids of text (TOK_SPECIAL) through a seqout with cfg and returns its whole content. */
static char *seqout_text(fx_t *f, const char *text, seqout_config_t *cfg, int *stopped) {
  gt_err_t err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  assert_int_equal(tok_encode(f->tok, text, strlen(text), TOK_SPECIAL, &ids, &n, &err), GT_OK);
  seqout_t *o = NULL;
  assert_int_equal(seqout_create(f->tok, cfg, &o, &err), GT_OK);
  size_t cap = 256, len = 0;
  char *out = calloc(1, cap);
  *stopped = 0;
  for (size_t i = 0; i <= n && !*stopped; i++) {
    int rc = i < n ? seqout_push(o, ids[i], 1, &err) : 0;
    assert_true(rc >= 0);
    if (rc == 1 || i == n) assert_int_equal(seqout_finish(o, &err), GT_OK);
    *stopped = rc == 1;
    const seqout_delta_t *d = seqout_take(o);
    assert_true(len + d->text_len < cap);
    memcpy(out + len, d->text, d->text_len);
    len += d->text_len;
  }
  seqout_free(o);
  free(ids);
  return out;
}

static void test_special_tokens_and_stop_string(void **state) {
  fx_t *f = *state;
  int stopped;
  const char *text = "hello<|im_end|> world END tail";
  seqout_config_t c = {0};
  char *t = seqout_text(f, text, &c, &stopped);
  assert_string_equal(t, "hello world END tail"); /* skip_special_tokens (default): dropped */
  free(t);
  c.keep_special = 1;
  t = seqout_text(f, text, &c, &stopped);
  assert_string_equal(t, text);
  free(t);

  const char *stops[] = {"END"};
  c = (seqout_config_t){.stop = stops, .n_stop = 1};
  t = seqout_text(f, text, &c, &stopped);
  assert_true(stopped);
  assert_string_equal(t, "hello world "); /* the stop string is cut (default) */
  free(t);
  c.include_stop = 1;
  t = seqout_text(f, text, &c, &stopped);
  assert_true(stopped);
  assert_string_equal(t, "hello world END"); /* include_stop_str_in_output: kept, nothing after */
  free(t);
}

/* 3000 tool calls through one seqout, a take after every token (as the scheduler does): the
 * calls' ids and names are freed once the delta that carried them was taken, not kept until the
 * sequence ends. Heap growth is measured between call 500 and call 3000 (not under ASan, whose
 * allocator mallinfo does not see; there the test checks that every taken id stays readable). */
static void test_tool_call_strings_freed(void **state) {
  fx_t *f = *state;
  gt_err_t err = {0};
  const char *call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n";
  int32_t *ids = NULL;
  size_t n = 0;
  assert_int_equal(tok_encode(f->tok, call, strlen(call), TOK_SPECIAL, &ids, &n, &err), GT_OK);
  /* keep_special: the fixture's vocabulary marks <tool_call> as a control token */
  seqout_config_t c = {.parse_output = 1, .parse_tool_calls = 1, .id_seed = 7, .keep_special = 1};
  seqout_t *o = NULL;
  assert_int_equal(seqout_create(f->tok, &c, &o, &err), GT_OK);
  int calls = 0;
  size_t heap500 = 0, heap3000 = 0;
  for (int k = 0; k < 3000; k++) {
    for (size_t i = 0; i < n; i++) {
      assert_true(seqout_push(o, ids[i], 1, &err) >= 0);
      const seqout_delta_t *d = seqout_take(o);
      for (int t = 0; t < d->n_tools; t++)
        if (d->tools[t].id) {
          assert_true(strlen(d->tools[t].id) > 0); /* readable until the next take */
          assert_string_equal(d->tools[t].name, "get_weather");
          calls++;
        }
    }
    if (k == 499) heap500 = mallinfo2().uordblks;
  }
  heap3000 = mallinfo2().uordblks;
  assert_int_equal(calls, 3000);
  print_message("heap in use grew by %lld bytes over 2500 tool calls\n", (long long)heap3000 - (long long)heap500);
#ifndef __SANITIZE_ADDRESS__
  assert_true(heap3000 < heap500 + 16384); /* before: ~2 strings and 2 pointers per call (> 100 KB) */
#endif
  seqout_free(o);
  free(ids);
}

#ifdef SCHED_PARAMS_CUDA
static int cuda_be(be_t **be, gt_err_t *err) { return be_cuda_create(0, be, err); }
static int setup(void **state) { return tu_model_fx_setup_on(state, cuda_be); }
#else
#define setup tu_model_fx_setup
#endif
#define teardown tu_model_fx_teardown

int main(void) {
#ifdef SCHED_PARAMS_CUDA
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  /* batch-invariant products: these tests compare batched steps with single ones and the CPU */
  be_cuda_set_activations("fp32");
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_logit_bias),
      cmocka_unit_test(test_logit_bias_batch),
      cmocka_unit_test(test_top_logprobs),
      cmocka_unit_test(test_stop_token_ids),
      cmocka_unit_test(test_special_tokens_and_stop_string),
      cmocka_unit_test(test_tool_call_strings_freed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
