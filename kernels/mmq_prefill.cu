/* kernels/mmq_prefill.cu — the mmq kernel for prefill rows (n > KC_MMQ_EXACT_ROWS; API and decode
 * rows: kernels/mmq.cu). Fragment layout and exactness: kernels/matvec_mma.cu.
 *
 * Prep. x goes to the "fragment-major" layout of the decoder D: for part p, tile of 8 x rows,
 * chunk kb, k-step s and lane (g, tig), 8 bytes = B registers b0, b1 = elements kbase(s, tig)
 * + 0..3 of x row 8 tile + g: a warp's B load of one k-step is one contiguous 256-byte read.
 *
 * Work split. Clusters of S blocks (S = split-K parts, mmq_split): block `part`
 * of a cluster takes the 256-element chunks kb = part, part + S, ... of 256 weight rows (8 warps
 * x two groups of 16 rows; swiglu: 128 features, group 0 = 16 gate rows, group 1 = the 16 up
 * rows of the same features) for one tile of 32 x rows; its 8 warps read the same x fragments
 * (L1 reuse). Blocks of one weight-row range and consecutive x tiles are adjacent in the grid, so
 * the tiles of a prefill read the same weights out of L2. Per chunk a lane loads its quant words
 * of rows g and g + 8 of both groups; the warp decodes the 32 rows' scale slots into shared
 * memory (lane L: row L/2, half L%2). Per sub-block and group, c = Σ q·x per (row, x row) from
 * zero by mma (A = exact q of the weights, B = the x parts), then acc += d_sc · c [- dmin_m ·
 * Σx]. Every part of x goes into the same c (products exact). Lane (g, tig) ends with rows g,
 * g + 8 x x rows 8j + 2tig, +1, written to shared memory; block 0 of the cluster adds the S
 * blocks' sums in part order through distributed shared memory and writes the outputs (swiglu:
 * silu(gate) * up). A feature's result depends on (type, S, its row, x, parts) only, so a weight
 * gives the same products alone, in a multi launch or as the gate of a swiglu. */
#include <cooperative_groups.h>

#include "format/dtype.h"
#include "kernels/mmq_internal.cuh"

/* thread per quad (4 elements) of a padded row; 8 consecutive lanes = one 32-element sub-block */
template <class D>
__global__ void mmq_pf_prep_kernel(const float *__restrict__ x, int64_t cols, int n, int64_t npad, int parts,
                                uint2 *__restrict__ xf, float *__restrict__ sx) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int64_t qpr = cols / 4, t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= npad * qpr) return; /* whole warps: qpr % 64 == 0 */
  const int64_t r = t / qpr, qq = t % qpr, kb = qq >> 6;
  const int q = (int)(qq & 63), s = D::kstep(q), lane = 4 * (int)(r & 7) + D::ktig(q);
  const int64_t idx = (((r >> 3) * (cols >> 8) + kb) * 16 + s) * 32 + lane, pst = npad * qpr;
  const int64_t rr = r < n ? r : n - 1;
  const float4 v = __ldg((const float4 *)(x + rr * cols) + qq);
  const float p = mmq_prep_quad(v, parts, xf, idx, pst);
  if ((qq & 7) == 0) sx[(qq >> 3) * npad + r] = p; /* [sub-block][row] */
}

template <class D>
static int mmq_prep_go(cudaStream_t st, const float *x, int64_t cols, int n, int parts, void *scratch) {
  const int64_t npad = mmq_npad(n), total = npad * (cols / 4);
  float *sx = (float *)((uint8_t *)scratch + ((size_t)parts * (size_t)npad * (size_t)cols * 2 + 15) / 16 * 16);
  const int64_t blocks = (total + 255) / 256;
  if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
  kc_launch(mmq_pf_prep_kernel<D>, (unsigned)blocks, 256, 0, st, x, cols, n, npad, parts, (uint2 *)scratch, sx);
  return (int)cudaGetLastError();
}

/* arguments checked by kc_mmq_prep */
int mmq_pf_prep(cudaStream_t st, int type, const float *x, int64_t cols, int n, int parts, void *scratch) {
  switch (type) {
    case GT_TYPE_Q4_K: return mmq_prep_go<mvm_q4k>(st, x, cols, n, parts, scratch);
    case GT_TYPE_Q5_K: return mmq_prep_go<mvm_q5k>(st, x, cols, n, parts, scratch);
    case GT_TYPE_Q6_K: return mmq_prep_go<mvm_q6k>(st, x, cols, n, parts, scratch);
    case GT_TYPE_Q8_0: return mmq_prep_go<mvm_q8_0>(st, x, cols, n, parts, scratch);
    default: return (int)cudaErrorInvalidValue;
  }
}

