/* kernels/mul_sigmoid.cu — see mul_sigmoid.cuh. */
#include "kernels/mul_sigmoid.cuh"

__global__ void mul_sigmoid_kernel(float *x, const float *g, size_t n) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}
KC_API int kc_mul_sigmoid(cudaStream_t st, float *x, const float *g, size_t n) {
  if (n == 0) return 0;
  kc_launch(mul_sigmoid_kernel, KC_GRID(n, 256), 256, 0, st, x, g, n);
  return (int)cudaGetLastError();
}
