/* kernels/gdn_chunked.cu — see gdn_chunked.cuh; the CPU twin is engine/backend/gdn_chunked.c.
 *
 * Block (column tile of 32 value columns, value head, sequence), 256 threads = 8 warps; lane l
 * owns value column col0 + l. The block walks its sequence in chunks of L = 64 tokens with
 * the head's S tile [d_k, 32] in shared memory. Per chunk (c_i = g_0 + ... + g_i in double):
 *   load    qT, kT [d_k, L] (transposed, row stride L + 4), g, beta
 *   step 2  KK = k kᵀ, QK = q kᵀ (4x4 tiles of the lower triangle per thread) ->
 *           A[i][j] = beta_i e^(c_i - c_j) KK[i][j] (j < i), Qd[i][j] = e^(c_i - c_j) QK[i][j] (j <= i)
 *   step 3  D_i = beta_i (v_i - e^c_i S0ᵀk_i), o_i = e^c_i S0ᵀq_i   (thread: rows i = 8w + m)
 *   step 4  forward substitution D_i -= A[i][j] D_j, j = 0..i-1 (one barrier per j)
 *   step 5  o_i += sum_{j<=i} Qd[i][j] D_j, written out
 *   step 6  S = e^c_last S0 + sum_j e^(c_last - c_j) k_j ⊗ D_j   (thread: 16 key rows)
 * Every sum runs in the order of engine/backend/gdn_chunked.c (d_k ascending, j ascending), so the
 * kernel differs from the CPU chunked form only by fma contraction and expf ulps. */
#include "kernels/gdn_chunked.cuh"

#define GC_L KC_GDN_CHUNK
#define GC_WARPS 8
#define GC_THREADS (GC_WARPS * 32)
#define GC_TJ 32            /* value columns per block */
#define GC_LDT (GC_L + 4)   /* row stride of qT, kT (floats; float4-aligned, 4-way store conflicts) */
#define GC_RPW 16           /* step 6: key rows per warp per pass */
#define GC_TILES ((GC_L / 4) * (GC_L / 4 + 1) / 2)

#if GC_L != 64 || GC_THREADS != 256
#error "gdn_chunked: the thread mappings below assume 64-token chunks and 8 warps"
#endif

/* dynamic shared memory: cum double [L]; g, beta, e^c, w floats [L]; qT, kT [d_k, GC_LDT];
 * S tile [d_k, TJ]; A, Qd [L, L]; D [L, TJ] */
static size_t gc_smem_bytes(int d_k) {
  return sizeof(double) * GC_L +
         sizeof(float) * (4 * (size_t)GC_L + 2 * (size_t)d_k * GC_LDT + (size_t)d_k * GC_TJ + 2 * (size_t)GC_L * GC_L +
                          (size_t)GC_L * GC_TJ);
}

