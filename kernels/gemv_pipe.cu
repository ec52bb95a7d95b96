/* kernels/gemv_pipe.cu — see gemv_pipe.cuh: the backend's choice of the pipelined decode product
 * (one table: when, and which variant per type) and its launcher; the kernel and its variants:
 * gemv_pipe_impl.cuh. */
#include <stdlib.h>

#include "kernels/gemv_pipe_impl.cuh"

/* ---- when (mode 2, auto): per type, the rows, input features and weight bytes per launch that take
 * the path. Measured at a62426c on the H200 (`bench_gemv --wired 1`, us per call, current path vs
 * gemv_pipe; kernels/README.md "The wired pipelined product"): it wins only on the long rows of the
 * 27B's down projection (5120x17408: Q4_K 51.7 -> 40.2 us at 1 row, 67.3 -> 41.6 at 2; Q6_K 66.0 ->
 * 52.4, 75.6 -> 53.2) and loses at 1 row on every 4096- and 5120-column shape of 24 MiB or more that
 * the first table took (q3 down Q4_K 20.8 -> 31.3, q3 swiglu 34.6 -> 36.2, qwen35-9b GDN in-projection
 * 23.1 -> 25.6, 27B swiglu 56.1 -> 67.2): whole decode steps at batch 1 were 6-8 % slower with it
 * (qwen3-8b 4.091 -> 4.345 ms, qwen35-9b 4.177 -> 4.516). Hence: 1..2 rows of at least GP_MIN_COLS
 * input features. The 27B GDN in-projection (1.09x at 1 row, 1.38x at 2) and the 2-row wins on
 * 4096 columns are left to a per-shape rule; Q5_K (no tensor-core matvec otherwise) is unmeasured
 * and takes the same rule. Rows 3..8 (mmq otherwise) lost everywhere but k/v 1024x4096. */
#define GP_MIN_COLS 16384
#define GP_MAX_BYTES ((size_t)256 << 20)
typedef struct {
  int type, max_rows;
  int64_t min_cols;
  size_t max_bytes;
} gp_auto_t;
static const gp_auto_t k_auto[] = {
    {GT_TYPE_Q4_K, 2, GP_MIN_COLS, GP_MAX_BYTES},
    {GT_TYPE_Q5_K, 2, GP_MIN_COLS, GP_MAX_BYTES},
    {GT_TYPE_Q6_K, 2, GP_MIN_COLS, GP_MAX_BYTES},
};

/* ---- which variant per type: <R rows per block, W warps, ST stages, MINB blocks per SM>
 * (bench_gemv's names rRwWsSbB), K split chosen by gp_go (ks 0). Q6_K with 3 stages: its 240-byte
 * slots make 4 stages of 64 rows 139 KB of shared memory (one block per SM), 3 stages 109 KB (two). */
#define GP_VAR_Q4K 64, 8, 4, 2
#define GP_VAR_Q5K 64, 8, 4, 2
#define GP_VAR_Q6K 64, 8, 3, 2

static int g_gp_force = -1, g_gp_env = -1;

KC_API int kc_gpipe_mode(void) {
  if (g_gp_force >= 0) return g_gp_force;
  if (g_gp_env < 0) g_gp_env = (int)kc_env_int("GANTRY_GPIPE", 0, 1, 2);
  return g_gp_env;
}

KC_API void kc_gpipe_set_mode(int mode) { g_gp_force = mode < 0 || mode > 2 ? -1 : mode; }

KC_API int kc_gpipe_ok(int type, const void *w, size_t row_bytes, int64_t cols, int n) {
  if (n < 1 || n > KC_GPIPE_MAX_ROWS || cols <= 0 || cols % 256 != 0 || ((uintptr_t)w & 15) != 0) return 0;
  switch (type) {
    case GT_TYPE_Q4_K: return row_bytes == (size_t)(cols / 256) * 144;
    case GT_TYPE_Q5_K: return row_bytes == (size_t)(cols / 256) * 176;
    case GT_TYPE_Q6_K: return row_bytes == (size_t)(cols / 256) * 210;
    default: return 0;
  }
}

KC_API int kc_gpipe_want(int type, int64_t cols, size_t wbytes, int n) {
  const int m = kc_gpipe_mode();
  if (m != 2) return m == 1;
  for (size_t i = 0; i < sizeof k_auto / sizeof *k_auto; i++)
    if (k_auto[i].type == type)
      return n <= k_auto[i].max_rows && cols >= k_auto[i].min_cols && wbytes <= k_auto[i].max_bytes;
  return 0;
}

template <class D, int R, int W, int ST, int MINB>
static int gp_parts(cudaStream_t st, const gp_args_t &a, int64_t cols, const float *x, int n, int parts) {
  return parts == 1 ? gp_go_n<D, R, W, ST, MINB, 1>(st, a, cols, x, n, 0) : gp_go_n<D, R, W, ST, MINB, 3>(st, a, cols, x, n, 0);
}

KC_API int kc_gpipe_launch(cudaStream_t st, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup,
                           int64_t cols, const float *x, int n, int parts) {
  if (parts != 1 && parts != 3) return (int)cudaErrorInvalidValue;
  gp_args_t a;
  const int e = gp_args(a, type, n_seg, segs, wup, cols, x, n);
  if (e) return e;
  switch (type) {
    case GT_TYPE_Q4_K: return gp_parts<gp_q4k, GP_VAR_Q4K>(st, a, cols, x, n, parts);
    case GT_TYPE_Q5_K: return gp_parts<gp_q5k, GP_VAR_Q5K>(st, a, cols, x, n, parts);
    case GT_TYPE_Q6_K: return gp_parts<gp_q6k, GP_VAR_Q6K>(st, a, cols, x, n, parts);
    default: return (int)cudaErrorInvalidValue;
  }
}
