/* kernels/conv1d.cuh — causal depthwise conv + SiLU per sequence, continuing from (and updating)
 * the slot's conv state [K-1, C] (oldest first): out[t, c] = silu(sum_j w[c, j] x[t-K+1+j, c]).
 * x, out [n_tok, C] (may alias); w fp32 [C, K]; conv points at the layer's states
 * [n_slots, (K-1) * C]. K <= 16. */
#ifndef GANTRY_KERNELS_CONV1D_CUH
#define GANTRY_KERNELS_CONV1D_CUH
#include "kernels/common.cuh"

#define KC_CONV_MAX_K 16
KC_API int kc_conv1d_silu(cudaStream_t st, kc_batch_t b, float *conv, int n_slots, const float *x, float *out,
                          const float *w, int C, int K);
#endif
