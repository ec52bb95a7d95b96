/* kernels/conv1d.cu — see conv1d.cuh. One thread per (sequence, channel) slides the window,
 * writing it after token i to the sequence's position slot i when it has one. */
#include "kernels/conv1d.cuh"

__global__ void conv1d_kernel(kc_batch_t b, float *conv, int n_slots, const float *x, float *out,
                              const float *__restrict__ w, int C, int K) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (it >= (int64_t)b.n_seq * C) return;
  const int s = (int)(it / C), ch = (int)(it % C);
  const int slot = b.state_slot[s];
  if (slot < 0 || slot >= n_slots) {
    atomicOr(b.eflag, KC_EFLAG_STATE);
    return;
  }
  float *stt = conv + (size_t)slot * (K - 1) * C;
  const float *wc = w + (size_t)ch * K;
  float win[KC_CONV_MAX_K];
#pragma unroll
  for (int r = 0; r < KC_CONV_MAX_K; r++)
    if (r < K - 1) win[r] = stt[(size_t)r * C + ch];
  const int t0 = b.seq_first[s], n = b.seq_ntok[s];
  for (int i = 0; i < n; i++) {
    const size_t idx = (size_t)(t0 + i) * C + ch;
    win[K - 1] = x[idx];
    float acc = 0.0f;
    for (int j = 0; j < K; j++) acc += wc[j] * win[j];
    out[idx] = kc_silu(acc);
    for (int j = 0; j < K - 1; j++) win[j] = win[j + 1];
    const int ps = kc_pos_slot(b, s, i, n, n_slots); /* the window after token i */
    if (ps >= 0)
      for (int r = 0; r < K - 1; r++) conv[((size_t)ps * (K - 1) + r) * C + ch] = win[r];
  }
  for (int r = 0; r < K - 1; r++) stt[(size_t)r * C + ch] = win[r];
}

KC_API int kc_conv1d_silu(cudaStream_t st, kc_batch_t b, float *conv, int n_slots, const float *x, float *out,
                          const float *w, int C, int K) {
  if (K < 2 || K > KC_CONV_MAX_K || C <= 0) return (int)cudaErrorInvalidValue;
  const int64_t n = (int64_t)b.n_seq * C;
  if (n == 0) return 0;
  kc_launch(conv1d_kernel, KC_GRID(n, 128), 128, 0, st, b, conv, n_slots, x, out, w, C, K);
  return (int)cudaGetLastError();
}
