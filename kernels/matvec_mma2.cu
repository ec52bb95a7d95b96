/* kernels/matvec_mma2.cu — v2 of the tensor-core decode matvec (kc_mvm_launch with
 * GANTRY_MATVEC_MMA=2; v1 and the fragment / exactness notes: kernels/matvec_mma.cu).
 *
 * Same work split, per-chunk arithmetic and reduction as v1 (kernels/matvec_mma_internal.cuh),
 * so the results are the same bits; what changes is the memory pipeline:
 *  - the block builds the B fragments (x in bf16 hi + mid + lo) and the Q4_K sub-block sums of
 *    ALL chunks once, into dynamic shared memory, with one barrier; v1 rebuilt them per window of
 *    S chunks between two barriers, so every warp of a block waited on the slowest one and on an
 *    L2 round trip of x per window;
 *  - each warp keeps two chunks of weight words in registers (its first two loads are issued
 *    before the block builds x; the next load of a buffer is issued as soon as it is consumed),
 *    so a weight load is always in flight while a chunk is computed.
 * Shared memory: [HAS_MIN: sxs float [nkb][n][8]] then bsx uint4 [nkb][8][n][12]: entry (kb, p,
 * r, 4j + tig) = the B registers of k-steps 2p, 2p+1 for column 4r + j (j 0 / 1 / 2 = hi / mid /
 * lo of x row r) at k-slots of tig; columns 4r + 3 and rows >= n are zero and not stored.
 * 1568 B (Q6_K 1536) per chunk and x row: cols 4096 x 1 row 25 KB, 12288 x 1 row 75 KB; above
 * MVM2_SMEM_MAX (12288 x 2 rows) mvm2_launch declines and v1 runs. */
#include "format/dtype.h"
#include "kernels/matvec_mma_internal.cuh"

#define MVM2_SMEM_MAX (100 * 1024) /* two blocks per SM with the static arrays (<= 227 KB) */

template <class D> static size_t mvm2_smem(int64_t nkb, int n) {
  return (size_t)nkb * (size_t)n * ((D::HAS_MIN ? 32u : 0u) + 8u * 12u * 16u);
}

/* x [n, cols] -> bsx / sxs (layout above). Thread t takes quads t, t + 256, ... of (chunk, row):
 * whole warps (nkb * n * 64 is a multiple of 64), 8 consecutive lanes per sub-block as v1. */
template <class D>
__device__ __forceinline__ void mvm2_fill(uint4 *bsx, float *sxs, const float *__restrict__ x, int64_t cols,
                                          int64_t nkb, int n) {
  const int64_t total = nkb * n * 64;
#pragma unroll 4
  for (int64_t t = threadIdx.x; t < total; t += MVM_WARPS * 32) {
    const int64_t c = t / (n * 64);
    const int r = (int)((t >> 6) % n), q = (int)(t & 63);
    const float4 v = __ldg((const float4 *)(x + (size_t)r * (size_t)cols + c * 256 + 4 * q));
    const int s = D::kstep(q), tig = D::ktig(q);
    uint4 *b = bsx + ((c * 8 + (s >> 1)) * n + r) * 12 + tig;
    mvm_split_x(v, *((uint2 *)b + (s & 1)), *((uint2 *)(b + 4) + (s & 1)), *((uint2 *)(b + 8) + (s & 1)));
    if constexpr (D::HAS_MIN) {
      const float p = mvm_sub_sum(v);
      if ((q & 7) == 0) sxs[(c * n + r) * 8 + (q >> 3)] = p;
    }
  }
}

