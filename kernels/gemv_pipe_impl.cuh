/* kernels/gemv_pipe_impl.cuh — the templates of the pipelined decode product (kernels/gemv_pipe.cuh):
 * included by kernels/gemv_pipe.cu (the default variant) and tools/bench/bench_gemv.cu (the sweep).
 * Device-side, not a public header.
 *
 * Variant <D, NR, R, W, ST, MINB, XP>: decoder D (gp_q4k / gp_q5k / gp_q6k), NR x rows at most (2, 4, 8), R
 * weight rows per block (32, 64, 128), W warps, ST pipeline stages, MINB blocks per SM for the
 * register bound, XP bf16 parts of x (3: hi + mid + lo, fp32-exact; 1: x rounded to bf16, the mmq
 * path's one part under bf16 activations; only with NR = 8); ks (runtime) = the cluster size = K parts.
 *
 * Work split. NG = R / 16 row groups of 16 rows. NG >= W: warp wi takes the G = NG / W groups wi,
 * wi + W, ... of one chunk per stage (KQ = 1 chunk per stage); NG < W: warp wi takes group wi % NG
 * of chunk wi / NG of the stage (KQ = W / NG chunks per stage, G = 1). Block b of cluster rank k
 * takes tile b / ks and chunks [k nkb / ks, (k + 1) nkb / ks) in stages of KQ chunks.
 *
 * Pipeline (one barrier per stage). Stage i = the raw GGUF bytes of the block's R rows x KQ chunks,
 * slot (c, row) at ((i % ST) KQ + c) R + row times SROW bytes (16-byte cp.async; Q6_K's 210-byte
 * blocks are 2-byte aligned: the 15 aligned 16-byte pieces covering [start, start + 210) are copied
 * and the decoder reads from start & 15, words through a funnel shift). Iteration i: wait until
 * stage i has landed (cp.async.wait_group ST - 2) + __syncthreads; issue stage i + ST - 1 into the
 * slot stage i - 1 used; load x of stage i + 1 into registers; compute stage i from B buffer i & 1;
 * split x of stage i + 1 into B buffer (i + 1) & 1 (read after the next barrier).
 *
 * mma m16n8k16 (layout: matvec_mma.cu). k-step s of a chunk = elements 16s .. 16s + 15 in order;
 * lane (g, tig) holds elements 16s + 4tig + 0..3 at k-slots 2tig, 2tig+1 (a0 / a2 low) and 2tig+8,
 * 2tig+9 (a2 / a3) for rows g and g + 8, and the same elements of its B column g. B columns: NR <= 4
 * ("P4", NT = NR / 2 tiles): tile t column 4j + p = x row 2t + j, part p (hi, mid, lo, zero); NR = 8
 * ("P8", NT = XP tiles): tile p column r = x row r, part p (XP = 1: one tile, a third of the mma and
 * B fragments of XP = 3 at any row count). B buffer [c][s / 2][t][lane] uint4 =
 * (b0, b1) of k-step 2(s/2), then of 2(s/2) + 1; Σx (Q4_K) [c][sub-block][x row]. Rows >= n and the
 * zero column are zeroed once and never written.
 * Q4_K / Q5_K: qs word 8j + 4h + tig of a row holds elements 64j + 32nib + 16h + 4tig + 0..3 (nibble nib),
 * k-step s = 4j + 2nib + h, sub-block s / 2. Q6_K: element 128h + 32k + l, s = 8h + 2k + l/16 (one
 * sub-block per k-step): ql word 16h + 8(k & 1) + 4(l / 16) + tig (nibble k / 2), qh word
 * 32 + 8h + 4(l / 16) + tig (bits 2k).
 * Per chunk and row: T1 += sc · (Σ over parts of the mma sums), T2 += m · Σx, acc += d T1 - dmin T2.
 * The block's sums are added over the KQ chunk slots in slot order, then over the cluster's ranks in
 * rank order: a feature's result depends only on (variant, ks, its weight row, x).
 *
 * PDL (kernels/common.cuh): the first ST - 1 stages of weight bytes are issued before kc_pdl_wait();
 * x is read and outputs written only after it. kc_launch_cluster sets the cluster and the PDL attribute in
 * one cudaLaunchKernelEx (scripts/check_pdl.py checks its kernels as kc_launch's). */
#ifndef GANTRY_KERNELS_GEMV_PIPE_IMPL_CUH
#define GANTRY_KERNELS_GEMV_PIPE_IMPL_CUH
#include <cooperative_groups.h>

