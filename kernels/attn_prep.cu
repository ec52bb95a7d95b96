/* kernels/attn_prep.cu — see attn_prep.cuh. Block (token, head) over the n_head q heads then the
 * n_kv_head k heads. Phase 1 is kernels/rmsnorm.cu's row code (same thread count, element
 * assignment and reduction tree, so the same sum of squares), the normalised row kept in shared
 * memory; phase 2 is kernels/rope.cu's pair rotation on it, written back in place and, for k
 * heads, into the K pool together with the v row (kernels/kv_store.cu's slot, flag and bf16
 * rounding). */
#include "kernels/attn_prep.cuh"
#include "kernels/kv_store.cuh"

#define AP_V 4 /* float4 per thread at most in the fast form (rmsnorm.cu's RN_V) */

/* V4: rows of hd % 4 == 0 at 16-byte aligned addresses (rmsnorm_v4_kernel), else the scalar
 * form (rmsnorm_kernel). KT: pool element (float or __nv_bfloat16). Heads head0 + blockIdx.y;
 * dynamic shared memory: hd floats. */
template <bool V4, typename KT>
__global__ void attn_prep_kernel(kc_batch_t b, kc_kv_t kv, float *q, float *k, const float *__restrict__ v,
                                 const float *__restrict__ qw, const float *__restrict__ kw, int n_head, int n_kv_head,
                                 int hd, int n_rot, const double *__restrict__ inv_freq, int freq_bf16, float eps,
                                 int head0) {
  kc_pdl_wait();
  kc_pdl_trigger();
  extern __shared__ float4 ap_smem[];
  float *row = (float *)ap_smem; /* [hd] normalised head row */
  const int t = blockIdx.x, hh = head0 + (int)blockIdx.y;
  const bool is_k = hh >= n_head;
  const int h = is_k ? hh - n_head : hh;
  float *x = is_k ? k + ((size_t)t * n_kv_head + h) * hd : q + ((size_t)t * n_head + h) * hd;
  const float *w = is_k ? kw : qw;

  /* phase 1: rmsnorm of the head row into shared memory */
  if (V4) {
    const int nv = hd >> 2;
    const float4 *xr = (const float4 *)x;
    float4 r[AP_V];
    double ss = 0.0;
#pragma unroll
    for (int j = 0; j < AP_V; j++) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < nv) {
        const float4 a = xr[i];
        r[j] = a;
        ss += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
      }
    }
    ss = kc_block_sum_d(ss);
    const float scale = (float)(1.0 / sqrt(ss / hd + eps));
    const float4 *wr = (const float4 *)w;
#pragma unroll
    for (int j = 0; j < AP_V; j++) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < nv) {
        const float4 a = r[j], g = wr[i];
        ap_smem[i] = make_float4(a.x * scale * g.x, a.y * scale * g.y, a.z * scale * g.z, a.w * scale * g.w);
      }
    }
  } else {
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      const float a = x[i];
      ss += (double)a * a;
    }
    ss = kc_block_sum_d(ss);
    const float scale = (float)(1.0 / sqrt(ss / hd + eps));
    for (int i = threadIdx.x; i < hd; i += blockDim.x) row[i] = x[i] * scale * w[i];
  }
  __syncthreads(); /* row complete; every read of x is done */

  /* phase 2: rope, in place and (k heads) into the pools */
  KT *kd = NULL, *vd = NULL;
  const float *vs = NULL;
  if (is_k) {
    const int64_t slot = kc_kv_slot(b, kv, b.seq_of_tok[t], b.pos[t]);
    if (slot < 0) {
      if (threadIdx.x == 0) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
    } else {
      kd = (KT *)kv.k + slot * kv.kv_dim + (size_t)h * hd;
      vd = (KT *)kv.v + slot * kv.kv_dim + (size_t)h * hd;
      vs = v + (size_t)t * kv.kv_dim + (size_t)h * hd;
    }
  }
  const int half = n_rot / 2;
  const double p = b.pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double ang = freq_bf16 ? (double)((float)p * (float)inv_freq[i]) : p * inv_freq[i];
    double sn, cs;
    sincos(ang, &sn, &cs);
    const float a = row[i], c = row[i + half], fc = (float)cs, fs = (float)sn;
    const float o0 = a * fc - c * fs, o1 = a * fs + c * fc;
    x[i] = o0;
    x[i + half] = o1;
    if (kd) {
      kc_kv_put(kd + i, o0);
      kc_kv_put(kd + i + half, o1);
    }
  }
  for (int i = n_rot + threadIdx.x; i < hd; i += blockDim.x) {
    x[i] = row[i];
    if (kd) kc_kv_put(kd + i, row[i]);
  }
  if (vd)
    for (int i = threadIdx.x; i < hd; i += blockDim.x) kc_kv_put(vd + i, vs[i]);
}

