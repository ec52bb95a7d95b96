/* Speculative decoding in the scheduler (sched_config_t.spec_*), on the CPU backend: output with
 * speculation equals output without it, token for token, on every golden model (qwen3-tiny in
 * bf16 / Q8_0 / Q6_K / Q4_K_M, the hybrid qwen35-tiny, the demo model):
 *   - prompt lookup (n-gram) drafts, batched with other sequences, then prefix-cached;
 *   - the suffix cache across requests: the same requests again draft the first run's outputs
 *     (nearly all accepted), another cache_salt drafts nothing from them;
 *   - a test drafter that proposes the true continuation (every draft accepted), with a forced
 *     rejection at each draft position in turn (spec_force_reject), and one that proposes wrong
 *     tokens (every draft rejected);
 *   - under preemption (a small pool);
 *   - every position computed once (sched_stats computed_tokens, fillers included: no kept token fed again after a
 *     hybrid rollback, which now swaps in the state after the last kept row).
 * On qwen3-tiny also: seeded sampling (device and host sampling paths, logprobs, penalties, stop
 * ids) gives the same tokens with and without speculation (on the GPU: up to a rare draw at a
 * float boundary, see assert_sampled), and a two-sample chi-square test of
 * the first two sampled tokens over many seeds (the rejection rule keeps the distribution);
 * the opt-out (no_spec), the batch-size cut-off and the pure n-gram lookup.
 * Built twice: on the CPU backend (test_sched_spec) and, with SCHED_SPEC_CUDA, on the CUDA
 * backend with fp32 activations and fp32 KV pools (test_cuda_sched_spec, label gpu; exit 77
 * without a GPU), where verify steps run outside the decode graphs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/models/model.h"
#include "engine/sched/sched.h"
#include "engine/sched/spec.h"
#include "engine/sched/spec_cost.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"
#ifdef SCHED_SPEC_CUDA
#include "engine/backend/backend_cuda.h"
static int be_new(be_t **be, gt_err_t *err) {
  be_cuda_set_activations("fp32");
  int rc = be_cuda_create(0, be, err);
  if (!rc && be_kv_set_type(*be, GT_TYPE_F32)) rc = gt_err_set(err, GT_EUNSUPPORTED, "fp32 KV pools refused");
  return rc;
}
#else
#define be_new tu_be_cpu2
#endif
static int setup(void **state) { return tu_model_fx_setup_on(state, be_new); }

#define MAXT 64
#define NREQ 4

typedef struct {
  int32_t ids[MAXT];
  float lps[MAXT];
  int n, n_lps, finals;
  sched_finish_t finish;
  sched_usage_t usage;
} out_t;

static void on_event(void *ud, const sched_event_t *ev) {
  out_t *o = ud;
  if (ev->is_final) {
    o->finals++;
    o->finish = ev->finish;
    o->usage = *ev->usage;
    return;
  }
  for (int i = 0; i < ev->delta->n_ids && o->n < MAXT; i++) o->ids[o->n++] = ev->delta->ids[i];
  for (int i = 0; i < ev->delta->n_lps && o->n_lps < MAXT; i++) o->lps[o->n_lps++] = ev->delta->lps[i].logprob;
}

/* Prompt k: 40 ids whose second half repeats the first (so that prompt lookup finds n-grams). */
static sched_req_t make_req(int k, int max_tokens, out_t *o) {
  sched_req_t r = {0};
  r.n_prompt = 40;
  r.prompt = malloc(sizeof(int32_t) * (size_t)r.n_prompt);
  for (int i = 0; i < r.n_prompt; i++) r.prompt[i] = (int32_t)((k * 131 + (i % 20) * 17 + 7) % 1000);
  r.sampling = sampler_defaults();
  r.max_tokens = max_tokens;
  r.ignore_eos = 1;
  r.logprobs = -1;
  r.on_event = on_event;
  r.ud = o;
  return r;
}

/* ---- test drafters (sched_draft_fn) ---- */
enum { DRAFT_TRUE, DRAFT_WRONG, DRAFT_MIXED, DRAFT_SOME /* true, none for the first request */ };
typedef struct {
  int mode, n_vocab;
  const out_t *ref; /* [request id - 1]: the output without speculation */
  int n_prompt;
  int calls;
} drafter_t;

static int draft_hook(void *ud, int64_t id, int index, const int32_t *tokens, int n, int k, int32_t *out) {
  drafter_t *d = ud;
  (void)index;
  (void)tokens;
  d->calls++;
  const out_t *ref = &d->ref[(id - 1) % NREQ];
  if (d->mode == DRAFT_SOME && ref == d->ref) return 0;
  const int pos = n - d->n_prompt; /* output tokens so far */
  int m = 0;
  for (; m < k && pos + m < ref->n; m++) {
    const int32_t t = ref->ids[pos + m];
    const int wrong = d->mode == DRAFT_WRONG || (d->mode == DRAFT_MIXED && m == (pos % (k + 1)));
    out[m] = wrong ? (t + 1) % d->n_vocab : t;
  }
  return m;
}