#include "format/dtype.h"
#include "kernels/gemv_pipe.cuh"
#include "kernels/matvec_mma_internal.cuh" /* mvm_split_x, mvm_sub_sum; mma_dec.cuh */

typedef struct {
  const uint8_t *w[KC_MATVEC_MAX_SEGS]; /* swiglu: w[0] gate */
  const uint8_t *wup;                   /* swiglu: up weight */
  float *out[KC_MATVEC_MAX_SEGS];
  int64_t n_out[KC_MATVEC_MAX_SEGS];
  size_t row_bytes[KC_MATVEC_MAX_SEGS];
  unsigned tile_end[KC_MATVEC_MAX_SEGS]; /* segment s owns tiles [tile_end[s-1], tile_end[s]) */
  int n_seg, swiglu;
} gp_args_t;

/* byte i of v as an exact float */
__device__ __forceinline__ float gp_ubyte(uint32_t v, int i) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (unsigned)i)) - 8388608.0f;
}
/* byte i of v ^ 0x80808080 (a signed byte + 128) as the signed value */
__device__ __forceinline__ float gp_sbyte(uint32_t vx, int i) {
  return __uint_as_float(__byte_perm(vx, 0x4B000000u, 0x7440u | (unsigned)i)) - 8388736.0f;
}

/* Per-chunk sums of one lane for its G groups x 2 rows (g, g + 8) x XR accumulators:
 * P8: x rows 2tig, 2tig + 1; P4: tile t (x row 2t + tig / 2; even tig hi + mid, odd tig lo). */
template <int NT, bool P8> struct gp_lay {
  static constexpr int XR = P8 ? 2 : NT;
  /* c: the NT tiles' C registers; adds sc * (part sums) of row rr into t1[rr][*] */
  __device__ static __forceinline__ void addc(float (&t1)[2][XR], const float (&c)[NT][4], float sc0, float sc1) {
    if constexpr (P8 && NT == 1) { /* one part */
#pragma unroll
      for (int j = 0; j < 2; j++) {
        t1[0][j] = fmaf(sc0, c[0][j], t1[0][j]);
        t1[1][j] = fmaf(sc1, c[0][2 + j], t1[1][j]);
      }
    } else if constexpr (P8) {
#pragma unroll
      for (int j = 0; j < 2; j++) {
        t1[0][j] = fmaf(sc0, (c[0][j] + c[1][j]) + c[2][j], t1[0][j]);
        t1[1][j] = fmaf(sc1, (c[0][2 + j] + c[1][2 + j]) + c[2][2 + j], t1[1][j]);
      }
    } else {
#pragma unroll
      for (int t = 0; t < NT; t++) {
        t1[0][t] = fmaf(sc0, c[t][0] + c[t][1], t1[0][t]);
        t1[1][t] = fmaf(sc1, c[t][2] + c[t][3], t1[1][t]);
      }
    }
  }
};

/* ---------------------------------------------------------------- decoders (smem -> mma) */
/* Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]}; Q5_K (Q5): {f16 d, dmin; u8 scales[12]; u8 qh[32];
 * u8 qs[128]}, the fifth bit of element 64j + 32nib + l in qh[l] bit 2j + nib (lane tig: qh word
 * 4h + tig, one per h and row) */
