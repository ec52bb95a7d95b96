/* kernels/attention.cuh — causal GQA attention over fp32 paged KV pools (`--kv-dtype fp32`; bf16
 * pools take kernels/attn_decode.cuh and kernels/attn_flash.cuh), for prefill and decode tokens
 * alike: out[n_tok, n_head * head_dim]; token t attends to its sequence's positions
 * 0..pos[t]; head h reads kv head h / (n_head / n_kv_head). Each (token, head) is split over
 * n_split ranges of 64-position chunks (flash-decoding: partial max/sum/accumulator in `part`, then a
 * combine pass), so long contexts fill the GPU at batch 1. head_dim % 32 == 0, <= 256.
 * part: scratch of kc_attention_part_floats(...) floats. */
#ifndef GANTRY_KERNELS_ATTENTION_CUH
#define GANTRY_KERNELS_ATTENTION_CUH
#include "kernels/common.cuh"

#define KC_ATTN_MAX_HEAD_DIM 256

/* Number of position ranges for a batch of n_tok tokens whose longest context is max_ctx. */
KC_API int kc_attention_splits(int n_tok, int n_head, int max_ctx);
KC_API size_t kc_attention_part_floats(int n_tok, int n_head, int head_dim, int n_split);
KC_API int kc_attention(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *q, float *out, int n_head,
                        int n_kv_head, int head_dim, float scale, int n_split, float *part);
#endif
