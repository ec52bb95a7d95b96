/* kernels/matvec_ring.cuh — the 1- and 2-row Q4_K and Q6_K products with the weights streamed
 * through a cp.async ring per warp (included by kernels/matvec_mma.cu after the integer pieces;
 * device-side, not a public header).
 *
 * Same products as mvi_kernel (Q4_K, one row) / mvm_kernel (Q6_K, and Q4_K at two rows: bf16
 * arithmetic), bit for bit: the same work split (mvm_plan / mvm_split: a "tile"
 * is what one mvi_kernel block computes: gpb row groups x S column parts), the same digits / bf16 parts of x,
 * the same per-chunk arithmetic (mvi_chunk / mvm_chunk) in the same chunk order, the same reduction
 * (mvm_finish). What differs is where the bytes come from and when:
 *  - the grid is persistent (at most the blocks that fit at once); block b computes tiles b, b +
 *    grid, ... in order;
 *  - x's B operand is built once per block, for all nkb chunks (only the B slots that are not
 *    zero: lanes 0..11, at two rows also 16..27; Q4_K one row: digits (mvi_conv) with Σx and the
 *    scale per chunk; else bf16 hi / mid / lo, Q4_K with Σx per row), one warp per chunk (Q4_K one
 *    row: its max by one redux.sync, no barrier between the phases), the loads of MVR_XPF chunks
 *    issued together, one barrier;
 *  - each warp streams its chunks (for each tile of the block, chunks part, part + S, ... < nkb)
 *    through a ring of NST stages in shared memory: stage = the 16 RG rows' superblocks of one
 *    chunk (mvr_t: one row every ROWB bytes), copied by the warp's lanes in 16-byte cp.async
 *    pieces (piece q: row q / PPR, piece q % PPR of the row's 16-byte aligned cover). While a warp computes
 *    chunk c, chunks c + 1 .. c + NST - 1 are in flight; no block barrier inside a tile, one per
 *    tile (mvm_finish, its shared sums double-buffered by tile parity).
 * PDL: the first NST - 1 stages are issued before kc_pdl_wait (weights only), x after. */
#ifndef GANTRY_KERNELS_MATVEC_RING_CUH
#define GANTRY_KERNELS_MATVEC_RING_CUH

/* Per weight type: bytes per staged row (ROWB), 16-byte pieces copied per row (PPR). Q4_K:
 * 144-byte superblocks, 16-byte aligned (kc_mvm_ok), one row every 160 bytes (the lanes' 8-byte
 * quant loads and 16-byte header loads are then free of bank conflicts). Q6_K: 210-byte
 * superblocks, 2-byte aligned: the 16-byte aligned cover (14 pieces: mis + 210 <= 224 for the
 * misalignment mis = address & 15), read at mis through 16-bit loads. */
template <class D> struct mvr_t;
template <> struct mvr_t<mvm_q4k> { static constexpr int ROWB = 160, PPR = 9; };
template <> struct mvr_t<mvm_q6k> { static constexpr int ROWB = 224, PPR = 14; };

/* x per chunk in shared memory, for NR x rows: INT (Q4_K, one row): digits (mvi_conv: [4][12]
 * uint4), then after all chunks' digits Σx [8] and the scale; NR 1, 2: the bf16 hi / mid / lo B
 * fragments (mvm_fill_st's compact slots: [8][12 NR] uint4); P1 (NR 4 or 8: 3..8 rows, x in one
 * bf16 part, mmq's setting under bf16 activations): row r in B column r ([8][4 NR] uint4, read by
 * lanes 4r..4r+3); then Q4_K Σx [NR][8] (of fp32 x; one part: of bf16(x)). XW: uint4 of B, XB: all bytes; NC: columns of
 * mvm_finish's sums. */
template <class D, int NR> struct mvr_x {
  static constexpr bool INT = std::is_same<D, mvm_q4k>::value && NR == 1, P1 = NR > 2;
  static constexpr int LW = P1 ? 4 * NR : 12 * NR, XW = INT ? 48 : 8 * LW, NS = INT ? 8 : D::HAS_MIN ? 8 * NR : 0;
  static constexpr int XB = XW * 16 + NS * 4 + (INT ? 4 : 0), NC = NR > 4 ? 8 : 4;
};

