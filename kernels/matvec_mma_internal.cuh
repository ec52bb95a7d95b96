/* kernels/matvec_mma_internal.cuh — the pieces of the tensor-core matvec kernel
 * (kernels/matvec_mma.cu): work split (mvm_plan), per-chunk arithmetic (mvm_chunk), reduction
 * (mvm_finish). Fragment layout and exactness notes: matvec_mma.cu. Device-side, not a public
 * header. */
#ifndef GANTRY_KERNELS_MATVEC_MMA_INTERNAL_CUH
#define GANTRY_KERNELS_MATVEC_MMA_INTERNAL_CUH
#include "kernels/matvec_mma.cuh"
#include "kernels/mma_dec.cuh"

#define MVM_WARPS 8
/* Warps (of 32 rows) the column split aims at: 1024 = half of an H200's 132 SMs x 16 warps, so
 * that blocks cover K in more windows (fewer prologues, fills and reductions per weight byte).
 * Measured (H200, 9fc5fdd, scripts/gpu/knobs.sh, bench_matvec 1 row, us at 512 / 1024 / 2048 /
 * 4096): Q4_K swiglu 2x12288x4096 37.18 / 34.12 / 36.10 / 36.07, 12288x4096 20.95 / 23.01 / 23.63 /
 * 23.52, 4096x12288 26.41 / 21.44 / 21.47 / 21.42; Q6_K 12288x4096 38.82 / 32.60 / 33.31 / 33.09;
 * bench_decode batch 1: qwen3-8b 4.483 / 3.862 / 3.952 / 3.917 ms, qwen35-9b 4.670 / 3.965 / 4.068 /
 * 4.081 ms. */
#define MVM_TARGET_WARPS 1024

typedef struct {
  const uint8_t *w[KC_MATVEC_MAX_SEGS]; /* swiglu: w[0] gate */
  const uint8_t *wup;                   /* swiglu: up weight (segment 0) */
  float *out[KC_MATVEC_MAX_SEGS];
  int64_t n_out[KC_MATVEC_MAX_SEGS];
  size_t row_bytes[KC_MATVEC_MAX_SEGS];
  int split[KC_MATVEC_MAX_SEGS];
  unsigned blk_end[KC_MATVEC_MAX_SEGS]; /* segment s owns blocks [blk_end[s-1], blk_end[s]) */
  int n_seg, swiglu;
} mvm_args_t;

/* Column parts of a weight: a function of its own shape only (equal products across the entry
 * points): enough warps (32 rows each) to fill the GPU, never more parts than chunks. */
static inline int mvm_split(int64_t n_out, int64_t nkb) {
  /* GANTRY_MVM_TARGET_WARPS (a measurement knob, read once; 64..65536): the warp count aimed at */
  static int64_t target = 0;
  if (!target) target = kc_env_int("GANTRY_MVM_TARGET_WARPS", 64, 65536, MVM_TARGET_WARPS);
  const int64_t warps = (n_out + 31) / 32;
  int S = 1;
  while (S < MVM_WARPS && warps * S < target && 2 * S <= nkb) S *= 2;
  return S;
}

/* Fills a.split and a.blk_end for warps of fpw output features; returns the block count, -1 if
 * it does not fit a grid. */
static inline int64_t mvm_plan(mvm_args_t &a, int64_t nkb, int fpw) {
  int64_t blocks = 0;
  for (int s = 0; s < a.n_seg; s++) {
    a.split[s] = mvm_split(a.n_out[s], nkb);
    const int64_t groups = (a.n_out[s] + fpw - 1) / fpw, gpb = MVM_WARPS / a.split[s];
    blocks += (groups + gpb - 1) / gpb;
    if (blocks > 0x7fffffff) return -1;
    a.blk_end[s] = (unsigned)blocks;
  }
  return blocks;
}

/* Where a warp sits: segment sg, S parts, part, row warp rw of gpb, first group grp0 of the block,
 * fpw output features per warp; wa / wb / ws: rows g, g + 8 and lane / 2 of each of its RG groups
 * (16 rows each; swiglu: group 2i = 16 gate rows, 2i + 1 = the up rows of the same features; rows
 * past n_out read row n_out - 1 and are not written). */
