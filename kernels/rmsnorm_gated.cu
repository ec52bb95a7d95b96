/* kernels/rmsnorm_gated.cu — see rmsnorm_gated.cuh. One block per row. */
#include "kernels/rmsnorm_gated.cuh"

__global__ void rmsnorm_gated_kernel(const float *x, const float *__restrict__ w, const float *z, float *out, int d,
                                     float eps) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const float *xr = x + (size_t)blockIdx.x * d, *zr = z + (size_t)blockIdx.x * d;
  float *orow = out + (size_t)blockIdx.x * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = kc_block_sum(ss);
  const float f = 1.0f / sqrtf(ss / (float)d + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * f * w[i] * kc_silu(zr[i]);
}
KC_API int kc_rmsnorm_gated(cudaStream_t st, const float *x, const float *w, const float *z, float *out, int rows,
                            int d, float eps) {
  if (rows <= 0) return 0;
  kc_launch(rmsnorm_gated_kernel, rows, d >= 256 ? 256 : 64, 0, st, x, w, z, out, d, eps);
  return (int)cudaGetLastError();
}