/* One-part fill of quad q (elements 4q..4q+3 of a chunk, value v) of x row r: bf16(v) into B
 * column r (bs: the chunk's [8][LW] slots), Q4_K: the sum of the rounded values over its
 * sub-block into sx[q / 8] (sx: the row's 8 sums; as mmq's prep: the product is W · bf16(x)).
 * Whole warps (mvm_sub_sum). */
template <class D, int LW>
__device__ __forceinline__ void mvr_fill_p1(uint4 (*bs)[LW], float *sx, float4 v, int q, int r) {
  const int s = D::kstep(q), tig = D::ktig(q);
  const __nv_bfloat162 h01 = __floats2bfloat162_rn(v.x, v.y), h23 = __floats2bfloat162_rn(v.z, v.w);
  *((uint2 *)&bs[s >> 1][4 * r + tig] + (s & 1)) = make_uint2(mvm_bits(h01), mvm_bits(h23));
  if constexpr (D::HAS_MIN) {
    const float p = mvm_sub_sum(make_float4(__low2float(h01), __high2float(h01), __low2float(h23), __high2float(h23)));
    if ((q & 7) == 0) sx[q >> 3] = p;
  }
}

/* The warp's next chunk to copy: tile, chunk kb, the tile's split S and the lane's piece sources
 * (row + 16 k, without the chunk offset). ok = 0 past the block's last tile. A tile's chunks are
 * k0 + part, + S, ... < kend (next's argument); the next tile is tile + tstep (0: gridDim.x).
 * mvr_kernel: k0 0, kend nkb; matvec_wide.cuh: the block's slice of K, the cluster count. */
template <class D, int RG, class P = mvm_pos<RG>> struct mvr_issue {
  static constexpr int PPR = mvr_t<D>::PPR, PIECES = RG * 16 * PPR, NPL = (PIECES + 31) / 32;
  unsigned tile, tstep = 0;
  int64_t kb, k0 = 0;
  int S;
  bool ok;
  const uint8_t *src[NPL];
  __device__ void at(const mvm_args_t &a, int wi, int lane, unsigned t, unsigned ntiles) {
    tile = t, ok = t < ntiles;
    if (!ok) return;
    const P p(a, wi, lane, t);
    S = p.S, kb = k0 + p.part;
#pragma unroll
    for (int u = 0; u < NPL; u++) {
      const int q = lane + 32 * u, r = q / PPR;
      if (q < PIECES) src[u] = p.row(a, r >> 4, r & 15) + 16 * (q - PPR * r);
    }
  }
  /* piece q (row r = q / PPR, k = q % PPR) of the aligned cover at r ROWB + 16 k */
  __device__ void issue(uint8_t *stage, int lane) const {
#pragma unroll
    for (int u = 0; u < NPL; u++) {
      const int q = lane + 32 * u, r = q / PPR;
      if (q < PIECES)
        kc_cp16(stage + r * mvr_t<D>::ROWB + 16 * (q - PPR * r), (const void *)((uintptr_t)(src[u] + kb * D::BB) & ~(uintptr_t)15));
    }
  }
  __device__ void next(const mvm_args_t &a, int wi, int lane, int64_t kend, unsigned ntiles) {
    kb += S;
    if (kb >= kend) at(a, wi, lane, tile + (tstep ? tstep : gridDim.x), ntiles);
  }
};

/* a 2-byte aligned 32-bit word from shared memory */
__device__ __forceinline__ uint32_t mvr_ld32_s2(const uint8_t *p) {
  const uint16_t *q = (const uint16_t *)p;
  return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}
/* where chunk kb of the weight row w starts in its staged row */
template <class D> __device__ __forceinline__ int mvr_mis(const uint8_t *w, int64_t kb) {
  return (int)((uintptr_t)(w + kb * D::BB) & 15);
}

/* The lane's weight words of a staged chunk (mvm_wbuf::load's registers, from shared memory):
 * rows g, g + 8 and lane / 2 of each group (p: the tile's mvm_pos, or a type with its wa / wb / ws) */
