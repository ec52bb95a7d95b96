/* kernels/gdn_scan_long.cuh — the sequential gated delta rule of gdn_scan.cuh for sequences of many
 * tokens (internal to kernels/gdn_scan.cu; the backend calls kc_gdn_scan).
 * Same state layout, inputs and arithmetic contract as kc_gdn_scan, with two reassociations: the
 * sums over d_k are split over the LPC lanes of a column, and the decay is applied after the sum,
 * kv = exp(g) (S_old ᵀk), S = fma(S_old, exp(g), k delta) (the CPU scales S first).
 * Processes the sequences with min_tok <= n < skip_from tokens and leaves the others untouched.
 * lpc: lanes per value column (4 or 8). Needs d_k <= 256 (kc_gdn_scan_long_ok). No allocation
 * (graph-capturable); bad state slots raise KC_EFLAG_STATE. Returns a cudaError_t value. */
#ifndef GANTRY_KERNELS_GDN_SCAN_LONG_CUH
#define GANTRY_KERNELS_GDN_SCAN_LONG_CUH
#include "kernels/common.cuh"
KC_API int kc_gdn_scan_long_ok(int d_k, int d_v);
KC_API int kc_gdn_scan_long(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                            int d_v, int min_tok, int skip_from, int lpc);
#endif
