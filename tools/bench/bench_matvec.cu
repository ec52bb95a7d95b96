/* tools/bench/bench_matvec.cu — microbenchmark of kernels/matvec.cu (llm.c dev/cuda style).
 *
 *   bench_matvec [--reps N] [--types Q4_K,Q6_K,...] [--ns 1,2,4,8,32] [--mmq 0|1]
 *                [--shapes 12288x4096,...] [--mmq-ns 8,32]
 *
 * Weights: a pool of 512 random rows per (type, cols) quantized with tools/quantize.h, tiled
 * over n_out rows. Before timing, every product is checked against a host reference
 * (dt_dequant_row + double dot) on a sample of output features: normalized error <= 1e-5
 * (the bound of tests/gpu/test_cuda_ops.c); kc_matvec_multi must equal kc_matvec per weight
 * and kc_matvec_swiglu must equal kc_swiglu(kc_matvec(gate), kc_matvec(up)), bit for bit.
 * Q4_K and Q6_K at n <= 2 run (checks and timing) twice: path "old" (SIMT kernel,
 * kc_mvm_set_enabled(0)) and "mma" (tensor-core kernel of kernels/matvec_mma.cu; the check fails
 * if kc_mvm_ok refuses the weight); other rows print path "dflt" (what kc_matvec picks).
 * Timing: cudaEvents over N reps (default 50); every weight is replicated to >= 256 MiB (up to
 * 64 copies) and the copies cycled so that each rep streams from HBM, not L2. Prints
 *   shape | type | path | n | us | GB/s | % of copy BW | % of 4.8 TB/s
 * with GB = weights + x + out bytes, copy BW = 2 * bytes / time of a 1 GiB cudaMemcpy D2D, 4.8
 * TB/s the H200's nominal HBM3e bandwidth (the roofline of kernels/README.md). --ns: the row
 * counts timed (checks always run n = 1..32 samples); --mmq 0 skips the mmq section. --shapes:
 * only these plain / mmq shapes (n_out x cols; "multi" and "swiglu" name the two fused products),
 * --mmq-ns: only these mmq row counts (a profiler run picks one launch with them).
 * Then the tensor-core K-quant path of kernels/mmq.cu (kc_mmq_prep + kc_mmq_launch, path
 * "mmqP/O" with P bf16 parts of x, built for O blocks per SM; decode rows n <= 64 with 3 and 1 parts) for
 * n = 1..512 on the same shapes, checked the same way (bound
 * 1e-5, 6e-3 for one part; n > 64: the first 16 rows): compare with the "old"/"dflt" rows above.
 * Exit status 1 if any check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" { /* plain C headers */
#include "format/dtype.h"
#include "tools/quantize.h"
}
#include "kernels/matvec.cuh"
#include "kernels/matvec_mma.cuh"
#include "kernels/mmq.cuh"
#include "kernels/swiglu.cuh"

#define BM_CHECK(expr)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = (cudaError_t)(expr);                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));      \
      exit(2);                                                                                    \
    }                                                                                             \
  } while (0)

#define BM_POOL 512           /* distinct weight rows per (type, cols) */
#define BM_FLUSH (256u << 20) /* bytes streamed per rep at least (H200 L2: 50 MB) */
#define BM_TOL 1e-5
#define BM_PEAK 4.8e12 /* H200 nominal HBM bandwidth, bytes/s */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float bm_rand(void) { /* uniform [-1, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* A weight [n_out, cols] of type t on the device (copies back to back) and its pool on the host. */
typedef struct {
  gt_type_t t;
  int64_t n_out, cols;
  size_t row_bytes, bytes; /* bytes of one copy */
  int copies;
  uint8_t *d;
  float *ref; /* [BM_POOL, cols] dequantized pool rows; row o of W is pool row o % BM_POOL */
} bm_w_t;

