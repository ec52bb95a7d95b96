/* kernels/attention.cu — see attention.cuh.
 * Pass 1: block (split, kv head, token) of AT_WARPS warps serving the G query heads that share
 * the kv head (GQA: K and V are read once for all of them; G = 1 blocks serve one query head
 * when the group size is not 2, 4 or 8). The token's context is cut into chunks of AT_CHUNK
 * positions; split sp takes chunks sp, sp + n_split, ... For each chunk:
 *   scores — warp w takes positions w, w + AT_WARPS, ... (AT_PPW of them, their K rows loaded
 *            together), lane i holding dims i, i + 32, ...; a warp sum per (position, head);
 *   softmax — every warp computes each head's chunk max from shared memory (block-uniform) and
 *            rescales that head's running (max, sum, accumulator) once per chunk;
 *   values — thread (g, j) adds the probability-weighted V of positions g, g + n_grp, ... for
 *            dims 4j..4j+3 (float4 loads, all of a thread's positions loaded together) to the
 *            accumulators of the G heads.
 * The groups' accumulators are summed in order and (max, sum, acc[head_dim]) written per head
 * and split. Pass 2 merges the splits. Positions whose KV slot is invalid raise
 * KC_EFLAG_KV_SLOT and are left out. */
#include "kernels/attention.cuh"
#include "kernels/kv_store.cuh"

#define AT_WARPS 8
#define AT_THREADS (AT_WARPS * 32)
#define AT_CHUNK 64                      /* positions per chunk */
#define AT_PPW (AT_CHUNK / AT_WARPS)     /* positions a warp scores per chunk */
#define AT_MAX_SPLIT 32

/* max (and, with the same max, sum of exp) over the chunk's np scores sc[0..np): every warp
 * computes it from shared memory with two values per lane, so the result is block-uniform */
__device__ __forceinline__ float at_chunk_max(const float *sc, int np, int lane, float m) {
  float v = fmaxf(lane < np ? sc[lane] : -INFINITY, lane + 32 < np ? sc[lane + 32] : -INFINITY);
  return fmaxf(m, kc_warp_max(v));
}
__device__ __forceinline__ float at_chunk_sum(const float *sc, int np, int lane, float mc) {
  float v = 0.0f;
  if (lane < np && sc[lane] != -INFINITY) v += expf(sc[lane] - mc);
  if (lane + 32 < np && sc[lane + 32] != -INFINITY) v += expf(sc[lane + 32] - mc);
  return kc_warp_sum(v);
}

/* PPT: positions per thread in the value phase (AT_CHUNK / groups, rounded up to a power of 2;
 * head_dim <= 16 PPT, so a lane holds at most PPT / 2 dims of a q row). G: query heads per block. */
