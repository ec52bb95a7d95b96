/* engine/backend/backend_cpu.c — the CPU reference backend: memory, batch, dense and attention ops.
 *
 * Every op computes each output element with the same code and summation order whatever the
 * batch composition or thread count, so results are batch-invariant and deterministic.
 * Parallelism: OpenMP over output features / tokens / heads (every core by default). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "engine/backend/backend_cpu_internal.h"
#include "engine/backend/sampler.h"

#define CPU(be) ((be_cpu_t *)(be))

static void set_err(be_t *be, int code, const char *what) {
  if (be->err.code == GT_OK) gt_err_set(&be->err, code, "cpu backend: %s", what);
}

/* ---- memory ---- */

static void *cpu_alloc(be_t *be, size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
  memset(p, 0, bytes);
  return p;
}

static void cpu_free(be_t *be, void *p) { free(p); }

static int cpu_upload(be_t *be, void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return GT_OK;
}

static int cpu_sync(be_t *be) {
  int code = be->err.code;
  be->err.code = GT_OK; /* the message stays readable in be->err.msg */
  return code;
}

static int cpu_download(be_t *be, void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return cpu_sync(be);
}

/* sampler_pick on a copy of each row: bit-identical to sampling the downloaded logits on the host */
static int cpu_sample(be_t *be, const float *logits, int n_rows, int n_vocab, const be_sample_row_t *rows,
                      int32_t *ids) {
  float *row = cpu_scratch(CPU(be), (sizeof(float) + sizeof(int32_t)) * (size_t)n_vocab); /* row, then idx */
  if (!row) {
    if (be->err.code == GT_OK) gt_err_set(&be->err, GT_ENOMEM, "cpu sample: out of memory");
    return cpu_sync(be);
  }
  int32_t *idx = (int32_t *)(row + n_vocab);
  for (int r = 0; r < n_rows; r++) {
    const be_sample_row_t *q = &rows[r];
    sampler_pick_t pk = {.temperature = q->temperature, .top_k = q->top_k, .top_p = q->top_p, .min_p = q->min_p,
                         .idx = idx};
    memcpy(row, logits + (size_t)r * n_vocab, sizeof(float) * (size_t)n_vocab);
    ids[r] = sampler_pick(&pk, row, n_vocab, q->u);
  }
  return cpu_sync(be);
}

/* sampler_argmax of each row (what cpu_sample gives a greedy row) into dev_ids, host memory here;
 * the sticky error stays for the next sync */
static int cpu_argmax_dev(be_t *be, const float *logits, int n_rows, int n_vocab, int32_t *dev_ids) {
  for (int r = 0; r < n_rows; r++) dev_ids[r] = sampler_argmax(logits + (size_t)r * n_vocab, n_vocab);
  return be->err.code;
}

