/* kernels/rmsnorm.cuh — RMSNorm over rows of d: out[r] = x[r] / sqrt(mean(x[r]²) + eps) * w
 * (w fp32 [d]; out may equal x), and the fused form that first does x += delta (x is updated
 * in place, then normalised into out). Returns a cudaError_t value. */
#ifndef GANTRY_KERNELS_RMSNORM_CUH
#define GANTRY_KERNELS_RMSNORM_CUH
#include "kernels/common.cuh"

KC_API int kc_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int d, float eps);
KC_API int kc_add_rmsnorm(cudaStream_t st, float *x, const float *delta, const float *w, float *out, int rows, int d,
                          float eps);
#endif
