/* kernels/matvec_dec.cuh — lane decoders of kernels/matvec.cu (device-only header).
 *
 * A warp works on one 256-element column chunk ("kb") of a weight row per step: lane L decodes
 * 8 weights, 4 at chunk elements xo0(L)..+3 and 4 at xo1(L)..+3, so that the warp's float4 x
 * loads at xo0 (and at xo1) cover whole 128-byte lines. Weights equal dt_dequant_row
 * (format/dtype.c) up to the contraction of d*q - m into one fma.
 *
 * Interface of a decoder D:
 *   COOP      true: per-block scales are decoded cooperatively (D::sub_scale, see matvec.cu)
 *   BB        bytes of weight row per chunk
 *   nkb(cols) chunks per row;  ok(kb, L, cols) lane has data in chunk kb (false only in a tail)
 *   raw       what a lane loads per (row, chunk); load(r, row, kb, L, ok) issues the loads
 *   decode(r, [scales,] L, w[8]) -> w[0..3] at xo0, w[4..7] at xo1 */
#ifndef GANTRY_KERNELS_MATVEC_DEC_CUH
#define GANTRY_KERNELS_MATVEC_DEC_CUH

#include "kernels/quant.cuh"

#ifdef __CUDACC__
/* byte i of v as an exact float minus bias: 0x4B0000bb is 2^23 + bb */
__device__ __forceinline__ float mv_byte_f(uint32_t v, int i, float bias) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (unsigned)i)) - bias;
}
/* 32 bits from a 2-byte aligned address */
__device__ __forceinline__ uint32_t mv_ld32_a2(const uint8_t *p) {
  const uint16_t *q = (const uint16_t *)p;
  return (uint32_t)__ldg(q) | ((uint32_t)__ldg(q + 1) << 16);
}
#define MV_M23 8388608.0f /* 2^23 */

/* Q4_K: lane L reads qs word L (bytes 4L..4L+3): j = L/8 (pair of sub-blocks 2j, 2j+1),
 * low nibbles = elements 64j + 4(L%8) + 0..3 (sub-block 2j), high nibbles +32 (2j+1). */
struct mv_q4k {
  static constexpr bool COOP = true;
  static constexpr int BB = 144;
  struct raw { uint32_t q; };
  __device__ static int64_t nkb(int64_t cols) { return cols >> 8; }
  __device__ static bool ok(int64_t, int, int64_t) { return true; }
  __device__ static int xo0(int L) { return 64 * (L >> 3) + 4 * (L & 7); }
  __device__ static int xo1(int L) { return xo0(L) + 32; }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int L, bool) {
    r.q = __ldg((const uint32_t *)(row + kb * BB + 16) + L);
  }
  /* header (d, dmin, scales[12]) of a block: 16-byte aligned */
  __device__ static uint4 hdr(const uint8_t *row, int64_t kb) { return __ldg((const uint4 *)(row + kb * BB)); }
  /* (d * sc_k, dmin * m_k) of sub-block k (0..7), get_scale_min_k4 on the header words */
  __device__ static float2 sub_scale(uint4 h, int k) {
    const unsigned sh = 8u * (unsigned)(k & 3);
    const uint32_t a = ((k < 4 ? h.y : h.z) >> sh) & 0xffu;  /* s[k] */
    const uint32_t b = ((k < 4 ? h.z : h.w) >> sh) & 0xffu;  /* s[k + 4] */
    const uint32_t c = (h.y >> sh) & 0xffu;                   /* s[k - 4] (k >= 4) */
    uint32_t sc, m;
    if (k < 4) {
      sc = a & 63u;
      m = b & 63u;
    } else {
      sc = (b & 0x0fu) | ((c >> 6) << 4);
      m = (b >> 4) | ((a >> 6) << 4);
    }
    const float d = kc_h2f((uint16_t)(h.x & 0xffffu)), dmin = kc_h2f((uint16_t)(h.x >> 16));
    return make_float2(d * (float)sc, dmin * (float)m);
  }
  /* s = (d*sc, d*sc', dmin*m, dmin*m') of sub-blocks 2j, 2j+1 */
  __device__ static void decode(const raw &r, float4 s, int, float *w) {
    const uint32_t lo = r.q & 0x0f0f0f0fu, hi = (r.q >> 4) & 0x0f0f0f0fu;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = fmaf(s.x, mv_byte_f(lo, i, MV_M23), -s.z);
      w[4 + i] = fmaf(s.y, mv_byte_f(hi, i, MV_M23), -s.w);
    }
  }
};

/* Q5_K: as Q4_K (header identical) with qh[32] at 16 and qs at 48; the fifth bit of element
 * 64j + l is bit 2j of qh[l] (low nibble) or 2j+1 (high nibble). */
struct mv_q5k {
  static constexpr bool COOP = true;
  static constexpr int BB = 176;
  struct raw { uint32_t q, h; };
  __device__ static int64_t nkb(int64_t cols) { return cols >> 8; }
  __device__ static bool ok(int64_t, int, int64_t) { return true; }
  __device__ static int xo0(int L) { return mv_q4k::xo0(L); }
  __device__ static int xo1(int L) { return mv_q4k::xo1(L); }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int L, bool) {
    const uint8_t *b = row + kb * BB;
    r.q = __ldg((const uint32_t *)(b + 48) + L);
    r.h = __ldg((const uint32_t *)(b + 16) + (L & 7));
  }
  __device__ static uint4 hdr(const uint8_t *row, int64_t kb) { return __ldg((const uint4 *)(row + kb * BB)); }
  __device__ static float2 sub_scale(uint4 h, int k) { return mv_q4k::sub_scale(h, k); }
  __device__ static void decode(const raw &r, float4 s, int L, float *w) {
    const unsigned j2 = 2u * (unsigned)(L >> 3);
    const uint32_t lo = (r.q & 0x0f0f0f0fu) | (((r.h >> j2) & 0x01010101u) << 4);
    const uint32_t hi = ((r.q >> 4) & 0x0f0f0f0fu) | (((r.h >> (j2 + 1u)) & 0x01010101u) << 4);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = fmaf(s.x, mv_byte_f(lo, i, MV_M23), -s.z);
      w[4 + i] = fmaf(s.y, mv_byte_f(hi, i, MV_M23), -s.w);
    }
  }
};