template <class D, int NT, int NP, int OCC>
__global__ void __launch_bounds__(MMQ_WARPS * 32, OCC)
    mmq_pf_kernel(const mmq_args_t a, const uint2 *__restrict__ xf, const float *__restrict__ sx, int64_t cols, int n,
               int64_t npad) {
  kc_pdl_wait();
  kc_pdl_trigger();
  /* per warp: scale slots [group][row][16] while the chunks run, then [group][row][x col] sums */
  constexpr int XC = NT * 8, WS = 2 * 16 * (XC > 16 ? XC : 16);
  __shared__ __align__(16) float sm[MMQ_WARPS * WS];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  const int S = a.S, part = (int)(blockIdx.x % (unsigned)S);
  const unsigned rest = blockIdx.x / (unsigned)S, yb = rest % a.ny, wblk = rest / a.ny;
  int sg = 0;
  while (sg + 1 < a.n_seg && wblk >= a.blk_end[sg]) sg++;
  const int64_t blk = wblk - (sg ? a.blk_end[sg - 1] : 0u);
  const int fpw = a.swiglu ? 16 : 32; /* output features per warp */
  const int64_t n_out = a.n_out[sg], f0 = (blk * MMQ_WARPS + wi) * fpw;
  const size_t rbytes = a.row_bytes[sg];
  auto row_of = [&](int i, int m) -> const uint8_t * {
    int64_t o = f0 + (a.swiglu ? 0 : 16 * i) + m;
    if (o > n_out - 1) o = n_out - 1;
    return (a.swiglu && i ? a.wup : a.w[sg]) + (size_t)o * rbytes;
  };
  const uint8_t *wa[2], *wb[2], *ws[2];
#pragma unroll
  for (int i = 0; i < 2; i++) wa[i] = row_of(i, g), wb[i] = row_of(i, g + 8), ws[i] = row_of(i, lane >> 1);
  const int64_t xr0 = (int64_t)yb * KC_MMQ_TILE_ROWS, nkb = cols >> 8;
  const int64_t pst = npad * cols / 4; /* uint2 per part */
  const uint2 *xb = xf + (xr0 >> 3) * nkb * 512 + lane;
  float *scs = sm + wi * WS;

  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
  for (int64_t kb = part; kb < nkb; kb += S) {
    const uint2 *xk = xb + kb * 512;
    mmq_chunk<D, NT, NP>(acc, wa, wb, ws, kb, lane, scs, sx, npad, xr0,
                         [&](int s, int j, int p) { return __ldg(xk + p * pst + (int64_t)j * nkb * 512 + s * 32); });
  }

  /* sums [warp][group][row 16][x col XC] in this block's shared memory, in the warp's own region
   * (its scale slots are not read any more) */
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) {
      float *r0 = scs + (i * 16 + g) * XC + 8 * j + 2 * tig, *r8 = r0 + 8 * XC;
      r0[0] = acc[i][j][0], r0[1] = acc[i][j][1], r8[0] = acc[i][j][2], r8[1] = acc[i][j][3];
    }
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  cl.sync(); /* every block's sums written (release / acquire over the cluster) */
  if (part == 0) {
    const float *rk[MMQ_WARPS];
    for (int k = 0; k < S; k++) rk[k] = cl.map_shared_rank(sm, k); /* block rank k = part k */
    float *out = a.out[sg];
    for (int t = threadIdx.x; t < MMQ_WARPS * 2 * 16 * XC; t += MMQ_WARPS * 32) {
      const int w = t / (2 * 16 * XC), i = (t / (16 * XC)) % 2, m = (t / XC) % 16, r = t % XC;
      const int64_t xr = xr0 + r, o = (blk * MMQ_WARPS + w) * fpw + (a.swiglu ? 0 : 16 * i) + m;
      if (xr >= n || o >= n_out || (a.swiglu && i)) continue;
      const int off = w * WS + (i * 16 + m) * XC + r;
      float v = rk[0][off];
      for (int k = 1; k < S; k++) v += rk[k][off];
      if (!a.swiglu) {
        out[xr * n_out + o] = v;
      } else {
        float u = rk[0][off + 16 * XC];
        for (int k = 1; k < S; k++) u += rk[k][off + 16 * XC];
        out[xr * n_out + o] = v / (1.0f + expf(-v)) * u; /* as kernels/swiglu.cu */
      }
    }
  }
  cl.sync(); /* the other blocks' shared memory stays until block 0 has read it */
}