/* *p = realloc'd copy of src[0..n) (at least one element allocated). */
static int copy_i32(int32_t **p, const int32_t *src, int n) {
  int32_t *q = realloc(*p, sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  if (!q) return -1;
  *p = q;
  if (src && n > 0) memcpy(q, src, sizeof(int32_t) * (size_t)n);
  return 0;
}

static int cpu_set_batch(be_t *be, const be_batch_t *b) {
  be_cpu_t *c = CPU(be);
  if (b->n_tok < 0 || b->n_seq < 0 || b->n_out < 0 || b->max_blocks < 0)
    return gt_err_set(&be->err, GT_EINVAL, "cpu backend: negative batch sizes");
  int n_bt = b->n_seq * b->max_blocks;
  if (copy_i32(&c->tok, b->tok, b->n_tok) || copy_i32(&c->pos, b->pos, b->n_tok) ||
      copy_i32(&c->seq_of_tok, NULL, b->n_tok) || copy_i32(&c->seq_first, b->seq_first, b->n_seq) ||
      copy_i32(&c->seq_ntok, b->seq_ntok, b->n_seq) || copy_i32(&c->state_slot, b->state_slot, b->n_seq) ||
      copy_i32(&c->block_table, b->block_table, n_bt) || copy_i32(&c->out_tok, b->out_tok, b->n_out) ||
      (b->state_pos_slot && copy_i32(&c->state_pos_slot, b->state_pos_slot, b->n_seq * BE_POS_SLOTS)))
    return gt_err_set(&be->err, GT_ENOMEM, "cpu backend: batch of %d tokens", b->n_tok);
  if (b->tok_src) /* tokens in backend memory (= host memory here) */
    for (int t = 0; t < b->n_tok; t++)
      if (b->tok_src[t] >= 0) c->tok[t] = b->tok_dev[b->tok_src[t]];
  for (int s = 0; s < b->n_seq; s++) {
    if (b->seq_first[s] < 0 || b->seq_ntok[s] < 0 || b->seq_first[s] + b->seq_ntok[s] > b->n_tok)
      return gt_err_set(&be->err, GT_EINVAL, "cpu backend: sequence %d spans tokens [%d, %d) of %d",
                        s, b->seq_first[s], b->seq_first[s] + b->seq_ntok[s], b->n_tok);
    for (int t = 0; t < b->seq_ntok[s]; t++) c->seq_of_tok[b->seq_first[s] + t] = s;
  }
  c->b = *b;
  c->b.tok = c->tok;
  c->b.pos = c->pos;
  c->b.seq_first = c->seq_first;
  c->b.seq_ntok = c->seq_ntok;
  c->b.block_table = c->block_table;
  c->b.state_slot = b->state_slot ? c->state_slot : NULL;
  c->b.out_tok = c->out_tok;
  c->b.state_pos_slot = b->state_pos_slot ? c->state_pos_slot : NULL;

  /* a sequence starting at position 0 starts from zero recurrent state */
  if (b->state_slot && c->st_slots > 0) {
    for (int s = 0; s < b->n_seq; s++) {
      int slot = b->state_slot[s];
      if (slot < 0 || slot >= c->st_slots)
        return gt_err_set(&be->err, GT_EINVAL, "cpu backend: state slot %d out of [0, %d)", slot, c->st_slots);
      if (b->seq_ntok[s] > 0 && b->pos[b->seq_first[s]] == 0) be->ops->state_zero(be, slot);
    }
  }
  if (b->state_pos_slot) {
    if (!b->state_slot) return gt_err_set(&be->err, GT_EINVAL, "cpu backend: state_pos_slot without state_slot");
    for (int s = 0; s < b->n_seq; s++)
      for (int j = 0; j + 1 < b->seq_ntok[s] && j < BE_POS_SLOTS; j++) {
        const int ps = b->state_pos_slot[s * BE_POS_SLOTS + j];
        if (ps < 0) continue;
        if (b->seq_ntok[s] > BE_GRAPH_MAX_Q)
          return gt_err_set(&be->err, GT_EINVAL, "cpu backend: sequence %d of %d tokens (> %d) has position slots",
                            s, b->seq_ntok[s], BE_GRAPH_MAX_Q);
        if (ps >= c->st_slots)
          return gt_err_set(&be->err, GT_EINVAL, "cpu backend: position slot %d out of [0, %d)", ps, c->st_slots);
      }
  }
  return GT_OK;
}

/* ---- caches ---- */

static void free_kv(be_cpu_t *c) {
  for (int l = 0; l < c->kv_layers; l++) {
    free(c->k[l]);
    free(c->v[l]);
  }
  free(c->k);
  free(c->v);
  c->k = c->v = NULL;
  c->kv_layers = 0;
}

static int cpu_kv_init(be_t *be, int n_layers, int n_blocks, int block_tokens, int kv_dim) {
  be_cpu_t *c = CPU(be);
  free_kv(c);
  size_t n = (size_t)n_blocks * block_tokens * kv_dim;
  c->k = calloc((size_t)n_layers, sizeof(float *));
  c->v = calloc((size_t)n_layers, sizeof(float *));
  if (!c->k || !c->v) return gt_err_set(&be->err, GT_ENOMEM, "cpu backend: kv tables");
  c->kv_layers = n_layers;
  for (int l = 0; l < n_layers; l++) {
    c->k[l] = calloc(n, sizeof(float));
    c->v[l] = calloc(n, sizeof(float));
    if (!c->k[l] || !c->v[l])
      return gt_err_set(&be->err, GT_ENOMEM, "cpu backend: kv pool of %zu floats per layer", n);
  }
  c->kv_blocks = n_blocks;
  c->kv_block_tokens = block_tokens;
  c->kv_dim = kv_dim;
  return GT_OK;
}

static int cpu_state_init(be_t *be, int n_layers, int n_slots, size_t conv_dim, size_t ssm_dim) {
  be_cpu_t *c = CPU(be);
  free(c->conv);
  free(c->ssm);
  c->conv = calloc((size_t)n_layers * n_slots * conv_dim + 1, sizeof(float));
  c->ssm = calloc((size_t)n_layers * n_slots * ssm_dim + 1, sizeof(float));
  if (!c->conv || !c->ssm) return gt_err_set(&be->err, GT_ENOMEM, "cpu backend: recurrent state");
  c->st_layers = n_layers;
  c->st_slots = n_slots;
  c->conv_dim = conv_dim;
  c->ssm_dim = ssm_dim;
  return GT_OK;
}

static int cpu_state_copy(be_t *be, int dst, int src) {
  be_cpu_t *c = CPU(be);
  if (dst < 0 || src < 0 || dst >= c->st_slots || src >= c->st_slots)
    return gt_err_set(&be->err, GT_EINVAL, "cpu backend: state_copy %d <- %d of %d slots", dst, src, c->st_slots);
  for (int l = 0; l < c->st_layers; l++) {
    memcpy(cpu_conv_state(c, l, dst), cpu_conv_state(c, l, src), c->conv_dim * sizeof(float));
    memcpy(cpu_ssm_state(c, l, dst), cpu_ssm_state(c, l, src), c->ssm_dim * sizeof(float));
  }
  return GT_OK;
}

static int cpu_kv_block_copy(be_t *be, int dst, int src) {
  be_cpu_t *c = CPU(be);
  if (dst < 0 || src < 0 || dst >= c->kv_blocks || src >= c->kv_blocks)
    return gt_err_set(&be->err, GT_EINVAL, "cpu backend: kv_block_copy %d <- %d of %d blocks", dst, src, c->kv_blocks);
  const size_t per = (size_t)c->kv_block_tokens * c->kv_dim; /* floats of one block */
  for (int l = 0; l < c->kv_layers; l++) {
    memcpy(c->k[l] + (size_t)dst * per, c->k[l] + (size_t)src * per, per * sizeof(float));
    memcpy(c->v[l] + (size_t)dst * per, c->v[l] + (size_t)src * per, per * sizeof(float));
  }
  return GT_OK;
}

static int cpu_state_zero(be_t *be, int slot) {
  be_cpu_t *c = CPU(be);
  if (slot < 0 || slot >= c->st_slots)
    return gt_err_set(&be->err, GT_EINVAL, "cpu backend: state_zero %d of %d slots", slot, c->st_slots);
  for (int l = 0; l < c->st_layers; l++) {
    memset(cpu_conv_state(c, l, slot), 0, c->conv_dim * sizeof(float));
    memset(cpu_ssm_state(c, l, slot), 0, c->ssm_dim * sizeof(float));
  }
  return GT_OK;
}

/* ---- dense ops ---- */

static void cpu_embed(be_t *be, const be_weight_t *w, float *out) {
  be_cpu_t *c = CPU(be);
  int n = c->b.n_tok;
  int bad = 0;
#pragma omp parallel for num_threads(c->n_threads) reduction(| : bad)
  for (int t = 0; t < n; t++) {
    int32_t id = c->tok[t];
    if (id < 0 || id >= w->rows) {
      bad = 1;
      continue;
    }
    dt_dequant_row(w->type, (const char *)w->data + (size_t)id * w->row_bytes, out + (size_t)t * w->cols, w->cols);
  }
  if (bad) set_err(be, GT_EINVAL, "embed: token id out of vocabulary");
}

static void cpu_gather_out(be_t *be, const float *x, float *out, int d) {
  be_cpu_t *c = CPU(be);
  for (int i = 0; i < c->b.n_out; i++) {
    int t = c->out_tok[i];
    if (t < 0 || t >= c->b.n_tok) {
      set_err(be, GT_EINVAL, "gather_out: token index out of batch");
      return;
    }
    memcpy(out + (size_t)i * d, x + (size_t)t * d, sizeof(float) * (size_t)d);
  }
}

/* Tiling of matmul: a task is up to MM_OTILE consecutive output features (fewer when that
 * leaves threads idle); inside it, x is walked in chunks of MM_RCHUNK rows and dt_dot_rows
 * decodes each weight block once per chunk. Tiles and chunks only change the order in which
 * out[r, o] are produced, never how one is computed. */
#define MM_OTILE 16
#define MM_RCHUNK 16

static void cpu_matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows) {
  be_cpu_t *c = CPU(be);
  const int64_t n_out = w->rows, k = w->cols;
  const int nt = c->n_threads > 0 ? c->n_threads : 1;
  int64_t otile = (n_out + nt - 1) / nt;
  if (otile > MM_OTILE) otile = MM_OTILE;
  if (otile < 1) otile = 1;
  const int64_t n_tiles = (n_out + otile - 1) / otile;
  /* each out[r, o] is dt_dot_row(W[o], x[r]) bit for bit (dt_dot_rows guarantees it), whatever
   * `rows` is (batch invariance) */
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (n_tiles > 1 && nt > 1)
  for (int64_t tile = 0; tile < n_tiles; tile++) {
    const int64_t o0 = tile * otile, o1 = o0 + otile < n_out ? o0 + otile : n_out;
    for (int r0 = 0; r0 < rows; r0 += MM_RCHUNK) {
      int nr = rows - r0 < MM_RCHUNK ? rows - r0 : MM_RCHUNK;
      const float *xr = x + (size_t)r0 * k;
      for (int64_t o = o0; o < o1; o++)
        dt_dot_rows(w->type, (const char *)w->data + (size_t)o * w->row_bytes, xr, (size_t)k, nr, k,
                    out + (size_t)r0 * n_out + o, (size_t)n_out);
    }
  }
}