template <int RG> struct mvm_pos {
  int sg, S, gpb, part, rw, fpw;
  int64_t n_out, grp0;
  const uint8_t *wa[RG], *wb[RG], *ws[RG];
  /* tile: the block's place in the grid's work (blockIdx.x; the persistent kernel of
   * kernels/matvec_ring.cuh walks several) */
  __device__ mvm_pos(const mvm_args_t &a, int wi, int lane, unsigned tile) {
    sg = 0;
    while (sg + 1 < a.n_seg && tile >= a.blk_end[sg]) sg++;
    const unsigned blk = tile - (sg ? a.blk_end[sg - 1] : 0u);
    S = a.split[sg], gpb = MVM_WARPS / S, part = wi % S, rw = wi / S;
    fpw = a.swiglu ? 8 * RG : 16 * RG;
    n_out = a.n_out[sg], grp0 = (int64_t)blk * gpb;
    const int g = lane >> 2;
#pragma unroll
    for (int i = 0; i < RG; i++) wa[i] = row(a, i, g), wb[i] = row(a, i, g + 8), ws[i] = row(a, i, lane >> 1);
  }
  __device__ mvm_pos(const mvm_args_t &a, int wi, int lane) : mvm_pos(a, wi, lane, blockIdx.x) {}
  /* row m (< 16) of the warp's group i */
  __device__ const uint8_t *row(const mvm_args_t &a, int i, int m) const {
    int64_t o = (grp0 + rw) * fpw + 16 * (a.swiglu ? i >> 1 : i) + m;
    if (o > n_out - 1) o = n_out - 1;
    return (a.swiglu && (i & 1) ? a.wup : a.w[sg]) + (size_t)o * a.row_bytes[sg];
  }
};

/* The weight words of one chunk for a warp's RG groups (rows g, g + 8; scale row lane / 2). */
template <class D, int RG> struct mvm_wbuf {
  typename D::raw ra[RG], rb[RG];
  typename D::sraw sr[RG];
  __device__ __forceinline__ void load(const mvm_pos<RG> &p, int64_t kb, int lane) {
#pragma unroll
    for (int i = 0; i < RG; i++) {
      D::load(ra[i], p.wa[i], kb, lane & 3);
      D::load(rb[i], p.wb[i], kb, lane & 3);
      D::sload(sr[i], p.ws[i], kb, lane & 1);
    }
  }
};

/* The 4Q scale slots of rows g and g + 8 of a warp's group from its shared [16][Q] float4 slots */
template <int Q>
__device__ __forceinline__ void mvm_slots(const float4 (*scs)[Q], int g, float (&s0)[4 * Q], float (&s8)[4 * Q]) {
#pragma unroll
  for (int q = 0; q < Q; q++) {
    const float4 t0 = scs[g][q], t8 = scs[g + 8][q];
    s0[4 * q] = t0.x, s0[4 * q + 1] = t0.y, s0[4 * q + 2] = t0.z, s0[4 * q + 3] = t0.w;
    s8[4 * q] = t8.x, s8[4 * q + 1] = t8.y, s8[4 * q + 2] = t8.z, s8[4 * q + 3] = t8.w;
  }
}

/* Group i's scale slots for this lane: the lanes decode the 16 rows' slots cooperatively into the
 * warp's [16][4] float4 scs (lane L: row L / 2, half L % 2), then read rows g, g + 8. */
template <class D>
__device__ __forceinline__ void mvm_group_slots(const typename D::sraw &sr, float4 (*scs)[4], int lane, float (&s0)[16],
                                                float (&s8)[16]) {
  __syncwarp(); /* previous group's scales read by every lane */
  D::sdecode(sr, lane & 1, &scs[lane >> 1][2 * (lane & 1)]);
  __syncwarp();
  mvm_slots<4>(scs, lane >> 2, s0, s8);
}

/* The A fragment (bf16 q - bias) of k-step s for rows g, g + 8 (ra, rb: their quant words) */
template <class D>
__device__ __forceinline__ void mvm_afrag(uint32_t (&af)[4], const typename D::raw &ra, const typename D::raw &rb, int s) {
  const uint32_t qa = D::qword(ra, s), qb = D::qword(rb, s);
  af[0] = mvm_qpair(qa, 0x4140u, D::BIAS), af[1] = mvm_qpair(qb, 0x4140u, D::BIAS);
  af[2] = mvm_qpair(qa, 0x4342u, D::BIAS), af[3] = mvm_qpair(qb, 0x4342u, D::BIAS);
}

