/* kernels/gdn_scan.cu — see gdn_scan.cuh. The kernels here serve sequences of fewer than
 * KC_GDN_LONG_MIN tokens (decode); kernels/gdn_scan_long.cu the longer ones.
 *
 * Per-token kernel (d_k <= 256): block (column tile of 32 value columns, value head, sequence), 256
 * threads = 8 warps. Lane l owns value column j = 32 * tile + l; warp w owns key rows
 * r = w + 8u (u < RPT), so a warp's S accesses are 128-byte rows. The thread keeps its RPT
 * elements of S in registers for all of the sequence's tokens: S is read once and written
 * once per launch (and after token i also to the sequence's position slot i when it has one,
 * be_batch_t.state_pos_slot; those sequences have <= BE_GRAPH_MAX_Q tokens, so never reach
 * gdn_scan_long / gdn_chunked, which do not write them). Per token, the partial sums of Sᵀk and Sᵀq over a warp's rows are combined
 * across the 8 warps in shared memory (two __syncthreads per token, block-uniform loop).
 * Fallback (d_k > 256): the former block per (value head, sequence) with S in device memory. */
#include "kernels/gdn_scan.cuh"
#include "kernels/gdn_scan_long.cuh"

#define GDN_WARPS 8
#define GDN_TILE 32

template <int RPT>
__global__ void __launch_bounds__(GDN_WARPS * 32)
    gdn_step_kernel(kc_batch_t b, float *ssm, int n_slots, const float *__restrict__ q, const float *__restrict__ k,
                    const float *__restrict__ v, const float *__restrict__ g, const float *__restrict__ beta,
                    float *__restrict__ out, int n_k, int n_v, int d_k, int d_v, int skip_from) {
  kc_pdl_wait();
  kc_pdl_trigger();
  __shared__ float red_kv[GDN_WARPS][GDN_TILE], red_o[GDN_WARPS][GDN_TILE];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int h = blockIdx.y, s = blockIdx.z, kh = h % n_k;
  const int j = blockIdx.x * GDN_TILE + lane;
  const bool jv = j < d_v;
  const int t0 = b.seq_first[s], n = b.seq_ntok[s];
  if (n <= 0 || n >= skip_from) return; /* block-uniform; long sequences go to kc_gdn_chunked */
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) {
    if (threadIdx.x == 0) atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  float *S = ssm + ((size_t)slot * n_v + h) * (size_t)d_k * d_v; /* [d_k, d_v] */
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;
  float Sr[RPT];
#pragma unroll
  for (int u = 0; u < RPT; u++) {
    const int r = w + GDN_WARPS * u;
    Sr[u] = (jv && r < d_k) ? S[(size_t)r * d_v + j] : 0.0f;
  }
  for (int i = 0; i < n; i++) {
    const size_t t = (size_t)(t0 + i);
    const float *kt = k + t * qk_ld + (size_t)kh * d_k, *qt = q + t * qk_ld + (size_t)kh * d_k;
    float kr[RPT], qr[RPT];
#pragma unroll
    for (int u = 0; u < RPT; u++) {
      const int r = w + GDN_WARPS * u;
      kr[u] = r < d_k ? kt[r] : 0.0f;
      qr[u] = r < d_k ? qt[r] : 0.0f;
    }
    const float decay = expf(g[t * n_v + h]), bt = beta[t * n_v + h];
    const float vj = jv ? v[t * v_ld + (size_t)h * d_v + j] : 0.0f;
    /* S *= exp(g); kv = Sᵀk */
    float p = 0.0f;
#pragma unroll
    for (int u = 0; u < RPT; u++) {
      Sr[u] *= decay;
      p += Sr[u] * kr[u];
    }
    red_kv[w][lane] = p;
    __syncthreads();
    float kv = 0.0f;
#pragma unroll
    for (int ww = 0; ww < GDN_WARPS; ww++) kv += red_kv[ww][lane];
    /* S += k ⊗ beta (v - kv); o = Sᵀq */
    const float delta = bt * (vj - kv);
    p = 0.0f;
#pragma unroll
    for (int u = 0; u < RPT; u++) {
      Sr[u] += kr[u] * delta;
      p += Sr[u] * qr[u];
    }
    red_o[w][lane] = p;
    __syncthreads(); /* red_kv is free again: every thread read it before this barrier */
    if (w == 0 && jv) {
      float o = 0.0f;
#pragma unroll
      for (int ww = 0; ww < GDN_WARPS; ww++) o += red_o[ww][lane];
      out[t * v_ld + (size_t)h * d_v + j] = o;
    }
    const int ps = kc_pos_slot(b, s, i, n, n_slots); /* block-uniform */
    if (ps >= 0) {
      float *P = ssm + ((size_t)ps * n_v + h) * (size_t)d_k * d_v;
#pragma unroll
      for (int u = 0; u < RPT; u++) {
        const int r = w + GDN_WARPS * u;
        if (jv && r < d_k) P[(size_t)r * d_v + j] = Sr[u];
      }
    }
  }
#pragma unroll
  for (int u = 0; u < RPT; u++) {
    const int r = w + GDN_WARPS * u;
    if (jv && r < d_k) S[(size_t)r * d_v + j] = Sr[u];
  }
}

