/* engine/backend/backend_cpu_gdn.c — Gated DeltaNet ops of the CPU reference backend.
 *
 * The sequential recurrence here is the reference every other form (chunked scan, CUDA) is
 * checked against. All math is fp32. Each op works on the current batch (be_set_batch): a
 * sequence s owns tokens [seq_first[s], seq_first[s] + seq_ntok[s]) and continues from the
 * recurrent state of its slot state_slot[s] (zeroed by the batch code when it starts at pos 0).
 * With state_pos_slot (backend.h), the state after the sequence's token j is also written to
 * its position slot j (pos_slot below; validated by the batch code).
 *
 * State layouts (per GDN layer and slot, see backend_cpu_internal.h):
 *   conv state [K-1, C]: the last K-1 inputs of the depthwise conv, oldest first.
 *   ssm state  [n_v, d_k, d_v]: S of each value head, S[i][j] = key dim i, value dim j.
 * Errors (bad shapes, missing slots) are recorded in be->err (sticky for the step); the op then
 * does nothing. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend/backend_cpu_internal.h"

#define GDN_MAX_KERNEL 16
#define GDN_MAX_DV 1024

#ifdef _OPENMP
#define GDN_PRAGMA(x) _Pragma(#x)
#else
#define GDN_PRAGMA(x)
#endif

static int failed(be_t *be) { return be->err.code != GT_OK; }

static int fail(be_t *be, int code, const char *op, const char *what) {
  if (be->err.code == GT_OK) gt_err_set(&be->err, code, "cpu %s: %s", op, what);
  return code;
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* softplus with torch's threshold (x > 20 returns x) */
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static int nthreads(const be_cpu_t *c) { return c->n_threads > 0 ? c->n_threads : 1; }

/* Checks that the batch carries state slots for every sequence and that `layer` exists. */
static int check_state(be_t *be, const char *op, int layer) {
  be_cpu_t *c = (be_cpu_t *)be;
  if (!c->conv || !c->ssm || c->st_slots <= 0) return fail(be, GT_EINVAL, op, "recurrent state not initialised (state_init)");
  if (layer < 0 || layer >= c->st_layers) return fail(be, GT_EINVAL, op, "GDN layer index out of range");
  if (c->b.n_seq > 0 && (!c->b.state_slot || !c->state_slot))
    return fail(be, GT_EINVAL, op, "batch has no state_slot for a hybrid model");
  for (int s = 0; s < c->b.n_seq; s++)
    if (c->state_slot[s] < 0 || c->state_slot[s] >= c->st_slots) return fail(be, GT_EINVAL, op, "state slot out of range");
  return GT_OK;
}

/* The slot that receives sequence s's state after its token i, or -1 (none, or i is its last). */
static inline int pos_slot(const be_cpu_t *c, int s, int i) {
  if (!c->b.state_pos_slot || i + 1 >= c->seq_ntok[s] || i >= BE_POS_SLOTS) return -1;
  return c->b.state_pos_slot[s * BE_POS_SLOTS + i];
}

static int is_f32_vec(const be_weight_t *w, int64_t n) {
  return w && w->data && w->type == GT_TYPE_F32 && w->rows * w->cols == n;
}

void cpu_conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K) {
  be_cpu_t *c = (be_cpu_t *)be;
  static const char op[] = "conv1d_silu";
  if (failed(be)) return;
  if (C <= 0 || K < 2 || K > GDN_MAX_KERNEL) { fail(be, GT_EINVAL, op, "bad channel count or kernel size"); return; }
  if (!w || !w->data || w->type != GT_TYPE_F32 || w->rows != C || w->cols != K) {
    fail(be, GT_EINVAL, op, "weight must be F32 [C, K]");
    return;
  }
  if (check_state(be, op, layer) != GT_OK) return;
  if (c->conv_dim != (size_t)(K - 1) * (size_t)C) { fail(be, GT_EINVAL, op, "conv state size != (K-1) * C"); return; }
  const float *wt = (const float *)w->data; /* [C, K] */
  const int n_seq = c->b.n_seq;
  const int64_t work = (int64_t)n_seq * C;

  /* one (sequence, channel) per item: slide a K-wide window over the sequence's tokens. Reading
   * x[t, ch] before writing out[t, ch] keeps this correct when out == x. */
  GDN_PRAGMA(omp parallel for num_threads(nthreads(c)) schedule(static))
  for (int64_t it = 0; it < work; it++) {
    const int s = (int)(it / C), ch = (int)(it % C);
    float *st = cpu_conv_state(c, layer, c->state_slot[s]); /* [K-1, C] */
    const float *wc = wt + (size_t)ch * K;
    float win[GDN_MAX_KERNEL];
    for (int r = 0; r < K - 1; r++) win[r] = st[(size_t)r * C + ch];
    const int t0 = c->seq_first[s], n = c->seq_ntok[s];
    for (int i = 0; i < n; i++) {
      const size_t idx = (size_t)(t0 + i) * C + ch;
      win[K - 1] = x[idx];
      float acc = 0.0f;
      for (int j = 0; j < K; j++) acc += wc[j] * win[j];
      out[idx] = silu(acc);
      for (int j = 0; j < K - 1; j++) win[j] = win[j + 1];
      const int ps = pos_slot(c, s, i);
      if (ps >= 0) {
        float *pst = cpu_conv_state(c, layer, ps);
        for (int r = 0; r < K - 1; r++) pst[(size_t)r * C + ch] = win[r];
      }
    }
    for (int r = 0; r < K - 1; r++) st[(size_t)r * C + ch] = win[r];
  }
}

