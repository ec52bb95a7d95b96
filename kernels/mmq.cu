/* kernels/mmq.cu — see mmq.cuh: the API, and the kernel for decode batches (n <= KC_MMQ_EXACT_ROWS;
 * prefill rows: kernels/mmq_prefill.cu). Fragment layout and exactness: kernels/matvec_mma.cu.
 *
 * Work split. A block of 8 warps = S column parts x 8/S row warps, for one tile of 32 x rows
 * (blocks of one weight-row range and consecutive x tiles are adjacent in the grid, so the
 * tiles of a prefill read the same weights out of L2). A warp owns two groups of 16 weight
 * rows (swiglu: 16 gate rows and the 16 up rows of the same features) and one part; it takes the
 * 256-element chunks kb = part, part + S, ... in order. Per chunk a lane loads its quant words
 * of rows g and g + 8 of both groups; the warp decodes the 32 rows' scale slots into shared
 * memory (lane L: row L/2, half L%2). Per sub-block and group, c = Σ q·x per (row, x row) from
 * zero by mma (A = exact q of the weights, B = the x parts straight from the prep buffer: lane
 * (g, tig) loads elements kbase(s, tig) + 0..3 of x row 8j + g as one 8-byte word per part),
 * then acc += d_sc · c [- dmin_m · Σx]. Every part of x goes into the same c (products exact).
 * Lane (g, tig) ends with rows g, g + 8 x x rows 8j + 2tig, +1; the parts are added in part
 * order through shared memory. A feature's result depends on (type, S, its row, x, parts) only;
 * S is mmq_split of the weight's own n_out and the tile count, so a weight gives the same
 * products alone, in a multi launch or as the gate of a swiglu. */
#include <stdlib.h>

#include "format/dtype.h"
#include "kernels/mmq_internal.cuh"

#define MMQ_TARGET_WARPS 2048

KC_API size_t kc_mmq_scratch_bytes(int64_t cols, int n, int parts) {
  const size_t np = (size_t)mmq_npad(n);
  return ((size_t)parts * np * (size_t)cols * 2 + 15) / 16 * 16 + np * (size_t)(cols / 32) * 4;
}

/* thread per quad (4 elements) of a padded row; 8 consecutive lanes = one 32-element sub-block */
__global__ void mmq_prep_kernel(const float *__restrict__ x, int64_t cols, int n, int64_t npad, int parts,
                                uint2 *__restrict__ xp, float *__restrict__ sx) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int64_t qpr = cols / 4, t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= npad * qpr) return; /* whole warps: qpr % 64 == 0 */
  const int64_t r = t / qpr, q = t % qpr;
  const int64_t rr = r < n ? r : n - 1;
  const float4 v = __ldg((const float4 *)(x + rr * cols) + q);
  const float p = mmq_prep_quad(v, parts, xp, t, npad * qpr);
  if ((q & 7) == 0) sx[(q >> 3) * npad + r] = p; /* [sub-block][row] */
}

KC_API int kc_mmq_prep(cudaStream_t st, int type, const float *x, int64_t cols, int n, int parts, void *scratch) {
  if (n < 1 || cols <= 0 || cols % 256 != 0 || parts < 1 || parts > 3 || ((uintptr_t)x & 15) != 0 ||
      ((uintptr_t)scratch & 15) != 0)
    return (int)cudaErrorInvalidValue;
  if (n > KC_MMQ_EXACT_ROWS) return mmq_pf_prep(st, type, x, cols, n, parts, scratch);
  /* decode rows: row-major parts, the same for every type */
  const int64_t npad = mmq_npad(n), total = npad * (cols / 4);
  uint2 *xp = (uint2 *)scratch;
  float *sx = (float *)((uint8_t *)scratch + ((size_t)parts * (size_t)npad * (size_t)cols * 2 + 15) / 16 * 16);
  const int64_t blocks = (total + 255) / 256;
  if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
  kc_launch(mmq_prep_kernel, (unsigned)blocks, 256, 0, st, x, cols, n, npad, parts, xp, sx);
  return (int)cudaGetLastError();
}

