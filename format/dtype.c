/* format/dtype.c — ggml type table, half-float conversions, row dequantization and row dot
 * products (fp32 accumulation) for the weight types gantry computes with.
 *
 * Two kernel sets for dt_dot_row: a portable one (plain C + GCC vector extensions, which lower
 * to SSE2 on x86-64 and NEON on arm64) and an AVX2+FMA+F16C one compiled with a target
 * attribute and picked at run time. Both are checked against dequant-then-dot in test_dtype. */
#include "format/dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "common/err.h"

#if defined(__x86_64__) || defined(__i386__)
#define DT_HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define DT_HAVE_X86 0
#endif

/* ---------------------------------------------------------------- type table */

typedef struct {
  const char *name;
  int64_t blck;  /* elements per block; 0 = not a type */
  size_t bytes;  /* bytes per block */
} type_info_t;

static const type_info_t k_types[GT_TYPE_COUNT] = {
    [GT_TYPE_F32] = {"F32", 1, 4},
    [GT_TYPE_F16] = {"F16", 1, 2},
    [GT_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [GT_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [GT_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [GT_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [GT_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [GT_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [GT_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [GT_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [GT_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [GT_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [GT_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [GT_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [GT_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [GT_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [GT_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [GT_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [GT_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [GT_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [GT_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [GT_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [GT_TYPE_I8] = {"I8", 1, 1},
    [GT_TYPE_I16] = {"I16", 1, 2},
    [GT_TYPE_I32] = {"I32", 1, 4},
    [GT_TYPE_I64] = {"I64", 1, 8},
    [GT_TYPE_F64] = {"F64", 1, 8},
    [GT_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [GT_TYPE_BF16] = {"BF16", 1, 2},
    [GT_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [GT_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [GT_TYPE_MXFP4] = {"MXFP4", 32, 17},
};

int dt_known(int t) { return t >= 0 && t < GT_TYPE_COUNT && k_types[t].blck > 0; }

const char *dt_name(gt_type_t t) { return dt_known((int)t) ? k_types[t].name : "?"; }

int dt_from_name(const char *name) {
  if (!name) return -1;
  for (int t = 0; t < GT_TYPE_COUNT; t++)
    if (k_types[t].blck > 0 && strcasecmp(name, k_types[t].name) == 0) return t;
  return -1;
}

int dt_computable(gt_type_t t) {
  switch (t) {
    case GT_TYPE_F32: case GT_TYPE_F16: case GT_TYPE_BF16: case GT_TYPE_Q8_0:
    case GT_TYPE_Q4_K: case GT_TYPE_Q5_K: case GT_TYPE_Q6_K:
      return 1;
    default:
      return 0;
  }
}

int64_t dt_block_elems(gt_type_t t) { return dt_known((int)t) ? k_types[t].blck : 0; }

size_t dt_block_bytes(gt_type_t t) { return dt_known((int)t) ? k_types[t].bytes : 0; }

size_t dt_row_bytes(gt_type_t t, int64_t n) {
  if (!dt_known((int)t) || n < 0 || n % k_types[t].blck) return 0;
  uint64_t nb = (uint64_t)(n / k_types[t].blck);
  if (nb > SIZE_MAX / k_types[t].bytes) return 0;
  return (size_t)nb * k_types[t].bytes;
}

/* ---------------------------------------------------------------- scalar conversions */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t dt_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* nan -> quiet nan (as ggml) */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520 -> inf */
  if (a >= 0x38800000u) {                                 /* normal half (>= 2^-14) */
    uint32_t m = a + 0xfffu + ((a >> 13) & 1u);            /* round to nearest even */
    m -= (112u << 23);                                     /* rebias exponent 127 -> 15 */
    return (uint16_t)(sign | (m >> 13));
  }
  if (a < 0x33000000u) return sign; /* < 2^-25: rounds to zero */
  /* subnormal half: value / 2^-24 rounded to nearest even */
  uint32_t e = a >> 23;               /* 102..112 */
  uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e;          /* 14..24: mant * 2^(e-150) / 2^-24 = mant >> (126-e) */
  uint32_t q = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint16_t)(sign | q); /* q == 0x400 becomes the smallest normal, which is correct */
}

float dt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t dt_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet nan */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---------------------------------------------------------------- block decoding */

/* Little-endian loads from possibly unaligned memory. */
__attribute__((always_inline)) static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Half -> float in a form gcc vectorizes (no calls, no branches): exact for every input.
 * Normal/inf/nan: shift exponent+mantissa into float position, add (127-15) to the exponent
 * via the bias 0xe0 and a multiply by 2^-112 (so exponent 31 lands on 255). Subnormal: place
 * the mantissa under exponent 2^-1 and subtract 0.5, leaving m * 2^-24 exactly. */
__attribute__((always_inline)) static inline float h2f(uint16_t h) {
  uint32_t w = (uint32_t)h << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w; /* exponent+mantissa at the top, sign dropped */
  float norm = bits_f32((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  float denorm = bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t is_sub = 0u - (uint32_t)(two_w < (1u << 27)); /* all ones for zero/subnormal */
  uint32_t r = (f32_bits(denorm) & is_sub) | (f32_bits(norm) & ~is_sub);
  return bits_f32(sign | r);
}

float dt_f16_to_f32(uint16_t h) { return h2f(h); }

/* n halves / bf16 at src (any alignment) -> floats. restrict lets gcc vectorize at -O2. */
static void f16_to_f32_n(const uint8_t *restrict src, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    y[i] = h2f(h);
  }
}
static void bf16_to_f32_n(const uint8_t *restrict src, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    y[i] = bits_f32((uint32_t)h << 16);
  }
}

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block (ggml's get_scale_min_k4). */
__attribute__((always_inline)) static inline void k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/* Decoded per-block scales: y = d[s] * q - m[s] for sub-block s of 32 elements. */
typedef struct {
  float d[8];
  float m[8];
} kscales_t;

__attribute__((always_inline)) static inline void k4_decode_scales(const uint8_t *blk, kscales_t *ks) {
  float d = h2f(ld16(blk)), dmin = h2f(ld16(blk + 2));
  const uint8_t *s = blk + 4;
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    k4_scale_min(s, j, &sc, &m);
    ks->d[j] = d * (float)sc;
    ks->m[j] = dmin * (float)m;
  }
}

/* One Q8_0 block (34 B) -> 32 floats. */
static inline void deq_q8_0(const uint8_t *restrict b, float *restrict y) {
  float d = h2f(ld16(b));
  const int8_t *q = (const int8_t *)(b + 2);
  for (int l = 0; l < 32; l++) y[l] = d * (float)q[l];
}

/* One Q4_K block (144 B) -> 256 floats. */
static inline void deq_q4_k(const uint8_t *restrict b, float *restrict y) {
  kscales_t ks;
  k4_decode_scales(b, &ks);
  const uint8_t *q = b + 16;
  for (int j = 0; j < 4; j++) {
    float d1 = ks.d[2 * j], m1 = ks.m[2 * j], d2 = ks.d[2 * j + 1], m2 = ks.m[2 * j + 1];
    for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
    q += 32;
    y += 64;
  }
}

/* One Q5_K block (176 B) -> 256 floats. */
static inline void deq_q5_k(const uint8_t *restrict b, float *restrict y) {
  kscales_t ks;
  k4_decode_scales(b, &ks);
  const uint8_t *qh = b + 16;
  const uint8_t *ql = b + 48;
  for (int j = 0; j < 4; j++) {
    float d1 = ks.d[2 * j], m1 = ks.m[2 * j], d2 = ks.d[2 * j + 1], m2 = ks.m[2 * j + 1];
    unsigned s1 = 2u * (unsigned)j, s2 = s1 + 1u;
    for (int l = 0; l < 32; l++) {
      uint32_t h = qh[l], q = (ql[l] & 0x0fu) | (((h >> s1) & 1u) << 4);
      y[l] = d1 * (float)(int32_t)q - m1;
    }
    for (int l = 0; l < 32; l++) {
      uint32_t h = qh[l], q = ((uint32_t)ql[l] >> 4) | (((h >> s2) & 1u) << 4);
      y[32 + l] = d2 * (float)(int32_t)q - m2;
    }
    ql += 32;
    y += 64;
  }
}

/* One Q6_K block (210 B) -> 256 floats. Element 128*h + 32*k + l (k = 0..3, l = 0..31) has
 * its low 4 bits in ql[64h + l + 32*(k&1)] (nibble k>>1), its high 2 bits in qh[32h + l]
 * (bits 2k..2k+1), and scale sc[8h + 2k + l/16]. Loops run over 16 lanes of one scale. */
static inline void deq_q6_k(const uint8_t *restrict b, float *restrict y) {
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *sc = (const int8_t *)(b + 192);
  float d = h2f(ld16(b + 208));
  for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int k = 0; k < 4; k++) {
      const uint8_t *lo = ql + 32 * (k & 1);
      unsigned nsh = 4u * (unsigned)(k >> 1), hsh = 2u * (unsigned)k;
      for (int g = 0; g < 2; g++) {
        float ds = d * (float)sc[2 * k + g];
        float *yo = y + 32 * k + 16 * g;
        const uint8_t *lq = lo + 16 * g, *hq = qh + 16 * g;
        for (int l = 0; l < 16; l++) {
          uint32_t q = (((uint32_t)lq[l] >> nsh) & 0x0fu) | ((((uint32_t)hq[l] >> hsh) & 3u) << 4);
          yo[l] = ds * (float)((int32_t)q - 32);
        }
      }
    }
  }
}

int dt_dequant_row(gt_type_t t, const void *src, float *dst, int64_t n) {
  if (!dt_computable(t)) return GT_EUNSUPPORTED;
  if (n < 0 || n % k_types[t].blck) return GT_EINVAL;
  const uint8_t *s = src;
  switch (t) {
    case GT_TYPE_F32:
      memcpy(dst, src, (size_t)n * 4);
      break;
    case GT_TYPE_F16:
      f16_to_f32_n(s, dst, n);
      break;
    case GT_TYPE_BF16:
      bf16_to_f32_n(s, dst, n);
      break;
    case GT_TYPE_Q8_0:
      for (int64_t i = 0; i < n / 32; i++) deq_q8_0(s + 34 * i, dst + 32 * i);
      break;
    case GT_TYPE_Q4_K:
      for (int64_t i = 0; i < n / 256; i++) deq_q4_k(s + 144 * i, dst + 256 * i);
      break;
    case GT_TYPE_Q5_K:
      for (int64_t i = 0; i < n / 256; i++) deq_q5_k(s + 176 * i, dst + 256 * i);
      break;
    case GT_TYPE_Q6_K:
      for (int64_t i = 0; i < n / 256; i++) deq_q6_k(s + 210 * i, dst + 256 * i);
      break;
    default:
      return GT_EUNSUPPORTED;
  }
  return GT_OK;
}

/* ---------------------------------------------------------------- portable dot kernels */

typedef float v4f __attribute__((vector_size(16)));

/* 4 x 4-lane accumulators carried across blocks, reduced once per row. */
typedef struct {
  v4f a0, a1, a2, a3;
} vacc_t;

static inline v4f ldv(const void *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* acc += a[0..n) * b[0..n), n a multiple of 16. */
static inline void vdot16(vacc_t *acc, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    acc->a0 += ldv(a + i) * ldv(b + i);
    acc->a1 += ldv(a + i + 4) * ldv(b + i + 4);
    acc->a2 += ldv(a + i + 8) * ldv(b + i + 8);
    acc->a3 += ldv(a + i + 12) * ldv(b + i + 12);
  }
}

static inline float vsum(const vacc_t *acc) {
  v4f s = (acc->a0 + acc->a1) + (acc->a2 + acc->a3);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* w may be unaligned (a row inside a GGUF): loads go through memcpy. */
static float dot_f32_portable(const uint8_t *w, const float *x, int64_t n) {
  vacc_t acc = {0};
  int64_t n16 = n & ~(int64_t)15;
  for (int64_t i = 0; i < n16; i += 16) {
    acc.a0 += ldv(w + 4 * i) * ldv(x + i);
    acc.a1 += ldv(w + 4 * i + 16) * ldv(x + i + 4);
    acc.a2 += ldv(w + 4 * i + 32) * ldv(x + i + 8);
    acc.a3 += ldv(w + 4 * i + 48) * ldv(x + i + 12);
  }
  float s = vsum(&acc);
  for (int64_t i = n16; i < n; i++) {
    float v;
    memcpy(&v, w + 4 * i, 4);
    s += v * x[i];
  }
  return s;
}

/* Half/bf16 rows are decoded in chunks of 256 into a stack buffer, then dotted. */
static float dot_f16_portable(const uint8_t *w, const float *x, int64_t n, int bf16) {
  float tmp[256] __attribute__((aligned(32)));
  vacc_t acc = {0};
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    const uint8_t *p = w + 2 * i;
    if (bf16)
      bf16_to_f32_n(p, tmp, 256);
    else
      f16_to_f32_n(p, tmp, 256);
    vdot16(&acc, tmp, x + i, 256);
  }
  float s = vsum(&acc);
  for (; i < n; i++) {
    uint16_t h = ld16(w + 2 * i);
    s += (bf16 ? bits_f32((uint32_t)h << 16) : h2f(h)) * x[i];
  }
  return s;
}

static float dot_q8_0_portable(const uint8_t *w, const float *x, int64_t n) {
  float tmp[32] __attribute__((aligned(32)));
  vacc_t acc = {0};
  for (int64_t i = 0; i < n / 32; i++) {
    deq_q8_0(w + 34 * i, tmp);
    vdot16(&acc, tmp, x + 32 * i, 32);
  }
  return vsum(&acc);
}

#define DEF_KQUANT_PORTABLE(NAME, DEQ, BYTES)                                   \
  static float NAME(const uint8_t *w, const float *x, int64_t n) {              \
    float tmp[256] __attribute__((aligned(32)));                                \
    vacc_t acc = {0};                                                           \
    for (int64_t i = 0; i < n / 256; i++) {                                     \
      DEQ(w + (BYTES) * i, tmp);                                                \
      vdot16(&acc, tmp, x + 256 * i, 256);                                      \
    }                                                                           \
    return vsum(&acc);                                                          \
  }
DEF_KQUANT_PORTABLE(dot_q4_k_portable, deq_q4_k, 144)
DEF_KQUANT_PORTABLE(dot_q5_k_portable, deq_q5_k, 176)
DEF_KQUANT_PORTABLE(dot_q6_k_portable, deq_q6_k, 210)

static float dot_portable(gt_type_t t, const uint8_t *w, const float *x, int64_t n) {
  switch (t) {
    case GT_TYPE_F32: return dot_f32_portable(w, x, n);
    case GT_TYPE_F16: return dot_f16_portable(w, x, n, 0);
    case GT_TYPE_BF16: return dot_f16_portable(w, x, n, 1);
    case GT_TYPE_Q8_0: return dot_q8_0_portable(w, x, n);
    case GT_TYPE_Q4_K: return dot_q4_k_portable(w, x, n);
    case GT_TYPE_Q5_K: return dot_q5_k_portable(w, x, n);
    case GT_TYPE_Q6_K: return dot_q6_k_portable(w, x, n);
    default: return NAN;
  }
}

/* ---------------------------------------------------------------- portable multi-row kernels
 * Each mirrors its single-row kernel above: a weight block is decoded once and then dotted with
 * every x row, each row keeping its own accumulators and doing the same operations in the same
 * order as dt_dot_row would (so results are bit-identical per row). Rows come in chunks of at
 * most ROWS_CHUNK. */

#define ROWS_CHUNK 16

static void rows_f16_portable(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                              size_t os, int bf16) {
  float tmp[256] __attribute__((aligned(32)));
  vacc_t acc[ROWS_CHUNK];
  memset(acc, 0, sizeof(vacc_t) * (size_t)rows);
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    const uint8_t *p = w + 2 * i;
    if (bf16)
      bf16_to_f32_n(p, tmp, 256);
    else
      f16_to_f32_n(p, tmp, 256);
    for (int r = 0; r < rows; r++) vdot16(&acc[r], tmp, x + (size_t)r * ld + i, 256);
  }
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ld;
    float s = vsum(&acc[r]);
    for (int64_t j = i; j < n; j++) {
      uint16_t h = ld16(w + 2 * j);
      s += (bf16 ? bits_f32((uint32_t)h << 16) : h2f(h)) * xr[j];
    }
    out[(size_t)r * os] = s;
  }
}

/* Block-quantized types: decode block i into tmp (BLK floats), dot it with every row. */
#define DEF_ROWS_PORTABLE(NAME, DEQ, BYTES, BLK)                                            \
  static void NAME(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out, \
                   size_t os) {                                                             \
    float tmp[BLK] __attribute__((aligned(32)));                                            \
    vacc_t acc[ROWS_CHUNK];                                                                 \
    memset(acc, 0, sizeof(vacc_t) * (size_t)rows);                                          \
    for (int64_t i = 0; i < n / (BLK); i++) {                                               \
      DEQ(w + (BYTES) * i, tmp);                                                            \
      for (int r = 0; r < rows; r++) vdot16(&acc[r], tmp, x + (size_t)r * ld + (BLK) * i, (BLK)); \
    }                                                                                       \
    for (int r = 0; r < rows; r++) out[(size_t)r * os] = vsum(&acc[r]);                     \
  }
DEF_ROWS_PORTABLE(rows_q8_0_portable, deq_q8_0, 34, 32)
DEF_ROWS_PORTABLE(rows_q4_k_portable, deq_q4_k, 144, 256)
DEF_ROWS_PORTABLE(rows_q5_k_portable, deq_q5_k, 176, 256)
DEF_ROWS_PORTABLE(rows_q6_k_portable, deq_q6_k, 210, 256)

/* rows <= ROWS_CHUNK */
static void rows_portable(gt_type_t t, const uint8_t *w, const float *x, size_t ld, int rows, int64_t n,
                          float *out, size_t os) {
  switch (t) {
    case GT_TYPE_F32: /* nothing to decode: the single-row kernel per row is as fast */
      for (int r = 0; r < rows; r++) out[(size_t)r * os] = dot_f32_portable(w, x + (size_t)r * ld, n);
      break;
    case GT_TYPE_F16: rows_f16_portable(w, x, ld, rows, n, out, os, 0); break;
    case GT_TYPE_BF16: rows_f16_portable(w, x, ld, rows, n, out, os, 1); break;
    case GT_TYPE_Q8_0: rows_q8_0_portable(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_Q4_K: rows_q4_k_portable(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_Q5_K: rows_q5_k_portable(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_Q6_K: rows_q6_k_portable(w, x, ld, rows, n, out, os); break;
    default:
      for (int r = 0; r < rows; r++) out[(size_t)r * os] = NAN;
  }
}

/* ---------------------------------------------------------------- AVX2 + FMA + F16C kernels */
#if DT_HAVE_X86
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))

AVX2_FN static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* 8 bytes at p, zero-extended to 8 int32 lanes */
AVX2_FN static inline __m256i ldu8x8(const uint8_t *p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

AVX2_FN static float dot_f32_avx2(const uint8_t *w, const float *x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const float *wf = (const float *)(const void *)w; /* loadu: alignment not required */
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; i++) {
    float v;
    memcpy(&v, w + 4 * i, 4);
    s += v * x[i];
  }
  return s;
}

AVX2_FN static float dot_f16_avx2(const uint8_t *w, const float *x, int64_t n, int bf16) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t i = 0;
  if (bf16) {
    for (; i + 16 <= n; i += 16) {
      __m256i h0 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i)));
      __m256i h1 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i + 16)));
      a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h0, 16)), _mm256_loadu_ps(x + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h1, 16)), _mm256_loadu_ps(x + i + 8), a1);
    }
  } else {
    for (; i + 16 <= n; i += 16) {
      __m256 f0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i)));
      __m256 f1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i + 16)));
      a0 = _mm256_fmadd_ps(f0, _mm256_loadu_ps(x + i), a0);
      a1 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(x + i + 8), a1);
    }
  }
  float s = hsum8(_mm256_add_ps(a0, a1));
  for (; i < n; i++) {
    uint16_t h = ld16(w + 2 * i);
    s += (bf16 ? bits_f32((uint32_t)h << 16) : h2f(h)) * x[i];
  }
  return s;
}

