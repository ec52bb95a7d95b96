/* kernels/split_bf16.cu — see split_bf16.cuh. */
#include "kernels/split_bf16.cuh"

__global__ void split_bf16_kernel(const float *__restrict__ x, size_t n, int parts, __nv_bfloat16 *__restrict__ xs) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const __nv_bfloat16 hi = __float2bfloat16_rn(v);
  xs[i] = hi;
  if (parts > 1) xs[n + i] = __float2bfloat16_rn(v - __bfloat162float(hi));
}

__global__ void join_halves_kernel(const float *__restrict__ c2, float *__restrict__ out, size_t n) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = c2[i] + c2[n + i];
}

KC_API int kc_split_bf16(cudaStream_t st, const float *x, int rows, int64_t cols, int parts, void *xs) {
  const size_t n = (size_t)rows * cols;
  if (n == 0) return 0;
  if (parts != 1 && parts != 2) return (int)cudaErrorInvalidValue;
  kc_launch(split_bf16_kernel, KC_GRID(n, 256), 256, 0, st, x, n, parts, (__nv_bfloat16 *)xs);
  return (int)cudaGetLastError();
}

KC_API int kc_join_halves(cudaStream_t st, const float *c2, float *out, int rows, int64_t n_cols) {
  const size_t n = (size_t)rows * n_cols;
  if (n == 0) return 0;
  kc_launch(join_halves_kernel, KC_GRID(n, 256), 256, 0, st, c2, out, n);
  return (int)cudaGetLastError();
}
