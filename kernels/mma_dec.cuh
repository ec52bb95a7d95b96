/* kernels/mma_dec.cuh — weight decoders and mma helpers shared by the tensor-core products
 * (kernels/matvec_mma.cu: 1..2 rows; kernels/mmq.cu: 3 rows and more). Fragment layout and
 * exactness notes: matvec_mma.cu. Each decoder D works on one 256-element chunk kb of a row:
 *   NSUB sub-blocks per chunk of SPS k-steps (16 elements) each, NSUB * SPS = 16
 *   HAS_MIN: acc -= (slot 2sb+1) * Σx of the sub-block; scale slots (16 floats per row): Q4_K /
 *            Q5_K 2sb = d*sc, 2sb+1 = dmin*m; Q6_K sb = d*sc; Q8_0 sb = d (slots 8..15 zero)
 *   kbase(s, tig): chunk element of the 4 k-slots of lane tig in k-step s; its inverse on
 *            quads q = kbase / 4: kstep(q), ktig(q)
 *   raw / load(r, row, kb, tig): the row's quant words of lane tig
 *   apair(r, s, hf): bf16x2 of the exact q of elements kbase(s, tig) + 2hf + 0..1 (A register)
 *   sraw / sload(r, row, kb, half) / sdecode(r, half, dst): scale slots 8half..8half+7 of the row
 *            into dst[0], dst[1] (float4)
 * Q4_K / Q6_K also have qword(r, s) (4 bytes of q + bias, each < 128) for matvec_mma.cu. */
#ifndef GANTRY_KERNELS_MMA_DEC_CUH
#define GANTRY_KERNELS_MMA_DEC_CUH
#include <cuda_bf16.h>

#include "kernels/common.cuh"

/* D = A·B + D, m16n8k16 bf16 -> fp32 */
__device__ __forceinline__ void mvm_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t mvm_bits(__nv_bfloat162 v) { return *reinterpret_cast<const uint32_t *>(&v); }
__device__ __forceinline__ __nv_bfloat162 mvm_bf2(uint32_t u) { return *reinterpret_cast<const __nv_bfloat162 *>(&u); }

/* two bytes of q (each < 128; sel 0x4140: bytes 0, 1; 0x4342: bytes 2, 3) -> bf16x2 of q - bias
 * (bias2 = the bias in both halves); exact */
__device__ __forceinline__ uint32_t mvm_qpair(uint32_t q, unsigned sel, uint32_t bias2) {
  return mvm_bits(__hsub2(mvm_bf2(__byte_perm(q, 0x43u, sel)), mvm_bf2(bias2)));
}
/* byte i of v as an exact float: 0x4B0000bb is 2^23 + bb */
__device__ __forceinline__ float mvm_byte_f(uint32_t v, int i) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (unsigned)i)) - 8388608.0f;
}
/* 32 bits from a 2-byte aligned address */
__device__ __forceinline__ uint32_t mvm_ld32_a2(const uint8_t *p) {
  const uint16_t *q = (const uint16_t *)p;
  return (uint32_t)__ldg(q) | ((uint32_t)__ldg(q + 1) << 16);
}

struct mvm_q4k {
  static constexpr int NSUB = 8, SPS = 2, BB = 144;
  static constexpr bool HAS_MIN = true;
  static constexpr uint32_t BIAS = 0x43004300u; /* bf16x2 (128, 128) */
  /* q[j] = qs bytes 32j + 8tig .. +7: word h of it holds elements 8tig + 4h + 0..3 of sub-block
   * 2j (low nibbles) and 2j+1 (high nibbles); k-step s = 4j + 2 nibble + h */
  struct raw { uint2 q[4]; };
  struct sraw { uint4 h; };
  __device__ static int kbase(int s, int tig) { return 32 * (s >> 1) + 8 * tig + 4 * (s & 1); }
  __device__ static int kstep(int q) { return 2 * (q >> 3) + (q & 1); }
  __device__ static int ktig(int q) { return (q >> 1) & 3; }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int tig) {
    const uint8_t *p = row + kb * BB + 16 + 8 * tig;
#pragma unroll
    for (int j = 0; j < 4; j++) r.q[j] = __ldg((const uint2 *)(p + 32 * j));
  }
  __device__ static uint32_t qword(const raw &r, int s) {
    const uint2 v = r.q[s >> 2];
    const uint32_t w = (s & 1) ? v.y : v.x;
    return (s & 2) ? (w >> 4) & 0x0f0f0f0fu : w & 0x0f0f0f0fu;
  }
  __device__ static uint32_t apair(const raw &r, int s, int hf) {
    return mvm_qpair(qword(r, s), hf ? 0x4342u : 0x4140u, BIAS);
  }
  __device__ static void sload(sraw &r, const uint8_t *row, int64_t kb, int) {
    r.h = __ldg((const uint4 *)(row + kb * BB));
  }
  /* get_scale_min_k4 of sub-blocks 4half..4half+3 on the header words (d, dmin | s[0..3] | s[4..7] | s[8..11]) */
  __device__ static void sdecode(const sraw &r, int half, float4 *dst) {
    const uint4 h = r.h;
    const uint32_t sc = half ? (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u) : h.y & 0x3f3f3f3fu;
    const uint32_t m = half ? ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u) : h.z & 0x3f3f3f3fu;
    const float d = kc_h2f((uint16_t)(h.x & 0xffffu)), dmin = kc_h2f((uint16_t)(h.x >> 16));
    dst[0] = make_float4(d * mvm_byte_f(sc, 0), dmin * mvm_byte_f(m, 0), d * mvm_byte_f(sc, 1), dmin * mvm_byte_f(m, 1));
    dst[1] = make_float4(d * mvm_byte_f(sc, 2), dmin * mvm_byte_f(m, 2), d * mvm_byte_f(sc, 3), dmin * mvm_byte_f(m, 3));
  }
};