AVX2_FN static float dot_q8_0_avx2(const uint8_t *w, const float *x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; i++, w += 34, x += 32) {
    const uint8_t *q = w + 2;
    __m256 s0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q))), _mm256_loadu_ps(x));
    __m256 s1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q + 8)))), _mm256_loadu_ps(x + 8));
    s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q + 16)))), _mm256_loadu_ps(x + 16), s0);
    s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q + 24)))), _mm256_loadu_ps(x + 24), s1);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(ld16(w))), _mm256_add_ps(s0, s1), acc);
  }
  return hsum8(acc);
}

/* Q4_K / Q5_K: per sub-block s of 32, sum_l (d_s q_l - m_s) x_l = d_s sum(q x) - m_s sum(x).
 * Both sums are kept as vectors and folded into the row accumulators with one FMA each. */
/* Folds sub-blocks 2j and 2j+1 into the accumulators: *acc += d_2j sl + d_2j+1 sh, *accm +=
 * m_2j xl + m_2j+1 xh (sl, sh: partial sums of q x; xl, xh: of x). */
AVX2_FN static inline void k4_fold(const kscales_t *ks, int j, __m256 sl, __m256 sh, __m256 xl, __m256 xh,
                                   __m256 *acc, __m256 *accm) {
  *acc = _mm256_fmadd_ps(_mm256_set1_ps(ks->d[2 * j]), sl, *acc);
  *acc = _mm256_fmadd_ps(_mm256_set1_ps(ks->d[2 * j + 1]), sh, *acc);
  *accm = _mm256_fmadd_ps(_mm256_set1_ps(ks->m[2 * j]), xl, *accm);
  *accm = _mm256_fmadd_ps(_mm256_set1_ps(ks->m[2 * j + 1]), xh, *accm);
}

