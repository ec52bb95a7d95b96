/* kernels/add.cuh — y[i] += x[i] for i < n. */
#ifndef GANTRY_KERNELS_ADD_CUH
#define GANTRY_KERNELS_ADD_CUH
#include "kernels/common.cuh"
KC_API int kc_add(cudaStream_t st, float *y, const float *x, size_t n);
#endif