/* Split-K parts (the cluster size): a function of cols and the x tile count only (so every entry
 * point sums a weight's products the same way): the largest power of two S <= chunks with
 * S * tiles <= 8 (decode batches of <= 32 rows: 8; prefill of >= 160 rows: 1, no reduction). */
static int mmq_split(int64_t nkb, unsigned ny) {
  int S = 1;
  while (2 * S <= MMQ_WARPS && 2 * S <= nkb && 2 * S * (int64_t)ny <= MMQ_WARPS) S *= 2;
  return S;
}

template <class D, int NT, int NP, int OCC>
static int mmq_go(cudaStream_t st, mmq_args_t a, int64_t cols, const void *scratch, int n) {
  const int64_t npad = mmq_npad(n), nkb = cols >> 8;
  const int fpb = (a.swiglu ? 16 : 32) * MMQ_WARPS; /* output features per block */
  a.ny = (unsigned)(npad / KC_MMQ_TILE_ROWS);
  a.S = mmq_split(nkb, a.ny);
  int64_t wblocks = 0;
  for (int s = 0; s < a.n_seg; s++) {
    wblocks += (a.n_out[s] + fpb - 1) / fpb;
    if (wblocks * a.ny * a.S > 0x7fffffff) return (int)cudaErrorInvalidValue;
    a.blk_end[s] = (unsigned)wblocks;
  }
  const uint2 *xf = (const uint2 *)scratch;
  const float *sx = (const float *)((const uint8_t *)scratch + ((size_t)NP * (size_t)npad * (size_t)cols * 2 + 15) / 16 * 16);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(wblocks * a.ny * a.S));
  cfg.blockDim = dim3(MMQ_WARPS * 32);
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)a.S, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, mmq_pf_kernel<D, NT, NP, OCC>, a, xf, sx, cols, n, npad);
  return (int)(e != cudaSuccess ? e : cudaGetLastError());
}

template <class D, int NT, int NP> static int mmq_o(cudaStream_t st, const mmq_args_t &a, int64_t cols, const void *sc, int n) {
  return mmq_occ<D, NT>() == 2 ? mmq_go<D, NT, NP, 2>(st, a, cols, sc, n) : mmq_go<D, NT, NP, 1>(st, a, cols, sc, n);
}

template <class D, int NP> static int mmq_nt(cudaStream_t st, const mmq_args_t &a, int64_t cols, const void *sc, int n) {
  if (n <= 8) return mmq_o<D, 1, NP>(st, a, cols, sc, n);
  if (n <= 16) return mmq_o<D, 2, NP>(st, a, cols, sc, n);
  return mmq_o<D, 4, NP>(st, a, cols, sc, n);
}

template <class D> static int mmq_np(cudaStream_t st, const mmq_args_t &a, int64_t cols, const void *sc, int n, int parts) {
  switch (parts) {
    case 1: return mmq_nt<D, 1>(st, a, cols, sc, n);
    case 2: return mmq_nt<D, 2>(st, a, cols, sc, n);
    default: return mmq_nt<D, 3>(st, a, cols, sc, n);
  }
}

/* arguments checked by kc_mmq_launch */
int mmq_pf_launch(cudaStream_t st, int type, const mmq_args_t &a, int64_t cols, const void *scratch, int n, int parts) {
  switch (type) {
    case GT_TYPE_Q4_K: return mmq_np<mvm_q4k>(st, a, cols, scratch, n, parts);
    case GT_TYPE_Q5_K: return mmq_np<mvm_q5k>(st, a, cols, scratch, n, parts);
    case GT_TYPE_Q6_K: return mmq_np<mvm_q6k>(st, a, cols, scratch, n, parts);
    case GT_TYPE_Q8_0: return mmq_np<mvm_q8_0>(st, a, cols, scratch, n, parts);
    default: return (int)cudaErrorInvalidValue;
  }
}
