/* kernels/attn_flash.cu — see attn_flash.cuh.
 * mma.sync m16n8k16 fragments (g = lane / 4, c = lane % 4): A (16x16) a0 = (row g, cols 2c..2c+1),
 * a1 = (g + 8, 2c..), a2 = (g, 2c + 8..), a3 = (g + 8, 2c + 8..); B (16x8) b0 = (k 2c..2c+1, n g),
 * b1 = (k 2c + 8.., n g); C (16x8 fp32) c0, c1 = (g, 2c..2c+1), c2, c3 = (g + 8, 2c..). Q and K
 * fragments come from row-major shared tiles by ldmatrix, V fragments by ldmatrix.trans; the S
 * accumulators of two 8-key tiles are the P fragment of one 16-key step (FA2's register reuse).
 * Shared rows are padded by 16 bytes so the 8 rows of an ldmatrix fall in distinct banks. */
#include "kernels/attn_flash.cuh"
#include "kernels/kv_store.cuh"

#define FA_THREADS 128 /* 4 warps x 16 x MT query rows */

/* MT: 16-row m-tiles per warp (each K / V fragment read from shared memory feeds MT mma) */
template <int D, int MT>
struct fa_cfg {
  static constexpr int BM = 64 * MT;                     /* query rows per block */
  static constexpr int BN = D > 128 || MT > 1 ? 32 : 64; /* key positions per tile */
  static constexpr int LD = D + 8;                       /* bf16 per shared row */
  static constexpr size_t SMEM = (size_t)(BM + 4 * BN) * LD * 2; /* Q + 2 stages of K and V */
};

