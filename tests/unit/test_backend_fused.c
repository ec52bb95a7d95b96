/* tests/unit/test_backend_fused.c — the CPU backend's fused ops (matmul_multi, ffn_swiglu,
 * attn_qk_prep, gdn_conv_qkv) against the unfused op sequences they replace, bit for bit, on random inputs:
 * several weight types (quantized ones included, mixed within one matmul_multi), row counts,
 * batches of several sequences at scattered positions with a shuffled block table, partial
 * rotary dims and rope_freq_bf16 on and off. Two CPU backends take the same inputs: one runs
 * the fused op, the other (its fused entries NULL) runs the model.h helpers' fallback, i.e. the
 * unfused sequence; outputs and KV pools are compared with memcmp. Bad arguments set a sticky
 * GT_EINVAL. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend_cpu_internal.h"
#include "engine/models/model.h"
#include "tools/quantize.h"

static uint32_t g_seed = 0x2545F491u;
static float frand(void) { /* uniform in [-1, 1) */
  g_seed = g_seed * 1664525u + 1013904223u;
  return (float)((g_seed >> 8) & 0xffffff) / (float)(1 << 23) - 1.0f;
}
static float *rnd(size_t n, float scale) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
  return p;
}

/* FUSED runs the ops under test; PLAIN has the same ops with the fused entries NULL, so the
 * model_* helpers run the unfused sequence on it. */
static be_t *FUSED, *PLAIN;
static be_ops_t plain_ops;

static int setup(void **state) {
  gt_err_t err = {0};
  if (be_cpu_create(2, &FUSED, &err) || be_cpu_create(2, &PLAIN, &err)) return -1;
  plain_ops = *PLAIN->ops;
  plain_ops.matmul_multi = NULL;
  plain_ops.ffn_swiglu = NULL;
  plain_ops.attn_qk_prep = NULL;
  plain_ops.gdn_conv_qkv = NULL;
  PLAIN->ops = &plain_ops;
  return 0;
}
static int teardown(void **state) {
  be_destroy(FUSED);
  be_destroy(PLAIN);
  return 0;
}

/* A weight [rows, cols] of type t, quantized from random floats, uploaded to both backends. */
typedef struct {
  be_weight_t f, p;
} wpair_t;
static wpair_t weight(gt_type_t t, int64_t rows, int64_t cols) {
  const size_t rb = dt_row_bytes(t, cols);
  assert_true(rb > 0);
  uint8_t *q = malloc(rb * (size_t)rows);
  float *src = rnd((size_t)cols, 0.5f);
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t i = 0; i < cols; i++) src[i] = frand() * 0.5f;
    assert_int_equal(qz_quantize_row(t, src, q + rb * (size_t)r, cols), 0);
  }
  wpair_t w;
  gt_err_t err = {0};
  assert_int_equal(be_weight_upload(FUSED, &w.f, t, rows, cols, q, &err), 0);
  assert_int_equal(be_weight_upload(PLAIN, &w.p, t, rows, cols, q, &err), 0);
  free(q);
  free(src);
  return w;
}
static void wdrop(wpair_t *w) {
  be_weight_free(FUSED, &w->f);
  be_weight_free(PLAIN, &w->p);
}

/* host copy of n floats in backend memory of both */
static float *dup2(be_t *be, const float *src, size_t n) {
  float *p = be->ops->alloc(be, sizeof(float) * (n ? n : 1));
  assert_non_null(p);
  if (n) memcpy(p, src, sizeof(float) * n);
  return p;
}

static void same(const char *what, const float *a, const float *b, size_t n) {
  if (memcmp(a, b, sizeof(float) * n) != 0) {
    size_t i = 0;
    while (i < n && memcmp(a + i, b + i, sizeof(float)) == 0) i++;
    fail_msg("%s: differs at %zu of %zu (%.9g vs %.9g)", what, i, n, (double)a[i], (double)b[i]);
  }
}