template <int RG, class P>
__device__ __forceinline__ void mvr_lds(mvm_wbuf<mvm_q4k, RG> &wb, const uint8_t *st, const P &, int64_t, int lane) {
  const int g = lane >> 2, tig = lane & 3;
  constexpr int RB = mvr_t<mvm_q4k>::ROWB;
#pragma unroll
  for (int i = 0; i < RG; i++) {
    const uint8_t *ra = st + (16 * i + g) * RB + 16 + 8 * tig, *rb = ra + 8 * RB;
#pragma unroll
    for (int j = 0; j < 4; j++) wb.ra[i].q[j] = *(const uint2 *)(ra + 32 * j), wb.rb[i].q[j] = *(const uint2 *)(rb + 32 * j);
    wb.sr[i].h = *(const uint4 *)(st + (16 * i + (lane >> 1)) * RB);
  }
}
template <int RG, class P>
__device__ __forceinline__ void mvr_lds(mvm_wbuf<mvm_q6k, RG> &wb, const uint8_t *st, const P &p, int64_t kb,
                                        int lane) {
  const int g = lane >> 2, tig = lane & 3, L2 = lane >> 1, h = lane & 1;
  constexpr int RB = mvr_t<mvm_q6k>::ROWB;
  const auto ld32 = [](const uint8_t *q) { return mvr_ld32_s2(q); };
#pragma unroll
  for (int i = 0; i < RG; i++) {
    mvm_q6k::load_at(wb.ra[i], st + (16 * i + g) * RB + mvr_mis<mvm_q6k>(p.wa[i], kb) + 4 * tig, ld32);
    mvm_q6k::load_at(wb.rb[i], st + (16 * i + g + 8) * RB + mvr_mis<mvm_q6k>(p.wb[i], kb) + 4 * tig, ld32);
    mvm_q6k::sload_at(wb.sr[i], st + (16 * i + L2) * RB + mvr_mis<mvm_q6k>(p.ws[i], kb), h, ld32,
                      [](const uint8_t *q) { return *(const uint16_t *)q; });
  }
}

/* dynamic shared memory of a launch: the rings, then x's chunks */
template <class D, int RG, int NST> __host__ __device__ constexpr size_t mvr_ring_bytes() {
  return (size_t)MVM_WARPS * NST * RG * 16 * mvr_t<D>::ROWB;
}
template <class D, int NR> static inline size_t mvr_smem(size_t ring, int64_t nkb) {
  return ring + (size_t)nkb * mvr_x<D, NR>::XB;
}

/* x's chunks loaded together per warp in the fill (their L2 latencies overlap; one at a time,
 * 27 % of the 4096x12288 product's stall samples waited on them: kernels/README.md) */
#define MVR_XPF 4