/* Heads [head0, head0 + n) of the combined list, with rmsnorm.cu's launch shape for rows of hd. */
static int launch(cudaStream_t st, bool v4, int head0, int n, kc_batch_t b, kc_kv_t kv, float *q, float *k,
                  const float *v, const float *qw, const float *kw, int n_head, int n_kv_head, int hd, int n_rot,
                  const double *inv_freq, int freq_bf16, float eps) {
  const dim3 grid(b.n_tok, n);
  const size_t smem = sizeof(float) * (size_t)((hd + 3) / 4 * 4);
  if (v4) {
    int threads = (hd / 4 + 1) / 2; /* two float4 per thread, as rmsnorm.cu */
    threads = (threads + 31) / 32 * 32;
    if (threads > 1024) threads = 1024;
    if (threads < 32) threads = 32;
    if (kv.bf16)
      kc_launch(attn_prep_kernel<true, __nv_bfloat16>, grid, threads, smem, st, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd,
                                                                         n_rot, inv_freq, freq_bf16, eps, head0);
    else
      kc_launch(attn_prep_kernel<true, float>, grid, threads, smem, st, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd, n_rot,
                                                                 inv_freq, freq_bf16, eps, head0);
  } else {
    const int threads = hd >= 1024 ? 512 : hd >= 256 ? 256 : 64;
    if (kv.bf16)
      kc_launch(attn_prep_kernel<false, __nv_bfloat16>, grid, threads, smem, st, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd,
                                                                          n_rot, inv_freq, freq_bf16, eps, head0);
    else
      kc_launch(attn_prep_kernel<false, float>, grid, threads, smem, st, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd, n_rot,
                                                                  inv_freq, freq_bf16, eps, head0);
  }
  return (int)cudaGetLastError();
}

KC_API int kc_attn_qk_prep(cudaStream_t st, kc_batch_t b, kc_kv_t kv, float *q, float *k, const float *v,
                           const float *qw, const float *kw, int n_head, int n_kv_head, int hd, int n_rot,
                           const double *inv_freq, int freq_bf16, float eps) {
  if (b.n_tok <= 0) return 0;
  if (n_head <= 0 || n_kv_head <= 0 || hd <= 0 || hd > KC_ATTN_PREP_MAX_HD || n_rot < 2 || n_rot > hd || n_rot % 2 ||
      (int64_t)n_kv_head * hd != kv.kv_dim || n_head + n_kv_head > 65535)
    return (int)cudaErrorInvalidValue;
  /* the fast form exactly where kc_rmsnorm(x, w, out = x) takes it */
  const bool v4q = hd % 4 == 0 && (((uintptr_t)q | (uintptr_t)qw) & 15) == 0;
  const bool v4k = hd % 4 == 0 && (((uintptr_t)k | (uintptr_t)kw) & 15) == 0;
  if (v4q == v4k)
    return launch(st, v4q, 0, n_head + n_kv_head, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd, n_rot, inv_freq,
                  freq_bf16, eps);
  int rc = launch(st, v4q, 0, n_head, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd, n_rot, inv_freq, freq_bf16, eps);
  if (rc) return rc;
  return launch(st, v4k, n_head, n_kv_head, b, kv, q, k, v, qw, kw, n_head, n_kv_head, hd, n_rot, inv_freq, freq_bf16,
                eps);
}
