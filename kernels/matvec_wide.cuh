/* kernels/matvec_wide.cuh — Q4_K / Q6_K products of 9..KC_MVW_MAX_ROWS rows of x in one bf16
 * part (bf16 activations: mmq's x and Σx of bf16(x)) on the weight ring, K split over a cluster
 * (included by kernels/matvec_mma.cu after matvec_ring.cuh; device-side, not a public header).
 *
 * The per-chunk arithmetic of the one-part ring kernel (mvr_kernel at NR <= 8) widened to NT
 * n-tiles of 8 x rows (NR = 8 NT = 16 or 32): each A fragment (16 weight rows x 16 columns,
 * decoded once) feeds NT mma m16n8k16, and each lane's B fragments of a k-step pair (one uint4
 * per n-tile) serve the warp's RG groups. x of 32 rows takes 16 KB per chunk, more than a block
 * can hold for all of K, so:
 *  - a tile = W warps x RG groups of 16 weight rows x all of K (mvw_pos; no K split inside the
 *    block); two shapes (mvw_go): W 8 x RG 2 (swiglu: gate + up groups of one warp, as mvm_pos)
 *    and W 16 x RG 1 (half the registers, twice the warps; swiglu: warps W / 2.. hold the up rows
 *    of warps 0.. gate rows);
 *  - a cluster of C blocks computes a tile together: rank c over chunks [c L, min(c L + L, nkb)),
 *    its slice; x of the slice (NR rows, zero past n; Q4_K also Σx per sub-block) is built once
 *    per block in shared memory; the grid is persistent: cluster q takes tiles q, q + ncl, ...;
 *  - each warp streams its groups' chunks of the slice through its ring (mvr_issue with k0, the
 *    slice end and the cluster step), NST - 1 chunks in flight, across tiles too;
 *  - per tile each warp's sums go to red ([NR][W][RG][16] floats, shared); a cluster
 *    barrier; rank c adds the C ranks' red in rank order (distributed shared memory) for the c-th
 *    of C ranges of the tile's outputs and writes them (mvw_reduce; swiglu: SiLU(gate) * up as
 *    kernels/swiglu.cu); it arrives on the cluster barrier again, and the next tile waits on that
 *    before it overwrites red (split arrive / wait: the wait lands after the next tile's chunks).
 * Sums: per sub-block acc += d c - dmin Σx (fp32, mvm_chunk's order), chunk after chunk over the
 * slice, then over the ranks: another fp32 order than mmq's (its K parts interleave chunks), the
 * same values within rounding (test_matvec_ring_rows). PDL: the first NST - 1 stages of weights
 * before kc_pdl_wait, x after; kc_launch_cluster sets the cluster and PDL attributes. */
#ifndef GANTRY_KERNELS_MATVEC_WIDE_CUH
#define GANTRY_KERNELS_MATVEC_WIDE_CUH
#include <cooperative_groups.h>

/* x per chunk for NT n-tiles: B slots [8 k-step pairs][32 NT] uint4 (x row r in column r: slot 32
 * (r / 8) + 4 (r % 8) + tig, mvr_fill_p1's layout for LW = 32 NT), then Q4_K Σx [NR][8] */
template <class D, int NT> struct mvw_x {
  static constexpr int NR = 8 * NT, LW = 32 * NT, XW = 8 * LW, NS = D::HAS_MIN ? 8 * NR : 0;
  static constexpr int XB = XW * 16 + NS * 4;
};
/* dynamic shared memory of a launch with slices of L chunks: the W warps' rings, x, red */
template <class D, int RG, int NST, int NT, int W> __host__ __device__ constexpr size_t mvw_smem(int64_t L) {
  return (size_t)W * NST * RG * 16 * mvr_t<D>::ROWB + (size_t)L * mvw_x<D, NT>::XB + (size_t)8 * NT * W * RG * 16 * 4;
}

/* Where warp wi of a W-warp block sits in tile `tile` (mvr_issue / mvr_lds's position type): S 1,
 * part 0; segment sg; grp0 the tile's first warp-group (of fpw features); wa / wb / ws rows g, g + 8,
 * lane / 2 of each of its RG groups (rows past n_out read row n_out - 1 and are not written).
 * Plain: warp w rows (grp0 + w) fpw + 16 i + m, fpw = 16 RG. Swiglu at RG 2: mvm_pos's (group 2i
 * gate, 2i + 1 up rows of the same 16 features, fpw 16); at RG 1: warps w < W / 2 the gate rows
 * (grp0 + w) 16 + m, warp w + W / 2 the up rows of the same features. */
