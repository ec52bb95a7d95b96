/* kernels/rope.cu — see rope.cuh. Block (token, head), one thread per rotated pair. */
#include "kernels/rope.cuh"

__global__ void rope_kernel(kc_batch_t b, float *x, int n_head, int head_dim, int half,
                            const double *__restrict__ inv_freq, int freq_bf16) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int t = blockIdx.x, h = blockIdx.y;
  const double p = b.pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double ang = freq_bf16 ? (double)((float)p * (float)inv_freq[i]) : p * inv_freq[i];
    double sn, cs;
    sincos(ang, &sn, &cs);
    float *v = x + ((size_t)t * n_head + h) * head_dim;
    const float a = v[i], c = v[i + half], fc = (float)cs, fs = (float)sn;
    v[i] = a * fc - c * fs;
    v[i + half] = a * fs + c * fc;
  }
}

KC_API int kc_rope(cudaStream_t st, kc_batch_t b, float *x, int n_head, int head_dim, int n_rot,
                   const double *inv_freq, int freq_bf16) {
  const int half = n_rot / 2;
  if (b.n_tok <= 0 || half <= 0 || n_head <= 0) return 0;
  if (b.n_tok > 2147483647 || n_head > 65535) return (int)cudaErrorInvalidValue;
  const int threads = half >= 128 ? 128 : (half + 31) / 32 * 32;
  kc_launch(rope_kernel, dim3(b.n_tok, n_head), threads, 0, st, b, x, n_head, head_dim, half, inv_freq, freq_bf16);
  return (int)cudaGetLastError();
}
