/* kernels/quant.cuh — device decoding of GGUF weight rows, 8 consecutive elements at a time
 * (the "chunk" every weight kernel works on). Chunk c of a row covers elements [8c, 8c + 8).
 * Results equal dt_dequant_row (format/dtype.c) bit for bit. Device-only header. */
#ifndef GANTRY_KERNELS_QUANT_CUH
#define GANTRY_KERNELS_QUANT_CUH

#include "kernels/common.cuh"
#include "format/dtype.h"

#ifdef __CUDACC__
__device__ __forceinline__ uint16_t kc_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* ggml's get_scale_min_k4 */
__device__ __forceinline__ void kc_k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <int T> struct kc_deq;

template <> struct kc_deq<GT_TYPE_F32> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    const float4 *p = (const float4 *)(row + c * 32);
    float4 a = p[0], b = p[1];
    y[0] = a.x; y[1] = a.y; y[2] = a.z; y[3] = a.w; y[4] = b.x; y[5] = b.y; y[6] = b.z; y[7] = b.w;
  }
};
template <> struct kc_deq<GT_TYPE_F16> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    uint4 u = *(const uint4 *)(row + c * 16);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      y[2 * i] = kc_h2f((uint16_t)(w[i] & 0xffff));
      y[2 * i + 1] = kc_h2f((uint16_t)(w[i] >> 16));
    }
  }
};
template <> struct kc_deq<GT_TYPE_BF16> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    uint4 u = *(const uint4 *)(row + c * 16);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      y[2 * i] = __uint_as_float(w[i] << 16);
      y[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};
/* Q8_0: {f16 d; int8 qs[32]} (34 B); chunk = quarter of a block */
template <> struct kc_deq<GT_TYPE_Q8_0> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    const uint8_t *b = row + (c >> 2) * 34;
    const float d = kc_h2f(*(const uint16_t *)b);
    const uint16_t *q = (const uint16_t *)(b + 2 + 8 * (c & 3)); /* 2-byte aligned */
#pragma unroll
    for (int i = 0; i < 4; i++) {
      uint16_t v = q[i];
      y[2 * i] = d * (float)(int8_t)(v & 0xff);
      y[2 * i + 1] = d * (float)(int8_t)(v >> 8);
    }
  }
};
/* Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]} (144 B / 256) */
template <> struct kc_deq<GT_TYPE_Q4_K> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    const uint8_t *b = row + (c >> 5) * 144;
    const int e = (int)(c & 31) * 8, j = e >> 6, hi = (e >> 5) & 1, l0 = e & 31, sub = e >> 5;
    const float d = kc_h2f(*(const uint16_t *)b), dmin = kc_h2f(*(const uint16_t *)(b + 2));
    int sc, m;
    kc_k4_scale_min(b + 4, sub, &sc, &m);
    const float ds = d * (float)sc, dm = dmin * (float)m;
    uint2 u = *(const uint2 *)(b + 16 + 32 * j + l0);
    uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int i = 0; i < 8; i++) {
      uint32_t byte = (w[i >> 2] >> (8 * (i & 3))) & 0xff;
      y[i] = ds * (float)(hi ? byte >> 4 : byte & 0x0f) - dm;
    }
  }
};
/* Q5_K: {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} (176 B / 256) */
template <> struct kc_deq<GT_TYPE_Q5_K> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    const uint8_t *b = row + (c >> 5) * 176;
    const int e = (int)(c & 31) * 8, j = e >> 6, hi = (e >> 5) & 1, l0 = e & 31, sub = e >> 5;
    const float d = kc_h2f(*(const uint16_t *)b), dmin = kc_h2f(*(const uint16_t *)(b + 2));
    int sc, m;
    kc_k4_scale_min(b + 4, sub, &sc, &m);
    const float ds = d * (float)sc, dm = dmin * (float)m;
    const unsigned sh = 2u * (unsigned)j + (unsigned)hi;
    uint2 u = *(const uint2 *)(b + 48 + 32 * j + l0);
    uint2 h = *(const uint2 *)(b + 16 + l0);
    uint32_t w[2] = {u.x, u.y}, hw[2] = {h.x, h.y};
#pragma unroll
    for (int i = 0; i < 8; i++) {
      uint32_t byte = (w[i >> 2] >> (8 * (i & 3))) & 0xff;
      uint32_t hb = (hw[i >> 2] >> (8 * (i & 3))) & 0xff;
      uint32_t q = (hi ? byte >> 4 : byte & 0x0f) | (((hb >> sh) & 1u) << 4);
      y[i] = ds * (float)(int)q - dm;
    }
  }
};
/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B / 256). Element 128h + 32k + l:
 * low bits ql[64h + l + 32(k&1)] nibble k>>1, high bits qh[32h + l] bits 2k, scale sc[8h + 2k + l/16]. */
template <> struct kc_deq<GT_TYPE_Q6_K> {
  __device__ __forceinline__ static void chunk(const uint8_t *row, int64_t c, float *y) {
    const uint8_t *b = row + (c >> 5) * 210;
    const int e = (int)(c & 31) * 8, h = e >> 7, k = (e >> 5) & 3, l0 = e & 31;
    const float d = kc_h2f(kc_ld16(b + 208));
    const float ds = d * (float)(int8_t)b[192 + 8 * h + 2 * k + (l0 >> 4)];
    const uint16_t *lq = (const uint16_t *)(b + 64 * h + l0 + 32 * (k & 1));
    const uint16_t *hq = (const uint16_t *)(b + 128 + 32 * h + l0);
    const unsigned nsh = 4u * (unsigned)(k >> 1), hsh = 2u * (unsigned)k;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      uint32_t lw = lq[i], hw = hq[i];
#pragma unroll
      for (int s = 0; s < 2; s++) {
        uint32_t lb = (lw >> (8 * s)) & 0xff, hb = (hw >> (8 * s)) & 0xff;
        uint32_t q = ((lb >> nsh) & 0x0fu) | (((hb >> hsh) & 3u) << 4);
        y[2 * i + s] = ds * (float)((int)q - 32);
      }
    }
  }
};

/* Calls F::template run<T>() for the runtime type t; returns 0, or -1 for an unsupported type. */
#define KC_TYPE_SWITCH(t, MACRO)      \
  switch (t) {                        \
  case GT_TYPE_F32: MACRO(GT_TYPE_F32); break;   \
  case GT_TYPE_F16: MACRO(GT_TYPE_F16); break;   \
  case GT_TYPE_BF16: MACRO(GT_TYPE_BF16); break; \
  case GT_TYPE_Q8_0: MACRO(GT_TYPE_Q8_0); break; \
  case GT_TYPE_Q4_K: MACRO(GT_TYPE_Q4_K); break; \
  case GT_TYPE_Q5_K: MACRO(GT_TYPE_Q5_K); break; \
  case GT_TYPE_Q6_K: MACRO(GT_TYPE_Q6_K); break; \
  default: return (int)cudaErrorInvalidValue;    \
  }
#endif

#endif