/* c (zero on entry) = sub-block sb's products of rows g, g + 8 (ra, rb: their quant words) with
 * the B fragments bq(p) (k-steps 2p, 2p+1: b0, b1 of 2p, then of 2p+1) */
template <class D, class BQ>
__device__ __forceinline__ void mvm_sub_mma(float (&c)[4], const typename D::raw &ra, const typename D::raw &rb, int sb,
                                            BQ bq) {
#pragma unroll
  for (int h = 0; h < D::SPS; h++) {
    const int s = D::SPS * sb + h;
    const uint4 b = bq(s >> 1);
    uint32_t af[4];
    mvm_afrag<D>(af, ra, rb, s);
    mvm_mma(c, af, (s & 1) ? b.z : b.x, (s & 1) ? b.w : b.y);
  }
}

/* One chunk of a warp. bq(p): the lane's B fragments of k-steps 2p, 2p+1 (uint4: b0, b1 of 2p,
 * then of 2p+1); scs: the warp's [16][4] float4 scale slots (shared memory, reused per group).
 * Three parts (P1 false): acc[i][0 / 1] (rows g, g + 8 of group i) += the chunk's products;
 * sa[sb] (HAS_MIN): Σx of sub-block sb for the lane's x row if its tig is even, else 0; sb unused.
 * One part (P1): acc[i][0 / 1] += row g for x rows 2tig / 2tig + 1, acc[i][2 / 3] the same for
 * row g + 8; sa, sb (HAS_MIN): Σx per sub-block of x rows 2tig, 2tig + 1 (zero past the rows). */
template <class D, int RG, bool P1 = false, class BQ>
__device__ __forceinline__ void mvm_chunk(float (&acc)[RG][P1 ? 4 : 2], const mvm_wbuf<D, RG> &wb, const float *sa,
                                          const float *sb, float4 (*scs)[4], int lane, BQ bq) {
#pragma unroll
  for (int i = 0; i < RG; i++) {
    float s0[16], s8[16];
    mvm_group_slots<D>(wb.sr[i], scs, lane, s0, s8);
#pragma unroll
    for (int k = 0; k < D::NSUB; k++) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      mvm_sub_mma<D>(c, wb.ra[i], wb.rb[i], k, bq);
      /* the scale of sub-block k of rows g / g + 8, and (HAS_MIN) its min slot */
      const float d0 = s0[D::HAS_MIN ? 2 * k : k], d8 = s8[D::HAS_MIN ? 2 * k : k];
      if constexpr (P1) {
        acc[i][0] = fmaf(d0, c[0], acc[i][0]), acc[i][1] = fmaf(d0, c[1], acc[i][1]);
        acc[i][2] = fmaf(d8, c[2], acc[i][2]), acc[i][3] = fmaf(d8, c[3], acc[i][3]);
        if constexpr (D::HAS_MIN) {
          acc[i][0] = fmaf(-s0[2 * k + 1], sa[k], acc[i][0]), acc[i][1] = fmaf(-s0[2 * k + 1], sb[k], acc[i][1]);
          acc[i][2] = fmaf(-s8[2 * k + 1], sa[k], acc[i][2]), acc[i][3] = fmaf(-s8[2 * k + 1], sb[k], acc[i][3]);
        }
      } else {
        acc[i][0] = fmaf(d0, c[0] + c[1], acc[i][0]);
        acc[i][1] = fmaf(d8, c[2] + c[3], acc[i][1]);
        if constexpr (D::HAS_MIN) {
          acc[i][0] = fmaf(-s0[2 * k + 1], sa[k], acc[i][0]);
          acc[i][1] = fmaf(-s8[2 * k + 1], sa[k], acc[i][1]);
        }
      }
    }
  }
}

/* The block's results. Three parts (P1 false, acc [RG][2], NC 4): lane (g, tig) holds rows g, g+8
 * of each group for x row tig/2 (hi+mid or lo), added per x row (tig 2r, then 2r+1). One part (P1,
 * acc [RG][4], NC 4 or 8 columns = x rows): lane (g, tig) holds rows g, g+8 for x rows 2tig, 2tig+1
 * (acc [i][0], [i][1] row g; [i][2], [i][3] row g+8). Then over the parts in part order; swiglu:
 * SiLU(gate) * up as kernels/swiglu.cu. red: [MVM_WARPS][RG][16][NC] shared. Whole block (one
 * barrier). */
