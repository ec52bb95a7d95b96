/* kernels/gdn_scan.cuh — the gated delta rule per sequence and value head, token by token, from
 * the slot's state S [n_v, d_k, d_v] (value head h reads key head h % n_k):
 * S *= exp(g); S += k ⊗ beta (v - Sᵀk); o = Sᵀq. q, k [n_tok, n_k d_k]; v, out [n_tok, n_v d_v];
 * g, beta [n_tok, n_v]; ssm points at the layer's states [n_slots, n_v d_k d_v]. d_v <= 1024.
 * Sequential over tokens (prefill too): the same summation order as the CPU reference. */
#ifndef GANTRY_KERNELS_GDN_SCAN_CUH
#define GANTRY_KERNELS_GDN_SCAN_CUH
#include "kernels/common.cuh"
KC_API int kc_gdn_scan(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                       int d_v);
#endif