static void rmsnorm_row(const float *x, const float *w, float *out, int d, float eps) {
  double ss = 0;
  for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
  float scale = (float)(1.0 / sqrt(ss / d + eps));
  for (int i = 0; i < d; i++) out[i] = x[i] * scale * w[i];
}

static void cpu_rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps) {
  be_cpu_t *c = CPU(be);
  if (w->type != GT_TYPE_F32 || w->rows * w->cols != d) {
    set_err(be, GT_EINVAL, "rmsnorm: weight must be F32 of the row size");
    return;
  }
#pragma omp parallel for num_threads(c->n_threads) if (rows > 64)
  for (int r = 0; r < rows; r++) rmsnorm_row(x + (size_t)r * d, w->data, out + (size_t)r * d, d, eps);
}

static void cpu_add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows,
                            int d, float eps) {
  for (size_t i = 0; i < (size_t)rows * d; i++) x[i] += delta[i];
  cpu_rmsnorm(be, x, w, out, rows, d, eps);
}

static void cpu_add(be_t *be, float *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void cpu_logits_mask(be_t *be, float *x, const uint32_t *mask, const uint32_t *rmap, int rows, int n_vocab) {
  const size_t words = ((size_t)n_vocab + 31) / 32;
  for (int r = 0; r < rows; r++)
    if (rmap[r] != BE_MASK_NONE) sampler_mask_logits(x + (size_t)r * n_vocab, mask + (size_t)rmap[r] * words, n_vocab);
}

static void cpu_rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta) {
  be_cpu_t *c = CPU(be);
  int half = n_rot / 2;
  int n = c->b.n_tok;
  /* per-dimension frequencies, computed once per call with the same expressions as before
   * (they depend on i only): freq[i] = theta^(-2i/n_rot), inv_bf[i] = HF's bf16 inv_freq */
  double freq_s[64];
  float inv_s[64];
  double *freq = half <= 64 ? freq_s : malloc(sizeof(double) * (size_t)half);
  float *inv_bf = half <= 64 ? inv_s : malloc(sizeof(float) * (size_t)half);
  if (!freq || !inv_bf) {
    if (freq != freq_s) free(freq);
    if (inv_bf != inv_s) free(inv_bf);
    set_err(be, GT_ENOMEM, "rope: out of memory");
    return;
  }
  for (int i = 0; i < half; i++) {
    freq[i] = pow((double)theta, -2.0 * i / n_rot);
    if (be->rope_freq_bf16)
      inv_bf[i] = dt_bf16_to_f32(dt_f32_to_bf16((float)(1.0 / pow((double)theta, 2.0 * i / n_rot))));
  }
#pragma omp parallel for num_threads(c->n_threads) if (n > 16)
  for (int t = 0; t < n; t++) {
    double p = c->pos[t];
    for (int i = 0; i < half; i++) {
      double ang = p * freq[i];
      if (be->rope_freq_bf16) /* HF: inv_freq (bf16) . float() * pos in fp32 */
        ang = (double)((float)p * inv_bf[i]);
      float cs = (float)cos(ang), sn = (float)sin(ang);
      for (int h = 0; h < n_head; h++) {
        float *v = x + ((size_t)t * n_head + h) * head_dim;
        float a = v[i], b = v[i + half];
        v[i] = a * cs - b * sn;
        v[i + half] = a * sn + b * cs;
      }
    }
  }
  if (freq != freq_s) free(freq);
  if (inv_bf != inv_s) free(inv_bf);
}