AVX2_FN static float dot_q4_k_avx2(const uint8_t *w, const float *x, int64_t n) {
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi32(0x0f);
  for (int64_t i = 0; i < n / 256; i++, w += 144, x += 256) {
    kscales_t ks;
    k4_decode_scales(w, &ks);
    const uint8_t *q = w + 16;
    const float *xb = x;
    for (int j = 0; j < 4; j++, q += 32, xb += 64) {
      __m256 sl = _mm256_setzero_ps(), sh = sl, xl = sl, xh = sl;
      for (int k = 0; k < 32; k += 8) {
        __m256i b = ldu8x8(q + k);
        __m256 x0 = _mm256_loadu_ps(xb + k), x1 = _mm256_loadu_ps(xb + 32 + k);
        sl = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, m4)), x0, sl);
        sh = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), x1, sh);
        xl = _mm256_add_ps(xl, x0);
        xh = _mm256_add_ps(xh, x1);
      }
      k4_fold(&ks, j, sl, sh, xl, xh, &acc, &accm);
    }
  }
  return hsum8(_mm256_sub_ps(acc, accm));
}

/* 32 byte lanes of small unsigned q (0..127) times x[0..32): returns the partial sums of q*x
 * (8 lanes) and writes the partial sums of x to *sx. */
AVX2_FN static inline __m256 u8x32_dot(__m256i q, const float *x, __m256 *sx) {
  __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
  __m256 s0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), x0);
  __m256 s1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(lo, lo))), x1);
  s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), x2, s0);
  s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(hi, hi))), x3, s1);
  *sx = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
  return _mm256_add_ps(s0, s1);
}

