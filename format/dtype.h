/* format/dtype.h — weight/tensor element types, numbered exactly as ggml's enum ggml_type
 * (GGUF stores these ids). gantry computes with F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K;
 * the others are known (sizes only) so any GGUF can be parsed and described.
 *
 * Block layouts (little-endian, as ggml): Q8_0 = {f16 d; int8 qs[32]} (34 B / 32);
 * Q4_K = {f16 d, dmin; u8 scales[12]; u8 qs[128]} (144 B / 256);
 * Q5_K = {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} (176 B / 256);
 * Q6_K = {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B / 256). */
#ifndef GANTRY_ENGINE_DTYPE_H
#define GANTRY_ENGINE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  GT_TYPE_F32 = 0,
  GT_TYPE_F16 = 1,
  GT_TYPE_Q4_0 = 2,
  GT_TYPE_Q4_1 = 3,
  GT_TYPE_Q5_0 = 6,
  GT_TYPE_Q5_1 = 7,
  GT_TYPE_Q8_0 = 8,
  GT_TYPE_Q8_1 = 9,
  GT_TYPE_Q2_K = 10,
  GT_TYPE_Q3_K = 11,
  GT_TYPE_Q4_K = 12,
  GT_TYPE_Q5_K = 13,
  GT_TYPE_Q6_K = 14,
  GT_TYPE_Q8_K = 15,
  GT_TYPE_IQ2_XXS = 16,
  GT_TYPE_IQ2_XS = 17,
  GT_TYPE_IQ3_XXS = 18,
  GT_TYPE_IQ1_S = 19,
  GT_TYPE_IQ4_NL = 20,
  GT_TYPE_IQ3_S = 21,
  GT_TYPE_IQ2_S = 22,
  GT_TYPE_IQ4_XS = 23,
  GT_TYPE_I8 = 24,
  GT_TYPE_I16 = 25,
  GT_TYPE_I32 = 26,
  GT_TYPE_I64 = 27,
  GT_TYPE_F64 = 28,
  GT_TYPE_IQ1_M = 29,
  GT_TYPE_BF16 = 30,
  GT_TYPE_TQ1_0 = 34,
  GT_TYPE_TQ2_0 = 35,
  GT_TYPE_MXFP4 = 39,
  GT_TYPE_COUNT = 40
} gt_type_t;

/* "F32", "Q4_K", ...; "?" for ids that are not ggml types. */
const char *dt_name(gt_type_t t);
/* Parses a name as printed by dt_name (case-insensitive); returns -1 if unknown. */
int dt_from_name(const char *name);
/* 1 if t is a ggml type id with a known block size (used to validate GGUF tensor infos). */
int dt_known(int t);
/* 1 if gantry can dequantize / dot / compute with t. */
int dt_computable(gt_type_t t);
/* Elements per block (1 for F32/F16/BF16, 32 for Q8_0, 256 for K-quants). 0 if unknown. */
int64_t dt_block_elems(gt_type_t t);
/* Bytes per block. 0 if unknown. */
size_t dt_block_bytes(gt_type_t t);
/* Bytes of a row of n elements; n must be a multiple of dt_block_elems(t). Returns 0 if not. */
size_t dt_row_bytes(gt_type_t t, int64_t n);

/* Scalar conversions (round-to-nearest-even for the f32 -> half forms, like ggml). */
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_f16(float f);
float dt_bf16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float f);

/* dst[0..n) = dequantized row src (n a multiple of the block size). Returns 0, or GT_EUNSUPPORTED
 * for a non-computable type. Results are exactly ggml's dequantize_row_* (fp32). */
int dt_dequant_row(gt_type_t t, const void *src, float *dst, int64_t n);

/* sum_i w[i] * x[i] with fp32 accumulation, w a row of type t, x fp32 (n a multiple of the
 * block size). Must equal dequant-then-dot up to fp32 reassociation. */
float dt_dot_row(gt_type_t t, const void *w, const float *x, int64_t n);

/* Multi-row dot: out[r * out_stride] = dt_dot_row(t, w, x + r * x_ld, n) for r in [0, rows),
 * bit-identical to calling dt_dot_row row by row with the same kernel set (same operations in
 * the same order per row), but each weight block (scales, quants) is decoded once per chunk of
 * up to 16 rows instead of once per row. x: rows of n floats, x_ld floats apart; out: rows
 * floats, out_stride floats apart. rows <= 0 writes nothing; a non-computable type or a bad n
 * writes NAN to every output (as dt_dot_row returns). */
void dt_dot_rows(gt_type_t t, const void *w, const float *x, size_t x_ld, int rows, int64_t n, float *out,
                 size_t out_stride);

/* Kernel set used by dt_dot_row. DT_ISA_AUTO (the default) picks AVX2+FMA+F16C when the CPU has
 * them, else the portable kernels. Tests and benches force DT_ISA_PORTABLE to check/measure
 * the portable path. dt_set_isa returns the set actually selected (AVX2 is refused on CPUs
 * without it); process-wide, meant to be called before worker threads start. */
typedef enum { DT_ISA_AUTO = 0, DT_ISA_PORTABLE = 1, DT_ISA_AVX2 = 2 } dt_isa_t;
dt_isa_t dt_set_isa(dt_isa_t isa);
dt_isa_t dt_get_isa(void);
const char *dt_isa_name(dt_isa_t isa);

#endif