__global__ void __launch_bounds__(GC_THREADS, 1)
    gdn_chunked_kernel(kc_batch_t b, float *ssm, int n_slots, const float *__restrict__ q, const float *__restrict__ k,
                       const float *__restrict__ v, const float *__restrict__ g, const float *__restrict__ beta,
                       float *__restrict__ out, int n_k, int n_v, int d_k, int d_v, int min_tok) {
  kc_pdl_wait();
  kc_pdl_trigger();
  extern __shared__ float4 gc_sm4[];
  double *cum = (double *)gc_sm4;
  float *gs = (float *)(cum + GC_L), *bet = gs + GC_L, *ex = bet + GC_L, *wj = ex + GC_L;
  float *qT = wj + GC_L, *kT = qT + (size_t)d_k * GC_LDT, *Ss = kT + (size_t)d_k * GC_LDT;
  float *A = Ss + (size_t)d_k * GC_TJ, *Qd = A + GC_L * GC_L, *D = Qd + GC_L * GC_L;

  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int h = blockIdx.y, s = blockIdx.z, kh = h % n_k;
  const int col = blockIdx.x * GC_TJ + lane;
  const bool cv = col < d_v;
  const int t0 = b.seq_first[s], n = b.seq_ntok[s];
  if (n <= 0 || n < min_tok) return; /* block-uniform: short sequences are kc_gdn_scan's */
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) {
    if (tid == 0) atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  float *S = ssm + ((size_t)slot * n_v + h) * (size_t)d_k * d_v; /* [d_k, d_v] */
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;

  for (int e = tid; e < d_k * GC_TJ; e += GC_THREADS) {
    const int r = e / GC_TJ, c = blockIdx.x * GC_TJ + e % GC_TJ;
    Ss[e] = c < d_v ? S[(size_t)r * d_v + c] : 0.0f;
  }

  for (int c0 = 0; c0 < n; c0 += GC_L) {
    const int Lc = n - c0 < GC_L ? n - c0 : GC_L;
    const size_t tc = (size_t)t0 + c0; /* batch index of the chunk's first token */
    __syncthreads(); /* the previous chunk is done with every shared array */

    /* qT[r][i], kT[r][i]: a warp takes 4 tokens x 8 key dims (32-byte global segments,
     * conflict-free transposed stores); rows i >= Lc are zero */
    for (int e = tid; e < GC_L * d_k; e += GC_THREADS) {
      const int blk = e >> 5, rb = blk % (d_k / 8), ib = blk / (d_k / 8);
      const int i = ib * 4 + (e & 3), r = rb * 8 + ((e >> 2) & 7);
      float qv = 0.0f, kv = 0.0f;
      if (i < Lc) {
        const size_t off = (tc + i) * qk_ld + (size_t)kh * d_k + r;
        qv = q[off];
        kv = k[off];
      }
      qT[r * GC_LDT + i] = qv;
      kT[r * GC_LDT + i] = kv;
    }
    if (tid < Lc) {
      gs[tid] = g[(tc + tid) * n_v + h];
      bet[tid] = beta[(tc + tid) * n_v + h];
    }
    __syncthreads();
    if (tid == 0) { /* the CPU's left-to-right double sum */
      double c = 0.0;
      for (int i = 0; i < Lc; i++) {
        c += (double)gs[i];
        cum[i] = c;
      }
    }
    __syncthreads();
    if (tid < Lc) {
      ex[tid] = expf((float)cum[tid]);
      wj[tid] = expf((float)(cum[Lc - 1] - cum[tid]));
    }

    /* step 2: tile (ti, tj), tj <= ti, covers rows 4ti..4ti+3 x columns 4tj..4tj+3 */
    if (tid < GC_TILES) {
      int ti = 0;
      while ((ti + 1) * (ti + 2) / 2 <= tid) ti++;
      const int tj = tid - ti * (ti + 1) / 2;
      if (4 * ti < Lc) {
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
          for (int bb = 0; bb < 4; bb++) kk[a][bb] = qk[a][bb] = 0.0f;
        for (int r = 0; r < d_k; r++) {
          const float4 ka = *(const float4 *)(kT + r * GC_LDT + 4 * ti);
          const float4 qa = *(const float4 *)(qT + r * GC_LDT + 4 * ti);
          const float4 kb = *(const float4 *)(kT + r * GC_LDT + 4 * tj);
          const float kav[4] = {ka.x, ka.y, ka.z, ka.w}, qav[4] = {qa.x, qa.y, qa.z, qa.w},
                      kbv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
          for (int a = 0; a < 4; a++)
#pragma unroll
            for (int bb = 0; bb < 4; bb++) {
              kk[a][bb] += kav[a] * kbv[bb];
              qk[a][bb] += qav[a] * kbv[bb];
            }
        }
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
          for (int bb = 0; bb < 4; bb++) {
            const int i = 4 * ti + a, j = 4 * tj + bb;
            if (i < Lc && j <= i) {
              const float e = expf((float)(cum[i] - cum[j]));
              Qd[i * GC_L + j] = e * qk[a][bb];
              if (j < i) A[i * GC_L + j] = bet[i] * e * kk[a][bb];
            }
          }
      }
    }
    __syncthreads(); /* A, Qd, e^c, w ready */

    /* step 3: rows i = 8w + m; sums over d_k in ascending order */
    float om[8];
    {
      float ak[8], aq[8];
#pragma unroll
      for (int m = 0; m < 8; m++) ak[m] = aq[m] = 0.0f;
      for (int r = 0; r < d_k; r++) {
        const float sv = Ss[r * GC_TJ + lane];
        const float4 k0 = *(const float4 *)(kT + r * GC_LDT + 8 * w), k1 = *(const float4 *)(kT + r * GC_LDT + 8 * w + 4);
        const float4 q0 = *(const float4 *)(qT + r * GC_LDT + 8 * w), q1 = *(const float4 *)(qT + r * GC_LDT + 8 * w + 4);
        const float kv8[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
        const float qv8[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
        for (int m = 0; m < 8; m++) {
          ak[m] += sv * kv8[m];
          aq[m] += sv * qv8[m];
        }
      }
#pragma unroll
      for (int m = 0; m < 8; m++) {
        const int i = 8 * w + m;
        om[m] = 0.0f;
        if (i < Lc) {
          const float vv = cv ? v[(tc + i) * v_ld + (size_t)h * d_v + col] : 0.0f;
          D[i * GC_TJ + lane] = bet[i] * (vv - ex[i] * ak[m]);
          om[m] = aq[m] * ex[i];
        }
      }
    }

    /* step 4: row jp is final once the rows before it were subtracted (barrier per jp) */
    for (int jp = 0; jp < Lc - 1; jp++) {
      __syncthreads();
      const float dj = D[jp * GC_TJ + lane];
#pragma unroll
      for (int m = 0; m < 8; m++) {
        const int i = 8 * w + m;
        if (i > jp && i < Lc) D[i * GC_TJ + lane] -= A[i * GC_L + jp] * dj;
      }
    }
    __syncthreads(); /* D final */

    /* step 5 */
#pragma unroll
    for (int m = 0; m < 8; m++) {
      const int i = 8 * w + m;
      if (i < Lc) {
        float o = om[m];
        for (int j = 0; j <= i; j++) o += Qd[i * GC_L + j] * D[j * GC_TJ + lane];
        if (cv) out[(tc + i) * v_ld + (size_t)h * d_v + col] = o;
      }
    }

    /* step 6: warp w takes key rows rb + 16w .. +15 of each pass */
    const float eL = ex[Lc - 1];
    for (int rb = 0; rb < d_k; rb += GC_WARPS * GC_RPW) {
      const int r0 = rb + w * GC_RPW;
      if (r0 >= d_k) break; /* no barrier below */
      float sr[GC_RPW];
#pragma unroll
      for (int u = 0; u < GC_RPW; u++) sr[u] = r0 + u < d_k ? Ss[(r0 + u) * GC_TJ + lane] * eL : 0.0f;
      int j = 0;
      for (; j + 4 <= Lc; j += 4) {
        const float d0 = D[j * GC_TJ + lane], d1 = D[(j + 1) * GC_TJ + lane], d2 = D[(j + 2) * GC_TJ + lane],
                    d3 = D[(j + 3) * GC_TJ + lane];
        const float4 wv = *(const float4 *)(wj + j);
#pragma unroll
        for (int u = 0; u < GC_RPW; u++) {
          if (r0 + u < d_k) {
            const float4 kq = *(const float4 *)(kT + (r0 + u) * GC_LDT + j);
            sr[u] += (wv.x * kq.x) * d0;
            sr[u] += (wv.y * kq.y) * d1;
            sr[u] += (wv.z * kq.z) * d2;
            sr[u] += (wv.w * kq.w) * d3;
          }
        }
      }
      for (; j < Lc; j++) {
        const float dj = D[j * GC_TJ + lane], wv = wj[j];
#pragma unroll
        for (int u = 0; u < GC_RPW; u++)
          if (r0 + u < d_k) sr[u] += (wv * kT[(r0 + u) * GC_LDT + j]) * dj;
      }
#pragma unroll
      for (int u = 0; u < GC_RPW; u++)
        if (r0 + u < d_k) Ss[(r0 + u) * GC_TJ + lane] = sr[u];
    }
  }
  /* write back the S elements this thread updated in step 6 (same mapping: no barrier) */
  if (cv) {
    for (int rb = 0; rb < d_k; rb += GC_WARPS * GC_RPW) {
      const int r0 = rb + w * GC_RPW;
      for (int u = 0; u < GC_RPW && r0 + u < d_k; u++) S[(size_t)(r0 + u) * d_v + col] = Ss[(r0 + u) * GC_TJ + lane];
    }
  }
}

KC_API size_t kc_gdn_chunked_smem(int d_k) { return d_k > 0 ? gc_smem_bytes(d_k) : 0; }

KC_API int kc_gdn_chunked_ok(int d_k, int d_v) {
  if (d_k <= 0 || d_k % 8 || d_v <= 0 || d_v > 1024) return 0;
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return gc_smem_bytes(d_k) <= (size_t)optin;
}

KC_API int kc_gdn_chunked(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                          int d_v, int min_tok) {
  if (n_k <= 0 || n_v <= 0 || n_v % n_k || !kc_gdn_chunked_ok(d_k, d_v)) return (int)cudaErrorInvalidValue;
  if (b.n_seq <= 0) return 0;
  const size_t smem = gc_smem_bytes(d_k);
  cudaError_t e = cudaFuncSetAttribute(gdn_chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return (int)e;
  const dim3 grid((unsigned)((d_v + GC_TJ - 1) / GC_TJ), (unsigned)n_v, (unsigned)b.n_seq);
  kc_launch(gdn_chunked_kernel, grid, GC_THREADS, smem, st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v,
                                                      min_tok);
  return (int)cudaGetLastError();
}
