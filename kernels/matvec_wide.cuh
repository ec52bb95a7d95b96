/* kernels/matvec_wide.cuh — Q4_K / Q6_K products of 9..KC_MVW_MAX_ROWS rows of x in one bf16
 * part (bf16 activations: mmq's x and Σx of bf16(x)) on the weight ring, K split over a cluster
 * (included by kernels/matvec_mma.cu after matvec_ring.cuh; device-side, not a public header).
 *
 * The per-chunk arithmetic of the one-part ring kernel (mvr_kernel at NR <= 8) widened to NT
 * n-tiles of 8 x rows (NR = 8 NT = 16 or 32): each A fragment (16 weight rows x 16 columns,
 * decoded once) feeds NT mma m16n8k16, and each lane's B fragments of a k-step pair (one uint4
 * per n-tile) serve the warp's RG groups. x of 32 rows takes 16 KB per chunk, more than a block
 * can hold for all of K, so:
 *  - a tile = MVM_WARPS warps x RG groups of 16 weight rows (swiglu: RG / 2 gate + up pairs) x
 *    all of K, split S = 1 inside the block (mvm_pos: part 0, row warp = warp);
 *  - a cluster of C blocks computes a tile together: rank c over chunks [c L, min(c L + L, nkb)),
 *    its slice; x of the slice (NR rows, zero past n; Q4_K also Σx per sub-block) is built once
 *    per block in shared memory; the grid is persistent: cluster q takes tiles q, q + ncl, ...;
 *  - each warp streams its groups' chunks of the slice through its ring (mvr_issue with k0, the
 *    slice end and the cluster step), NST - 1 chunks in flight, across tiles too;
 *  - per tile each warp's sums go to red ([NR][MVM_WARPS][RG][16] floats, shared); a cluster
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
template <int RG, int NT> __host__ __device__ constexpr size_t mvw_red_bytes() {
  return (size_t)8 * NT * MVM_WARPS * RG * 16 * sizeof(float);
}
/* dynamic shared memory of a launch with slices of L chunks: the rings, x, red */
template <class D, int RG, int NST, int NT> __host__ __device__ constexpr size_t mvw_smem(int64_t L) {
  return mvr_ring_bytes<D, RG, NST>() + (size_t)L * mvw_x<D, NT>::XB + mvw_red_bytes<RG, NT>();
}

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
  const int tig = lane & 3;
  float s0[RG][16], s8[RG][16];
#pragma unroll
  for (int i = 0; i < RG; i++) mvm_group_slots<D>(wb.sr[i], scs, lane, s0[i], s8[i]);
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
        const uint32_t qa = D::qword(wb.ra[i], s), qb = D::qword(wb.rb[i], s);
        const uint32_t af[4] = {mvm_qpair(qa, 0x4140u, D::BIAS), mvm_qpair(qb, 0x4140u, D::BIAS),
                                mvm_qpair(qa, 0x4342u, D::BIAS), mvm_qpair(qb, 0x4342u, D::BIAS)};
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
          const float d0 = s0[i][D::HAS_MIN ? 2 * k : k], d8 = s8[i][D::HAS_MIN ? 2 * k : k];
          float(&o)[4] = acc[i][t];
          o[0] = fmaf(d0, c[i][t][0], o[0]), o[1] = fmaf(d0, c[i][t][1], o[1]);
          o[2] = fmaf(d8, c[i][t][2], o[2]), o[3] = fmaf(d8, c[i][t][3], o[3]);
          if constexpr (D::HAS_MIN) {
            o[0] = fmaf(-s0[i][2 * k + 1], sa, o[0]), o[1] = fmaf(-s0[i][2 * k + 1], sb, o[1]);
            o[2] = fmaf(-s8[i][2 * k + 1], sa, o[2]), o[3] = fmaf(-s8[i][2 * k + 1], sb, o[3]);
          }
        }
      }
    }
  }
}