/* Q6_K (210 B blocks, 2-byte aligned): element 128h + 32k + l has low bits in ql[64h + 32(k&1) + l]
 * (nibble k>>1), high bits in qh[32h + l] (bits 2k, 2k+1), scale sc[8h + 2k + l/16]. Sub-block
 * s = 8h + 2k + lh = elements 16s..16s+15 (l = 16lh + 0..15), one k-step each; lane tig takes
 * l = 16lh + 4tig + 0..3. */
struct mvm_q6k {
  static constexpr int NSUB = 16, SPS = 1, BB = 210;
  static constexpr bool HAS_MIN = false;
  static constexpr uint32_t BIAS = 0x43204320u; /* bf16x2 (160, 160) = 128 + 32 */
  /* ql[2(2h + lh) + kk] = ql bytes 64h + 32kk + 16lh + 4tig..+3; qh[2h + lh] = qh bytes 32h + 16lh + 4tig..+3 */
  struct raw { uint32_t ql[8], qh[4]; };
  struct sraw { uint32_t s0, s1; uint16_t d; };
  __device__ static int kbase(int s, int tig) { return 16 * s + 4 * tig; }
  __device__ static int kstep(int q) { return q >> 2; }
  __device__ static int ktig(int q) { return q & 3; }
  /* the lane's words from b = block + 4 tig, each read by ld32(address) (2-byte aligned): global
   * memory here, the staged copy in kernels/matvec_ring.cuh */
  template <class LD> __device__ static void load_at(raw &r, const uint8_t *b, LD ld32) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int lh = 0; lh < 2; lh++) {
        r.qh[2 * h + lh] = ld32(b + 128 + 32 * h + 16 * lh);
#pragma unroll
        for (int kk = 0; kk < 2; kk++) r.ql[2 * (2 * h + lh) + kk] = ld32(b + 64 * h + 32 * kk + 16 * lh);
      }
  }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int tig) {
    load_at(r, row + kb * BB + 4 * tig, [](const uint8_t *p) { return mvm_ld32_a2(p); });
  }
  __device__ static uint32_t qword(const raw &r, int s) {
    const int h = s >> 3, k = (s >> 1) & 3, lh = s & 1;
    const uint32_t a = r.ql[2 * (2 * h + lh) + (k & 1)], q = r.qh[2 * h + lh];
    const uint32_t lo = (k & 2) ? (a >> 4) & 0x0f0f0f0fu : a & 0x0f0f0f0fu;
    const uint32_t hi = (k < 2 ? q << (4 - 2 * k) : q >> (2 * k - 4)) & 0x30303030u;
    return lo | hi;
  }
  __device__ static uint32_t apair(const raw &r, int s, int hf) {
    return mvm_qpair(qword(r, s), hf ? 0x4342u : 0x4140u, BIAS);
  }
  /* the scale words of half `half` and d of the block at b, read by ld32 / ld16 */
  template <class L32, class L16> __device__ static void sload_at(sraw &r, const uint8_t *b, int half, L32 ld32, L16 ld16) {
    r.s0 = ld32(b + 192 + 8 * half);
    r.s1 = ld32(b + 196 + 8 * half);
    r.d = ld16(b + 208);
  }
  __device__ static void sload(sraw &r, const uint8_t *row, int64_t kb, int half) {
    sload_at(r, row + kb * BB, half, [](const uint8_t *p) { return mvm_ld32_a2(p); },
             [](const uint8_t *p) { return __ldg((const uint16_t *)p); });
  }
  __device__ static void sdecode(const sraw &r, int, float4 *dst) {
    const float d = kc_h2f(r.d);
#define MVM_SC(v, i) (d * (float)(int8_t)(uint8_t)((v) >> (8 * (i))))
    dst[0] = make_float4(MVM_SC(r.s0, 0), MVM_SC(r.s0, 1), MVM_SC(r.s0, 2), MVM_SC(r.s0, 3));
    dst[1] = make_float4(MVM_SC(r.s1, 0), MVM_SC(r.s1, 1), MVM_SC(r.s1, 2), MVM_SC(r.s1, 3));
#undef MVM_SC
  }
};

