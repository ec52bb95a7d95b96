/* kernels/gdn_scan.cu — see gdn_scan.cuh. Block (value head, sequence); thread j owns column j
 * of S (in device memory, coalesced across the block); q and k of the token in shared memory. */
#include "kernels/gdn_scan.cuh"

__global__ void gdn_scan_kernel(kc_batch_t b, float *ssm, int n_slots, const float *__restrict__ q,
                                const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ g,
                                const float *__restrict__ beta, float *__restrict__ out, int n_k, int n_v, int d_k,
                                int d_v) {
  extern __shared__ float sm[]; /* q [d_k], k [d_k] */
  float *sq = sm, *sk = sm + d_k;
  const int h = blockIdx.x, s = blockIdx.y, kh = h % n_k, j = threadIdx.x;
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) {
    if (j == 0) atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  float *S = ssm + ((size_t)slot * n_v + h) * (size_t)d_k * d_v;
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;
  const int t0 = b.seq_first[s], n = b.seq_ntok[s];
  for (int i = 0; i < n; i++) {
    const size_t t = (size_t)(t0 + i);
    __syncthreads();
    for (int r = j; r < d_k; r += blockDim.x) {
      sq[r] = q[t * qk_ld + (size_t)kh * d_k + r];
      sk[r] = k[t * qk_ld + (size_t)kh * d_k + r];
    }
    __syncthreads();
    if (j >= d_v) continue;
    const float decay = expf(g[t * n_v + h]), bt = beta[t * n_v + h];
    float kv = 0.0f;
    for (int r = 0; r < d_k; r++) {
      const float sv = S[(size_t)r * d_v + j] * decay;
      S[(size_t)r * d_v + j] = sv;
      kv += sv * sk[r];
    }
    const float delta = bt * (v[t * v_ld + (size_t)h * d_v + j] - kv);
    float o = 0.0f;
    for (int r = 0; r < d_k; r++) {
      const float sv = S[(size_t)r * d_v + j] + sk[r] * delta;
      S[(size_t)r * d_v + j] = sv;
      o += sv * sq[r];
    }
    out[t * v_ld + (size_t)h * d_v + j] = o;
  }
}

KC_API int kc_gdn_scan(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                       int d_v) {
  if (d_v > 1024 || d_v <= 0 || d_k <= 0 || n_k <= 0 || n_v % n_k) return (int)cudaErrorInvalidValue;
  if (b.n_seq <= 0) return 0;
  const int threads = (d_v + 31) / 32 * 32;
  const size_t smem = sizeof(float) * 2 * (size_t)d_k;
  if (smem > 48 * 1024) return (int)cudaErrorInvalidValue;
  gdn_scan_kernel<<<dim3(n_v, b.n_seq), threads, smem, st>>>(b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k,
                                                              d_v);
  return (int)cudaGetLastError();
}
