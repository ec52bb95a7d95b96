/* kernels/dequant.cuh — dst[nrows, cols] (fp32) = rows [row0, row0 + nrows) of W in its GGUF
 * type: the tile the prefill GEMM (cuBLAS) multiplies. cols % 8 == 0. Returns a cudaError_t. */
#ifndef GANTRY_KERNELS_DEQUANT_CUH
#define GANTRY_KERNELS_DEQUANT_CUH
#include "kernels/common.cuh"

KC_API int kc_dequant_rows(cudaStream_t st, int type, const void *w, size_t row_bytes, int64_t row0, int64_t nrows,
                           int64_t cols, float *dst);
/* The same rows as bf16 (each fp32 value of kc_dequant_rows rounded to nearest even) into
 * dst[nrows, cols] (16-byte aligned): the weight tile of the fast prefill GEMM (bf16 tensor
 * cores, backend_cuda_ops.c). */
KC_API int kc_dequant_rows_bf16(cudaStream_t st, int type, const void *w, size_t row_bytes, int64_t row0,
                                int64_t nrows, int64_t cols, void *dst);
#endif
