/* kernels/l2norm.cu — see l2norm.cuh. One block per row. */
#include "kernels/l2norm.cuh"

__global__ void l2norm_kernel(float *x, int d, float eps, float scale) {
  kc_pdl_wait();
  kc_pdl_trigger();
  float *xr = x + (size_t)blockIdx.x * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = kc_block_sum(ss);
  const float f = scale / sqrtf(ss + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] *= f;
}
KC_API int kc_l2norm(cudaStream_t st, float *x, int rows, int d, float eps, float scale) {
  if (rows <= 0) return 0;
  kc_launch(l2norm_kernel, rows, d >= 256 ? 256 : 64, 0, st, x, d, eps, scale);
  return (int)cudaGetLastError();
}
