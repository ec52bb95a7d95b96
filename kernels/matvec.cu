/* kernels/matvec.cu — see matvec.cuh. */
#include "kernels/matvec.cuh"
#include "kernels/quant.cuh"

#define MV_WARPS 8

/* Block of MV_WARPS warps; each output feature gets S consecutive warps (split over its
 * columns, S = 1, 2 or 4 so that small matrices still fill every SM), reduced in shared memory. */
template <int T, int NR>
__global__ void __launch_bounds__(MV_WARPS * 32) matvec_kernel(const uint8_t *__restrict__ w, size_t row_bytes,
                                                               int64_t n_out, int64_t cols,
                                                               const float *__restrict__ x, float *__restrict__ out,
                                                               int n, int S) {
  __shared__ float red[MV_WARPS][NR];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int64_t o = (int64_t)blockIdx.x * (MV_WARPS / S) + wi / S;
  const int part = wi % S;
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; r++) acc[r] = 0.0f;
  if (o < n_out) {
    const uint8_t *wr = w + (size_t)o * row_bytes;
    const int64_t nch = cols >> 3;
    /* small batches: unroll so several independent weight loads are in flight per lane (larger
     * ones have enough independent x loads; unrolling them too only bloats the binary) */
#pragma unroll(NR <= 4 ? 4 : 1)
    for (int64_t c = (int64_t)part * 32 + lane; c < nch; c += 32 * S) {
      float wv[8];
      kc_deq<T>::chunk(wr, c, wv);
#pragma unroll
      for (int r = 0; r < NR; r++) {
        if (r < n) {
          const float4 *xp = (const float4 *)(x + (size_t)r * cols + c * 8);
          const float4 a = __ldg(xp), b = __ldg(xp + 1);
          acc[r] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z +
                    wv[7] * b.w;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < NR; r++) {
    if (r < n) {
      const float v = kc_warp_sum(acc[r]);
      if (lane == 0) red[wi][r] = v;
    }
  }
  if (S == 1) {
    if (lane == 0 && o < n_out)
      for (int r = 0; r < n; r++) out[(size_t)r * n_out + o] = red[wi][r];
    return;
  }
  __syncthreads();
  if (part == 0 && lane < n && o < n_out) {
    float v = 0.0f;
    for (int s = 0; s < S; s++) v += red[wi + s][lane];
    out[(size_t)lane * n_out + o] = v;
  }
}

template <int T>
static int launch(cudaStream_t st, const void *w, int64_t n_out, int64_t cols, size_t row_bytes, const float *x,
                  float *out, int n) {
  const int S = n_out >= 8192 ? 1 : n_out >= 2048 ? 2 : 4;
  const dim3 grid(KC_GRID(n_out, MV_WARPS / S)), block(MV_WARPS * 32);
  const uint8_t *wb = (const uint8_t *)w;
  if (n <= 1) matvec_kernel<T, 1><<<grid, block, 0, st>>>(wb, row_bytes, n_out, cols, x, out, n, S);
  else if (n <= 2) matvec_kernel<T, 2><<<grid, block, 0, st>>>(wb, row_bytes, n_out, cols, x, out, n, S);
  else if (n <= 4) matvec_kernel<T, 4><<<grid, block, 0, st>>>(wb, row_bytes, n_out, cols, x, out, n, S);
  else if (n <= 8) matvec_kernel<T, 8><<<grid, block, 0, st>>>(wb, row_bytes, n_out, cols, x, out, n, S);
  else if (n <= 16) matvec_kernel<T, 16><<<grid, block, 0, st>>>(wb, row_bytes, n_out, cols, x, out, n, S);
  else matvec_kernel<T, 32><<<grid, block, 0, st>>>(wb, row_bytes, n_out, cols, x, out, n, S);
  return (int)cudaGetLastError();
}

KC_API int kc_matvec(cudaStream_t st, int type, const void *w, int64_t n_out, int64_t cols, size_t row_bytes,
                     const float *x, float *out, int n) {
  if (n < 1 || n > KC_MATVEC_MAX_ROWS || cols % 8 != 0 || ((uintptr_t)x & 15) != 0) return (int)cudaErrorInvalidValue;
#define MV_CASE(T) return launch<T>(st, w, n_out, cols, row_bytes, x, out, n)
  KC_TYPE_SWITCH(type, MV_CASE)
#undef MV_CASE
  return 0;
}