static void cpu_swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

static void cpu_mul_sigmoid(be_t *be, float *x, const float *g, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

static void cpu_copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols) {
  for (int r = 0; r < rows; r++) memmove(dst + (size_t)r * dst_ld, src + (size_t)r * src_ld, sizeof(float) * (size_t)cols);
}

/* ---- attention ---- */

/* Physical slot of (sequence s, position p) in the pool, or -1 when out of the table/pool. */
static long kv_slot(const be_cpu_t *c, int s, int p) {
  int lb = p / c->kv_block_tokens;
  if (p < 0 || lb >= c->b.max_blocks) return -1;
  int pb = c->block_table[(size_t)s * c->b.max_blocks + lb];
  if (pb < 0 || pb >= c->kv_blocks) return -1;
  return (long)pb * c->kv_block_tokens + p % c->kv_block_tokens;
}

static void cpu_kv_store(be_t *be, int layer, const float *k, const float *v) {
  be_cpu_t *c = CPU(be);
  if (layer < 0 || layer >= c->kv_layers) {
    set_err(be, GT_EINVAL, "kv_store: layer out of range");
    return;
  }
  for (int t = 0; t < c->b.n_tok; t++) {
    long slot = kv_slot(c, c->seq_of_tok[t], c->pos[t]);
    if (slot < 0) {
      set_err(be, GT_EINVAL, "kv_store: position outside the sequence's blocks");
      return;
    }
    float *kd = c->k[layer] + (size_t)slot * c->kv_dim, *vd = c->v[layer] + (size_t)slot * c->kv_dim;
    memcpy(kd, k + (size_t)t * c->kv_dim, sizeof(float) * (size_t)c->kv_dim);
    memcpy(vd, v + (size_t)t * c->kv_dim, sizeof(float) * (size_t)c->kv_dim);
    if (c->kv_round_bf16)
      for (int i = 0; i < c->kv_dim; i++) {
        kd[i] = dt_bf16_to_f32(dt_f32_to_bf16(kd[i]));
        vd[i] = dt_bf16_to_f32(dt_f32_to_bf16(vd[i]));
      }
  }
}

