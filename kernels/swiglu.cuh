/* kernels/swiglu.cuh — out[i] = silu(gate[i]) * up[i] for i < n (out may alias either input). */
#ifndef GANTRY_KERNELS_SWIGLU_CUH
#define GANTRY_KERNELS_SWIGLU_CUH
#include "kernels/common.cuh"
KC_API int kc_swiglu(cudaStream_t st, const float *gate, const float *up, float *out, size_t n);
#endif