template <class D, int RG>
__global__ void __launch_bounds__(MVM_WARPS * 32, 2)
    mvm2_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, int n) {
  extern __shared__ __align__(16) unsigned char mvm2_sm[];
  __shared__ float4 scs[MVM_WARPS][16][4];    /* per warp: scale slots of the group's 16 rows */
  __shared__ float red[MVM_WARPS][RG][16][4]; /* per warp: [group][row][x row] part sums */
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  const mvm_pos<RG> p(a, wi, lane);
  const int64_t nkb = cols >> 8, S = p.S;
  float *sxs = (float *)mvm2_sm;
  const uint4 *bsx = (const uint4 *)(mvm2_sm + (D::HAS_MIN ? (size_t)nkb * n * 32 : 0));

  /* the warp's chunks: part, part + S, ... (mvm_split: nkb >= 2S, so at least two) */
  mvm_wbuf<D, RG> b0, b1;
  int64_t kb = p.part;
  b0.load(p, kb, lane);
  if (kb + S < nkb) b1.load(p, kb + S, lane);
  mvm2_fill<D>((uint4 *)bsx, sxs, x, cols, nkb, n);
  __syncthreads();

  float acc[RG][2];
#pragma unroll
  for (int i = 0; i < RG; i++) acc[i][0] = acc[i][1] = 0.0f;
  /* B: column g = 4r + j of the mma is part j (3: zero) of x row r = g / 4 (rows >= n: zero) */
  const int br = g >> 2, bj = g & 3;
  const bool bval = bj < 3 && br < n;
  const uint4 *bl = bsx + (bval ? br * 12 + 4 * bj + tig : 0);
  /* the min term once per x row tig / 2: in the lane holding its hi/mid columns (even tig) */
  const int sr = tig >> 1;
  const bool sval = (tig & 1) == 0 && sr < n;
  auto chunk = [&](const mvm_wbuf<D, RG> &wb, int64_t k) {
    [[maybe_unused]] float sx[D::HAS_MIN ? D::NSUB : 1];
    if constexpr (D::HAS_MIN) {
      float4 u0 = make_float4(0.f, 0.f, 0.f, 0.f), u1 = u0;
      if (sval) {
        u0 = *(const float4 *)&sxs[(k * n + sr) * 8];
        u1 = *(const float4 *)&sxs[(k * n + sr) * 8 + 4];
      }
      sx[0] = u0.x, sx[1] = u0.y, sx[2] = u0.z, sx[3] = u0.w, sx[4] = u1.x, sx[5] = u1.y, sx[6] = u1.z, sx[7] = u1.w;
    }
    const uint4 *bk = bl + k * 8 * n * 12;
    mvm_chunk<D, RG>(acc, wb, sx, scs[wi], lane,
                     [&](int q) { return bval ? bk[q * n * 12] : make_uint4(0u, 0u, 0u, 0u); });
  };
  for (; kb < nkb; kb += 2 * S) {
    chunk(b0, kb);
    if (kb + 2 * S < nkb) b0.load(p, kb + 2 * S, lane);
    if (kb + S >= nkb) break;
    chunk(b1, kb + S);
    if (kb + 3 * S < nkb) b1.load(p, kb + 3 * S, lane);
  }
  mvm_finish<RG>(a, p, red, acc, wi, lane, n);
}

template <class D, int RG> static int mvm2_go(cudaStream_t st, mvm_args_t a, int64_t cols, const float *x, int n) {
  const int64_t nkb = cols >> 8;
  const size_t sm = mvm2_smem<D>(nkb, n);
  if (sm > MVM2_SMEM_MAX) return -1;
  const int64_t blocks = mvm_plan(a, nkb, a.swiglu ? 8 * RG : 16 * RG);
  if (blocks < 0) return (int)cudaErrorInvalidValue;
  if (blocks == 0) return 0;
  static int attr_set; /* once per process (a function attribute, not a stream operation) */
  if (!attr_set) {
    /* the first call may come while a decode graph is being captured: relaxed mode for the calls */
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) return (int)e;
    e = cudaFuncSetAttribute(mvm2_kernel<D, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize, MVM2_SMEM_MAX);
    /* all of the unified L1 / shared memory as shared: two blocks of 12288 columns per SM */
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(mvm2_kernel<D, RG>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               (int)cudaSharedmemCarveoutMaxShared);
    const cudaError_t e2 = cudaThreadExchangeStreamCaptureMode(&mode); /* back to the caller's mode */
    if (e != cudaSuccess) return (int)e;
    if (e2 != cudaSuccess) return (int)e2;
    attr_set = 1;
  }
  mvm2_kernel<D, RG><<<(unsigned)blocks, MVM_WARPS * 32, sm, st>>>(a, x, cols, n);
  return (int)cudaGetLastError();
}

/* RG as v1 (kernels/matvec_mma.cu mvm_pick): swiglu 2 (gate + up groups), else 1. Q6_K swiglu
 * is declined (two buffers of 2 x 2 x 12 words spill past 128 registers; no Q4_K_M model has it) */
template <class D> static int mvm2_pick(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n) {
  if constexpr (D::NSUB == 16) {
    if (a.swiglu) return -1;
  } else if (a.swiglu) {
    return mvm2_go<D, 2>(st, a, cols, x, n);
  }
  return mvm2_go<D, 1>(st, a, cols, x, n);
}

int mvm2_launch(cudaStream_t st, int type, mvm_args_t a, int64_t cols, const float *x, int n) {
  switch (type) {
    case GT_TYPE_Q4_K: return mvm2_pick<mvm_q4k>(st, a, cols, x, n);
    case GT_TYPE_Q6_K: return mvm2_pick<mvm_q6k>(st, a, cols, x, n);
    default: return -1;
  }
}
