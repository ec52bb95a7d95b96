/* kernels/mmq_internal.cuh — shared by the two kernels behind kernels/mmq.cuh: mmq.cu (decode
 * batches, n <= KC_MMQ_EXACT_ROWS: K split over the warps of a block) and mmq_prefill.cu
 * (n > KC_MMQ_EXACT_ROWS: x in fragment order, K split over a cluster of blocks). */
#ifndef GANTRY_KERNELS_MMQ_INTERNAL_CUH
#define GANTRY_KERNELS_MMQ_INTERNAL_CUH
#include "kernels/mma_dec.cuh"
#include "kernels/mmq.cuh"

#define MMQ_WARPS 8

typedef struct {
  const uint8_t *w[KC_MATVEC_MAX_SEGS]; /* swiglu: w[0] gate */
  const uint8_t *wup;
  float *out[KC_MATVEC_MAX_SEGS];
  int64_t n_out[KC_MATVEC_MAX_SEGS];
  size_t row_bytes[KC_MATVEC_MAX_SEGS];
  int split[KC_MATVEC_MAX_SEGS];        /* mmq.cu: column parts per segment */
  unsigned blk_end[KC_MATVEC_MAX_SEGS]; /* weight blocks: segment s owns [blk_end[s-1], blk_end[s]) */
  int n_seg, swiglu;
  unsigned ny; /* x tiles */
  int S;       /* mmq_prefill.cu: split-K parts = cluster size */
} mmq_args_t;

/* rows of x rounded up to whole tiles */
static inline int64_t mmq_npad(int n) { return ((int64_t)n + KC_MMQ_TILE_ROWS - 1) / KC_MMQ_TILE_ROWS * KC_MMQ_TILE_ROWS; }

/* GANTRY_MMQ_OCC / kc_mmq_set_occ: 1 or 2 blocks per SM, 0 = by shape (mmq_occ) */
int mmq_occ_env(void);
/* Blocks per SM a kernel instance is built for: the setting, else 2 where 128 registers spill
 * little (one x tile of 8 rows, Q4_K / Q5_K / Q6_K words), else 1. */
template <class D, int NT> static int mmq_occ() {
  const int o = mmq_occ_env();
  return o ? o : NT == 1 && sizeof(typename D::raw) <= 48 ? 2 : 1;
}

/* mmq_prefill.cu: kc_mmq_prep / kc_mmq_launch for n > KC_MMQ_EXACT_ROWS (same contracts) */
int mmq_pf_prep(cudaStream_t st, int type, const float *x, int64_t cols, int n, int parts, void *scratch);
int mmq_pf_launch(cudaStream_t st, int type, const mmq_args_t &a, int64_t cols, const void *scratch, int n, int parts);
#endif
