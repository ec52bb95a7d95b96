/* kernels/rmsnorm.cu — see rmsnorm.cuh. One block per row; sum of squares in double like the
 * CPU reference (the row is read from L1/L2 a second time for the output). */
#include "kernels/rmsnorm.cuh"

__global__ void rmsnorm_kernel(float *x, const float *__restrict__ delta, const float *__restrict__ w, float *out,
                               int d, float eps) {
  kc_pdl_wait();
  kc_pdl_trigger();
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
  ss = kc_block_sum_d(ss);
  const float scale = (float)(1.0 / sqrt(ss / d + eps));
  for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * scale * w[i];
}

/* Fast form: d % 4 == 0, 16-byte aligned rows, d / 4 <= RN_V * blockDim.x. The row stays in
 * registers between the sum of squares and the output (one read of x, delta and w). */
#define RN_V 4
__global__ void rmsnorm_v4_kernel(float *x, const float *__restrict__ delta, const float *__restrict__ w, float *out,
                                  int d, float eps) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int nv = d >> 2;
  float4 *xr = (float4 *)(x + (size_t)blockIdx.x * d);
  const float4 *dr = delta ? (const float4 *)(delta + (size_t)blockIdx.x * d) : NULL;
  float4 *orow = (float4 *)(out + (size_t)blockIdx.x * d);
  float4 v[RN_V];
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < RN_V; k++) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nv) {
      float4 a = xr[i];
      if (dr) {
        const float4 b = dr[i];
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
      }
      v[k] = a;
      ss += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
    }
  }
  if (dr) {
#pragma unroll
    for (int k = 0; k < RN_V; k++) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nv) xr[i] = v[k];
    }
  }
  ss = kc_block_sum_d(ss);
  const float scale = (float)(1.0 / sqrt(ss / d + eps));
  const float4 *wr = (const float4 *)w;
#pragma unroll
  for (int k = 0; k < RN_V; k++) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nv) {
      const float4 a = v[k], g = wr[i];
      orow[i] = make_float4(a.x * scale * g.x, a.y * scale * g.y, a.z * scale * g.z, a.w * scale * g.w);
    }
  }
}

static int launch(cudaStream_t st, float *x, const float *delta, const float *w, float *out, int rows, int d,
                  float eps) {
  if (rows <= 0) return 0;
  const int nv = d / 4;
  const int aligned = d % 4 == 0 && (((uintptr_t)x | (uintptr_t)w | (uintptr_t)out | (uintptr_t)delta) & 15) == 0;
  if (aligned && nv <= RN_V * 1024) {
    int threads = (nv + 1) / 2; /* two float4 per thread */
    threads = (threads + 31) / 32 * 32;
    if (threads > 1024) threads = 1024;
    if (threads < 32) threads = 32;
    kc_launch(rmsnorm_v4_kernel, rows, threads, 0, st, x, delta, w, out, d, eps);
    return (int)cudaGetLastError();
  }
  const int threads = d >= 1024 ? 512 : d >= 256 ? 256 : 64;
  kc_launch(rmsnorm_kernel, rows, threads, 0, st, x, delta, w, out, d, eps);
  return (int)cudaGetLastError();
}

KC_API int kc_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int d, float eps) {
  return launch(st, (float *)x, NULL, w, out, rows, d, eps); /* x is only written when delta != NULL */
}
KC_API int kc_add_rmsnorm(cudaStream_t st, float *x, const float *delta, const float *w, float *out, int rows, int d,
                          float eps) {
  return launch(st, x, delta, w, out, rows, d, eps);
}