template <bool Q5> struct gp_qk {
  static constexpr int BB = Q5 ? 176 : 144, SROW = BB, NSEG = BB / 16, QS = Q5 ? 48 : 16;
  static constexpr bool ALIGNED = true, HAS_MIN = true;
  /* acc[i][rr][xr] += the chunk's products of rows 16 grp[i] + g + 8rr of slot ws (row stride
   * SROW); bq: the chunk's B [8][NT][32]; sxc: Σx [8][NR] */
  template <int NT, bool P8, int NR, int G>
  __device__ static __forceinline__ void chunk(float (&acc)[G][2][gp_lay<NT, P8>::XR], const uint8_t *ws,
                                               const int (&grp)[G], const uint4 *bq, const float *sxc, int lane,
                                               int64_t) {
    constexpr int XR = gp_lay<NT, P8>::XR;
    const int g = lane >> 2, tig = lane & 3;
    const uint8_t *row[G][2];
    uint32_t scw[G][2][2], mw[G][2][2];
    float dd[G][2], dm[G][2], t1[G][2][XR], t2[G][2][XR];
    [[maybe_unused]] uint32_t qhw[G][2][2];
#pragma unroll
    for (int i = 0; i < G; i++)
#pragma unroll
      for (int rr = 0; rr < 2; rr++) {
        row[i][rr] = ws + (16 * grp[i] + g + 8 * rr) * SROW;
        if constexpr (Q5)
#pragma unroll
          for (int h = 0; h < 2; h++) qhw[i][rr][h] = *(const uint32_t *)(row[i][rr] + 16 + 4 * (4 * h + tig));
        const uint4 h = *(const uint4 *)row[i][rr];
        scw[i][rr][0] = h.y & 0x3f3f3f3fu;
        scw[i][rr][1] = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
        mw[i][rr][0] = h.z & 0x3f3f3f3fu;
        mw[i][rr][1] = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
        dd[i][rr] = kc_h2f((uint16_t)(h.x & 0xffffu));
        dm[i][rr] = kc_h2f((uint16_t)(h.x >> 16));
#pragma unroll
        for (int x = 0; x < XR; x++) t1[i][rr][x] = t2[i][rr][x] = 0.0f;
      }
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint32_t wq[G][2][2];
#pragma unroll
      for (int i = 0; i < G; i++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++)
#pragma unroll
          for (int h = 0; h < 2; h++) wq[i][rr][h] = *(const uint32_t *)(row[i][rr] + QS + 4 * (8 * j + 4 * h + tig));
#pragma unroll
      for (int nib = 0; nib < 2; nib++) {
        const int sb = 2 * j + nib;
        uint4 b[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) b[t] = bq[(sb * NT + t) * 32 + lane];
        float sx[XR];
        if constexpr (P8) {
          const float2 v = *(const float2 *)&sxc[sb * NR + 2 * tig];
          sx[0] = v.x, sx[1] = v.y;
        } else {
#pragma unroll
          for (int t = 0; t < NT; t++) sx[t] = (tig & 1) ? 0.0f : sxc[sb * NR + 2 * t + (tig >> 1)];
        }
#pragma unroll
        for (int i = 0; i < G; i++) {
          float c[NT][4];
#pragma unroll
          for (int t = 0; t < NT; t++) c[t][0] = c[t][1] = c[t][2] = c[t][3] = 0.0f;
#pragma unroll
          for (int h = 0; h < 2; h++) {
            uint32_t qa = (wq[i][0][h] >> (4 * nib)) & 0x0f0f0f0fu, qb = (wq[i][1][h] >> (4 * nib)) & 0x0f0f0f0fu;
            if constexpr (Q5) {
              qa |= ((qhw[i][0][h] >> (2 * j + nib)) & 0x01010101u) << 4;
              qb |= ((qhw[i][1][h] >> (2 * j + nib)) & 0x01010101u) << 4;
            }
            const uint32_t af[4] = {mvm_qpair(qa, 0x4140u, 0x43004300u), mvm_qpair(qb, 0x4140u, 0x43004300u),
                                    mvm_qpair(qa, 0x4342u, 0x43004300u), mvm_qpair(qb, 0x4342u, 0x43004300u)};
#pragma unroll
            for (int t = 0; t < NT; t++) mvm_mma(c[t], af, h ? b[t].z : b[t].x, h ? b[t].w : b[t].y);
          }
          const float sc0 = gp_ubyte(scw[i][0][sb >> 2], sb & 3), sc1 = gp_ubyte(scw[i][1][sb >> 2], sb & 3);
          const float m0 = gp_ubyte(mw[i][0][sb >> 2], sb & 3), m1 = gp_ubyte(mw[i][1][sb >> 2], sb & 3);
          gp_lay<NT, P8>::addc(t1[i], c, sc0, sc1);
#pragma unroll
          for (int x = 0; x < XR; x++) {
            t2[i][0][x] = fmaf(m0, sx[x], t2[i][0][x]);
            t2[i][1][x] = fmaf(m1, sx[x], t2[i][1][x]);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < G; i++)
#pragma unroll
      for (int rr = 0; rr < 2; rr++)
#pragma unroll
        for (int x = 0; x < XR; x++)
          acc[i][rr][x] = fmaf(dd[i][rr], t1[i][rr][x], fmaf(-dm[i][rr], t2[i][rr][x], acc[i][rr][x]));
  }
};

typedef gp_qk<false> gp_q4k;
typedef gp_qk<true> gp_q5k;

/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B, 2-byte aligned in a row) */
struct gp_q6k {
  static constexpr int BB = 210, SROW = 240, NSEG = 15;
  static constexpr bool ALIGNED = false, HAS_MIN = false;
  /* as gp_q4k::chunk; lo: the low 32 bits of the global address of each row's chunk start (the
   * slot holds its 16-byte aligned cover: the block starts at lo & 15) is given per row by rowoff */
  template <int NT, bool P8, int NR, int G, class OFF>
  __device__ static __forceinline__ void chunk_off(float (&acc)[G][2][gp_lay<NT, P8>::XR], const uint8_t *ws,
                                                   const int (&grp)[G], const uint4 *bq, int lane, OFF rowoff) {
    constexpr int XR = gp_lay<NT, P8>::XR;
    const int g = lane >> 2, tig = lane & 3;
    const uint32_t *rw[G][2];
    unsigned sh[G][2];
    uint32_t scw[G][2][4];
    float dd[G][2], t1[G][2][XR];
#pragma unroll
    for (int i = 0; i < G; i++)
#pragma unroll
      for (int rr = 0; rr < 2; rr++) {
        const int lr = 16 * grp[i] + g + 8 * rr;
        const unsigned off = rowoff(lr); /* even, 0..14 */
        rw[i][rr] = (const uint32_t *)(ws + lr * SROW + (off & 12u));
        sh[i][rr] = (off & 2u) * 8u;
#pragma unroll
        for (int q = 0; q < 4; q++)
          scw[i][rr][q] = __funnelshift_r(rw[i][rr][48 + q], rw[i][rr][49 + q], sh[i][rr]) ^ 0x80808080u;
        dd[i][rr] = kc_h2f(*(const uint16_t *)(ws + lr * SROW + off + 208));
#pragma unroll
        for (int x = 0; x < XR; x++) t1[i][rr][x] = 0.0f;
      }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      uint32_t qh[G][2][2], ql[G][2][2][2]; /* [i][rr][lh], [i][rr][kk][lh] */
#pragma unroll
      for (int i = 0; i < G; i++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
          const uint32_t *p = rw[i][rr];
          const unsigned s = sh[i][rr];
#pragma unroll
          for (int lh = 0; lh < 2; lh++) {
            const int wh = 32 + 8 * h + 4 * lh + tig;
            qh[i][rr][lh] = __funnelshift_r(p[wh], p[wh + 1], s);
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
              const int wl = 16 * h + 8 * kk + 4 * lh + tig;
              ql[i][rr][kk][lh] = __funnelshift_r(p[wl], p[wl + 1], s);
            }
          }
        }
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int pr = 4 * h + k; /* k-steps 2pr (lh 0), 2pr + 1 (lh 1) */
        uint4 b[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) b[t] = bq[(pr * NT + t) * 32 + lane];
#pragma unroll
        for (int i = 0; i < G; i++)
#pragma unroll
          for (int lh = 0; lh < 2; lh++) {
            const int s = 2 * pr + lh;
            uint32_t q[2];
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
              const uint32_t a = ql[i][rr][k & 1][lh], v = qh[i][rr][lh];
              const uint32_t lo = (k & 2) ? (a >> 4) & 0x0f0f0f0fu : a & 0x0f0f0f0fu;
              const uint32_t hi = (k < 2 ? v << (4 - 2 * k) : v >> (2 * k - 4)) & 0x30303030u;
              q[rr] = lo | hi;
            }
            const uint32_t af[4] = {mvm_qpair(q[0], 0x4140u, 0x43204320u), mvm_qpair(q[1], 0x4140u, 0x43204320u),
                                    mvm_qpair(q[0], 0x4342u, 0x43204320u), mvm_qpair(q[1], 0x4342u, 0x43204320u)};
            float c[NT][4];
#pragma unroll
            for (int t = 0; t < NT; t++) {
              c[t][0] = c[t][1] = c[t][2] = c[t][3] = 0.0f;
              mvm_mma(c[t], af, lh ? b[t].z : b[t].x, lh ? b[t].w : b[t].y);
            }
            gp_lay<NT, P8>::addc(t1[i], c, gp_sbyte(scw[i][0][s >> 2], s & 3), gp_sbyte(scw[i][1][s >> 2], s & 3));
          }
      }
    }
