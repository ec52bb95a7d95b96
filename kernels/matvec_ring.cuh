/* kernels/matvec_ring.cuh — the batch-1 Q4_K product with the weights streamed through a cp.async
 * ring per warp (included by kernels/matvec_mma.cu after the integer pieces; device-side, not a
 * public header).
 *
 * Same products as mvi_kernel, bit for bit: the same work split (mvm_plan / mvm_split: a "tile"
 * is what one mvi_kernel block computes: gpb row groups x S column parts), the same digits of x,
 * the same per-chunk arithmetic (mvi_chunk) in the same chunk order, the same reduction
 * (mvm_finish). What differs is where the bytes come from and when:
 *  - the grid is persistent (at most the blocks that fit at once); block b computes tiles b, b +
 *    grid, ... in order;
 *  - x is turned into digits once per block, for all nkb chunks (xb [nkb][4][12] uint4: lanes 0..11
 *    of mvi's B slots, the others are zero; Σx [nkb][8]; scale [nkb]), one warp per chunk (its max
 *    by one redux.sync, no barrier between the phases), one barrier;
 *  - each warp streams its chunks (for each tile of the block, chunks part, part + S, ... < nkb)
 *    through a ring of NST stages in shared memory: stage = the 16 RG rows' 144-byte superblocks
 *    of one chunk, a row every MVR_ROWB = 160 bytes (the lanes' 8-byte quant loads and 16-byte
 *    header loads are then free of bank conflicts), copied by the warp's lanes in 16-byte cp.async
 *    pieces (piece p: row p / 9, bytes 16 (p % 9) of it, at 16 (p + p / 9)). While a warp computes
 *    chunk c, chunks c + 1 .. c + NST - 1 are in flight; no block barrier inside a tile, one per
 *    tile (mvm_finish, its shared sums double-buffered by tile parity).
 * PDL: the first NST - 1 stages are issued before kc_pdl_wait (weights only), x after. */
#ifndef GANTRY_KERNELS_MATVEC_RING_CUH
#define GANTRY_KERNELS_MATVEC_RING_CUH

#define MVR_ROWB 160 /* bytes per staged row (144 used) */

/* The warp's next chunk to copy: tile, chunk kb, the tile's split S and the lane's piece sources
 * (without the chunk offset). ok = 0 past the block's last tile. */
template <int RG> struct mvr_issue {
  static constexpr int PIECES = RG * 16 * 9, NPL = (PIECES + 31) / 32;
  unsigned tile;
  int64_t kb;
  int S;
  bool ok;
  const uint8_t *src[NPL];
  __device__ void at(const mvm_args_t &a, int wi, int lane, unsigned t, unsigned ntiles) {
    tile = t, ok = t < ntiles;
    if (!ok) return;
    const mvm_pos<RG> p(a, wi, lane, t);
    S = p.S, kb = p.part;
#pragma unroll
    for (int u = 0; u < NPL; u++) {
      const int q = lane + 32 * u, r = q / 9;
      if (q < PIECES) src[u] = p.row(a, r >> 4, r & 15) + 16 * (q - 9 * r);
    }
  }
  __device__ void issue(uint8_t *stage, int lane) const {
#pragma unroll
    for (int u = 0; u < NPL; u++) {
      const int q = lane + 32 * u;
      if (q < PIECES) kc_cp16(stage + 16 * (q + q / 9), src[u] + kb * mvm_q4k::BB);
    }
  }
  __device__ void next(const mvm_args_t &a, int wi, int lane, int64_t nkb, unsigned ntiles) {
    kb += S;
    if (kb >= nkb) at(a, wi, lane, tile + gridDim.x, ntiles);
  }
};

/* The lane's weight words of a staged chunk (mvm_wbuf::load's registers, from shared memory) */
template <int RG> __device__ __forceinline__ void mvr_lds(mvm_wbuf<mvm_q4k, RG> &wb, const uint8_t *st, int lane) {
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int i = 0; i < RG; i++) {
    const uint8_t *ra = st + (16 * i + g) * MVR_ROWB + 16 + 8 * tig, *rb = ra + 8 * MVR_ROWB;
#pragma unroll
    for (int j = 0; j < 4; j++) wb.ra[i].q[j] = *(const uint2 *)(ra + 32 * j), wb.rb[i].q[j] = *(const uint2 *)(rb + 32 * j);
    wb.sr[i].h = *(const uint4 *)(st + (16 * i + (lane >> 1)) * MVR_ROWB);
  }
}

/* dynamic shared memory of a launch: the rings, then x's digits, Σx and scales */
template <int RG, int NST> __host__ __device__ constexpr size_t mvr_ring_bytes() {
  return (size_t)MVM_WARPS * NST * RG * 16 * MVR_ROWB;
}
static inline size_t mvr_smem(size_t ring, int64_t nkb) { return ring + (size_t)nkb * (48 * 16 + 8 * 4 + 4); }