/* Q5_K (176 B: d, dmin, 12 scale bytes, qh[32], qs[128]): Q4_K's layout (qs at 48) plus a fifth
 * bit qh[l] bit 2j (low nibble, sub-block 2j) / 2j+1 (high nibble) for l = element % 32; lane
 * tig's elements l = 8tig + 4h + 0..3 need qh bytes 8tig..8tig+7 (one uint2). */
struct mvm_q5k {
  static constexpr int NSUB = 8, SPS = 2, BB = 176;
  static constexpr bool HAS_MIN = true;
  static constexpr uint32_t BIAS = 0x43004300u;
  struct raw { uint2 q[4]; uint2 h; };
  typedef mvm_q4k::sraw sraw;
  __device__ static int kbase(int s, int tig) { return mvm_q4k::kbase(s, tig); }
  __device__ static int kstep(int q) { return mvm_q4k::kstep(q); }
  __device__ static int ktig(int q) { return mvm_q4k::ktig(q); }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int tig) {
    const uint8_t *b = row + kb * BB;
#pragma unroll
    for (int j = 0; j < 4; j++) r.q[j] = __ldg((const uint2 *)(b + 48 + 32 * j + 8 * tig));
    r.h = __ldg((const uint2 *)(b + 16 + 8 * tig));
  }
  /* k-step s = 4j + 2 nibble + h */
  __device__ static uint32_t qword(const raw &r, int s) {
    const int j = s >> 2, nib = (s >> 1) & 1;
    const uint2 v = r.q[j];
    const uint32_t w = (s & 1) ? v.y : v.x, hw = (s & 1) ? r.h.y : r.h.x;
    const uint32_t lo = nib ? (w >> 4) & 0x0f0f0f0fu : w & 0x0f0f0f0fu;
    return lo | (((hw >> (2 * j + nib)) & 0x01010101u) << 4);
  }
  __device__ static uint32_t apair(const raw &r, int s, int hf) {
    return mvm_qpair(qword(r, s), hf ? 0x4342u : 0x4140u, BIAS);
  }
  __device__ static void sload(sraw &r, const uint8_t *row, int64_t kb, int half) {
    (void)half;
    r.h = __ldg((const uint4 *)(row + kb * BB));
  }
  __device__ static void sdecode(const sraw &r, int half, float4 *dst) { mvm_q4k::sdecode(r, half, dst); }
};

/* Q8_0 (34 B blocks of 32: fp16 d, 32 int8; 2-byte aligned): a chunk is 8 blocks, sub-block sb
 * = block sb = k-steps 2sb, 2sb+1; lane tig takes elements 16s + 4tig + 0..3 (block s/2, bytes
 * 16(s&1) + 4tig..). q = int8 exact in bf16 (through 2^23 + (q + 128) in fp32). */
struct mvm_q8_0 {
  static constexpr int NSUB = 8, SPS = 2, BB = 34;
  static constexpr bool HAS_MIN = false;
  struct raw { uint32_t q[16]; };
  struct sraw { uint16_t d[8]; };
  __device__ static int kbase(int s, int tig) { return 16 * s + 4 * tig; }
  __device__ static int kstep(int q) { return q >> 2; }
  __device__ static int ktig(int q) { return q & 3; }
  __device__ static void load(raw &r, const uint8_t *row, int64_t kb, int tig) {
    const uint8_t *b = row + kb * 8 * BB + 2 + 4 * tig;
#pragma unroll
    for (int s = 0; s < 16; s++) r.q[s] = mvm_ld32_a2(b + (s >> 1) * BB + 16 * (s & 1));
  }
  __device__ static uint32_t apair(const raw &r, int s, int hf) {
    const uint32_t u = r.q[s] ^ 0x80808080u; /* q + 128 per byte */
    const float f0 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u | (unsigned)(2 * hf))) - 8388736.0f;
    const float f1 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u | (unsigned)(2 * hf + 1))) - 8388736.0f;
    return mvm_bits(__floats2bfloat162_rn(f0, f1));
  }
  /* half 0: d of blocks 0..7 -> slots 0..7; half 1: slots 8..15 = 0 */
  __device__ static void sload(sraw &r, const uint8_t *row, int64_t kb, int half) {
    const uint8_t *b = row + kb * 8 * BB;
#pragma unroll
    for (int i = 0; i < 8; i++) r.d[i] = half ? (uint16_t)0 : __ldg((const uint16_t *)(b + i * BB));
  }
  __device__ static void sdecode(const sraw &r, int, float4 *dst) {
    dst[0] = make_float4(kc_h2f(r.d[0]), kc_h2f(r.d[1]), kc_h2f(r.d[2]), kc_h2f(r.d[3]));
    dst[1] = make_float4(kc_h2f(r.d[4]), kc_h2f(r.d[5]), kc_h2f(r.d[6]), kc_h2f(r.d[7]));
  }
};
#endif
