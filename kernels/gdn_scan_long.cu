/* kernels/gdn_scan_long.cu — see gdn_scan_long.cuh.
 *
 * The per-token cost of the sequential scan is a latency chain (S -> kv = Sᵀk -> delta -> S), so
 * this kernel shortens the chain instead of adding parallelism inside it:
 * - block (tile of GL_CB value columns, value head, sequence), LPC warps, no __syncthreads per
 *   token: lane l of warp w owns column c = GL_CB tile + w CPW + l / LPC and the key rows of the
 *   float4 groups p + LPC u (p = l % LPC, u < NU), i.e. 4 NU rows of S in registers. A dot product
 *   over d_k is 4 NU FMAs (four independent accumulators) and log2(LPC) xor-shuffles inside the
 *   column's lanes (every lane gets the sum).
 * - q, k (zero-padded to DKP rows), the block's v columns, g and beta of TT tokens are staged in
 *   shared memory by cp.async, double-buffered: tile j + 1 is in flight while tile j is scanned,
 *   and the token loop reads shared memory only (broadcast reads, no bank conflicts).
 * - the o = Sᵀq reduction of token i is shuffled together with the kv reduction of token i + 1,
 *   so it costs no latency of its own.
 * exp(g) is taken once per token of a tile (in place in shared memory, before the scan). */
#include "kernels/gdn_scan_long.cuh"

/* GL_CB value columns per block: LPC warps of 32 / LPC columns each (4 warps at LPC 4, 8 at LPC
 * 8), so that d_v 128 x 32 value heads make 128 blocks, one wave on 132 SMs, and the q/k rows a
 * block stages per token serve 32 columns */
#define GL_CB 32

__device__ __forceinline__ unsigned gl_sa(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
/* 4 bytes global -> shared, zero-filled when ok == 0 (src is then not read) */
__device__ __forceinline__ void gl_cp4(float *dst, const float *src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(gl_sa(dst)), "l"(src), "r"(ok ? 4 : 0));
}

/* floats of one token in a staging buffer: q [DKP], k [DKP], v [CB], (g -> exp(g), beta) */
template <int DKP, int CB>
struct gl_layout {
  static constexpr int TT = DKP <= 128 ? 16 : 8; /* tokens per tile: 2 buffers stay under 48 KiB */
  static constexpr int QK = 2 * DKP, V = CB, GB = 2;
  static constexpr int BUF = TT * (QK + V + GB); /* floats per buffer: qk [TT][2 DKP], v [TT][CB], gb [TT][2] */
};

/* Issues the copies of tokens [t0, t0 + cnt) of the sequence into one buffer; warp w of NW copies
 * the tokens w, w + NW, ... of the tile. */
