/* kernels/matvec_mma.cuh — tensor-core path of the decode matvec (kernels/matvec.cu) for Q4_K and
 * Q6_K weights and 1 <= n <= KC_MVM_MAX_ROWS rows of x: out[n, n_out] = x[n, cols] · Wᵀ.
 *
 * Weights are decoded to their small integer q (exact in bf16), x is split into bf16 hi + mid + lo
 * (relative error <= 2^-24 per element), and each 16- or 32-element sub-block's sum q·x is one
 * or two mma.sync m16n8k16 (fp32 accumulate); the sub-block scale (and Q4_K min times the fp32
 * sum of x) is applied in fp32. Design and exactness notes: matvec_mma.cu. Q4_K at one row
 * instead: x in three int8 digits per 256-element chunk (error <= 2^-21 of the chunk's max|x|),
 * one integer mma.sync m16n8k32 per sub-block into exact int32 (kernels/matvec_i8.cuh). At one row
 * the weights stream through a cp.async ring per warp (kernels/matvec_ring.cuh).
 *
 * The launchers of kernels/matvec.cuh use this path when kc_mvm_ok() says so for every weight
 * of a call, so kc_matvec, kc_matvec_multi and kc_matvec_swiglu stay bit-identical per product.
 * Switch: GANTRY_MATVEC_MMA in the environment (read once): 0 turns the path off, 1 on
 * (kc_mvm_enabled). */
#ifndef GANTRY_KERNELS_MATVEC_MMA_CUH
#define GANTRY_KERNELS_MATVEC_MMA_CUH
#include "kernels/matvec.cuh"

#define KC_MVM_MAX_ROWS 2 /* three bf16 columns (hi, mid, lo) per x row */

#define KC_MVM_DEFAULT 1 /* the path's state when GANTRY_MATVEC_MMA is unset */

/* The path in use: 0 off (kernels/matvec.cu's CUDA-core kernel), 1 on (kernels/matvec_mma.cu);
 * kc_mvm_set_enabled's value if set, else GANTRY_MATVEC_MMA = "0" / "1", else KC_MVM_DEFAULT. */
KC_API int kc_mvm_enabled(void);
/* 0 / 1 as above, -1 back to the environment (benchmarks compare the paths; not thread-safe) */
KC_API void kc_mvm_set_enabled(int on);

/* One row (Q4_K, Q6_K): 1 the weights streamed through a cp.async ring per warp
 * (kernels/matvec_ring.cuh, the default), 0 the kernels loading them into registers (Q4_K the
 * integer one, Q6_K the bf16 one: the same products bit for bit), -1 back to GANTRY_MVR (tests
 * compare the two; not thread-safe) */
KC_API void kc_mvm_set_ring(int on);
/* launches of the ring kernels so far (tests check that the ring ran) */
KC_API unsigned long long kc_mvm_ring_launches(void);
/* launches of the wide kernel (9..KC_MVW_MAX_ROWS rows) so far */
KC_API unsigned long long kc_mvm_wide_launches(void);

/* 1 if the path is on and takes this weight [n_out, cols] of type for n rows of x: Q4_K (w
 * 16-byte aligned) or Q6_K (w 2-byte aligned), cols % 256 == 0, 1 <= n <= KC_MVM_MAX_ROWS. */
KC_API int kc_mvm_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n);

/* One launch for 1 <= n_seg <= KC_MATVEC_MAX_SEGS weights (segs as kc_matvec_multi, every one
 * kc_mvm_ok, n_out > 0), or, with wup != NULL, the swiglu product of kc_matvec_swiglu: n_seg 1,
 * segs[0].w the gate weight, wup the up weight (same shape). x [n, cols] 16-byte aligned.
 * Returns a cudaError_t value. */
KC_API int kc_mvm_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                         int64_t cols, const float *x, int n);
/* 3 <= n <= KC_MVR_MAX_ROWS rows of x rounded to bf16 (one part: mmq's x under bf16 activations,
 * its op bound) on the ring kernel (kernels/matvec_ring.cuh), segs / wup as kc_mvm_launch, every
 * weight as kc_mvm_ok but for n. Returns a cudaError_t value, or -1 when it does not take the
 * launch (the ring off, x and the ring do not fit the shared memory, another type or alignment):
 * then the caller runs mmq. */
#define KC_MVR_MAX_ROWS 8
/* ... and KC_MVR_MAX_ROWS < n <= KC_MVW_MAX_ROWS on the wide kernel (kernels/matvec_wide.cuh: the
 * ring kernel's arithmetic for 16 / 32 x rows, K split over a cluster), same contract */
#define KC_MVW_MAX_ROWS 32
KC_API int kc_mvm_rows_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                              int64_t cols, const float *x, int n);
#endif