/* A batch of sequences: seq s has ntok[s] tokens from position start[s]. */
typedef struct {
  be_batch_t b;
  int32_t tok[128], pos[128], first[8], ntok[8], out[128], table[8 * 8];
} tbatch_t;
static void mk_batch(tbatch_t *tb, int n_seq, const int *start, const int *ntok, int max_blocks, int n_blocks) {
  int t = 0;
  for (int s = 0; s < n_seq; s++) {
    tb->first[s] = t;
    tb->ntok[s] = ntok[s];
    for (int i = 0; i < ntok[s]; i++, t++) {
      tb->pos[t] = start[s] + i;
      tb->tok[t] = 0;
      tb->out[t] = t;
    }
  }
  /* distinct physical blocks in a scrambled order */
  for (int i = 0; i < n_seq * max_blocks; i++) tb->table[i] = (i * 7 + 3) % n_blocks;
  tb->b = (be_batch_t){.n_tok = t, .n_seq = n_seq, .tok = tb->tok, .pos = tb->pos, .seq_first = tb->first,
                       .seq_ntok = tb->ntok, .block_table = tb->table, .max_blocks = max_blocks,
                       .n_out = t, .out_tok = tb->out};
  assert_int_equal(FUSED->ops->set_batch(FUSED, &tb->b), 0);
  assert_int_equal(PLAIN->ops->set_batch(PLAIN, &tb->b), 0);
}

/* ---- matmul_multi: 1..4 weights, mixed types, several row counts ---- */
static void test_matmul_multi(void **st) {
  const int64_t cols = 512;
  const gt_type_t sets[][4] = {
      {GT_TYPE_Q4_K, GT_TYPE_Q4_K, GT_TYPE_Q6_K, GT_TYPE_Q4_K}, /* qwen3 Q4_K_M-like: v in Q6_K */
      {GT_TYPE_BF16, GT_TYPE_BF16, GT_TYPE_BF16, GT_TYPE_F32},
      {GT_TYPE_Q8_0, GT_TYPE_F16, GT_TYPE_Q5_K, GT_TYPE_BF16},
  };
  const int64_t outs[4] = {96, 32, 32, 8};
  const int rows_list[] = {1, 3, 17, 40};
  for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
    wpair_t w[4];
    for (int k = 0; k < 4; k++) w[k] = weight(sets[si][k], outs[k], cols);
    for (int n = 1; n <= 4; n++) {
      for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++) {
        const int rows = rows_list[ri];
        float *x = rnd((size_t)rows * cols, 1.0f);
        float *xf = dup2(FUSED, x, (size_t)rows * cols), *xp = dup2(PLAIN, x, (size_t)rows * cols);
        const be_weight_t *wf[4], *wp[4];
        float *of[4], *op[4];
        for (int k = 0; k < n; k++) {
          wf[k] = &w[k].f;
          wp[k] = &w[k].p;
          of[k] = FUSED->ops->alloc(FUSED, sizeof(float) * (size_t)rows * outs[k]);
          op[k] = PLAIN->ops->alloc(PLAIN, sizeof(float) * (size_t)rows * outs[k]);
        }
        model_matmul_multi(FUSED, n, wf, xf, of, rows);
        model_matmul_multi(PLAIN, n, wp, xp, op, rows);
        assert_int_equal(FUSED->ops->sync(FUSED), 0);
        assert_int_equal(PLAIN->ops->sync(PLAIN), 0);
        for (int k = 0; k < n; k++) {
          char what[80];
          snprintf(what, sizeof what, "matmul_multi set %zu n %d rows %d out %d", si, n, rows, k);
          same(what, of[k], op[k], (size_t)rows * outs[k]);
          FUSED->ops->free(FUSED, of[k]);
          PLAIN->ops->free(PLAIN, op[k]);
        }
        FUSED->ops->free(FUSED, xf);
        PLAIN->ops->free(PLAIN, xp);
        free(x);
      }
    }
    for (int k = 0; k < 4; k++) wdrop(&w[k]);
  }
  /* bad arguments: weight count out of range, different cols */
  wpair_t a = weight(GT_TYPE_F32, 4, 64), b = weight(GT_TYPE_F32, 4, 32);
  float *o[5];
  float *xx = FUSED->ops->alloc(FUSED, sizeof(float) * 64);
  for (int k = 0; k < 5; k++) o[k] = FUSED->ops->alloc(FUSED, sizeof(float) * 4);
  const be_weight_t *w5[5] = {&a.f, &a.f, &a.f, &a.f, &a.f}, *wab[2] = {&a.f, &b.f};
  FUSED->ops->matmul_multi(FUSED, 0, w5, xx, o, 1);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->matmul_multi(FUSED, BE_MATMUL_MULTI_MAX + 1, w5, xx, o, 1);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->matmul_multi(FUSED, 2, wab, xx, o, 1);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->matmul_multi(FUSED, 4, w5, xx, o, 1);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_OK);
  for (int k = 0; k < 5; k++) FUSED->ops->free(FUSED, o[k]);
  FUSED->ops->free(FUSED, xx);
  wdrop(&a);
  wdrop(&b);
}

