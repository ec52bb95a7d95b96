/* kernels/swiglu.cu — see swiglu.cuh. */
#include "kernels/swiglu.cuh"

__global__ void swiglu_kernel(const float *gate, const float *up, float *out, size_t n) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
KC_API int kc_swiglu(cudaStream_t st, const float *gate, const float *up, float *out, size_t n) {
  if (n == 0) return 0;
  kc_launch(swiglu_kernel, KC_GRID(n, 256), 256, 0, st, gate, up, out, n);
  return (int)cudaGetLastError();
}
