/* kernels/common.cuh — what every CUDA op shares.
 *
 * The top part is plain C (host code in engine/backend/backend_cuda.c includes it): the batch view the
 * kernels read, the device error flags, the launcher linkage and the one checking macro family
 * (KC_CUDA / KC_CUBLAS) that records the failing expression, file and line in a gt_err_t.
 * The part under __CUDACC__ holds device helpers (warp/block reductions, half conversions). */
#ifndef GANTRY_KERNELS_COMMON_CUH
#define GANTRY_KERNELS_COMMON_CUH

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "common/err.h"

#ifdef __cplusplus
#define KC_API extern "C"
#else
#define KC_API
#endif

/* Device error flags (bits of one int in device memory), raised by kernels on bad input and
 * turned into a gt_err_t by the backend at sync. */
enum {
  KC_EFLAG_TOKEN = 1,     /* embed: token id outside the vocabulary */
  KC_EFLAG_OUT_TOK = 2,   /* gather_out: index outside the batch */
  KC_EFLAG_KV_SLOT = 4,   /* kv_store / attention: position outside the sequence's blocks */
  KC_EFLAG_STATE = 8,     /* GDN: state slot out of range */
};

/* be_batch_t.state_pos_slot entries per sequence (BE_POS_SLOTS, engine/backend/backend.h) */
#define KC_POS_SLOTS 8

/* The current batch, device memory (copied by be_set_batch). Passed to kernels by value. */
typedef struct {
  int n_tok, n_seq, n_out, max_blocks;
  const int32_t *tok;         /* [n_tok] */
  const int32_t *pos;         /* [n_tok] */
  const int32_t *seq_of_tok;  /* [n_tok] */
  const int32_t *seq_first;   /* [n_seq] */
  const int32_t *seq_ntok;    /* [n_seq] */
  const int32_t *state_slot;  /* [n_seq] (zeros for non-hybrid models) */
  const int32_t *block_table; /* [n_seq * max_blocks] */
  const int32_t *out_tok;     /* [n_out] */
  const int32_t *state_pos_slot; /* NULL or [n_seq * KC_POS_SLOTS]: be_batch_t.state_pos_slot */
  int *eflag;                 /* device error flags (KC_EFLAG_*) */
} kc_batch_t;

/* One attention layer's paged pools: k, v [n_blocks, block_tokens, kv_dim] of fp32 (bf16 = 0)
 * or bf16 (bf16 = 1) elements. */
typedef struct {
  void *k, *v;
  int n_blocks, block_tokens, kv_dim;
  int bf16;
} kc_kv_t;

/* Records a failed CUDA runtime call (code != 0) in *e unless an error is already recorded;
 * returns GT_OK or GT_EINTERNAL. */
static inline int kc_check_cuda(int code, const char *expr, const char *file, int line, gt_err_t *e) {
  if (code == 0) return GT_OK;
  if (e && e->code == GT_OK)
    gt_err_set(e, GT_EINTERNAL, "cuda: %s (%s) at %s:%d: %s", cudaGetErrorName((cudaError_t)code),
               cudaGetErrorString((cudaError_t)code), file, line, expr);
  return GT_EINTERNAL;
}
/* Same for cuBLAS status codes (0 = CUBLAS_STATUS_SUCCESS). */
static inline int kc_check_cublas(int status, const char *expr, const char *file, int line, gt_err_t *e) {
  if (status == 0) return GT_OK;
  if (e && e->code == GT_OK) gt_err_set(e, GT_EINTERNAL, "cublas: status %d at %s:%d: %s", status, file, line, expr);
  return GT_EINTERNAL;
}
#define KC_CUDA(e, expr) kc_check_cuda((int)(expr), #expr, __FILE__, __LINE__, (e))
#define KC_CUBLAS(e, expr) kc_check_cublas((int)(expr), #expr, __FILE__, __LINE__, (e))

/* Programmatic dependent launch (kernels/pdl.cu). kc_pdl_attr(ctas): whether kc_launch gives the
 * PDL attribute to a kernel of `ctas` blocks launched next on the calling host thread (it also
 * notes the grid as that thread's previous one). Mode (GANTRY_PDL, kc_pdl_set_mode; -1 = back to
 * the variable): 0 off; 1 every kc_launch; 2 (default) only after a grid of at most
 * KC_PDL_SMALL_CTAS blocks; 3 also for grids of at most KC_PDL_SMALL_CTAS blocks themselves
 * (a measurement mode: only big grids after big grids start late). Why 2: a kernel may start early only into the SMs its predecessor
 * leaves free; after a grid that fills the GPU its blocks would be packed onto the first SMs to
 * free up (measured: qwen3-8b batch 8 4.783 -> 5.074 ms with mode 1). */
#define KC_PDL_SMALL_CTAS 66
KC_API int kc_pdl_attr(unsigned ctas);
KC_API int kc_pdl_mode(void);
KC_API void kc_pdl_set_mode(int mode);
/* The token rows of the step whose kernels the calling thread launches next (the CUDA backend
 * sets it around running a step's records, eagerly or into a graph; 0 = not a step). Under mode 2,
 * a step of 1..GANTRY_PDL_ALL_ROWS rows (default KC_PDL_ALL_ROWS) launches every kernel early, as
 * mode 1 does: there each grid is a few blocks per SM or a product spread over all of them, and
 * the packing that mode 1 costs at batch 8 does not arise. */