#pragma unroll
    for (int i = 0; i < G; i++)
#pragma unroll
      for (int rr = 0; rr < 2; rr++)
#pragma unroll
        for (int x = 0; x < XR; x++) acc[i][rr][x] = fmaf(dd[i][rr], t1[i][rr][x], acc[i][rr][x]);
  }
};

/* ---------------------------------------------------------------- the kernel */
template <class D, int NR, int R, int W, int ST, int XP> struct gp_cfg {
  static constexpr bool P8 = NR == 8;
  static constexpr int NT = P8 ? XP : NR / 2;
  static constexpr int XR = gp_lay<NT, P8>::XR;
  static constexpr int NG = R / 16;
  static constexpr int G = NG >= W ? NG / W : 1;
  static constexpr int KQ = NG >= W ? 1 : W / NG;
  static constexpr int NTH = W * 32;
  static constexpr int XQ = (KQ * NR * 64 + NTH - 1) / NTH; /* x quads per thread and stage */
  static constexpr size_t WST = (size_t)KQ * R * D::SROW;   /* bytes of one stage */
  static constexpr size_t OFF_B = (size_t)ST * WST;
  static constexpr size_t BBUF = (size_t)KQ * 8 * NT * 32; /* uint4 per B buffer */
  static constexpr size_t OFF_S = OFF_B + 2 * BBUF * 16;
  static constexpr size_t SBUF = D::HAS_MIN ? (size_t)KQ * 8 * NR : 0; /* floats per Σx buffer */
  static constexpr size_t SMEM = OFF_S + 2 * SBUF * 4;
  static_assert(NR == 2 || NR == 4 || NR == 8, "NR");
  static_assert(XP == 3 || (XP == 1 && NR == 8), "one x part: the P8 layout");
  static_assert((NG % W) == 0 || (W % NG) == 0, "R / W");
  static_assert(R <= NTH, "one thread per block row fills rowtab");
  static_assert((R & (R - 1)) == 0, "R a power of two");
  static_assert((size_t)(KQ + 1) * R * NR * 4 <= OFF_B, "reduction aliases the stages");
};