/* Q5_K: as Q4_K with a fifth bit from qh (bit 2j for sub-block 2j, 2j+1 for 2j+1); the 5-bit
 * values of 32 lanes are assembled with byte operations, then widened. */
AVX2_FN static float dot_q5_k_avx2(const uint8_t *w, const float *x, int64_t n) {
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < n / 256; i++, w += 176, x += 256) {
    kscales_t ks;
    k4_decode_scales(w, &ks);
    __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(w + 16));
    const uint8_t *ql = w + 48;
    const float *xb = x;
    for (int j = 0; j < 4; j++, ql += 32, xb += 64) {
      __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)ql);
      /* qh bits 2j and 2j+1 of every byte -> bit 4 (epi16 shifts are safe: masked per byte) */
      __m256i hl = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
      __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
      qh = _mm256_srli_epi16(qh, 2);
      __m256i ql_lo = _mm256_or_si256(_mm256_and_si256(b, m4), hl);
      __m256i ql_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), hh);
      __m256 xl, xh;
      __m256 sl = u8x32_dot(ql_lo, xb, &xl), sh = u8x32_dot(ql_hi, xb + 32, &xh);
      k4_fold(&ks, j, sl, sh, xl, xh, &acc, &accm);
    }
  }
  return hsum8(_mm256_sub_ps(acc, accm));
}

