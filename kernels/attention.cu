/* kernels/attention.cu — see attention.cuh.
 * Pass 1: block (split, head, token) of 4 warps; each warp walks every 4th position of the
 * split with an online softmax, lane i holding dims i, i+32, ...; the warps merge in shared
 * memory and write (max, sum, acc[head_dim]) for the split. Pass 2 merges the splits. */
#include "kernels/attention.cuh"
#include "kernels/kv_store.cuh"

#define AT_WARPS 4
#define AT_MAXD (KC_ATTN_MAX_HEAD_DIM / 32)
#define AT_SPLIT_MIN 256 /* positions per split at least */

__global__ void __launch_bounds__(AT_WARPS * 32)
    attn_partial_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ q, float *__restrict__ part, int n_head,
                        int group, int head_dim, float scale, int n_split) {
  const int sp = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nd = head_dim >> 5;
  const int ctx = b.pos[t] + 1, s = b.seq_of_tok[t], kvh = h / group;
  const int per = (ctx + n_split - 1) / n_split;
  const int p0 = sp * per, p1 = min(ctx, p0 + per);
  __shared__ float sm_m[AT_WARPS], sm_l[AT_WARPS];
  __shared__ float sm_acc[AT_WARPS][KC_ATTN_MAX_HEAD_DIM];

  float qr[AT_MAXD], acc[AT_MAXD];
  const float *qh = q + ((size_t)t * n_head + h) * head_dim;
#pragma unroll
  for (int i = 0; i < AT_MAXD; i++) {
    qr[i] = i < nd ? qh[lane + 32 * i] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  int bad = 0;
  for (int p = p0 + wi; p < p1; p += AT_WARPS) {
    const int64_t slot = kc_kv_slot(b, kv, s, p);
    if (slot < 0) {
      bad = 1;
      continue;
    }
    const float *kp = kv.k + slot * kv.kv_dim + (size_t)kvh * head_dim;
    const float *vp = kv.v + slot * kv.kv_dim + (size_t)kvh * head_dim;
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < AT_MAXD; i++)
      if (i < nd) d += qr[i] * kp[lane + 32 * i];
    d = kc_warp_sum(d) * scale;
    const float mn = fmaxf(m, d);
    const float corr = expf(m - mn), e = expf(d - mn);
    l = l * corr + e;
#pragma unroll
    for (int i = 0; i < AT_MAXD; i++)
      if (i < nd) acc[i] = acc[i] * corr + e * vp[lane + 32 * i];
    m = mn;
  }
  if (bad && lane == 0) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
  if (lane == 0) {
    sm_m[wi] = m;
    sm_l[wi] = l;
  }
#pragma unroll
  for (int i = 0; i < AT_MAXD; i++)
    if (i < nd) sm_acc[wi][lane + 32 * i] = acc[i];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < AT_WARPS; w++) M = fmaxf(M, sm_m[w]);
  float *dst = part + (((size_t)t * n_head + h) * n_split + sp) * (size_t)(head_dim + 2);
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < AT_WARPS; w++)
      if (sm_m[w] != -INFINITY) a += sm_acc[w][j] * expf(sm_m[w] - M);
    dst[2 + j] = a;
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
    for (int w = 0; w < AT_WARPS; w++)
      if (sm_m[w] != -INFINITY) L += sm_l[w] * expf(sm_m[w] - M);
    dst[0] = M;
    dst[1] = L;
  }
}

__global__ void attn_combine_kernel(const float *__restrict__ part, float *__restrict__ out, int n_head, int head_dim,
                                    int n_split) {
  const int h = blockIdx.x, t = blockIdx.y;
  const float *src = part + ((size_t)t * n_head + h) * n_split * (size_t)(head_dim + 2);
  float M = -INFINITY;
  for (int sp = 0; sp < n_split; sp++) M = fmaxf(M, src[(size_t)sp * (head_dim + 2)]);
  float L = 0.0f;
  for (int sp = 0; sp < n_split; sp++) {
    const float ms = src[(size_t)sp * (head_dim + 2)];
    if (ms != -INFINITY) L += src[(size_t)sp * (head_dim + 2) + 1] * expf(ms - M);
  }
  const float inv = 1.0f / L;
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
    float a = 0.0f;
    for (int sp = 0; sp < n_split; sp++) {
      const float ms = src[(size_t)sp * (head_dim + 2)];
      if (ms != -INFINITY) a += src[(size_t)sp * (head_dim + 2) + 2 + j] * expf(ms - M);
    }
    out[((size_t)t * n_head + h) * head_dim + j] = a * inv;
  }
}

KC_API int kc_attention_splits(int n_tok, int n_head, int max_ctx) {
  const int work = n_tok * n_head, target = 2 * 132; /* about two waves of an H100/H200 */
  if (work >= target || max_ctx <= AT_SPLIT_MIN) return 1;
  int n = (target + work - 1) / work;
  const int by_len = (max_ctx + AT_SPLIT_MIN - 1) / AT_SPLIT_MIN;
  return n < by_len ? n : by_len;
}

KC_API size_t kc_attention_part_floats(int n_tok, int n_head, int head_dim, int n_split) {
  return (size_t)n_tok * n_head * n_split * (size_t)(head_dim + 2);
}

KC_API int kc_attention(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                        int n_kv_head, int head_dim, float scale, int n_split, float *part) {
  if (head_dim % 32 != 0 || head_dim > KC_ATTN_MAX_HEAD_DIM || n_split < 1 || n_kv_head <= 0 || n_head % n_kv_head)
    return (int)cudaErrorInvalidValue;
  if (b.n_tok <= 0) return 0;
  attn_partial_kernel<<<dim3(n_split, n_head, b.n_tok), AT_WARPS * 32, 0, st>>>(b, kv, q, part, n_head,
                                                                                n_head / n_kv_head, head_dim, scale,
                                                                                n_split);
  attn_combine_kernel<<<dim3(n_head, b.n_tok), 128, 0, st>>>(part, out, n_head, head_dim, n_split);
  return (int)cudaGetLastError();
}