__device__ __forceinline__ uint32_t fa_sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void fa_ldsm4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void fa_ldsm4_t(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 16 bytes global -> shared, zero-filled when bytes == 0 */
__device__ __forceinline__ void fa_cp16(void *dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa_sa(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(uint32_t *)&v;
}

template <int D, int MT>
__global__ void __launch_bounds__(FA_THREADS)
    fa_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ q, float *__restrict__ out, int n_head, int group,
              float scale_log2, int fa_min, int n_tiles) {
  kc_pdl_wait();
  kc_pdl_trigger();
  constexpr int BN = fa_cfg<D, MT>::BN, LD = fa_cfg<D, MT>::LD, CH = D / 8, BM = fa_cfg<D, MT>::BM;
  extern __shared__ __align__(16) unsigned char fa_smem[];
  __nv_bfloat16 *sq = (__nv_bfloat16 *)fa_smem; /* [BM][LD] */
  __nv_bfloat16 *sk = sq + BM * LD;             /* [2][BN][LD] */
  __nv_bfloat16 *sv = sk + 2 * BN * LD;         /* [2][BN][LD] */
  __shared__ int s_pos[BM];
  __shared__ unsigned char s_ok[2][BN];
  __shared__ int s_seq, s_tile;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int h = blockIdx.y, kvh = h / group;

  /* this block's tile: the (n_tiles - 1 - blockIdx.x)-th tile in sequence order (late tiles,
   * which see the most keys, start first), found by a warp prefix sum over the sequences */
  if (w == 0) {
    const int want = n_tiles - 1 - (int)blockIdx.x;
    int base = 0, fs = -1, fi = 0;
    for (int s0 = 0; s0 < b.n_seq && fs < 0; s0 += 32) {
      const int s = s0 + lane;
      const int nt = s < b.n_seq && b.seq_ntok[s] >= fa_min ? (b.seq_ntok[s] + BM - 1) / BM : 0;
      int inc = nt;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(KC_FULL_MASK, inc, o);
        if (lane >= o) inc += y;
      }
      const int ex = inc - nt;
      const unsigned hit = __ballot_sync(KC_FULL_MASK, nt > 0 && want >= base + ex && want < base + inc);
      if (hit) {
        const int src = __ffs(hit) - 1;
        fs = __shfl_sync(KC_FULL_MASK, s, src);
        fi = want - base - __shfl_sync(KC_FULL_MASK, ex, src);
      }
      base += __shfl_sync(KC_FULL_MASK, inc, 31);
    }
    if (lane == 0) s_seq = fs, s_tile = fi;
  }
  __syncthreads();
  const int s = s_seq;
  if (s < 0) return;
  const int t0 = b.seq_first[s] + s_tile * BM, nq = min(BM, b.seq_ntok[s] - s_tile * BM);
  const int maxpos = b.pos[t0 + nq - 1]; /* positions rise within a sequence */

  /* Q rows -> bf16 shared (rows past nq: zeros at the last row's position) */
  for (int i = tid; i < BM * (D / 4); i += FA_THREADS) {
    const int r = i / (D / 4), c4 = (i % (D / 4)) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < nq) x = *(const float4 *)(q + ((size_t)(t0 + r) * n_head + h) * D + c4);
    uint2 u = make_uint2(fa_pack(x.x, x.y), fa_pack(x.z, x.w));
    *(uint2 *)(sq + r * LD + c4) = u;
  }
  for (int i = tid; i < BM; i += FA_THREADS) s_pos[i] = b.pos[t0 + min(i, nq - 1)];

  const __nv_bfloat16 *K = (const __nv_bfloat16 *)kv.k, *V = (const __nv_bfloat16 *)kv.v;
  const size_t hoff = (size_t)kvh * D;
  auto load_kv = [&](int kt, int st) {
    for (int i = tid; i < BN * CH; i += FA_THREADS) {
      const int r = i / CH, c = i % CH, p = kt * BN + r;
      int64_t slot = -1;
      if (p <= maxpos) {
        slot = kc_kv_slot(b, kv, s, p);
        if (slot < 0 && c == 0) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
      }
      const size_t off = slot >= 0 ? (size_t)slot * kv.kv_dim + hoff + c * 8 : 0;
      fa_cp16(sk + (st * BN + r) * LD + c * 8, K + off, slot >= 0 ? 16 : 0);
      fa_cp16(sv + (st * BN + r) * LD + c * 8, V + off, slot >= 0 ? 16 : 0);
      if (c == 0) s_ok[st][r] = slot >= 0;
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };

  /* warp w: rows w * 16 * MT + 16 * mt + (lane / 4) (+ 8) of m-tile mt */
  const int row0 = w * 16 * MT, c2 = 2 * (lane & 3);
  float o[MT][D / 8][4];
  float m_lo[MT], m_hi[MT], l_lo[MT], l_hi[MT];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m_lo[mt] = m_hi[mt] = -INFINITY;
    l_lo[mt] = l_hi[mt] = 0.0f;
  }

  const int n_kt = maxpos / BN + 1;
  load_kv(0, 0);
  for (int kt = 0; kt < n_kt; kt++) {
    const int st = kt & 1;
    if (kt + 1 < n_kt) load_kv(kt + 1, st ^ 1);
    else asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);
    __syncthreads();
    /* warps whose rows all precede this tile skip it (causal) */
    if (kt * BN <= s_pos[row0 + 16 * MT - 1]) {
      const __nv_bfloat16 *skt = sk + st * BN * LD, *svt = sv + st * BN * LD;
      float sacc[MT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < BN / 8; i++) sacc[mt][i][0] = sacc[mt][i][1] = sacc[mt][i][2] = sacc[mt][i][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
          fa_ldsm4(a[mt], fa_sa(sq + (row0 + 16 * mt + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk * 16 +
                                (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < BN / 16; np++) {
          uint32_t bb[4];
          fa_ldsm4(bb, fa_sa(skt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            fa_mma(sacc[mt][2 * np], a[mt], bb[0], bb[1]);
            fa_mma(sacc[mt][2 * np + 1], a[mt], bb[2], bb[3]);
          }
        }
      }
      uint32_t pa[MT][BN / 16][4]; /* P as the A fragments of O += P V */
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        const int pos_lo = s_pos[row0 + 16 * mt + (lane >> 2)], pos_hi = s_pos[row0 + 16 * mt + (lane >> 2) + 8];
        /* mask, scale (log2 domain), row maxima over the 4 threads of a row */
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int col = nt * 8 + c2 + e, kp = kt * BN + col;
            const bool ok = s_ok[st][col];
            sacc[mt][nt][e] = ok && kp <= pos_lo ? sacc[mt][nt][e] * scale_log2 : -INFINITY;
            sacc[mt][nt][2 + e] = ok && kp <= pos_hi ? sacc[mt][nt][2 + e] * scale_log2 : -INFINITY;
            mx_lo = fmaxf(mx_lo, sacc[mt][nt][e]);
            mx_hi = fmaxf(mx_hi, sacc[mt][nt][2 + e]);
          }
        }
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
          mx_lo = fmaxf(mx_lo, __shfl_xor_sync(KC_FULL_MASK, mx_lo, x));
          mx_hi = fmaxf(mx_hi, __shfl_xor_sync(KC_FULL_MASK, mx_hi, x));
        }
        const float mn_lo = fmaxf(m_lo[mt], mx_lo), mn_hi = fmaxf(m_hi[mt], mx_hi);
        const float mu_lo = mn_lo == -INFINITY ? 0.0f : mn_lo, mu_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
        const float corr_lo = exp2f(m_lo[mt] - mu_lo), corr_hi = exp2f(m_hi[mt] - mu_hi);
        m_lo[mt] = mn_lo, m_hi[mt] = mn_hi;
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
          sacc[mt][nt][0] = exp2f(sacc[mt][nt][0] - mu_lo), sacc[mt][nt][1] = exp2f(sacc[mt][nt][1] - mu_lo);
          sacc[mt][nt][2] = exp2f(sacc[mt][nt][2] - mu_hi), sacc[mt][nt][3] = exp2f(sacc[mt][nt][3] - mu_hi);
          sum_lo += sacc[mt][nt][0] + sacc[mt][nt][1];
          sum_hi += sacc[mt][nt][2] + sacc[mt][nt][3];
        }
        l_lo[mt] = l_lo[mt] * corr_lo + sum_lo;
        l_hi[mt] = l_hi[mt] * corr_hi + sum_hi;
#pragma unroll
        for (int i = 0; i < D / 8; i++)
          o[mt][i][0] *= corr_lo, o[mt][i][1] *= corr_lo, o[mt][i][2] *= corr_hi, o[mt][i][3] *= corr_hi;
#pragma unroll
        for (int k2 = 0; k2 < BN / 16; k2++) {
          pa[mt][k2][0] = fa_pack(sacc[mt][2 * k2][0], sacc[mt][2 * k2][1]);
          pa[mt][k2][1] = fa_pack(sacc[mt][2 * k2][2], sacc[mt][2 * k2][3]);
          pa[mt][k2][2] = fa_pack(sacc[mt][2 * k2 + 1][0], sacc[mt][2 * k2 + 1][1]);
          pa[mt][k2][3] = fa_pack(sacc[mt][2 * k2 + 1][2], sacc[mt][2 * k2 + 1][3]);
        }
      }
      /* O += P V */
