/* kernels/gemv_pipe.cu — see gemv_pipe.cuh: the backend's choice of the pipelined decode product
 * (one table: when, and which variant per type) and its launcher; the kernel and its variants:
 * gemv_pipe_impl.cuh. */
#include <stdlib.h>

#include "kernels/gemv_pipe_impl.cuh"

/* ---- when (mode 2, auto): per type, the rows and weight bytes per launch that take the path.
 * From issue 24's bench_gemv sweep on the H200 at 1 row (kernels/README.md "Graphs to 256 ..."),
 * best variant vs the backend's path: q3 swiglu 2x12288x4096 Q4_K (56.6 MB) 35.3 -> 33.4 us,
 * 27B down 5120x17408 (Q6_K 58 MB) 51.7 -> 35.0 us, 27B GDN in-projection (10240+6144+2x48)x5120
 * Q4_K (47 MB) 36.5 -> 27.5 us; lost on q/o 4096x4096 Q4_K (9.4 MB) 9.3 -> 10.4 us and on the 8-row
 * shapes (against mmq). Hence: 1..2 rows (where matvec_mma runs otherwise), launches of at least
 * GP_MIN_BYTES, not the lm head (matvec_mma's best shape: 49 % of copy bandwidth). Q5_K has no
 * tensor-core matvec (the CUDA-core kernel runs at 1..2 rows): any size. Rows 3..8 (mmq otherwise)
 * are not measured with the one-part variant yet: `bench_gemv --wired 1` prints the forced path
 * there; raise max_rows where it wins. */
#define GP_MIN_BYTES ((size_t)24 << 20)
#define GP_MAX_BYTES ((size_t)256 << 20)
typedef struct {
  int type, max_rows;
  size_t min_bytes, max_bytes;
} gp_auto_t;
static const gp_auto_t k_auto[] = {
    {GT_TYPE_Q4_K, 2, GP_MIN_BYTES, GP_MAX_BYTES},
    {GT_TYPE_Q5_K, 2, 0, GP_MAX_BYTES},
    {GT_TYPE_Q6_K, 2, GP_MIN_BYTES, GP_MAX_BYTES},
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
  if (g_gp_env < 0) {
    const char *e = getenv("GANTRY_GPIPE");
    const int one = e && e[0] != '\0' && e[1] == '\0';
    g_gp_env = one && e[0] == '0' ? 0 : one && e[0] == '1' ? 1 : 2;
  }
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
  (void)cols;
  for (size_t i = 0; i < sizeof k_auto / sizeof *k_auto; i++)
    if (k_auto[i].type == type)
      return n <= k_auto[i].max_rows && wbytes >= k_auto[i].min_bytes && wbytes <= k_auto[i].max_bytes;
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
