/* kernels/gdn_gates.cu — see gdn_gates.cuh. softplus with torch's threshold (x > 20 -> x). */
#include "kernels/gdn_gates.cuh"

__global__ void gdn_gates_kernel(const float *alpha, const float *beta_in, const float *__restrict__ a,
                                 const float *__restrict__ dt_bias, float *g, float *beta, size_t n, int n_v) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int h = (int)(i % (size_t)n_v);
  const float al = alpha[i], bi = beta_in[i];
  const float x = al + dt_bias[h];
  g[i] = a[h] * (x > 20.0f ? x : log1pf(expf(x)));
  beta[i] = 1.0f / (1.0f + expf(-bi));
}
KC_API int kc_gdn_gates(cudaStream_t st, const float *alpha, const float *beta_in, const float *a,
                        const float *dt_bias, float *g, float *beta, int n_tok, int n_v) {
  const size_t n = (size_t)n_tok * n_v;
  if (n == 0) return 0;
  kc_launch(gdn_gates_kernel, KC_GRID(n, 256), 256, 0, st, alpha, beta_in, a, dt_bias, g, beta, n, n_v);
  return (int)cudaGetLastError();
}