template <class D, int NR, int R, int W, int ST, int MINB, int XP>
__global__ void __launch_bounds__(W * 32, MINB)
    gp_kernel(const gp_args_t a, const float *__restrict__ x, int64_t cols, int n, int ks) {
  using C = gp_cfg<D, NR, R, W, ST, XP>;
  constexpr int NT = C::NT, XR = C::XR, G = C::G, KQ = C::KQ, NTH = C::NTH;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ const uint8_t *rowtab[R]; /* global start of each block row (clamped to n_out - 1) */
  __shared__ const uint8_t *wend[2];   /* end of the weight of rows < R/2 (0) and >= R/2 (1) */
  uint4 *bsm = (uint4 *)(smem + C::OFF_B);
  float *sxs = (float *)(smem + C::OFF_S);
  const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5;

  /* tile, segment, K range */
  const unsigned tile = blockIdx.x / (unsigned)ks;
  const int rank = (int)(blockIdx.x % (unsigned)ks);
  int sg = 0;
  while (sg + 1 < a.n_seg && tile >= a.tile_end[sg]) sg++;
  const int64_t n_out = a.n_out[sg];
  const size_t rb = a.row_bytes[sg];
  const int fpt = a.swiglu ? R / 2 : R;
  const int64_t f0 = (int64_t)(tile - (sg ? a.tile_end[sg - 1] : 0u)) * fpt;
  const int64_t nkb = cols >> 8, kb_lo = rank * nkb / ks, kb_hi = (rank + 1) * nkb / ks;
  const int64_t nstep = (kb_hi - kb_lo + KQ - 1) / KQ;

  if (tid < R) {
    const bool up = a.swiglu && tid >= R / 2;
    int64_t f = f0 + (up ? tid - R / 2 : tid);
    if (f > n_out - 1) f = n_out - 1;
    rowtab[tid] = (up ? a.wup : a.w[sg]) + (size_t)f * rb;
  }
  if (tid < 2) wend[tid] = ((a.swiglu && tid) ? a.wup : a.w[sg]) + (size_t)n_out * rb;
  /* B and Σx buffers: rows >= n and the zero column stay zero */
  for (int t = tid; t < (int)(2 * C::BBUF); t += NTH) bsm[t] = make_uint4(0u, 0u, 0u, 0u);
  for (int t = tid; t < (int)(2 * C::SBUF); t += NTH) sxs[t] = 0.0f;
  __syncthreads();

  /* stage i's weight bytes into slot i % ST (chunks past kb_hi are skipped) */
  auto issue = [&](int64_t i) {
    if (i < nstep) {
      uint8_t *buf = smem + (size_t)(i % ST) * C::WST;
      for (int t = tid; t < KQ * R * D::NSEG; t += NTH) {
        const int rc = t / D::NSEG, sgi = t - rc * D::NSEG, c = rc / R, lr = rc % R; /* R: a power of two */
        const int64_t kb = kb_lo + i * KQ + c;
        if (kb >= kb_hi) continue;
        const uint8_t *src = rowtab[lr] + kb * D::BB;
        uint8_t *dst = buf + (size_t)(c * R + lr) * D::SROW + 16 * sgi;
        if constexpr (D::ALIGNED) {
          kc_cp16(dst, src + 16 * sgi, 16);
        } else {
          const uint8_t *a0 = (const uint8_t *)((uintptr_t)src & ~(uintptr_t)15), *p = a0 + 16 * sgi;
          const uint8_t *e = wend[a.swiglu && lr >= R / 2];
          const int64_t v = e - p;
          const int bytes = v >= 16 ? 16 : v > 0 ? (int)v : 0;
          kc_cp16(dst, bytes ? p : a0, bytes);
        }
      }
    }
    kc_cp_commit();
  };
  /* x quads of stage i: slot u of this thread = quad t & 63 of x row (t >> 6) / KQ, chunk (t >> 6) % KQ */
  float4 xv[C::XQ];
  auto xload = [&](int64_t i) {
#pragma unroll
    for (int u = 0; u < C::XQ; u++) {
      const int t = tid + u * NTH, r = (t >> 6) / KQ, c = (t >> 6) % KQ;
      const int64_t kb = kb_lo + i * KQ + c;
      xv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < n && kb < kb_hi) xv[u] = __ldg((const float4 *)(x + (size_t)r * (size_t)cols + kb * 256 + 4 * (t & 63)));
    }
  };
  /* the loaded quads as B fragments (and Σx) into buffer bf; warp-uniform per 64 quads */
  auto xfill = [&](int64_t i, int bf) {
#pragma unroll
    for (int u = 0; u < C::XQ; u++) {
      const int t = tid + u * NTH, r = (t >> 6) / KQ, c = (t >> 6) % KQ, q = t & 63;
      const int64_t kb = kb_lo + i * KQ + c;
      if (!(r < n && kb < kb_hi)) continue;
      uint2 pt[3];
      float4 xs = xv[u]; /* the x of Σx: as the B parts hold it */
      if constexpr (XP == 3) {
        mvm_split_x(xv[u], pt[0], pt[1], pt[2]);
      } else { /* x = bf16(x) rounded to nearest even, Σx of the rounded values (as mmq's one part) */
        const __nv_bfloat162 h01 = __floats2bfloat162_rn(xv[u].x, xv[u].y), h23 = __floats2bfloat162_rn(xv[u].z, xv[u].w);
        pt[0] = make_uint2(mvm_bits(h01), mvm_bits(h23));
        xs = make_float4(__low2float(h01), __high2float(h01), __low2float(h23), __high2float(h23));
      }
      const int s = q >> 2, tg = q & 3;
      uint4 *bc = bsm + (size_t)bf * C::BBUF + (size_t)c * 8 * NT * 32;
#pragma unroll
      for (int p = 0; p < XP; p++) {
        const int tt = C::P8 ? p : r >> 1, ln = C::P8 ? 4 * r + tg : 16 * (r & 1) + 4 * p + tg;
        ((uint2 *)&bc[((s >> 1) * NT + tt) * 32 + ln])[s & 1] = pt[p];
      }
      if constexpr (D::HAS_MIN) { /* sub-block q / 8 */
        const float ps = mvm_sub_sum(xs);
        if ((q & 7) == 0) sxs[(size_t)bf * C::SBUF + ((size_t)c * 8 + (q >> 3)) * NR + r] = ps;
      }
    }
  };

  /* this warp's groups and chunk slot */
  int grp[G];
  const int cw = C::NG >= W ? 0 : wi / C::NG;