/* fp32 pools either way; BF16 rounds what kv_store writes (see be_ops_t.kv_set_type) */
static int cpu_kv_set_type(be_t *be, gt_type_t t) {
  if (t != GT_TYPE_F32 && t != GT_TYPE_BF16) return GT_EUNSUPPORTED;
  CPU(be)->kv_round_bf16 = t == GT_TYPE_BF16;
  return GT_OK;
}
static gt_type_t cpu_kv_type(be_t *be) { return GT_TYPE_F32; }

/* sc[p] = (q . K[slots[p]]) * scale for p < ctx, K rows k_ld floats apart from kbase. Each dot
 * is the plain sequential sum d += q[i] * k[i] (i = 0..d-1); four positions are summed side by
 * side only to overlap their dependency chains, so every sc[p] has the bits of the one-position
 * loop. */
static void att_scores(const float *restrict q, const float *kbase, size_t k_ld, const long *slots, int ctx, int d,
                       float scale, float *restrict sc) {
  int p = 0;
  for (; p + 4 <= ctx; p += 4) {
    const float *k0 = kbase + (size_t)slots[p] * k_ld, *k1 = kbase + (size_t)slots[p + 1] * k_ld;
    const float *k2 = kbase + (size_t)slots[p + 2] * k_ld, *k3 = kbase + (size_t)slots[p + 3] * k_ld;
    float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    for (int i = 0; i < d; i++) {
      d0 += q[i] * k0[i];
      d1 += q[i] * k1[i];
      d2 += q[i] * k2[i];
      d3 += q[i] * k3[i];
    }
    sc[p] = d0 * scale;
    sc[p + 1] = d1 * scale;
    sc[p + 2] = d2 * scale;
    sc[p + 3] = d3 * scale;
  }
  for (; p < ctx; p++) {
    const float *kp = kbase + (size_t)slots[p] * k_ld;
    float dd = 0;
    for (int i = 0; i < d; i++) dd += q[i] * kp[i];
    sc[p] = dd * scale;
  }
}

