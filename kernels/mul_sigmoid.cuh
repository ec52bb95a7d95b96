/* kernels/mul_sigmoid.cuh — x[i] *= sigmoid(g[i]) for i < n (gated attention output). */
#ifndef GANTRY_KERNELS_MUL_SIGMOID_CUH
#define GANTRY_KERNELS_MUL_SIGMOID_CUH
#include "kernels/common.cuh"
KC_API int kc_mul_sigmoid(cudaStream_t st, float *x, const float *g, size_t n);
#endif
