/* kernels/rope.cu — see rope.cuh. One thread per (token, rotated pair), looping over heads. */
#include "kernels/rope.cuh"

__global__ void rope_kernel(kc_batch_t b, float *x, int n_head, int head_dim, int n_rot, float theta, int freq_bf16) {
  const int half = n_rot / 2;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)b.n_tok * half) return;
  const int t = (int)(idx / half), i = (int)(idx % half);
  const double p = b.pos[t];
  double ang;
  if (freq_bf16) {
    const float inv = kc_round_bf16((float)(1.0 / pow((double)theta, 2.0 * i / n_rot)));
    ang = (double)((float)p * inv);
  } else {
    ang = p * pow((double)theta, -2.0 * i / n_rot);
  }
  const float cs = (float)cos(ang), sn = (float)sin(ang);
  for (int h = 0; h < n_head; h++) {
    float *v = x + ((size_t)t * n_head + h) * head_dim;
    const float a = v[i], c = v[i + half];
    v[i] = a * cs - c * sn;
    v[i + half] = a * sn + c * cs;
  }
}

KC_API int kc_rope(cudaStream_t st, kc_batch_t b, float *x, int n_head, int head_dim, int n_rot, float theta,
                   int freq_bf16) {
  const int64_t n = (int64_t)b.n_tok * (n_rot / 2);
  if (n <= 0) return 0;
  rope_kernel<<<KC_GRID(n, 128), 128, 0, st>>>(b, x, n_head, head_dim, n_rot, theta, freq_bf16);
  return (int)cudaGetLastError();
}
