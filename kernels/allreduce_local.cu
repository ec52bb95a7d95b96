/* kernels/allreduce_local.cu — see allreduce_local.cuh. */
#include "kernels/allreduce_local.cuh"

#define AR_THREADS 256
#define AR_MAX_BLOCKS 264 /* two waves of 132 SMs at most: the copies are a few MB */

static unsigned ar_blocks(size_t n) {
  const size_t b = (n + AR_THREADS - 1) / AR_THREADS;
  return (unsigned)(b < 1 ? 1 : b > AR_MAX_BLOCKS ? AR_MAX_BLOCKS : b);
}

static __device__ __forceinline__ unsigned ld_volatile(const unsigned *p) { return *(const volatile unsigned *)p; }

__global__ void ar_put_kernel(kc_ar_local_t a, int rank, const float *__restrict__ x, size_t n) {
  const unsigned count = ld_volatile(&a.arrive[rank * KC_AR_LOCAL_STRIDE]);
  float *dst = a.stage + ((size_t)(count & 1u) * a.n_ranks + rank) * a.cap;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = x[i];
  /* the last block to finish publishes the round (threadFenceReduction pattern) */
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned t = atomicAdd(&a.done[rank * KC_AR_LOCAL_STRIDE], 1u);
    if (t == gridDim.x - 1) {
      a.done[rank * KC_AR_LOCAL_STRIDE] = 0;
      __threadfence();
      atomicExch(&a.arrive[rank * KC_AR_LOCAL_STRIDE], count + 1u);
    }
  }
}

static __device__ __forceinline__ unsigned long long now_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void ar_wait_kernel(kc_ar_local_t a, int rank, long long timeout_ns) {
  const unsigned want = ld_volatile(&a.arrive[rank * KC_AR_LOCAL_STRIDE]); /* this rank's own count, just bumped */
  const unsigned long long t0 = now_ns();
  volatile int *ab = a.abort;
  for (int q = 0; q < a.n_ranks; q++) {
    while ((int)(ld_volatile(&a.arrive[q * KC_AR_LOCAL_STRIDE]) - want) < 0) {
      if (*ab) return;
      if ((long long)(now_ns() - t0) > timeout_ns) {
        *(volatile int *)a.timed_out = 1 + q;
        *ab = 1;
        __threadfence_system();
        return;
      }
      __nanosleep(64);
    }
  }
  __threadfence();
}

__global__ void ar_sum_kernel(kc_ar_local_t a, int rank, float *__restrict__ x, size_t n) {
  const unsigned count = ld_volatile(&a.arrive[rank * KC_AR_LOCAL_STRIDE]) - 1u; /* the round being summed */
  const float *src = a.stage + (size_t)(count & 1u) * a.n_ranks * a.cap;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float s = __ldcg(&src[i]); /* peers wrote these: read through L2, not a stale L1 line */
    for (int q = 1; q < a.n_ranks; q++) s = __fadd_rn(s, __ldcg(&src[(size_t)q * a.cap + i]));
    x[i] = s;
  }
}

KC_API int kc_ar_local_put(cudaStream_t st, kc_ar_local_t a, int rank, const float *x, size_t n) {
  ar_put_kernel<<<ar_blocks(n), AR_THREADS, 0, st>>>(a, rank, x, n);
  return (int)cudaGetLastError();
}

KC_API int kc_ar_local_wait(cudaStream_t st, kc_ar_local_t a, int rank, long long timeout_ns) {
  ar_wait_kernel<<<1, 1, 0, st>>>(a, rank, timeout_ns);
  return (int)cudaGetLastError();
}

KC_API int kc_ar_local_sum(cudaStream_t st, kc_ar_local_t a, int rank, float *x, size_t n) {
  ar_sum_kernel<<<ar_blocks(n), AR_THREADS, 0, st>>>(a, rank, x, n);
  return (int)cudaGetLastError();
}