/* ---- ffn_swiglu through model_swiglu_ffn (gate and the down product) ---- */
static void test_ffn_swiglu(void **st) {
  const int64_t d = 256, ff = 512;
  const gt_type_t types[][3] = {{GT_TYPE_Q4_K, GT_TYPE_Q4_K, GT_TYPE_Q6_K},
                                {GT_TYPE_BF16, GT_TYPE_BF16, GT_TYPE_BF16},
                                {GT_TYPE_Q8_0, GT_TYPE_F16, GT_TYPE_F32}};
  const int rows_list[] = {1, 2, 9, 33};
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
    wpair_t wg = weight(types[ti][0], ff, d), wu = weight(types[ti][1], ff, d), wd = weight(types[ti][2], d, ff);
    for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++) {
      const int rows = rows_list[ri];
      float *h = rnd((size_t)rows * d, 1.0f);
      float *hf = dup2(FUSED, h, (size_t)rows * d), *hp = dup2(PLAIN, h, (size_t)rows * d);
      float *gf = FUSED->ops->alloc(FUSED, sizeof(float) * rows * ff), *gp = PLAIN->ops->alloc(PLAIN, sizeof(float) * rows * ff);
      float *uf = FUSED->ops->alloc(FUSED, sizeof(float) * rows * ff), *up = PLAIN->ops->alloc(PLAIN, sizeof(float) * rows * ff);
      float *of = FUSED->ops->alloc(FUSED, sizeof(float) * rows * d), *op = PLAIN->ops->alloc(PLAIN, sizeof(float) * rows * d);
      model_t mf = {.be = FUSED}, mp = {.be = PLAIN};
      model_swiglu_ffn(&mf, &wg.f, &wu.f, &wd.f, hf, gf, uf, of, rows);
      model_swiglu_ffn(&mp, &wg.p, &wu.p, &wd.p, hp, gp, up, op, rows);
      assert_int_equal(FUSED->ops->sync(FUSED), 0);
      assert_int_equal(PLAIN->ops->sync(PLAIN), 0);
      char what[80];
      snprintf(what, sizeof what, "ffn_swiglu types %zu rows %d gate", ti, rows);
      same(what, gf, gp, (size_t)rows * ff);
      snprintf(what, sizeof what, "ffn_swiglu types %zu rows %d out", ti, rows);
      same(what, of, op, (size_t)rows * d);
      float *bufs_f[] = {hf, gf, uf, of}, *bufs_p[] = {hp, gp, up, op};
      for (int k = 0; k < 4; k++) {
        FUSED->ops->free(FUSED, bufs_f[k]);
        PLAIN->ops->free(PLAIN, bufs_p[k]);
      }
      free(h);
    }
    wdrop(&wg), wdrop(&wu), wdrop(&wd);
  }
  /* gate and up of different shapes */
  wpair_t a = weight(GT_TYPE_F32, 8, 64), b = weight(GT_TYPE_F32, 4, 64);
  float *x = FUSED->ops->alloc(FUSED, sizeof(float) * 64), *g = FUSED->ops->alloc(FUSED, sizeof(float) * 8),
        *u = FUSED->ops->alloc(FUSED, sizeof(float) * 8);
  FUSED->ops->ffn_swiglu(FUSED, &a.f, &b.f, x, g, u, 1);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->free(FUSED, x), FUSED->ops->free(FUSED, g), FUSED->ops->free(FUSED, u);
  wdrop(&a), wdrop(&b);
}

