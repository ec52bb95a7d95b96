/* kernels/matvec_mma.cu — see matvec_mma.cuh.
 *
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA fragment layout, groupID
 * g = lane >> 2, tig = lane & 3): A 16x16 regs a0 = (row g, k 2tig..2tig+1), a1 = (row g+8, same
 * k), a2 = (row g, k 2tig+8..+9), a3 = (row g+8, k 2tig+8..+9); B 16x8 regs b0 = (k 2tig..+1,
 * col g), b1 = (k 2tig+8..+9, col g); C 16x8 c0,c1 = (row g, cols 2tig, 2tig+1), c2,c3 = (row
 * g+8, same cols). Lower 16 bits of a register hold the lower k.
 *
 * Work split. A block of 8 warps = S column parts x 8/S row warps (as kernels/matvec.cu). A warp
 * owns RG "row groups" of 16 weight rows (swiglu: RG = 2, group 0 = 16 gate rows, group 1 = the
 * 16 up rows of the same features) and one part; it takes the 256-element chunks kb = part,
 * part + S, ... in order. The block walks "windows" of S chunks (t*S .. t*S + S-1; part p takes
 * chunk t*S + p). Per window:
 *  - each warp issues the loads of its chunk's weights (all groups), then the whole block builds
 *    the B fragments of the window's chunks in shared memory (mvm_fill; only the n real x rows),
 *    with __syncthreads around; lane (g, tig) reads column g = (x row g/4, part g%4 of x:
 *    hi, mid, lo, or zero) at the k-slots of tig. The 16 k-steps of a chunk map to chunk elements by the decoder
 *    (D::kbase): k-slots {2tig, 2tig+1, 2tig+8, 2tig+9} of step s are the 4 consecutive
 *    elements kbase(s, tig) + 0..3, so one float4 of x gives a lane's two B regs and one 32-bit
 *    word of 4 quant bytes its two A regs per row (k is a sum: any permutation used by both A
 *    and B gives the same dot product).
 *  - per group: the lanes decode the 16 rows' sub-block scales cooperatively into shared memory
 *    (lane L: row L/2, half L%2), then for each sub-block one (Q6_K, 16 elements) or two (Q4_K,
 *    32 elements) mma from a zero C give, in lane (g, tig), the two columns 2tig, 2tig+1: for
 *    even tig Σ q·x_hi and Σ q·x_mid, for odd tig Σ q·x_lo (and a zero column), of rows g and
 *    g+8 for x row tig/2; acc += d_sc · (C0 + C1) [- d_min·m · Σx over the sub-block, even tig].
 * Exactness: q (Q4_K 0..15, Q6_K q-32 in -32..31) is built as the bf16 bit pattern of 128 + q
 * (byte_perm with 0x43) minus 128 (or 160) by a bf16x2 subtraction: exact. x = hi + mid + lo + e
 * with hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid), |e| <= 2^-24 |x| (a two-way
 * split, |e| <= 2^-16 |x|, left 1.1e-5 normalized error on a chained decode step of the op
 * test, above its 1e-5 bound); products bf16·bf16 are exact in the fp32 accumulate. Σx (Q4_K)
 * is an fp32 sum of x in a fixed tree. Three columns per x row: at most 2 x rows.
 * The lanes' accumulators are added per x row (tig 2r then 2r+1) and over the S parts in part
 * order through shared memory. The result of a feature depends only on (type, S, its weight row, x):
 * S is mvm_split of the weight's own n_out, so kc_matvec / _multi / _swiglu agree bit for bit. */
#include <stdlib.h>

#include <type_traits>

#include "format/dtype.h"
#include "kernels/matvec_i8.cuh"
#include "kernels/matvec_mma_internal.cuh"

