/* kernels/attn_decode.cu — see attn_decode.cuh.
 * Pass 1: block (range, kv head, token) of AD_THREADS threads in row groups of TPR threads
 * (TPR = head_dim / 8 rounded up to a power of 2; lane j of a group holds dims 8j..8j+7, one
 * 16-byte load of bf16 per K or V row). Row group g takes positions g, g + NG, ... of the range,
 * PPT of them per step with all their K and V loads issued together (the next step's before
 * this step's arithmetic), and keeps its own online
 * softmax (max, sum, 8 accumulators) per query head: no barrier inside the loop. Scores are
 * summed over the group by xor shuffles. At the end the groups are merged in shared memory and
 * (max, sum, acc[head_dim]) written per (token, head, range). Pass 2 merges the ranges. Positions
 * whose KV slot is invalid raise KC_EFLAG_KV_SLOT and are left out. Partial row per (token, head,
 * range): acc[head_dim], max, sum, 2 floats of padding (16-byte aligned rows). Kernel 2 of pass 1
 * (kernels/attn_decode_warp.cu) writes the same rows; kc_attn_decode picks one. */
#include <stdlib.h>

#include "kernels/attn_decode.cuh"
#include "kernels/kv_store.cuh"

#define AD_THREADS 128

template <int TPR, int G, int PPT>
__global__ void __launch_bounds__(AD_THREADS, G >= 8 ? 2 : 4)
    ad_partial_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ q, float *__restrict__ part, int n_head,
                      int group, int head_dim, float scale, int n_split, int split_len, int fa_min) {
  kc_pdl_wait();
  kc_pdl_trigger();
  constexpr int NG = AD_THREADS / TPR;
  const int sp = blockIdx.x, t = blockIdx.z, s = b.seq_of_tok[t];
  if (b.seq_ntok[s] >= fa_min) return;
  const int ctx = b.pos[t] + 1, n_eff = kc_ad_n_eff(ctx, n_split, split_len);
  if (sp >= n_eff) return;
  const int len = (ctx + n_eff - 1) / n_eff, p_begin = sp * len, p_end = min(ctx, p_begin + len);
  const int kvh = G > 1 ? (int)blockIdx.y : (int)blockIdx.y / group, h0 = G > 1 ? kvh * G : (int)blockIdx.y;
  const int tid = threadIdx.x, grp = tid / TPR, j = tid % TPR, d0 = j * 8;
  const bool act = d0 < head_dim;

  float qr[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
    const float *qh = q + ((size_t)t * n_head + h0 + gi) * head_dim + d0;
    const float4 a = act ? *(const float4 *)qh : make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 c = act ? *(const float4 *)(qh + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
    qr[gi][0] = a.x, qr[gi][1] = a.y, qr[gi][2] = a.z, qr[gi][3] = a.w;
    qr[gi][4] = c.x, qr[gi][5] = c.y, qr[gi][6] = c.z, qr[gi][7] = c.w;
#pragma unroll
    for (int i = 0; i < 8; i++) acc[gi][i] = 0.0f;
    m[gi] = -INFINITY;
    l[gi] = 0.0f;
  }
  const __nv_bfloat16 *K = (const __nv_bfloat16 *)kv.k, *V = (const __nv_bfloat16 *)kv.v;
  const size_t koff = (size_t)kvh * head_dim + d0;
  /* Loads of one step (positions base + grp + k * NG): slots, then K and V rows (zeros where
   * the position is past the range or its slot is invalid). */
  auto load = [&](int base, uint4 (&kk)[PPT], uint4 (&vv)[PPT], bool (&oo)[PPT]) {
#pragma unroll
    for (int k = 0; k < PPT; k++) {
      const int p = base + grp + k * NG;
      int64_t slot = -1;
      if (p < p_end) {
        slot = kc_kv_slot(b, kv, s, p);
        if (slot < 0 && j == 0) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
      }
      oo[k] = slot >= 0;
      kk[k] = vv[k] = make_uint4(0, 0, 0, 0);
      if (oo[k] && act) {
        kk[k] = __ldg((const uint4 *)(K + slot * kv.kv_dim + koff));
        vv[k] = __ldg((const uint4 *)(V + slot * kv.kv_dim + koff));
      }
    }
  };
  /* warp-uniform loop (every lane runs every step: the shuffles need the whole warp); the next
   * step's loads are issued before this step's arithmetic */
  constexpr int STEP = NG * PPT;
  uint4 kr[PPT], vr[PPT];
  bool ok[PPT];
  load(p_begin, kr, vr, ok);
  for (int base = p_begin; base < p_end; base += STEP) {
    uint4 kn[PPT], vn[PPT];
    bool on[PPT];
    const bool more = base + STEP < p_end;
    if (more) load(base + STEP, kn, vn, on);
    float sc[G][PPT];
#pragma unroll
    for (int k = 0; k < PPT; k++) {
      float kf[8];
      kc_ad_unpack(kr[k], kf);
#pragma unroll
      for (int gi = 0; gi < G; gi++) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) d = fmaf(qr[gi][i], kf[i], d);
#pragma unroll
        for (int o = TPR / 2; o > 0; o >>= 1) d += __shfl_xor_sync(KC_FULL_MASK, d, o);
        sc[gi][k] = ok[k] ? d * scale : -INFINITY;
      }
    }
#pragma unroll
    for (int k = 0; k < PPT; k++) {
      float vf[8];
      kc_ad_unpack(vr[k], vf);
#pragma unroll
      for (int gi = 0; gi < G; gi++) {
        if (sc[gi][k] == -INFINITY) continue;
        const float mx = fmaxf(m[gi], sc[gi][k]);
        const float corr = expf(m[gi] - mx), e = expf(sc[gi][k] - mx); /* m = -inf -> corr 0 */
        l[gi] = l[gi] * corr + e;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[gi][i] = fmaf(e, vf[i], acc[gi][i] * corr);
        m[gi] = mx;
      }
    }
    if (more) {
#pragma unroll
      for (int k = 0; k < PPT; k++) kr[k] = kn[k], vr[k] = vn[k], ok[k] = on[k];
    }
  }

  /* merge the row groups: per head, max over groups, then the rescaled sums */
  __shared__ float sm[G][NG], sl[G][NG];
  __shared__ __align__(16) float sacc[G][NG][TPR * 8];
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
    if (j == 0) sm[gi][grp] = m[gi], sl[gi][grp] = l[gi];
    *(float4 *)&sacc[gi][grp][d0] = make_float4(acc[gi][0], acc[gi][1], acc[gi][2], acc[gi][3]);
    *(float4 *)&sacc[gi][grp][d0 + 4] = make_float4(acc[gi][4], acc[gi][5], acc[gi][6], acc[gi][7]);
  }
  __syncthreads();
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
    float M = -INFINITY;
    for (int gg = 0; gg < NG; gg++) M = fmaxf(M, sm[gi][gg]);
    float *dst = part + (((size_t)t * n_head + h0 + gi) * n_split + sp) * (size_t)(head_dim + 4);
    for (int jj = tid; jj < head_dim; jj += AD_THREADS) {
      float a = 0.0f;
      for (int gg = 0; gg < NG; gg++)
        if (sm[gi][gg] != -INFINITY) a = fmaf(sacc[gi][gg][jj], expf(sm[gi][gg] - M), a);
      dst[jj] = a;
    }
    if (tid == 0) {
      float L = 0.0f;
      for (int gg = 0; gg < NG; gg++)
        if (sm[gi][gg] != -INFINITY) L = fmaf(sl[gi][gg], expf(sm[gi][gg] - M), L);
      dst[head_dim] = M;
      dst[head_dim + 1] = L;
    }
  }
}