#pragma unroll
      for (int k2 = 0; k2 < BN / 16; k2++) {
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
          uint32_t bb[4];
          fa_ldsm4_t(bb, fa_sa(svt + (k2 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 + (lane >> 4) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            fa_mma(o[mt][2 * dp], pa[mt][k2], bb[0], bb[1]);
            fa_mma(o[mt][2 * dp + 1], pa[mt][k2], bb[2], bb[3]);
          }
        }
      }
    }
    __syncthreads(); /* this stage is refilled by the next iteration's load */
  }
  asm volatile("cp.async.wait_group 0;\n" ::);

#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    float ll = l_lo[mt], lh = l_hi[mt];
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      ll += __shfl_xor_sync(KC_FULL_MASK, ll, x);
      lh += __shfl_xor_sync(KC_FULL_MASK, lh, x);
    }
    const float inv_lo = ll > 0.0f ? 1.0f / ll : 0.0f, inv_hi = lh > 0.0f ? 1.0f / lh : 0.0f;
    const int r_lo = row0 + 16 * mt + (lane >> 2), r_hi = r_lo + 8;
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
      const int col = i * 8 + c2;
      if (r_lo < nq)
        *(float2 *)(out + ((size_t)(t0 + r_lo) * n_head + h) * D + col) =
            make_float2(o[mt][i][0] * inv_lo, o[mt][i][1] * inv_lo);
      if (r_hi < nq)
        *(float2 *)(out + ((size_t)(t0 + r_hi) * n_head + h) * D + col) =
            make_float2(o[mt][i][2] * inv_hi, o[mt][i][3] * inv_hi);
    }
  }
}