static bm_w_t bm_weight(gt_type_t t, int64_t n_out, int64_t cols, int flush, unsigned seed) {
  bm_w_t w = {};
  w.t = t, w.n_out = n_out, w.cols = cols;
  w.row_bytes = dt_row_bytes(t, cols);
  w.bytes = w.row_bytes * (size_t)n_out;
  w.copies = flush ? (int)((BM_FLUSH + w.bytes - 1) / w.bytes) : 1;
  if (w.copies > 64) w.copies = 64;
  g_rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0x100000001b3ull);
  const int64_t pool = n_out < BM_POOL ? n_out : BM_POOL;
  uint8_t *hq = (uint8_t *)malloc(w.row_bytes * (size_t)pool);
  float *src = (float *)malloc(sizeof(float) * (size_t)cols);
  w.ref = (float *)malloc(sizeof(float) * (size_t)cols * BM_POOL);
  for (int64_t r = 0; r < pool; r++) {
    const float amp = 0.02f * (1.0f + (float)(r % 7)); /* rows of different scales */
    for (int64_t c = 0; c < cols; c++) src[c] = amp * bm_rand() * (c % 97 == 0 ? 4.0f : 1.0f);
    if (qz_quantize_row(t, src, hq + w.row_bytes * (size_t)r, cols) ||
        qz_row_to_f32(t, hq + w.row_bytes * (size_t)r, w.ref + (size_t)cols * r, cols)) {
      fprintf(stderr, "quantize %s failed\n", dt_name(t));
      exit(2);
    }
  }
  BM_CHECK(cudaMalloc((void **)&w.d, w.bytes * (size_t)w.copies));
  for (int k = 0; k < w.copies; k++)
    for (int64_t r = 0; r < n_out; r += pool) {
      const int64_t m = n_out - r < pool ? n_out - r : pool;
      BM_CHECK(cudaMemcpy(w.d + w.bytes * (size_t)k + w.row_bytes * (size_t)r, hq, w.row_bytes * (size_t)m,
                          cudaMemcpyHostToDevice));
    }
  free(hq);
  free(src);
  return w;
}
static void bm_wfree(bm_w_t *w) {
  cudaFree(w->d);
  free(w->ref);
}

