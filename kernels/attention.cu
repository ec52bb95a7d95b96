/* kernels/attention.cu — see attention.cuh.
 * Pass 1: block (split, head, token) of AT_WARPS warps. The token's context is cut into chunks
 * of AT_CHUNK positions; split sp takes chunks sp, sp + n_split, ... For each chunk:
 *   scores — warp w takes positions w, w + AT_WARPS, ... (AT_PPW of them, their K rows loaded
 *            together), lane i holding dims i, i + 32, ...; a warp sum per position;
 *   softmax — every thread computes the chunk max from shared memory (block-uniform), rescales
 *            the running (max, sum, accumulator) once per chunk;
 *   values — thread (g, j) adds the probability-weighted V of positions g, g + n_grp, ... for
 *            dims 4j..4j+3 (float4 loads, all of a thread's positions loaded together).
 * The groups' accumulators are summed in order and (max, sum, acc[head_dim]) written for the
 * split. Pass 2 merges the splits. Positions whose KV slot is invalid raise KC_EFLAG_KV_SLOT and
 * are left out. */
#include "kernels/attention.cuh"
#include "kernels/kv_store.cuh"

#define AT_WARPS 8
#define AT_THREADS (AT_WARPS * 32)
#define AT_MAXD (KC_ATTN_MAX_HEAD_DIM / 32)
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

/* PPT: positions per thread in the value phase (AT_CHUNK / groups, rounded up to a power of 2) */
template <int PPT>
__global__ void __launch_bounds__(AT_THREADS, 3)
    attn_partial_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ q, float *__restrict__ part, int n_head,
                        int group, int head_dim, float scale, int n_split) {
  const int sp = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, nd = head_dim >> 5;
  const int ctx = b.pos[t] + 1, s = b.seq_of_tok[t], kvh = h / group;
  const int n_chunks = (ctx + AT_CHUNK - 1) / AT_CHUNK;
  /* value phase: head_dim / 4 threads per position group */
  const int tpg = head_dim >> 2, n_grp = AT_THREADS / tpg, g = tid / tpg, j4 = (tid % tpg) * 4;
  const bool vthr = g < n_grp; /* threads past the last whole group (head_dim 96, ...) idle */
  __shared__ float sc[AT_CHUNK];
  __shared__ int64_t sslot[AT_CHUNK];
  __shared__ __align__(16) float sacc[AT_THREADS * 4];

  float qr[AT_MAXD];
  const float *qh = q + ((size_t)t * n_head + h) * head_dim;
#pragma unroll
  for (int i = 0; i < AT_MAXD; i++) qr[i] = i < nd ? qh[lane + 32 * i] : 0.0f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float m = -INFINITY, l = 0.0f;
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
    float d[AT_PPW];
#pragma unroll
    for (int k = 0; k < AT_PPW; k++) {
      const int pi = wi + k * AT_WARPS;
      d[k] = 0.0f;
      const int64_t slot = pi < np ? sslot[pi] : -1;
      if (slot >= 0) {
        const float *kp = kv.k + slot * kv.kv_dim + koff;
#pragma unroll
        for (int i = 0; i < AT_MAXD; i++)
          if (i < nd) d[k] = fmaf(qr[i], __ldg(kp + lane + 32 * i), d[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < AT_PPW; k++) d[k] = kc_warp_sum(d[k]) * scale;
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < AT_PPW; k++) {
        const int pi = wi + k * AT_WARPS;
        if (pi < np) sc[pi] = sslot[pi] >= 0 ? d[k] : -INFINITY;
      }
    }
    __syncthreads();
    /* chunk max and the rescale of the running state (same values in every thread) */
    const float mc = at_chunk_max(sc, np, lane, m);
    if (mc != -INFINITY) {
      const float corr = expf(m - mc); /* m = -inf -> 0 */
      acc.x *= corr; acc.y *= corr; acc.z *= corr; acc.w *= corr;
      float e[PPT];
      float4 vv[PPT];
      /* values: this thread's positions g, g + n_grp, ... */
#pragma unroll
      for (int k = 0; k < PPT; k++) {
        const int pi = g + k * n_grp;
        e[k] = 0.0f;
        vv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (vthr && pi < np && sc[pi] != -INFINITY) {
          e[k] = expf(sc[pi] - mc);
          vv[k] = __ldg((const float4 *)(kv.v + sslot[pi] * kv.kv_dim + koff + j4));
        }
      }
#pragma unroll
      for (int k = 0; k < PPT; k++) {
        acc.x = fmaf(e[k], vv[k].x, acc.x);
        acc.y = fmaf(e[k], vv[k].y, acc.y);
        acc.z = fmaf(e[k], vv[k].z, acc.z);
        acc.w = fmaf(e[k], vv[k].w, acc.w);
      }
      l = l * corr + at_chunk_sum(sc, np, lane, mc);
      m = mc;
    }
    __syncthreads(); /* sc / sslot are rewritten by the next chunk */
  }
  /* sum the position groups in order */
  *(float4 *)&sacc[4 * tid] = acc;
  __syncthreads();
  float *dst = part + (((size_t)t * n_head + h) * n_split + sp) * (size_t)(head_dim + 2);
  for (int jj = tid; jj < head_dim; jj += AT_THREADS) {
    const int jt = jj >> 2, jc = jj & 3;
    float a = 0.0f;
    for (int gg = 0; gg < n_grp; gg++) a += sacc[4 * (gg * tpg + jt) + jc];
    dst[2 + jj] = a;
  }
  if (tid == 0) {
    dst[0] = m;
    dst[1] = l;
  }
}

/* Block (head, token): split maxima and sums in shared memory (one thread per split), then
 * thread j merges dim j over the splits with all loads of a row issued together. */
__global__ void attn_combine_kernel(const float *__restrict__ part, float *__restrict__ out, int n_head, int head_dim,
                                    int n_split) {
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
  const dim3 grid(n_split, n_head, b.n_tok);
  const int need = (head_dim + 15) / 16; /* value positions per thread: AT_CHUNK / (1024 / head_dim) */
#define AT_GO(P) attn_partial_kernel<P><<<grid, AT_THREADS, 0, st>>>(b, kv, q, part, n_head, n_head / n_kv_head, \
                                                                      head_dim, scale, n_split)
  if (need <= 2) AT_GO(2);
  else if (need <= 4) AT_GO(4);
  else if (need <= 8) AT_GO(8);
  else AT_GO(16);
#undef AT_GO
  attn_combine_kernel<<<dim3(n_head, b.n_tok), 128, 0, st>>>(part, out, n_head, head_dim, n_split);
  return (int)cudaGetLastError();
}