/* ---- attn_qk_prep: q/k norms + rope + kv_store ---- */
static void qk_prep_case(int n_head, int n_kv, int hd, int n_rot, int bf16, float theta) {
  const int bt = 16, max_blocks = 8, n_blocks = 32, layers = 2, layer = 1, kvd = n_kv * hd;
  assert_int_equal(FUSED->ops->kv_init(FUSED, layers, n_blocks, bt, kvd), 0);
  assert_int_equal(PLAIN->ops->kv_init(PLAIN, layers, n_blocks, bt, kvd), 0);
  FUSED->rope_freq_bf16 = PLAIN->rope_freq_bf16 = bf16;
  /* prefill from 0, a decode token deep in its context, a chunk crossing a block boundary */
  const int start[3] = {0, 100, 13}, ntok[3] = {7, 1, 6};
  tbatch_t tb;
  mk_batch(&tb, 3, start, ntok, max_blocks, n_blocks);
  const int n = tb.b.n_tok;
  float *q = rnd((size_t)n * n_head * hd, 2.0f), *k = rnd((size_t)n * kvd, 2.0f), *v = rnd((size_t)n * kvd, 1.0f);
  float *qn = rnd((size_t)hd, 1.0f), *kn = rnd((size_t)hd, 1.0f);
  be_weight_t qwf, kwf, qwp, kwp;
  gt_err_t err = {0};
  assert_int_equal(be_weight_upload(FUSED, &qwf, GT_TYPE_F32, 1, hd, qn, &err), 0);
  assert_int_equal(be_weight_upload(FUSED, &kwf, GT_TYPE_F32, 1, hd, kn, &err), 0);
  assert_int_equal(be_weight_upload(PLAIN, &qwp, GT_TYPE_F32, 1, hd, qn, &err), 0);
  assert_int_equal(be_weight_upload(PLAIN, &kwp, GT_TYPE_F32, 1, hd, kn, &err), 0);
  float *qf = dup2(FUSED, q, (size_t)n * n_head * hd), *kf = dup2(FUSED, k, (size_t)n * kvd),
        *vf = dup2(FUSED, v, (size_t)n * kvd);
  float *qp = dup2(PLAIN, q, (size_t)n * n_head * hd), *kp = dup2(PLAIN, k, (size_t)n * kvd),
        *vp = dup2(PLAIN, v, (size_t)n * kvd);
  const float eps = 1e-6f;
  model_attn_qk_prep(FUSED, layer, qf, kf, vf, &qwf, &kwf, n_head, n_kv, hd, n_rot, theta, eps, n);
  model_attn_qk_prep(PLAIN, layer, qp, kp, vp, &qwp, &kwp, n_head, n_kv, hd, n_rot, theta, eps, n);
  assert_int_equal(FUSED->ops->sync(FUSED), 0);
  assert_int_equal(PLAIN->ops->sync(PLAIN), 0);
  char what[96];
  snprintf(what, sizeof what, "attn_qk_prep H %d/%d hd %d rot %d bf16 %d: q", n_head, n_kv, hd, n_rot, bf16);
  same(what, qf, qp, (size_t)n * n_head * hd);
  snprintf(what, sizeof what, "attn_qk_prep H %d/%d hd %d rot %d bf16 %d: k", n_head, n_kv, hd, n_rot, bf16);
  same(what, kf, kp, (size_t)n * kvd);
  const be_cpu_t *cf = (const be_cpu_t *)FUSED, *cp = (const be_cpu_t *)PLAIN;
  const size_t pool = (size_t)n_blocks * bt * kvd;
  for (int l = 0; l < layers; l++) {
    snprintf(what, sizeof what, "attn_qk_prep hd %d rot %d bf16 %d: K pool %d", hd, n_rot, bf16, l);
    same(what, cf->k[l], cp->k[l], pool);
    snprintf(what, sizeof what, "attn_qk_prep hd %d rot %d bf16 %d: V pool %d", hd, n_rot, bf16, l);
    same(what, cf->v[l], cp->v[l], pool);
  }
  /* the op did something: the stored k rows are the normalised, rotated k, v verbatim */
  double moved = 0;
  for (size_t i = 0; i < (size_t)n * kvd; i++) moved += fabs((double)kf[i] - k[i]);
  assert_true(moved > 0);
  for (int t = 0; t < n; t++) {
    const int s = t < 7 ? 0 : t < 8 ? 1 : 2, p = tb.pos[t];
    const long slot = (long)tb.table[s * max_blocks + p / bt] * bt + p % bt;
    assert_memory_equal(cf->k[layer] + slot * kvd, kf + (size_t)t * kvd, sizeof(float) * kvd);
    assert_memory_equal(cf->v[layer] + slot * kvd, v + (size_t)t * kvd, sizeof(float) * kvd);
  }
  /* bad shapes: kv_dim mismatch, odd n_rot, layer out of range */
  FUSED->ops->attn_qk_prep(FUSED, layer, qf, kf, vf, &qwf, &kwf, n_head, n_kv + 1, hd, n_rot, theta, eps);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->attn_qk_prep(FUSED, layer, qf, kf, vf, &qwf, &kwf, n_head, n_kv, hd, n_rot - 1, theta, eps);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->attn_qk_prep(FUSED, layers, qf, kf, vf, &qwf, &kwf, n_head, n_kv, hd, n_rot, theta, eps);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  float *bufs_f[] = {qf, kf, vf}, *bufs_p[] = {qp, kp, vp};
  for (int i = 0; i < 3; i++) {
    FUSED->ops->free(FUSED, bufs_f[i]);
    PLAIN->ops->free(PLAIN, bufs_p[i]);
  }
  be_weight_free(FUSED, &qwf), be_weight_free(FUSED, &kwf), be_weight_free(PLAIN, &qwp), be_weight_free(PLAIN, &kwp);
  free(q), free(k), free(v), free(qn), free(kn);
  FUSED->rope_freq_bf16 = PLAIN->rope_freq_bf16 = 0;
}

