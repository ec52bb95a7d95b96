/* kernels/embed.cu — see embed.cuh. One thread per 8-element chunk of an output row. */
#include "kernels/embed.cuh"
#include "kernels/quant.cuh"

template <int T>
__global__ void embed_kernel(kc_batch_t b, const uint8_t *__restrict__ w, int64_t rows, int64_t cols, size_t row_bytes,
                             float *__restrict__ out) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int64_t nch = cols >> 3;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)b.n_tok * nch) return;
  const int t = (int)(i / nch);
  const int64_t c = i % nch;
  const int32_t id = b.tok[t];
  if (id < 0 || id >= rows) {
    if (c == 0) atomicOr(b.eflag, KC_EFLAG_TOKEN);
    return;
  }
  float y[8];
  kc_deq<T>::chunk(w + (size_t)id * row_bytes, c, y);
  float *d = out + (size_t)t * cols + c * 8;
#pragma unroll
  for (int k = 0; k < 8; k++) d[k] = y[k];
}

KC_API int kc_embed(cudaStream_t st, kc_batch_t b, int type, const void *w, int64_t rows, int64_t cols,
                    size_t row_bytes, float *out) {
  if (cols % 8 != 0) return (int)cudaErrorInvalidValue;
  const int64_t n = (int64_t)b.n_tok * (cols >> 3);
  if (n == 0) return 0;
#define EM_CASE(T) kc_launch(embed_kernel<T>, KC_GRID(n, 256), 256, 0, st, b, (const uint8_t *)w, rows, cols, row_bytes, out)
  KC_TYPE_SWITCH(type, EM_CASE)
#undef EM_CASE
  return (int)cudaGetLastError();
}
