/* Scheduler tests on the CPU backend with qwen3-tiny (bf16): batch invariance, preemption by
 * recompute, prefix caching, chunked prefill interleaving with decode, cancellation, errors,
 * and the start-up warm-up (also on the hybrid qwen35-tiny). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "engine/models/model.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"

typedef struct {
  int32_t ids[512];
  int n;
  int finals;
  sched_finish_t finish;
  sched_usage_t usage;
  int deltas;
  int64_t step_of_delta[512]; /* steps counter when each delta arrived */
} out_t;

typedef tu_model_fx_t fx_t; /* tests/common/model_fx.h */

static int64_t g_steps;

static void on_event(void *ud, const sched_event_t *ev) {
  out_t *o = ud;
  if (ev->is_final) {
    o->finals++;
    o->finish = ev->finish;
    o->usage = *ev->usage;
    return;
  }
  for (int i = 0; i < ev->delta->n_ids && o->n < 512; i++) o->ids[o->n++] = ev->delta->ids[i];
  if (o->deltas < 512) o->step_of_delta[o->deltas] = g_steps;
  o->deltas++;
}

/* A request of n_prompt deterministic ids (seeded by k), greedy, fixed length. */
static sched_req_t make_req(int k, int n_prompt, int max_tokens, out_t *o) {
  sched_req_t r = {0};
  r.prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
  for (int i = 0; i < n_prompt; i++) r.prompt[i] = (int32_t)((k * 131 + i * 17 + 7) % 1000);
  r.n_prompt = n_prompt;
  r.sampling = sampler_defaults();
  r.max_tokens = max_tokens;
  r.ignore_eos = 1;
  r.logprobs = -1;
  r.on_event = on_event;
  r.ud = o;
  return r;
}

static void run_all(sched_t *s) { tu_sched_run_all(s, &g_steps); }

static sched_t *mk(fx_t *f, int max_seqs, int max_batch, int n_blocks) {
  sched_config_t c = {.max_num_seqs = max_seqs, .max_batch_tokens = max_batch, .n_blocks = n_blocks, .n_ctx = 2048};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  return s;
}

static void test_batch_invariance(void **state) {
  fx_t *f = *state;
  static out_t solo, mixed[8];
  memset(&solo, 0, sizeof solo);
  memset(mixed, 0, sizeof mixed);
  gt_err_t err = {0};
  sched_t *s = mk(f, 8, 64, 0);
  sched_req_t r = make_req(0, 20, 24, &solo);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  assert_int_equal(solo.finals, 1);
  assert_int_equal(solo.n, 24);
  assert_int_equal(solo.finish, SCHED_FINISH_LENGTH);
  /* the same request among 7 others with other prompts, lengths and sampling */
  for (int k = 0; k < 8; k++) {
    sched_req_t q = make_req(k, k == 0 ? 20 : 5 + 9 * k, 24 + k, &mixed[k]);
    if (k % 2) {
      q.sampling.temperature = 0.8f;
      q.sampling.top_p = 0.9f;
      q.sampling.seed = (uint64_t)k;
    }
    assert_true(sched_submit(s, &q, &err) > 0);
  }
  run_all(s);
  for (int k = 0; k < 8; k++) assert_int_equal(mixed[k].finals, 1);
  assert_int_equal(mixed[0].n, 24);
  assert_memory_equal(mixed[0].ids, solo.ids, sizeof(int32_t) * 24);
  sched_free(s);
}

