/* kernels/gemv_pipe.cuh — pipelined tensor-core decode product for Q4_K / Q6_K weights and
 * 1 <= n <= KC_GPIPE_MAX_ROWS rows of x: out[n, n_out] = x[n, cols] · Wᵀ (and the multi / swiglu
 * entry shapes of kernels/matvec.cuh).
 *
 * A block owns R weight rows (swiglu: R/2 gate + R/2 up rows of the same features) and a range of
 * 256-element chunks; the weight bytes of its rows stream through a multi-stage cp.async pipeline in
 * shared memory (a fixed number of bytes in flight per block while its warps decode the previous
 * stages), x is split into bf16 hi + mid + lo once per block and stage into shared memory as mma B
 * fragments. q exact in bf16, products on mma.sync m16n8k16, scales in fp32: the same arithmetic as
 * kernels/matvec_mma.cu (op error ~1e-7, bound 1e-5). K may be split over a cluster of ks blocks
 * (sums added in rank order through distributed shared memory: deterministic). Design and index
 * notes: gemv_pipe_impl.cuh.
 *
 * Not wired into the backend yet: tools/bench/bench_gemv.cu measures its variants against kc_matvec. */
#ifndef GANTRY_KERNELS_GEMV_PIPE_CUH
#define GANTRY_KERNELS_GEMV_PIPE_CUH
#include "kernels/matvec.cuh"

#define KC_GPIPE_MAX_ROWS 8

/* 1 if the path takes this weight [n_out, cols] of type for n rows of x: Q4_K, Q5_K or Q6_K, w 16-byte
 * aligned, row_bytes the type's packed row, cols % 256 == 0, 1 <= n <= KC_GPIPE_MAX_ROWS. */
KC_API int kc_gpipe_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n);

/* One launch for 1 <= n_seg <= KC_MATVEC_MAX_SEGS weights of one type and the same cols (segs as
 * kc_matvec_multi, each kc_gpipe_ok), or, with wup != NULL, the swiglu product of kc_matvec_swiglu
 * (n_seg 1, segs[0].w the gate weight, wup the up weight of the same shape; out = SiLU(gate) * up).
 * x [n, cols] fp32, 16-byte aligned. The default variant (rows per block, warps, stages, K split)
 * of kernels/gemv_pipe.cu. Returns a cudaError_t value. */
KC_API int kc_gpipe_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                           int64_t cols, const float *x, int n);
#endif