template <int PPT, int G>
__global__ void __launch_bounds__(AT_THREADS, 2)
    attn_partial_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ q, float *__restrict__ part, int n_head,
                        int group, int head_dim, float scale, int n_split) {
  kc_pdl_wait();
  kc_pdl_trigger();
  constexpr int MAXD = PPT / 2;
  const int sp = blockIdx.x, t = blockIdx.z;
  const int kvh = G > 1 ? (int)blockIdx.y : (int)blockIdx.y / group, h0 = G > 1 ? kvh * G : (int)blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, nd = head_dim >> 5;
  const int ctx = b.pos[t] + 1, s = b.seq_of_tok[t];
  const int n_chunks = (ctx + AT_CHUNK - 1) / AT_CHUNK;
  /* value phase: head_dim / 4 threads per position group */
  const int tpg = head_dim >> 2, n_grp = AT_THREADS / tpg, g = tid / tpg, j4 = (tid % tpg) * 4;
  const bool vthr = g < n_grp; /* threads past the last whole group (head_dim 96, ...) idle */
  __shared__ float sc[G][AT_CHUNK];
  __shared__ int64_t sslot[AT_CHUNK];
  __shared__ __align__(16) float sacc[AT_THREADS * 4];

  float qr[G][MAXD];
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
    const float *qh = q + ((size_t)t * n_head + h0 + gi) * head_dim;
#pragma unroll
    for (int i = 0; i < MAXD; i++) qr[gi][i] = i < nd ? qh[lane + 32 * i] : 0.0f;
  }
  float4 acc[G];
  float m[G], l[G];
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
    acc[gi] = make_float4(0.f, 0.f, 0.f, 0.f);
    m[gi] = -INFINITY;
    l[gi] = 0.0f;
  }
  const size_t koff = (size_t)kvh * head_dim;

  for (int c = sp; c < n_chunks; c += n_split) {
    const int p0 = c * AT_CHUNK, np = min(AT_CHUNK, ctx - p0);
    if (tid < np) {
      const int64_t slot = kc_kv_slot(b, kv, s, p0 + tid);
      if (slot < 0) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
      sslot[tid] = slot;
    }
    __syncthreads();
    /* scores of this warp's positions: loads first, then the sums */
    {
      float kr[AT_PPW][MAXD];
#pragma unroll
      for (int k = 0; k < AT_PPW; k++) {
        const int pi = wi + k * AT_WARPS;
        const int64_t slot = pi < np ? sslot[pi] : -1;
        const float *kp = (const float *)kv.k + (slot >= 0 ? slot : 0) * kv.kv_dim + koff;
#pragma unroll
        for (int i = 0; i < MAXD; i++) kr[k][i] = slot >= 0 && i < nd ? __ldg(kp + lane + 32 * i) : 0.0f;
      }
#pragma unroll
      for (int gi = 0; gi < G; gi++) {
#pragma unroll
        for (int k = 0; k < AT_PPW; k++) {
          float d = 0.0f;
#pragma unroll
          for (int i = 0; i < MAXD; i++) d = fmaf(qr[gi][i], kr[k][i], d);
          d = kc_warp_sum(d) * scale;
          const int pi = wi + k * AT_WARPS;
          if (lane == 0 && pi < np) sc[gi][pi] = sslot[pi] >= 0 ? d : -INFINITY;
        }
      }
    }
    __syncthreads();
    /* values: this thread's positions g, g + n_grp, ... (V rows loaded once for all G heads) */
    float4 vv[PPT];
#pragma unroll
    for (int k = 0; k < PPT; k++) {
      const int pi = g + k * n_grp;
      vv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (vthr && pi < np && sslot[pi] >= 0)
        vv[k] = __ldg((const float4 *)((const float *)kv.v + sslot[pi] * kv.kv_dim + koff + j4));
    }
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
      /* chunk max and the rescale of the head's running state (same values in every thread) */
      const float mc = at_chunk_max(sc[gi], np, lane, m[gi]);
      if (mc == -INFINITY) continue;
      const float corr = expf(m[gi] - mc); /* m = -inf -> 0 */
      float4 a = acc[gi];
      a.x *= corr; a.y *= corr; a.z *= corr; a.w *= corr;
#pragma unroll
      for (int k = 0; k < PPT; k++) {
        const int pi = g + k * n_grp;
        const float e = vthr && pi < np && sc[gi][pi] != -INFINITY ? expf(sc[gi][pi] - mc) : 0.0f;
        a.x = fmaf(e, vv[k].x, a.x);
        a.y = fmaf(e, vv[k].y, a.y);
        a.z = fmaf(e, vv[k].z, a.z);
        a.w = fmaf(e, vv[k].w, a.w);
      }
      acc[gi] = a;
      l[gi] = l[gi] * corr + at_chunk_sum(sc[gi], np, lane, mc);
      m[gi] = mc;
    }
    __syncthreads(); /* sc / sslot are rewritten by the next chunk */
  }
  /* per head: sum the position groups in order */
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
    *(float4 *)&sacc[4 * tid] = acc[gi];
    __syncthreads();
    float *dst = part + (((size_t)t * n_head + h0 + gi) * n_split + sp) * (size_t)(head_dim + 2);
    for (int jj = tid; jj < head_dim; jj += AT_THREADS) {
      const int jt = jj >> 2, jc = jj & 3;
      float a = 0.0f;
      for (int gg = 0; gg < n_grp; gg++) a += sacc[4 * (gg * tpg + jt) + jc];
      dst[2 + jj] = a;
    }
    if (tid == 0) {
      dst[0] = m[gi];
      dst[1] = l[gi];
    }
    __syncthreads(); /* sacc is rewritten for the next head */
  }
}

