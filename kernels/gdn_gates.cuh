/* kernels/gdn_gates.cuh — g[t, h] = a[h] * softplus(alpha[t, h] + dt_bias[h]) and
 * beta[t, h] = sigmoid(beta_in[t, h]) over [n_tok, n_v]; outputs may alias inputs. */
#ifndef GANTRY_KERNELS_GDN_GATES_CUH
#define GANTRY_KERNELS_GDN_GATES_CUH
#include "kernels/common.cuh"
KC_API int kc_gdn_gates(cudaStream_t st, const float *alpha, const float *beta_in, const float *a,
                        const float *dt_bias, float *g, float *beta, int n_tok, int n_v);
#endif