/* normalized error of out [n, n_out] (device) vs the host reference, on sampled features */
static double bm_err(const bm_w_t *w, const float *hx, const float *dout, int n) {
  float *ho = (float *)malloc(sizeof(float) * (size_t)n * w->n_out);
  BM_CHECK(cudaMemcpy(ho, dout, sizeof(float) * (size_t)n * w->n_out, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  const int64_t stride = w->n_out > 512 ? w->n_out / 256 : 1;
  for (int64_t o = 0; o < w->n_out; o++) {
    if (!(o < 64 || o >= w->n_out - 64 || o % stride == 0)) continue;
    const float *wr = w->ref + (size_t)w->cols * (o % BM_POOL);
    for (int r = 0; r < n; r++) {
      double s = 0;
      const float *xr = hx + (size_t)r * w->cols;
      for (int64_t c = 0; c < w->cols; c++) s += (double)wr[c] * xr[c];
      const double g = ho[(size_t)r * w->n_out + o];
      if (!isfinite(g)) num = INFINITY;
      num += (g - s) * (g - s);
      den += s * s;
    }
  }
  free(ho);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int bm_same(const float *a, const float *b, size_t n) { /* device arrays, bitwise */
  float *ha = (float *)malloc(n * 4), *hb = (float *)malloc(n * 4);
  BM_CHECK(cudaMemcpy(ha, a, n * 4, cudaMemcpyDeviceToHost));
  BM_CHECK(cudaMemcpy(hb, b, n * 4, cudaMemcpyDeviceToHost));
  const int same = memcmp(ha, hb, n * 4) == 0;
  free(ha);
  free(hb);
  return same;
}

static double g_copy_bw; /* bytes/s */
static int g_fail;
static const char *g_path = "dflt"; /* label of the matvec path in use (bm_path) */

/* Paths to run for (type, n): {0 old, 1 mma} where the mma path applies, else {-1 default}.
 * Returns the count; bm_path(mode) selects one. */
static int bm_modes(gt_type_t t, int n, int *modes) {
  if ((t == GT_TYPE_Q4_K || t == GT_TYPE_Q6_K) && n <= KC_MVM_MAX_ROWS) {
    modes[0] = 0, modes[1] = 1;
    return 2;
  }
  modes[0] = -1;
  return 1;
}
static void bm_path(int mode) {
  kc_mvm_set_enabled(mode);
  g_path = mode < 0 ? "dflt" : mode ? "mma" : "old";
}

static void bm_row(const char *shape, gt_type_t t, int n, double sec, double bytes) {
  const double bw = bytes / sec;
  printf("%-22s | %-4s | %-4s | %2d | %9.2f | %7.1f | %5.1f %% | %5.1f %%\n", shape, dt_name(t), g_path, n,
         sec * 1e6, bw / 1e9, 100.0 * bw / g_copy_bw, 100.0 * bw / BM_PEAK);
  fflush(stdout);
}

static void bm_copy_bw(void) {
  const size_t bytes = (size_t)1 << 30;
  void *a, *b;
  BM_CHECK(cudaMalloc(&a, bytes));
  BM_CHECK(cudaMalloc(&b, bytes));
  BM_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  BM_CHECK(cudaEventCreate(&e0));
  BM_CHECK(cudaEventCreate(&e1));
  BM_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  const int reps = 10;
  BM_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; i++) BM_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  BM_CHECK(cudaEventRecord(e1));
  BM_CHECK(cudaEventSynchronize(e1));
  float ms;
  BM_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  g_copy_bw = 2.0 * (double)bytes * reps / (ms * 1e-3);
  printf("copy bandwidth (cudaMemcpy D2D 1 GiB, read + write): %.1f GB/s\n", g_copy_bw / 1e9);
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

static int k_ns[8] = {1, 2, 4, 8, 32}, BM_NN = 5; /* --ns */
static const char *g_shapes;                          /* --shapes: NULL = all */
static const char *g_mmq_ns;                          /* --mmq-ns: NULL = all */

/* whether item (a shape "NxK", "multi" or "swiglu"; a row count) is in the comma list l (NULL: all) */
static int bm_listed(const char *l, const char *item) {
  if (!l) return 1;
  const size_t n = strlen(item);
  for (const char *c = l; *c; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
    if (!strncmp(c, item, n) && (c[n] == ',' || c[n] == 0)) return 1;
  return 0;
}
static int bm_shape_listed(int64_t n_out, int64_t cols) {
  char s[48];
  snprintf(s, sizeof s, "%lldx%lld", (long long)n_out, (long long)cols);
  return bm_listed(g_shapes, s);
}

/* plain product: validate n = 1..32 (a few), then time */
static void bm_plain(gt_type_t t, int64_t n_out, int64_t cols, const float *hx, const float *dx, float *dout,
                     int reps, cudaEvent_t e0, cudaEvent_t e1) {
  bm_w_t w = bm_weight(t, n_out, cols, 1, (unsigned)(n_out * 31 + cols + t));
  char shape[48];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)n_out, (long long)cols);
  const int check_ns[] = {1, 2, 3, 4, 5, 8, 13, 16, 17, 32};
  int modes[2];
  for (size_t i = 0; i < sizeof check_ns / sizeof *check_ns; i++) {
    const int n = check_ns[i];
    for (int k = 0, nm = bm_modes(t, n, modes); k < nm; k++) {
      bm_path(modes[k]);
      if (modes[k] == 1 && !kc_mvm_ok(t, w.d, w.row_bytes, cols, n)) {
        printf("FAIL %s %s n=%d: the mma path refuses the weight\n", shape, dt_name(t), n);
        g_fail = 1;
      }
      BM_CHECK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)n * n_out)); /* NaN: unwritten outputs fail */
      BM_CHECK(kc_matvec(0, t, w.d, n_out, cols, w.row_bytes, dx, dout, n));
      const double e = bm_err(&w, hx, dout, n);
      if (!(e <= BM_TOL)) {
        printf("FAIL %s %s %s n=%d: normalized error %.3g > %.0e\n", shape, dt_name(t), g_path, n, e, BM_TOL);
        g_fail = 1;
      }
    }
  }
  for (int i = 0; i < BM_NN; i++)
  for (int mi = 0, n = k_ns[i], nm = bm_modes(t, n, modes); mi < nm; mi++) {
    bm_path(modes[mi]);
    BM_CHECK(kc_matvec(0, t, w.d, n_out, cols, w.row_bytes, dx, dout, n));
    BM_CHECK(cudaEventRecord(e0));
    for (int k = 0; k < reps; k++)
      kc_matvec(0, t, w.d + w.bytes * (size_t)(k % w.copies), n_out, cols, w.row_bytes, dx, dout, n);
    BM_CHECK(cudaEventRecord(e1));
    BM_CHECK(cudaEventSynchronize(e1));
    BM_CHECK(cudaGetLastError());
    float ms;
    BM_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    bm_row(shape, t, n, ms * 1e-3 / reps, (double)w.bytes + 4.0 * n * (cols + n_out));
  }
  bm_path(-1);
  bm_wfree(&w);
}

