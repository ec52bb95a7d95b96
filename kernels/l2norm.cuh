/* kernels/l2norm.cuh — x[r] *= scale / sqrt(||x[r]||² + eps) over rows of d (in place), the
 * form of the CPU reference (HF / fla). */
#ifndef GANTRY_KERNELS_L2NORM_CUH
#define GANTRY_KERNELS_L2NORM_CUH
#include "kernels/common.cuh"
KC_API int kc_l2norm(cudaStream_t st, float *x, int rows, int d, float eps, float scale);
#endif