/* x[r] = x[r] * scale / sqrt(||x[r]||² + eps): the l2norm of HF transformers / fla that Qwen3.5 was
 * trained with (ggml's x / max(||x||, eps) differs by ~eps / (2 ||x||²), which the golden logits
 * resolve: 4.6e-5 vs 1.4e-6 row error at position 0 of qwen35-tiny). */
void cpu_l2norm(be_t *be, float *x, int rows, int d, float eps, float scale) {
  be_cpu_t *c = (be_cpu_t *)be;
  if (failed(be)) return;
  if (rows < 0 || d <= 0) { fail(be, GT_EINVAL, "l2norm", "bad shape"); return; }
  GDN_PRAGMA(omp parallel for num_threads(nthreads(c)) schedule(static) if (rows > 64))
  for (int r = 0; r < rows; r++) {
    float *xr = x + (size_t)r * d;
    float ss = 0.0f;
    for (int i = 0; i < d; i++) ss += xr[i] * xr[i];
    const float f = scale / sqrtf(ss + eps);
    for (int i = 0; i < d; i++) xr[i] *= f;
  }
}

/* conv1d_silu into a [n_tok, C] scratch, the q / k / v column ranges copied out, l2norm of q and
 * k: the unfused op sequence, so bit for bit its results. */
void cpu_gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *q, float *k, float *v,
                      int n_k, int d_k, int n_v, int d_v, float eps, float q_scale) {
  be_cpu_t *c = (be_cpu_t *)be;
  static const char op[] = "gdn_conv_qkv";
  if (failed(be)) return;
  if (n_k <= 0 || d_k <= 0 || n_v <= 0 || d_v <= 0 || (int64_t)n_k * d_k > INT32_MAX / 4 ||
      (int64_t)n_v * d_v > INT32_MAX / 4) {
    fail(be, GT_EINVAL, op, "bad head counts or dims");
    return;
  }
  const int n = c->b.n_tok, kd = n_k * d_k, vd = n_v * d_v, C = 2 * kd + vd;
  float *conv = cpu_scratch(c, sizeof(float) * ((size_t)n * C + 1)); /* [n_tok, C] */
  if (!conv) {
    fail(be, GT_ENOMEM, op, "out of memory");
    return;
  }
  cpu_conv1d_silu(be, layer, x, conv, w, C, K);
  if (!failed(be)) {
    for (int t = 0; t < n; t++) {
      const float *row = conv + (size_t)t * C;
      memcpy(q + (size_t)t * kd, row, sizeof(float) * (size_t)kd);
      memcpy(k + (size_t)t * kd, row + kd, sizeof(float) * (size_t)kd);
      memcpy(v + (size_t)t * vd, row + 2 * kd, sizeof(float) * (size_t)vd);
    }
    cpu_l2norm(be, q, n * n_k, d_k, eps, q_scale);
    cpu_l2norm(be, k, n * n_k, d_k, eps, 1.0f);
  }
}

void cpu_gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                   const be_weight_t *dt_bias, float *g, float *beta, int n_v) {
  be_cpu_t *c = (be_cpu_t *)be;
  if (failed(be)) return;
  if (n_v <= 0 || !is_f32_vec(a, n_v) || !is_f32_vec(dt_bias, n_v)) {
    fail(be, GT_EINVAL, "gdn_gates", "a and dt_bias must be F32 vectors of n_v");
    return;
  }
  const float *av = (const float *)a->data, *bv = (const float *)dt_bias->data;
  const size_t n = (size_t)c->b.n_tok * n_v;
  for (size_t i = 0; i < n; i++) {
    const int h = (int)(i % (size_t)n_v);
    const float al = alpha[i], bi = beta_in[i]; /* read both before writing (aliasing allowed) */
    g[i] = av[h] * softplus(al + bv[h]);
    beta[i] = sigmoid(bi);
  }
}