/* 32 int8 lanes -> 4 x 8 floats, multiplied by 32 floats of x (4 partial products). */
AVX2_FN static inline void i8x32_mul(__m256i q, const float *x, __m256 p[4]) {
  __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  p[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(x));
  p[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo))), _mm256_loadu_ps(x + 8));
  p[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(x + 16));
  p[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi))), _mm256_loadu_ps(x + 24));
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales; q in [-32, 31]. The 6-bit values of 32 lanes
 * are assembled with byte operations (ql nibble | qh 2-bit pair << 4, minus 32), widened 8 at
 * a time, and each 16-lane half is scaled by its sub-block scale. */
AVX2_FN static float dot_q6_k_avx2(const uint8_t *w, const float *x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3), b32 = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / 256; i++, w += 210, x += 256) {
    const uint8_t *ql = w, *qh = w + 128;
    const int8_t *sc = (const int8_t *)(w + 192);
    float d = h2f(ld16(w + 208));
    const float *xb = x;
    __m256 blk0 = _mm256_setzero_ps(), blk1 = _mm256_setzero_ps();
    for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, xb += 128) {
      __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)ql);
      __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
      __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)qh);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
      for (int k = 0; k < 4; k++) {
        __m256 p[4];
        i8x32_mul(_mm256_sub_epi8(q[k], b32), xb + 32 * k, p);
        __m256 s0 = _mm256_set1_ps((float)sc[2 * k]), s1 = _mm256_set1_ps((float)sc[2 * k + 1]);
        blk0 = _mm256_fmadd_ps(s0, _mm256_add_ps(p[0], p[1]), blk0);
        blk1 = _mm256_fmadd_ps(s1, _mm256_add_ps(p[2], p[3]), blk1);
      }
    }
    __m256 dv = _mm256_set1_ps(d);
    acc0 = _mm256_fmadd_ps(dv, blk0, acc0);
    acc1 = _mm256_fmadd_ps(dv, blk1, acc1);
  }
  return hsum8(_mm256_add_ps(acc0, acc1));
}

/* ---------------------------------------------------------------- AVX2 multi-row kernels
 * Mirrors of the AVX2 single-row kernels: integer-to-float conversion of a block's quants is
 * exact, so it is done once per block into a small table of vectors; every row then runs the
 * single-row kernel's FMA/add sequence on those vectors, in the same order. */

/* F32/F16/BF16: the row is walked in spans of ROWS_SPAN elements; a span of weights is converted
 * to floats once (exact), then each row runs the single-row kernel's loop over the span with
 * its accumulators in registers. */
#define ROWS_SPAN 256

