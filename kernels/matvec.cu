/* kernels/matvec.cu — see matvec.cuh.
 *
 * Block of MV_WARPS warps. A warp owns R weight rows ("slots": R output features, or R/2
 * features x {gate, up} for swiglu) and one of S column parts; it walks 256-element chunks
 * kb = part, part + S, ... For each chunk a lane decodes 8 weights per slot once (the lane
 * mapping of kernels/matvec_dec.cuh makes every warp-wide float4 x load cover whole lines),
 * then reuses each x float4 for the R slots and each weight for the n rows: fp32 fma, in a
 * fixed order per (slot, row). The R*NR per-lane sums are reduced across the warp by
 * halving exchanges (one tree for every value), then across the S parts in shared memory in
 * part order. The result of one output feature depends only on (decoder, S, its weight row,
 * x), never on R, NR or its neighbours, so kc_matvec, kc_matvec_multi and kc_matvec_swiglu
 * give bit-identical products (S is mv_split of the weight's own n_out).
 * Q4_K / Q6_K with n <= KC_MVM_MAX_ROWS (2) rows go to the tensor-core kernel of kernels/matvec_mma.cu instead
 * (per weight, kc_mvm_ok; GANTRY_MATVEC_MMA=0 turns it off). */
#include "kernels/matvec.cuh"
#include "kernels/matvec_dec.cuh"
#include "kernels/matvec_mma.cuh"

#define MV_WARPS 8

/* Launch description: segments map to consecutive block ranges [blk_end[s-1], blk_end[s]). */
typedef struct {
  const uint8_t *w[KC_MATVEC_MAX_SEGS]; /* swiglu: w[0] gate, w[1] up (segment 0 only) */
  float *out[KC_MATVEC_MAX_SEGS];
  int64_t n_out[KC_MATVEC_MAX_SEGS];
  size_t row_bytes[KC_MATVEC_MAX_SEGS];
  int split[KC_MATVEC_MAX_SEGS];
  unsigned blk_end[KC_MATVEC_MAX_SEGS];
  int n_seg, swiglu;
} mv_args_t;

/* weight rows per warp and chunks in flight per loop turn (register budget by row count) */
template <int NR> struct mv_cfg {
  static constexpr int R = NR <= 16 ? 4 : 2;
  static constexpr int U = NR <= 2 ? 2 : 1;
};

/* v[CNT] per lane -> after the 5 exchange levels lane L holds full warp sums: of value
 * i + (V/32) L in v[i] (V >= 32), or of value L / (32 / V) in v[0] (V < 32). Every value goes
 * through the same butterfly (pairs of lanes differing in bit 16, then 8, ...). */
template <int CNT, int O> struct mv_red {
  __device__ __forceinline__ static void run(float *v, int lane) {
    if constexpr (O > 0) {
      if constexpr (CNT > 1) {
        constexpr int H = CNT / 2;
        const bool up = (lane & O) != 0;
#pragma unroll
        for (int i = 0; i < H; i++) {
          const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
          v[i] = keep + __shfl_xor_sync(KC_FULL_MASK, send, O);
        }
        mv_red<H, O / 2>::run(v, lane);
      } else {
        v[0] += __shfl_xor_sync(KC_FULL_MASK, v[0], O);
        mv_red<1, O / 2>::run(v, lane);
      }
    }
  }
};