/* spec 2: n-grams from 1 token (more drafts, more of them rejected) */
static sched_t *mk(const tu_model_fx_t *f, int spec, int n_blocks, drafter_t *d, int force_reject) {
  /* spec_adaptive 0: the drafts these tests count are not subject to measured costs */
  sched_config_t c = {.max_num_seqs = NREQ, .max_batch_tokens = 64, .n_blocks = n_blocks, .n_ctx = 256,
                      .spec_mode = spec ? SCHED_SPEC_NGRAM : SCHED_SPEC_OFF, .spec_k = 3,
                      .spec_ngram_min = spec == 2 ? 1 : 0,
                      .spec_draft = d ? draft_hook : NULL, .spec_draft_ud = d, .spec_force_reject = force_reject};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  return s;
}

/* Runs requests 0..n-1 (T tokens each, adjusted by adj when not NULL) together on s into o. */
static void run_reqs(sched_t *s, int n, int T, out_t *o, void (*adj)(sched_req_t *, int)) {
  gt_err_t err = {0};
  memset(o, 0, sizeof(out_t) * (size_t)n);
  for (int k = 0; k < n; k++) {
    sched_req_t r = make_req(k, T, &o[k]);
    if (adj) adj(&r, k);
    assert_true(sched_submit(s, &r, &err) > 0);
  }
  tu_sched_run_all(s, NULL);
}

static void assert_same(const out_t *a, const out_t *b, int n, const char *what) {
  for (int k = 0; k < n; k++) {
    if (a[k].n != b[k].n || memcmp(a[k].ids, b[k].ids, sizeof(int32_t) * (size_t)a[k].n) != 0) {
      int at = 0;
      while (at < a[k].n && at < b[k].n && a[k].ids[at] == b[k].ids[at]) at++;
      for (int j = 0; j < 8 && j < a[k].n && j < b[k].n; j++) printf("  %d: %d %d\n", j, a[k].ids[j], b[k].ids[j]);
      fail_msg("%s: request %d differs at token %d (%d vs %d tokens)", what, k, at, a[k].n, b[k].n);
    }
    assert_int_equal(a[k].finals, 1);
    assert_int_equal(b[k].finals, 1);
    assert_int_equal(a[k].finish, b[k].finish);
    assert_int_equal(a[k].n_lps, b[k].n_lps);
    assert_memory_equal(a[k].lps, b[k].lps, sizeof(float) * (size_t)a[k].n_lps);
  }
}

static void assert_pool_whole(sched_t *s) {
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(st.kv_used, 0);
  assert_int_equal(st.running + st.waiting, 0);
}

/* Each position is computed once: the prompt (less its cached part), then every generated token
 * but the last either as the next step's pending token or as an accepted draft, plus the drafts
 * and fillers that were fed and not kept; a hybrid rollback feeds no kept token again. */
static void assert_computed_once(const sched_stats_t *st, const out_t *got) {
  uint64_t drafted = 0, kept = 0; /* the counts by source add up to the totals */
  for (int i = 0; i < SCHED_DRAFT_SOURCES; i++) drafted += st->spec_src_draft_tokens[i], kept += st->spec_src_accepted[i];
  assert_int_equal(drafted, st->spec_draft_tokens);
  assert_int_equal(kept, st->spec_accepted_tokens);
  uint64_t fed = st->spec_draft_tokens - st->spec_accepted_tokens + st->spec_fill_tokens - st->spec_fill_accepted;
  for (int k = 0; k < NREQ; k++) fed += (uint64_t)(got[k].usage.prompt_tokens - got[k].usage.cached_tokens + got[k].n - 1);
  assert_int_equal(st->computed_tokens, fed);
}

/* NREQ requests of T tokens with d's drafts (pool of n_blocks, 0: default), their output checked
 * against ref; the scheduler (for more checks, then sched_free) and its stats in *st. */
static sched_t *run_drafted(const tu_model_fx_t *f, drafter_t *d, int n_blocks, int T, const out_t *ref, out_t *got,
                            const char *what, sched_stats_t *st) {
  sched_t *s = mk(f, 1, n_blocks, d, 0);
  run_reqs(s, NREQ, T, got, NULL);
  assert_same(ref, got, NREQ, what);
  sched_stats(s, st);
  return s;
}

static void salt_99(sched_req_t *r, int k) {
  (void)k;
  r->cache_salt = 99;
}

/* The suffix cache (sched_config_t.spec_suffix_tokens): the requests run again draft what the first
 * run generated, nearly all of it accepted; the output stays the same; requests of another salt
 * draft nothing from it; each position is still computed once. */
