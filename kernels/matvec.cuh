/* kernels/matvec.cuh — decode matmul: out[n, n_out] = x[n, cols] · Wᵀ for 1 <= n <= 32 rows,
 * W [n_out, cols] in its GGUF type (F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K). One warp per
 * output feature holds all n accumulators, so W is read once whatever n; fp32 accumulation.
 * Needs cols % 8 == 0 and x 16-byte aligned. Returns a cudaError_t value. */
#ifndef GANTRY_KERNELS_MATVEC_CUH
#define GANTRY_KERNELS_MATVEC_CUH
#include "kernels/common.cuh"

#define KC_MATVEC_MAX_ROWS 32

KC_API int kc_matvec(cudaStream_t st, int type, const void *w, int64_t n_out, int64_t cols, size_t row_bytes,
                     const float *x, float *out, int n);
#endif