/* out[i] = sum_p (sc[p] * inv) * V[slots[p]][i], summed over p in order for each i (lanes over i
 * are independent, so the 4-wide form has the bits of the scalar one). acc: d floats of scratch
 * (distinct from V, so the compiler may keep it in vectors). */
static void att_values(const float *vbase, size_t v_ld, const long *slots, const float *sc, float inv, int ctx,
                       int d, float *restrict acc, float *out) {
  typedef float v4 __attribute__((vector_size(16)));
  for (int i = 0; i < d; i++) acc[i] = 0;
  const int d4 = d & ~3;
  for (int p = 0; p < ctx; p++) {
    const float *restrict vp = vbase + (size_t)slots[p] * v_ld;
    const float wgt = sc[p] * inv;
    const v4 wv = {wgt, wgt, wgt, wgt};
    for (int i = 0; i < d4; i += 4) {
      v4 a, v;
      memcpy(&a, acc + i, sizeof a);
      memcpy(&v, vp + i, sizeof v);
      a += wv * v;
      memcpy(acc + i, &a, sizeof a);
    }
    for (int i = d4; i < d; i++) acc[i] += wgt * vp[i];
  }
  memcpy(out, acc, sizeof(float) * (size_t)d);
}

static void cpu_attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                          float scale) {
  be_cpu_t *c = CPU(be);
  if (layer < 0 || layer >= c->kv_layers || n_kv_head * head_dim != c->kv_dim || n_head % n_kv_head) {
    set_err(be, GT_EINVAL, "attention: layer or head shape does not match the KV pool");
    return;
  }
  const int n = c->b.n_tok, group = n_head / n_kv_head;
  int max_ctx = 0;
  for (int t = 0; t < n; t++)
    if (c->pos[t] + 1 > max_ctx) max_ctx = c->pos[t] + 1;
  int bad = 0;
#pragma omp parallel num_threads(c->n_threads) reduction(| : bad)
  {
    float *sc = malloc(sizeof(float) * (size_t)(max_ctx > 0 ? max_ctx : 1));
    long *slots = malloc(sizeof(long) * (size_t)(max_ctx > 0 ? max_ctx : 1));
    float *acc = malloc(sizeof(float) * (size_t)(head_dim > 0 ? head_dim : 1));
    int last_t = -1;
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int t = 0; t < n; t++) {
      for (int h = 0; h < n_head; h++) {
        if (!sc || !slots || !acc) {
          bad = 1;
          continue;
        }
        const int s = c->seq_of_tok[t], ctx = c->pos[t] + 1, kvh = h / group;
        if (t != last_t) {
          for (int p = 0; p < ctx; p++) {
            slots[p] = kv_slot(c, s, p);
            if (slots[p] < 0) bad = 1;
          }
          last_t = t;
        }
        if (bad) continue;
        const float *qh = q + ((size_t)t * n_head + h) * head_dim;
        const float *kbase = c->k[layer] + (size_t)kvh * head_dim;
        att_scores(qh, kbase, (size_t)c->kv_dim, slots, ctx, head_dim, scale, sc);
        float mx = -INFINITY;
        for (int p = 0; p < ctx; p++)
          if (sc[p] > mx) mx = sc[p];
        double sum = 0;
        for (int p = 0; p < ctx; p++) {
          sc[p] = expf(sc[p] - mx);
          sum += sc[p];
        }
        float inv = (float)(1.0 / sum);
        float *oh = out + ((size_t)t * n_head + h) * head_dim;
        att_values(c->v[layer] + (size_t)kvh * head_dim, (size_t)c->kv_dim, slots, sc, inv, ctx, head_dim, acc, oh);
      }
    }
    free(sc);
    free(slots);
    free(acc);
  }
  if (bad) set_err(be, GT_EINVAL, "attention: position outside the sequence's blocks (or out of memory)");
}

