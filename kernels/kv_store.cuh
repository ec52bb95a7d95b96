/* kernels/kv_store.cuh — writes k, v [n_tok, kv_dim] of the batch into one layer's paged pools
 * at each token's (sequence, position) slot (bf16 pools: rounded to nearest even); a position
 * outside the sequence's blocks raises KC_EFLAG_KV_SLOT. */
#ifndef GANTRY_KERNELS_KV_STORE_CUH
#define GANTRY_KERNELS_KV_STORE_CUH
#include "kernels/common.cuh"

KC_API int kc_kv_store(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *k, const float *v);

#ifdef __CUDACC__
/* Physical row of (sequence s, position p) in the pools, or -1 when outside table/pool. */
__device__ __forceinline__ int64_t kc_kv_slot(const kc_batch_t &b, const kc_kv_t &kv, int s, int p) {
  const int lb = p / kv.block_tokens;
  if (p < 0 || lb >= b.max_blocks) return -1;
  const int pb = b.block_table[(size_t)s * b.max_blocks + lb];
  if (pb < 0 || pb >= kv.n_blocks) return -1;
  return (int64_t)pb * kv.block_tokens + p % kv.block_tokens;
}
/* One pool element from fp32 (bf16: round to nearest even, as dt_f32_to_bf16). */
__device__ __forceinline__ void kc_kv_put(float *d, float x) { *d = x; }
__device__ __forceinline__ void kc_kv_put(__nv_bfloat16 *d, float x) { *d = __float2bfloat16_rn(x); }
#endif
#endif