template <int RG, int NC = 4, bool P1 = false, int NA = 2>
__device__ __forceinline__ void mvm_finish(const mvm_args_t &a, const mvm_pos<RG> &p, float (*red)[RG][16][NC],
                                           const float (&acc)[RG][NA], int wi, int lane, int n) {
  const int g = lane >> 2, tig = lane & 3, S = p.S;
#pragma unroll
  for (int i = 0; i < RG; i++) {
    if constexpr (P1) {
      if (2 * tig < NC) {
        red[wi][i][g][2 * tig] = acc[i][0], red[wi][i][g][2 * tig + 1] = acc[i][1];
        red[wi][i][g + 8][2 * tig] = acc[i][2], red[wi][i][g + 8][2 * tig + 1] = acc[i][3];
      }
    } else {
      red[wi][i][g][tig] = acc[i][0];
      red[wi][i][g + 8][tig] = acc[i][1];
    }
  }
  __syncthreads();
  /* x row r of row m of group i in warp w's sums */
  const auto v = [&](int w, int i, int m, int r) {
    if constexpr (P1) return red[w][i][m][r];
    else return red[w][i][m][2 * r] + red[w][i][m][2 * r + 1];
  };
  float *out = a.out[p.sg];
  for (int t = threadIdx.x; t < p.gpb * RG * 16 * NC; t += MVM_WARPS * 32) {
    const int w = t / (RG * 16 * NC), i = (t / (16 * NC)) % RG, m = (t / NC) % 16, r = t % NC;
    if (r >= n) continue;
    float s = v(w * S, i, m, r);
    for (int q = 1; q < S; q++) s += v(w * S + q, i, m, r);
    if (!a.swiglu) {
      const int64_t o = (p.grp0 + w) * p.fpw + 16 * i + m;
      if (o < p.n_out) out[(size_t)r * p.n_out + o] = s;
    } else if ((i & 1) == 0) {
      float u = v(w * S, i + 1, m, r);
      for (int q = 1; q < S; q++) u += v(w * S + q, i + 1, m, r);
      const int64_t o = (p.grp0 + w) * p.fpw + 16 * (i >> 1) + m;
      if (o < p.n_out) out[(size_t)r * p.n_out + o] = s / (1.0f + expf(-s)) * u; /* as kernels/swiglu.cu */
    }
  }
}

/* 4 consecutive x values split into bf16 hi + mid + lo (hi = bf16(x), mid = bf16(x - hi), lo =
 * bf16(x - hi - mid)): one uint2 (the b0, b1 registers of one k-step) per part. */
__device__ __forceinline__ void mvm_split_x(float4 v, uint2 &hi, uint2 &mid, uint2 &lo) {
  const __nv_bfloat162 h01 = __floats2bfloat162_rn(v.x, v.y), h23 = __floats2bfloat162_rn(v.z, v.w);
  const float4 r1 = make_float4(v.x - __low2float(h01), v.y - __high2float(h01), v.z - __low2float(h23),
                                v.w - __high2float(h23));
  const __nv_bfloat162 m01 = __floats2bfloat162_rn(r1.x, r1.y), m23 = __floats2bfloat162_rn(r1.z, r1.w);
  const __nv_bfloat162 l01 = __floats2bfloat162_rn(r1.x - __low2float(m01), r1.y - __high2float(m01));
  const __nv_bfloat162 l23 = __floats2bfloat162_rn(r1.z - __low2float(m23), r1.w - __high2float(m23));
  hi = make_uint2(mvm_bits(h01), mvm_bits(h23));
  mid = make_uint2(mvm_bits(m01), mvm_bits(m23));
  lo = make_uint2(mvm_bits(l01), mvm_bits(l23));
}

/* Σx of the 32-element sub-block q / 8 over the 8 lanes holding its quads (a fixed xor tree) */
__device__ __forceinline__ float mvm_sub_sum(float4 v) {
  float p = (v.x + v.y) + (v.z + v.w);
  p += __shfl_xor_sync(KC_FULL_MASK, p, 1);
  p += __shfl_xor_sync(KC_FULL_MASK, p, 2);
  p += __shfl_xor_sync(KC_FULL_MASK, p, 4);
  return p;
}
#endif