/* The fill of a window (mvm_fill) takes quads t = thread, thread + 256, ... of S * n * 64: quad t is
 * elements 4q..4q+3 (q = t % 64) of chunk c of x row r, t = (c * n + r) * 64 + q (n <= 2: shifts,
 * not a division). Its first XPF quads per thread are loaded a window ahead (mvm_fill_pre,
 * before the warp computes the current chunk), so x's L2 latency is off the fill's path: XPF = 2
 * for one row group per warp (every quad at n = 1 up to S = 8), 1 for two (the swiglu: S <= 4 at
 * its shapes; 2 spills there). */
static_assert(KC_MVM_MAX_ROWS == 2, "mvm_quad: n <= 2");
__device__ __forceinline__ void mvm_quad(int t, int n, int &c, int &r, int &q) {
  const int u = t >> 6;
  r = n == 2 ? u & 1 : 0, c = n == 2 ? u >> 1 : u, q = t & 63;
}
__device__ __forceinline__ float4 mvm_fill_ld(const float *__restrict__ x, int64_t cols, int64_t kb0, int64_t nkb, int n,
                                              int t) {
  int c, r, q;
  mvm_quad(t, n, c, r, q);
  const int64_t kb = kb0 + c;
  return kb < nkb ? __ldg((const float4 *)(x + (size_t)r * (size_t)cols + kb * 256 + 4 * q)) : make_float4(0.f, 0.f, 0.f, 0.f);
}
/* the thread's first XPF quads of the window at kb0 (zero past the window's quads) */
template <int XPF>
__device__ __forceinline__ void mvm_fill_pre(float4 (&pre)[XPF], const float *__restrict__ x, int64_t cols, int64_t kb0,
                                             int64_t nkb, int S, int n) {
#pragma unroll
  for (int i = 0; i < XPF; i++) {
    const int t = threadIdx.x + i * MVM_WARPS * 32;
    pre[i] = t < S * n * 64 ? mvm_fill_ld(x, cols, kb0, nkb, n, t) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

/* Quad t (value v) into the B fragments bs[c][s/2][slot] (k-steps 2p, 2p+1 of a lane in one
 * uint4: b0, b1 of step 2p, then of 2p+1) and, Q4_K, the sub-block sums sxs[c][r][sb]: it goes to
 * the lanes (g = 4r hi, 4r+1 mid, 4r+2 lo; tig) with kbase(s, tig) = 4q. W = 32: slot = lane; W <
 * 32 (the ring's compact slots, kernels/matvec_ring.cuh): the zero columns 3 and 7 are not stored,
 * slot = lane for x row 0 (lanes 0..11), lane - 4 for row 1 (lanes 16..27). Whole warps (8
 * consecutive lanes hold one sub-block: Σx by a fixed xor tree). */
template <class D, int W = 32>
__device__ __forceinline__ void mvm_fill_st(uint4 (*bs)[8][W], float (*sxs)[4][8], float4 v, int t, int n) {
  int c, r, q;
  mvm_quad(t, n, c, r, q);
  const int s = D::kstep(q), tig = D::ktig(q), o = (W >= 32 ? 16 : 12) * r + tig;
  /* column 4r + 0 / 1 / 2 = hi / mid / lo of x row r is read by lanes 4 (4r + j) + tig */
  mvm_split_x(v, *((uint2 *)&bs[c][s >> 1][o] + (s & 1)), *((uint2 *)&bs[c][s >> 1][o + 4] + (s & 1)),
              *((uint2 *)&bs[c][s >> 1][o + 8] + (s & 1)));
  if constexpr (D::HAS_MIN) { /* Q4_K: sub-block q / 8 */
    const float p = mvm_sub_sum(v);
    if ((q & 7) == 0) sxs[c][r][q >> 3] = p;
  }
}

/* f(v, t) for each of this thread's quads t < total of the window at kb0 (t = thread, thread +
 * 256, ...): the first XPF from pre (mvm_fill_pre of kb0), the rest loaded here. total is a
 * multiple of 64: every round is whole warps. */
template <int XPF, class F>
__device__ __forceinline__ void mvm_window_quads(const float4 (&pre)[XPF], const float *__restrict__ x, int64_t cols,
                                                 int64_t kb0, int64_t nkb, int n, int total, F f) {
#pragma unroll
  for (int i = 0; i < XPF; i++) {
    const int t = threadIdx.x + i * MVM_WARPS * 32;
    if (t < total) f(pre[i], t);
  }
  for (int t = threadIdx.x + XPF * MVM_WARPS * 32; t < total; t += MVM_WARPS * 32) f(mvm_fill_ld(x, cols, kb0, nkb, n, t), t);
}

/* B fragments and Σx of the S chunks kb0 + c (c < S) of a window, x rows r < n (rows >= n are
 * left as they are: zero); pre: the thread's first quads (mvm_fill_pre of kb0). Whole block. */
template <class D, int XPF>
__device__ __forceinline__ void mvm_fill(uint4 (*bs)[8][32], float (*sxs)[4][8], const float *__restrict__ x,
                                         int64_t cols, int64_t kb0, int64_t nkb, int S, int n, const float4 (&pre)[XPF]) {
  mvm_window_quads(pre, x, cols, kb0, nkb, n, S * n * 64, [&](float4 v, int t) { mvm_fill_st<D>(bs, sxs, v, t, n); });
}

template <class D, int RG>
__global__ void __launch_bounds__(MVM_WARPS * 32, 2)
    mvm_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, int n) {
  __shared__ uint4 bs[MVM_WARPS][8][32];      /* B fragments of the window's chunks (<= 8) */
  __shared__ __align__(16) float sxs[MVM_WARPS][4][8]; /* Q4_K: Σx [chunk][x row][sub-block] */
  __shared__ float4 scs[MVM_WARPS][16][4];    /* per warp: scale slots of the group's 16 rows */
  __shared__ float red[MVM_WARPS][RG][16][4]; /* per warp: [group][row][x row] part sums */
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, tig = lane & 3;
  const mvm_pos<RG> p(a, wi, lane);
  const int S = p.S, part = p.part;

  /* x rows >= n keep zero B fragments and sums */
  for (int t = threadIdx.x; t < MVM_WARPS * 8 * 32; t += MVM_WARPS * 32) (&bs[0][0][0])[t] = make_uint4(0u, 0u, 0u, 0u);
  for (int t = threadIdx.x; t < MVM_WARPS * 4 * 8; t += MVM_WARPS * 32) (&sxs[0][0][0])[t] = 0.0f;

  float acc[RG][2];
#pragma unroll
  for (int i = 0; i < RG; i++) acc[i][0] = acc[i][1] = 0.0f;
  const int64_t nkb = cols >> 8, nwin = (nkb + S - 1) / S;
  constexpr int XPF = RG == 1 ? 2 : 1;
  float4 pre[XPF]; /* the next window's first x quads of this thread (mvm_fill_pre) */
  /* window t: chunks t*S .. t*S + S-1; part p takes chunk t*S + p (so chunks p, p + S, ... in order) */
  for (int64_t t = 0; t < nwin; t++) {
    const int64_t kb = t * S + part;
    const bool have = kb < nkb;
    mvm_wbuf<D, RG> wb;
    if (have) wb.load(p, kb, lane); /* weight loads first: in flight while the block builds the window's B */
    if (t == 0) { /* PDL: x (the previous kernel's output) only from here */
      kc_pdl_wait(), kc_pdl_trigger();
      mvm_fill_pre(pre, x, cols, 0, nkb, S, n);
    }
    __syncthreads(); /* previous window's B read by every warp */
    mvm_fill<D, XPF>(bs, sxs, x, cols, t * S, nkb, S, n, pre);
    __syncthreads();
    if (t + 1 < nwin) mvm_fill_pre(pre, x, cols, (t + 1) * S, nkb, S, n); /* in flight during this chunk */
    if (!have) continue; /* warp-uniform */
    [[maybe_unused]] float sx[D::HAS_MIN ? D::NSUB : 1];
    if constexpr (D::HAS_MIN) {
      /* the min term once per x row: in the lane holding its hi/mid columns (even tig) */
      const float4 u0 = *(const float4 *)&sxs[part][tig >> 1][0], u1 = *(const float4 *)&sxs[part][tig >> 1][4];
      sx[0] = u0.x, sx[1] = u0.y, sx[2] = u0.z, sx[3] = u0.w, sx[4] = u1.x, sx[5] = u1.y, sx[6] = u1.z, sx[7] = u1.w;
      if (tig & 1) {
#pragma unroll
        for (int k = 0; k < 8; k++) sx[k] = 0.0f;
      }
    }
    mvm_chunk<D, RG>(acc, wb, sx, nullptr, scs[wi], lane, [&](int q) { return bs[part][q][lane]; });
  }
  mvm_finish<RG>(a, p, red, acc, wi, lane, n);
}

/* ---- the integer Q4_K kernel for one row of x (kernels/matvec_i8.cuh): same work split,
 * windows, weight loads and reduction as mvm_kernel<mvm_q4k>; the fill of a window has two phases
 * around one block barrier: (1) each warp's 32 quads of a chunk give max|x| bits (redux.sync), (2)
 * every quad becomes its three digit words from the chunk's max, and the sub-block sums. B
 * columns 4..7 (a second x row) and 3 stay zero, so lanes with tig >= 2 add nothing. (At 2 rows the
 * same arithmetic made the batch-2 step slower: kernels/README.md "The integer batch-1 product".) */
struct mvi_smem {
  uint4 bs[MVM_WARPS][4][32];   /* digit B fragments [chunk][j][lane] */
  float sxs[MVM_WARPS][8];      /* Σx [chunk][sub-block] */
  float fsc[MVM_WARPS];         /* the chunk scale s [chunk] */
  unsigned wmax[2 * MVM_WARPS]; /* max|x| bits per 32 quads (2 per chunk) */
  float4 scd[MVM_WARPS][16][2]; /* per warp: d sc of the group's rows [row][sub-blocks 4h..4h+3] */
  float mn[MVM_WARPS][16];      /* per warp: Σ dmin m Σx of the group's rows */
};

/* phase 1 of quad t (value v): its chunk's max|x| bits, written by lane 0 for each 32 quads */
__device__ __forceinline__ void mvi_amax(mvi_smem &sm, float4 v, int t) {
  const uint32_t w = __reduce_max_sync(KC_FULL_MASK, mvi_absbits(v));
  if ((threadIdx.x & 31) == 0) sm.wmax[t >> 5] = w;
}
/* phase 2 of quad q (value v) of a chunk whose max|x| bits are mb: its three digit words into the
 * chunk's B slots bs[j][lane] (column 0 / 1 / 2 = d0 / d1 / D is read by lanes 4 col + tig, so W
 * >= 12 lanes are stored), Σx of its sub-block into sxs[q / 8], the chunk scale into *fsc (q ==
 * 0). Whole warps (mvm_sub_sum: 8 consecutive lanes hold one sub-block). */
template <int W>
__device__ __forceinline__ void mvi_conv(uint4 (*bs)[W], float *sxs, float *fsc, float4 v, int q, uint32_t mb) {
  uint32_t p0, p1, p2;
  mvi_digits(v, mvi_inv(mb), p0, p1, p2);
  const mvi_slot sl = mvi_slot_of(q);
  ((uint32_t *)&bs[sl.j][sl.tig])[sl.comp] = p0;
  ((uint32_t *)&bs[sl.j][4 + sl.tig])[sl.comp] = p1;
  ((uint32_t *)&bs[sl.j][8 + sl.tig])[sl.comp] = p2;
  if (q == 0) *fsc = mvi_scale(mb);
  const float p = mvm_sub_sum(v);
  if ((q & 7) == 0) sxs[q >> 3] = p;
}

/* One chunk of a warp's RG groups (mvm_chunk's contract, integer arithmetic, one x row): acc[i][0
 * / 1] += rows g, g + 8 of group i (lanes tig 0, 1 hold two parts of the row; tig 2, 3 zero).
 * bq(j): the lane's digit B words of sub-blocks 2j, 2j + 1 (b0, b1 of each); sxs: the chunk's Σx
 * per sub-block (16-byte aligned); fsc: its scale; scd / mn: the warp's scale slots [16][2] and
 * min terms [16] (shared memory, reused per group). */
template <int RG, class BQ>
__device__ __forceinline__ void mvi_chunk(float (&acc)[RG][2], const mvm_wbuf<mvm_q4k, RG> &wb, BQ bq,
                                          const float *sxs, const float *fsc, float4 (*scd)[2], float *mn, int lane) {
  const int g = lane >> 2, tig = lane & 3, L2 = lane >> 1, h = lane & 1;
#pragma unroll
  for (int i = 0; i < RG; i++) {
    float4 dd[2];
    mvm_q4k::sdecode(wb.sr[i], h, dd); /* row L2 of the group, slots 8h .. 8h + 7 */
    /* dd: (d sc, dmin m) of sub-blocks 4h .. 4h + 3; the row's min term (the two halves added by
     * the lane pair), d sc of the odd sub-blocks / 16 (their A is 16 q) */
    const float4 u = *(const float4 *)&sxs[4 * h];
    float m = fmaf(dd[1].w, u.w, fmaf(dd[1].y, u.z, fmaf(dd[0].w, u.y, dd[0].y * u.x)));
    m += __shfl_xor_sync(KC_FULL_MASK, m, 1);
    __syncwarp(); /* previous group's slots read by every lane */
    scd[L2][h] = make_float4(dd[0].x, dd[0].z * 0.0625f, dd[1].x, dd[1].z * 0.0625f);
    if (h == 0) mn[L2] = m;
    __syncwarp();
    float s0[8], s8[8];
    mvm_slots<2>(scd, g, s0, s8);
    float ac0 = 0.f, ac1 = 0.f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint4 b = bq(j);
      const uint2 qa = wb.ra[i].q[j], qb = wb.rb[i].q[j];
#pragma unroll
      for (int nib = 0; nib < 2; nib++) {
        const uint32_t mk = nib ? 0xf0f0f0f0u : 0x0f0f0f0fu;
        const uint32_t a[4] = {qa.x & mk, qb.x & mk, qa.y & mk, qb.y & mk};
        int c[4];
        mvi_mma_k32(c, a, nib ? b.z : b.x, nib ? b.w : b.y);
        ac0 = fmaf(s0[2 * j + nib], (float)(c[0] + 128 * c[1]), ac0);
        ac1 = fmaf(s8[2 * j + nib], (float)(c[2] + 128 * c[3]), ac1);
      }
    }
    const float f = tig < 2 ? *fsc * mvi_fweight(tig) : 0.f; /* here: 24 B of spills when hoisted (RG 2) */
    const float z0 = tig == 0 ? mn[g] : 0.f, z8 = tig == 0 ? mn[g + 8] : 0.f;
    acc[i][0] = fmaf(f, ac0, acc[i][0]) - z0;
    acc[i][1] = fmaf(f, ac1, acc[i][1]) - z8;
  }
}

