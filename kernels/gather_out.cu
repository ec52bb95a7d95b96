/* kernels/gather_out.cu — see gather_out.cuh. One block per output row. */
#include "kernels/gather_out.cuh"

__global__ void gather_out_kernel(kc_batch_t b, const float *__restrict__ x, float *__restrict__ out, int d) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int i = blockIdx.x, t = b.out_tok[i];
  if (t < 0 || t >= b.n_tok) {
    if (threadIdx.x == 0) atomicOr(b.eflag, KC_EFLAG_OUT_TOK);
    return;
  }
  for (int j = threadIdx.x; j < d; j += blockDim.x) out[(size_t)i * d + j] = x[(size_t)t * d + j];
}

KC_API int kc_gather_out(cudaStream_t st, kc_batch_t b, const float *x, float *out, int d) {
  if (b.n_out <= 0 || d <= 0) return 0;
  kc_launch(gather_out_kernel, b.n_out, 256, 0, st, b, x, out, d);
  return (int)cudaGetLastError();
}