template <class D, int NT, int NP, int OCC>
__global__ void __launch_bounds__(MMQ_WARPS * 32, OCC)
    mmq_kernel(const mmq_args_t a, const uint16_t *__restrict__ xp, const float *__restrict__ sx, int64_t cols,
               int n, int64_t npad) {
  /* per warp: scale slots [group][row][16] while the chunks run, then [group][row][x col] sums */
  constexpr int WS = 2 * 16 * (NT * 8 > 16 ? NT * 8 : 16);
  __shared__ __align__(16) float sm[MMQ_WARPS * WS];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  const unsigned yb = blockIdx.x % a.ny, wblk = blockIdx.x / a.ny;
  int sg = 0;
  while (sg + 1 < a.n_seg && wblk >= a.blk_end[sg]) sg++;
  const unsigned blk = wblk - (sg ? a.blk_end[sg - 1] : 0u);
  const int S = a.split[sg], gpb = MMQ_WARPS / S, part = wi % S, rw = wi / S;
  const int fpw = a.swiglu ? 16 : 32; /* output features per warp */
  const int64_t n_out = a.n_out[sg], grp0 = (int64_t)blk * gpb;
  const size_t rbytes = a.row_bytes[sg];
  auto row_of = [&](int i, int m) -> const uint8_t * {
    int64_t o = (grp0 + rw) * fpw + (a.swiglu ? 0 : 16 * i) + m;
    if (o > n_out - 1) o = n_out - 1;
    return (a.swiglu && i ? a.wup : a.w[sg]) + (size_t)o * rbytes;
  };
  const uint8_t *wa[2], *wb[2], *ws[2];
#pragma unroll
  for (int i = 0; i < 2; i++) wa[i] = row_of(i, g), wb[i] = row_of(i, g + 8), ws[i] = row_of(i, lane >> 1);
  kc_pdl_wait(); /* x (mmq_prep's output) only from here */
  kc_pdl_trigger();
  const int64_t xr0 = (int64_t)yb * KC_MMQ_TILE_ROWS;
  const int64_t pstride = npad * cols; /* elements between parts */
  const uint16_t *xb = xp + (xr0 + g) * cols;
  float *scs = sm + wi * WS;

  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
  const int64_t nkb = cols >> 8;
  for (int64_t kb = part; kb < nkb; kb += S) {
    const uint16_t *xs0 = xb + kb * 256;
    mmq_chunk<D, NT, NP>(acc, wa, wb, ws, kb, lane, scs, sx, npad, xr0, [&](int s, int j, int p) {
      return __ldg((const uint2 *)(xs0 + D::kbase(s, tig) + p * pstride + (int64_t)8 * j * cols));
    });
  }

  /* red [warp][group][row 16][x col NT*8] */
  constexpr int XC = NT * 8;
  __syncthreads(); /* every warp done with its scale slots */
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) {
      float *r0 = scs + (i * 16 + g) * XC + 8 * j + 2 * tig, *r8 = r0 + 8 * XC;
      r0[0] = acc[i][j][0], r0[1] = acc[i][j][1], r8[0] = acc[i][j][2], r8[1] = acc[i][j][3];
    }
  __syncthreads();
  float *out = a.out[sg];
  for (int t = threadIdx.x; t < gpb * 2 * 16 * XC; t += MMQ_WARPS * 32) {
    const int w = t / (2 * 16 * XC), i = (t / (16 * XC)) % 2, m = (t / XC) % 16, r = t % XC;
    const int64_t xr = xr0 + r;
    if (xr >= n) continue;
    const float *base = sm + (w * S) * WS + (i * 16 + m) * XC + r;
    float s = base[0];
    for (int p = 1; p < S; p++) s += base[p * WS];
    if (!a.swiglu) {
      const int64_t o = (grp0 + w) * fpw + 16 * i + m;
      if (o < n_out) out[xr * n_out + o] = s;
    } else if (i == 0) {
      const float *ub = base + 16 * XC;
      float u = ub[0];
      for (int p = 1; p < S; p++) u += ub[p * WS];
      const int64_t o = (grp0 + w) * fpw + m;
      if (o < n_out) out[xr * n_out + o] = s / (1.0f + expf(-s)) * u; /* as kernels/swiglu.cu */
    }
  }
}

/* GANTRY_MMQ_TARGET_WARPS (a measurement knob, read once; 64..65536): the warp count the split
 * aims at instead of MMQ_TARGET_WARPS. Fewer parts = more row warps per block sharing x in L1. */
static int64_t mmq_target_warps(void) {
  static int64_t t = 0;
  if (!t) t = kc_env_int("GANTRY_MMQ_TARGET_WARPS", 64, 65536, MMQ_TARGET_WARPS);
  return t;
}

/* Column parts: a function of the weight's own n_out and the tile count only. */
static int mmq_split(int64_t n_out, int64_t nkb, unsigned ny) {
  const int64_t warps = (n_out + 31) / 32 * (int64_t)ny, target = mmq_target_warps();
  int S = 1;
  while (S < MMQ_WARPS && warps * S < target && 2 * S <= nkb) S *= 2;
  return S;
}

template <class D, int NT, int NP, int OCC>
static int mmq_go(cudaStream_t st, mmq_args_t a, int64_t cols, const void *scratch, int n) {
  const int64_t npad = mmq_npad(n), nkb = cols >> 8;
  const int fpw = a.swiglu ? 16 : 32;
  a.ny = (unsigned)(npad / KC_MMQ_TILE_ROWS);
  int64_t wblocks = 0;
  for (int s = 0; s < a.n_seg; s++) {
    a.split[s] = mmq_split(a.n_out[s], nkb, a.ny);
    const int64_t groups = (a.n_out[s] + fpw - 1) / fpw, gpb = MMQ_WARPS / a.split[s];
    wblocks += (groups + gpb - 1) / gpb;
    if (wblocks * a.ny > 0x7fffffff) return (int)cudaErrorInvalidValue;
    a.blk_end[s] = (unsigned)wblocks;
  }
  const uint16_t *xp = (const uint16_t *)scratch;
  const float *sx = (const float *)((const uint8_t *)scratch + ((size_t)NP * (size_t)npad * (size_t)cols * 2 + 15) / 16 * 16);
  kc_launch(mmq_kernel<D, NT, NP, OCC>, (unsigned)(wblocks * a.ny), MMQ_WARPS * 32, 0, st, a, xp, sx, cols, n, npad);
  return (int)cudaGetLastError();
}

