/* kernels/attn_decode_warp.cu — kernel 2 of kc_attn_decode's pass 1 (see attn_decode.cuh): one
 * warp per (range, kv head, token) serving the G query heads of the kv head, K/V read once per
 * group.
 *
 * The range is cut into tiles of SP positions (16; 8 at head_dim 256: 8 KB of K and V per tile
 * either way); each tile's K and V rows (bf16, head_dim HD) go global -> shared by cp.async (16
 * bytes per copy, zero-filled past the range or for an invalid slot), ADW_NST tiles in flight per
 * warp, so a warp keeps up to 2 x 8 KB of loads outstanding without holding them in registers. Shared rows are 16-byte chunks, chunk c
 * of row r stored at c ^ adw_sw(r): conflict-free for the three access patterns below.
 * Per tile:
 * - scores: lane (r, qd) = r + RP * qd takes positions r, r + RP, ... of the tile over chunks
 *   qd, qd + DS, ... (DS lanes per position; its q slice G x HD / DS floats stays in registers),
 *   the DS partial dots summed by xor shuffles;
 * - one online-softmax update per tile and head (tile max by shuffles, one rescale of the
 *   accumulators per tile);
 * - P V: lane (cc, ph) holds acc[G][8] of dims 8cc..8cc+7 for positions ph, ph + PHN, ...; the
 *   probabilities come by shuffle from the lane that scored the position.
 * At the end the PHN phases are summed and (acc[HD], max, sum) written per (token, head, range)
 * as kernel 1 does; ad_combine_kernel merges the ranges. fp32 arithmetic throughout. */
#include "kernels/attn_decode.cuh"
#include "kernels/kv_store.cuh"

#define ADW_NST 3 /* tiles per warp in shared memory (cp.async stages) */


template <int HD, int G> struct adw_cfg {
  static constexpr int SP = HD > 128 ? 8 : 16; /* positions per tile (8 KB of K, 8 KB of V at HD 128 / 256) */
  static constexpr int CH = HD / 8;            /* 16-byte chunks per row */
  static constexpr int DS0 = G * HD / 128 > 2 ? G * HD / 128 : 2;
  static constexpr int DS = DS0 > 32 / SP ? DS0 : 32 / SP; /* lanes per scored position (RP <= SP) */
  static constexpr int RP = 32 / DS;                       /* positions per scoring pass */
  static constexpr int NP = SP / RP;                       /* scoring passes per tile */
  static constexpr int CPL = CH / DS;                      /* chunks per lane in scoring */
  static constexpr int PHN = 32 / CH;                      /* position phases in P V */
  static constexpr int FS = RP >= 8 ? 1 : 8 / RP;          /* swizzle step */
  static_assert(HD == 64 || HD == 128 || HD == 256, "head_dim 64, 128 or 256");
  static_assert(DS <= CH && NP >= 1 && SP % RP == 0 && RP % PHN == 0 && SP % PHN == 0, "lane layout");
};

/* Physical chunk of logical chunk c of row r: the 8 lanes of a quarter warp hit 8 distinct
 * 16-byte bank groups when they read one chunk of 8 rows (RP >= 8), chunks qd = 0, 1 of 4 rows
 * (RP = 4, FS = 2), or 8 chunks of one row. */
template <int FS> __device__ __forceinline__ int adw_sw(int r, int c) { return c ^ ((r * FS) & 7); }

