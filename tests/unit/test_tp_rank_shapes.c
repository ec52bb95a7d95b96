/* tests/unit/test_tp_rank_shapes.c — the GPU-less part of test_cuda_ops' production-shape checks
 * (test_tp_shapes_*, issue 28), in CI: for qwen3-8b, qwen35-9b and qwen35-27b at TP 2 and 4,
 * - every rank's plan (model_shard_plan): the query heads tile [0, n_head) rank after rank, each
 *   rank's query heads use exactly the KV heads it holds (GQA group = n_head / n_head_kv, KV heads
 *   replicated when fewer than the ranks), FFN / GDN / vocabulary slices tile their dimension;
 * - the rank's products (tests/common/tp_rank.c, the table the GPU test multiplies) exist and no
 *   row-parallel slice cuts a quantization block;
 * - on the CPU reference backend, attn_qk_prep + attention of every rank over its heads (its KV
 *   heads in a pool of its own, the GPU test's batches: a two-sequence prefill of 300 + 15 tokens,
 *   a decode step of both, and the 40 + 1 batch at an offset with its 2 x 8 block table) equal the
 *   unsharded layer's rows of those heads bit for bit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "tests/common/tp_rank.h"

static unsigned g_seed = 7;
static float frand(void) { /* uniform in [-1, 1) */
  g_seed = g_seed * 1664525u + 1013904223u;
  return (float)((g_seed >> 8) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* A batch of n_seq sequences (seq s: ntok[s] tokens from start[s]) over table[n_seq * max_blocks]. */
typedef struct {
  int32_t tok[320], pos[320], first[4], ntok[4], out[320];
} tb_t;
static be_batch_t mk(tb_t *tb, int n_seq, const int *start, const int *ntok, const int32_t *table, int max_blocks) {
  int t = 0;
  for (int s = 0; s < n_seq; s++) {
    tb->first[s] = t, tb->ntok[s] = ntok[s];
    for (int i = 0; i < ntok[s]; i++, t++) tb->pos[t] = start[s] + i, tb->tok[t] = 0, tb->out[t] = t;
  }
  return (be_batch_t){.n_tok = t, .n_seq = n_seq, .tok = tb->tok, .pos = tb->pos, .seq_first = tb->first,
                      .seq_ntok = tb->ntok, .block_table = (int32_t *)table, .max_blocks = max_blocks, .n_out = t,
                      .out_tok = tb->out};
}

/* One layer's attention (attn_qk_prep, then attention) of heads [h0, h0 + nh) and KV heads
 * [kv0, kv0 + nkv) of the full rows q (n x H x hd), k, v (n x KV x hd) on a fresh pool of its own;
 * writes the prepped q rows and the output of those heads (n x nh x hd). */
static void run_heads(const be_batch_t *const *steps, int n_steps, const float *const *q, const float *const *k,
                      const float *const *v, int H, int KV, int hd, int n_rot, int h0, int nh, int kv0, int nkv,
                      float **q_out, float **o_out) {
  gt_err_t err = {0};
  be_t *be;
  assert_int_equal(be_cpu_create(1, &be, &err), 0);
  assert_int_equal(be->ops->kv_init(be, 1, 64, 16, nkv * hd), 0);
  float *nw = malloc(sizeof(float) * (size_t)hd);
  for (int i = 0; i < hd; i++) nw[i] = 0.5f + 0.01f * (float)(i % 37);
  be_weight_t wq, wk;
  assert_int_equal(be_weight_upload(be, &wq, GT_TYPE_F32, 1, hd, nw, &err), 0);
  assert_int_equal(be_weight_upload(be, &wk, GT_TYPE_F32, 1, hd, nw, &err), 0);
  for (int s = 0; s < n_steps; s++) {
    const int n = steps[s]->n_tok;
    float *qs = malloc(sizeof(float) * (size_t)n * nh * hd), *ks = malloc(sizeof(float) * (size_t)n * nkv * hd),
          *vs = malloc(sizeof(float) * (size_t)n * nkv * hd);
    for (int t = 0; t < n; t++) { /* the rank's columns of each token row */
      memcpy(qs + (size_t)t * nh * hd, q[s] + ((size_t)t * H + h0) * hd, sizeof(float) * (size_t)nh * hd);
      memcpy(ks + (size_t)t * nkv * hd, k[s] + ((size_t)t * KV + kv0) * hd, sizeof(float) * (size_t)nkv * hd);
      memcpy(vs + (size_t)t * nkv * hd, v[s] + ((size_t)t * KV + kv0) * hd, sizeof(float) * (size_t)nkv * hd);
    }
    assert_int_equal(be->ops->set_batch(be, steps[s]), 0);
    be->ops->attn_qk_prep(be, 0, qs, ks, vs, &wq, &wk, nh, nkv, hd, n_rot, 1e7f, 1e-6f);
    be->ops->attention(be, 0, qs, o_out[s], nh, nkv, hd, 1.0f / sqrtf((float)hd));
    const int rc = be->ops->sync(be);
    if (rc) fail_msg("heads [%d, %d) KV [%d, %d) step %d: %s", h0, h0 + nh, kv0, kv0 + nkv, s, be->err.msg);
    memcpy(q_out[s], qs, sizeof(float) * (size_t)n * nh * hd);
    free(qs), free(ks), free(vs);
  }
  be_weight_free(be, &wq), be_weight_free(be, &wk);
  free(nw);
  be_destroy(be);
}

enum { N_STEPS = 3 };

/* attn_qk_prep + attention of each rank of n_ranks over its heads vs the unsharded layer. */
static void rank_attention(const char *who, const model_hparams_t *hp, const model_shard_t *sh, int n_ranks) {
  const int H = hp->n_head, KV = hp->n_head_kv, hd = hp->head_dim, n_rot = hp->n_rot;
  int32_t tab_a[2 * 20], tab_b[2 * 8];
  for (int i = 0; i < 40; i++) tab_a[i] = (i * 37 + 3) % 64;
  for (int i = 0; i < 16; i++) tab_b[i] = (i * 5 + 3) % 64;
  /* the GPU test's batches; tab_b's second sequence starts at 70 over blocks never stored (zero
   * in every pool) */
  tb_t tb[N_STEPS];
  const int s0[2] = {0, 0}, n0[2] = {300, 15}, s1[2] = {300, 15}, n1[2] = {1, 1}, s2[2] = {0, 70}, n2[2] = {40, 1};
  const be_batch_t b0 = mk(&tb[0], 2, s0, n0, tab_a, 20), b1 = mk(&tb[1], 2, s1, n1, tab_a, 20),
                   b2 = mk(&tb[2], 2, s2, n2, tab_b, 8);
  const be_batch_t *const steps[N_STEPS] = {&b0, &b1, &b2};
  float *q[N_STEPS], *k[N_STEPS], *v[N_STEPS], *fq[N_STEPS], *fo[N_STEPS], *rq[N_STEPS], *ro[N_STEPS];
  for (int s = 0; s < N_STEPS; s++) {
    const size_t n = (size_t)steps[s]->n_tok;
    q[s] = malloc(sizeof(float) * n * H * hd), k[s] = malloc(sizeof(float) * n * KV * hd);
    v[s] = malloc(sizeof(float) * n * KV * hd);
    for (size_t i = 0; i < n * H * hd; i++) q[s][i] = frand();
    for (size_t i = 0; i < n * KV * hd; i++) k[s][i] = frand(), v[s][i] = frand();
    fq[s] = malloc(sizeof(float) * n * H * hd), fo[s] = malloc(sizeof(float) * n * H * hd);
    rq[s] = malloc(sizeof(float) * n * H * hd), ro[s] = malloc(sizeof(float) * n * H * hd);
  }
  /* steps 0-1 share a pool (decode after prefill); step 2 has its own table: run it apart */
  run_heads(steps, 2, (const float *const *)q, (const float *const *)k, (const float *const *)v, H, KV, hd, n_rot, 0, H,
            0, KV, fq, fo);
  run_heads(steps + 2, 1, (const float *const *)q + 2, (const float *const *)k + 2, (const float *const *)v + 2, H, KV,
            hd, n_rot, 0, H, 0, KV, fq + 2, fo + 2);
  for (int r = 0; r < n_ranks; r++) {
    model_shard_t rs;
    gt_err_t err = {0};
    assert_int_equal(model_shard_plan(hp, r, n_ranks, &rs, &err), 0);
    run_heads(steps, 2, (const float *const *)q, (const float *const *)k, (const float *const *)v, H, KV, hd, n_rot,
              rs.head0, rs.n_head, rs.kv_head0, rs.n_head_kv, rq, ro);
    run_heads(steps + 2, 1, (const float *const *)q + 2, (const float *const *)k + 2, (const float *const *)v + 2, H,
              KV, hd, n_rot, rs.head0, rs.n_head, rs.kv_head0, rs.n_head_kv, rq + 2, ro + 2);
    for (int s = 0; s < N_STEPS; s++)
      for (int t = 0; t < steps[s]->n_tok; t++) {
        const size_t full = ((size_t)t * H + rs.head0) * hd, loc = (size_t)t * rs.n_head * hd,
                     len = sizeof(float) * (size_t)rs.n_head * hd;
        if (memcmp(fq[s] + full, rq[s] + loc, len) || memcmp(fo[s] + full, ro[s] + loc, len))
          fail_msg("%s rank %d (heads [%d, %d), KV heads [%d, %d)): step %d token %d differs from the unsharded layer",
                   who, r, rs.head0, rs.head0 + rs.n_head, rs.kv_head0, rs.kv_head0 + rs.n_head_kv, s, t);
      }
  }
  printf("  %s: attn_qk_prep + attention of %d ranks (H %d/%d hd %d per rank) = the unsharded layer, bitwise\n", who,
         n_ranks, sh->n_head, sh->n_head_kv, hd);
  for (int s = 0; s < N_STEPS; s++) free(q[s]), free(k[s]), free(v[s]), free(fq[s]), free(fo[s]), free(rq[s]), free(ro[s]);
}

/* Rank r's slices tile each dimension and its query heads use only the KV heads it holds. */
static void plans_tile(const char *who, const model_hparams_t *hp, int n_ranks) {
  const int group = hp->n_head / hp->n_head_kv;
  int next_head = 0, next_ff = 0, next_vocab = 0;
  for (int r = 0; r < n_ranks; r++) {
    model_shard_t s;
    gt_err_t err = {0};
    if (model_shard_plan(hp, r, n_ranks, &s, &err)) fail_msg("%s rank %d refuses to split: %s", who, r, err.msg);
    assert_int_equal(s.head0, next_head);
    assert_int_equal(s.ff0, next_ff);
    assert_int_equal(s.vocab0, next_vocab);
    next_head += s.n_head, next_ff += s.n_ff, next_vocab += s.n_vocab;
    for (int h = s.head0; h < s.head0 + s.n_head; h++)
      if (h / group < s.kv_head0 || h / group >= s.kv_head0 + s.n_head_kv)
        fail_msg("%s rank %d: query head %d uses KV head %d, outside its [%d, %d)", who, r, h, h / group, s.kv_head0,
                 s.kv_head0 + s.n_head_kv);
    assert_true(s.n_head_kv == (hp->n_head_kv >= n_ranks ? hp->n_head_kv / n_ranks : 1));
    if (hp->n_gdn_layers > 0) {
      assert_int_equal(s.gdn_n_v * n_ranks, hp->gdn_n_v);
      assert_int_equal(s.gdn_n_v % s.gdn_n_k, 0); /* local v-head j uses local k-head j % gdn_n_k */
    }
  }
  assert_int_equal(next_head, hp->n_head);
  assert_int_equal(next_ff, hp->n_ff);
  assert_int_equal(next_vocab, hp->n_vocab);
}

static void preset_case(const char *preset) {
  const mk_preset_t *p = mk_preset(preset);
  assert_non_null(p);
  const model_hparams_t hp = tpr_preset_hp(p);
  for (int n = 2; n <= 4; n *= 2) {
    char who[64];
    snprintf(who, sizeof who, "%s TP%d", preset, n);
    plans_tile(who, &hp, n);
    model_shard_t sh;
    gt_err_t err = {0};
    assert_int_equal(model_shard_plan(&hp, 0, n, &sh, &err), 0);
    tpr_product_t prod[TPR_MAX_PRODUCTS];
    const int np = tpr_rank_products(preset, &hp, &sh, prod, &err);
    if (np < 0) fail_msg("%s: %s", who, err.msg);
    int row_par = 0;
    for (int i = 0; i < np; i++) row_par += prod[i].row_parallel;
    printf("  %s rank 0: %d distinct products (%d row-parallel, none cutting a block)\n", who, np, row_par);
    assert_true(np >= 5 && row_par >= 2);
    rank_attention(who, &hp, &sh, n);
  }
}

static void test_qwen3_8b(void **st) { (void)st, preset_case("qwen3-8b"); }
static void test_qwen35_9b(void **st) { (void)st, preset_case("qwen35-9b"); }
static void test_qwen35_27b(void **st) { (void)st, preset_case("qwen35-27b"); }

/* A row-parallel slice that would cut a quantization block is refused naming the tensor: qwen3-8b
 * with one query head per rank keeps 128 columns of attn_output (Q4_K, blocks of 256). */
static void test_block_cut_named(void **st) {
  (void)st;
  const model_hparams_t hp = tpr_preset_hp(mk_preset("qwen3-8b"));
  model_shard_t sh = {0};
  gt_err_t err = {0};
  sh.n_ranks = 64, sh.n_head = 1, sh.n_head_kv = 1, sh.n_ff = hp.n_ff, sh.n_vocab = hp.n_vocab;
  tpr_product_t prod[TPR_MAX_PRODUCTS];
  assert_int_equal(tpr_rank_products("qwen3-8b", &hp, &sh, prod, &err), -1);
  printf("  %s\n", err.msg);
  assert_non_null(strstr(err.msg, "attn_output.weight"));
  assert_non_null(strstr(err.msg, "cut a block"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_8b),
      cmocka_unit_test(test_qwen35_9b),
      cmocka_unit_test(test_qwen35_27b),
      cmocka_unit_test(test_block_cut_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