AVX2_FN static void rows_f32_avx2(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                                  size_t os) {
  __m256 a[ROWS_CHUNK][4];
  for (int r = 0; r < rows; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
  const float *wf = (const float *)(const void *)w;
  const int64_t n32 = n & ~(int64_t)31; /* the single-row kernel's vector part */
  for (int64_t i0 = 0; i0 < n32; i0 += ROWS_SPAN) {
    const int64_t i1 = i0 + ROWS_SPAN < n32 ? i0 + ROWS_SPAN : n32;
    for (int r = 0; r < rows; r++) {
      const float *xr = x + (size_t)r * ld;
      __m256 a0 = a[r][0], a1 = a[r][1], a2 = a[r][2], a3 = a[r][3];
      for (int64_t i = i0; i < i1; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i), _mm256_loadu_ps(xr + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 8), _mm256_loadu_ps(xr + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 16), _mm256_loadu_ps(xr + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 24), _mm256_loadu_ps(xr + i + 24), a3);
      }
      a[r][0] = a0, a[r][1] = a1, a[r][2] = a2, a[r][3] = a3;
    }
  }
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ld;
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3])));
    for (int64_t j = n32; j < n; j++) {
      float v;
      memcpy(&v, w + 4 * j, 4);
      s += v * xr[j];
    }
    out[(size_t)r * os] = s;
  }
}

AVX2_FN static void rows_f16_avx2(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                                  size_t os, int bf16) {
  float tmp[ROWS_SPAN] __attribute__((aligned(32)));
  __m256 a[ROWS_CHUNK][2];
  for (int r = 0; r < rows; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
  const int64_t n16 = n & ~(int64_t)15; /* the single-row kernel's vector part */
  for (int64_t i0 = 0; i0 < n16; i0 += ROWS_SPAN) {
    const int64_t len = i0 + ROWS_SPAN < n16 ? ROWS_SPAN : n16 - i0;
    for (int64_t i = 0; i < len; i += 8) {
      const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(w + 2 * (i0 + i)));
      __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
      _mm256_store_ps(tmp + i, f);
    }
    int r = 0;
    for (; r + 4 <= rows; r += 4) { /* 4 rows at a time: each weight vector loaded once for 4 FMAs */
      const float *x0 = x + (size_t)r * ld + i0, *x1 = x0 + ld, *x2 = x1 + ld, *x3 = x2 + ld;
      __m256 a00 = a[r][0], a01 = a[r][1], a10 = a[r + 1][0], a11 = a[r + 1][1];
      __m256 a20 = a[r + 2][0], a21 = a[r + 2][1], a30 = a[r + 3][0], a31 = a[r + 3][1];
      for (int64_t i = 0; i < len; i += 16) {
        __m256 t0 = _mm256_load_ps(tmp + i), t1 = _mm256_load_ps(tmp + i + 8);
        a00 = _mm256_fmadd_ps(t0, _mm256_loadu_ps(x0 + i), a00);
        a01 = _mm256_fmadd_ps(t1, _mm256_loadu_ps(x0 + i + 8), a01);
        a10 = _mm256_fmadd_ps(t0, _mm256_loadu_ps(x1 + i), a10);
        a11 = _mm256_fmadd_ps(t1, _mm256_loadu_ps(x1 + i + 8), a11);
        a20 = _mm256_fmadd_ps(t0, _mm256_loadu_ps(x2 + i), a20);
        a21 = _mm256_fmadd_ps(t1, _mm256_loadu_ps(x2 + i + 8), a21);
        a30 = _mm256_fmadd_ps(t0, _mm256_loadu_ps(x3 + i), a30);
        a31 = _mm256_fmadd_ps(t1, _mm256_loadu_ps(x3 + i + 8), a31);
      }
      a[r][0] = a00, a[r][1] = a01, a[r + 1][0] = a10, a[r + 1][1] = a11;
      a[r + 2][0] = a20, a[r + 2][1] = a21, a[r + 3][0] = a30, a[r + 3][1] = a31;
    }
    for (; r < rows; r++) {
      const float *xr = x + (size_t)r * ld + i0;
      __m256 a0 = a[r][0], a1 = a[r][1];
      for (int64_t i = 0; i < len; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_load_ps(tmp + i), _mm256_loadu_ps(xr + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_load_ps(tmp + i + 8), _mm256_loadu_ps(xr + i + 8), a1);
      }
      a[r][0] = a0, a[r][1] = a1;
    }
  }
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ld;
    float s = hsum8(_mm256_add_ps(a[r][0], a[r][1]));
    for (int64_t j = n16; j < n; j++) {
      uint16_t h = ld16(w + 2 * j);
      s += (bf16 ? bits_f32((uint32_t)h << 16) : h2f(h)) * xr[j];
    }
    out[(size_t)r * os] = s;
  }
}

/* 8 int8 at p -> 8 floats (exact) */
AVX2_FN static inline __m256 i8x8_f(const uint8_t *p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

AVX2_FN static void rows_q8_0_avx2(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                                   size_t os) {
  __m256 acc[ROWS_CHUNK];
  for (int r = 0; r < rows; r++) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; i++, w += 34) {
    const uint8_t *q = w + 2;
    __m256 q0 = i8x8_f(q), q1 = i8x8_f(q + 8), q2 = i8x8_f(q + 16), q3 = i8x8_f(q + 24);
    __m256 dv = _mm256_set1_ps(h2f(ld16(w)));
    for (int r = 0; r < rows; r++) {
      const float *xr = x + (size_t)r * ld + 32 * i;
      __m256 s0 = _mm256_mul_ps(q0, _mm256_loadu_ps(xr));
      __m256 s1 = _mm256_mul_ps(q1, _mm256_loadu_ps(xr + 8));
      s0 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xr + 16), s0);
      s1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xr + 24), s1);
      acc[r] = _mm256_fmadd_ps(dv, _mm256_add_ps(s0, s1), acc[r]);
    }
  }
  for (int r = 0; r < rows; r++) out[(size_t)r * os] = hsum8(acc[r]);
}