template <int HD, int G>
__global__ void __launch_bounds__(32)
    adw_partial_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ q, float *__restrict__ part, int n_head,
                       float scale, int n_split, int split_len, int fa_min) {
  kc_pdl_wait();
  kc_pdl_trigger();
  using C = adw_cfg<HD, G>;
  constexpr int SP = C::SP, CH = C::CH, DS = C::DS, RP = C::RP, NP = C::NP, CPL = C::CPL, PHN = C::PHN, FS = C::FS;
  const int sp = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z, lane = threadIdx.x;
  const int s = b.seq_of_tok[t];
  if (b.seq_ntok[s] >= fa_min) return;
  const int ctx = b.pos[t] + 1, n_eff = kc_ad_n_eff(ctx, n_split, split_len);
  if (sp >= n_eff) return;
  const int len = (ctx + n_eff - 1) / n_eff, p_begin = sp * len, p_end = min(ctx, p_begin + len);
  const int n_tiles = p_end > p_begin ? (p_end - p_begin + SP - 1) / SP : 0;
  const int h0 = kvh * G;

  __shared__ __align__(16) uint4 sk[ADW_NST][SP * CH], sv[ADW_NST][SP * CH];
  __shared__ unsigned smask[ADW_NST]; /* bit r: row r of the stage's tile is a valid position */
  const __nv_bfloat16 *K = (const __nv_bfloat16 *)kv.k, *V = (const __nv_bfloat16 *)kv.v;
  const size_t koff = (size_t)kvh * HD;
  /* tile i -> stage i % ADW_NST; lane l finds the slot of row l % SP (32 / SP lanes per row) */
  auto issue = [&](int i) {
    const int st = i % ADW_NST, p = p_begin + i * SP + lane % SP;
    long long slot = -1;
    if (p < p_end) {
      slot = kc_kv_slot(b, kv, s, p);
      if (slot < 0 && lane < SP) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
    }
    const unsigned okm = __ballot_sync(KC_FULL_MASK, slot >= 0) & ((1u << SP) - 1u);
    if (lane == 0) smask[st] = okm;
#pragma unroll
    for (int k = 0; k < SP * CH / 32; k++) {
      const int idx = lane + 32 * k, row = idx / CH, c = idx % CH;
      const long long sl = __shfl_sync(KC_FULL_MASK, slot, row);
      const size_t go = sl >= 0 ? (size_t)sl * kv.kv_dim + koff + (size_t)c * 8 : 0;
      const int dst = row * CH + adw_sw<FS>(row, c), nb = sl >= 0 ? 16 : 0;
      kc_cp16(&sk[st][dst], K + go, nb);
      kc_cp16(&sv[st][dst], V + go, nb);
    }
  };

  /* scoring lane (r, qd) and its q slice: qr[gi][j] = q dims 8 (qd + DS j) .. + 7 of head h0 + gi */
  const int r = lane % RP, qd = lane / RP;
  float qr[G][CPL][8];
#pragma unroll
  for (int gi = 0; gi < G; gi++)
#pragma unroll
    for (int j = 0; j < CPL; j++) {
      const float *qp = q + ((size_t)t * n_head + h0 + gi) * HD + (qd + DS * j) * 8;
      const float4 a = *(const float4 *)qp, c = *(const float4 *)(qp + 4);
      qr[gi][j][0] = a.x, qr[gi][j][1] = a.y, qr[gi][j][2] = a.z, qr[gi][j][3] = a.w;
      qr[gi][j][4] = c.x, qr[gi][j][5] = c.y, qr[gi][j][6] = c.z, qr[gi][j][7] = c.w;
    }
  /* P V lane (cc, ph); m is the same in every lane, lsum sums this lane's scored positions */
  const int cc = lane % CH, ph = lane / CH;
  float acc[G][8], m[G], lsum[G];
#pragma unroll
  for (int gi = 0; gi < G; gi++) {
#pragma unroll
    for (int x = 0; x < 8; x++) acc[gi][x] = 0.0f;
    m[gi] = -INFINITY;
    lsum[gi] = 0.0f;
  }

#pragma unroll
  for (int i = 0; i < ADW_NST - 1; i++) {
    if (i < n_tiles) issue(i);
    kc_cp_commit();
  }
  for (int i = 0; i < n_tiles; i++) {
    if (i + ADW_NST - 1 < n_tiles) issue(i + ADW_NST - 1); /* into the stage tile i - 1 used */
    kc_cp_commit();
    kc_cp_wait<ADW_NST - 1>(); /* tile i has landed (this lane's copies) */
    __syncwarp();            /* ... and every lane's */
    const int st = i % ADW_NST;
    const unsigned okm = smask[st];
    const uint4 *tk = sk[st], *tv = sv[st];

    float sc[G][NP]; /* scores of positions r + RP * pp */
#pragma unroll
    for (int pp = 0; pp < NP; pp++) {
      const int row = r + RP * pp;
      float d[G];
#pragma unroll
      for (int gi = 0; gi < G; gi++) d[gi] = 0.0f;
#pragma unroll
      for (int j = 0; j < CPL; j++) {
        float kf[8];
        kc_ad_unpack(tk[row * CH + adw_sw<FS>(row, qd + DS * j)], kf);
#pragma unroll
        for (int gi = 0; gi < G; gi++)
#pragma unroll
          for (int x = 0; x < 8; x++) d[gi] = fmaf(qr[gi][j][x], kf[x], d[gi]);
      }
#pragma unroll
      for (int gi = 0; gi < G; gi++) {
#pragma unroll
        for (int o = RP; o < 32; o <<= 1) d[gi] += __shfl_xor_sync(KC_FULL_MASK, d[gi], o);
        sc[gi][pp] = (okm >> row) & 1u ? d[gi] * scale : -INFINITY;
      }
    }
    /* online softmax, once per tile: e = exp(score - new max), acc and lsum rescaled */
    float e[G][NP], corr[G];
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
      float tm = sc[gi][0];
#pragma unroll
      for (int pp = 1; pp < NP; pp++) tm = fmaxf(tm, sc[gi][pp]);
#pragma unroll
      for (int o = 1; o < RP; o <<= 1) tm = fmaxf(tm, __shfl_xor_sync(KC_FULL_MASK, tm, o));
      const float mn = fmaxf(m[gi], tm), mref = mn == -INFINITY ? 0.0f : mn;
      corr[gi] = expf(m[gi] - mref); /* m = -inf: 0 (acc, lsum are 0) */
      m[gi] = mn;
      float es = 0.0f;
#pragma unroll
      for (int pp = 0; pp < NP; pp++) es += (e[gi][pp] = expf(sc[gi][pp] - mref));
      lsum[gi] = fmaf(lsum[gi], corr[gi], es);
    }
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
      for (int x = 0; x < 8; x++) acc[gi][x] *= corr[gi];
#pragma unroll
    for (int k = 0; k < SP / PHN; k++) {
      const int row = ph + PHN * k;
      float vf[8];
      kc_ad_unpack(tv[row * CH + adw_sw<FS>(row, cc)], vf);
      /* e of row: lane row % RP (qd = 0) holds it in pass row / RP = PHN k / RP (RP % PHN == 0) */
      const int src = ph + (PHN * k) % RP;
#pragma unroll
      for (int gi = 0; gi < G; gi++) {
        const float w = __shfl_sync(KC_FULL_MASK, e[gi][(PHN * k) / RP], src);
#pragma unroll
        for (int x = 0; x < 8; x++) acc[gi][x] = fmaf(w, vf[x], acc[gi][x]);
      }
    }
    __syncwarp(); /* every lane is done with stage st before the next issue refills it */
  }
  kc_cp_wait<0>();

