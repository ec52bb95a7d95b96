/* kernels/attn_flash.cuh — causal GQA attention for prefill chunks on tensor cores (flash
 * attention 2 style) over bf16 paged KV pools: out[t, h, :] for the tokens of every sequence
 * that brings at least fa_min tokens to the batch (others untouched: kc_attn_decode serves
 * them). Token t attends to its sequence's positions 0..pos[t] (queries may sit at an offset into
 * cached KV: chunked prefill). head_dim 64, 128 or 256 (kc_attn_flash_ok); kv.bf16 set.
 *
 * Block (query tile of one sequence, query head), 4 warps of MT x 16 query rows (MT = 2 at
 * head_dim <= 128: 128-query tiles, each K / V fragment feeds two mma; 1 at 256: 64-query
 * tiles). Q is rounded to bf16 once; per tile of BN key positions (64 at MT 1 and head_dim
 * <= 128, else 32) K and V rows are copied from
 * the pools into shared memory with cp.async (16-byte pieces, two stages), S = Q Kᵀ and O += P V
 * by mma.sync m16n8k16 bf16 with fp32 accumulation, online softmax in fp32 on the S fragments,
 * P rounded to bf16 for the second product. n_tiles, mt: kc_attn_flash_plan of the host batch.
 * Returns a cudaError_t value. */
#ifndef GANTRY_KERNELS_ATTN_FLASH_CUH
#define GANTRY_KERNELS_ATTN_FLASH_CUH
#include "kernels/common.cuh"

/* 1 when the flash kernel serves this head_dim */
KC_API int kc_attn_flash_ok(int head_dim);
#define KC_FA_MT2_MIN_BLOCKS 264 /* blocks the 128-query tiles must make (two per SM) */

/* The launch of the sequences with seq_ntok[s] >= fa_min (host arrays of n_seq): returns the
 * number of query tiles and sets *mt (m-tiles per warp: 2 at head_dim <= 128 when 128-query
 * tiles x n_head make at least KC_FA_MT2_MIN_BLOCKS blocks, else 1). */
KC_API int kc_attn_flash_plan(const int32_t *seq_ntok, int n_seq, int fa_min, int head_dim, int n_head, int *mt);
/* Forces mt (1 or 2; 0: the plan's choice) process-wide, for tests and bench_attn. */
KC_API void kc_attn_flash_set_mt(int mt);
KC_API int kc_attn_flash(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                         int n_kv_head, int head_dim, float scale, int fa_min, int n_tiles, int mt);
#endif