AVX2_FN static void rows_q4_k_avx2(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                                   size_t os) {
  __m256 acc[ROWS_CHUNK], accm[ROWS_CHUNK];
  for (int r = 0; r < rows; r++) acc[r] = accm[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi32(0x0f);
  __m256 ql[4][4], qh[4][4]; /* [sub-block pair j][8-lane group]: low / high nibbles as floats */
  for (int64_t i = 0; i < n / 256; i++, w += 144) {
    kscales_t ks;
    k4_decode_scales(w, &ks);
    const uint8_t *q = w + 16;
    for (int j = 0; j < 4; j++, q += 32)
      for (int k = 0; k < 4; k++) {
        __m256i b = ldu8x8(q + 8 * k);
        ql[j][k] = _mm256_cvtepi32_ps(_mm256_and_si256(b, m4));
        qh[j][k] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
      }
    for (int r = 0; r < rows; r++) {
      const float *xb = x + (size_t)r * ld + 256 * i;
      __m256 a = acc[r], am = accm[r];
      for (int j = 0; j < 4; j++, xb += 64) {
        __m256 sl = _mm256_setzero_ps(), sh = sl, xl = sl, xh = sl;
        for (int k = 0; k < 4; k++) {
          __m256 x0 = _mm256_loadu_ps(xb + 8 * k), x1 = _mm256_loadu_ps(xb + 32 + 8 * k);
          sl = _mm256_fmadd_ps(ql[j][k], x0, sl);
          sh = _mm256_fmadd_ps(qh[j][k], x1, sh);
          xl = _mm256_add_ps(xl, x0);
          xh = _mm256_add_ps(xh, x1);
        }
        k4_fold(&ks, j, sl, sh, xl, xh, &a, &am);
      }
      acc[r] = a;
      accm[r] = am;
    }
  }
  for (int r = 0; r < rows; r++) out[(size_t)r * os] = hsum8(_mm256_sub_ps(acc[r], accm[r]));
}

/* u8x32_dot on pre-converted lanes q[0..4) (8 floats each): same operations, same order. */
AVX2_FN static inline __m256 f32x32_dot(const __m256 q[4], const float *x, __m256 *sx) {
  __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
  __m256 s0 = _mm256_mul_ps(q[0], x0);
  __m256 s1 = _mm256_mul_ps(q[1], x1);
  s0 = _mm256_fmadd_ps(q[2], x2, s0);
  s1 = _mm256_fmadd_ps(q[3], x3, s1);
  *sx = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
  return _mm256_add_ps(s0, s1);
}

/* 32 byte lanes -> 4 x 8 floats, zero-extended (u8) or sign-extended (i8), as u8x32_dot /
 * i8x32_mul order them. */
AVX2_FN static inline void u8x32_f(__m256i q, __m256 f[4]) {
  __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  f[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  f[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(lo, lo)));
  f[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  f[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(hi, hi)));
}
AVX2_FN static inline void i8x32_f(__m256i q, __m256 f[4]) {
  __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  f[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  f[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
  f[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  f[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
}

AVX2_FN static void rows_q5_k_avx2(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                                   size_t os) {
  __m256 acc[ROWS_CHUNK], accm[ROWS_CHUNK];
  for (int r = 0; r < rows; r++) acc[r] = accm[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
  __m256 fl[4][4], fh[4][4];
  for (int64_t i = 0; i < n / 256; i++, w += 176) {
    kscales_t ks;
    k4_decode_scales(w, &ks);
    __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(w + 16));
    const uint8_t *ql = w + 48;
    for (int j = 0; j < 4; j++, ql += 32) {
      __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)ql);
      __m256i hl = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
      __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
      qh = _mm256_srli_epi16(qh, 2);
      u8x32_f(_mm256_or_si256(_mm256_and_si256(b, m4), hl), fl[j]);
      u8x32_f(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), hh), fh[j]);
    }
    for (int r = 0; r < rows; r++) {
      const float *xb = x + (size_t)r * ld + 256 * i;
      __m256 a = acc[r], am = accm[r];
      for (int j = 0; j < 4; j++, xb += 64) {
        __m256 xl, xh;
        __m256 sl = f32x32_dot(fl[j], xb, &xl), sh = f32x32_dot(fh[j], xb + 32, &xh);
        k4_fold(&ks, j, sl, sh, xl, xh, &a, &am);
      }
      acc[r] = a;
      accm[r] = am;
    }
  }
  for (int r = 0; r < rows; r++) out[(size_t)r * os] = hsum8(_mm256_sub_ps(acc[r], accm[r]));
}

AVX2_FN static void rows_q6_k_avx2(const uint8_t *w, const float *x, size_t ld, int rows, int64_t n, float *out,
                                   size_t os) {
  __m256 acc0[ROWS_CHUNK], acc1[ROWS_CHUNK];
  for (int r = 0; r < rows; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3), b32 = _mm256_set1_epi8(32);
  __m256 qf[2][4][4], scf[2][8]; /* [half][k][8-lane group] quants, [half][2k+g] scales */
  for (int64_t i = 0; i < n / 256; i++, w += 210) {
    const uint8_t *ql = w, *qh = w + 128;
    const int8_t *sc = (const int8_t *)(w + 192);
    float d = h2f(ld16(w + 208));
    for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8) {
      __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)ql);
      __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
      __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)qh);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
      for (int k = 0; k < 4; k++) i8x32_f(_mm256_sub_epi8(q[k], b32), qf[half][k]);
      for (int s = 0; s < 8; s++) scf[half][s] = _mm256_set1_ps((float)sc[s]);
    }
    __m256 dv = _mm256_set1_ps(d);
    for (int r = 0; r < rows; r++) {
      const float *xb = x + (size_t)r * ld + 256 * i;
      __m256 blk0 = _mm256_setzero_ps(), blk1 = _mm256_setzero_ps();
      for (int half = 0; half < 2; half++, xb += 128)
        for (int k = 0; k < 4; k++) {
          const float *xk = xb + 32 * k;
          __m256 p0 = _mm256_mul_ps(qf[half][k][0], _mm256_loadu_ps(xk));
          __m256 p1 = _mm256_mul_ps(qf[half][k][1], _mm256_loadu_ps(xk + 8));
          __m256 p2 = _mm256_mul_ps(qf[half][k][2], _mm256_loadu_ps(xk + 16));
          __m256 p3 = _mm256_mul_ps(qf[half][k][3], _mm256_loadu_ps(xk + 24));
          blk0 = _mm256_fmadd_ps(scf[half][2 * k], _mm256_add_ps(p0, p1), blk0);
          blk1 = _mm256_fmadd_ps(scf[half][2 * k + 1], _mm256_add_ps(p2, p3), blk1);
        }
      acc0[r] = _mm256_fmadd_ps(dv, blk0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(dv, blk1, acc1[r]);
    }
  }
  for (int r = 0; r < rows; r++) out[(size_t)r * os] = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
}