/* ---- fused ops: the unfused op sequences, so results are bit for bit those of the ops ---- */

static void cpu_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[],
                             int rows) {
  if (n < 1 || n > BE_MATMUL_MULTI_MAX) {
    set_err(be, GT_EINVAL, "matmul_multi: weight count out of [1, BE_MATMUL_MULTI_MAX]");
    return;
  }
  for (int i = 1; i < n; i++)
    if (w[i]->cols != w[0]->cols) {
      set_err(be, GT_EINVAL, "matmul_multi: weights differ in cols");
      return;
    }
  for (int i = 0; i < n; i++) cpu_matmul(be, w[i], x, out[i], rows);
}

static void cpu_ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate,
                           float *up, int rows) {
  if (wg->rows != wu->rows || wg->cols != wu->cols) {
    set_err(be, GT_EINVAL, "ffn_swiglu: gate and up weights differ in shape");
    return;
  }
  cpu_matmul(be, wg, x, gate, rows);
  cpu_matmul(be, wu, x, up, rows);
  cpu_swiglu(be, gate, up, gate, (size_t)rows * (size_t)wg->rows);
}

static void cpu_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *q_norm,
                             const be_weight_t *k_norm, int n_head, int n_kv_head, int head_dim, int n_rot,
                             float theta, float eps) {
  be_cpu_t *c = CPU(be);
  if (layer < 0 || layer >= c->kv_layers || n_kv_head * head_dim != c->kv_dim || n_head <= 0 || n_rot <= 0 ||
      n_rot > head_dim || n_rot % 2) {
    set_err(be, GT_EINVAL, "attn_qk_prep: layer, head shape or n_rot does not match the KV pool");
    return;
  }
  const int n = c->b.n_tok;
  cpu_rmsnorm(be, q, q_norm, q, n * n_head, head_dim, eps);
  cpu_rmsnorm(be, k, k_norm, k, n * n_kv_head, head_dim, eps);
  cpu_rope(be, q, n_head, head_dim, n_rot, theta);
  cpu_rope(be, k, n_kv_head, head_dim, n_rot, theta);
  cpu_kv_store(be, layer, k, v);
}

