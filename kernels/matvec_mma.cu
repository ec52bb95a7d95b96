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

#include "format/dtype.h"
#include "kernels/matvec_mma.cuh"
#include "kernels/mma_dec.cuh"

#define MVM_WARPS 8
#define MVM_TARGET_WARPS 2048 /* of 32 rows: enough to fill an H200 (132 SMs x 16 warps) */

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

/* B fragments of the S chunks kb0 + c (c < S) of a window, x rows r < n, into bs[c][s/2][lane]
 * (k-steps 2p, 2p+1 of a lane in one uint4: b0, b1 of step 2p, then of 2p+1); Q4_K also the
 * sub-block sums sxs[c][r][sb]. Quad q (elements 4q..4q+3) of row r goes to the lanes
 * (g = 4r hi, 4r+1 mid, 4r+2 lo; tig) with kbase(s, tig) = 4q. Whole block; rows >= n are left as
 * they are (zero). Thread t takes quads t, t + 256, ...: whole warps (S * n * 64 is a multiple
 * of 64), so that 8 consecutive lanes hold one sub-block (Σx by a fixed xor tree). */
template <class D>
__device__ __forceinline__ void mvm_fill(uint4 (*bs)[8][32], float (*sxs)[4][8], const float *__restrict__ x,
                                         int64_t cols, int64_t kb0, int64_t nkb, int S, int n) {
  const int total = S * n * 64;
  for (int t = threadIdx.x; t < total; t += MVM_WARPS * 32) {
    const int c = t / (n * 64), r = (t >> 6) % n, q = t & 63;
    const int64_t kb = kb0 + c;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (kb < nkb) v = __ldg((const float4 *)(x + (size_t)r * (size_t)cols + kb * 256 + 4 * q));
    const int s = D::kstep(q), tig = D::ktig(q);
    const __nv_bfloat162 h01 = __floats2bfloat162_rn(v.x, v.y), h23 = __floats2bfloat162_rn(v.z, v.w);
    const float4 r1 = make_float4(v.x - __low2float(h01), v.y - __high2float(h01), v.z - __low2float(h23),
                                  v.w - __high2float(h23));
    const __nv_bfloat162 m01 = __floats2bfloat162_rn(r1.x, r1.y), m23 = __floats2bfloat162_rn(r1.z, r1.w);
    const __nv_bfloat162 l01 = __floats2bfloat162_rn(r1.x - __low2float(m01), r1.y - __high2float(m01));
    const __nv_bfloat162 l23 = __floats2bfloat162_rn(r1.z - __low2float(m23), r1.w - __high2float(m23));
    /* column 4r + 0 / 1 / 2 = hi / mid / lo of x row r is read by lanes 4 (4r + j) + tig */
    uint2 *ph = (uint2 *)&bs[c][s >> 1][16 * r + tig] + (s & 1);
    uint2 *pm = (uint2 *)&bs[c][s >> 1][16 * r + 4 + tig] + (s & 1);
    uint2 *pl = (uint2 *)&bs[c][s >> 1][16 * r + 8 + tig] + (s & 1);
    *ph = make_uint2(mvm_bits(h01), mvm_bits(h23));
    *pm = make_uint2(mvm_bits(m01), mvm_bits(m23));
    *pl = make_uint2(mvm_bits(l01), mvm_bits(l23));
    if constexpr (D::HAS_MIN) { /* Q4_K: sub-block q / 8 */
      float p = (v.x + v.y) + (v.z + v.w);
      p += __shfl_xor_sync(KC_FULL_MASK, p, 1);
      p += __shfl_xor_sync(KC_FULL_MASK, p, 2);
      p += __shfl_xor_sync(KC_FULL_MASK, p, 4);
      if ((q & 7) == 0) sxs[c][r][q >> 3] = p;
    }
  }
}