static void check_suffix_cache(const tu_model_fx_t *f, int T, const out_t *ref, out_t *got, const char *name) {
  sched_config_t c = {.max_num_seqs = NREQ, .max_batch_tokens = 64, .n_ctx = 256, .spec_mode = SCHED_SPEC_NGRAM,
                      .spec_k = 3, .spec_suffix_tokens = 4096};
  sched_t *s = NULL;
  gt_err_t err = {0};
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  sched_stats_t st0, st1, st2;
  run_reqs(s, NREQ, T, got, NULL); /* together: none finished before the others drafted */
  assert_same(ref, got, NREQ, "suffix cache, first run");
  sched_stats(s, &st0);
  assert_int_equal(st0.spec_src_draft_tokens[SCHED_DRAFT_CACHE], 0);
  assert_computed_once(&st0, got);
  run_reqs(s, NREQ, T, got, NULL);
  assert_same(ref, got, NREQ, "suffix cache, again");
  sched_stats(s, &st1);
  const uint64_t sd = st1.spec_src_draft_tokens[SCHED_DRAFT_CACHE], sa = st1.spec_src_accepted[SCHED_DRAFT_CACHE];
  const uint64_t dt = st1.spec_draft_tokens - st0.spec_draft_tokens, at = st1.spec_accepted_tokens - st0.spec_accepted_tokens;
  printf("%s suffix cache: first run %llu of %llu drafts accepted; again %llu of %llu (%llu of %llu from the cache)\n",
         name, (unsigned long long)st0.spec_accepted_tokens, (unsigned long long)st0.spec_draft_tokens,
         (unsigned long long)at, (unsigned long long)dt, (unsigned long long)sa, (unsigned long long)sd);
  assert_true(sd > 0);
  assert_true(sa * 10 >= sd * 9);
  /* the cache drafts most of the run again, and nearly all of what is drafted is kept */
  assert_true(sd * 2 >= (uint64_t)NREQ * T);
  assert_true(at * 10 >= dt * 9);
  run_reqs(s, NREQ, T, got, salt_99);
  assert_same(ref, got, NREQ, "suffix cache, another salt");
  sched_stats(s, &st2);
  assert_int_equal(st2.spec_src_draft_tokens[SCHED_DRAFT_CACHE], sd);
  assert_pool_whole(s);
  sched_free(s);
}