/* ---- ranks ---- */

/* Through the rank group's communicator (engine/backend/comm.h); one rank: nothing to do. Every
 * rank takes part even after an error of its own, so the others never wait for it; the wait
 * and the sum are timed into comm_ns. */
static void cpu_all_reduce(be_t *be, float *x, size_t n) {
  be_cpu_t *c = CPU(be);
  if (!c->comm || be->n_ranks == 1) return;
  const int64_t t0 = gt_now_ns();
  int rc = c->comm->ops->all_reduce(c->comm, be->rank, x, n);
  c->comm_ns += (uint64_t)(gt_now_ns() - t0);
  c->comm_calls++;
  if (rc) set_err(be, rc, "all_reduce: another rank failed (communicator aborted)");
}

void be_cpu_comm_stats(be_t *be, uint64_t *calls, uint64_t *ns) {
  *calls = CPU(be)->comm_calls;
  *ns = CPU(be)->comm_ns;
}

static void cpu_destroy(be_t *be) {
  be_cpu_t *c = CPU(be);
  free_kv(c);
  free(c->conv);
  free(c->ssm);
  free(c->scratch);
  free(c->tok);
  free(c->pos);
  free(c->seq_of_tok);
  free(c->seq_first);
  free(c->seq_ntok);
  free(c->block_table);
  free(c->state_slot);
  free(c->state_pos_slot);
  free(c->out_tok);
  free(c);
}

static int cpu_mem_info(be_t *be, be_mem_info_t *out) { return be_host_mem_info(out, &be->err); }

static const be_ops_t cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .sync = cpu_sync,
    .kv_init = cpu_kv_init,
    .state_init = cpu_state_init,
    .state_copy = cpu_state_copy,
    .kv_block_copy = cpu_kv_block_copy,
    .state_zero = cpu_state_zero,
    .set_batch = cpu_set_batch,
#define CPU_OP(name) .name = cpu_##name,
    BE_OPS(CPU_OP)
#undef CPU_OP
    .all_reduce = cpu_all_reduce,
    .sample = cpu_sample,
    .argmax_dev = cpu_argmax_dev,
    .mem_info = cpu_mem_info,
    .kv_set_type = cpu_kv_set_type,
    .kv_type = cpu_kv_type,
};

int be_cpu_create(int n_threads, be_t **out, gt_err_t *err) {
  return be_cpu_create_rank(n_threads, 0, NULL, out, err);
}

int be_cpu_create_rank(int n_threads, int rank, be_comm_t *comm, be_t **out, gt_err_t *err) {
  const int n_ranks = comm ? comm->n_ranks : 1;
  if (rank < 0 || rank >= n_ranks)
    return gt_err_set(err, GT_EINVAL, "cpu backend: rank %d of %d", rank, n_ranks);
  be_cpu_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "cpu backend: out of memory");
  c->base.ops = &cpu_ops;
  c->base.rank = rank;
  c->base.n_ranks = n_ranks;
  c->comm = comm;
  c->n_threads = n_threads > 0 ? n_threads : omp_get_max_threads(); /* honours OMP_NUM_THREADS */
  *out = &c->base;
  return GT_OK;
}