template <int RG>
__global__ void __launch_bounds__(MVM_WARPS * 32, 2)
    mvi_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols) {
  __shared__ mvi_smem sm;
  __shared__ float red[MVM_WARPS][RG][16][4]; /* per warp: [group][row][x row] part sums */
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const mvm_pos<RG> p(a, wi, lane);
  const int S = p.S, part = p.part;

  /* columns 3..7 keep zero digits (the fill writes columns 0..2 of every chunk of a window) */
  for (int t = threadIdx.x; t < MVM_WARPS * 4 * 32; t += MVM_WARPS * 32) (&sm.bs[0][0][0])[t] = make_uint4(0u, 0u, 0u, 0u);

  float acc[RG][2];
#pragma unroll
  for (int i = 0; i < RG; i++) acc[i][0] = acc[i][1] = 0.0f;
  const int64_t nkb = cols >> 8, nwin = (nkb + S - 1) / S;
  constexpr int XPF = RG == 1 ? 2 : 1;
  float4 pre[XPF]; /* the next window's first x quads of this thread (mvm_fill_pre) */
  for (int64_t t = 0; t < nwin; t++) {
    const int64_t kb = t * S + part;
    const bool have = kb < nkb;
    mvm_wbuf<mvm_q4k, RG> wb;
    if (have) wb.load(p, kb, lane); /* weight loads first: in flight while the block fills the window */
    if (t == 0) { /* PDL: x (the previous kernel's output) only from here */
      kc_pdl_wait(), kc_pdl_trigger();
      mvm_fill_pre(pre, x, cols, 0, nkb, S, 1);
    }
    mvm_window_quads(pre, x, cols, t * S, nkb, 1, S * 64, [&](float4 v, int q) { mvi_amax(sm, v, q); });
    __syncthreads(); /* the maxima; the previous window's digits read by every warp */
    mvm_window_quads(pre, x, cols, t * S, nkb, 1, S * 64, [&](float4 v, int q) {
      const int c = q >> 6; /* chunk c of the window */
      mvi_conv<32>(sm.bs[c], sm.sxs[c], &sm.fsc[c], v, q & 63, max(sm.wmax[2 * c], sm.wmax[2 * c + 1]));
    });
    __syncthreads();
    if (t + 1 < nwin) mvm_fill_pre(pre, x, cols, (t + 1) * S, nkb, S, 1); /* in flight during this chunk */
    if (!have) continue; /* warp-uniform */
    mvi_chunk<RG>(acc, wb, [&](int j) { return sm.bs[part][j][lane]; }, sm.sxs[part], &sm.fsc[part], sm.scd[wi], sm.mn[wi],
                  lane);
  }
  mvm_finish<RG>(a, p, red, acc, wi, lane, 1);
}

