/* kernels/attn_prep.cuh — attention input prep of a batch in one launch (the attn_qk_prep op):
 * per head, RMSNorm of q [n_tok, n_head, hd] and k [n_tok, n_kv_head, hd] in place (weights
 * qw, kw fp32 [hd]), NeoX RoPE over dims [0, n_rot) (inv_freq, freq_bf16 as kernels/rope.cuh),
 * and the finished k rows plus v [n_tok, n_kv_head * hd] written into the layer's paged pools
 * (kv.kv_dim must be n_kv_head * hd). Each value is computed with the arithmetic of kc_rmsnorm,
 * kc_rope and kc_kv_store run in that order (same thread layout for the sum of squares), so the
 * results are those of the unfused kernels. A position outside the sequence's blocks raises
 * KC_EFLAG_KV_SLOT (q and k are still normalised and rotated). Needs 2 <= n_rot <= hd, n_rot
 * even, hd <= KC_ATTN_PREP_MAX_HD. Returns a cudaError_t value. */
#ifndef GANTRY_KERNELS_ATTN_PREP_CUH
#define GANTRY_KERNELS_ATTN_PREP_CUH
#include "kernels/common.cuh"

#define KC_ATTN_PREP_MAX_HD 4096

KC_API int kc_attn_qk_prep(cudaStream_t st, kc_batch_t b, kc_kv_t kv, float *q, float *k, const float *v,
                           const float *qw, const float *kw, int n_head, int n_kv_head, int hd, int n_rot,
                           const double *inv_freq, int freq_bf16, float eps);
#endif
