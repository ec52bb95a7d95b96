/* kernels/mmq_internal.cuh — shared by the two kernels behind kernels/mmq.cuh: mmq.cu (decode
 * batches, n <= KC_MMQ_EXACT_ROWS: K split over the warps of a block) and mmq_prefill.cu
 * (n > KC_MMQ_EXACT_ROWS: x in fragment order, K split over a cluster of blocks). */
#ifndef GANTRY_KERNELS_MMQ_INTERNAL_CUH
#define GANTRY_KERNELS_MMQ_INTERNAL_CUH
#include "kernels/mma_dec.cuh"
#include "kernels/mmq.cuh"

#define MMQ_WARPS 8

typedef struct {
  const uint8_t *w[KC_MATVEC_MAX_SEGS]; /* swiglu: w[0] gate */
  const uint8_t *wup;
  float *out[KC_MATVEC_MAX_SEGS];
  int64_t n_out[KC_MATVEC_MAX_SEGS];
  size_t row_bytes[KC_MATVEC_MAX_SEGS];
  int split[KC_MATVEC_MAX_SEGS];        /* mmq.cu: column parts per segment */
  unsigned blk_end[KC_MATVEC_MAX_SEGS]; /* weight blocks: segment s owns [blk_end[s-1], blk_end[s]) */
  int n_seg, swiglu;
  unsigned ny; /* x tiles */
  int S;       /* mmq_prefill.cu: split-K parts = cluster size */
} mmq_args_t;

/* rows of x rounded up to whole tiles */
static inline int64_t mmq_npad(int n) { return ((int64_t)n + KC_MMQ_TILE_ROWS - 1) / KC_MMQ_TILE_ROWS * KC_MMQ_TILE_ROWS; }

/* GANTRY_MMQ_OCC / kc_mmq_set_occ: 1 or 2 blocks per SM, 0 = by shape (mmq_occ) */
int mmq_occ_env(void);
/* Blocks per SM a kernel instance is built for: the setting, else 2 where 128 registers spill
 * little (one x tile of 8 rows, Q4_K / Q5_K / Q6_K words), else 1. */
template <class D, int NT> static int mmq_occ() {
  const int o = mmq_occ_env();
  return o ? o : NT == 1 && sizeof(typename D::raw) <= 48 ? 2 : 1;
}

/* mmq_prefill.cu: kc_mmq_prep / kc_mmq_launch for n > KC_MMQ_EXACT_ROWS (same contracts) */
int mmq_pf_prep(cudaStream_t st, int type, const float *x, int64_t cols, int n, int parts, void *scratch);
int mmq_pf_launch(cudaStream_t st, int type, const mmq_args_t &a, int64_t cols, const void *scratch, int n, int parts);

/* The prep of one quad v of x (a lane of 8 consecutive lanes = one 32-element sub-block): its
 * `parts` bf16 parts (hi, mid, lo) into xp[idx], xp[pst + idx], xp[2 pst + idx]; returns the
 * sub-block's Σx (the Q4_K / Q5_K min term) to every lane of the 8. With one part, the sum of
 * the bf16 x the mma multiplies, so that d·sc·Σq·x̃ - dmin·m·Σx̃ is exactly W·x̃ (only x's own
 * rounding); the exact Σx would leave d·sc·Σq·(x̃ - x) uncancelled, several times larger (q >= 0). */
__device__ __forceinline__ float mmq_prep_quad(const float4 v, int parts, uint2 *__restrict__ xp, int64_t idx,
                                               int64_t pst) {
  const __nv_bfloat162 h01 = __floats2bfloat162_rn(v.x, v.y), h23 = __floats2bfloat162_rn(v.z, v.w);
  xp[idx] = make_uint2(mvm_bits(h01), mvm_bits(h23));
  if (parts > 1) {
    const float4 r1 = make_float4(v.x - __low2float(h01), v.y - __high2float(h01), v.z - __low2float(h23),
                                  v.w - __high2float(h23));
    const __nv_bfloat162 m01 = __floats2bfloat162_rn(r1.x, r1.y), m23 = __floats2bfloat162_rn(r1.z, r1.w);
    xp[pst + idx] = make_uint2(mvm_bits(m01), mvm_bits(m23));
    if (parts > 2) {
      const __nv_bfloat162 l01 = __floats2bfloat162_rn(r1.x - __low2float(m01), r1.y - __high2float(m01));
      const __nv_bfloat162 l23 = __floats2bfloat162_rn(r1.z - __low2float(m23), r1.w - __high2float(m23));
      xp[2 * pst + idx] = make_uint2(mvm_bits(l01), mvm_bits(l23));
    }
  }
  float p = parts == 1 ? (__low2float(h01) + __high2float(h01)) + (__low2float(h23) + __high2float(h23))
                       : (v.x + v.y) + (v.z + v.w);
  p += __shfl_xor_sync(KC_FULL_MASK, p, 1);
  p += __shfl_xor_sync(KC_FULL_MASK, p, 2);
  p += __shfl_xor_sync(KC_FULL_MASK, p, 4);
  return p;
}
/* One 256-element chunk kb of a warp's two groups of 16 weight rows (wa / wb: the rows g and
 * g + 8 of each group, ws: row lane / 2 for the scales) against NT x tiles of 8 columns in NP
 * bf16 parts: the quant words and scales loaded, the scales decoded into the warp's slots scs
 * (2 x 256 floats), then per sub-block one mma per k-step, tile and part from zero and acc +=
 * d·sc·c (- dmin·m·Σx, sums sx [cols / 32][npad] at x row xr0 + 8 j + 2 tig). bload(s, j, p):
 * the lane's B fragment (b0, b1) of k-step s, tile j, part p. Shared by mmq.cu and
 * mmq_prefill.cu, which differ only in the layout bload reads. */
