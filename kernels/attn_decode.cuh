/* kernels/attn_decode.cuh — causal GQA attention over bf16 paged KV pools for decode tokens
 * (and short prefill pieces): out[n_tok, n_head * head_dim] for the tokens whose sequence brings
 * fewer than fa_min tokens to the batch (the others are left untouched: kc_attn_flash serves
 * them). Token t attends to its sequence's positions 0..pos[t]; head h reads kv head
 * h / (n_head / n_kv_head). head_dim % 32 == 0, <= 256; kv.bf16 must be set.
 *
 * Split over the sequence (flash-decoding): token t's context is cut into n_eff <= n_split
 * contiguous ranges of at least kc_attn_decode_split_len() positions (n_eff depends on the token's own
 * context, so a graph captured with one n_split serves every context), block (range, kv head,
 * token) serves the G query heads of the kv head, then a combine pass merges the ranges.
 * part: scratch of kc_attn_decode_part_floats(...) floats. Returns a cudaError_t value.
 *
 * Two pass-1 kernels write the same partial rows (kc_attn_decode_set_kernel, by batch size):
 * 1: kernels/attn_decode.cu, blocks of 128 threads, K/V rows loaded into registers;
 * 2: kernels/attn_decode_warp.cu, one warp per range, K/V tiles streamed through shared memory
 *    by cp.async (head_dim 64 / 128, GQA group 1 / 2 / 4 / 8; other shapes take kernel 1). */
#ifndef GANTRY_KERNELS_ATTN_DECODE_CUH
#define GANTRY_KERNELS_ATTN_DECODE_CUH
#include "kernels/common.cuh"

#define KC_AD_MAX_SPLIT 128
#define KC_ATTN_DEC_MAX_HD 256
/* The default of kc_attn_decode_split_len: 16 positions = one load step of a block (8 row groups
 * x 2 positions at head_dim 128). H200, qwen3-8b Q4_K_M, batch 1 at a 512-token prompt
 * (scripts/gpu/mv_session.sh, cbeb09a): attention 555 us per step with 16, 684 us with 64 (the
 * previous value); long contexts are capped by the range count (KC_AD_MAX_SPLIT, the wave target)
 * and do not change. */
#define KC_AD_MIN_SPLIT_LEN 16
/* Kernel 2's shortest range: two of its 16-position tiles (a warp per range, so shorter ranges
 * only add partial rows); GANTRY_ATTN_SPLIT_LEN raises it. */
#define KC_AD_WARP_MIN_LEN 32
/* Batches of at least this many tokens take kernel 2 unless one is forced (see below): every batch.
 * H200, a69ec2a, `bench_attn --decode --reps 20`, qwen3-8b shapes (32/8 x 128): kernel 1 / kernel 2
 * 1.16x faster at batch 1 x 512, 2.0-2.3x at batch 1 x 2K-64K, 2.0-2.9x at batch 8, 2.4-2.6x at
 * batch 32 (83.6-95.9 % of copy bandwidth at 8K+ contexts); test_cuda_ops checks both at 1e-5. */
#define KC_AD_WARP_MIN_TOK 1

/* Shortest range of the split: GANTRY_ATTN_SPLIT_LEN (8..4096, read once) or KC_AD_MIN_SPLIT_LEN.
 * Shorter ranges give short contexts more blocks (fewer dependent load steps per block). */
KC_API int kc_attn_decode_split_len(void);

/* Ranges per token for n_tok tokens of n_head query / n_kv_head kv heads of head_dim whose
 * contexts reach at most max_ctx (for a captured decode graph: max_blocks * block_tokens, fixed
 * per graph); rounded for the pass-1 kernel that shape takes. */
KC_API int kc_attn_decode_splits(int n_tok, int n_head, int n_kv_head, int head_dim, int max_ctx);
/* Pass-1 kernel: 1 or 2 (above) forced; 0 = the default (GANTRY_ATTN_DECODE=1|2 forces one, read
 * at the first call; else kernel 2 for batches of >= KC_AD_WARP_MIN_TOK tokens); < 0 = no change.
 * Returns the mode in effect (0, 1, 2). Not thread-safe: set it before launching. */
KC_API int kc_attn_decode_set_kernel(int k);
KC_API size_t kc_attn_decode_part_floats(int n_tok, int n_head, int head_dim, int n_split);
KC_API int kc_attn_decode(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                          int n_kv_head, int head_dim, float scale, int n_split, int fa_min, float *part);

#ifdef __CUDACC__
/* Ranges token t uses: ceil(ctx / split_len), at least 1, at most n_split (both passes). */
__host__ __device__ __forceinline__ int kc_ad_n_eff(int ctx, int n_split, int split_len) {
  const int n = (ctx + split_len - 1) / split_len;
  return n < 1 ? 1 : n < n_split ? n : n_split;
}
/* 8 bf16 (one uint4, element 0 in the low half of .x) to fp32 */
__device__ __forceinline__ void kc_ad_unpack(const uint4 u, float f[8]) {
  f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16), f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16), f[7] = __uint_as_float(u.w & 0xffff0000u);
}
/* The shapes kernel 2 has: head_dim 64 / 128 / 256, GQA groups 1 / 2 / 4 / 8 (others take kernel 1). */
static inline int kc_ad_warp_shape(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && (group == 1 || group == 2 || group == 4 || group == 8);
}
/* Kernel 2's pass 1 (kernels/attn_decode_warp.cu): cudaErrorInvalidValue for a shape it lacks
 * (kc_ad_warp_shape), before launching anything. */
int kc__attn_decode_warp(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *part, int n_head,
                         int n_kv_head, int head_dim, float scale, int n_split, int split_len, int fa_min);
#endif
#endif