#include "kernels/matvec_ring.cuh"
#include "kernels/matvec_wide.cuh"

template <class D, int RG> static int mvm_go(cudaStream_t st, mvm_args_t a, int64_t cols, const float *x, int n) {
  const int64_t blocks = mvm_plan(a, cols >> 8, a.swiglu ? 8 * RG : 16 * RG);
  if (blocks < 0) return (int)cudaErrorInvalidValue;
  if (blocks == 0) return 0;
  /* The ring kernels (kernels/matvec_ring.cuh; Q4_K one row integer, else bf16 arithmetic) where
   * their shared memory fits, else Q4_K one row the integer kernel, else the bf16 one (the faster
   * per type and row count: kernels/README.md "The integer batch-1 product", "Weights through a
   * ring") */
  {
    int rc = 0;
    if (mvr_go<D, RG>(st, a, cols, x, n, blocks, rc)) return rc;
    if (n > KC_MVM_MAX_ROWS) return -1; /* one part: the ring only (kc_mvm_rows_launch) */
  }
  if constexpr (std::is_same<D, mvm_q4k>::value) {
    if (n == 1) {
      kc_launch(mvi_kernel<RG>, (unsigned)blocks, MVM_WARPS * 32, 0, st, a, x, cols);
      return (int)cudaGetLastError();
    }
  }
  kc_launch(mvm_kernel<D, RG>, (unsigned)blocks, MVM_WARPS * 32, 0, st, a, x, cols, n);
  return (int)cudaGetLastError();
}