static void test_preemption(void **state) {
  fx_t *f = *state;
  static out_t solo[4], both[4];
  memset(solo, 0, sizeof solo);
  memset(both, 0, sizeof both);
  gt_err_t err = {0};
  /* 4 requests of 30 + 40 tokens = 5 blocks each; a pool of 12 blocks holds two at a time */
  sched_t *s = mk(f, 4, 64, 12);
  for (int k = 0; k < 4; k++) {
    sched_req_t r = make_req(10 + k, 30, 40, &solo[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
    run_all(s);
  }
  sched_stats_t st0;
  sched_stats(s, &st0);
  for (int k = 0; k < 4; k++) {
    sched_req_t r = make_req(10 + k, 30, 40, &both[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  run_all(s);
  sched_stats_t st;
  sched_stats(s, &st);
  printf("preemptions: %llu\n", (unsigned long long)(st.preemptions - st0.preemptions));
  assert_true(st.preemptions > st0.preemptions);
  for (int k = 0; k < 4; k++) {
    assert_int_equal(both[k].finals, 1);
    assert_int_equal(both[k].finish, SCHED_FINISH_LENGTH);
    assert_int_equal(both[k].n, 40);
    assert_memory_equal(both[k].ids, solo[k].ids, sizeof(int32_t) * 40);
  }
  assert_int_equal(st.kv_used, 0);
  sched_free(s);
}

static void test_prefix_cache(void **state) {
  fx_t *f = *state;
  static out_t a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  gt_err_t err = {0};
  sched_t *s = mk(f, 4, 64, 0);
  sched_req_t r = make_req(3, 40, 8, &a);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  r = make_req(3, 40, 8, &b);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  assert_int_equal(a.usage.cached_tokens, 0);
  assert_int_equal(b.usage.cached_tokens, 32); /* two full blocks; the last token is always computed */
  assert_memory_equal(a.ids, b.ids, sizeof(int32_t) * 8);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.prefix_hit_tokens, 32);
  sched_free(s);
}

/* Hybrid prefix caching keeps a state snapshot per prompt in 2 x max_num_seqs slots. With
 * max_num_seqs 1 (two slots) and a pool with room for everything, five different 40-token prompts
 * run one after the other; each repeated afterwards must still hit its two full blocks when it is
 * among the two most recent (the least recently used snapshot gives its slot to the newest
 * prompt), and the oldest must not (its snapshot was replaced): before, the first two prompts
 * kept both slots forever and no later prompt could ever be reused. A reused snapshot counts as
 * used: repeating prompt 3 keeps it past one newer prompt. Outputs equal the cold runs. */
static void test_hybrid_snapshot_lru(void **state) {
  (void)state;
  fx_t h;
  gt_err_t err = {0};
  if (tu_model_fx_open(&h, "qwen35-tiny.bf16.gguf", tu_be_cpu2, &err)) fail_msg("qwen35-tiny: %s", err.msg);
  enum { P = 5 };
  static out_t cold[P], warm[5];
  memset(cold, 0, sizeof cold);
  memset(warm, 0, sizeof warm);
  sched_t *s = mk(&h, 1, 64, 0);
  for (int k = 0; k < P; k++) {
    sched_req_t r = make_req(60 + k, 40, 6, &cold[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
    run_all(s);
    assert_int_equal(cold[k].usage.cached_tokens, 0);
  }
  /* prompts 3 and 4 hold the two slots; 4 is repeated (hit), then 0 (miss: its snapshot is gone;
   * the recomputed state goes onto its still-cached blocks, replacing 3's, the least recently
   * used), then 0 again (hit), then 3 (miss) */
  const int order[5] = {4, 0, 0, 4, 3}, want[5] = {32, 0, 32, 32, 0};
  for (int i = 0; i < 5; i++) {
    sched_req_t r = make_req(60 + order[i], 40, 6, &warm[i]);
    assert_true(sched_submit(s, &r, &err) > 0);
    run_all(s);
    print_message("repeat of prompt %d: %d cached tokens\n", order[i], warm[i].usage.cached_tokens);
    assert_int_equal(warm[i].usage.cached_tokens, want[i]);
    assert_int_equal(warm[i].n, 6);
    assert_memory_equal(warm[i].ids, cold[order[i]].ids, sizeof(int32_t) * 6);
  }
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.snapshot_replaced, 5); /* prompts 2, 3, 4 (cold), 0 and 3 (warm) took used slots */
  assert_int_equal(st.kv_used, 0);
  sched_free(s);
  tu_model_fx_close(&h);
}

/* Two equal prompts prefilled side by side reach their snapshot boundary on one cached block:
 * the second keeps the first's snapshot instead of taking a slot of its own. With max_num_seqs 2
 * (four slots) held by four earlier prompts, the pair replaces one snapshot, not two, so the three
 * most recent earlier prompts (71-73) still hit, and the pair's prompt hits. */
static void test_hybrid_snapshot_equal_prompts(void **state) {
  (void)state;
  fx_t h;
  gt_err_t err = {0};
  if (tu_model_fx_open(&h, "qwen35-tiny.bf16.gguf", tu_be_cpu2, &err)) fail_msg("qwen35-tiny: %s", err.msg);
  static out_t o[4], pair[2], warm[4];
  memset(o, 0, sizeof o);
  memset(pair, 0, sizeof pair);
  memset(warm, 0, sizeof warm);
  sched_t *s = mk(&h, 2, 128, 0);
  for (int k = 0; k < 4; k++) {
    sched_req_t r = make_req(70 + k, 40, 6, &o[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
    run_all(s);
  }
  for (int i = 0; i < 2; i++) {
    sched_req_t r = make_req(80, 40, 6, &pair[i]);
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  run_all(s);
  assert_int_equal(pair[0].usage.cached_tokens, 0);
  assert_int_equal(pair[1].usage.cached_tokens, 0);
  assert_memory_equal(pair[0].ids, pair[1].ids, sizeof(int32_t) * 6);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.snapshot_replaced, 1); /* prompt 70's; before, 71's too */
  const int order[4] = {71, 72, 73, 80};
  for (int i = 0; i < 4; i++) {
    sched_req_t r = make_req(order[i], 40, 6, &warm[i]);
    assert_true(sched_submit(s, &r, &err) > 0);
    run_all(s);
    assert_int_equal(warm[i].usage.cached_tokens, 32);
    assert_memory_equal(warm[i].ids, i < 3 ? o[i + 1].ids : pair[0].ids, sizeof(int32_t) * 6);
  }
  sched_stats(s, &st);
  assert_int_equal(st.snapshot_replaced, 1);
  assert_int_equal(st.kv_used, 0);
  sched_free(s);
  tu_model_fx_close(&h);
}

static void test_chunked_prefill_interleaves(void **state) {
  fx_t *f = *state;
  static out_t dec, longp;
  memset(&dec, 0, sizeof dec);
  memset(&longp, 0, sizeof longp);
  gt_err_t err = {0};
  sched_t *s = mk(f, 4, 16, 0); /* 16 tokens per step */
  sched_req_t r = make_req(5, 4, 30, &dec);
  assert_true(sched_submit(s, &r, &err) > 0);
  for (int i = 0; i < 3; i++) {
    assert_true(sched_step(s, &err) > 0);
    g_steps++;
  }
  r = make_req(6, 200, 4, &longp); /* 200-token prompt: 13+ chunks */
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  assert_int_equal(dec.n, 30);
  /* the running stream got a token in every step while the long prompt was prefilled */
  for (int i = 1; i < dec.deltas; i++) assert_int_equal(dec.step_of_delta[i] - dec.step_of_delta[i - 1], 1);
  assert_int_equal(longp.n, 4);
  sched_free(s);
}

/* The long-prompt rule (engine/SERVE.md "Scheduling"): three streams (8-token prompts, 20, 40
 * and 60 tokens out: 2, 3 and 5 blocks at the end) run in a pool of 12 blocks (192 tokens) when a
 * 150-token prompt (10 blocks) arrives. The streams keep a token every step (the newcomer never
 * takes their blocks), the long prompt waits in the queue while its chunk's blocks are not free
 * beyond the streams' headroom and is prefilled in chunks, it is preempted at most once (when
 * the streams outgrow their headroom; admitting it on a single free block, as before, had it
 * admitted and preempted three times here), it completes with the tokens it gets alone, and
 * every block comes back. */
static void long_prompt_small_pool(fx_t *f) {
  enum { N = 3, LONG = 150 };
  static const int GENS[N] = {20, 40, 60};
  static out_t solo[N + 1], run[N + 1];
  memset(solo, 0, sizeof solo);
  memset(run, 0, sizeof run);
  gt_err_t err = {0};
  sched_t *s = mk(f, 4, 32, 0); /* references, one at a time in a large pool */
  for (int k = 0; k <= N; k++) {
    sched_req_t r = k < N ? make_req(40 + k, 8, GENS[k], &solo[k]) : make_req(50, LONG, 4, &solo[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
    run_all(s);
  }
  sched_free(s);

  s = mk(f, 4, 32, 12);
  for (int k = 0; k < N; k++) {
    sched_req_t r = make_req(40 + k, 8, GENS[k], &run[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  for (int i = 0; i < 4; i++, g_steps++) assert_int_equal(sched_step(s, &err), 1);
  sched_req_t r = make_req(50, LONG, 4, &run[N]);
  assert_true(sched_submit(s, &r, &err) > 0);
  int queued_steps = 0, steps = 0;
  sched_stats_t st;
  for (; steps < 1000; steps++, g_steps++) {
    int rc = sched_step(s, &err);
    assert_true(rc >= 0);
    if (rc == 0) break;
    sched_stats(s, &st);
    int streams_left = 0;
    for (int k = 0; k < N; k++) streams_left += run[k].finals == 0;
    if (streams_left && st.waiting == 1) queued_steps++;
  }
  if (steps == 1000) fail_msg("the scheduler was still busy after 1000 steps");
  sched_stats(s, &st);
  printf("long prompt: %d steps, queued in %d of them while streams ran, %llu preemptions, first token at step %lld\n",
         steps, queued_steps, (unsigned long long)st.preemptions, (long long)run[N].step_of_delta[0]);
  for (int k = 0; k < N; k++) {
    assert_int_equal(run[k].finals, 1);
    assert_int_equal(run[k].n, GENS[k]);
    assert_memory_equal(run[k].ids, solo[k].ids, sizeof(int32_t) * (size_t)GENS[k]);
    /* a token in every step, from the first to the last */
    for (int i = 1; i < run[k].deltas; i++) assert_int_equal(run[k].step_of_delta[i] - run[k].step_of_delta[i - 1], 1);
  }
  assert_true(queued_steps > 0); /* it waited instead of taking the streams' blocks */
  assert_true(st.preemptions <= 1);
  assert_int_equal(run[N].finals, 1);
  assert_int_equal(run[N].finish, SCHED_FINISH_LENGTH);
  assert_int_equal(run[N].n, 4);
  assert_memory_equal(run[N].ids, solo[N].ids, sizeof(int32_t) * 4);
  assert_int_equal(st.running, 0);
  assert_int_equal(st.waiting, 0);
  assert_int_equal(st.kv_used, 0); /* no block leaked: the pool is whole again */
  sched_free(s);
}

/* ... on qwen3-tiny, and on the hybrid qwen35-tiny (state slots, snapshots at the prompt's last
 * block boundary, recompute from zero state after the preemption) */
static void test_long_prompt_small_pool(void **state) {
  long_prompt_small_pool(*state);
  fx_t h;
  gt_err_t err = {0};
  if (tu_model_fx_open(&h, "qwen35-tiny.bf16.gguf", tu_be_cpu2, &err)) fail_msg("qwen35-tiny: %s", err.msg);
  long_prompt_small_pool(&h);
  tu_model_fx_close(&h);
}

static void test_cancel_and_errors(void **state) {
  fx_t *f = *state;
  static out_t a, w;
  memset(&a, 0, sizeof a);
  memset(&w, 0, sizeof w);
  gt_err_t err = {0};
  sched_t *s = mk(f, 1, 64, 0);
  sched_req_t r = make_req(7, 10, 100, &a);
  int64_t id = sched_submit(s, &r, &err);
  assert_true(id > 0);
  r = make_req(8, 10, 100, &w); /* waits: max_num_seqs = 1 */
  int64_t id2 = sched_submit(s, &r, &err);
  for (int i = 0; i < 5; i++) assert_true(sched_step(s, &err) > 0);
  sched_cancel(s, id);
  sched_cancel(s, id2);
  sched_step(s, &err);
  assert_int_equal(a.finals, 1);
  assert_int_equal(a.finish, SCHED_FINISH_CANCELLED);
  assert_int_equal(w.finals, 1);
  assert_int_equal(w.finish, SCHED_FINISH_CANCELLED);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.running, 0);
  assert_int_equal(st.kv_used, 0);
  /* errors: empty prompt, prompt longer than the context, bad sampling */
  r = make_req(9, 10, 10, &a);
  r.n_prompt = 0;
  assert_int_equal(sched_submit(s, &r, &err), GT_EINVAL);
  r = make_req(9, 2048, 10, &a);
  assert_int_equal(sched_submit(s, &r, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "2048"));
  r = make_req(9, 10, 10, &a);
  r.sampling.top_p = 2;
  assert_int_equal(sched_submit(s, &r, &err), GT_EINVAL);
  sched_free(s);
}

/* The same workload with or without sched_warmup first (max_num_seqs 4, 48 tokens per step):
 * four requests (one prefilled in two chunks), then a repeat that hits the prefix cache. */
static void warmup_run(model_t *m, const tok_t *tok, int warm, out_t o[5], sched_stats_t *st) {
  sched_config_t c = {.max_num_seqs = 4, .max_batch_tokens = 48, .n_ctx = 2048};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(m, tok, &c, &s, &err), 0);
  if (warm) {
    sched_warmup_t w;
    assert_int_equal(sched_warmup(s, &w, &err), 0);
    assert_int_equal(w.prefill_tokens, 48);
    assert_int_equal(w.decode_sizes, 4);
    assert_int_equal(w.eager_steps, 0);
    sched_stats_t s0;
    sched_stats(s, &s0);
    assert_int_equal(s0.steps, 0);
    assert_int_equal(s0.kv_used, 0);
  }
  static const int plen[4] = {20, 37, 5, 60}, gen[4] = {12, 9, 16, 7};
  memset(o, 0, sizeof(out_t) * 5);
  for (int k = 0; k < 4; k++) {
    sched_req_t r = make_req(20 + k, plen[k], gen[k], &o[k]);
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  run_all(s);
  sched_req_t r = make_req(21, 37, 9, &o[4]);
  assert_true(sched_submit(s, &r, &err) > 0);
  run_all(s);
  sched_stats(s, st);
  sched_free(s);
}

static void check_warmup_invisible(model_t *m, const tok_t *tok) {
  static out_t cold[5], warm[5];
  sched_stats_t sc, sw;
  warmup_run(m, tok, 0, cold, &sc);
  warmup_run(m, tok, 1, warm, &sw);
  for (int k = 0; k < 5; k++) {
    assert_int_equal(cold[k].finals, 1);
    assert_int_equal(warm[k].finals, 1);
    assert_int_equal(warm[k].n, cold[k].n);
    assert_memory_equal(warm[k].ids, cold[k].ids, sizeof(int32_t) * (size_t)cold[k].n);
    assert_int_equal(warm[k].usage.cached_tokens, cold[k].usage.cached_tokens);
  }
  assert_int_equal(cold[4].usage.cached_tokens, 32); /* the repeat reuses two blocks */
  assert_int_equal(sw.steps, sc.steps);
  assert_int_equal(sw.prefix_hit_tokens, sc.prefix_hit_tokens);
  assert_int_equal(sw.prefix_queried_tokens, sc.prefix_queried_tokens);
  assert_int_equal(sw.generation_tokens, sc.generation_tokens);
  assert_int_equal(sw.kv_used, 0);
  assert_int_equal(sw.eager_steps, sc.eager_steps);
}

/* sched_warmup leaves nothing a request can see (tokens, cache hits, counters), on qwen3-tiny
 * and on the hybrid qwen35-tiny (whose state slots it uses); it refuses once a request came. */
static void test_warmup_invisible(void **state) {
  fx_t *f = *state;
  check_warmup_invisible(f->m, f->tok);
  fx_t h;
  gt_err_t err = {0};
  if (tu_model_fx_open(&h, "qwen35-tiny.bf16.gguf", tu_be_cpu2, &err)) fail_msg("qwen35-tiny: %s", err.msg);
  assert_true(h.m->hp.n_gdn_layers > 0);
  check_warmup_invisible(h.m, h.tok);
  tu_model_fx_close(&h);

  static out_t o;
  memset(&o, 0, sizeof o);
  sched_t *s = mk(f, 2, 64, 0);
  sched_req_t r = make_req(1, 10, 4, &o);
  assert_true(sched_submit(s, &r, &err) > 0);
  assert_int_equal(sched_warmup(s, NULL, &err), GT_EINVAL);
  run_all(s);
  assert_int_equal(o.n, 4);
  sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_warmup_invisible),
      cmocka_unit_test(test_batch_invariance),
      cmocka_unit_test(test_preemption),
      cmocka_unit_test(test_prefix_cache),       cmocka_unit_test(test_hybrid_snapshot_lru),
      cmocka_unit_test(test_hybrid_snapshot_equal_prompts),
      cmocka_unit_test(test_chunked_prefill_interleaves),
      cmocka_unit_test(test_long_prompt_small_pool),
      cmocka_unit_test(test_cancel_and_errors),
  };
  return cmocka_run_group_tests(tests, tu_model_fx_setup, tu_model_fx_teardown);
}
