/* kernels/dequant.cu — see dequant.cuh. One thread per 8-element chunk. */
#include "kernels/dequant.cuh"
#include "kernels/quant.cuh"

/* a chunk's 8 values as fp32 (two 16-byte stores) or rounded to nearest even bf16 (one) */
static __device__ __forceinline__ void dq_store8(float *d, const float *y) {
  ((float4 *)d)[0] = make_float4(y[0], y[1], y[2], y[3]);
  ((float4 *)d)[1] = make_float4(y[4], y[5], y[6], y[7]);
}
static __device__ __forceinline__ void dq_store8(__nv_bfloat16 *d, const float *y) {
  __nv_bfloat162 h[4];
  for (int j = 0; j < 4; j++) h[j] = __floats2bfloat162_rn(y[2 * j], y[2 * j + 1]);
  *(uint4 *)d = *(const uint4 *)h;
}

template <int T, class O>
__global__ void dequant_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int64_t row0, int64_t nrows,
                               int64_t cols, O *__restrict__ dst) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int64_t nch = cols >> 3;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nrows * nch) return;
  const int64_t r = i / nch, c = i % nch;
  float y[8];
  kc_deq<T>::chunk(w + (size_t)(row0 + r) * row_bytes, c, y);
  dq_store8(dst + r * cols + c * 8, y);
}

template <class O>
static int dequant_go(cudaStream_t st, int type, const void *w, size_t row_bytes, int64_t row0, int64_t nrows,
                      int64_t cols, O *dst) {
  if (cols % 8 != 0 || ((uintptr_t)dst & 15) != 0) return (int)cudaErrorInvalidValue;
  const int64_t n = nrows * (cols >> 3);
  if (n == 0) return 0;
#define DQ_CASE(T) \
  kc_launch(dequant_kernel<T, O>, KC_GRID(n, 256), 256, 0, st, (const uint8_t *)w, row_bytes, row0, nrows, cols, dst)
  KC_TYPE_SWITCH(type, DQ_CASE)
#undef DQ_CASE
  return (int)cudaGetLastError();
}

KC_API int kc_dequant_rows_bf16(cudaStream_t st, int type, const void *w, size_t row_bytes, int64_t row0,
                                int64_t nrows, int64_t cols, void *dst) {
  return dequant_go(st, type, w, row_bytes, row0, nrows, cols, (__nv_bfloat16 *)dst);
}

KC_API int kc_dequant_rows(cudaStream_t st, int type, const void *w, size_t row_bytes, int64_t row0, int64_t nrows,
                           int64_t cols, float *dst) {
  return dequant_go(st, type, w, row_bytes, row0, nrows, cols, dst);
}
