/* n > 1 in the scheduler (sched_req_t.n), on qwen3-tiny and the hybrid qwen35-tiny: the prompt
 * is computed once and forked; each choice equals a solo run with seed + index; cancelling or
 * finishing leaves no block referenced; bounds on n are GT_EINVAL; cancels are never lost; a
 * choice that finds no free KV block at the fork waits and resumes from the prefix cache.
 * Built twice: on the CPU backend (test_sched_fork) and, with SCHED_FORK_CUDA, on the CUDA
 * backend, whose kv_block_copy / state_copy the forks use (test_cuda_sched_fork; exit 77 without
 * a GPU). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/sched/sched.h"
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"
#ifdef SCHED_FORK_CUDA
#include "engine/backend/backend_cuda.h"
static int be_new(be_t **be, gt_err_t *err) { return be_cuda_create(0, be, err); }
#else
#define be_new tu_be_cpu2
#endif

#define MAXN 8
#define MAXT 64

typedef struct {
  int32_t ids[MAXN][MAXT];
  int n[MAXN];
  int finals[MAXN];
  sched_finish_t finish[MAXN];
  sched_usage_t usage[MAXN];
  int bad_index;
} outs_t;

static void on_event(void *ud, const sched_event_t *ev) {
  outs_t *o = ud;
  if (ev->index < 0 || ev->index >= MAXN) {
    o->bad_index++;
    return;
  }
  const int i = ev->index;
  if (ev->is_final) {
    o->finals[i]++;
    o->finish[i] = ev->finish;
    o->usage[i] = *ev->usage;
    return;
  }
  for (int k = 0; k < ev->delta->n_ids && o->n[i] < MAXT; k++) o->ids[i][o->n[i]++] = ev->delta->ids[k];
}

/* n choices of a 37-token prompt (2 full blocks of 16 + a partial one), sampled at
 * temperature 1 with the given seed, max_tokens tokens each. */
static sched_req_t make_req(int n, uint64_t seed, int max_tokens, outs_t *o) {
  sched_req_t r = {0};
  r.n_prompt = 37;
  r.prompt = malloc(sizeof(int32_t) * (size_t)r.n_prompt);
  for (int i = 0; i < r.n_prompt; i++) r.prompt[i] = (int32_t)((i * 29 + 11) % 1000);
  r.sampling = sampler_defaults();
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.ignore_eos = 1;
  r.logprobs = -1;
  r.n = n;
  r.on_event = on_event;
  r.ud = o;
  return r;
}

static void run_all(sched_t *s) { tu_sched_run_all(s, NULL); }

static sched_t *mk(model_t *m, const tok_t *tok, int max_seqs, int n_blocks) {
  sched_config_t c = {.max_num_seqs = max_seqs, .max_batch_tokens = 64, .n_blocks = n_blocks, .n_ctx = 512};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(m, tok, &c, &s, &err), 0);
  return s;
}

/* Choice i of o (T tokens) equals a solo run of seed + i on a fresh scheduler (so that no
 * prefix cache helps it). */
static void assert_equals_solo(model_t *m, const tok_t *tok, const outs_t *o, int i, uint64_t seed, int T) {
  static outs_t solo;
  memset(&solo, 0, sizeof solo);
  gt_err_t err = {0};
  sched_t *s = mk(m, tok, 8, 0);
  sched_req_t r = make_req(1, seed + (uint64_t)i, T, &solo);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  sched_free(s);
  assert_int_equal(solo.n[0], T);
  assert_memory_equal(o->ids[i], solo.ids[0], sizeof(int32_t) * T);
}

/* n = 4 in one request against 4 solo runs with seeds 100..103 (each on a fresh scheduler, so
 * that no prefix cache helps them). */
static void check_fork(model_t *m, const tok_t *tok) {
  enum { N = 4, T = 12 };
  static outs_t o;
  memset(&o, 0, sizeof o);
  gt_err_t err = {0};
  sched_t *s = mk(m, tok, 8, 0);
  sched_req_t r = make_req(N, 100, T, &o);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  sched_stats_t st;
  sched_stats(s, &st);
  /* one prefill: 37 prompt tokens once, then T - 1 decodes per choice (the last token is never fed) */
  assert_int_equal(st.computed_tokens, 37 + N * (T - 1));
  assert_int_equal(st.prompt_tokens, 37);
  assert_int_equal(st.kv_used, 0);
  assert_int_equal(st.running + st.waiting, 0);
  sched_free(s);
  assert_int_equal(o.bad_index, 0);
  int differ = 0;
  for (int i = 0; i < N; i++) {
    assert_int_equal(o.finals[i], 1);
    assert_int_equal(o.finish[i], SCHED_FINISH_LENGTH);
    assert_int_equal(o.n[i], T);
    assert_int_equal(o.usage[i].prompt_tokens, 37);
    assert_int_equal(o.usage[i].completion_tokens, T);
    assert_equals_solo(m, tok, &o, i, 100, T);
    if (i > 0) differ += memcmp(o.ids[i], o.ids[0], sizeof(int32_t) * T) != 0;
  }
  assert_true(differ > 0); /* different seeds: the choices are not all copies of choice 0 */
}