static void test_attn_qk_prep(void **st) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    qk_prep_case(8, 2, 128, 128, bf16, 1e6f);  /* qwen3 */
    qk_prep_case(4, 4, 64, 16, bf16, 1e4f);    /* partial rotary, MHA */
    qk_prep_case(6, 2, 72, 36, bf16, 5e5f);    /* head_dim not a power of two */
  }
}

/* ---- gdn_conv_qkv: conv1d_silu + q/k/v split + q/k l2norm, state continuing over steps ---- */

/* Sets a batch of n_seq sequences (seq s: ntok[s] tokens from start[s], state slot slot[s]) on
 * both backends. */
static void gdn_batch(tbatch_t *tb, int32_t *slot, int n_seq, const int *start, const int *ntok) {
  int t = 0;
  for (int s = 0; s < n_seq; s++) {
    tb->first[s] = t;
    tb->ntok[s] = ntok[s];
    for (int i = 0; i < ntok[s]; i++, t++) {
      tb->pos[t] = start[s] + i;
      tb->tok[t] = 0;
      tb->out[t] = t;
    }
  }
  for (int i = 0; i < n_seq; i++) tb->table[i] = i;
  tb->b = (be_batch_t){.n_tok = t, .n_seq = n_seq, .tok = tb->tok, .pos = tb->pos, .seq_first = tb->first,
                       .seq_ntok = tb->ntok, .block_table = tb->table, .max_blocks = 1, .n_out = t,
                       .out_tok = tb->out, .state_slot = slot};
  assert_int_equal(FUSED->ops->set_batch(FUSED, &tb->b), 0);
  assert_int_equal(PLAIN->ops->set_batch(PLAIN, &tb->b), 0);
}

