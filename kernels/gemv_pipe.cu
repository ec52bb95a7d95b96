/* kernels/gemv_pipe.cu — see gemv_pipe.cuh; the kernel and its variants: gemv_pipe_impl.cuh. */
#include "kernels/gemv_pipe_impl.cuh"

KC_API int kc_gpipe_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n) {
  if (n < 1 || n > KC_GPIPE_MAX_ROWS || cols <= 0 || cols % 256 != 0 || ((uintptr_t)w & 15) != 0) return 0;
  switch (type) {
    case GT_TYPE_Q4_K: return row_bytes == (size_t)(cols / 256) * 144;
    case GT_TYPE_Q5_K: return row_bytes == (size_t)(cols / 256) * 176;
    case GT_TYPE_Q6_K: return row_bytes == (size_t)(cols / 256) * 210;
    default: return 0;
  }
}

/* the default variant: 64 rows per block, 8 warps (2 chunks per stage), 4 stages, 2 blocks per SM,
 * K split chosen by gp_go (to be set from tools/bench/bench_gemv's sweep) */
KC_API int kc_gpipe_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                           int64_t cols, const float *x, int n) {
  gp_args_t a;
  const int e = gp_args(a, type, n_seg, segs, wup, cols, x, n);
  if (e) return e;
  switch (type) {
    case GT_TYPE_Q4_K: return gp_go_n<gp_q4k, 64, 8, 4, 2>(st, a, cols, x, n, 0);
    case GT_TYPE_Q5_K: return gp_go_n<gp_q5k, 64, 8, 4, 2>(st, a, cols, x, n, 0);
    case GT_TYPE_Q6_K: return gp_go_n<gp_q6k, 64, 8, 4, 2>(st, a, cols, x, n, 0);
    default: return (int)cudaErrorInvalidValue;
  }
}
