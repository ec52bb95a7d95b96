/* kernels/logits_mask.cu — see logits_mask.cuh. One thread per logit: the 32 threads of a warp
 * read one mask word (a broadcast) and write 32 consecutive logits (coalesced). */
#include "kernels/logits_mask.cuh"

__global__ void logits_mask_kernel(float *x, const uint32_t *mask, const uint32_t *rmap, int n_vocab, size_t words) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const uint32_t slot = rmap[blockIdx.y];
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (slot == 0xffffffffu || v >= n_vocab) return;
  const uint32_t m = mask[(size_t)slot * words + (unsigned)v / 32];
  if (!(m >> (v & 31) & 1u)) x[(size_t)blockIdx.y * n_vocab + v] = -INFINITY;
}

KC_API int kc_logits_mask(cudaStream_t st, float *x, const uint32_t *mask, const uint32_t *rmap, int rows, int n_vocab) {
  if (rows <= 0 || n_vocab <= 0) return 0;
  const size_t words = ((size_t)n_vocab + 31) / 32;
  kc_launch(logits_mask_kernel, dim3(KC_GRID(n_vocab, 256), (unsigned)rows), 256, 0, st, x, mask, rmap, n_vocab, words);
  return (int)cudaGetLastError();
}