/* The tile's outputs from the C ranks' red ([NR][MVM_WARPS][RG][16] floats, the first n x rows
 * used): rank `rank` takes the rank-th of C contiguous ranges of 4-output groups (4 consecutive
 * rows m of one group: float4 loads, consecutive threads on consecutive groups), loads the C
 * ranks' values of a group together, then adds them in rank order; swiglu: the up group i + 1 sits
 * 16 floats on, SiLU(gate) * up as kernels/swiglu.cu. Whole block, after the cluster barrier. */
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

template <int RG>
__device__ __forceinline__ void mvw_reduce(const mvm_args_t &a, const mvm_pos<RG> &p,
                                           const cooperative_groups::cluster_group &cl, const float *red, int n, int C,
                                           int rank) {
  const int total4 = n * MVM_WARPS * RG * 4, per = (total4 + C - 1) / C, v1 = min(total4, (rank + 1) * per);
  float *out = a.out[p.sg];
  for (int v = rank * per + (int)threadIdx.x; v < v1; v += MVM_WARPS * 32) {
    const int e = 4 * v, m = e & 15, i = (e >> 4) % RG, w = (e / (16 * RG)) % MVM_WARPS, r = e / (16 * RG * MVM_WARPS);
    if (a.swiglu && (i & 1)) continue;
    const float4 s = mvw_rank_sum(cl, red + e, C), t = a.swiglu ? mvw_rank_sum(cl, red + e + 16, C) : s;
    const float sv[4] = {s.x, s.y, s.z, s.w}, uv[4] = {t.x, t.y, t.z, t.w};
    const int64_t o0 = (p.grp0 + w) * p.fpw + 16 * (a.swiglu ? i >> 1 : i) + m;
    float *orow = out + (size_t)r * p.n_out;
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (o0 + j < p.n_out) orow[o0 + j] = a.swiglu ? sv[j] / (1.0f + expf(-sv[j])) * uv[j] : sv[j]; /* kernels/swiglu.cu */
  }
}

/* x loads per warp issued together in the fill (chunk, row) pairs */
#define MVW_XPF 4

