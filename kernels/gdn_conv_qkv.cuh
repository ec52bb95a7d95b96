/* kernels/gdn_conv_qkv.cuh — Gated DeltaNet input prep in one launch (the gdn_conv_qkv op): the
 * causal depthwise conv + SiLU of kernels/conv1d.cuh over C = 2*n_k*d_k + n_v*d_v channels of
 * x [n_tok, C] (w fp32 [C, K]; conv: the layer's slot states [n_slots, (K-1) * C], continued
 * from and updated), split into q, k [n_tok, n_k*d_k] and v [n_tok, n_v*d_v] (channel ranges
 * [0, kd), [kd, 2kd), [2kd, C), kd = n_k*d_k), q and k rows of d_k then l2-normalised as
 * kernels/l2norm.cuh (q with q_scale, k with 1). Each value is computed with the arithmetic of
 * kc_conv1d_silu then kc_l2norm (same summation order and reduction tree), so results equal the
 * unfused kernels'. A state slot out of range raises KC_EFLAG_STATE (that sequence's rows are
 * not written). Needs 2 <= K <= KC_CONV_MAX_K and d_k, d_v <= KC_GDN_CONV_QKV_MAX_HD, else
 * returns cudaErrorInvalidValue (the caller runs the unfused kernels). Returns a cudaError_t
 * value. */
#ifndef GANTRY_KERNELS_GDN_CONV_QKV_CUH
#define GANTRY_KERNELS_GDN_CONV_QKV_CUH
#include "kernels/common.cuh"

#define KC_GDN_CONV_QKV_MAX_HD 1024
/* tokens per block; at least KC_CONV_MAX_K - 1 (only a sequence's first chunk reads its state) */
#define KC_GDN_CONV_QKV_CHUNK 16

KC_API int kc_gdn_conv_qkv(cudaStream_t st, kc_batch_t b, float *conv, int n_slots, const float *x, const float *w,
                           int K, float *q, float *k, float *v, int n_k, int d_k, int n_v, int d_v, float eps,
                           float q_scale);
#endif