/* q/k/v-like multi product (4096 + 1024 + 1024) x 4096 */
static void bm_multi(gt_type_t t, const float *hx, const float *dx, float *dout, float *dref, int reps,
                     cudaEvent_t e0, cudaEvent_t e1) {
  const int64_t cols = 4096, outs[3] = {4096, 1024, 1024};
  bm_w_t w[3];
  kc_mv_seg_t seg[3];
  int64_t off = 0;
  double bytes = 0;
  for (int s = 0; s < 3; s++) {
    w[s] = bm_weight(t, outs[s], cols, 1, (unsigned)(7 + s));
    seg[s].w = w[s].d, seg[s].n_out = outs[s], seg[s].row_bytes = w[s].row_bytes;
    bytes += (double)w[s].bytes;
  }
  int modes[2];
  for (int i = 0; i < BM_NN; i++)
  for (int mi = 0, n = k_ns[i], nm = bm_modes(t, n, modes); mi < nm; mi++) {
    bm_path(modes[mi]);
    off = 0;
    for (int s = 0; s < 3; s++) {
      seg[s].out = dout + off;
      BM_CHECK(kc_matvec(0, t, w[s].d, outs[s], cols, w[s].row_bytes, dx, dref + off, n));
      off += outs[s] * n;
    }
    BM_CHECK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)off));
    BM_CHECK(kc_matvec_multi(0, t, 3, seg, cols, dx, n));
    if (!bm_same(dout, dref, (size_t)off)) {
      printf("FAIL multi %s %s n=%d: differs from kc_matvec per weight\n", dt_name(t), g_path, n);
      g_fail = 1;
    }
    for (int s = 0; s < 3 && i == 0; s++) {
      const double e = bm_err(&w[s], hx, seg[s].out, n);
      if (!(e <= BM_TOL)) {
        printf("FAIL multi %s %s segment %d: normalized error %.3g\n", dt_name(t), g_path, s, e);
        g_fail = 1;
      }
    }
    kc_mv_seg_t sk[3];
    memcpy(sk, seg, sizeof sk);
    BM_CHECK(cudaEventRecord(e0));
    for (int k = 0; k < reps; k++) {
      for (int s = 0; s < 3; s++) sk[s].w = w[s].d + w[s].bytes * (size_t)(k % w[s].copies);
      kc_matvec_multi(0, t, 3, sk, cols, dx, n);
    }
    BM_CHECK(cudaEventRecord(e1));
    BM_CHECK(cudaEventSynchronize(e1));
    BM_CHECK(cudaGetLastError());
    float ms;
    BM_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    bm_row("multi (4096+2x1024)x4096", t, n, ms * 1e-3 / reps, bytes + 4.0 * n * (cols + 6144));
  }
  bm_path(-1);
  for (int s = 0; s < 3; s++) bm_wfree(&w[s]);
}