/* a: split 1 per segment (mvw_plan); ntiles tiles; the cluster's C ranks take slices of L chunks */
template <class D, int RG, int NST, int NT>
__global__ void __launch_bounds__(MVM_WARPS * 32, 1)
    mvw_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, unsigned ntiles, int n, int L) {
  extern __shared__ __align__(16) uint8_t mvw_dyn[];
  __shared__ float4 scs[MVM_WARPS][16][4]; /* per warp: the group's scale slots */
  using X = mvw_x<D, NT>;
  constexpr int STB = RG * 16 * mvr_t<D>::ROWB, NR = X::NR, LW = X::LW;
  namespace cg = cooperative_groups;
  const cg::cluster_group cl = cg::this_cluster();
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, tig = lane & 3;
  const int C = (int)cl.num_blocks(), rank = (int)cl.block_rank();
  const unsigned ncl = gridDim.x / (unsigned)C, cid = blockIdx.x / (unsigned)C;
  const int64_t nkb = cols >> 8, k0 = (int64_t)rank * L, k1 = k0 + L < nkb ? k0 + L : nkb;
  uint8_t *ring = mvw_dyn + (size_t)wi * NST * STB;
  uint4 *xb = (uint4 *)(mvw_dyn + mvr_ring_bytes<D, RG, NST>());
  float *sxs = (float *)(xb + (size_t)L * X::XW);
  float *red = sxs + (size_t)L * X::NS; /* [NR][MVM_WARPS][RG][16] */

  mvr_issue<D, RG> is;
  is.k0 = k0, is.tstep = ncl;
  is.at(a, wi, lane, cid, ntiles);
#pragma unroll
  for (int s = 0; s < NST - 1; s++) { /* weights only before the wait */
    if (is.ok) is.issue(ring + s * STB, lane), is.next(a, wi, lane, k1, ntiles);
    kc_cp_commit();
  }
  kc_pdl_wait(), kc_pdl_trigger();
  /* x of the slice: (local chunk j, row r) pairs q = j NR + r over the warps, MVW_XPF at a time */
  for (int q0 = wi; q0 < L * NR; q0 += MVW_XPF * MVM_WARPS) {
    float4 v[MVW_XPF][2];
#pragma unroll
    for (int u = 0; u < MVW_XPF; u++) {
      const int q = q0 + u * MVM_WARPS, j = q / NR, r = q % NR;
      const bool in = q < L * NR && k0 + j < k1 && r < n; /* rows n..NR-1 stay zero */
      const float *xc = x + (size_t)r * cols + (k0 + j) * 256;
      v[u][0] = in ? __ldg((const float4 *)(xc + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
      v[u][1] = in ? __ldg((const float4 *)(xc + 128 + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < MVW_XPF; u++) {
      const int q = q0 + u * MVM_WARPS, j = q / NR, r = q % NR;
      if (q >= L * NR) break; /* warp-uniform */
      uint4(*bs)[LW] = (uint4(*)[LW])(xb + (size_t)j * X::XW);
      float *sx = sxs + (size_t)j * X::NS + 8 * r;
      mvr_fill_p1<D, LW>(bs, sx, v[u][0], lane, r);
      mvr_fill_p1<D, LW>(bs, sx, v[u][1], lane + 32, r);
    }
  }
  __syncthreads();

  unsigned tile = cid;
  mvm_pos<RG> p(a, wi, lane, tile);
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
        float *rr = red + (((size_t)(8 * t + 2 * tig) * MVM_WARPS + wi) * RG + i) * 16;
        constexpr size_t XR = (size_t)MVM_WARPS * RG * 16; /* one x row */
        rr[g] = acc[i][t][0], rr[XR + g] = acc[i][t][1];
        rr[g + 8] = acc[i][t][2], rr[XR + g + 8] = acc[i][t][3];
        acc[i][t][0] = acc[i][t][1] = acc[i][t][2] = acc[i][t][3] = 0.0f;
      }
    mvw_cluster_arrive(), mvw_cluster_wait();
    mvw_reduce<RG>(a, p, cl, red, n, C, rank);
    mvw_cluster_arrive(), waited = false;
    tile += ncl;
    if (tile < ntiles) p = mvm_pos<RG>(a, wi, lane, tile), kb = k0;
  }
  if (!waited) mvw_cluster_wait(); /* no rank reads this block's red any more */
}

/* Fills a.split (1) and a.blk_end for tiles of MVM_WARPS warps of fpw output features; returns
 * the tile count, -1 if it does not fit a grid. */
static inline int64_t mvw_plan(mvm_args_t &a, int fpw) {
  int64_t tiles = 0;
  for (int s = 0; s < a.n_seg; s++) {
    a.split[s] = 1;
    tiles += (a.n_out[s] + (int64_t)MVM_WARPS * fpw - 1) / ((int64_t)MVM_WARPS * fpw);
    if (tiles * 8 > 0x7fffffff) return -1;
    a.blk_end[s] = (unsigned)tiles;
  }
  return tiles;
}

/* Per instantiation and device: SMs, opt-in and static shared memory, and the active clusters
 * per cluster size (cudaOccupancyMaxActiveClusters) for a few dynamic sizes. */
struct mvw_dev {
  int nsm, optin, stat, ready;
  size_t occ_smem[16];
  int occ_c[16], occ_n[16];
};

template <class D, int RG, int NST, int NT>
static int mvw_clusters(mvw_dev &d, int C, size_t smem) {
  int k = 0;
  while (k < 16 && d.occ_smem[k] && !(d.occ_smem[k] == smem && d.occ_c[k] == C)) k++;
  if (k < 16 && d.occ_smem[k]) return d.occ_n[k];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(C * d.nsm)), cfg.blockDim = dim3(MVM_WARPS * 32), cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.attrs = at, cfg.numAttrs = 1;
  int ncl = 0;
  if (cudaOccupancyMaxActiveClusters(&ncl, mvw_kernel<D, RG, NST, NT>, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    ncl = 0;
  }
  if (k < 16) d.occ_smem[k] = smem, d.occ_c[k] = C, d.occ_n[k] = ncl;
  return ncl;
}

static unsigned long long g_mvw_launches; /* kc_mvm_wide_launches */

/* Launches the wide kernel for n rows if its shared memory fits some cluster size C <= 8: the C
 * minimizing rounds x L (rounds = tiles / active clusters, rounded up; L = the slice, a block's
 * time per tile), the smaller C on ties. Returns 1 if launched (rc = its error), else 0. */
template <class D, int RG, int NST, int NT>
static int mvw_try(cudaStream_t st, mvm_args_t a, int64_t cols, const float *x, int n, int &rc) {
  static mvw_dev devs[16];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return 0;
  mvw_dev &d = devs[dev];
  auto kern = mvw_kernel<D, RG, NST, NT>;
  if (!d.ready) {
    cudaFuncAttributes fa;
    d.ready = cudaDeviceGetAttribute(&d.nsm, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                      cudaDeviceGetAttribute(&d.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                      cudaFuncGetAttributes(&fa, kern) == cudaSuccess &&
                      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           d.optin - (int)fa.sharedSizeBytes) == cudaSuccess
                  ? 1
                  : -1;
    d.stat = (int)fa.sharedSizeBytes;
    if (d.ready < 0) (void)cudaGetLastError();
  }
  if (d.ready < 0) return 0;
  const int64_t nkb = cols >> 8, tiles = mvw_plan(a, a.swiglu ? 8 * RG : 16 * RG);
  if (tiles <= 0) return 0;
  int best_c = 0, best_l = 0, best_ncl = 0;
  int64_t best = 0;
  for (int C = 1; C <= 8 && C <= nkb; C++) {
    const int64_t L = (nkb + C - 1) / C;
    if ((nkb + L - 1) / L != C) continue; /* every rank a non-empty slice */
    const size_t smem = mvw_smem<D, RG, NST, NT>(L);
    if (smem + (size_t)d.stat > (size_t)d.optin) continue;
    const int ncl = mvw_clusters<D, RG, NST, NT>(d, C, smem);
    if (ncl < 1) continue;
    const int64_t cost = (tiles + ncl - 1) / ncl * L;
    if (!best_c || cost < best) best = cost, best_c = C, best_l = (int)L, best_ncl = ncl;
  }
  if (!best_c) return 0;
  const int64_t ncl = tiles < best_ncl ? tiles : best_ncl;
  const unsigned grid = (unsigned)(ncl * best_c);
  const cudaError_t e = kc_launch_cluster(mvw_kernel<D, RG, NST, NT>, grid, MVM_WARPS * 32, mvw_smem<D, RG, NST, NT>(best_l), st,
                                          (unsigned)best_c, a, x, cols, (unsigned)tiles, n, best_l);
  rc = (int)(e != cudaSuccess ? e : cudaGetLastError());
  __atomic_fetch_add(&g_mvw_launches, 1ull, __ATOMIC_RELAXED);
  return 1;
}

/* The ring depth of the wide kernel: GANTRY_MVW_NST (2..3, a measurement knob read once), else 2.
 * GANTRY_MVW=0 (read once): not taken (mmq runs; measurements against it). */
#define MVW_NST 2
/* n (9..KC_MVW_MAX_ROWS) rows on the wide kernel: 1 if launched (rc its error), else 0 */
template <class D>
static int mvw_go(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n, int &rc) {
  static int nst = 0, on = -1;
  if (!nst) nst = (int)kc_env_int("GANTRY_MVW_NST", 2, 3, MVW_NST);
  if (on < 0) on = (int)kc_env_int("GANTRY_MVW", 0, 1, 1);
  if (!on || !mvr_on() || n <= KC_MVR_MAX_ROWS || n > KC_MVW_MAX_ROWS) return 0;
  if (n <= 16)
    return nst == 3 ? mvw_try<D, 2, 3, 2>(st, a, cols, x, n, rc) : mvw_try<D, 2, 2, 2>(st, a, cols, x, n, rc);
  return nst == 3 ? mvw_try<D, 2, 3, 4>(st, a, cols, x, n, rc) : mvw_try<D, 2, 2, 4>(st, a, cols, x, n, rc);
}
#endif