#pragma unroll
  for (int i = 0; i < G; i++) grp[i] = C::NG >= W ? wi + W * i : wi % C::NG;
  float acc[G][2][XR];
#pragma unroll
  for (int i = 0; i < G; i++)
#pragma unroll
    for (int rr = 0; rr < 2; rr++)
#pragma unroll
      for (int q = 0; q < XR; q++) acc[i][rr][q] = 0.0f;

#pragma unroll
  for (int i = 0; i < ST - 1; i++) issue(i); /* weights only: in flight while the previous kernel ends */
  kc_pdl_wait(); /* PDL: x (the previous kernel's output) and the outputs only from here */
  kc_pdl_trigger();
  xload(0);
  xfill(0, 0);
  for (int64_t it = 0; it < nstep; it++) {
    kc_cp_wait<ST - 2>();
    __syncthreads(); /* stage it landed for all; stage it - 1's slot and B buffer (it + 1) & 1 are free */
    issue(it + ST - 1);
    const bool more = it + 1 < nstep;
    if (more) xload(it + 1);
    const int64_t kb = kb_lo + it * KQ + cw;
    if (kb < kb_hi) { /* warp-uniform */
      const uint8_t *ws = smem + (size_t)(it % ST) * C::WST + (size_t)cw * R * D::SROW;
      const uint4 *bq = bsm + (size_t)(it & 1) * C::BBUF + (size_t)cw * 8 * NT * 32;
      if constexpr (D::HAS_MIN) {
        const float *sxc = sxs + (size_t)(it & 1) * C::SBUF + (size_t)cw * 8 * NR;
        D::template chunk<NT, C::P8, NR, G>(acc, ws, grp, bq, sxc, lane, kb);
      } else {
        D::template chunk_off<NT, C::P8, NR, G>(acc, ws, grp, bq, lane, [&](int lr) {
          return ((unsigned)(uintptr_t)rowtab[lr] + (unsigned)kb * (unsigned)D::BB) & 15u;
        });
      }
    }
    if (more) xfill(it + 1, (int)((it + 1) & 1));
  }
  kc_cp_wait<0>();
  __syncthreads(); /* every warp done with the stages: the reduction reuses them */

  /* red [KQ][R][NR]: this warp's sums per (chunk slot, block row, x row); part [R][NR]: the block's */
  float *red = (float *)smem, *part = red + KQ * R * NR;
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int i = 0; i < G; i++)
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      float *dst = red + ((size_t)cw * R + 16 * grp[i] + g + 8 * rr) * NR;
      if constexpr (C::P8) {
        dst[2 * tig] = acc[i][rr][0], dst[2 * tig + 1] = acc[i][rr][1];
      } else {
#pragma unroll
        for (int t = 0; t < NT; t++) {
          const float o = __shfl_down_sync(KC_FULL_MASK, acc[i][rr][t], 1); /* lane tig + 1: the lo part */
          if ((tig & 1) == 0) dst[2 * t + (tig >> 1)] = acc[i][rr][t] + o;
        }
      }
    }
  __syncthreads();
  for (int t = tid; t < R * NR; t += NTH) {
    float s = red[t];
#pragma unroll
    for (int c = 1; c < KQ; c++) s += red[c * R * NR + t];
    part[t] = s;
  }
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  if (ks > 1) cl.sync(); /* every rank's part written */
  else __syncthreads();
  float *out = a.out[sg];
  const int nf = a.swiglu ? R / 2 : R;
  for (int t = tid; t < nf * NR; t += NTH) {
    const int lr = t / NR, xr = t % NR;
    if (lr % ks != rank) continue; /* rank k finishes the rows lr % ks == k */
    const int64_t f = f0 + lr;
    if (xr >= n || f >= n_out) continue;
    float v = 0.0f, u = 0.0f;
    for (int k = 0; k < ks; k++) {
      const float *pk = ks > 1 ? cl.map_shared_rank(part, k) : part;
      v += pk[t];
      if (a.swiglu) u += pk[t + (R / 2) * NR];
    }
    out[(size_t)xr * (size_t)n_out + f] = a.swiglu ? v / (1.0f + expf(-v)) * u : v; /* as kernels/swiglu.cu */
  }
  if (ks > 1) cl.sync(); /* the other ranks' shared memory stays until read */
}