/* Q6_K (210 B blocks, only 2-byte aligned): lane L = 16h + 8kg + m takes l = 4m..4m+3 of
 * half h for k = kg (low nibbles of ql[64h + 32kg + l], qh bits 2kg; elements
 * 128h + 32kg + l) and k = kg + 2 (high nibbles, qh bits 2kg + 4; elements +64).
 * Scales sc[8h + 2k + m/4]. */
struct mv_q6k {
  static constexpr bool COOP = false;
  static constexpr int BB = 210;
  struct raw { uint32_t ql, qh; int8_t s0, s1; uint16_t d; };
  __device__ static int64_t nkb(int64_t cols) { return cols >> 8; }
  __device__ static bool ok(int64_t, int, int64_t) { return true; }
  __device__ static int xo0(int L) { return 128 * (L >> 4) + 32 * ((L >> 3) & 1) + 4 * (L & 7); }
  __device__ static int xo1(int L) { return xo0(L) + 64; }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int L, bool) {
    const uint8_t *b = row + kb * BB;
    const int h = L >> 4, kg = (L >> 3) & 1, m = L & 7;
    r.ql = mv_ld32_a2(b + 64 * h + 32 * kg + 4 * m);
    r.qh = mv_ld32_a2(b + 128 + 32 * h + 4 * m);
    const int8_t *sc = (const int8_t *)(b + 192 + 8 * h + 2 * kg + (m >> 2));
    r.s0 = __ldg(sc);
    r.s1 = __ldg(sc + 4);
    r.d = __ldg((const uint16_t *)(b + 208));
  }
  __device__ static void decode(const raw &r, int L, float *w) {
    const unsigned hs = 2u * (unsigned)((L >> 3) & 1);
    const uint32_t q0 = (r.ql & 0x0f0f0f0fu) | (((r.qh >> hs) & 0x03030303u) << 4);
    const uint32_t q1 = ((r.ql >> 4) & 0x0f0f0f0fu) | (((r.qh >> (hs + 4u)) & 0x03030303u) << 4);
    const float d = kc_h2f(r.d), ds0 = d * (float)r.s0, ds1 = d * (float)r.s1;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = ds0 * mv_byte_f(q0, i, MV_M23 + 32.0f); /* q - 32, exact */
      w[4 + i] = ds1 * mv_byte_f(q1, i, MV_M23 + 32.0f);
    }
  }
};

/* Q8_0 (34 B blocks, 2-byte aligned), 8 blocks per chunk: lane L takes elements 4L..4L+3
 * (block L/8) and 128 + 4L..+3 (block 4 + L/8). Needs cols % 256 == 0. */
struct mv_q80 {
  static constexpr bool COOP = false;
  static constexpr int BB = 272;
  struct raw { uint32_t qa, qb; uint16_t da, db; };
  __device__ static int64_t nkb(int64_t cols) { return cols >> 8; }
  __device__ static bool ok(int64_t, int, int64_t) { return true; }
  __device__ static int xo0(int L) { return 4 * L; }
  __device__ static int xo1(int L) { return 128 + 4 * L; }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int L, bool) {
    const uint8_t *a = row + kb * BB + 34 * (L >> 3), *b = a + 4 * 34;
    r.da = __ldg((const uint16_t *)a);
    r.db = __ldg((const uint16_t *)b);
    r.qa = mv_ld32_a2(a + 2 + 4 * (L & 7));
    r.qb = mv_ld32_a2(b + 2 + 4 * (L & 7));
  }
  __device__ static void decode(const raw &r, int, float *w) {
    const float da = kc_h2f(r.da), db = kc_h2f(r.db);
    const uint32_t qa = r.qa ^ 0x80808080u, qb = r.qb ^ 0x80808080u; /* int8 + 128 */
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w[i] = da * mv_byte_f(qa, i, MV_M23 + 128.0f);
      w[4 + i] = db * mv_byte_f(qb, i, MV_M23 + 128.0f);
    }
  }
};

/* Any type (kc_deq): lane L decodes elements 8L..8L+7 of the chunk; the last chunk may be
 * partial (cols % 8 == 0). Used for F32/F16/BF16 and for quantized rows the fast decoders
 * cannot take (alignment, Q8_0 with cols % 256 != 0). */
template <int T> struct mv_gen {
  static constexpr bool COOP = false;
  static constexpr int BB = 0;
  struct raw { float v[8]; };
  __device__ static int64_t nkb(int64_t cols) { return (cols + 255) >> 8; }
  __device__ static bool ok(int64_t kb, int L, int64_t cols) { return kb * 256 + 8 * L < cols; }
  __device__ static int xo0(int L) { return 8 * L; }
  __device__ static int xo1(int L) { return 8 * L + 4; }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int L, bool ok) {
    if (ok) {
      kc_deq<T>::chunk(row, kb * 32 + L, r.v);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) r.v[i] = 0.0f;
    }
  }
  __device__ static void decode(const raw &r, int, float *w) {
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = r.v[i];
  }
};
#endif

#endif