/* forced m-tiles per warp (kc_attn_flash_set_mt), 0: kc_attn_flash_plan chooses */
static int g_fa_mt = 0;

KC_API void kc_attn_flash_set_mt(int mt) { g_fa_mt = mt == 1 || mt == 2 ? mt : 0; }

static int fa_tiles(const int32_t *seq_ntok, int n_seq, int fa_min, int bm) {
  int n = 0;
  for (int s = 0; s < n_seq; s++)
    if (seq_ntok[s] >= fa_min) n += (seq_ntok[s] + bm - 1) / bm;
  return n;
}

KC_API int kc_attn_flash_ok(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

KC_API int kc_attn_flash_plan(const int32_t *seq_ntok, int n_seq, int fa_min, int head_dim, int n_head, int *mt) {
  int m = head_dim > 128 ? 1 : g_fa_mt;
  if (m == 0) /* 128-query tiles when they still give two blocks per SM of an H100 / H200 */
    m = (int64_t)fa_tiles(seq_ntok, n_seq, fa_min, 128) * n_head >= KC_FA_MT2_MIN_BLOCKS ? 2 : 1;
  *mt = m;
  return fa_tiles(seq_ntok, n_seq, fa_min, 64 * m);
}

template <int D, int MT>
static int fa_launch(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head, int group,
                     float scale, int fa_min, int n_tiles) {
  static int attr_set; /* once per process (a function attribute, not a stream operation) */
  if (!attr_set) {
    const cudaError_t e = cudaFuncSetAttribute(fa_kernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)fa_cfg<D, MT>::SMEM);
    if (e != cudaSuccess) return (int)e;
    attr_set = 1;
  }
  kc_launch(fa_kernel<D, MT>, dim3(n_tiles, n_head), FA_THREADS, fa_cfg<D, MT>::SMEM, st, 
      b, kv, q, out, n_head, group, scale * 1.4426950408889634f, fa_min, n_tiles);
  return (int)cudaGetLastError();
}

KC_API int kc_attn_flash(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                         int n_kv_head, int head_dim, float scale, int fa_min, int n_tiles, int mt) {
  if (!kv.bf16 || !kc_attn_flash_ok(head_dim) || n_kv_head <= 0 || n_head % n_kv_head || fa_min < 1 ||
      (((uintptr_t)q | (uintptr_t)out) & 15) || mt < 1 || mt > 2 || (mt == 2 && head_dim > 128))
    return (int)cudaErrorInvalidValue;
  if (n_tiles <= 0 || b.n_tok <= 0) return 0;
  const int group = n_head / n_kv_head, mt2 = mt == 2;
  switch (head_dim) {
    case 64:
      return mt2 ? fa_launch<64, 2>(st, b, kv, q, out, n_head, group, scale, fa_min, n_tiles)
                 : fa_launch<64, 1>(st, b, kv, q, out, n_head, group, scale, fa_min, n_tiles);
    case 128:
      return mt2 ? fa_launch<128, 2>(st, b, kv, q, out, n_head, group, scale, fa_min, n_tiles)
                 : fa_launch<128, 1>(st, b, kv, q, out, n_head, group, scale, fa_min, n_tiles);
    default: return fa_launch<256, 1>(st, b, kv, q, out, n_head, group, scale, fa_min, n_tiles);
  }
}
