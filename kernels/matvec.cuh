/* kernels/matvec.cuh — decode matmul: out[n, n_out] = x[n, cols] · Wᵀ for 1 <= n <= 32 rows,
 * W [n_out, cols] in its GGUF type (F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K). One warp per
 * output feature holds all n accumulators, so W is read once whatever n; fp32 accumulation.
 * Needs cols % 8 == 0 and x 16-byte aligned. Returns a cudaError_t value. Design: matvec.cu. */
#ifndef GANTRY_KERNELS_MATVEC_CUH
#define GANTRY_KERNELS_MATVEC_CUH
#include "kernels/common.cuh"

#define KC_MATVEC_MAX_ROWS 32
#define KC_MATVEC_MAX_SEGS 4

KC_API int kc_matvec(cudaStream_t st, int type, const void *w, int64_t n_out, int64_t cols, size_t row_bytes,
                     const float *x, float *out, int n);

/* One weight of a multi-output product: out[n, n_out] = x · wᵀ (out row stride n_out). */
typedef struct {
  const void *w;
  float *out;
  int64_t n_out;
  size_t row_bytes;
} kc_mv_seg_t;

/* Several products of the same x [n, cols] in one launch (q/k/v, GDN in-projections):
 * 1 <= n_seg <= KC_MATVEC_MAX_SEGS weights of one type and the same cols. Each output equals
 * what kc_matvec gives for that weight alone. */
KC_API int kc_matvec_multi(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, int64_t cols,
                           const float *x, int n);

/* out[n, n_out] = silu(x · wgᵀ) * (x · wuᵀ): gate and up weights of one type and shape
 * [n_out, cols]; the two products of each output feature are those of kc_matvec (bit for bit
 * when both weights meet the same alignment, e.g. both from cudaMalloc). One launch. */
KC_API int kc_matvec_swiglu(cudaStream_t st, int type, const void *wg, const void *wu, int64_t n_out, int64_t cols,
                            size_t row_bytes, const float *x, float *out, int n);
#endif