template <int RG, int W> struct mvw_pos {
  static constexpr int S = 1, part = 0;
  int sg, fpw, wi;
  int64_t n_out, grp0;
  const uint8_t *wa[RG], *wb[RG], *ws[RG];
  __device__ mvw_pos(const mvm_args_t &a, int wi_, int lane, unsigned tile) {
    sg = 0, wi = wi_; /* the segment and the tile inside it, as mvm_pos */
    while (sg + 1 < a.n_seg && tile >= a.blk_end[sg]) sg++;
    const unsigned blk = tile - (sg ? a.blk_end[sg - 1] : 0u);
    fpw = a.swiglu ? 16 : 16 * RG; /* swiglu: 16 features per warp at either RG */
    n_out = a.n_out[sg], grp0 = (int64_t)blk * (a.swiglu && RG == 1 ? W / 2 : W);
    const int g = lane >> 2;
#pragma unroll
    for (int i = 0; i < RG; i++) wa[i] = row(a, i, g), wb[i] = row(a, i, g + 8), ws[i] = row(a, i, lane >> 1);
  }
  /* row m (< 16) of the warp's group i */
  __device__ const uint8_t *row(const mvm_args_t &a, int i, int m) const {
    const bool up = a.swiglu && (RG == 1 ? wi >= W / 2 : (i & 1));
    const int w = a.swiglu && RG == 1 ? wi % (W / 2) : wi;
    int64_t o = (grp0 + w) * fpw + 16 * (a.swiglu && RG > 1 ? i >> 1 : i) + m;
    if (o > n_out - 1) o = n_out - 1;
    return (up ? a.wup : a.w[sg]) + (size_t)o * a.row_bytes[sg];
  }
  /* the output feature of red's (warp w, group i, row m), -1 for an up group (its gate's sums add
   * it: up_off floats on in red) */
  __device__ int64_t feature(const mvm_args_t &a, int w, int i, int m) const {
    if (!a.swiglu) return (grp0 + w) * fpw + 16 * i + m;
    if (RG == 1) return w < W / 2 ? (grp0 + w) * fpw + m : -1;
    return (i & 1) ? -1 : (grp0 + w) * fpw + 16 * (i >> 1) + m;
  }
  static constexpr int up_off = RG == 1 ? (W / 2) * 16 : 16;
};