template <class D, int NR>
__global__ void __launch_bounds__(MV_WARPS * 32)
    mv_kernel(const mv_args_t a, const float *__restrict__ x, int64_t cols, int n) {
  constexpr int R = mv_cfg<NR>::R, U = mv_cfg<NR>::U, V = R * NR;
  __shared__ float red[MV_WARPS][V];
  __shared__ float4 scs[D::COOP ? MV_WARPS : 1][R][4];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  int sg = 0;
  while (sg + 1 < a.n_seg && blockIdx.x >= a.blk_end[sg]) sg++;
  const unsigned blk = blockIdx.x - (sg ? a.blk_end[sg - 1] : 0u);
  const int S = a.split[sg], gpb = MV_WARPS / S, part = wi % S;
  const int fpw = a.swiglu ? R / 2 : R; /* output features per warp */
  const int64_t n_out = a.n_out[sg], grp0 = (int64_t)blk * gpb;
  const size_t rb = a.row_bytes[sg];

  /* weight row of slot f (rows past n_out read row n_out - 1 and are not written) */
  const uint8_t *wseg = a.w[sg], *wup = a.w[1];
  auto slot_row = [&](int f) -> const uint8_t * {
    int64_t o = (grp0 + wi / S) * fpw + (a.swiglu ? f >> 1 : f);
    if (o > n_out - 1) o = n_out - 1;
    return (a.swiglu && (f & 1) ? wup : wseg) + (size_t)o * rb;
  };
  const uint8_t *wr[R];
#pragma unroll
  for (int f = 0; f < R; f++) wr[f] = slot_row(f);
  /* COOP: lane 8f + k (f < R) decodes the scales of sub-block k of slot f's block */
  const uint8_t *whdr = slot_row(min(lane >> 3, R - 1));

  float acc[R][NR];
#pragma unroll
  for (int f = 0; f < R; f++)
#pragma unroll
    for (int r = 0; r < NR; r++) acc[f][r] = 0.0f;

  const int64_t nkb = D::nkb(cols);
  const int xo0 = D::xo0(lane), xo1 = D::xo1(lane);
  for (int64_t kb0 = part; kb0 < nkb; kb0 += (int64_t)S * U) {
    typename D::raw rw[U][R];
    uint4 hd[U];
    /* loads of U chunks x R rows first, so that they are in flight together */
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t kb = kb0 + (int64_t)u * S;
      if (kb < nkb) {
        const bool ok = D::ok(kb, lane, cols);
#pragma unroll
        for (int f = 0; f < R; f++) D::load(rw[u][f], wr[f], kb, lane, ok);
        if constexpr (D::COOP) hd[u] = D::hdr(whdr, kb);
      }
    }
    /* PDL: the first chunks' weight loads are in flight before the previous kernel's x is read */
    if (kb0 == part) kc_pdl_wait(), kc_pdl_trigger();
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t kb = kb0 + (int64_t)u * S;
      if (kb >= nkb) break; /* warp-uniform */
      const bool ok = D::ok(kb, lane, cols);
      float wv[R][8];
      if constexpr (D::COOP) {
        __syncwarp(); /* previous chunk's scales read by every lane */
        if (lane < 8 * R) {
          const int k = lane & 7;
          const float2 s = D::sub_scale(hd[u], k);
          float *p = &scs[wi][lane >> 3][0].x;
          p[4 * (k >> 1) + (k & 1)] = s.x;
          p[4 * (k >> 1) + 2 + (k & 1)] = s.y;
        }
        __syncwarp();
#pragma unroll
        for (int f = 0; f < R; f++) D::decode(rw[u][f], scs[wi][f][lane >> 3], lane, wv[f]);
      } else {
#pragma unroll
        for (int f = 0; f < R; f++) D::decode(rw[u][f], lane, wv[f]);
      }
#pragma unroll
      for (int r = 0; r < NR; r++) {
        if (r < n) {
          float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
          if (ok) {
            const float *xr = x + (size_t)r * cols + kb * 256;
            x0 = __ldg((const float4 *)(xr + xo0));
            x1 = __ldg((const float4 *)(xr + xo1));
          }
#pragma unroll
          for (int f = 0; f < R; f++) {
            float s = acc[f][r];
            s = fmaf(wv[f][0], x0.x, s);
            s = fmaf(wv[f][1], x0.y, s);
            s = fmaf(wv[f][2], x0.z, s);
            s = fmaf(wv[f][3], x0.w, s);
            s = fmaf(wv[f][4], x1.x, s);
            s = fmaf(wv[f][5], x1.y, s);
            s = fmaf(wv[f][6], x1.z, s);
            s = fmaf(wv[f][7], x1.w, s);
            acc[f][r] = s;
          }
        }
      }
    }
  }

  kc_pdl_wait(); /* warps without a chunk (part >= nkb) wait here; a no-op for the others */
  kc_pdl_trigger();
  /* warp sums of value f * NR + r, then the S parts in order */
  float v[V];
#pragma unroll
  for (int f = 0; f < R; f++)
