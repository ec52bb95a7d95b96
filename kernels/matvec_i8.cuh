/* kernels/matvec_i8.cuh — the integer arithmetic of the batch-1 Q4_K product (kernels/matvec_mma.cu
 * at one row of x): x in int8 digits per 256-element
 * chunk, the weights' 4-bit q exact in u8, integer mma.sync into exact int32 per sub-block,
 * scales in fp32. Device-side, not a public header.
 *
 * x digits. For chunk c (256 elements) of x row r, E = the biased exponent of max|x| over the
 * chunk (clamped to >= 7), s = 2^(E - 133), y = x / s (|y| < 128, exact: a power of 2), Y =
 * rint(y * 2^14) (|Y| < 2^21; one fp32 fma with 768: the sum's mantissa is 2^22 + Y), and Y =
 * 2^14 D + 2^7 d1 + d0 with d0, d1 in [0, 127], D in [-128, 127]: three int8 digits. x = s 2^-14 Y
 * + e, |e| <= s 2^-15 <= 2^-21 max|x| of the chunk (a NaN or an infinity in the chunk: s = NaN, so
 * the product is NaN). The B columns (n = 8) of the mma are d0, d1, D, then zeros; lane (g, tig)
 * gets C columns 2tig, 2tig + 1: tig 0 (d0, d1) v = c0 + 128 c1 at weight s 2^-14, tig 1 (D, 0) v =
 * c0 at weight s (mvi_fweight), tig 2, 3 zeros.
 *
 * Weights: one mma.m16n8k32 (u8 x s8) per 32-element sub-block; lane (g, tig) takes the bytes
 * qs[32j + 8tig .. + 7] of rows g and g + 8 (mvm_q4k::raw, uint2 q[j]): k-slots 4tig + i and
 * 16 + 4tig + i are elements 8tig + i and 8tig + 4 + i (i < 4) of sub-blocks 2j (low nibbles, q &
 * 0x0f0f0f0f) and 2j + 1 (high nibbles kept in place, q & 0xf0f0f0f0 = 16 q: its scale slot
 * carries 1/16). Every sum is exact in int32 (|c| <= 32 * 240 * 128, |v| < 2^27), converted to fp32
 * once per sub-block (relative 2^-24), times the sub-block's fp32 scale d * sc; dmin * m * Σx is
 * subtracted with the fp32 sum of the chunk's x per sub-block (a fixed tree), once per chunk. */
#ifndef GANTRY_KERNELS_MATVEC_I8_CUH
#define GANTRY_KERNELS_MATVEC_I8_CUH
#include "kernels/mma_dec.cuh"

/* D = A·B (C = 0), m16n8k32, A u8, B s8 -> s32 */
__device__ __forceinline__ void mvi_mma_k32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}
/* B slot of quad q (chunk elements 4q..4q+3): bs[j][lane 4 col + tig] component comp (col: the digit) */
struct mvi_slot { int j, comp, tig; };
__device__ __forceinline__ mvi_slot mvi_slot_of(int q) {
  const int sb = q >> 3;
  return {sb >> 1, 2 * (sb & 1) + (q & 1), (q >> 1) & 3};
}

/* The 3 digit words (d0, d1, D of 4 elements, element i in byte i) of quad v at 1 / s = inv */
__device__ __forceinline__ void mvi_digits(float4 v, float inv, uint32_t &p0, uint32_t &p1, uint32_t &p2) {
  /* 768 + y in [512, 1024): mantissa = 2^22 + Y, so bits 0..6 = d0, 7..13 = d1, 14..21 = D (mod 256) */
  const uint32_t t0 = __float_as_uint(fmaf(v.x, inv, 768.0f)), t1 = __float_as_uint(fmaf(v.y, inv, 768.0f));
  const uint32_t t2 = __float_as_uint(fmaf(v.z, inv, 768.0f)), t3 = __float_as_uint(fmaf(v.w, inv, 768.0f));
  const uint32_t w01 = __byte_perm(t0, t1, 0x5410u), w23 = __byte_perm(t2, t3, 0x5410u); /* low 16 bits */
  p0 = __byte_perm(w01, w23, 0x6420u) & 0x7f7f7f7fu;
  p1 = __byte_perm(w01 >> 7, w23 >> 7, 0x6420u) & 0x7f7f7f7fu;
  const uint32_t v01 = __byte_perm(t0, t1, 0x6521u), v23 = __byte_perm(t2, t3, 0x6521u); /* bits 8..23 */
  p2 = __byte_perm(v01 >> 6, v23 >> 6, 0x6420u);
}

/* max |x| bit pattern of 4 values (bits & 0x7fffffff: ordered as |x|, NaN above infinity) */
__device__ __forceinline__ uint32_t mvi_absbits(float4 v) {
  return max(max(__float_as_uint(v.x) & 0x7fffffffu, __float_as_uint(v.y) & 0x7fffffffu),
             max(__float_as_uint(v.z) & 0x7fffffffu, __float_as_uint(v.w) & 0x7fffffffu));
}
/* 1 / s and s of a chunk from the largest |x| bit pattern (mb: max of bits & 0x7fffffff) */
__device__ __forceinline__ float mvi_inv(uint32_t mb) {
  const int e = max((int)(mb >> 23), 7);
  return __int_as_float((260 - e) << 23);
}
__device__ __forceinline__ float mvi_scale(uint32_t mb) {
  const int e = (int)(mb >> 23);
  return e == 255 ? __int_as_float(0x7fc00000) : __int_as_float((max(e, 7) - 6) << 23);
}
/* weight of lane tig's v (module comment) in units of the chunk scale s */
__device__ __forceinline__ float mvi_fweight(int tig) { return (tig & 1) ? 1.0f : 0x1p-14f; }
#endif
