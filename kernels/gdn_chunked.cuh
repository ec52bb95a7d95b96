/* kernels/gdn_chunked.cuh — the gated delta rule in chunks of KC_GDN_CHUNK tokens (prefill), the
 * algebra of engine/backend/gdn_chunked.h (WY/UT form, forward substitution, cumulative decays summed in
 * double, all else fp32), same layouts and contract as kc_gdn_scan: q, k [n_tok, n_k d_k];
 * v, out [n_tok, n_v d_v]; g, beta [n_tok, n_v]; ssm the layer's states [n_slots, n_v d_k d_v];
 * value head h reads key head h % n_k; S updated in place. Only sequences with at least min_tok
 * tokens in the batch are processed (the rest is left for kc_gdn_scan with skip_from = min_tok).
 * Needs no scratch (everything in shared memory, > 48 KB: opted in on each launch); not for
 * graph capture. out must not alias q or k. Bad state slots raise KC_EFLAG_STATE. */
#ifndef GANTRY_KERNELS_GDN_CHUNKED_CUH
#define GANTRY_KERNELS_GDN_CHUNKED_CUH
#include "kernels/common.cuh"

#define KC_GDN_CHUNK 64

/* 1 when kc_gdn_chunked supports d_k, d_v on the current device (d_k % 4 == 0 and the shared
 * memory it needs fits the device's opt-in limit), else 0. */
KC_API int kc_gdn_chunked_ok(int d_k, int d_v);
/* Bytes of dynamic shared memory one block takes for d_k. */
KC_API size_t kc_gdn_chunked_smem(int d_k);
KC_API int kc_gdn_chunked(cudaStream_t st, kc_batch_t b, float *ssm, int n_slots, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, float *out, int n_k, int n_v, int d_k,
                          int d_v, int min_tok);
#endif
