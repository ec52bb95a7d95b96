/* kernels/mmq.cuh — tensor-core product of a K-quant / Q8_0 weight with n >= 3 rows of x (decode
 * batches and prefill): out[n, n_out] = x[n, cols] · Wᵀ, W [n_out, cols] of type Q4_K, Q5_K, Q6_K
 * or Q8_0 (cols % 256 == 0). Each weight element is read once per 32 rows of x (once per decode
 * step up to 32 sequences). Decode rows (<= KC_MMQ_EXACT_ROWS) run kernels/mmq.cu's kernel (K
 * split over the warps of a block), prefill rows kernels/mmq_prefill.cu's (x in fragment order,
 * K split over a cluster of up to 8 blocks summed in distributed shared memory, sm_90).
 *
 * Two steps on one stream:
 *  1. kc_mmq_prep: x -> `parts` bf16 parts (x = hi + mid + lo + e, |e| <= 2^-24 |x| for 3 parts;
 *     2 parts: hi + mid, |e| <= 2^-16 |x|; 1 part: bf16(x), 2^-8) and the fp32 sums of x per
 *     32-element sub-block (the Q4_K / Q5_K min term), into caller scratch.
 *  2. kc_mmq_launch: weights decoded to their exact small integers in bf16, one mma.sync
 *     m16n8k16 per 16 elements x 16 weight rows x 8 x rows x part, fp32 accumulation; sub-block
 *     scales (and mins times the sums) applied in fp32 as the CPU backend does.
 * With 3 parts the op error is that of fp32 accumulation (~1e-7 normalized), so decode batches keep
 * GPU greedy equal to the CPU. Design: mmq.cu. Returns are cudaError_t values. */
#ifndef GANTRY_KERNELS_MMQ_CUH
#define GANTRY_KERNELS_MMQ_CUH
#include "kernels/matvec.cuh"

#define KC_MMQ_MIN_ROWS 3    /* 1..2 rows: kernels/matvec.cu (and matvec_mma.cu) */
#define KC_MMQ_TILE_ROWS 32  /* x rows per block; the weights are read ceil(n / 32) times */
#define KC_MMQ_EXACT_ROWS 64 /* up to this many rows always 3 parts (decode batches) */

/* 1 if the path is on and takes this weight: type Q4_K / Q5_K (w 16-byte aligned), Q6_K / Q8_0
 * (2-byte aligned), cols % 256 == 0, row_bytes the type's row size. Off when GANTRY_MMQ is "0"
 * (read once) or kc_mmq_set(0, ...). */
KC_API int kc_mmq_ok(int type, const void *w, size_t row_bytes, int64_t cols);
/* 1 if a weight of n_out x cols elements should take mmq for n rows: always for n >
 * KC_MATVEC_MAX_ROWS (the CUDA-core path stops there) or when kc_mmq_set(1, ...) forced the path;
 * else only at >= KC_MMQ_MIN_ELEMS elements. Below that the x prep launch and the block-level split
 * cost more than the weight's bytes: on the H200 (453e9aa) demo35's products (<= 768 x 512) made
 * a verify step of 1 + 3 tokens 0.406 ms on mmq against 0.274 ms with GANTRY_MMQ=0 (decode step
 * 0.248 ms), batch 8 decode 0.405 against 0.312 ms. Every product of qwen3-8b / qwen35-9b / 27B
 * has >= 16M elements (their small weights ride in a matmul_multi run that a large one starts). */
#define KC_MMQ_MIN_ELEMS ((int64_t)1 << 21)
KC_API int kc_mmq_size_ok(int64_t n_out, int64_t cols, int n);
/* Parts of x for n rows: 3 for n <= KC_MMQ_EXACT_ROWS, else the prefill setting (kc_mmq_set, or
 * GANTRY_PREFILL_XPARTS = 1, 2 or 3; default KC_MMQ_PREFILL_PARTS). */
#define KC_MMQ_PREFILL_PARTS 2
KC_API int kc_mmq_parts(int n);
/* on: 1 (every weight kc_mmq_ok takes, any size) / 0 / -1 (back to the environment); prefill_parts 1..3, or 0 for the environment's.
 * For tests and benchmarks (not thread-safe). */
KC_API void kc_mmq_set(int on, int prefill_parts);
/* Blocks per SM the kernel is built for: 1 or 2; anything else: GANTRY_MMQ_OCC, else by shape
 * (benchmarks; not thread-safe). */
KC_API void kc_mmq_set_occ(int occ);

/* Scratch bytes kc_mmq_prep needs for n rows of cols with parts (a multiple of 16). */
KC_API size_t kc_mmq_scratch_bytes(int64_t cols, int n, int parts);
/* x [n, cols] fp32 (16-byte aligned, cols % 256 == 0) -> scratch (kc_mmq_scratch_bytes, 16-byte
 * aligned) for weights of type: parts x npad x cols bf16 in the type's fragment order
 * (kernels/mmq.cu), then npad x cols/32 fp32 sums, npad = n rounded up to 32 (rows >= n copy
 * row n - 1). */
KC_API int kc_mmq_prep(cudaStream_t st, int type, const float *x, int64_t cols, int n, int parts, void *scratch);
/* 1 <= n_seg <= KC_MATVEC_MAX_SEGS weights of type with the same cols (each kc_mmq_ok, n_out >
 * 0; out row stride n_out), or with wup != NULL the swiglu product (n_seg 1, segs[0].w the gate,
 * wup the up weight of the same shape; out = silu(gate) * up as kernels/swiglu.cu). scratch as
 * kc_mmq_prep left it for the same type, n, cols and parts. Each output equals that of a launch for its
 * weight alone. */
KC_API int kc_mmq_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                         int64_t cols, const void *scratch, int n, int parts);
#endif