/* Block (head, token) of AD_CT threads: the token's n_eff range maxima and sums (one thread per
 * range), then warp w adds the weighted accumulators of ranges w, w + AD_CT / 32, ... (float4
 * columns per lane, all loads of a warp independent), and the warps' sums are added in order. */
#define AD_CT 256
__global__ void __launch_bounds__(AD_CT)
    ad_combine_kernel(kc_batch_t b, const float *__restrict__ part, float *__restrict__ out, int n_head, int head_dim,
                      int n_split, int split_len, int fa_min) {
  kc_pdl_wait();
  kc_pdl_trigger();
  constexpr int NW = AD_CT / 32;
  const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, wi = tid >> 5;
  if (b.seq_ntok[b.seq_of_tok[t]] >= fa_min) return;
  const int n_eff = kc_ad_n_eff(b.pos[t] + 1, n_split, split_len), ld = head_dim + 4;
  const float *src = part + ((size_t)t * n_head + h) * n_split * (size_t)ld;
  __shared__ float sw[KC_AD_MAX_SPLIT], red[NW];
  __shared__ __align__(16) float sacc[NW][KC_ATTN_DEC_MAX_HD];
  __shared__ float sM, sinv;
  const float ms = tid < n_eff ? src[(size_t)tid * ld + head_dim] : -INFINITY;
  const float ls = tid < n_eff ? src[(size_t)tid * ld + head_dim + 1] : 0.0f;
  float v = kc_warp_max(ms);
  if (lane == 0) red[wi] = v;
  __syncthreads();
  if (tid == 0) {
    float M = red[0];
    for (int w = 1; w < NW; w++) M = fmaxf(M, red[w]);
    sM = M;
  }
  __syncthreads();
  const float w = ms != -INFINITY ? expf(ms - sM) : 0.0f;
  if (tid < KC_AD_MAX_SPLIT) sw[tid] = w;
  v = kc_warp_sum(ls * w);
  __syncthreads(); /* red is rewritten */
  if (lane == 0) red[wi] = v;
  __syncthreads();
  if (tid == 0) {
    float L = 0.0f;
    for (int i = 0; i < NW; i++) L += red[i];
    sinv = 1.0f / L;
  }
  for (int c = lane * 4; c < head_dim; c += 128) {
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int r = wi; r < n_eff; r += NW) {
      const float wr = sw[r];
      const float4 x = *(const float4 *)(src + (size_t)r * ld + c);
      a.x = fmaf(x.x, wr, a.x), a.y = fmaf(x.y, wr, a.y), a.z = fmaf(x.z, wr, a.z), a.w = fmaf(x.w, wr, a.w);
    }
    *(float4 *)&sacc[wi][c] = a;
  }
  __syncthreads();
  const float inv = sinv;
  for (int jj = tid; jj < head_dim; jj += AD_CT) {
    float a = 0.0f;
    for (int i = 0; i < NW; i++) a += sacc[i][jj];
    out[((size_t)t * n_head + h) * head_dim + jj] = a * inv;
  }
}