/* One row group per warp (B is shared through shared memory, more warps hide more latency);
 * swiglu: the gate and the up group of 16 features. */
template <class D> static int mvm_pick(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n) {
  if (n > KC_MVR_MAX_ROWS) { /* one part, 9..KC_MVW_MAX_ROWS rows: the wide kernel or none */
    int rc = 0;
    return mvw_go<D>(st, a, cols, x, n, rc) ? rc : -1;
  }
  if (a.swiglu) return mvm_go<D, 2>(st, a, cols, x, n);
  return mvm_go<D, 1>(st, a, cols, x, n);
}

static int g_mvm_force = -1, g_mvm_env = -1;

KC_API int kc_mvm_enabled(void) {
  if (g_mvm_force >= 0) return g_mvm_force;
  if (g_mvm_env < 0) g_mvm_env = (int)kc_env_int("GANTRY_MATVEC_MMA", 0, 1, KC_MVM_DEFAULT);
  return g_mvm_env;
}

KC_API void kc_mvm_set_enabled(int on) { g_mvm_force = on < 0 ? -1 : on > 0; }

KC_API void kc_mvm_set_ring(int on) { g_mvr_force = on < 0 ? -1 : on > 0; }

KC_API unsigned long long kc_mvm_ring_launches(void) { return __atomic_load_n(&g_mvr_launches, __ATOMIC_RELAXED); }