/* swiglu 12288 x 4096 (gate + up) */
static void bm_swiglu(gt_type_t t, const float *dx, float *dout, float *dref, int reps, cudaEvent_t e0,
                      cudaEvent_t e1) {
  const int64_t n_out = 12288, cols = 4096;
  bm_w_t g = bm_weight(t, n_out, cols, 1, 101), u = bm_weight(t, n_out, cols, 1, 202);
  float *tmp;
  BM_CHECK(cudaMalloc((void **)&tmp, sizeof(float) * 2 * 32 * n_out));
  int modes[2];
  for (int i = 0; i < BM_NN; i++)
  for (int mi = 0, n = k_ns[i], nm = bm_modes(t, n, modes); mi < nm; mi++) {
    bm_path(modes[mi]);
    const size_t m = (size_t)n * n_out;
    BM_CHECK(kc_matvec(0, t, g.d, n_out, cols, g.row_bytes, dx, tmp, n));
    BM_CHECK(kc_matvec(0, t, u.d, n_out, cols, u.row_bytes, dx, tmp + m, n));
    BM_CHECK(kc_swiglu(0, tmp, tmp + m, dref, m));
    BM_CHECK(cudaMemset(dout, 0xff, sizeof(float) * m));
    BM_CHECK(kc_matvec_swiglu(0, t, g.d, u.d, n_out, cols, g.row_bytes, dx, dout, n));
    if (!bm_same(dout, dref, m)) {
      printf("FAIL swiglu %s %s n=%d: differs from kc_swiglu(kc_matvec, kc_matvec)\n", dt_name(t), g_path, n);
      g_fail = 1;
    }
    BM_CHECK(cudaEventRecord(e0));
    for (int k = 0; k < reps; k++)
      kc_matvec_swiglu(0, t, g.d + g.bytes * (size_t)(k % g.copies), u.d + u.bytes * (size_t)(k % u.copies), n_out,
                       cols, g.row_bytes, dx, dout, n);
    BM_CHECK(cudaEventRecord(e1));
    BM_CHECK(cudaEventSynchronize(e1));
    BM_CHECK(cudaGetLastError());
    float ms;
    BM_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    bm_row("swiglu 2x12288x4096", t, n, ms * 1e-3 / reps, 2.0 * (double)g.bytes + 4.0 * n * (cols + n_out));
  }
  bm_path(-1);
  cudaFree(tmp);
  bm_wfree(&g);
  bm_wfree(&u);
}

/* one row of the mmq table: ms for reps calls of a product of n rows (weight bytes wb) */
static void bm_mmq_row(const char *shape, gt_type_t t, int n, int64_t n_out, int64_t cols, size_t wb, float ms, int reps,
                       double e) {
  const double sec = ms * 1e-3 / reps, bytes = (double)wb + 4.0 * n * (cols + n_out);
  printf("%-22s | %-4s | %-4s | %3d | %9.2f | %7.1f | %5.1f %% | %.1f TFLOP/s (e %.1e)\n", shape, dt_name(t), g_path, n,
         sec * 1e6, bytes / sec / 1e9, 100.0 * bytes / sec / g_copy_bw, 2.0 * n * n_out * cols / sec / 1e12, e);
  fflush(stdout);
}

/* 3..KC_MVW_MAX_ROWS rows with x in one bf16 part on the ring kernels (kc_mvm_rows_launch, the mmq
 * path's replacement there; path "ring1": 3..8 rows kernels/matvec_ring.cuh, 9..32
 * kernels/matvec_wide.cuh); "not taken" when it does not fit */
static void bm_ring1(gt_type_t t, const bm_w_t *w, const char *shape, int64_t n_out, int64_t cols, int n, const float *hx,
                     const float *dx, int reps, cudaEvent_t e0, cudaEvent_t e1) {
  float *dout;
  BM_CHECK(cudaMalloc((void **)&dout, sizeof(float) * (size_t)n * n_out));
  BM_CHECK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)n * n_out));
  const kc_mv_seg_t seg0 = {w->d, dout, n_out, w->row_bytes};
  const int rc = kc_mvm_rows_launch(0, t, 1, &seg0, NULL, cols, dx, n);
  g_path = "ring1";
  if (rc < 0) {
    printf("%-22s | %-4s | %-4s | %3d | not taken (shared memory)\n", shape, dt_name(t), g_path, n);
  } else {
    BM_CHECK((cudaError_t)rc);
    const double e = bm_err(w, hx, dout, n);
    if (!(e <= 6e-3)) {
      printf("FAIL %s %s ring1 n=%d: normalized error %.3g > 6e-3\n", shape, dt_name(t), n, e);
      g_fail = 1;
    }
    BM_CHECK(cudaEventRecord(e0));
    for (int k = 0; k < reps; k++) {
      const kc_mv_seg_t seg = {w->d + w->bytes * (size_t)(k % w->copies), dout, n_out, w->row_bytes};
      kc_mvm_rows_launch(0, t, 1, &seg, NULL, cols, dx, n);
    }
    BM_CHECK(cudaEventRecord(e1));
    BM_CHECK(cudaEventSynchronize(e1));
    BM_CHECK(cudaGetLastError());
    float ms;
    BM_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    bm_mmq_row(shape, t, n, n_out, cols, w->bytes, ms, reps, e);
  }
  cudaFree(dout);
}