template <class D, int RG>
__global__ void __launch_bounds__(MVM_WARPS * 32, 2)
    mvm_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, int n) {
  __shared__ uint4 bs[MVM_WARPS][8][32];      /* B fragments of the window's chunks (<= 8) */
  __shared__ __align__(16) float sxs[MVM_WARPS][4][8]; /* Q4_K: Σx [chunk][x row][sub-block] */
  __shared__ float4 scs[MVM_WARPS][16][4];    /* per warp: scale slots of the group's 16 rows */
  __shared__ float red[MVM_WARPS][RG][16][4]; /* per warp: [group][row][x row] part sums */
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  int sg = 0;
  while (sg + 1 < a.n_seg && blockIdx.x >= a.blk_end[sg]) sg++;
  const unsigned blk = blockIdx.x - (sg ? a.blk_end[sg - 1] : 0u);
  const int S = a.split[sg], gpb = MVM_WARPS / S, part = wi % S, rw = wi / S;
  const int fpw = a.swiglu ? 8 * RG : 16 * RG; /* output features per warp */
  const int64_t n_out = a.n_out[sg], grp0 = (int64_t)blk * gpb;
  const size_t rb = a.row_bytes[sg];
  /* weight row m (0..15) of group i (rows past n_out read row n_out - 1 and are not written) */
  auto row_of = [&](int i, int m) -> const uint8_t * {
    int64_t o = (grp0 + rw) * fpw + 16 * (a.swiglu ? i >> 1 : i) + m;
    if (o > n_out - 1) o = n_out - 1;
    return (a.swiglu && (i & 1) ? a.wup : a.w[sg]) + (size_t)o * rb;
  };
  const uint8_t *wa[RG], *wb[RG], *ws[RG]; /* rows g, g + 8 and lane / 2 of each group */
#pragma unroll
  for (int i = 0; i < RG; i++) wa[i] = row_of(i, g), wb[i] = row_of(i, g + 8), ws[i] = row_of(i, lane >> 1);

  /* x rows >= n keep zero B fragments and sums */
  for (int t = threadIdx.x; t < MVM_WARPS * 8 * 32; t += MVM_WARPS * 32) (&bs[0][0][0])[t] = make_uint4(0u, 0u, 0u, 0u);
  for (int t = threadIdx.x; t < MVM_WARPS * 4 * 8; t += MVM_WARPS * 32) (&sxs[0][0][0])[t] = 0.0f;

  float acc[RG][2];
#pragma unroll
  for (int i = 0; i < RG; i++) acc[i][0] = acc[i][1] = 0.0f;
  const int64_t nkb = cols >> 8, nwin = (nkb + S - 1) / S;
  /* window t: chunks t*S .. t*S + S-1; part p takes chunk t*S + p (so chunks p, p + S, ... in order) */
  for (int64_t t = 0; t < nwin; t++) {
    const int64_t kb = t * S + part;
    const bool have = kb < nkb;
    typename D::raw ra[RG], rb8[RG];
    typename D::sraw sr[RG];
    if (have) { /* weight loads first: in flight while the block builds the window's B */
#pragma unroll
      for (int i = 0; i < RG; i++) {
        D::load(ra[i], wa[i], kb, tig);
        D::load(rb8[i], wb[i], kb, tig);
        D::sload(sr[i], ws[i], kb, lane & 1);
      }
    }
    __syncthreads(); /* previous window's B read by every warp */
    mvm_fill<D>(bs, sxs, x, cols, t * S, nkb, S, n);
    __syncthreads();
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
#pragma unroll
    for (int i = 0; i < RG; i++) {
      __syncwarp(); /* previous group's scales read by every lane */
      D::sdecode(sr[i], lane & 1, &scs[wi][lane >> 1][2 * (lane & 1)]);
      __syncwarp();
      float s0[16], s8[16];
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const float4 t0 = scs[wi][g][q], t8 = scs[wi][g + 8][q];
        s0[4 * q] = t0.x, s0[4 * q + 1] = t0.y, s0[4 * q + 2] = t0.z, s0[4 * q + 3] = t0.w;
        s8[4 * q] = t8.x, s8[4 * q + 1] = t8.y, s8[4 * q + 2] = t8.z, s8[4 * q + 3] = t8.w;
      }
#pragma unroll
      for (int sb = 0; sb < D::NSUB; sb++) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int h = 0; h < D::SPS; h++) {
          const int s = D::SPS * sb + h;
          const uint4 bq = bs[part][s >> 1][lane];
          const uint32_t qa = D::qword(ra[i], s), qb = D::qword(rb8[i], s);
          const uint32_t af[4] = {mvm_qpair(qa, 0x4140u, D::BIAS), mvm_qpair(qb, 0x4140u, D::BIAS),
                                  mvm_qpair(qa, 0x4342u, D::BIAS), mvm_qpair(qb, 0x4342u, D::BIAS)};
          mvm_mma(c, af, (s & 1) ? bq.z : bq.x, (s & 1) ? bq.w : bq.y);
        }
        if constexpr (D::HAS_MIN) {
          acc[i][0] = fmaf(s0[2 * sb], c[0] + c[1], acc[i][0]);
          acc[i][0] = fmaf(-s0[2 * sb + 1], sx[sb], acc[i][0]);
          acc[i][1] = fmaf(s8[2 * sb], c[2] + c[3], acc[i][1]);
          acc[i][1] = fmaf(-s8[2 * sb + 1], sx[sb], acc[i][1]);
        } else {
          acc[i][0] = fmaf(s0[sb], c[0] + c[1], acc[i][0]);
          acc[i][1] = fmaf(s8[sb], c[2] + c[3], acc[i][1]);
        }
      }
    }
  }

  /* lane (g, tig) holds rows g, g+8 of each group for x row tig/2 (hi+mid or lo); added per x row
   * (tig 2r, then 2r+1) and over the parts in part order */