#pragma unroll
  for (int gi = 0; gi < G; gi++) {
#pragma unroll
    for (int o = CH; o < 32; o <<= 1)
#pragma unroll
      for (int x = 0; x < 8; x++) acc[gi][x] += __shfl_xor_sync(KC_FULL_MASK, acc[gi][x], o);
    float L = lsum[gi];
#pragma unroll
    for (int o = 1; o < RP; o <<= 1) L += __shfl_xor_sync(KC_FULL_MASK, L, o);
    float *dst = part + (((size_t)t * n_head + h0 + gi) * n_split + sp) * (size_t)(HD + 4);
    if (ph == 0) {
      *(float4 *)(dst + cc * 8) = make_float4(acc[gi][0], acc[gi][1], acc[gi][2], acc[gi][3]);
      *(float4 *)(dst + cc * 8 + 4) = make_float4(acc[gi][4], acc[gi][5], acc[gi][6], acc[gi][7]);
    }
    if (lane == 0) dst[HD] = m[gi], dst[HD + 1] = L;
  }
}

int kc__attn_decode_warp(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *part, int n_head,
                         int n_kv_head, int head_dim, float scale, int n_split, int split_len, int fa_min) {
  const int group = n_head / n_kv_head;
  const dim3 grid(n_split, n_kv_head, b.n_tok);
#define ADW_GO(HH, GG)                                                                                              \
  if (head_dim == HH && group == GG) {                                                                             \
    kc_launch(adw_partial_kernel<HH, GG>, grid, 32, 0, st, b, kv, q, part, n_head, scale, n_split, split_len, fa_min);     \
    return (int)cudaSuccess;                                                                                       \
  }
  ADW_GO(64, 1) ADW_GO(64, 2) ADW_GO(64, 4) ADW_GO(64, 8);
  ADW_GO(128, 1) ADW_GO(128, 2) ADW_GO(128, 4) ADW_GO(128, 8);
  ADW_GO(256, 1) ADW_GO(256, 2) ADW_GO(256, 4) ADW_GO(256, 8);
#undef ADW_GO
  return (int)cudaErrorInvalidValue;
}