/* Fallback for d_k > 256: block (value head, sequence), thread j owns column j of S (device
 * memory, coalesced across the block); q and k of the token in shared memory. */
__global__ void gdn_scan_global_kernel(kc_batch_t b, float *ssm, int n_slots, const float *__restrict__ q,
                                       const float *__restrict__ k, const float *__restrict__ v,
                                       const float *__restrict__ g, const float *__restrict__ beta,
                                       float *__restrict__ out, int n_k, int n_v, int d_k, int d_v, int skip_from) {
  kc_pdl_wait();
  kc_pdl_trigger();
  extern __shared__ float sm[]; /* q [d_k], k [d_k] */
  float *sq = sm, *sk = sm + d_k;
  const int h = blockIdx.x, s = blockIdx.y, kh = h % n_k, j = threadIdx.x;
  const int t0 = b.seq_first[s], n = b.seq_ntok[s];
  if (n <= 0 || n >= skip_from) return;
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) {
    if (j == 0) atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  float *S = ssm + ((size_t)slot * n_v + h) * (size_t)d_k * d_v;
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;
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
    const int ps = kc_pos_slot(b, s, i, n, n_slots);
    if (ps >= 0) {
      float *P = ssm + ((size_t)ps * n_v + h) * (size_t)d_k * d_v;
      for (int r = 0; r < d_k; r++) P[(size_t)r * d_v + j] = S[(size_t)r * d_v + j];
    }
  }
}

/* Launches the former kernels for the sequences with fewer than skip_from tokens. */
static int gdn_scan_short(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                          int d_v, int skip_from) {
  if (d_k <= GDN_WARPS * 32) {
    const dim3 grid((unsigned)((d_v + GDN_TILE - 1) / GDN_TILE), (unsigned)n_v, (unsigned)b.n_seq);
    const int rpt = (d_k + GDN_WARPS - 1) / GDN_WARPS;
#define GDN_LAUNCH(R)                                                                                          \
  kc_launch(gdn_step_kernel<R>, grid, GDN_WARPS * 32, 0, st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v, \
                                                      skip_from)
    if (rpt <= 4) GDN_LAUNCH(4);
    else if (rpt <= 8) GDN_LAUNCH(8);
    else if (rpt <= 16) GDN_LAUNCH(16);
    else GDN_LAUNCH(32);
#undef GDN_LAUNCH
    return (int)cudaGetLastError();
  }
  const int threads = (d_v + 31) / 32 * 32;
  const size_t smem = sizeof(float) * 2 * (size_t)d_k;
  if (smem > 48 * 1024) return (int)cudaErrorInvalidValue;
  kc_launch(gdn_scan_global_kernel, dim3(n_v, b.n_seq), threads, smem, st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v,
                                                                     d_k, d_v, skip_from);
  return (int)cudaGetLastError();
}

KC_API int kc_gdn_scan_sel(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                           const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                           int d_v, int skip_from, int long_from, int long_lpc) {
  if (d_v > 1024 || d_v <= 0 || d_k <= 0 || n_k <= 0 || n_v <= 0 || n_v % n_k) return (int)cudaErrorInvalidValue;
  if (b.n_seq <= 0) return 0;
  if (long_from < 1) long_from = 1;
  /* Launch the long kernel only when a sequence can have >= long_from tokens: when every sequence
   * brings >= 1 token the longest has at most n_tok - n_seq + 1, so decode batches (and their
   * graphs) hold the per-token kernel alone. A batch with empty sequences may understate it: its
   * long sequences then take the per-token kernel, which is correct for any length. */
  if (long_from < skip_from && b.n_tok - b.n_seq + 1 >= long_from && kc_gdn_scan_long_ok(d_k, d_v)) {
    const int rc = kc_gdn_scan_long(st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v, long_from,
                                    skip_from, long_lpc);
    if (rc || long_from == 1) return rc;
    skip_from = long_from;
  }
  return gdn_scan_short(st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v, skip_from);
}

KC_API int kc_gdn_scan(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                       int d_v, int skip_from) {
  return kc_gdn_scan_sel(st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v, skip_from, KC_GDN_LONG_MIN,
                         KC_GDN_LONG_LPC);
}