template <int DKP, int CB, int NW>
__device__ __forceinline__ void gl_stage(float *buf, int cnt, size_t t0, const float *__restrict__ q,
                                         const float *__restrict__ k, const float *__restrict__ v,
                                         const float *__restrict__ g, const float *__restrict__ beta, int kh, int h,
                                         int c0, int n_k, int n_v, int d_k, int d_v) {
  typedef gl_layout<DKP, CB> L;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  float *sqk = buf, *sv = buf + L::TT * L::QK, *sgb = sv + L::TT * L::V;
  const size_t qk_ld = (size_t)n_k * d_k, v_ld = (size_t)n_v * d_v;
  for (int i = w; i < cnt; i += NW) {
    const size_t t = t0 + (size_t)i;
    const float *qt = q + t * qk_ld + (size_t)kh * d_k, *kt = k + t * qk_ld + (size_t)kh * d_k;
#pragma unroll
    for (int r = lane; r < DKP; r += 32) {
      const bool ok = r < d_k;
      gl_cp4(sqk + i * L::QK + r, ok ? qt + r : qt, ok);
      gl_cp4(sqk + i * L::QK + DKP + r, ok ? kt + r : kt, ok);
    }
    const float *vt = v + t * v_ld + (size_t)h * d_v;
#pragma unroll
    for (int c = lane; c < CB; c += 32) {
      const bool ok = c0 + c < d_v;
      gl_cp4(sv + i * L::V + c, ok ? vt + c0 + c : vt, ok);
    }
    if (lane == 0) gl_cp4(sgb + 2 * i, g + t * n_v + h, true);
    if (lane == 1) gl_cp4(sgb + 2 * i + 1, beta + t * n_v + h, true);
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

/* partial sums of a column's lanes -> the column's sum in every one of them */
template <int LPC>
__device__ __forceinline__ void gl_allreduce2(float &a, float &b) {
#pragma unroll
  for (int off = LPC / 2; off > 0; off >>= 1) {
    const float xa = __shfl_xor_sync(0xffffffffu, a, off), xb = __shfl_xor_sync(0xffffffffu, b, off);
    a += xa;
    b += xb;
  }
}

template <int LPC, int NU>
__global__ void __launch_bounds__(LPC * 32)
    gdn_long_kernel(kc_batch_t b, float *ssm, int n_slots, const float *__restrict__ q, const float *__restrict__ k,
                    const float *__restrict__ v, const float *__restrict__ g, const float *__restrict__ beta,
                    float *__restrict__ out, int n_k, int n_v, int d_k, int d_v, int min_tok, int skip_from) {
  kc_pdl_wait();
  kc_pdl_trigger();
  constexpr int CPW = 32 / LPC, CB = GL_CB, DKP = 4 * LPC * NU;
  typedef gl_layout<DKP, CB> L;
  extern __shared__ float4 gl_smem4[];
  float *smem = (float *)gl_smem4;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, p = lane % LPC;
  const int h = blockIdx.y, s = blockIdx.z, kh = h % n_k;
  const int c0 = blockIdx.x * CB, cl = w * CPW + lane / LPC, c = c0 + cl; /* cl: column in the tile */
  const int t0 = b.seq_first[s], n = b.seq_ntok[s];
  if (n < min_tok || n <= 0 || n >= skip_from) return; /* block-uniform */
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) {
    if (threadIdx.x == 0) atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  float *S = ssm + ((size_t)slot * n_v + h) * (size_t)d_k * d_v; /* [d_k, d_v] */
  const bool cv = c < d_v;
  float4 Sr[NU]; /* rows 4 (p + LPC u) + 0..3 of column c */
#pragma unroll
  for (int u = 0; u < NU; u++) {
    const int r = 4 * (p + LPC * u);
    Sr[u].x = cv && r + 0 < d_k ? S[(size_t)(r + 0) * d_v + c] : 0.0f;
    Sr[u].y = cv && r + 1 < d_k ? S[(size_t)(r + 1) * d_v + c] : 0.0f;
    Sr[u].z = cv && r + 2 < d_k ? S[(size_t)(r + 2) * d_v + c] : 0.0f;
    Sr[u].w = cv && r + 3 < d_k ? S[(size_t)(r + 3) * d_v + c] : 0.0f;
  }
  const size_t v_ld = (size_t)n_v * d_v;
  float *ocol = out + (size_t)h * d_v + c;
  const int ntile = (n + L::TT - 1) / L::TT;
  gl_stage<DKP, CB, LPC>(smem, min(n, L::TT), (size_t)t0, q, k, v, g, beta, kh, h, c0, n_k, n_v, d_k, d_v);
  float po = 0.0f; /* partial o of the previous token, reduced with the next kv */
  size_t t_prev = 0;
  bool have_prev = false;
  for (int j = 0; j < ntile; j++) {
    float *buf = smem + (j & 1) * L::BUF;
    if (j + 1 < ntile)
      gl_stage<DKP, CB, LPC>(smem + ((j + 1) & 1) * L::BUF, min(n - (j + 1) * L::TT, L::TT),
                        (size_t)t0 + (size_t)(j + 1) * L::TT, q, k, v, g, beta, kh, h, c0, n_k, n_v, d_k, d_v);
    else asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);
    __syncthreads();
    const int cnt = min(n - j * L::TT, L::TT);
    const float4 *sqk = (const float4 *)buf;
    const float *sv = buf + L::TT * L::QK;
    float2 *sgb = (float2 *)(sv + L::TT * L::V);
    if ((int)threadIdx.x < cnt) sgb[threadIdx.x].x = expf(sgb[threadIdx.x].x);
    __syncthreads();
    for (int i = 0; i < cnt; i++) {
      const float4 *qi = sqk + i * (L::QK / 4), *ki = qi + DKP / 4;
      /* kv partial over this lane's rows of S_old */
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
      float4 kr[NU];
#pragma unroll
      for (int u = 0; u < NU; u++) {
        kr[u] = ki[p + LPC * u];
        a0 = fmaf(Sr[u].x, kr[u].x, a0);
        a1 = fmaf(Sr[u].y, kr[u].y, a1);
        a2 = fmaf(Sr[u].z, kr[u].z, a2);
        a3 = fmaf(Sr[u].w, kr[u].w, a3);
      }
      float kv = (a0 + a1) + (a2 + a3);
      gl_allreduce2<LPC>(kv, po);
      if (have_prev && p == 0 && cv) ocol[t_prev * v_ld] = po;
      const float2 gb = sgb[i];
      const float delta = gb.y * (sv[i * L::V + cl] - gb.x * kv);
      /* S = exp(g) S_old + k delta; o partial = Sᵀq */
      a0 = a1 = a2 = a3 = 0.0f;
#pragma unroll
      for (int u = 0; u < NU; u++) {
        const float4 qr = qi[p + LPC * u];
        Sr[u].x = fmaf(Sr[u].x, gb.x, kr[u].x * delta);
        Sr[u].y = fmaf(Sr[u].y, gb.x, kr[u].y * delta);
        Sr[u].z = fmaf(Sr[u].z, gb.x, kr[u].z * delta);
        Sr[u].w = fmaf(Sr[u].w, gb.x, kr[u].w * delta);
        a0 = fmaf(Sr[u].x, qr.x, a0);
        a1 = fmaf(Sr[u].y, qr.y, a1);
        a2 = fmaf(Sr[u].z, qr.z, a2);
        a3 = fmaf(Sr[u].w, qr.w, a3);
      }
      po = (a0 + a1) + (a2 + a3);
      t_prev = (size_t)t0 + (size_t)j * L::TT + (size_t)i;
      have_prev = true;
    }
    __syncthreads(); /* every warp is done with buf before the next iteration refills it */
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
  float dummy = 0.0f;
  gl_allreduce2<LPC>(po, dummy);
  if (p == 0 && cv) ocol[t_prev * v_ld] = po;
#pragma unroll
  for (int u = 0; u < NU; u++) {
    const int r = 4 * (p + LPC * u);
    if (!cv) break;
    if (r + 0 < d_k) S[(size_t)(r + 0) * d_v + c] = Sr[u].x;
    if (r + 1 < d_k) S[(size_t)(r + 1) * d_v + c] = Sr[u].y;
    if (r + 2 < d_k) S[(size_t)(r + 2) * d_v + c] = Sr[u].z;
    if (r + 3 < d_k) S[(size_t)(r + 3) * d_v + c] = Sr[u].w;
  }
}

KC_API int kc_gdn_scan_long_ok(int d_k, int d_v) { return d_k > 0 && d_k <= 256 && d_v > 0 && d_v <= 1024; }

template <int LPC, int NU>
static int gl_launch(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k, int d_v,
                     int min_tok, int skip_from) {
  constexpr int CB = GL_CB, DKP = 4 * LPC * NU;
  const size_t smem = sizeof(float) * 2 * (size_t)gl_layout<DKP, CB>::BUF;
  const dim3 grid((unsigned)((d_v + CB - 1) / CB), (unsigned)n_v, (unsigned)b.n_seq);
  kc_launch(gdn_long_kernel<LPC, NU>, grid, LPC * 32, smem, st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k,
                                                               d_v, min_tok, skip_from);
  return (int)cudaGetLastError();
}

KC_API int kc_gdn_scan_long(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                            int d_v, int min_tok, int skip_from, int lpc) {
  if (!kc_gdn_scan_long_ok(d_k, d_v) || n_k <= 0 || n_v <= 0 || n_v % n_k || (lpc != 4 && lpc != 8))
    return (int)cudaErrorInvalidValue;
  if (b.n_seq <= 0) return 0;
  const int nu = (d_k + 4 * lpc - 1) / (4 * lpc); /* float4 row groups per lane */
#define GL_ARGS st, b, ssm, n_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v, min_tok, skip_from
  if (lpc == 4) {
    if (nu <= 1) return gl_launch<4, 1>(GL_ARGS);
    if (nu <= 2) return gl_launch<4, 2>(GL_ARGS);
    if (nu <= 4) return gl_launch<4, 4>(GL_ARGS);
    if (nu <= 8) return gl_launch<4, 8>(GL_ARGS);
    return gl_launch<4, 16>(GL_ARGS);
  }
  if (nu <= 1) return gl_launch<8, 1>(GL_ARGS);
  if (nu <= 2) return gl_launch<8, 2>(GL_ARGS);
  if (nu <= 4) return gl_launch<8, 4>(GL_ARGS);
  return gl_launch<8, 8>(GL_ARGS);
#undef GL_ARGS
}