#pragma unroll
    for (int r = 0; r < NR; r++) v[f * NR + r] = acc[f][r];
  mv_red<V, 16>::run(v, lane);
  if constexpr (V >= 32) {
#pragma unroll
    for (int i = 0; i < V / 32; i++) red[wi][i + (V / 32) * lane] = v[i];
  } else {
    if ((lane & (32 / V - 1)) == 0) red[wi][lane / (32 / V)] = v[0];
  }
  __syncthreads();
  float *out = a.out[sg];
  for (int t = threadIdx.x; t < gpb * V; t += MV_WARPS * 32) {
    const int g = t / V, idx = t % V, f = idx / NR, r = idx % NR;
    if (r >= n) continue;
    float s = red[g * S][idx];
    for (int p = 1; p < S; p++) s += red[g * S + p][idx];
    if (!a.swiglu) {
      const int64_t o = (grp0 + g) * R + f;
      if (o < n_out) out[(size_t)r * n_out + o] = s;
    } else if ((f & 1) == 0) {
      float u = red[g * S][idx + NR];
      for (int p = 1; p < S; p++) u += red[g * S + p][idx + NR];
      const int64_t o = (grp0 + g) * (R / 2) + (f >> 1);
      if (o < n_out) out[(size_t)r * n_out + o] = s / (1.0f + expf(-s)) * u; /* as kernels/swiglu.cu */
    }
  }
}

/* Column parts per output feature: enough warps to fill the GPU (~4096) for small n_out, never
 * more parts than chunks. A function of the weight's own shape only (equal products across
 * the three entry points). */
static int mv_split(int64_t n_out, int64_t nkb, int R) {
  const int64_t groups = (n_out + R - 1) / R;
  int S = 1;
  while (S < MV_WARPS && groups * S < 4096 && 2 * S <= nkb) S *= 2;
  return S;
}

template <class D, int NR>
static int mv_go(cudaStream_t st, mv_args_t a, int64_t cols, const float *x, int n) {
  constexpr int R = mv_cfg<NR>::R;
  const int64_t nkb = (cols + 255) / 256;
  const int fpw = a.swiglu ? R / 2 : R;
  int64_t blocks = 0;
  for (int s = 0; s < a.n_seg; s++) {
    a.split[s] = mv_split(a.n_out[s], nkb, R);
    const int64_t groups = (a.n_out[s] + fpw - 1) / fpw, gpb = MV_WARPS / a.split[s];
    blocks += (groups + gpb - 1) / gpb;
    if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
    a.blk_end[s] = (unsigned)blocks;
  }
  if (blocks == 0) return 0;
  kc_launch(mv_kernel<D, NR>, (unsigned)blocks, MV_WARPS * 32, 0, st, a, x, cols, n);
  return (int)cudaGetLastError();
}

template <class D> static int mv_rows(cudaStream_t st, const mv_args_t &a, int64_t cols, const float *x, int n) {
  if (n <= 1) return mv_go<D, 1>(st, a, cols, x, n);
  if (n <= 2) return mv_go<D, 2>(st, a, cols, x, n);
  if (n <= 4) return mv_go<D, 4>(st, a, cols, x, n);
  if (n <= 8) return mv_go<D, 8>(st, a, cols, x, n);
  if (n <= 16) return mv_go<D, 16>(st, a, cols, x, n);
  return mv_go<D, 32>(st, a, cols, x, n);
}

/* 1 if the fast decoder of type can read this weight (alignment, shape) */
static int mv_fast_ok(int type, const void *w, size_t row_bytes, int64_t cols) {
  const uintptr_t p = (uintptr_t)w;
  switch (type) {
    case GT_TYPE_Q4_K:
    case GT_TYPE_Q5_K: return (p & 15) == 0 && row_bytes % 16 == 0;
    case GT_TYPE_Q6_K: return (p & 1) == 0 && row_bytes % 2 == 0;
    case GT_TYPE_Q8_0: return cols % 256 == 0 && (p & 1) == 0 && row_bytes % 2 == 0;
    default: return 0;
  }
}

