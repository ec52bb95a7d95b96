/* kernels/gemv_pipe.cuh — pipelined tensor-core decode product for Q4_K / Q5_K / Q6_K weights and
 * 1 <= n <= KC_GPIPE_MAX_ROWS rows of x: out[n, n_out] = x[n, cols] · Wᵀ (and the multi / swiglu
 * entry shapes of kernels/matvec.cuh).
 *
 * A block owns R weight rows (swiglu: R/2 gate + R/2 up rows of the same features) and a range of
 * 256-element chunks; the weight bytes of its rows stream through a multi-stage cp.async pipeline in
 * shared memory (a fixed number of bytes in flight per block while its warps decode the previous
 * stages), x is split into bf16 parts once per block and stage into shared memory as mma B
 * fragments. q exact in bf16, products on mma.sync m16n8k16, scales in fp32. x in 3 parts (hi + mid
 * + lo): the arithmetic of kernels/matvec_mma.cu (op error ~1e-7, bound 1e-5); in 1 part (x rounded
 * to bf16, the mmq path's setting under bf16 activations, bound 6e-3): one mma per 16 elements for
 * all 8 x rows. K may be split over a cluster of ks blocks (sums added in rank order through
 * distributed shared memory: deterministic). Design and index notes: gemv_pipe_impl.cuh.
 *
 * The CUDA backend (engine/backend/backend_cuda_ops.c) takes it for matmul, matmul_multi and
 * ffn_swiglu at 1..KC_GPIPE_MAX_ROWS rows where kc_gpipe_want says so; tools/bench/bench_gemv
 * measures its variants (and, with --wired 1, the backend's choice) against kc_matvec / mmq. */
#ifndef GANTRY_KERNELS_GEMV_PIPE_CUH
#define GANTRY_KERNELS_GEMV_PIPE_CUH
#include "kernels/matvec.cuh"

#define KC_GPIPE_MAX_ROWS 8

/* 1 if the path takes this weight [n_out, cols] of type for n rows of x: Q4_K, Q5_K or Q6_K, w 16-byte
 * aligned, row_bytes the type's packed row, cols % 256 == 0, 1 <= n <= KC_GPIPE_MAX_ROWS. */
KC_API int kc_gpipe_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n);

/* The backend's use of the path: 0 never, 1 always where kc_gpipe_ok, 2 auto (kc_gpipe_want's
 * table). kc_gpipe_set_mode's value if set (>= 0), else GANTRY_GPIPE = "0" / "1" (read once), else 2. */
KC_API int kc_gpipe_mode(void);
/* 0 / 1 / 2 as above, -1 back to the environment (tests and benchmarks; not thread-safe) */
KC_API void kc_gpipe_set_mode(int mode);

/* 1 if a launch of n rows over weights of type with cols columns and wbytes weight bytes in all
 * (multi: the run's weights; swiglu: gate + up) should take the path under kc_gpipe_mode(): mode 1
 * always, 0 never, 2 by the per-type table of kernels/gemv_pipe.cu (rows, bytes). The caller has
 * checked kc_gpipe_ok for every weight. */
KC_API int kc_gpipe_want(int type, int64_t cols, size_t wbytes, int n);

/* One launch for 1 <= n_seg <= KC_MATVEC_MAX_SEGS weights of one type and the same cols (segs as
 * kc_matvec_multi, each kc_gpipe_ok), or, with wup != NULL, the swiglu product of kc_matvec_swiglu
 * (n_seg 1, segs[0].w the gate weight, wup the up weight of the same shape; out = SiLU(gate) * up).
 * x [n, cols] fp32, 16-byte aligned; parts: 3 (x = hi + mid + lo, fp32-exact) or 1 (x rounded to
 * bf16). The variant (rows per block, warps, stages; K split from the grid) of the type's row of the
 * table in kernels/gemv_pipe.cu. PDL: weights are read before the wait, x and out after
 * (kernels/common.cuh). Returns a cudaError_t value. */
KC_API int kc_gpipe_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                           int64_t cols, const float *x, int n, int parts);
#endif
