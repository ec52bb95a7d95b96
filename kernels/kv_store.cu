/* kernels/kv_store.cu — see kv_store.cuh. One block per token. */
#include "kernels/kv_store.cuh"

template <typename T>
__global__ void kv_store_kernel(kc_batch_t b, kc_kv_t kv, const float *__restrict__ k, const float *__restrict__ v) {
  kc_pdl_wait();
  kc_pdl_trigger();
  const int t = blockIdx.x;
  const int64_t slot = kc_kv_slot(b, kv, b.seq_of_tok[t], b.pos[t]);
  if (slot < 0) {
    if (threadIdx.x == 0) atomicOr(b.eflag, KC_EFLAG_KV_SLOT);
    return;
  }
  T *kd = (T *)kv.k + slot * kv.kv_dim, *vd = (T *)kv.v + slot * kv.kv_dim;
  for (int j = threadIdx.x; j < kv.kv_dim; j += blockDim.x) {
    kc_kv_put(kd + j, k[(size_t)t * kv.kv_dim + j]);
    kc_kv_put(vd + j, v[(size_t)t * kv.kv_dim + j]);
  }
}

KC_API int kc_kv_store(cudaStream_t st, kc_batch_t b, kc_kv_t kv, const float *k, const float *v) {
  if (b.n_tok <= 0) return 0;
  if (kv.bf16) kc_launch(kv_store_kernel<__nv_bfloat16>, b.n_tok, 128, 0, st, b, kv, k, v);
  else kc_launch(kv_store_kernel<float>, b.n_tok, 128, 0, st, b, kv, k, v);
  return (int)cudaGetLastError();
}
