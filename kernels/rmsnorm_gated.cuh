/* kernels/rmsnorm_gated.cuh — out[r] = x[r] / sqrt(mean(x[r]²) + eps) * w * silu(z[r]) over
 * rows of d (w fp32 [d]). */
#ifndef GANTRY_KERNELS_RMSNORM_GATED_CUH
#define GANTRY_KERNELS_RMSNORM_GATED_CUH
#include "kernels/common.cuh"
KC_API int kc_rmsnorm_gated(cudaStream_t st, const float *x, const float *w, const float *z, float *out, int rows,
                            int d, float eps);
#endif