/* ---------------------------------------------------------------- host side */
/* Fills a.tile_end for tiles of R rows (swiglu R / 2 features); returns the tile count, -1 if the
 * grid does not fit. */
static inline int64_t gp_plan(gp_args_t &a, int R) {
  const int fpt = a.swiglu ? R / 2 : R;
  int64_t tiles = 0;
  for (int s = 0; s < a.n_seg; s++) {
    tiles += (a.n_out[s] + fpt - 1) / fpt;
    if (tiles * 8 > 0x7fffffff) return -1;
    a.tile_end[s] = (unsigned)tiles;
  }
  return tiles;
}

#define GP_MAX_DEV 64 /* devices whose function attribute is tracked (more: set on every call) */

/* Launches variant <D, NR, R, W, ST, MINB, XP> with K split over clusters of ks blocks (1..8, <= the
 * chunk count; 0: the smallest power of two giving >= 2 blocks per SM). Returns a cudaError_t value
 * (cudaErrorInvalidConfiguration when the variant's shared memory does not fit). The dynamic shared
 * memory attribute is set once per device (a function attribute, not a stream operation). */
template <class D, int NR, int R, int W, int ST, int MINB, int XP = 3>
static int gp_go(cudaStream_t st, gp_args_t a, int64_t cols, const float *x, int n, int ks) {
  using C = gp_cfg<D, NR, R, W, ST, XP>;
  auto kern = gp_kernel<D, NR, R, W, ST, MINB, XP>;
  static volatile int attr_done[GP_MAX_DEV], sms_of[GP_MAX_DEV]; /* benign races: idempotent values */
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return (int)cudaErrorInvalidDevice;
  const int slot = dev >= 0 && dev < GP_MAX_DEV ? dev : -1;
  int sms = slot >= 0 ? sms_of[slot] : 0;
  if (slot < 0 || !attr_done[slot]) {
    int maxsm = 0;
    cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (C::SMEM + 1024 > (size_t)maxsm) return (int)cudaErrorInvalidConfiguration;
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM);
    if (e != cudaSuccess) return (int)e;
    if (slot >= 0) sms_of[slot] = sms, attr_done[slot] = 1;
  }
  const int64_t tiles = gp_plan(a, R), nkb = cols >> 8;
  if (tiles < 0) return (int)cudaErrorInvalidValue;
  if (ks == 0) {
    ks = 1;
    while (2 * ks <= 8 && 2 * ks <= nkb && tiles * ks < 2 * (int64_t)sms) ks *= 2;
  }
  if (ks < 1 || ks > 8 || ks > nkb) return (int)cudaErrorInvalidValue;
  const cudaError_t e = kc_launch_cluster(gp_kernel<D, NR, R, W, ST, MINB, XP>, (unsigned)(tiles * ks), W * 32, C::SMEM, st, (unsigned)ks, a, x, cols, n, ks);
  return (int)(e != cudaSuccess ? e : cudaGetLastError());
}

