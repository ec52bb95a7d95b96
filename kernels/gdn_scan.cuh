/* kernels/gdn_scan.cuh — the gated delta rule per sequence and value head, token by token, from
 * the slot's state S [n_v, d_k, d_v] (value head h reads key head h % n_k):
 * S *= exp(g); S += k ⊗ beta (v - Sᵀk); o = Sᵀq. q, k [n_tok, n_k d_k]; v, out [n_tok, n_v d_v];
 * g, beta [n_tok, n_v]; ssm points at the layer's states [n_slots, n_v d_k d_v]. d_v <= 1024.
 * Sequential over tokens; sums over d_k are reassociated (per warp, then across warps) relative
 * to the CPU reference. Sequences of >= KC_GDN_LONG_MIN tokens take the long-sequence kernel
 * (kernels/gdn_scan_long.cuh: its contract), the others the per-token kernel. Only sequences with fewer than
 * skip_from tokens in the batch are processed (INT_MAX: all); the others are left untouched
 * for kc_gdn_chunked. Bad state slots raise KC_EFLAG_STATE. No allocation (graph-capturable). */
#ifndef GANTRY_KERNELS_GDN_SCAN_CUH
#define GANTRY_KERNELS_GDN_SCAN_CUH
#include "kernels/common.cuh"
/* Token count from which a sequence takes gdn_scan_long, and that kernel's lanes per column:
 * chosen from bench_gdn_scan on the H200 (kernels/ATTENTION.md): from 4 tokens on the long kernel
 * is as fast or faster, 1.7x at 32, 3.1x from 1024; 32 keeps the lengths that test_cuda_ops
 * checks on the GPU. 4 lanes: as fast as 8 for one sequence, 1.2x faster for 8 x 1024 tokens. */
#define KC_GDN_LONG_MIN 32
#define KC_GDN_LONG_LPC 4
KC_API int kc_gdn_scan(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                       int d_v, int skip_from);
/* kc_gdn_scan with the switch explicit (bench, tests): sequences of >= long_from tokens (1: all;
 * INT_MAX: none) take gdn_scan_long with long_lpc lanes per column (4 or 8). */
KC_API int kc_gdn_scan_sel(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                           const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                           int d_v, int skip_from, int long_from, int long_lpc);
#endif