/* Block (head, token): split maxima and sums in shared memory (one thread per split), then
 * thread j merges dim j over the splits with all loads of a row issued together. */
__global__ void attn_combine_kernel(const float *__restrict__ part, float *__restrict__ out, int n_head, int head_dim,
                                    int n_split) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int h = blockIdx.x, t = blockIdx.y;
  const float *src = part + ((size_t)t * n_head + h) * n_split * (size_t)(head_dim + 2);
  __shared__ float sm[AT_MAX_SPLIT], sw[AT_MAX_SPLIT];
  __shared__ float sinv;
  if (threadIdx.x < 32) {
    const int sp = threadIdx.x;
    const float ms = sp < n_split ? src[(size_t)sp * (head_dim + 2)] : -INFINITY;
    const float ls = sp < n_split ? src[(size_t)sp * (head_dim + 2) + 1] : 0.0f;
    const float M = kc_warp_max(ms);
    const float w = ms != -INFINITY ? expf(ms - M) : 0.0f;
    const float L = kc_warp_sum(ls * w);
    if (sp < n_split) {
      sm[sp] = ms;
      sw[sp] = w;
    }
    if (sp == 0) sinv = 1.0f / L;
  }
  __syncthreads();
  const float inv = sinv;
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
    float a = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < n_split; sp++)
      if (sm[sp] != -INFINITY) a = fmaf(src[(size_t)sp * (head_dim + 2) + 2 + j], sw[sp], a);
    out[((size_t)t * n_head + h) * head_dim + j] = a * inv;
  }
}

KC_API int kc_attention_splits(int n_tok, int n_head, int max_ctx) {
  const int work = n_tok * n_head, target = 8 * 132; /* about eight blocks per SM of an H100/H200 */
  const int chunks = (int)(((int64_t)max_ctx + AT_CHUNK - 1) / AT_CHUNK);
  int n = (target + work - 1) / work;
  if (n > AT_MAX_SPLIT) n = AT_MAX_SPLIT;
  if (n > chunks) n = chunks;
  return n < 1 ? 1 : n;
}

KC_API size_t kc_attention_part_floats(int n_tok, int n_head, int head_dim, int n_split) {
  return (size_t)n_tok * n_head * n_split * (size_t)(head_dim + 2);
}

KC_API int kc_attention(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                        int n_kv_head, int head_dim, float scale, int n_split, float *part) {
  if (head_dim % 32 != 0 || head_dim > KC_ATTN_MAX_HEAD_DIM || n_split < 1 || n_kv_head <= 0 || n_head % n_kv_head)
    return (int)cudaErrorInvalidValue;
  if (b.n_tok <= 0) return 0;
  const int group = n_head / n_kv_head;
  const int need = (head_dim + 15) / 16; /* value positions per thread: AT_CHUNK / (1024 / head_dim) */
  const int P = need <= 2 ? 2 : need <= 4 ? 4 : need <= 8 ? 8 : 16;
  const int G = group == 2 || group == 4 || group == 8 ? group : 1;
  const dim3 grid(n_split, G > 1 ? n_kv_head : n_head, b.n_tok);
#define AT_GO(PP, GG)                                                                                             \
  if (P == PP && G == GG)                                                                                         \
  kc_launch(attn_partial_kernel<PP, GG>, grid, AT_THREADS, 0, st, b, kv, q, part, n_head, group, head_dim, scale, n_split)
  AT_GO(2, 1); AT_GO(4, 1); AT_GO(8, 1); AT_GO(16, 1);
  AT_GO(2, 2); AT_GO(4, 2); AT_GO(8, 2); AT_GO(16, 2);
  AT_GO(2, 4); AT_GO(4, 4); AT_GO(8, 4); AT_GO(16, 4);
  AT_GO(2, 8); AT_GO(4, 8); AT_GO(8, 8); AT_GO(16, 8);
#undef AT_GO
  kc_launch(attn_combine_kernel, dim3(n_head, b.n_tok), 128, 0, st, part, out, n_head, head_dim, n_split);
  return (int)cudaGetLastError();
}