KC_API unsigned long long kc_mvm_wide_launches(void) { return __atomic_load_n(&g_mvw_launches, __ATOMIC_RELAXED); }

/* the weight's type, alignment and row size (kc_mvm_ok without the row count) */
static int mvm_weight_ok(int type, const void *w, size_t row_bytes, int64_t cols) {
  if (cols <= 0 || cols % 256 != 0 || !kc_mvm_enabled()) return 0;
  const uintptr_t p = (uintptr_t)w;
  switch (type) {
    case GT_TYPE_Q4_K: return (p & 15) == 0 && row_bytes == (size_t)(cols / 256) * 144;
    case GT_TYPE_Q6_K: return (p & 1) == 0 && row_bytes == (size_t)(cols / 256) * 210;
    default: return 0;
  }
}

KC_API int kc_mvm_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n) {
  return n >= 1 && n <= KC_MVM_MAX_ROWS && mvm_weight_ok(type, w, row_bytes, cols);
}

/* kc_mvm_launch / kc_mvm_rows_launch after their row checks */
static int mvm_launch_n(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup, int64_t cols,
                        const float *x, int n) {
  if (n_seg < 1 || n_seg > KC_MATVEC_MAX_SEGS || (wup && n_seg != 1) || cols <= 0 || cols % 256 != 0 ||
      ((uintptr_t)x & 15) != 0)
    return (int)cudaErrorInvalidValue;
  mvm_args_t a = {};
  for (int s = 0; s < n_seg; s++) {
    if (segs[s].n_out <= 0) return (int)cudaErrorInvalidValue;
    a.w[s] = (const uint8_t *)segs[s].w;
    a.out[s] = segs[s].out;
    a.n_out[s] = segs[s].n_out;
    a.row_bytes[s] = segs[s].row_bytes;
  }
  a.n_seg = n_seg;
  a.wup = (const uint8_t *)wup;
  a.swiglu = wup != NULL;
  switch (type) {
    case GT_TYPE_Q4_K: return mvm_pick<mvm_q4k>(st, a, cols, x, n);
    case GT_TYPE_Q6_K: return mvm_pick<mvm_q6k>(st, a, cols, x, n);
    default: return (int)cudaErrorInvalidValue;
  }
}

KC_API int kc_mvm_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                         int64_t cols, const float *x, int n) {
  if (n < 1 || n > KC_MVM_MAX_ROWS) return (int)cudaErrorInvalidValue;
  return mvm_launch_n(st, type, n_seg, segs, wup, cols, x, n);
}

KC_API int kc_mvm_rows_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                              int64_t cols, const float *x, int n) {
  if (n <= KC_MVM_MAX_ROWS || n > KC_MVW_MAX_ROWS || n_seg < 1 || n_seg > KC_MATVEC_MAX_SEGS || !mvr_on()) return -1;
  for (int s = 0; s < n_seg; s++)
    if (!mvm_weight_ok(type, segs[s].w, segs[s].row_bytes, cols) ||
        (wup && !mvm_weight_ok(type, wup, segs[s].row_bytes, cols)))
      return -1;
  return mvm_launch_n(st, type, n_seg, segs, wup, cols, x, n);
}