static void test_fork_equals_solo(void **state) {
  tu_model_fx_t *f = *state;
  check_fork(f->m, f->tok);
}

static void test_fork_hybrid(void **state) {
  (void)state;
  tu_model_fx_t h;
  gt_err_t err = {0};
  if (tu_model_fx_open(&h, "qwen35-tiny.bf16.gguf", be_new, &err)) fail_msg("qwen35-tiny: %s", err.msg);
  assert_true(h.m->hp.n_gdn_layers > 0);
  check_fork(h.m, h.tok); /* the forks copy the recurrent state slot */
  tu_model_fx_close(&h);
}

/* Cancelling mid-prompt (before the fork) and mid-decode (after it) ends every choice once and
 * leaves no block referenced. */
static void test_fork_cancel_no_leak(void **state) {
  tu_model_fx_t *f = *state;
  static outs_t a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  gt_err_t err = {0};
  sched_t *s = mk(f->m, f->tok, 8, 0);
  sched_req_t r = make_req(3, 1, 40, &a);
  r.n_prompt = 37;
  int64_t ida = sched_submit(s, &r, &err);
  assert_true(ida > 0);
  sched_cancel(s, ida); /* before its prompt ran: the choices never forked */
  r = make_req(5, 2, 40, &b);
  int64_t idb = sched_submit(s, &r, &err);
  assert_true(idb > 0);
  for (int i = 0; i < 4; i++) assert_true(sched_step(s, &err) > 0);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.running, 5); /* forked */
  sched_cancel(s, idb);
  sched_step(s, &err);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(a.finals[i], 1);
    assert_int_equal(a.finish[i], SCHED_FINISH_CANCELLED);
  }
  for (int i = 0; i < 5; i++) {
    assert_int_equal(b.finals[i], 1);
    assert_int_equal(b.finish[i], SCHED_FINISH_CANCELLED);
    assert_true(b.n[i] >= 1);
  }
  sched_stats(s, &st);
  assert_int_equal(st.running + st.waiting, 0);
  assert_int_equal(st.kv_used, 0);
  sched_free(s);
}

/* A pool of exactly the bound sched_submit checks: every choice grows to its end without
 * running out (the forks' partial-block copies included), equal to its solo run, nothing leaks. */
static void test_fork_small_pool(void **state) {
  tu_model_fx_t *f = *state;
  enum { N = 3, T = 20 };
  static outs_t o;
  memset(&o, 0, sizeof o);
  gt_err_t err = {0};
  /* need: 2 shared blocks + 3 * ceil((5 + 20) / 16) = 8 blocks */
  sched_t *s = mk(f->m, f->tok, 8, 8);
  sched_req_t r = make_req(N, 7, T, &o);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.kv_used, 0);
  sched_free(s);
  for (int i = 0; i < N; i++) {
    assert_int_equal(o.finals[i], 1);
    assert_int_equal(o.n[i], T);
    assert_equals_solo(f->m, f->tok, &o, i, 7, T);
  }
}

/* Cancels are marks on the requests, not a list that has to grow: thousands of cancels of
 * unknown and finished ids between two steps cost nothing and lose none of the real ones, which
 * reach a request still in the inbox (every choice), a running forked one and a queued one. */
static void test_cancel_storm(void **state) {
  tu_model_fx_t *f = *state;
  static outs_t o[4];
  memset(o, 0, sizeof o);
  gt_err_t err = {0};
  sched_t *s = mk(f->m, f->tok, 4, 0);
  int64_t id[4];
  sched_req_t r = make_req(2, 1, 30, &o[0]);
  assert_true((id[0] = sched_submit(s, &r, &err)) > 0);
  r = make_req(2, 2, 30, &o[1]);
  assert_true((id[1] = sched_submit(s, &r, &err)) > 0);
  for (int i = 0; i < 3; i++) assert_true(sched_step(s, &err) > 0); /* both forked, running */
  r = make_req(2, 3, 30, &o[2]); /* queued behind them (max_num_seqs 4) */
  assert_true((id[2] = sched_submit(s, &r, &err)) > 0);
  r = make_req(2, 4, 30, &o[3]); /* still in the inbox when cancelled */
  assert_true((id[3] = sched_submit(s, &r, &err)) > 0);
  for (int i = 0; i < 5000; i++) sched_cancel(s, 1000000 + i); /* never issued */
  sched_cancel(s, id[1]);
  sched_cancel(s, id[3]);
  sched_cancel(s, id[1]); /* twice */
  run_all(s);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.kv_used, 0);
  sched_free(s);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++) {
      assert_int_equal(o[k].finals[i], 1);
      const int cancelled = k == 1 || k == 3;
      assert_int_equal(o[k].finish[i], cancelled ? SCHED_FINISH_CANCELLED : SCHED_FINISH_LENGTH);
      if (!cancelled) assert_int_equal(o[k].n[i], 30);
    }
  assert_int_equal(o[3].n[0] + o[3].n[1], 0); /* cancelled before it ran */
}