template <class D, int RG, int NST, int NR>
__global__ void __launch_bounds__(MVM_WARPS * 32, 2)
    mvr_kernel(const mvm_args_t a, const float *__restrict__ x, int64_t cols, unsigned ntiles, int n) {
  extern __shared__ __align__(16) uint8_t mvr_dyn[];
  __shared__ float4 scs[MVM_WARPS][16][4];        /* per warp: the group's scale slots */
  using X = mvr_x<D, NR>;
  __shared__ float mn[X::INT ? MVM_WARPS : 1][16]; /* INT, per warp: the group's min terms */
  __shared__ float red[2][MVM_WARPS][RG][16][X::NC]; /* mvm_finish's sums, by tile parity */
  constexpr int STB = RG * 16 * mvr_t<D>::ROWB, XW = X::XW, LW = X::LW;
  constexpr int XPF = NR == 1 ? MVR_XPF : NR == 2 && RG == 1 ? MVR_XPF / 2 : 1;
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, tig = lane & 3;
  const int64_t nkb = cols >> 8;
  uint8_t *ring = mvr_dyn + (size_t)wi * NST * STB;
  uint4 *xb = (uint4 *)(mvr_dyn + mvr_ring_bytes<D, RG, NST>());
  float *sxs = (float *)(xb + nkb * XW), *fsc = sxs + nkb * X::NS; /* Q4_K: Σx [nkb][NS]; INT: scales [nkb] */
  /* the lane's B slot (bf16): three parts: x row 0 at lanes 0..11, row 1 at 16..27 (slot lane -
   * 4); one part: lanes < LW (slot lane); else zero */
  const bool xl = X::P1 ? lane < LW : lane < 12 || (NR == 2 && lane >= 16 && lane < 28);
  const int xs = X::P1 || lane < 12 ? lane : lane - 4;

  mvr_issue<D, RG> is;
  is.at(a, wi, lane, blockIdx.x, ntiles);
#pragma unroll
  for (int s = 0; s < NST - 1; s++) { /* weights only before the wait */
    if (is.ok) is.issue(ring + s * STB, lane), is.next(a, wi, lane, nkb, ntiles);
    kc_cp_commit();
  }
  kc_pdl_wait(), kc_pdl_trigger();
  /* x: one warp per chunk, chunks c0 + MVM_WARPS u (u < XPF) loaded together */
  for (int64_t c0 = wi; c0 < nkb; c0 += XPF * MVM_WARPS) {
    float4 v[XPF][2 * NR];
#pragma unroll
    for (int u = 0; u < XPF; u++) {
      const int64_t c = c0 + u * MVM_WARPS;
#pragma unroll
      for (int r = 0; r < NR; r++) {
        const float *xc = x + r * cols + c * 256;
        const bool in = c < nkb && r < n; /* rows n..NR-1 (one part) stay zero */
        v[u][2 * r] = in ? __ldg((const float4 *)(xc + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[u][2 * r + 1] = in ? __ldg((const float4 *)(xc + 128 + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int u = 0; u < XPF; u++) {
      const int64_t c = c0 + u * MVM_WARPS;
      if (c >= nkb) break; /* warp-uniform */
      if constexpr (X::INT) {
        const uint32_t mb = __reduce_max_sync(KC_FULL_MASK, max(mvi_absbits(v[u][0]), mvi_absbits(v[u][1])));
        uint4(*bs)[12] = (uint4(*)[12])(xb + c * XW);
        mvi_conv<12>(bs, sxs + c * 8, fsc + c, v[u][0], lane, mb);
        mvi_conv<12>(bs, sxs + c * 8, fsc + c, v[u][1], lane + 32, mb);
      } else if constexpr (X::P1) {
        uint4(*bs)[LW] = (uint4(*)[LW])(xb + c * XW);
#pragma unroll
        for (int r = 0; r < NR; r++) {
          mvr_fill_p1<D, LW>(bs, sxs + c * X::NS + 8 * r, v[u][2 * r], lane, r);
          mvr_fill_p1<D, LW>(bs, sxs + c * X::NS + 8 * r, v[u][2 * r + 1], lane + 32, r);
        }
      } else {
        uint4(*bs)[8][LW] = (uint4(*)[8][LW])(xb + c * XW);
        float(*sx)[4][8] = (float(*)[4][8])(sxs + c * X::NS); /* Q4_K: [0][r][sub-block] */
#pragma unroll
        for (int r = 0; r < NR; r++) {
          mvm_fill_st<D, LW>(bs, sx, v[u][2 * r], 64 * r + lane, NR);
          mvm_fill_st<D, LW>(bs, sx, v[u][2 * r + 1], 64 * r + lane + 32, NR);
        }
      }
    }
  }
  __syncthreads();

  unsigned tile = blockIdx.x;
  mvm_pos<RG> p(a, wi, lane, tile);
  int64_t kb = p.part;
  constexpr int NA = X::P1 ? 4 : 2;
  float acc[RG][NA];
#pragma unroll
  for (int i = 0; i < RG; i++)
#pragma unroll
    for (int j = 0; j < NA; j++) acc[i][j] = 0.0f;
  int slot = 0, par = 0;
  while (tile < ntiles) {
    /* chunk c + NST - 1 into the slot chunk c - 1 left (read by every lane: the __syncwarp below) */
    if (is.ok) is.issue(ring + (slot ? slot - 1 : NST - 1) * STB, lane), is.next(a, wi, lane, nkb, ntiles);
    kc_cp_commit();
    kc_cp_wait<NST - 1>(); /* chunk c's copies of this lane */
    __syncwarp();          /* ... and of the other lanes */
    mvm_wbuf<D, RG> wb;
    mvr_lds<RG>(wb, ring + slot * STB, p, kb, lane);
    const uint4 *xk = xb + kb * XW;
    if constexpr (X::INT) {
      mvi_chunk<RG>(acc, wb, [&](int j) { return lane < 12 ? xk[12 * j + lane] : make_uint4(0u, 0u, 0u, 0u); },
                    sxs + kb * 8, fsc + kb, (float4(*)[2])scs[wi], mn[wi], lane);
    } else if constexpr (X::P1) {
      [[maybe_unused]] float sa[8], sb[8];
      if constexpr (D::HAS_MIN) { /* Σx of x rows 2tig, 2tig + 1 */
        const float4 *u = (const float4 *)(sxs + kb * X::NS + 16 * tig);
        const bool z = 2 * tig >= NR;
        const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 a0 = z ? z4 : u[0], a1 = z ? z4 : u[1], b0 = z ? z4 : u[2], b1 = z ? z4 : u[3];
        sa[0] = a0.x, sa[1] = a0.y, sa[2] = a0.z, sa[3] = a0.w, sa[4] = a1.x, sa[5] = a1.y, sa[6] = a1.z, sa[7] = a1.w;
        sb[0] = b0.x, sb[1] = b0.y, sb[2] = b0.z, sb[3] = b0.w, sb[4] = b1.x, sb[5] = b1.y, sb[6] = b1.z, sb[7] = b1.w;
      }
      mvm_chunk<D, RG, true>(acc, wb, sa, sb, scs[wi], lane,
                             [&](int q) { return xl ? xk[LW * q + xs] : make_uint4(0u, 0u, 0u, 0u); });
    } else {
      [[maybe_unused]] float sx[D::HAS_MIN ? D::NSUB : 1];
      if constexpr (D::HAS_MIN) { /* mvm_kernel's min term: x row tig / 2 in the even-tig lanes */
        const float4 *u = (const float4 *)(sxs + kb * X::NS + 8 * (tig >> 1));
        const bool z = (tig & 1) || (tig >> 1) >= NR;
        const float4 u0 = z ? make_float4(0.f, 0.f, 0.f, 0.f) : u[0], u1 = z ? make_float4(0.f, 0.f, 0.f, 0.f) : u[1];
        sx[0] = u0.x, sx[1] = u0.y, sx[2] = u0.z, sx[3] = u0.w, sx[4] = u1.x, sx[5] = u1.y, sx[6] = u1.z, sx[7] = u1.w;
      }
      mvm_chunk<D, RG>(acc, wb, sx, nullptr, scs[wi], lane,
                       [&](int q) { return xl ? xk[LW * q + xs] : make_uint4(0u, 0u, 0u, 0u); });
    }
    __syncwarp();
    slot = slot + 1 == NST ? 0 : slot + 1;
    kb += p.S;
    if (kb >= nkb) { /* the tile's last chunk of every warp: its sums (one block barrier) */
      mvm_finish<RG, X::NC, X::P1, NA>(a, p, red[par], acc, wi, lane, n);
      par ^= 1;
#pragma unroll
      for (int i = 0; i < RG; i++)
#pragma unroll
        for (int j = 0; j < NA; j++) acc[i][j] = 0.0f;
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

/* What a launch needs from the device, per instantiation and device, looked up once (the
 * occupancy per dynamic size in a few slots: a model's products have 2-3 column counts). */
struct mvr_dev {
  int nsm, optin, stat; /* SMs, opt-in shared memory per block, the kernel's static shared memory */
  int ready;            /* 1: the above are set and the dynamic limit raised; -1: unusable */
  size_t occ_smem[8];
  int occ_bps[8];
};
static unsigned long long g_mvr_launches; /* kc_mvm_ring_launches */

/* d.nsm / d.optin / d.stat / d.ready of kernel kern on device dev, looked up on first use, when
 * kern's dynamic shared memory limit is also raised to the largest the device allows (once: never
 * lowered under a captured launch). Returns 1 if usable. DEV: mvr_dev or matvec_wide.cuh's
 * mvw_dev. */
template <class DEV, class K> static int mvr_dev_ready(DEV &d, K kern, int dev) {
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
    if (d.ready < 0) (void)cudaGetLastError(); /* the failed query's error is not the fallback launch's */
  }
  return d.ready > 0;
}

/* Launches the ring kernel for tiles tiles of a.split / a.blk_end (mvm_plan), NR x rows; returns
 * 1 if launched (rc = its error), 0 if it cannot take the launch (shared memory; then the
 * register kernels). */
template <class D, int RG, int NST, int NR>
static int mvr_try(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n, int64_t tiles, int &rc) {
  static mvr_dev devs[16];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return 0;
  mvr_dev &d = devs[dev];
  if (!mvr_dev_ready(d, mvr_kernel<D, RG, NST, NR>, dev)) return 0;
  const size_t smem = mvr_smem<D, NR>(mvr_ring_bytes<D, RG, NST>(), cols >> 8);
  if (smem + (size_t)d.stat > (size_t)d.optin) return 0;
  int bps = 0, k = 0;
  while (k < 8 && d.occ_smem[k] && d.occ_smem[k] != smem) k++;
  if (k < 8 && d.occ_smem[k] == smem) {
    bps = d.occ_bps[k];
  } else {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, mvr_kernel<D, RG, NST, NR>, MVM_WARPS * 32, smem) != cudaSuccess || bps < 1)
      return 0;
    if (k < 8) d.occ_smem[k] = smem, d.occ_bps[k] = bps;
  }
  const int64_t grid = tiles < (int64_t)d.nsm * bps ? tiles : (int64_t)d.nsm * bps;
  kc_launch(mvr_kernel<D, RG, NST, NR>, (unsigned)grid, MVM_WARPS * 32, smem, st, a, x, cols, (unsigned)tiles, n);
  rc = (int)cudaGetLastError();
  __atomic_fetch_add(&g_mvr_launches, 1ull, __ATOMIC_RELAXED);
  return 1;
}

/* The ring depth: GANTRY_MVR_NST (Q4_K one row) / GANTRY_MVR_NST6 (Q6_K one row) /
 * GANTRY_MVR_NST2 (both types, two rows), 2..4, measurement knobs read once; else 3 / 2 / 2.
 * Measured (H200, scripts/gpu/ring.sh, bench_matvec 1 row, us at 2 / 3 / 4
 * stages): Q4_K swiglu 2x12288x4096 28.03 / 25.92 / 26.00, 4096x12288 15.22 / 14.97 / 15.67, head
 * 151936x4096 113.05 / 117.42 / 116.84; Q6_K 4096x12288 23.19 / 25.06 / 25.18, head 192.82 / 229.03 /
 * 233.66 (2 stages: two blocks per SM at 4096 columns); bench_decode batch 1, both types at 2 / 3 / 4:
 * qwen3-8b 2.977 / 2.931 / 2.986 ms, qwen35-9b 3.202 / 3.216 / 3.224 ms. Two rows: x takes 3 KB
 * per chunk (4096 columns: 49 KB), so 2 stages keep two blocks per SM there. */
#define MVR_NST_Q4K 3
#define MVR_NST_Q6K 2
#define MVR_NST_2ROWS 2
/* One part (3..8 rows): x takes 2 / 4 KB per chunk at NR 4 / 8; GANTRY_MVR_NSTP (2..3) */
#define MVR_NST_P1 2
template <class D, int RG, int NR>
static int mvr_go_rows(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n, int64_t tiles, int &rc) {
  static int nst = 0;
  constexpr bool Q4 = std::is_same<D, mvm_q4k>::value;
  if (!nst)
    nst = NR > 2    ? (int)kc_env_int("GANTRY_MVR_NSTP", 2, 3, MVR_NST_P1)
          : NR == 2 ? (int)kc_env_int("GANTRY_MVR_NST2", 2, 4, MVR_NST_2ROWS)
                    : (int)kc_env_int(Q4 ? "GANTRY_MVR_NST" : "GANTRY_MVR_NST6", 2, 4, Q4 ? MVR_NST_Q4K : MVR_NST_Q6K);
  if constexpr (NR > 2) {
    return nst == 3 ? mvr_try<D, RG, 3, NR>(st, a, cols, x, n, tiles, rc) : mvr_try<D, RG, 2, NR>(st, a, cols, x, n, tiles, rc);
  } else {
    switch (nst) {
      case 2: return mvr_try<D, RG, 2, NR>(st, a, cols, x, n, tiles, rc);
      case 4: return mvr_try<D, RG, 4, NR>(st, a, cols, x, n, tiles, rc);
      default: return mvr_try<D, RG, 3, NR>(st, a, cols, x, n, tiles, rc);
    }
  }
}
/* n x rows through the ring, if on and it fits (1), else 0: 1..2 rows x in three parts (the
 * register kernels' products bit for bit), 3..KC_MVR_MAX_ROWS in one (NR 4 or 8, the rows past n zero) */
template <class D, int RG>
static int mvr_go(cudaStream_t st, const mvm_args_t &a, int64_t cols, const float *x, int n, int64_t tiles, int &rc) {
  if (!mvr_on()) return 0;
  switch (n) {
    case 1: return mvr_go_rows<D, RG, 1>(st, a, cols, x, n, tiles, rc);
    case 2: return mvr_go_rows<D, RG, 2>(st, a, cols, x, n, tiles, rc);
    case 3:
    case 4: return mvr_go_rows<D, RG, 4>(st, a, cols, x, n, tiles, rc);
    default: return n <= KC_MVR_MAX_ROWS ? mvr_go_rows<D, RG, 8>(st, a, cols, x, n, tiles, rc) : 0;
  }
}
#endif