template <class D, int NT, int NP, class BLoad>
__device__ __forceinline__ void mmq_chunk(float (&acc)[2][NT][4], const uint8_t *const (&wa)[2],
                                          const uint8_t *const (&wb)[2], const uint8_t *const (&ws)[2], int64_t kb,
                                          int lane, float *scs, const float *__restrict__ sx, int64_t npad, int64_t xr0,
                                          BLoad bload) {
  const int g = lane >> 2, tig = lane & 3;
  typename D::raw ra[2], rb[2];
  typename D::sraw sr[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    D::load(ra[i], wa[i], kb, tig);
    D::load(rb[i], wb[i], kb, tig);
    D::sload(sr[i], ws[i], kb, lane & 1);
  }
  __syncwarp(); /* previous chunk's scales read by every lane */
#pragma unroll
  for (int i = 0; i < 2; i++) D::sdecode(sr[i], lane & 1, (float4 *)(scs + i * 256 + (lane >> 1) * 16 + 8 * (lane & 1)));
  __syncwarp();
#pragma unroll
  for (int sb = 0; sb < D::NSUB; sb++) {
    float c[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < NT; j++) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.0f;
#pragma unroll
    for (int h = 0; h < D::SPS; h++) {
      const int s = D::SPS * sb + h;
      uint2 bq[NT][NP];
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int p = 0; p < NP; p++) bq[j][p] = bload(s, j, p);
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const uint32_t af[4] = {D::apair(ra[i], s, 0), D::apair(rb[i], s, 0), D::apair(ra[i], s, 1),
                                D::apair(rb[i], s, 1)};
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
          for (int p = 0; p < NP; p++) mvm_mma(c[i][j], af, bq[j][p].x, bq[j][p].y);
      }
    }
    [[maybe_unused]] float2 sv[NT];
    if constexpr (D::HAS_MIN) {
#pragma unroll
      for (int j = 0; j < NT; j++) sv[j] = __ldg((const float2 *)(sx + (kb * 8 + sb) * npad + xr0 + 8 * j + 2 * tig));
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const float *s0 = scs + i * 256 + g * 16, *s8 = s0 + 8 * 16;
      if constexpr (D::HAS_MIN) {
        const float d0 = s0[2 * sb], m0 = s0[2 * sb + 1], d8 = s8[2 * sb], m8 = s8[2 * sb + 1];
#pragma unroll
        for (int j = 0; j < NT; j++) {
          acc[i][j][0] = fmaf(-m0, sv[j].x, fmaf(d0, c[i][j][0], acc[i][j][0]));
          acc[i][j][1] = fmaf(-m0, sv[j].y, fmaf(d0, c[i][j][1], acc[i][j][1]));
          acc[i][j][2] = fmaf(-m8, sv[j].x, fmaf(d8, c[i][j][2], acc[i][j][2]));
          acc[i][j][3] = fmaf(-m8, sv[j].y, fmaf(d8, c[i][j][3], acc[i][j][3]));
        }
      } else {
        const float d0 = s0[sb], d8 = s8[sb];
#pragma unroll
        for (int j = 0; j < NT; j++) {
          acc[i][j][0] = fmaf(d0, c[i][j][0], acc[i][j][0]);
          acc[i][j][1] = fmaf(d0, c[i][j][1], acc[i][j][1]);
          acc[i][j][2] = fmaf(d8, c[i][j][2], acc[i][j][2]);
          acc[i][j][3] = fmaf(d8, c[i][j][3], acc[i][j][3]);
        }
      }
    }
  }
}
#endif