static int mv_dispatch(int type, int fast, cudaStream_t st, const mv_args_t &a, int64_t cols, const float *x,
                       int n) {
  if (fast) {
    switch (type) {
      case GT_TYPE_Q4_K: return mv_rows<mv_q4k>(st, a, cols, x, n);
      case GT_TYPE_Q5_K: return mv_rows<mv_q5k>(st, a, cols, x, n);
      case GT_TYPE_Q6_K: return mv_rows<mv_q6k>(st, a, cols, x, n);
      case GT_TYPE_Q8_0: return mv_rows<mv_q80>(st, a, cols, x, n);
      default: break;
    }
  }
#define MV_CASE(T) return mv_rows<mv_gen<T>>(st, a, cols, x, n)
  KC_TYPE_SWITCH(type, MV_CASE)
#undef MV_CASE
  return (int)cudaErrorInvalidValue;
}

static int mv_check(int64_t cols, const float *x, int n) {
  return n >= 1 && n <= KC_MATVEC_MAX_ROWS && cols > 0 && cols % 8 == 0 && ((uintptr_t)x & 15) == 0;
}

KC_API int kc_matvec_multi(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, int64_t cols,
                           const float *x, int n) {
  if (n_seg < 1 || n_seg > KC_MATVEC_MAX_SEGS || !mv_check(cols, x, n)) return (int)cudaErrorInvalidValue;
  mv_args_t a = {};
  kc_mv_seg_t ms[KC_MATVEC_MAX_SEGS];
  int n_fast = 0, n_mma = 0, m = 0;
  for (int s = 0; s < n_seg; s++) {
    if (segs[s].n_out < 0) return (int)cudaErrorInvalidValue;
    if (segs[s].n_out == 0) continue;
    n_fast += mv_fast_ok(type, segs[s].w, segs[s].row_bytes, cols);
    n_mma += kc_mvm_ok(type, segs[s].w, segs[s].row_bytes, cols, n);
    ms[m] = segs[s];
    a.w[m] = (const uint8_t *)segs[s].w;
    a.out[m] = segs[s].out;
    a.n_out[m] = segs[s].n_out;
    a.row_bytes[m] = segs[s].row_bytes;
    m++;
  }
  if (m == 0) return 0;
  a.n_seg = m;
  if (n_mma == m) return kc_mvm_launch(st, type, m, ms, NULL, cols, x, n);
  /* mixed decoders would not match kc_matvec per weight: one launch per weight then */
  if ((n_fast != 0 && n_fast != m) || n_mma != 0) {
    for (int s = 0; s < m; s++) {
      const int rc = kc_matvec(st, type, a.w[s], a.n_out[s], cols, a.row_bytes[s], x, a.out[s], n);
      if (rc) return rc;
    }
    return 0;
  }
  return mv_dispatch(type, n_fast == m, st, a, cols, x, n);
}

/* one segment of kc_matvec_multi: the tensor-core path when kc_mvm_ok, else the fast or the
 * generic decoder (a single weight is never "mixed") */
KC_API int kc_matvec(cudaStream_t st, int type, const void *w, int64_t n_out, int64_t cols, size_t row_bytes,
                     const float *x, float *out, int n) {
  const kc_mv_seg_t seg = {w, out, n_out, row_bytes};
  return kc_matvec_multi(st, type, 1, &seg, cols, x, n);
}

KC_API int kc_matvec_swiglu(cudaStream_t st, int type, const void *wg, const void *wu, int64_t n_out, int64_t cols,
                            size_t row_bytes, const float *x, float *out, int n) {
  if (!mv_check(cols, x, n) || n_out < 0) return (int)cudaErrorInvalidValue;
  if (n_out == 0) return 0;
  /* one decoder for both weights: the fast one only if both can take it */
  const int fast = mv_fast_ok(type, wg, row_bytes, cols) && mv_fast_ok(type, wu, row_bytes, cols);
  if (kc_mvm_ok(type, wg, row_bytes, cols, n) && kc_mvm_ok(type, wu, row_bytes, cols, n)) {
    const kc_mv_seg_t seg = {wg, out, n_out, row_bytes};
    return kc_mvm_launch(st, type, 1, &seg, wu, cols, x, n);
  }
  mv_args_t a = {};
  a.w[0] = (const uint8_t *)wg;
  a.w[1] = (const uint8_t *)wu;
  a.out[0] = out;
  a.n_out[0] = n_out;
  a.row_bytes[0] = row_bytes;
  a.n_seg = 1;
  a.swiglu = 1;
  return mv_dispatch(type, fast, st, a, cols, x, n);
}