/* The identity checks on one model (greedy, T tokens per request). */
static void check_model(const char *name) {
  enum { T = 40 };
  tu_model_fx_t f;
  gt_err_t err = {0};
  if (tu_model_fx_open(&f, name, be_new, &err)) fail_msg("%s: %s", name, err.msg);
  static out_t ref[NREQ], got[NREQ];
  /* the reference: each request alone, no speculation */
  for (int k = 0; k < NREQ; k++) {
    sched_t *s = mk(&f, 0, 0, NULL, 0);
    gt_err_t e2 = {0};
    memset(&ref[k], 0, sizeof ref[k]);
    sched_req_t r = make_req(k, T, &ref[k]);
    assert_true(sched_submit(s, &r, &e2) > 0);
    tu_sched_run_all(s, NULL);
    sched_free(s);
    assert_int_equal(ref[k].n, T);
  }
  sched_stats_t st;
  /* prompt lookup, batched, then again from the prefix cache */
  sched_t *s = mk(&f, 2, 0, NULL, 0);
  run_reqs(s, NREQ, T, got, NULL);
  assert_same(ref, got, NREQ, "ngram");
  run_reqs(s, NREQ, T, got, NULL);
  assert_same(ref, got, NREQ, "ngram, prefix-cached");
  for (int k = 0; k < NREQ; k++) assert_true(got[k].usage.cached_tokens > 0);
  sched_stats(s, &st);
  printf("%s ngram: %llu verify steps, %llu drafts, %llu accepted, %llu fillers (%llu kept)\n", name,
         (unsigned long long)st.spec_drafts, (unsigned long long)st.spec_draft_tokens,
         (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_fill_tokens,
         (unsigned long long)st.spec_fill_accepted);
  assert_true(st.spec_drafts > 0);
  assert_pool_whole(s);
  sched_free(s);
  check_suffix_cache(&f, T, ref, got, name);
  /* the true continuation as drafts, rejected at no position / at position j */
  drafter_t d = {.mode = DRAFT_TRUE, .n_vocab = f.m->hp.n_vocab, .ref = ref, .n_prompt = 40};
  for (int fr = 0; fr <= 3; fr++) {
    s = mk(&f, 1, 0, &d, fr);
    run_reqs(s, NREQ, T, got, NULL);
    char what[64];
    snprintf(what, sizeof what, "true drafts, forced rejection %d", fr - 1);
    assert_same(ref, got, NREQ, what);
    sched_stats(s, &st);
    assert_true(st.spec_drafts > 0);
    assert_computed_once(&st, got);
    if (fr == 0) {
      assert_int_equal(st.spec_accepted_tokens, st.spec_draft_tokens);
      /* every verify step keeps its drafts plus one: far fewer steps than tokens */
      assert_true(st.spec_drafts <= (uint64_t)NREQ * (T / 4 + 2));
    } else {
      assert_int_equal(st.spec_accepted_pos[fr - 1], 0);
      for (int j = 0; j < fr - 1; j++) assert_true(st.spec_accepted_pos[j] > 0);
      if (f.m->hp.n_gdn_layers > 0) assert_true(st.spec_rollbacks > 0);
    }
    assert_pool_whole(s);
    sched_free(s);
  }
  /* wrong drafts: every one rejected; mixed: a wrong one at a varying position */
  d.mode = DRAFT_WRONG;
  s = run_drafted(&f, &d, 0, T, ref, got, "wrong drafts", &st);
  assert_true(st.spec_draft_tokens > 0);
  assert_int_equal(st.spec_accepted_tokens, 0);
  assert_pool_whole(s);
  sched_free(s);
  /* preemption: 4 requests of 40 + 40 tokens = 5 blocks each in a pool of 12 blocks */
  d.mode = DRAFT_MIXED;
  s = run_drafted(&f, &d, 12, T, ref, got, "mixed drafts, preempted", &st);
  assert_true(st.preemptions > 0);
  assert_true(st.spec_accepted_tokens > 0 && st.spec_accepted_tokens < st.spec_draft_tokens);
  assert_pool_whole(s);
  sched_free(s);
  /* drafts for all requests but the first: fillers bring its rows to the others' (fill_drafts), the
   * output stays the same, and still each position is computed once (fillers fed and not kept) */
  d.mode = DRAFT_SOME;
  s = run_drafted(&f, &d, 0, T, ref, got, "drafts for some, filled", &st);
  assert_true(st.spec_fill_tokens > 0);
  assert_computed_once(&st, got);
  assert_int_equal(st.spec_accepted_tokens, st.spec_draft_tokens);
  assert_pool_whole(s);
  sched_free(s);
  tu_model_fx_close(&f);
}

static void test_identity_qwen3_bf16(void **state) { (void)state; check_model("qwen3-tiny.bf16.gguf"); }
static void test_identity_qwen3_q8_0(void **state) { (void)state; check_model("qwen3-tiny.Q8_0.gguf"); }
static void test_identity_qwen3_q6_k(void **state) { (void)state; check_model("qwen3-tiny.Q6_K.gguf"); }
static void test_identity_qwen3_q4_k_m(void **state) { (void)state; check_model("qwen3-tiny.Q4_K_M.gguf"); }
static void test_identity_qwen35(void **state) { (void)state; check_model("qwen35-tiny.bf16.gguf"); }
static void test_identity_demo(void **state) { (void)state; check_model("demo/gantry-demo-code-22m.Q4_K_M.gguf"); }

/* ---- sampling ---- */

static uint64_t g_seed0;
static int g_variant;
/* seeded sampling; variant 1: logprobs (host path); 2: penalties and a bias (host path) */
static void adj_sample(sched_req_t *r, int k) {
  r->sampling.temperature = 0.8f;
  r->sampling.top_p = 0.95f;
  r->sampling.seed = g_seed0 + (uint64_t)k;
  if (g_variant == 1) r->logprobs = 2;
  if (g_variant == 2) {
    r->sampling.repetition_penalty = 1.3f;
    r->sampling.presence_penalty = 0.5f;
  }
}

#ifdef SCHED_SPEC_CUDA
/* The contract on the GPU. A verify step computes a sequence's 1 + k rows as one prefill-like
 * piece of the batch: its products take the mmq kernel (3+ rows) where a decode step of 1-2
 * sequences takes the matvec kernel, its attention the prefill kernel where decode takes the
 * split-K decode kernel. With fp32 activations both are within ~1e-6 of fp32, but their
 * reduction orders differ, so a row's logits depend in the last bits on the shape of the step
 * that carried it (vLLM promises no more). Greedy output is unaffected short of an exact
 * near-tie (the identity tests above hold token for token), and the rejection rule keeps the
 * sampled distribution (test_chi_square); but a seeded draw whose uniform falls within those
 * last bits of a CDF (or top-p) boundary takes the neighbouring token, and from there the two
 * runs are different random streams. So on the GPU this test claims what holds exactly for
 * every draw not at such a boundary: both runs agree token for token up to the first
 * divergence, with logprobs (variant 1) equal there to 1e-4 (a wrong row or RNG rewind gives
 * O(1) differences at once), and a divergence is rare: at most one request in a run diverges,
 * and not within its first half (a plumbing bug diverges at the first verify step of every
 * request). The CPU backend computes every row independently of the step's shape (batch
 * invariance), so there the claim is the full token-for-token identity. */
static void assert_sampled(const out_t *a, const out_t *b, int n, const char *what) {
  int diverged = 0;
  for (int k = 0; k < n; k++) {
    assert_int_equal(b[k].finals, 1);
    int at = 0;
    while (at < a[k].n && at < b[k].n && a[k].ids[at] == b[k].ids[at]) at++;
    for (int j = 0; j < at && j < a[k].n_lps && j < b[k].n_lps; j++)
      if (fabsf(a[k].lps[j] - b[k].lps[j]) > 1e-4f)
        fail_msg("%s: request %d token %d logprob %.7f vs %.7f", what, k, j, a[k].lps[j], b[k].lps[j]);
    if (at == a[k].n && a[k].n == b[k].n) continue;
    printf("%s: request %d diverges at token %d of %d (a draw at a float boundary)\n", what, k, at, a[k].n);
    if (at < a[k].n / 2) fail_msg("%s: request %d diverges at token %d of %d", what, k, at, a[k].n);
    diverged++;
  }
  if (diverged > 1) fail_msg("%s: %d requests diverge", what, diverged);
}
#define SAMPLED_SAME(a, b, n, what) assert_sampled(a, b, n, what)
#else
#define SAMPLED_SAME(a, b, n, what) assert_same(a, b, n, what)
#endif

/* Seeded sampling gives the same tokens (and logprobs) with and without speculation: each kept
 * token is drawn exactly as without it (one uniform per token). The true-continuation drafter
 * makes most drafts accepted, the mixed one rejects at varying positions. On the GPU: what
 * holds of logits computed by shape-dependent kernels (assert_sampled above). */
static void test_sampled_identity(void **state) {
  tu_model_fx_t *f = *state;
  enum { T = 30 };
  static out_t ref[NREQ], got[NREQ];
  g_seed0 = 77;
  for (g_variant = 0; g_variant < 3; g_variant++) {
    sched_t *s = mk(f, 0, 0, NULL, 0);
    run_reqs(s, NREQ, T, ref, adj_sample);
    sched_free(s);
    for (int mode = DRAFT_TRUE; mode <= DRAFT_MIXED; mode += 2) {
      drafter_t d = {.mode = mode, .n_vocab = f->m->hp.n_vocab, .ref = ref, .n_prompt = 40};
      s = mk(f, 1, 0, &d, 0);
      run_reqs(s, NREQ, T, got, adj_sample);
      SAMPLED_SAME(ref, got, NREQ, "sampled");
      sched_stats_t st;
      sched_stats(s, &st);
      assert_true(st.spec_accepted_tokens > 0);
#ifndef SCHED_SPEC_CUDA /* on the GPU the reference's tokens stop being the right drafts after a divergence */
      if (mode == DRAFT_TRUE) assert_int_equal(st.spec_accepted_tokens, st.spec_draft_tokens);
#endif
      sched_free(s);
    }
    s = mk(f, 1, 0, NULL, 0); /* prompt lookup */
    run_reqs(s, NREQ, T, got, adj_sample);
    SAMPLED_SAME(ref, got, NREQ, "sampled, ngram");
    sched_free(s);
  }
}

static int32_t g_stop;
static void adj_stop(sched_req_t *r, int k) {
  (void)k;
  r->stop_ids = &g_stop;
  r->n_stop_ids = 1;
}

/* A stop id inside accepted drafts ends the output there; max_tokens cuts drafts. */
static void test_stop_and_length(void **state) {
  tu_model_fx_t *f = *state;
  static out_t ref[NREQ], got[NREQ], full[NREQ];
  sched_t *s = mk(f, 0, 0, NULL, 0);
  run_reqs(s, 1, 40, full, NULL);
  sched_free(s);
  g_stop = full[0].ids[17];
  s = mk(f, 0, 0, NULL, 0);
  run_reqs(s, 1, 40, ref, adj_stop);
  sched_free(s);
  assert_int_equal(ref[0].finish, SCHED_FINISH_STOP);
  drafter_t d = {.mode = DRAFT_TRUE, .n_vocab = f->m->hp.n_vocab, .ref = full, .n_prompt = 40};
  s = mk(f, 1, 0, &d, 0);
  run_reqs(s, 1, 40, got, adj_stop);
  assert_same(ref, got, 1, "stop id");
  assert_pool_whole(s);
  /* max_tokens 5, not a multiple of k + 1 */
  run_reqs(s, 1, 5, got, NULL);
  assert_int_equal(got[0].n, 5);
  assert_memory_equal(got[0].ids, full[0].ids, sizeof(int32_t) * 5);
  assert_int_equal(got[0].finish, SCHED_FINISH_LENGTH);
  assert_pool_whole(s);
  sched_free(s);
}

static void adj_nospec(sched_req_t *r, int k) { r->no_spec = k == 0; }

/* no_spec requests never draft; more decoding sequences than spec_max_seqs: no drafts. */
static void test_opt_out_and_batch_cutoff(void **state) {
  tu_model_fx_t *f = *state;
  static out_t ref[NREQ], got[NREQ];
  drafter_t d = {.mode = DRAFT_TRUE, .n_vocab = f->m->hp.n_vocab, .ref = ref, .n_prompt = 40};
  sched_t *s = mk(f, 0, 0, NULL, 0);
  run_reqs(s, NREQ, 20, ref, NULL);
  sched_free(s);
  s = mk(f, 1, 0, &d, 0);
  run_reqs(s, 1, 20, got, adj_nospec);
  sched_stats_t st;
  sched_stats(s, &st);
  assert_int_equal(d.calls, 0);
  assert_int_equal(st.spec_drafts, 0);
  assert_same(ref, got, 1, "opt-out");
  sched_free(s);
  sched_config_t c = {.max_num_seqs = NREQ, .max_batch_tokens = 64, .n_ctx = 256, .spec_mode = SCHED_SPEC_NGRAM,
                      .spec_k = 3, .spec_max_seqs = 2, .spec_draft = draft_hook, .spec_draft_ud = &d};
  gt_err_t err = {0};
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
  run_reqs(s, NREQ, 20, got, NULL);
  assert_same(ref, got, NREQ, "batch cut-off, cold");
  /* from the prefix cache the 4 start decoding in one step and end together: no drafts */
  sched_stats_t st0;
  sched_stats(s, &st0);
  d.calls = 0;
  run_reqs(s, NREQ, 20, got, NULL);
  assert_same(ref, got, NREQ, "batch cut-off");
  sched_stats(s, &st);
  assert_int_equal(st.spec_drafts, st0.spec_drafts);
  assert_int_equal(d.calls, 0);
  sched_free(s);
}

static void adj_one(sched_req_t *r, int k) {
  (void)k;
  r->n_prompt = 1;
}

/* Two-sample chi-square of the (second, third) sampled token at temperature 1, top-k 3, over N
 * seeds each: speculation (one draft before the second token: the greedy token, a point mass)
 * against none, on disjoint seeds, so the draws are independent and equal distributions pass at
 * p = 0.001 (deterministic seeds: the test cannot flake). */
static void test_chi_square(void **state) {
  tu_model_fx_t *f = *state;
  enum { N = 600, B = 8 };
  static out_t greedy[1], o[N];
  sched_t *s = mk(f, 0, 0, NULL, 0);
  run_reqs(s, 1, 3, greedy, adj_one);
  sched_free(s);
  drafter_t d = {.mode = DRAFT_TRUE, .n_vocab = f->m->hp.n_vocab, .ref = greedy, .n_prompt = 1};
  /* pairs seen, as keys first * V + second, counts per arm */
  static int64_t key[2 * N];
  static int cnt[2][2 * N];
  int n_key = 0;
  memset(cnt, 0, sizeof cnt);
  uint64_t accepted = 0;
  for (int arm = 0; arm < 2; arm++) {
    sched_config_t c = {.max_num_seqs = 16, .max_batch_tokens = 64, .n_ctx = 256,
                        .spec_mode = arm ? SCHED_SPEC_NGRAM : SCHED_SPEC_OFF, .spec_k = 1, .spec_max_seqs = 16,
                        .spec_draft = draft_hook, .spec_draft_ud = &d};
    gt_err_t err = {0};
    assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
    memset(o, 0, sizeof o);
    for (int i = 0; i < N; i++) {
      sched_req_t r = make_req(0, 3, &o[i]);
      r.sampling.temperature = 1.0f;
      r.sampling.top_k = 3;
      r.sampling.seed = 1000003ull * (uint64_t)(arm + 1) + (uint64_t)i;
      adj_one(&r, 0); /* the draft hook maps every request to greedy[0]: one prompt for all */
      assert_true(sched_submit(s, &r, &err) > 0);
      if ((i + 1) % 16 == 0) tu_sched_run_all(s, NULL);
    }
    tu_sched_run_all(s, NULL);
    sched_stats_t st;
    sched_stats(s, &st);
    if (arm) accepted = st.spec_accepted_tokens;
    sched_free(s);
    for (int i = 0; i < N; i++) {
      assert_int_equal(o[i].n, 3);
      const int64_t kk = (int64_t)o[i].ids[1] * f->m->hp.n_vocab + o[i].ids[2];
      int j = 0;
      while (j < n_key && key[j] != kk) j++;
      if (j == n_key) key[n_key++] = kk;
      cnt[arm][j]++;
    }
  }
  /* bins: the B - 1 most frequent pairs overall, the rest pooled */
  int bin_a[B] = {0}, bin_b[B] = {0};
  static int used[2 * N];
  memset(used, 0, sizeof used);
  for (int b = 0; b < B - 1; b++) {
    int best = -1;
    for (int j = 0; j < n_key; j++)
      if (!used[j] && (best < 0 || cnt[0][j] + cnt[1][j] > cnt[0][best] + cnt[1][best])) best = j;
    if (best < 0) break;
    used[best] = 1;
    bin_a[b] = cnt[0][best];
    bin_b[b] = cnt[1][best];
  }
  for (int j = 0; j < n_key; j++)
    if (!used[j]) bin_a[B - 1] += cnt[0][j], bin_b[B - 1] += cnt[1][j];
  double chi = 0;
  int df = -1;
  for (int b = 0; b < B; b++) {
    const double tot = bin_a[b] + bin_b[b];
    if (tot == 0) continue;
    df++;
    const double e = tot / 2; /* equal arm sizes */
    chi += (bin_a[b] - e) * (bin_a[b] - e) / e + (bin_b[b] - e) * (bin_b[b] - e) / e;
  }
  /* chi-square critical values at p = 0.001 for df 1..7 */
  static const double crit[8] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
  printf("chi-square %.2f, df %d (critical %.2f), %llu of %d drafts accepted\n", chi, df, crit[df],
         (unsigned long long)accepted, N);
  assert_true(df >= 2);
  assert_true(chi < crit[df]);
  /* both branches of the rule ran many times */
  assert_true(accepted >= N / 20 && accepted < (uint64_t)N * 19 / 20);
}

static void test_ngram_lookup(void **state) {
  (void)state;
  int32_t out[8];
  /* 1 2 3 4 5 1 2 3 | 1 2 3: longest recurring suffix "1 2 3" last seen at 5 -> 1 2 3 (never past n) */
  const int32_t a[] = {1, 2, 3, 4, 5, 1, 2, 3, 1, 2, 3};
  assert_int_equal(spec_ngram_draft(a, 11, 4, 2, 4, out), 3);
  assert_int_equal(out[0], 1);
  assert_int_equal(out[1], 2);
  assert_int_equal(out[2], 3);
  /* the most recent occurrence wins: "7 8" followed by 9 then by 6 */
  const int32_t b[] = {7, 8, 9, 7, 8, 6, 0, 7, 8};
  assert_int_equal(spec_ngram_draft(b, 9, 2, 2, 4, out), 2);
  assert_int_equal(out[0], 6);
  assert_int_equal(out[1], 0);
  /* no recurring suffix of length >= 2 */
  const int32_t c[] = {1, 2, 3, 4, 1};
  assert_int_equal(spec_ngram_draft(c, 5, 3, 2, 4, out), 0);
  assert_int_equal(spec_ngram_draft(c, 5, 3, 1, 4, out), 3); /* "1" recurs: 2 3 4 */
  assert_int_equal(out[0], 2);
  assert_int_equal(spec_ngram_draft(c, 5, 0, 1, 4, out), 0);
  assert_int_equal(spec_ngram_draft(c, 1, 3, 1, 4, out), 0);
}


/* ---- measured costs (engine/sched/spec_cost.h) ---- */
static void test_spec_cost_rule(void **state) {
  (void)state;
  spec_cost_t c;
  assert_int_equal(spec_cost_init(&c, 4), 0);
  assert_int_equal(spec_cost_decide(&c, 0), 1); /* outside 1..max_n: never held back */
  assert_int_equal(spec_cost_decide(&c, 5), 1);
  assert_int_equal(spec_cost_pays(&c, 1), -1);
  assert_int_equal(spec_cost_decide(&c, 1), 1); /* warm-up: speculative samples first */
  for (int i = 0; i < SPEC_COST_WARM; i++) spec_cost_record(&c, 1, 1, 2.0, 3.0);
  assert_int_equal(spec_cost_decide(&c, 1), 0); /* then plain ones */
  for (int i = 0; i < SPEC_COST_WARM; i++) spec_cost_record(&c, 1, 0, 1.0, 1.0);
  assert_int_equal(spec_cost_pays(&c, 1), 1); /* 3 tokens in 2 ms against 1 in 1 ms */
  int plain = 0, first = -1;
  for (int i = 0; i < 2 * (SPEC_COST_PROBE_ON + 1); i++) {
    const int d = spec_cost_decide(&c, 1);
    plain += !d;
    if (!d && first < 0) first = i;
  }
  assert_int_equal(plain, 2); /* one plain probe after each SPEC_COST_PROBE_ON drafting steps */
  assert_int_equal(first, SPEC_COST_PROBE_ON);
  /* the same tokens at 10 ms: drafting no longer pays at n = 1; n = 2 has its own averages */
  for (int i = 0; i < 40; i++) spec_cost_record(&c, 1, 1, 10.0, 3.0);
  assert_int_equal(spec_cost_pays(&c, 1), 0);
  assert_int_equal(spec_cost_pays(&c, 2), -1);
  int spec = 0;
  for (int i = 0; i < 2 * (SPEC_COST_PROBE_OFF + 1); i++) spec += spec_cost_decide(&c, 1);
  assert_int_equal(spec, 2); /* one drafting probe per SPEC_COST_PROBE_OFF plain steps */
  /* the margin: exactly equal rates do not pay */
  for (int i = 0; i < 40; i++) spec_cost_record(&c, 1, 1, 3.0, 3.0);
  assert_int_equal(spec_cost_pays(&c, 1), 0);
  spec_cost_free(&c);
}

/* step times from the test, not the clock: plain steps 1 ms, speculative ones g_spec_ms */
static double g_spec_ms;
static double step_ms_hook(void *ud, int n_dec, int n_draft, double clock_ms) {
  (void)ud, (void)n_dec, (void)clock_ms;
  return n_draft > 0 ? g_spec_ms : 1.0;
}

/* The scheduler drafts where speculative steps pay and stops where they do not, probing the
 * other choice now and then; the output is the same either way. Drafts are always right (4
 * tokens per speculative step with k = 3): at 10 ms a step they lose against 1 ms plain steps,
 * at 1.5 ms they win. */
static void test_cost_control(void **state) {
  tu_model_fx_t *f = *state;
  static out_t ref[NREQ], got[NREQ];
  drafter_t d = {.mode = DRAFT_TRUE, .n_vocab = f->m->hp.n_vocab, .ref = ref, .n_prompt = 40};
  sched_t *s = mk(f, 0, 0, NULL, 0);
  run_reqs(s, 1, MAXT, ref, NULL);
  sched_free(s);
  const double costs[2] = {10.0, 1.5};
  for (int arm = 0; arm < 2; arm++) {
    g_spec_ms = costs[arm];
    sched_config_t c = {.max_num_seqs = NREQ, .max_batch_tokens = 64, .n_ctx = 256, .spec_mode = SCHED_SPEC_NGRAM,
                        .spec_k = 3, .spec_draft = draft_hook, .spec_draft_ud = &d, .spec_step_ms = step_ms_hook,
                        .spec_adaptive = 1};
    gt_err_t err = {0};
    assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), 0);
    be_t *be = f->m->be; /* its graph captures (CUDA) count over every scheduler on it */
    const uint64_t caps0 = be->ops->graph_captures ? (uint64_t)be->ops->graph_captures(be) : 0;
    run_reqs(s, 1, MAXT, got, NULL);
    assert_same(ref, got, 1, arm ? "cost control, paying" : "cost control, losing");
    sched_stats_t st;
    sched_stats(s, &st);
    /* a step that captured a graph (CUDA: the first of each shape) gives no sample: one more step of
     * the warm-up's choice per capture */
    const uint64_t caps = st.graph_captures - caps0;
    print_message("  speculative step %.1f ms: %llu steps, %llu verify steps, %llu accepted, %llu told not to draft, "
                  "%llu graph captures\n",
                  g_spec_ms, (unsigned long long)st.steps, (unsigned long long)st.spec_drafts,
                  (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_cost_off_steps,
                  (unsigned long long)caps);
    if (arm == 0) { /* the warm-up's speculative steps, then one probe per SPEC_COST_PROBE_OFF + 1 steps */
      assert_true(st.spec_drafts >= SPEC_COST_WARM);
      assert_true(st.spec_drafts <= SPEC_COST_WARM + 1 + caps + st.steps / (SPEC_COST_PROBE_OFF + 1));
      /* every other step was told not to draft, but for the prefill, the first step after it and
       * steps whose probe found no drafts to make (the last tokens: no room for k) */
      assert_true(st.spec_cost_off_steps + st.spec_drafts + 4 + caps >= st.steps);
    } else { /* the warm-up's plain steps, then one probe per SPEC_COST_PROBE_ON + 1 steps */
      assert_true(st.spec_cost_off_steps >= SPEC_COST_WARM);
      assert_true(st.spec_cost_off_steps <= SPEC_COST_WARM + 1 + caps + st.steps / (SPEC_COST_PROBE_ON + 1));
      assert_true(st.spec_accepted_tokens >= 3 * (st.spec_drafts - 1));
    }
    sched_free(s);
  }
}

int main(void) {
#ifdef SCHED_SPEC_CUDA
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ngram_lookup),
      cmocka_unit_test(test_spec_cost_rule),
      cmocka_unit_test(test_identity_qwen3_bf16),
      cmocka_unit_test(test_identity_qwen3_q8_0),
      cmocka_unit_test(test_identity_qwen3_q6_k),
      cmocka_unit_test(test_identity_qwen3_q4_k_m),
      cmocka_unit_test(test_identity_qwen35),
      cmocka_unit_test(test_identity_demo),
      cmocka_unit_test_setup_teardown(test_sampled_identity, setup, tu_model_fx_teardown),
      cmocka_unit_test_setup_teardown(test_stop_and_length, setup, tu_model_fx_teardown),
      cmocka_unit_test_setup_teardown(test_opt_out_and_batch_cutoff, setup, tu_model_fx_teardown),
      cmocka_unit_test_setup_teardown(test_chi_square, setup, tu_model_fx_teardown),
      cmocka_unit_test_setup_teardown(test_cost_control, setup, tu_model_fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