/* the mmq path (kernels/mmq.cu) for n rows: prep + launch per rep */
static void bm_mmq(gt_type_t t, int64_t n_out, int64_t cols, const float *hx, const float *dx, int reps, cudaEvent_t e0,
                   cudaEvent_t e1) {
  bm_w_t w = bm_weight(t, n_out, cols, 1, (unsigned)(n_out * 31 + cols + t));
  char shape[48];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)n_out, (long long)cols);
  if (!kc_mmq_ok(t, w.d, w.row_bytes, cols)) {
    printf("FAIL %s %s: the mmq path refuses the weight\n", shape, dt_name(t));
    g_fail = 1;
    bm_wfree(&w);
    return;
  }
  const int ns[] = {1, 2, 4, 8, 16, 32, 64, 128, 512};
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
    const int n = ns[i];
    char nname[16];
    snprintf(nname, sizeof nname, "%d", n);
    if ((double)n * n_out > 32.0 * 151936 || !bm_listed(g_mmq_ns, nname)) continue;
    for (int po = 0; po < (n > 64 ? 6 : 4); po++) { /* decode rows: 3 parts (fp32 activations), 1 (bf16) */
      const int parts = n > 64 ? 1 + po / 2 : po < 2 ? 3 : 1, occ = 1 + po % 2;
      kc_mmq_set_occ(occ);
      void *sc;
      float *dout;
      BM_CHECK(cudaMalloc(&sc, kc_mmq_scratch_bytes(cols, n, parts)));
      BM_CHECK(cudaMalloc((void **)&dout, sizeof(float) * (size_t)n * n_out));
      BM_CHECK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)n * n_out));
      const kc_mv_seg_t seg0 = {w.d, dout, n_out, w.row_bytes};
      BM_CHECK(kc_mmq_prep(0, t, dx, cols, n, parts, sc));
      BM_CHECK(kc_mmq_launch(0, t, 1, &seg0, NULL, cols, sc, n, parts));
      const double e = bm_err(&w, hx, dout, n < 16 ? n : 16), tol = parts == 1 ? 6e-3 : BM_TOL;
      char path[16];
      snprintf(path, sizeof path, "mmq%d/%d", parts, occ);
      g_path = path;
      if (!(e <= tol)) {
        printf("FAIL %s %s %s n=%d: normalized error %.3g > %.0e\n", shape, dt_name(t), path, n, e, tol);
        g_fail = 1;
      }
      BM_CHECK(cudaEventRecord(e0));
      for (int k = 0; k < reps; k++) {
        const kc_mv_seg_t seg = {w.d + w.bytes * (size_t)(k % w.copies), dout, n_out, w.row_bytes};
        kc_mmq_prep(0, t, dx, cols, n, parts, sc);
        kc_mmq_launch(0, t, 1, &seg, NULL, cols, sc, n, parts);
      }
      BM_CHECK(cudaEventRecord(e1));
      BM_CHECK(cudaEventSynchronize(e1));
      BM_CHECK(cudaGetLastError());
      float ms;
      BM_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      bm_mmq_row(shape, t, n, n_out, cols, w.bytes, ms, reps, e);
      cudaFree(sc);
      cudaFree(dout);
    }
    if (n >= 3 && n <= KC_MVW_MAX_ROWS && (t == GT_TYPE_Q4_K || t == GT_TYPE_Q6_K))
      bm_ring1(t, &w, shape, n_out, cols, n, hx, dx, reps, e0, e1);
  }
  g_path = "dflt";
  kc_mmq_set_occ(0);
  bm_wfree(&w);
}