void cpu_gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v,
                  const float *g, const float *beta, float *out, int n_k, int n_v, int d_k, int d_v) {
  be_cpu_t *c = (be_cpu_t *)be;
  static const char op[] = "gdn_scan";
  if (failed(be)) return;
  if (n_k <= 0 || n_v <= 0 || d_k <= 0 || d_v <= 0 || d_v > GDN_MAX_DV || n_v % n_k != 0) {
    fail(be, GT_EINVAL, op, "bad head counts or dims (n_v must be a multiple of n_k)");
    return;
  }
  if (check_state(be, op, layer) != GT_OK) return;
  if (c->ssm_dim != (size_t)n_v * d_k * d_v) { fail(be, GT_EINVAL, op, "ssm state size != n_v * d_k * d_v"); return; }
  const int n_seq = c->b.n_seq;
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;
  const int64_t work = (int64_t)n_seq * n_v;

  /* one (sequence, value head) per item; S is that head's [d_k, d_v] state */
  GDN_PRAGMA(omp parallel for num_threads(nthreads(c)) schedule(static))
  for (int64_t it = 0; it < work; it++) {
    const int s = (int)(it / n_v), h = (int)(it % n_v), kh = h % n_k;
    float *S = cpu_ssm_state(c, layer, c->state_slot[s]) + (size_t)h * d_k * d_v;
    float kv[GDN_MAX_DV], o[GDN_MAX_DV];
    const int t0 = c->seq_first[s], n = c->seq_ntok[s];
    for (int i = 0; i < n; i++) {
      const size_t t = (size_t)(t0 + i);
      const float *qt = q + t * qk_ld + (size_t)kh * d_k;
      const float *kt = k + t * qk_ld + (size_t)kh * d_k;
      const float *vt = v + t * v_ld + (size_t)h * d_v;
      const float decay = expf(g[t * n_v + h]), b = beta[t * n_v + h];
      /* S *= exp(g); kv = Sᵀk */
      for (int j = 0; j < d_v; j++) kv[j] = 0.0f;
      for (int r = 0; r < d_k; r++) {
        float *Sr = S + (size_t)r * d_v;
        const float kr = kt[r];
        for (int j = 0; j < d_v; j++) {
          Sr[j] *= decay;
          kv[j] += Sr[j] * kr;
        }
      }
      /* delta = beta (v - Sᵀk) (kept in kv); S += k ⊗ delta; o = Sᵀq */
      for (int j = 0; j < d_v; j++) {
        kv[j] = b * (vt[j] - kv[j]);
        o[j] = 0.0f;
      }
      for (int r = 0; r < d_k; r++) {
        float *Sr = S + (size_t)r * d_v;
        const float kr = kt[r], qr = qt[r];
        for (int j = 0; j < d_v; j++) {
          Sr[j] += kr * kv[j];
          o[j] += Sr[j] * qr;
        }
      }
      float *ot = out + t * v_ld + (size_t)h * d_v;
      memcpy(ot, o, sizeof(float) * (size_t)d_v);
      const int ps = pos_slot(c, s, i);
      if (ps >= 0)
        memcpy(cpu_ssm_state(c, layer, ps) + (size_t)h * d_k * d_v, S, sizeof(float) * (size_t)d_k * d_v);
    }
  }
}

void cpu_rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out,
                       int rows, int d, float eps) {
  be_cpu_t *c = (be_cpu_t *)be;
  if (failed(be)) return;
  if (rows < 0 || d <= 0 || !is_f32_vec(w, d)) { fail(be, GT_EINVAL, "rmsnorm_gated", "weight must be F32 [d]"); return; }
  const float *wv = (const float *)w->data;
  GDN_PRAGMA(omp parallel for num_threads(nthreads(c)) schedule(static) if (rows > 64))
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * d, *zr = z + (size_t)r * d;
    float *orow = out + (size_t)r * d;
    float ss = 0.0f;
    for (int i = 0; i < d; i++) ss += xr[i] * xr[i];
    const float f = 1.0f / sqrtf(ss / (float)d + eps);
    for (int i = 0; i < d; i++) orow[i] = xr[i] * f * wv[i] * silu(zr[i]);
  }
}