/* kc_gpipe_launch's argument checks and gp_args_t; returns 0 or a cudaError_t value */
static inline int gp_args(gp_args_t &a, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup, int64_t cols,
                          const float *x, int n) {
  if (n_seg < 1 || n_seg > KC_MATVEC_MAX_SEGS || (wup && n_seg != 1) || n < 1 || n > KC_GPIPE_MAX_ROWS ||
      cols <= 0 || cols % 256 != 0 || ((uintptr_t)x & 15) != 0 || (wup && ((uintptr_t)wup & 15) != 0))
    return (int)cudaErrorInvalidValue;
  a = gp_args_t{};
  for (int s = 0; s < n_seg; s++) {
    if (segs[s].n_out <= 0 || !kc_gpipe_ok(type, segs[s].w, segs[s].row_bytes, cols, n)) return (int)cudaErrorInvalidValue;
    a.w[s] = (const uint8_t *)segs[s].w;
    a.out[s] = segs[s].out;
    a.n_out[s] = segs[s].n_out;
    a.row_bytes[s] = segs[s].row_bytes;
  }
  a.n_seg = n_seg;
  a.wup = (const uint8_t *)wup;
  a.swiglu = wup != NULL;
  return 0;
}

/* variant <R, W, ST, MINB> for type D at n rows, x in XP parts: the NR instance (one part: NR 8) */
template <class D, int R, int W, int ST, int MINB, int XP = 3>
static int gp_go_n(cudaStream_t st, const gp_args_t &a, int64_t cols, const float *x, int n, int ks) {
  if constexpr (XP == 1) {
    return gp_go<D, 8, R, W, ST, MINB, 1>(st, a, cols, x, n, ks);
  } else {
    if (n <= 2) return gp_go<D, 2, R, W, ST, MINB>(st, a, cols, x, n, ks);
    if (n <= 4) return gp_go<D, 4, R, W, ST, MINB>(st, a, cols, x, n, ks);
    return gp_go<D, 8, R, W, ST, MINB>(st, a, cols, x, n, ks);
  }
}
#endif