#pragma unroll
  for (int i = 0; i < RG; i++) {
    red[wi][i][g][tig] = acc[i][0];
    red[wi][i][g + 8][tig] = acc[i][1];
  }
  __syncthreads();
  float *out = a.out[sg];
  for (int t = threadIdx.x; t < gpb * RG * 64; t += MVM_WARPS * 32) {
    const int w = t / (RG * 64), i = (t / 64) % RG, m = (t / 4) % 16, r = t % 4;
    if (r >= n) continue;
    float s = red[w * S][i][m][2 * r] + red[w * S][i][m][2 * r + 1];
    for (int p = 1; p < S; p++) s += red[w * S + p][i][m][2 * r] + red[w * S + p][i][m][2 * r + 1];
    if (!a.swiglu) {
      const int64_t o = (grp0 + w) * fpw + 16 * i + m;
      if (o < n_out) out[(size_t)r * n_out + o] = s;
    } else if ((i & 1) == 0) {
      float u = red[w * S][i + 1][m][2 * r] + red[w * S][i + 1][m][2 * r + 1];
      for (int p = 1; p < S; p++) u += red[w * S + p][i + 1][m][2 * r] + red[w * S + p][i + 1][m][2 * r + 1];
      const int64_t o = (grp0 + w) * fpw + 16 * (i >> 1) + m;
      if (o < n_out) out[(size_t)r * n_out + o] = s / (1.0f + expf(-s)) * u; /* as kernels/swiglu.cu */
    }
  }
}

/* Column parts of a weight: a function of its own shape only (equal products across the entry
 * points): enough warps (32 rows each) to fill the GPU, never more parts than chunks. */
static int mvm_split(int64_t n_out, int64_t nkb) {
  const int64_t warps = (n_out + 31) / 32;
  int S = 1;
  while (S < MVM_WARPS && warps * S < MVM_TARGET_WARPS && 2 * S <= nkb) S *= 2;
  return S;
}

template <class D, int RG> static int mvm_go(cudaStream_t st, mvm_args_t a, int64_t cols, const float *x, int n) {
  const int64_t nkb = cols >> 8;
  const int fpw = a.swiglu ? 8 * RG : 16 * RG;
  int64_t blocks = 0;
  for (int s = 0; s < a.n_seg; s++) {
    a.split[s] = mvm_split(a.n_out[s], nkb);
    const int64_t groups = (a.n_out[s] + fpw - 1) / fpw, gpb = MVM_WARPS / a.split[s];
    blocks += (groups + gpb - 1) / gpb;
    if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
    a.blk_end[s] = (unsigned)blocks;
  }
  if (blocks == 0) return 0;
  mvm_kernel<D, RG><<<(unsigned)blocks, MVM_WARPS * 32, 0, st>>>(a, x, cols, n);
  return (int)cudaGetLastError();
}

/* One row group per warp (B is shared through shared memory, more warps hide more latency);
 * swiglu: the gate and the up group of 16 features. */
template <class D> static int mvm_pick(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n) {
  if (a.swiglu) return mvm_go<D, 2>(st, a, cols, x, n);
  return mvm_go<D, 1>(st, a, cols, x, n);
}

static int g_mvm_force = -1, g_mvm_env = -1;

KC_API int kc_mvm_enabled(void) {
  if (g_mvm_force >= 0) return g_mvm_force;
  if (g_mvm_env < 0) {
    const char *e = getenv("GANTRY_MATVEC_MMA");
    g_mvm_env = !(e && e[0] == '0' && e[1] == '\0');
  }
  return g_mvm_env;
}

KC_API void kc_mvm_set_enabled(int on) { g_mvm_force = on < 0 ? -1 : on != 0; }

KC_API int kc_mvm_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n) {
  if (n < 1 || n > KC_MVM_MAX_ROWS || cols <= 0 || cols % 256 != 0 || !kc_mvm_enabled()) return 0;
  const uintptr_t p = (uintptr_t)w;
  switch (type) {
    case GT_TYPE_Q4_K: return (p & 15) == 0 && row_bytes == (size_t)(cols / 256) * 144;
    case GT_TYPE_Q6_K: return (p & 1) == 0 && row_bytes == (size_t)(cols / 256) * 210;
    default: return 0;
  }
}

KC_API int kc_mvm_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                         int64_t cols, const float *x, int n) {
  if (n_seg < 1 || n_seg > KC_MATVEC_MAX_SEGS || (wup && n_seg != 1) || n < 1 || n > KC_MVM_MAX_ROWS ||
      cols <= 0 || cols % 256 != 0 || ((uintptr_t)x & 15) != 0)
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