/* The fork's fallback: the forking request's prompt completes in the step that also gives
 * another request's prompt the last free blocks, so its choices find no block for their copy of
 * the partial last block. They wait (keeping the first token they sampled from the fork's row)
 * and, once blocks are free, are admitted again and recompute from the prefix cache: each choice
 * still equals its solo run, every request ends once, nothing leaks.
 * Pool of 5 blocks of 16, 64 tokens per step: B (n = 3, 37 tokens: 3 blocks) is admitted first,
 * then A (32 tokens: the 2 blocks left); step 1 runs B's 37 and A's first 27 and forks B. */
static void test_fork_no_free_block_waits(void **state) {
  tu_model_fx_t *f = *state;
  enum { N = 3, T = 8, TA = 4 };
  static outs_t a, o;
  memset(&a, 0, sizeof a);
  memset(&o, 0, sizeof o);
  gt_err_t err = {0};
  sched_t *s = mk(f->m, f->tok, 8, 5);
  sched_req_t r = make_req(N, 7, T, &o);
  assert_true(sched_submit(s, &r, &err) > 0);
  sched_req_t ra = make_req(1, 1, TA, &a);
  free(ra.prompt);
  ra.n_prompt = 32;
  ra.prompt = malloc(sizeof(int32_t) * 32);
  for (int i = 0; i < 32; i++) ra.prompt[i] = (int32_t)(500 + i);
  assert_true(sched_submit(s, &ra, &err) > 0);
  run_all(s);
  sched_stats_t st;
  sched_stats(s, &st);
  print_message("fork waits %llu, prefix hits %llu tokens, computed %llu tokens, preemptions %llu\n",
                (unsigned long long)st.fork_waits, (unsigned long long)st.prefix_hit_tokens,
                (unsigned long long)st.computed_tokens, (unsigned long long)st.preemptions);
  assert_int_equal(st.fork_waits, N - 1); /* both forks found the pool full */
  /* the waiting choices were computed again from B's two full prompt blocks in the prefix
   * cache: only the 5 tokens of the partial block, then their T - 1 decodes (without the cache
   * each would recompute all 37) */
  assert_int_equal(st.preemptions, 0);
  assert_int_equal(st.computed_tokens, 37 + 32 + (T - 1) + (TA - 1) + (N - 1) * (5 + T - 1));
  assert_int_equal(st.kv_used, 0);
  assert_int_equal(st.running + st.waiting, 0);
  sched_free(s);
  assert_int_equal(a.finals[0], 1);
  assert_int_equal(a.n[0], TA);
  for (int i = 0; i < N; i++) {
    assert_int_equal(o.finals[i], 1);
    assert_int_equal(o.finish[i], SCHED_FINISH_LENGTH);
    assert_int_equal(o.n[i], T);
    assert_equals_solo(f->m, f->tok, &o, i, 7, T);
  }
}

static void test_fork_bounds(void **state) {
  tu_model_fx_t *f = *state;
  static outs_t o;
  gt_err_t err = {0};
  sched_t *s = mk(f->m, f->tok, 4, 0);
  sched_req_t r = make_req(5, 1, 4, &o); /* more than max_num_seqs */
  assert_int_equal(sched_submit(s, &r, &err), GT_EINVAL);
  assert_true(!strncmp(err.msg, "n ", 2));
  sched_free(s);
  s = mk(f->m, f->tok, 8, 6); /* 2 shared blocks + 4 * ceil((5 + 40) / 16) = 14 > 6 */
  r = make_req(4, 1, 40, &o);
  assert_int_equal(sched_submit(s, &r, &err), GT_EINVAL);
  assert_true(!strncmp(err.msg, "n ", 2));
  assert_non_null(strstr(err.msg, "14 KV blocks"));
  r = make_req(SCHED_MAX_N + 1, 1, 4, &o);
  assert_int_equal(sched_submit(s, &r, &err), GT_EINVAL);
  sched_free(s);
}

static int setup(void **state) { return tu_model_fx_setup_on(state, be_new); }
#define teardown tu_model_fx_teardown

int main(void) {
#ifdef SCHED_FORK_CUDA
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  /* batch-invariant products: these tests compare batched steps with single ones and the CPU */
  be_cuda_set_activations("fp32");
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fork_equals_solo),   cmocka_unit_test(test_fork_hybrid),
      cmocka_unit_test(test_fork_cancel_no_leak), cmocka_unit_test(test_fork_small_pool),
      cmocka_unit_test(test_fork_no_free_block_waits),
      cmocka_unit_test(test_cancel_storm),
      cmocka_unit_test(test_fork_bounds),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