static int g_occ = -1; /* GANTRY_MMQ_OCC / kc_mmq_set_occ; -1: not read yet */

int mmq_occ_env(void) {
  if (g_occ < 0) g_occ = (int)kc_env_int("GANTRY_MMQ_OCC", 1, 2, 0);
  return g_occ;
}

template <class D, int NT, int NP> static int mmq_o(cudaStream_t st, const mmq_args_t &a, int64_t cols, const void *sc, int n) {
  return mmq_occ<D, NT>() == 2 ? mmq_go<D, NT, NP, 2>(st, a, cols, sc, n) : mmq_go<D, NT, NP, 1>(st, a, cols, sc, n);
}

template <class D, int NP> static int mmq_nt(cudaStream_t st, const mmq_args_t &a, int64_t cols, const void *sc, int n) {
  if (n <= 8) return mmq_o<D, 1, NP>(st, a, cols, sc, n);
  if (n <= 16) return mmq_o<D, 2, NP>(st, a, cols, sc, n);
  return mmq_o<D, 4, NP>(st, a, cols, sc, n);
}

KC_API void kc_mmq_set_occ(int occ) { g_occ = occ == 1 || occ == 2 ? occ : -1; }

template <class D> static int mmq_np(cudaStream_t st, const mmq_args_t &a, int64_t cols, const void *sc, int n, int parts) {
  switch (parts) {
    case 1: return mmq_nt<D, 1>(st, a, cols, sc, n);
    case 2: return mmq_nt<D, 2>(st, a, cols, sc, n);
    default: return mmq_nt<D, 3>(st, a, cols, sc, n);
  }
}

static int g_mmq_force = -1, g_mmq_env = -1, g_parts_force = 0, g_parts_env = 0;

KC_API void kc_mmq_set(int on, int prefill_parts) {
  g_mmq_force = on < 0 ? -1 : on != 0;
  g_parts_force = prefill_parts >= 1 && prefill_parts <= 3 ? prefill_parts : 0;
}

KC_API int kc_mmq_parts(int n) {
  if (n <= KC_MMQ_EXACT_ROWS) return 3;
  if (g_parts_force) return g_parts_force;
  if (!g_parts_env) g_parts_env = (int)kc_env_int("GANTRY_PREFILL_XPARTS", 1, 3, KC_MMQ_PREFILL_PARTS);
  return g_parts_env;
}

KC_API int kc_mmq_ok(int type, const void *w, size_t row_bytes, int64_t cols) {
  if (g_mmq_env < 0) g_mmq_env = kc_env_int("GANTRY_MMQ", 0, 0, 1) != 0; /* off only for "0" */
  if (!(g_mmq_force >= 0 ? g_mmq_force : g_mmq_env) || cols <= 0 || cols % 256 != 0) return 0;
  const uintptr_t p = (uintptr_t)w;
  const size_t nb = (size_t)(cols / 256);
  switch (type) {
    case GT_TYPE_Q4_K: return (p & 15) == 0 && row_bytes == nb * 144;
    case GT_TYPE_Q5_K: return (p & 15) == 0 && row_bytes == nb * 176;
    case GT_TYPE_Q6_K: return (p & 1) == 0 && row_bytes == nb * 210;
    case GT_TYPE_Q8_0: return (p & 1) == 0 && row_bytes == nb * 8 * 34;
    default: return 0;
  }
}

KC_API int kc_mmq_size_ok(int64_t n_out, int64_t cols, int n) {
  return n > KC_MATVEC_MAX_ROWS || g_mmq_force == 1 || n_out * cols >= KC_MMQ_MIN_ELEMS;
}

KC_API int kc_mmq_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                         int64_t cols, const void *scratch, int n, int parts) {
  if (n_seg < 1 || n_seg > KC_MATVEC_MAX_SEGS || (wup && n_seg != 1) || n < 1 || cols <= 0 || cols % 256 != 0 ||
      parts < 1 || parts > 3 || ((uintptr_t)scratch & 15) != 0)
    return (int)cudaErrorInvalidValue;
  mmq_args_t a = {};
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
  if (n > KC_MMQ_EXACT_ROWS) return mmq_pf_launch(st, type, a, cols, scratch, n, parts);
  switch (type) {
    case GT_TYPE_Q4_K: return mmq_np<mvm_q4k>(st, a, cols, scratch, n, parts);
    case GT_TYPE_Q5_K: return mmq_np<mvm_q5k>(st, a, cols, scratch, n, parts);
    case GT_TYPE_Q6_K: return mmq_np<mvm_q6k>(st, a, cols, scratch, n, parts);
    case GT_TYPE_Q8_0: return mmq_np<mvm_q8_0>(st, a, cols, scratch, n, parts);
    default: return (int)cudaErrorInvalidValue;
  }
}