static void gdn_conv_case(int nk, int dk, int nv, int dv, int K) {
  const int kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, layers = 3, layer = 1, slots = 5;
  const size_t conv_dim = (size_t)(K - 1) * C;
  assert_int_equal(FUSED->ops->state_init(FUSED, layers, slots, conv_dim, 8), 0);
  assert_int_equal(PLAIN->ops->state_init(PLAIN, layers, slots, conv_dim, 8), 0);
  be_cpu_t *cf = (be_cpu_t *)FUSED, *cp = (be_cpu_t *)PLAIN;
  const size_t st_n = (size_t)layers * slots * conv_dim;
  for (size_t i = 0; i < st_n; i++) cf->conv[i] = cp->conv[i] = frand();
  float *wt = rnd((size_t)C * K, 0.7f);
  be_weight_t wf, wp;
  gt_err_t err = {0};
  assert_int_equal(be_weight_upload(FUSED, &wf, GT_TYPE_F32, C, K, wt, &err), 0);
  assert_int_equal(be_weight_upload(PLAIN, &wp, GT_TYPE_F32, C, K, wt, &err), 0);
  const float eps = 1e-6f, q_scale = 1.0f / sqrtf((float)dk);
  /* step 0: a prefill chunk from 0, one continuing mid-sequence, a decode token; step 1: the
   * chunks continue (one more prefill chunk, decode tokens); steps 2, 3: decode only */
  enum { N_STEP = 4, N_SEQ = 3 };
  const int start[N_STEP][N_SEQ] = {{0, 40, 9}, {7, 45, 10}, {11, 46, 11}, {12, 47, 12}};
  const int ntok[N_STEP][N_SEQ] = {{7, 5, 1}, {4, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  int32_t slot[N_SEQ] = {3, 0, 4};
  for (int step = 0; step < N_STEP; step++) {
    tbatch_t tb;
    gdn_batch(&tb, slot, N_SEQ, start[step], ntok[step]);
    const int n = tb.b.n_tok;
    float *x = rnd((size_t)n * C, 2.0f);
    float *xf = dup2(FUSED, x, (size_t)n * C), *xp = dup2(PLAIN, x, (size_t)n * C);
    float *qf, *kf, *vf, *qp, *kp, *vp, *conv;
    qf = FUSED->ops->alloc(FUSED, sizeof(float) * (size_t)n * kd);
    kf = FUSED->ops->alloc(FUSED, sizeof(float) * (size_t)n * kd);
    vf = FUSED->ops->alloc(FUSED, sizeof(float) * (size_t)n * vd);
    qp = PLAIN->ops->alloc(PLAIN, sizeof(float) * (size_t)n * kd);
    kp = PLAIN->ops->alloc(PLAIN, sizeof(float) * (size_t)n * kd);
    vp = PLAIN->ops->alloc(PLAIN, sizeof(float) * (size_t)n * vd);
    conv = PLAIN->ops->alloc(PLAIN, sizeof(float) * (size_t)n * C);
    model_gdn_conv_qkv(FUSED, layer, xf, &wf, K, NULL, qf, kf, vf, nk, dk, nv, dv, eps, q_scale, n);
    model_gdn_conv_qkv(PLAIN, layer, xp, &wp, K, conv, qp, kp, vp, nk, dk, nv, dv, eps, q_scale, n);
    assert_int_equal(FUSED->ops->sync(FUSED), 0);
    assert_int_equal(PLAIN->ops->sync(PLAIN), 0);
    char what[96];
    snprintf(what, sizeof what, "gdn_conv_qkv nk %d dk %d nv %d dv %d K %d step %d: q", nk, dk, nv, dv, K, step);
    same(what, qf, qp, (size_t)n * kd);
    snprintf(what, sizeof what, "gdn_conv_qkv nk %d dk %d nv %d dv %d K %d step %d: k", nk, dk, nv, dv, K, step);
    same(what, kf, kp, (size_t)n * kd);
    snprintf(what, sizeof what, "gdn_conv_qkv nk %d dk %d nv %d dv %d K %d step %d: v", nk, dk, nv, dv, K, step);
    same(what, vf, vp, (size_t)n * vd);
    snprintf(what, sizeof what, "gdn_conv_qkv nk %d dk %d nv %d dv %d K %d step %d: conv state", nk, dk, nv, dv, K,
             step);
    same(what, cf->conv, cp->conv, st_n);
    /* the op did something: q rows have norm ~q_scale, k rows ~1, v is the conv output */
    for (int r = 0; r < n * nk; r++) {
      double sq = 0, sk = 0;
      for (int i = 0; i < dk; i++) {
        sq += (double)qf[(size_t)r * dk + i] * qf[(size_t)r * dk + i];
        sk += (double)kf[(size_t)r * dk + i] * kf[(size_t)r * dk + i];
      }
      assert_true(fabs(sqrt(sq) - q_scale) < 1e-3 * q_scale && fabs(sqrt(sk) - 1.0) < 1e-3);
    }
    for (int t = 0; t < n; t++) assert_memory_equal(vf + (size_t)t * vd, conv + (size_t)t * C + 2 * kd, sizeof(float) * vd);
    float *bufs_f[] = {xf, qf, kf, vf}, *bufs_p[] = {xp, qp, kp, vp, conv};
    for (int i = 0; i < 4; i++) FUSED->ops->free(FUSED, bufs_f[i]);
    for (int i = 0; i < 5; i++) PLAIN->ops->free(PLAIN, bufs_p[i]);
    free(x);
  }
  /* bad arguments: no heads, weight not [C, K], layer out of range, C not matching the state */
  float *buf = FUSED->ops->alloc(FUSED, sizeof(float) * 16 * (size_t)C);
  FUSED->ops->gdn_conv_qkv(FUSED, layer, buf, &wf, K, buf, buf, buf, 0, dk, nv, dv, eps, q_scale);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->gdn_conv_qkv(FUSED, layer, buf, &wf, K + 1, buf, buf, buf, nk, dk, nv, dv, eps, q_scale);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->gdn_conv_qkv(FUSED, layers, buf, &wf, K, buf, buf, buf, nk, dk, nv, dv, eps, q_scale);
  assert_int_equal(FUSED->ops->sync(FUSED), GT_EINVAL);
  FUSED->ops->free(FUSED, buf);
  be_weight_free(FUSED, &wf), be_weight_free(PLAIN, &wp);
  free(wt);
}

static void test_gdn_conv_qkv(void **st) {
  gdn_conv_case(2, 64, 4, 64, 4);     /* qwen35-tiny */
  gdn_conv_case(16, 128, 32, 128, 4); /* qwen35-9b */
  gdn_conv_case(3, 40, 5, 24, 3);     /* odd: dk != dv, not multiples of 32 */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_multi),
      cmocka_unit_test(test_ffn_swiglu),
      cmocka_unit_test(test_attn_qk_prep),
      cmocka_unit_test(test_gdn_conv_qkv),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
