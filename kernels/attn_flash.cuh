/* kernels/attn_flash.cuh — causal GQA attention for prefill chunks on tensor cores (flash
 * attention 2 style) over bf16 paged KV pools: out[t, h, :] for the tokens of every sequence
 * that brings at least fa_min tokens to the batch (others untouched: kc_attn_decode serves
 * them). Token t attends to its sequence's positions 0..pos[t] (queries may sit at an offset into
 * cached KV: chunked prefill). head_dim 64, 128 or 256 (kc_attn_flash_ok); kv.bf16 set.
 *
 * Block (64-query tile of one sequence, query head), 4 warps of 16 query rows. Q is rounded to
 * bf16 once; per tile of BN key positions (64; 32 at head_dim 256) K and V rows are copied from
 * the pools into shared memory with cp.async (16-byte pieces, two stages), S = Q Kᵀ and O += P V
 * by mma.sync m16n8k16 bf16 with fp32 accumulation, online softmax in fp32 on the S fragments,
 * P rounded to bf16 for the second product. n_tiles: kc_attn_flash_tiles of the host batch.
 * Returns a cudaError_t value. */
#ifndef GANTRY_KERNELS_ATTN_FLASH_CUH
#define GANTRY_KERNELS_ATTN_FLASH_CUH
#include "kernels/common.cuh"

#define KC_FA_BM 64 /* query rows per block */

/* 1 when the flash kernel serves this head_dim */
KC_API int kc_attn_flash_ok(int head_dim);
/* 64-query tiles of the sequences with seq_ntok[s] >= fa_min (host arrays of n_seq) */
KC_API int kc_attn_flash_tiles(const int32_t *seq_ntok, int n_seq, int fa_min);
KC_API int kc_attn_flash(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                         int n_kv_head, int head_dim, float scale, int fa_min, int n_tiles);
#endif
