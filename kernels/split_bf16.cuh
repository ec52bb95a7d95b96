/* kernels/split_bf16.cuh — the activation side of the BF16-weight tensor-core GEMM:
 * kc_split_bf16 writes xs[parts rows, cols] (bf16) with rows [0, rows) = hi = bf16(x) and, for
 * parts 2, rows [rows, 2 rows) = lo = bf16(x - hi), so hi + lo carries x to ~2^-17 relative; W · x is then
 * W · hi + W · lo with exact bf16 products and fp32 accumulation. kc_join_halves adds the two
 * halves of the product: out[r, j] = c2[r, j] + c2[rows + r, j] (c2 [2 rows, n] fp32). */
#ifndef GANTRY_KERNELS_SPLIT_BF16_CUH
#define GANTRY_KERNELS_SPLIT_BF16_CUH
#include "kernels/common.cuh"

KC_API int kc_split_bf16(cudaStream_t st, const float *x, int rows, int64_t cols, int parts, void *xs);
KC_API int kc_join_halves(cudaStream_t st, const float *c2, float *out, int rows, int64_t n);
#endif