/* rows <= ROWS_CHUNK */
AVX2_FN static void rows_avx2(gt_type_t t, const uint8_t *w, const float *x, size_t ld, int rows, int64_t n,
                              float *out, size_t os) {
  switch (t) {
    case GT_TYPE_F32: rows_f32_avx2(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_F16: rows_f16_avx2(w, x, ld, rows, n, out, os, 0); break;
    case GT_TYPE_BF16: rows_f16_avx2(w, x, ld, rows, n, out, os, 1); break;
    case GT_TYPE_Q8_0: rows_q8_0_avx2(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_Q4_K: rows_q4_k_avx2(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_Q5_K: rows_q5_k_avx2(w, x, ld, rows, n, out, os); break;
    case GT_TYPE_Q6_K: rows_q6_k_avx2(w, x, ld, rows, n, out, os); break;
    default:
      for (int r = 0; r < rows; r++) out[(size_t)r * os] = NAN;
  }
}

AVX2_FN static float dot_avx2(gt_type_t t, const uint8_t *w, const float *x, int64_t n) {
  switch (t) {
    case GT_TYPE_F32: return dot_f32_avx2(w, x, n);
    case GT_TYPE_F16: return dot_f16_avx2(w, x, n, 0);
    case GT_TYPE_BF16: return dot_f16_avx2(w, x, n, 1);
    case GT_TYPE_Q8_0: return dot_q8_0_avx2(w, x, n);
    case GT_TYPE_Q4_K: return dot_q4_k_avx2(w, x, n);
    case GT_TYPE_Q5_K: return dot_q5_k_avx2(w, x, n);
    case GT_TYPE_Q6_K: return dot_q6_k_avx2(w, x, n);
    default: return NAN;
  }
}

static int cpu_has_avx2(void) {
  __builtin_cpu_init();
  unsigned a, b, c, d;
  /* F16C: CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c") */
  int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static int cpu_has_avx2(void) { return 0; }
#endif

/* ---------------------------------------------------------------- dispatch */

static int g_isa = -1; /* resolved dt_isa_t; -1 = not yet chosen (benign race: same value) */

static int resolve_isa(dt_isa_t want) {
  if (want == DT_ISA_PORTABLE) return DT_ISA_PORTABLE;
  return cpu_has_avx2() ? DT_ISA_AVX2 : DT_ISA_PORTABLE;
}

dt_isa_t dt_set_isa(dt_isa_t isa) {
  int r = resolve_isa(isa);
  __atomic_store_n(&g_isa, r, __ATOMIC_RELAXED);
  return (dt_isa_t)r;
}

dt_isa_t dt_get_isa(void) {
  int r = __atomic_load_n(&g_isa, __ATOMIC_RELAXED);
  if (r < 0) {
    r = resolve_isa(DT_ISA_AUTO);
    __atomic_store_n(&g_isa, r, __ATOMIC_RELAXED);
  }
  return (dt_isa_t)r;
}

const char *dt_isa_name(dt_isa_t isa) {
  switch (isa) {
    case DT_ISA_PORTABLE: return "portable";
    case DT_ISA_AVX2: return "avx2";
    default: return "auto";
  }
}

float dt_dot_row(gt_type_t t, const void *w, const float *x, int64_t n) {
  if (!dt_computable(t) || n < 0 || n % k_types[t].blck) return NAN;
#if DT_HAVE_X86
  if (dt_get_isa() == DT_ISA_AVX2) return dot_avx2(t, w, x, n);
#endif
  return dot_portable(t, w, x, n);
}

void dt_dot_rows(gt_type_t t, const void *w, const float *x, size_t x_ld, int rows, int64_t n, float *out,
                 size_t out_stride) {
  if (rows <= 0) return;
  int ok = dt_computable(t) && n >= 0 && n % k_types[t].blck == 0;
#if DT_HAVE_X86
  int avx2 = dt_get_isa() == DT_ISA_AVX2;
#endif
  for (int r0 = 0; r0 < rows; r0 += ROWS_CHUNK) {
    int nr = rows - r0 < ROWS_CHUNK ? rows - r0 : ROWS_CHUNK;
    const float *xr = x + (size_t)r0 * x_ld;
    float *o = out + (size_t)r0 * out_stride;
    if (!ok) {
      for (int r = 0; r < nr; r++) o[(size_t)r * out_stride] = NAN;
      continue;
    }
#if DT_HAVE_X86
    if (avx2) {
      if (nr == 1) /* nothing to share: the single-row kernel itself */
        o[0] = dot_avx2(t, w, xr, n);
      else
        rows_avx2(t, w, xr, x_ld, nr, n, o, out_stride);
      continue;
    }
#endif
    if (nr == 1)
      o[0] = dot_portable(t, w, xr, n);
    else
      rows_portable(t, w, xr, x_ld, nr, n, o, out_stride);
  }
}
