/* engine/backend/gdn_chunked.c — chunked gated delta rule; see gdn_chunked.h for the math. */
#include "engine/backend/gdn_chunked.h"

#include <math.h>
#include <string.h>

size_t gdn_chunked_ws_floats(int chunk, int d_k, int d_v) {
  if (chunk <= 0 || d_k <= 0 || d_v <= 0) return 0;
  /* KK, QK [L, L]; D [L, d_v] */
  return 2 * (size_t)chunk * chunk + (size_t)chunk * d_v;
}

static float dotf(const float *a, const float *b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* One chunk of L tokens (pointers already at its first token). */
static void chunk_step(const float *q, const float *k, const float *v, const float *g, const float *beta,
                       size_t qk_ld, size_t v_ld, size_t gb_ld, float *out, float *S, int L, int d_k, int d_v,
                       float *ws) {
  float *KK = ws, *QK = ws + (size_t)L * L, *D = ws + 2 * (size_t)L * L; /* [L,L] [L,L] [L,d_v] */
  double cum[GDN_CHUNK_MAX];
  double c = 0.0;
  for (int i = 0; i < L; i++) {
    c += (double)g[(size_t)i * gb_ld];
    cum[i] = c;
  }
  /* pairwise products within the chunk (lower triangle) */
  for (int i = 0; i < L; i++) {
    const float *ki = k + (size_t)i * qk_ld, *qi = q + (size_t)i * qk_ld;
    for (int j = 0; j <= i; j++) {
      const float *kj = k + (size_t)j * qk_ld;
      KK[(size_t)i * L + j] = j < i ? dotf(ki, kj, d_k) : 0.0f;
      QK[(size_t)i * L + j] = dotf(qi, kj, d_k);
    }
  }
  /* R_i = beta_i (v_i - exp(c_i) S0ᵀk_i) into D; out_i = exp(c_i) S0ᵀq_i */
  for (int i = 0; i < L; i++) {
    const float *ki = k + (size_t)i * qk_ld, *qi = q + (size_t)i * qk_ld, *vi = v + (size_t)i * v_ld;
    float *Di = D + (size_t)i * d_v, *oi = out + (size_t)i * v_ld;
    const float e = expf((float)cum[i]), b = beta[(size_t)i * gb_ld];
    for (int col = 0; col < d_v; col++) {
      Di[col] = 0.0f;
      oi[col] = 0.0f;
    }
    for (int r = 0; r < d_k; r++) {
      const float *Sr = S + (size_t)r * d_v;
      const float kr = ki[r], qr = qi[r];
      for (int col = 0; col < d_v; col++) {
        Di[col] += Sr[col] * kr;
        oi[col] += Sr[col] * qr;
      }
    }
    for (int col = 0; col < d_v; col++) {
      Di[col] = b * (vi[col] - e * Di[col]);
      oi[col] *= e;
    }
  }
  /* forward substitution: D_i -= sum_{j<i} beta_i exp(c_i - c_j) (k_i·k_j) D_j */
  for (int i = 1; i < L; i++) {
    float *Di = D + (size_t)i * d_v;
    const float b = beta[(size_t)i * gb_ld];
    for (int j = 0; j < i; j++) {
      const float a = b * expf((float)(cum[i] - cum[j])) * KK[(size_t)i * L + j];
      const float *Dj = D + (size_t)j * d_v;
      for (int col = 0; col < d_v; col++) Di[col] -= a * Dj[col];
    }
  }
  /* o_i += sum_{j<=i} exp(c_i - c_j) (q_i·k_j) D_j */
  for (int i = 0; i < L; i++) {
    float *oi = out + (size_t)i * v_ld;
    for (int j = 0; j <= i; j++) {
      const float a = expf((float)(cum[i] - cum[j])) * QK[(size_t)i * L + j];
      const float *Dj = D + (size_t)j * d_v;
      for (int col = 0; col < d_v; col++) oi[col] += a * Dj[col];
    }
  }
  /* S = exp(c_last) S0 + sum_j exp(c_last - c_j) k_j ⊗ D_j */
  const float eL = expf((float)cum[L - 1]);
  for (size_t i = 0; i < (size_t)d_k * d_v; i++) S[i] *= eL;
  for (int j = 0; j < L; j++) {
    const float w = expf((float)(cum[L - 1] - cum[j]));
    const float *kj = k + (size_t)j * qk_ld, *Dj = D + (size_t)j * d_v;
    for (int r = 0; r < d_k; r++) {
      const float a = w * kj[r];
      float *Sr = S + (size_t)r * d_v;
      for (int col = 0; col < d_v; col++) Sr[col] += a * Dj[col];
    }
  }
}

int gdn_chunked_head(const float *q, const float *k, const float *v, const float *g, const float *beta,
                     size_t qk_ld, size_t v_ld, size_t gb_ld, float *out, float *S, int n, int d_k, int d_v,
                     int chunk, float *ws) {
  if (n < 0 || d_k <= 0 || d_v <= 0 || chunk <= 0 || chunk > GDN_CHUNK_MAX || !ws) return -1;
  for (int t0 = 0; t0 < n; t0 += chunk) {
    const int L = n - t0 < chunk ? n - t0 : chunk;
    chunk_step(q + (size_t)t0 * qk_ld, k + (size_t)t0 * qk_ld, v + (size_t)t0 * v_ld, g + (size_t)t0 * gb_ld,
               beta + (size_t)t0 * gb_ld, qk_ld, v_ld, gb_ld, out + (size_t)t0 * v_ld, S, L, d_k, d_v, ws);
  }
  return 0;
}

int gdn_chunked_seq(const float *q, const float *k, const float *v, const float *g, const float *beta, float *out,
                    float *S, int n, int n_k, int n_v, int d_k, int d_v, int chunk, float *ws) {
  if (n_k <= 0 || n_v <= 0 || n_v % n_k) return -1;
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;
  for (int h = 0; h < n_v; h++) {
    const int kh = h % n_k;
    int rc = gdn_chunked_head(q + (size_t)kh * d_k, k + (size_t)kh * d_k, v + (size_t)h * d_v, g + h, beta + h, qk_ld,
                              v_ld, (size_t)n_v, out + (size_t)h * d_v, S + (size_t)h * d_k * d_v, n, d_k, d_v,
                              chunk, ws);
    if (rc) return rc;
  }
  return 0;
}