int main(int argc, char **argv) {
  int reps = 50, mmq = 1;
  const char *types_arg = "BF16,Q8_0,Q4_K,Q5_K,Q6_K";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--types")) types_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--mmq")) mmq = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--shapes")) g_shapes = argv[i + 1];
    else if (!strcmp(argv[i], "--mmq-ns")) g_mmq_ns = argv[i + 1];
    else if (!strcmp(argv[i], "--ns")) {
      BM_NN = 0;
      for (const char *c = argv[i + 1]; *c && BM_NN < 8; c = strchr(c, ',') ? strchr(c, ',') + 1 : "") {
        const int v = atoi(c);
        if (v < 1 || v > 32) {
          fprintf(stderr, "--ns: row counts 1..32\n");
          return 2;
        }
        k_ns[BM_NN++] = v;
      }
    } else {
      fprintf(stderr,
              "usage: %s [--reps N] [--types BF16,Q8_0,Q4_K,Q5_K,Q6_K] [--ns 1,2,...] [--mmq 0|1] [--shapes NxK,multi,swiglu]"
              " [--mmq-ns 8,32]\n",
              argv[0]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  BM_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  bm_copy_bw();

  const int64_t max_cols = 12288, max_out = 151936;
  float *hx = (float *)malloc(sizeof(float) * 512 * max_cols); /* 512 rows for bm_mmq, 32 for the rest */
  for (size_t i = 0; i < 512 * (size_t)max_cols; i++) hx[i] = bm_rand();
  float *dx, *dout, *dref;
  BM_CHECK(cudaMalloc((void **)&dx, sizeof(float) * 512 * max_cols));
  BM_CHECK(cudaMalloc((void **)&dout, sizeof(float) * 32 * max_out));
  BM_CHECK(cudaMalloc((void **)&dref, sizeof(float) * 32 * max_out));
  BM_CHECK(cudaMemcpy(dx, hx, sizeof(float) * 512 * max_cols, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  BM_CHECK(cudaEventCreate(&e0));
  BM_CHECK(cudaEventCreate(&e1));

  const int64_t shapes[][2] = {{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}};
  printf("%-22s | %-4s | %-4s | %2s | %9s | %7s | %s | %s\n", "shape", "type", "path", "n", "us", "GB/s",
         "% of copy BW", "% of 4.8 TB/s");
  char list[128];
  snprintf(list, sizeof list, "%s", types_arg);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    const int ti = dt_from_name(tok);
    if (ti < 0 || !qz_can_quantize((gt_type_t)ti)) {
      fprintf(stderr, "unknown type %s\n", tok);
      return 2;
    }
    const gt_type_t t = (gt_type_t)ti;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      if (bm_shape_listed(shapes[s][0], shapes[s][1])) bm_plain(t, shapes[s][0], shapes[s][1], hx, dx, dout, reps, e0, e1);
    if (bm_listed(g_shapes, "multi")) bm_multi(t, hx, dx, dout, dref, reps, e0, e1);
    if (bm_listed(g_shapes, "swiglu")) bm_swiglu(t, dx, dout, dref, reps, e0, e1);
  }
  if (mmq) printf("\n%-22s | %-4s | %-4s | %3s | %9s | %7s | %s\n", "shape", "type", "path", "n", "us", "GB/s", "% of copy BW");
  snprintf(list, sizeof list, "%s", types_arg);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    const gt_type_t t = (gt_type_t)dt_from_name(tok);
    if (!mmq || (t != GT_TYPE_Q4_K && t != GT_TYPE_Q5_K && t != GT_TYPE_Q6_K && t != GT_TYPE_Q8_0)) continue;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      if (shapes[s][0] != 1024 && bm_shape_listed(shapes[s][0], shapes[s][1])) bm_mmq(t, shapes[s][0], shapes[s][1], hx, dx, reps, e0, e1);
  }
  printf(g_fail ? "VALIDATION FAILED\n" : "all checks passed\n");
  free(hx);
  cudaFree(dx);
  cudaFree(dout);
  cudaFree(dref);
  return g_fail ? 1 : 0;
}