/* measured (H200, 9fc5fdd, scripts/gpu/knobs.sh, bench_decode ms at GANTRY_PDL_ALL_ROWS 0 / 1 / 2 / 4):
 * qwen3-8b batch 1 4.054 / 3.952 / 3.941 / 3.925, batch 2 4.740 / 4.718 / 4.578 / 4.565, batch 4
 * 4.556 / 4.575 / 4.595 / 4.871; qwen35-9b batch 1 4.188 / 4.068 / 4.107 / 4.055, batch 2 4.825 /
 * 4.848 / 4.761 / 4.729, batch 4 4.693 / 4.717 / 4.749 / 5.054, verify 1 + 3 4.700 / 4.704 / 4.723 /
 * 5.049 (4 rows lose as batch 8 does under mode 1) */
#define KC_PDL_ALL_ROWS 2
KC_API void kc_pdl_set_rows(int rows);

/* The kernels' environment switches (GANTRY_MMQ, GANTRY_PDL, ...): the variable name as a whole
 * decimal integer in [lo, hi], else dflt (unset, empty, not a number or out of range). kernels/env.cu. */
KC_API long kc_env_int(const char *name, long lo, long hi, long dflt);

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define KC_FULL_MASK 0xffffffffu

__device__ __forceinline__ float kc_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(KC_FULL_MASK, v, o);
  return v;
}
__device__ __forceinline__ float kc_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(KC_FULL_MASK, v, o));
  return v;
}
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
 * Uses 33 floats of static shared memory; call from all threads. */
__device__ __forceinline__ float kc_block_sum(float v) {
  __shared__ float part[33];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = kc_warp_sum(v);
  __syncthreads(); /* part may still be read by a previous call */
  if (lane == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    float s = lane < nw ? part[lane] : 0.0f;
    s = kc_warp_sum(s);
    if (lane == 0) part[32] = s;
  }
  __syncthreads();
  return part[32];
}
/* Sum of doubles over the block (as kc_block_sum; the RMSNorm sum of squares, double like the
 * CPU reference). Every thread gets the result; call from all threads. */
__device__ __forceinline__ double kc_block_sum_d(double v) {
  __shared__ double part[33];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(KC_FULL_MASK, v, o);
  if (lane == 0) part[wi] = v;
  __syncthreads();
  if (wi == 0) {
    double s = lane < nw ? part[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(KC_FULL_MASK, s, o);
    if (lane == 0) part[32] = s;
  }
  __syncthreads();
  return part[32];
}
__device__ __forceinline__ float kc_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float kc_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* fp32 -> bf16 -> fp32, round to nearest even (as dt_f32_to_bf16) */
__device__ __forceinline__ float kc_round_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return f;
  return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}
__device__ __forceinline__ float kc_silu(float x) { return x / (1.0f + expf(-x)); }

/* The slot that also receives sequence s's recurrent state after its token i (of n), or -1
 * (none wanted, or i is its last token: its own slot gets that one). */
__device__ __forceinline__ int kc_pos_slot(const kc_batch_t &b, int s, int i, int n, int n_slots) {
  if (!b.state_pos_slot || i + 1 >= n || i >= KC_POS_SLOTS) return -1;
  const int p = b.state_pos_slot[s * KC_POS_SLOTS + i];
  return p < n_slots ? p : -1; /* range checked by set_batch */
}
__device__ __forceinline__ float kc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
#define KC_GRID(n, b) ((unsigned)(((n) + (b) - 1) / (b)))

/* Programmatic dependent launch (PDL, sm_90). A kernel launched by kc_launch may start while the
 * kernel before it in the stream still runs. The contract every such kernel keeps:
 *  - before kc_pdl_wait() it reads only memory no earlier kernel of the stream writes (weights,
 *    constant tables) and writes nothing;
 *  - every thread calls kc_pdl_wait() before any other access and before it can return (so the
 *    kernel never completes before its predecessor: completion stays transitive along the stream);
 *  - kc_pdl_trigger() (after the wait) lets the next kernel's blocks be scheduled early; they
 *    only run their own pre-wait part.
 * Both are no-ops when the kernel was launched without the attribute. tests/lint/pdl_check.sh
 * checks that every kernel launched through kc_launch waits. */
__device__ __forceinline__ void kc_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void kc_pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* cp.async (sm_80+): 16 bytes global -> shared, bypassing L1 (src 16-byte aligned, dst a shared
 * address), of which the first `bytes` (0..16) are read and the rest zero-filled; a thread's
 * copies since its last commit form one group; kc_cp_wait<N>() returns when at most N of its
 * groups are pending (then a barrier makes the data visible to other threads). */
__device__ __forceinline__ void kc_cp16(void *dst, const void *src, int bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void kc_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void kc_cp_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* k<<<grid, block, smem, st>>>(args...) with the PDL attribute when kc_pdl_attr(); returns the
 * launch's error (also left for cudaGetLastError). Compile-time cluster dimensions still apply. */
template <typename... KArgs, typename... Args>
static inline cudaError_t kc_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                    Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at, cfg.numAttrs = kc_pdl_attr(grid.x * grid.y * grid.z) ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, static_cast<Args &&>(args)...);
}
/* k<<<grid, block, smem, st>>>(args...) as clusters of cx blocks (grid a multiple of cx), with
 * the PDL attribute when kc_pdl_attr(grid) as kc_launch: both attributes in one
 * cudaLaunchKernelEx. Returns the launch's error. */
template <typename... KArgs, typename... Args>
static inline cudaError_t kc_launch_cluster(void (*k)(KArgs...), unsigned grid, unsigned block, size_t smem,
                                            cudaStream_t st, unsigned cx, Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid), cfg.blockDim = dim3(block), cfg.dynamicSmemBytes = smem, cfg.stream = st;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = cx, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at, cfg.numAttrs = kc_pdl_attr(grid) ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, k, static_cast<Args &&>(args)...);
}
#endif

#endif