KC_API int kc_attn_decode_split_len(void) {
  static int len; /* 0: not read yet */
  if (!len) len = (int)kc_env_int("GANTRY_ATTN_SPLIT_LEN", 8, 4096, KC_AD_MIN_SPLIT_LEN);
  return len;
}

KC_API int kc_attn_decode_set_kernel(int k) {
  static int mode = -1; /* -1: not read yet */
  if (k >= 0 && k <= 2) mode = k;
  if (k == 0 || mode < 0) mode = (int)kc_env_int("GANTRY_ATTN_DECODE", 1, 2, 0);
  return mode;
}

/* The pass-1 kernel for a batch of n_tok tokens of this shape (fixed per captured graph, as
 * n_split is): the forced or default choice, kernel 1 where kernel 2 lacks the shape. */
static int ad_pick(int n_tok, int head_dim, int group) {
  const int mode = kc_attn_decode_set_kernel(-1);
  const int k = mode ? mode : n_tok >= KC_AD_WARP_MIN_TOK ? 2 : 1;
  return k == 2 && kc_ad_warp_shape(head_dim, group) ? 2 : 1;
}

KC_API int kc_attn_decode_splits(int n_tok, int n_head, int n_kv_head, int head_dim, int max_ctx) {
  const int64_t work = (int64_t)(n_tok > 0 ? n_tok : 1) * (n_kv_head > 0 ? n_kv_head : 1);
  /* about four waves of four resident blocks (128 threads, <= 128 registers) per SM of an
   * H100 / H200: a block's time is a chain of dependent load steps, so many short blocks keep
   * more bytes in flight and a partial last wave costs little (bench_attn, H200, qwen35-9b
   * batch 8 x 28K: 866 us with 544 blocks = one wave and 16 blocks, 485 us with 1056 blocks in
   * the kernel's previous form) */
  const int64_t target = 16 * 132;
  /* kernel 2: a warp per range, 8 resident per SM (255 registers, 24 KB of shared memory at
   * head_dim 128): the count rounds down so that equal ranges make whole waves of 8 x 132 (batch
   * 32 x 8 kv heads: 8 ranges = 2048 warps, not 9 = 2.2 waves) */
  const int k2 = n_kv_head > 0 && ad_pick(n_tok, head_dim, n_head / n_kv_head) == 2;
  int64_t n = k2 ? target / work : (target + work - 1) / work;
  int len = kc_attn_decode_split_len();
  if (k2 && len < KC_AD_WARP_MIN_LEN) len = KC_AD_WARP_MIN_LEN;
  const int64_t ranges = ((int64_t)max_ctx + len - 1) / len;
  if (n > KC_AD_MAX_SPLIT) n = KC_AD_MAX_SPLIT;
  if (n > ranges) n = ranges;
  return n < 1 ? 1 : (int)n;
}