__device__ __forceinline__ void mvw_cluster_arrive(void) {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mvw_cluster_wait(void) { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

/* One staged chunk of a warp's RG groups: acc[i][t][0 / 1] += row g of group i for x rows 8t +
 * 2tig, + 1, [2 / 3] the same for row g + 8. xk: the chunk's B slots; sx (HAS_MIN): its Σx [NR][8];
 * scs: the warp's [16][4] float4 scale slots. */
template <class D, int RG, int NT>
__device__ __forceinline__ void mvw_chunk(float (&acc)[RG][NT][4], const mvm_wbuf<D, RG> &wb, const uint4 *xk,
                                          const float *sx, float4 (*scs)[4], int lane) {
  constexpr int LW = 32 * NT;
  const int tig = lane & 3, g = lane >> 2;
  /* the scale slots: RG > 1 in registers for all groups (the warp's scs serves one group at a
   * time); RG 1 read from scs where used (32 registers fewer) */
  [[maybe_unused]] float s0[RG > 1 ? RG : 1][16], s8[RG > 1 ? RG : 1][16];
  if constexpr (RG > 1) {
#pragma unroll
    for (int i = 0; i < RG; i++) mvm_group_slots<D>(wb.sr[i], scs, lane, s0[i], s8[i]);
  } else {
    __syncwarp(); /* the previous chunk's slots read by every lane */
    D::sdecode(wb.sr[0], lane & 1, &scs[lane >> 1][2 * (lane & 1)]);
    __syncwarp();
  }
  const auto slot = [&](int i, int hi, int j) -> float {
    if constexpr (RG > 1) return hi ? s8[i][j] : s0[i][j];
    else return ((const float *)scs[hi ? g + 8 : g])[j];
  };
  float c[RG][NT][4];
#pragma unroll
  for (int p = 0; p < 8; p++) { /* k-steps 2p, 2p + 1 */
    uint4 b[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) b[t] = xk[LW * p + 32 * t + lane];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int s = 2 * p + h, k = s / D::SPS; /* sub-block k */
      if (s % D::SPS == 0)
#pragma unroll
        for (int i = 0; i < RG; i++)
#pragma unroll
          for (int t = 0; t < NT; t++) c[i][t][0] = c[i][t][1] = c[i][t][2] = c[i][t][3] = 0.0f;
#pragma unroll
      for (int i = 0; i < RG; i++) {
        uint32_t af[4];
        mvm_afrag<D>(af, wb.ra[i], wb.rb[i], s);
#pragma unroll
        for (int t = 0; t < NT; t++) mvm_mma(c[i][t], af, h ? b[t].z : b[t].x, h ? b[t].w : b[t].y);
      }
      if (s % D::SPS != D::SPS - 1) continue;
#pragma unroll
      for (int t = 0; t < NT; t++) {
        [[maybe_unused]] float sa = 0.0f, sb = 0.0f;
        if constexpr (D::HAS_MIN) sa = sx[(8 * t + 2 * tig) * 8 + k], sb = sx[(8 * t + 2 * tig + 1) * 8 + k];
#pragma unroll
        for (int i = 0; i < RG; i++) {
          const float d0 = slot(i, 0, D::HAS_MIN ? 2 * k : k), d8 = slot(i, 1, D::HAS_MIN ? 2 * k : k);
          float(&o)[4] = acc[i][t];
          o[0] = fmaf(d0, c[i][t][0], o[0]), o[1] = fmaf(d0, c[i][t][1], o[1]);
          o[2] = fmaf(d8, c[i][t][2], o[2]), o[3] = fmaf(d8, c[i][t][3], o[3]);
          if constexpr (D::HAS_MIN) {
            const float m0 = slot(i, 0, 2 * k + 1), m8 = slot(i, 1, 2 * k + 1);
            o[0] = fmaf(-m0, sa, o[0]), o[1] = fmaf(-m0, sb, o[1]);
            o[2] = fmaf(-m8, sa, o[2]), o[3] = fmaf(-m8, sb, o[3]);
          }
        }
      }
    }
  }
}

/* the float4 at p (shared) summed over the cluster's C ranks in rank order, the loads of 4 ranks
 * issued together */
__device__ __forceinline__ float4 mvw_rank_sum(const cooperative_groups::cluster_group &cl, const float *p, int C) {
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int c0 = 0; c0 < 8; c0 += 4) {
    float4 q[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (c0 + j < C) q[j] = *(const float4 *)cl.map_shared_rank(p, c0 + j);
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (c0 + j < C) s.x += q[j].x, s.y += q[j].y, s.z += q[j].z, s.w += q[j].w;
  }
  return s;
}

/* The tile's outputs from the C ranks' red ([NR][W][RG][16] floats, the first n x rows used):
 * rank `rank` takes the rank-th of C contiguous ranges of 4-output groups (4 consecutive
 * rows m of one group: float4 loads, consecutive threads on consecutive groups), loads the C
 * ranks' values of a group together, then adds them in rank order; swiglu: the up rows sit
 * p.up_off floats on, SiLU(gate) * up as kernels/swiglu.cu. Whole block, after the cluster barrier. */
template <int RG, int W>
__device__ __forceinline__ void mvw_reduce(const mvm_args_t &a, const mvw_pos<RG, W> &p,
                                           const cooperative_groups::cluster_group &cl, const float *red, int n, int C,
                                           int rank) {
  const int total4 = n * W * RG * 4, per = (total4 + C - 1) / C, v1 = min(total4, (rank + 1) * per);
  float *out = a.out[p.sg];
  for (int v = rank * per + (int)threadIdx.x; v < v1; v += W * 32) {
    const int e = 4 * v, m = e & 15, i = (e >> 4) % RG, w = (e / (16 * RG)) % W, r = e / (16 * RG * W);
    const int64_t o0 = p.feature(a, w, i, m);
    if (o0 < 0) continue;
    const float4 s = mvw_rank_sum(cl, red + e, C), t = a.swiglu ? mvw_rank_sum(cl, red + e + p.up_off, C) : s;
    const float sv[4] = {s.x, s.y, s.z, s.w}, uv[4] = {t.x, t.y, t.z, t.w};
    float *orow = out + (size_t)r * p.n_out;
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (o0 + j < p.n_out) orow[o0 + j] = a.swiglu ? sv[j] / (1.0f + expf(-sv[j])) * uv[j] : sv[j]; /* kernels/swiglu.cu */
  }
}

/* x loads per warp issued together in the fill (chunk, row) pairs */
#define MVW_XPF 4

/* W warps; a: split 1 per segment (mvw_plan); ntiles tiles; the cluster's C ranks take slices of L chunks */
template <class D, int RG, int NST, int NT, int W>
__global__ void __launch_bounds__(W * 32, 1)
    mvw_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, unsigned ntiles, int n, int L) {
  extern __shared__ __align__(16) uint8_t mvw_dyn[];
  __shared__ float4 scs[W][16][4]; /* per warp: the group's scale slots */
  using X = mvw_x<D, NT>;
  constexpr int STB = RG * 16 * mvr_t<D>::ROWB, NR = X::NR, LW = X::LW;
  namespace cg = cooperative_groups;
  const cg::cluster_group cl = cg::this_cluster();
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, tig = lane & 3;
  const int C = (int)cl.num_blocks(), rank = (int)cl.block_rank();
  const unsigned ncl = gridDim.x / (unsigned)C, cid = blockIdx.x / (unsigned)C;
  const int64_t nkb = cols >> 8, k0 = (int64_t)rank * L, k1 = k0 + L < nkb ? k0 + L : nkb;
  uint8_t *ring = mvw_dyn + (size_t)wi * NST * STB;
  uint4 *xb = (uint4 *)(mvw_dyn + (size_t)W * NST * STB);
  float *sxs = (float *)(xb + (size_t)L * X::XW);
  float *red = sxs + (size_t)L * X::NS; /* [NR][W][RG][16] */

  using P = mvw_pos<RG, W>;
  mvr_issue<D, RG, P> is;
  is.k0 = k0, is.tstep = ncl;
  is.at(a, wi, lane, cid, ntiles);
#pragma unroll
  for (int s = 0; s < NST - 1; s++) { /* weights only before the wait */
    if (is.ok) is.issue(ring + s * STB, lane), is.next(a, wi, lane, k1, ntiles);
    kc_cp_commit();
  }
  kc_pdl_wait(), kc_pdl_trigger();
  /* x of the slice: (local chunk j, row r) pairs q = j NR + r over the warps, MVW_XPF at a time */
  for (int q0 = wi; q0 < L * NR; q0 += MVW_XPF * W) {
    float4 v[MVW_XPF][2];
#pragma unroll
    for (int u = 0; u < MVW_XPF; u++) {
      const int q = q0 + u * W, j = q / NR, r = q % NR;
      const bool in = q < L * NR && k0 + j < k1 && r < n; /* rows n..NR-1 stay zero */
      const float *xc = x + (size_t)r * cols + (k0 + j) * 256;
      v[u][0] = in ? __ldg((const float4 *)(xc + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
      v[u][1] = in ? __ldg((const float4 *)(xc + 128 + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < MVW_XPF; u++) {
      const int q = q0 + u * W, j = q / NR, r = q % NR;
      if (q >= L * NR) break; /* warp-uniform */
      uint4(*bs)[LW] = (uint4(*)[LW])(xb + (size_t)j * X::XW);
      float *sx = sxs + (size_t)j * X::NS + 8 * r;
      mvr_fill_p1<D, LW>(bs, sx, v[u][0], lane, r);
      mvr_fill_p1<D, LW>(bs, sx, v[u][1], lane + 32, r);
    }
  }
  __syncthreads();

  unsigned tile = cid;
  P p(a, wi, lane, tile);
  int64_t kb = k0;
  float acc[RG][NT][4] = {};
  int slot = 0;
  bool waited = true; /* red free: no earlier tile's arrive to wait on */
  while (tile < ntiles) {
    if (is.ok) is.issue(ring + (slot ? slot - 1 : NST - 1) * STB, lane), is.next(a, wi, lane, k1, ntiles);
    kc_cp_commit();
    kc_cp_wait<NST - 1>();
    __syncwarp();
    mvm_wbuf<D, RG> wb;
    mvr_lds<RG>(wb, ring + slot * STB, p, kb, lane);
    mvw_chunk<D, RG, NT>(acc, wb, xb + (kb - k0) * X::XW, sxs + (kb - k0) * X::NS, scs[wi], lane);
    __syncwarp();
    slot = slot + 1 == NST ? 0 : slot + 1;
    if (++kb < k1) continue;
    /* the tile's slice done: sums through the cluster */
    if (!waited) mvw_cluster_wait(); /* the previous tile's red read by every rank */
    const int g = lane >> 2;
#pragma unroll
    for (int i = 0; i < RG; i++)
#pragma unroll
      for (int t = 0; t < NT; t++) {
        float *rr = red + (((size_t)(8 * t + 2 * tig) * W + wi) * RG + i) * 16;
        constexpr size_t XR = (size_t)W * RG * 16; /* one x row */
        rr[g] = acc[i][t][0], rr[XR + g] = acc[i][t][1];
        rr[g + 8] = acc[i][t][2], rr[XR + g + 8] = acc[i][t][3];
        acc[i][t][0] = acc[i][t][1] = acc[i][t][2] = acc[i][t][3] = 0.0f;
      }
    mvw_cluster_arrive(), mvw_cluster_wait();
    mvw_reduce<RG, W>(a, p, cl, red, n, C, rank);
    mvw_cluster_arrive(), waited = false;
    tile += ncl;
    if (tile < ntiles) p = P(a, wi, lane, tile), kb = k0;
  }
  if (!waited) mvw_cluster_wait(); /* no rank reads this block's red any more */
}

/* Fills a.split (1) and a.blk_end for tiles of fpt output features; returns the tile count, -1
 * if it does not fit a grid. */
static inline int64_t mvw_plan(mvm_args_t &a, int64_t fpt) {
  int64_t tiles = 0;
  for (int s = 0; s < a.n_seg; s++) {
    a.split[s] = 1;
    tiles += (a.n_out[s] + fpt - 1) / fpt;
    if (tiles * 8 > 0x7fffffff) return -1;
    a.blk_end[s] = (unsigned)tiles;
  }
  return tiles;
}

/* Per instantiation and device: SMs, opt-in and static shared memory (mvr_dev_ready), and the
 * active clusters per (cluster size, dynamic size) (cudaOccupancyMaxActiveClusters): one launch
 * looks up to 8 cluster sizes up per column count, and a model has 2-4 column counts, so
 * MVW_OCC_SLOTS holds them all (past it the query runs on every launch). */
#define MVW_OCC_SLOTS 64
struct mvw_dev {
  int nsm, optin, stat, ready;
  size_t occ_smem[MVW_OCC_SLOTS];
  int occ_c[MVW_OCC_SLOTS], occ_n[MVW_OCC_SLOTS];
};

template <class D, int RG, int NST, int NT, int W>
static int mvw_clusters(mvw_dev &d, int C, size_t smem) {
  int k = 0;
  while (k < MVW_OCC_SLOTS && d.occ_smem[k] && !(d.occ_smem[k] == smem && d.occ_c[k] == C)) k++;
  if (k < MVW_OCC_SLOTS && d.occ_smem[k]) return d.occ_n[k];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(C * d.nsm)), cfg.blockDim = dim3(W * 32), cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.attrs = at, cfg.numAttrs = 1;
  int ncl = 0;
  if (cudaOccupancyMaxActiveClusters(&ncl, mvw_kernel<D, RG, NST, NT, W>, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    ncl = 0;
  }
  if (k < MVW_OCC_SLOTS) d.occ_smem[k] = smem, d.occ_c[k] = C, d.occ_n[k] = ncl;
  return ncl;
}

static unsigned long long g_mvw_launches; /* kc_mvm_wide_launches */

/* Launches the wide kernel for n rows if its shared memory fits some cluster size C <= 8: the C
 * minimizing rounds x L (rounds = tiles / active clusters, rounded up; L = the slice, a block's
 * time per tile), the smaller C on ties. Returns 1 if launched (rc = its error), else 0. */
template <class D, int RG, int NST, int NT, int W>
static int mvw_try(cudaStream_t st, mvm_args_t a, int64_t cols, const float *x, int n, int &rc) {
  static mvw_dev devs[16];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return 0;
  mvw_dev &d = devs[dev];
  if (!mvr_dev_ready(d, mvw_kernel<D, RG, NST, NT, W>, dev)) return 0;
  /* features per tile: W warps x RG groups of 16 rows (swiglu: half of them gate rows) */
  const int64_t nkb = cols >> 8, tiles = mvw_plan(a, (int64_t)W * RG * (a.swiglu ? 8 : 16));
  if (tiles <= 0) return 0;
  int best_c = 0, best_l = 0, best_ncl = 0;
  int64_t best = 0;
  for (int C = 1; C <= 8 && C <= nkb; C++) {
    const int64_t L = (nkb + C - 1) / C;
    if ((nkb + L - 1) / L != C) continue; /* every rank a non-empty slice */
    const size_t smem = mvw_smem<D, RG, NST, NT, W>(L);
    if (smem + (size_t)d.stat > (size_t)d.optin) continue;
    const int ncl = mvw_clusters<D, RG, NST, NT, W>(d, C, smem);
    if (ncl < 1) continue;
    const int64_t cost = (tiles + ncl - 1) / ncl * L;
    if (!best_c || cost < best) best = cost, best_c = C, best_l = (int)L, best_ncl = ncl;
  }
  if (!best_c) return 0;
  /* 17..32 rows in slices of 6+ chunks with fewer than two tiles per cluster: each block fills 6+
   * chunks x n rows of x (192 KB at 32 rows) for about one tile, nothing to amortize the fill
   * over; mmq is faster there (H200, bench_matvec, Q4_K 4096x12288 at 32 rows, 16 tiles on 15
   * clusters of 8: 42.0 us against 56.7; at 16 rows 31.4 against 30.8: kernels/README.md "The
   * wide product") */
  if (n > 16 && best_l >= 6 && tiles < 2 * (int64_t)best_ncl) return 0;
  const int64_t ncl = tiles < best_ncl ? tiles : best_ncl;
  const unsigned grid = (unsigned)(ncl * best_c);
  const cudaError_t e = kc_launch_cluster(mvw_kernel<D, RG, NST, NT, W>, grid, W * 32,
                                          mvw_smem<D, RG, NST, NT, W>(best_l), st, (unsigned)best_c, a, x, cols,
                                          (unsigned)tiles, n, best_l);
  rc = (int)(e != cudaSuccess ? e : cudaGetLastError());
  __atomic_fetch_add(&g_mvw_launches, 1ull, __ATOMIC_RELAXED);
  return 1;
}

/* The block shape of the wide kernel: Q4_K 8 warps x 2 row groups, Q6_K 16 warps x 1 (measured,
 * H200, bench_matvec 16 / 32 rows, us at 8 / 16 warps: Q4_K 12288x4096 31.2 / 30.3, 42.4 / 48.2,
 * head 151936x4096 193.1 / 203.1, 318.1 / 388.9; Q6_K 12288x4096 39.2 / 33.4, 52.9 / 49.5, head
 * 271.6 / 229.0, 416.3 / 389.6: kernels/README.md "The wide product"). GANTRY_MVW_W (8 or 16, a
 * measurement knob read once) sets both types; GANTRY_MVW=0 (read once): not taken (mmq runs).
 * n (9..KC_MVW_MAX_ROWS) rows on the wide kernel: 1 if launched (rc its error), else 0. */
template <class D>
static int mvw_go(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n, int &rc) {
  static int wenv = -1, on = -1;
  if (wenv < 0) wenv = (int)kc_env_int("GANTRY_MVW_W", 8, 16, 0);
  if (on < 0) on = (int)kc_env_int("GANTRY_MVW", 0, 1, 1);
  if (!on || !mvr_on() || n <= KC_MVR_MAX_ROWS || n > KC_MVW_MAX_ROWS) return 0;
  const int w = wenv == 8 || wenv == 16 ? wenv : std::is_same<D, mvm_q6k>::value ? 16 : 8;
  if (n <= 16) return w == 16 ? mvw_try<D, 1, 2, 2, 16>(st, a, cols, x, n, rc) : mvw_try<D, 2, 2, 2, 8>(st, a, cols, x, n, rc);
  return w == 16 ? mvw_try<D, 1, 2, 4, 16>(st, a, cols, x, n, rc) : mvw_try<D, 2, 2, 4, 8>(st, a, cols, x, n, rc);
}
#endif
