/* kernels/rmsnorm.cu — see rmsnorm.cuh. One block per row; sum of squares in double like the
 * CPU reference (the row is read from L1/L2 a second time for the output). */
#include "kernels/rmsnorm.cuh"

__device__ __forceinline__ double block_sum_d(double v) {
  __shared__ double part[33];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(KC_FULL_MASK, v, o);
  if (lane == 0) part[wi] = v;
  __syncthreads();
  if (wi == 0) {
    double s = lane < nw ? part[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(KC_FULL_MASK, s, o);
    if (lane == 0) part[32] = s;
  }
  __syncthreads();
  return part[32];
}

__global__ void rmsnorm_kernel(float *x, const float *__restrict__ delta, const float *__restrict__ w, float *out,
                               int d, float eps) {
  float *xr = x + (size_t)blockIdx.x * d;
  float *orow = out + (size_t)blockIdx.x * d;
  double ss = 0.0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = xr[i];
    if (delta) {
      v += delta[(size_t)blockIdx.x * d + i];
      xr[i] = v;
    }
    ss += (double)v * v;
  }
  ss = block_sum_d(ss);
  const float scale = (float)(1.0 / sqrt(ss / d + eps));
  for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * scale * w[i];
}

static int launch(cudaStream_t st, float *x, const float *delta, const float *w, float *out, int rows, int d,
                  float eps) {
  if (rows <= 0) return 0;
  const int threads = d >= 1024 ? 512 : d >= 256 ? 256 : 64;
  rmsnorm_kernel<<<rows, threads, 0, st>>>(x, delta, w, out, d, eps);
  return (int)cudaGetLastError();
}

KC_API int kc_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int d, float eps) {
  return launch(st, (float *)x, NULL, w, out, rows, d, eps); /* x is only written when delta != NULL */
}
KC_API int kc_add_rmsnorm(cudaStream_t st, float *x, const float *delta, const float *w, float *out, int rows, int d,
                          float eps) {
  return launch(st, x, delta, w, out, rows, d, eps);
}