template <int RG, int NST>
__global__ void __launch_bounds__(MVM_WARPS * 32, 2)
    mvr_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, unsigned ntiles) {
  extern __shared__ __align__(16) uint8_t mvr_dyn[];
  __shared__ float4 scd[MVM_WARPS][16][2];        /* per warp: the group's scale slots */
  __shared__ float mn[MVM_WARPS][16];             /* per warp: the group's min terms */
  __shared__ float red[2][MVM_WARPS][RG][16][4];  /* mvm_finish's sums, by tile parity */
  constexpr int STB = RG * 16 * MVR_ROWB;
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int64_t nkb = cols >> 8;
  uint8_t *ring = mvr_dyn + (size_t)wi * NST * STB;
  uint4 *xb = (uint4 *)(mvr_dyn + mvr_ring_bytes<RG, NST>());
  float *sxs = (float *)(xb + nkb * 48), *fsc = sxs + nkb * 8;

  mvr_issue<RG> is;
  is.at(a, wi, lane, blockIdx.x, ntiles);
#pragma unroll
  for (int s = 0; s < NST - 1; s++) { /* weights only before the wait */
    if (is.ok) is.issue(ring + s * STB, lane), is.next(a, wi, lane, nkb, ntiles);
    kc_cp_commit();
  }
  kc_pdl_wait(), kc_pdl_trigger();
  for (int64_t c = wi; c < nkb; c += MVM_WARPS) { /* x's digits: one warp per chunk */
    const float *xc = x + c * 256;
    const float4 v0 = __ldg((const float4 *)(xc + 4 * lane)), v1 = __ldg((const float4 *)(xc + 128 + 4 * lane));
    const uint32_t mb = __reduce_max_sync(KC_FULL_MASK, max(mvi_absbits(v0), mvi_absbits(v1)));
    uint4(*bs)[12] = (uint4(*)[12])(xb + c * 48);
    mvi_conv<12>(bs, sxs + c * 8, fsc + c, v0, lane, mb);
    mvi_conv<12>(bs, sxs + c * 8, fsc + c, v1, lane + 32, mb);
  }
  __syncthreads();

  unsigned tile = blockIdx.x;
  mvm_pos<RG> p(a, wi, lane, tile);
  int64_t kb = p.part;
  float acc[RG][2];
#pragma unroll
  for (int i = 0; i < RG; i++) acc[i][0] = acc[i][1] = 0.0f;
  int slot = 0, par = 0;
  while (tile < ntiles) {
    /* chunk c + NST - 1 into the slot chunk c - 1 left (read by every lane: the __syncwarp below) */
    if (is.ok) is.issue(ring + (slot ? slot - 1 : NST - 1) * STB, lane), is.next(a, wi, lane, nkb, ntiles);
    kc_cp_commit();
    kc_cp_wait<NST - 1>(); /* chunk c's copies of this lane */
    __syncwarp();          /* ... and of the other lanes */
    mvm_wbuf<mvm_q4k, RG> wb;
    mvr_lds<RG>(wb, ring + slot * STB, lane);
    const uint4 *xk = xb + kb * 48;
    mvi_chunk<RG>(acc, wb, [&](int j) { return lane < 12 ? xk[12 * j + lane] : make_uint4(0u, 0u, 0u, 0u); },
                  sxs + kb * 8, fsc + kb, scd[wi], mn[wi], lane);
    __syncwarp();
    slot = slot + 1 == NST ? 0 : slot + 1;
    kb += p.S;
    if (kb >= nkb) { /* the tile's last chunk of every warp: its sums (one block barrier) */
      mvm_finish<RG>(a, p, red[par], acc, wi, lane, 1);
      par ^= 1;
#pragma unroll
      for (int i = 0; i < RG; i++) acc[i][0] = acc[i][1] = 0.0f;
      tile += gridDim.x;
      if (tile < ntiles) p = mvm_pos<RG>(a, wi, lane, tile), kb = p.part;
    }
  }
}

/* GANTRY_MVR (read once): 0 = mvi_kernel, 1 = this kernel (default); kc_mvm_set_ring overrides */
static int g_mvr_force = -1;
static int mvr_on(void) {
  static int env = -1;
  if (g_mvr_force >= 0) return g_mvr_force;
  if (env < 0) env = (int)kc_env_int("GANTRY_MVR", 0, 1, 1);
  return env;
}

/* Launches the ring kernel for tiles tiles of a.split / a.blk_end (mvm_plan), one x row; returns
 * 1 if launched (rc = its error), 0 if it cannot take the launch (shared memory; then mvi_kernel). */
template <int RG, int NST> static int mvr_try(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int64_t tiles,
                                              int &rc) {
  static int nsm[16], optin[16];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return 0;
  if (!nsm[dev]) {
    if (cudaDeviceGetAttribute(&nsm[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin[dev], cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return nsm[dev] = 0, 0;
  }
  const size_t smem = mvr_smem(mvr_ring_bytes<RG, NST>(), cols >> 8);
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, mvr_kernel<RG, NST>) != cudaSuccess || smem + fa.sharedSizeBytes > (size_t)optin[dev])
    return 0;
  /* the largest dynamic size the device allows, every time (never lowered under a captured launch) */
  if (cudaFuncSetAttribute(mvr_kernel<RG, NST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           optin[dev] - (int)fa.sharedSizeBytes) != cudaSuccess)
    return 0;
  int bps = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, mvr_kernel<RG, NST>, MVM_WARPS * 32, smem) != cudaSuccess || bps < 1)
    return 0;
  const int64_t grid = tiles < (int64_t)nsm[dev] * bps ? tiles : (int64_t)nsm[dev] * bps;
  kc_launch(mvr_kernel<RG, NST>, (unsigned)grid, MVM_WARPS * 32, smem, st, a, x, cols, (unsigned)tiles);
  rc = (int)cudaGetLastError();
  return 1;
}

/* the ring depth: GANTRY_MVR_NST (2..4, a measurement knob, read once), else MVR_NST_DEFAULT */
#define MVR_NST_DEFAULT 3
template <int RG> static int mvr_go(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int64_t tiles, int &rc) {
  static int nst = 0;
  if (!nst) nst = (int)kc_env_int("GANTRY_MVR_NST", 2, 4, MVR_NST_DEFAULT);
  if (!mvr_on()) return 0;
  switch (nst) {
    case 2: return mvr_try<RG, 2>(st, a, cols, x, tiles, rc);
    case 4: return mvr_try<RG, 4>(st, a, cols, x, tiles, rc);
    default: return mvr_try<RG, 3>(st, a, cols, x, tiles, rc);
  }
}
#endif