KC_API size_t kc_attn_decode_part_floats(int n_tok, int n_head, int head_dim, int n_split) {
  return (size_t)n_tok * n_head * n_split * (size_t)(head_dim + 4);
}

KC_API int kc_attn_decode(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                          int n_kv_head, int head_dim, float scale, int n_split, int fa_min, float *part) {
  if (!kv.bf16 || head_dim % 32 != 0 || head_dim > KC_ATTN_DEC_MAX_HD || n_split < 1 || n_split > KC_AD_MAX_SPLIT ||
      n_kv_head <= 0 || n_head % n_kv_head || (((uintptr_t)q) & 15))
    return (int)cudaErrorInvalidValue;
  if (b.n_tok <= 0) return 0;
  const int group = n_head / n_kv_head;
  const int need = head_dim / 8;
  const int TPR = need <= 4 ? 4 : need <= 8 ? 8 : need <= 16 ? 16 : 32;
  const int G = group == 2 || group == 4 || group == 8 ? group : 1;
  int len = kc_attn_decode_split_len();
  if (ad_pick(b.n_tok, head_dim, group) == 2) {
    len = len > KC_AD_WARP_MIN_LEN ? len : KC_AD_WARP_MIN_LEN;
    const int rc = kc__attn_decode_warp(st, b, kv, q, part, n_head, n_kv_head, head_dim, scale, n_split, len, fa_min);
    if (rc) return rc;
    kc_launch(ad_combine_kernel, dim3(n_head, b.n_tok), AD_CT, 0, st, b, part, out, n_head, head_dim, n_split, len, fa_min);
    return (int)cudaGetLastError();
  }
  const dim3 grid(n_split, G > 1 ? n_kv_head : n_head, b.n_tok);
#define AD_GO(TT, GG, PP)                                                                                          \
  if (TPR == TT && G == GG)                                                                                        \
  kc_launch(ad_partial_kernel<TT, GG, PP>, grid, AD_THREADS, 0, st, b, kv, q, part, n_head, group, head_dim, scale,  \
            n_split, len, fa_min)
  AD_GO(4, 1, 4); AD_GO(8, 1, 4); AD_GO(16, 1, 4); AD_GO(32, 1, 4);
  AD_GO(4, 2, 4); AD_GO(8, 2, 4); AD_GO(16, 2, 4); AD_GO(32, 2, 4);
  AD_GO(4, 4, 2); AD_GO(8, 4, 2); AD_GO(16, 4, 2); AD_GO(32, 4, 2);
  AD_GO(4, 8, 2); AD_GO(8, 8, 2); AD_GO(16, 8, 2); AD_GO(32, 8, 2);
#undef AD_GO
  kc_launch(ad_combine_kernel, dim3(n_head, b.n_tok), AD_CT, 0, st, b, part, out, n_head, head_dim, n_split, len, fa_min);
  return (int)cudaGetLastError();
}
