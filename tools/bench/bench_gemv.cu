/* tools/bench/bench_gemv.cu — sweep of the pipelined decode product (kernels/gemv_pipe*.cuh)
 * against the current paths, at 1..8 rows of x (llm.c dev/cuda style: check, then time).
 *
 *   bench_gemv [--reps N] [--types Q4_K,Q6_K (Q5_K too)] [--rows 1,2,4,8] [--shape SUBSTR] [--only VARIANT[/kK]]
 *              [--check 0|1|2] [--base 0|1] [--graph 0|1] [--wired 0|1] [--parts 1|3]
 *
 * --wired 1: instead of the sweep, the backend's choice (engine/backend/backend_cuda_ops.c) per
 * shape, type and rows, one table: "cur" = the path without the pipelined product (kc_matvec* at
 * 1..2 rows, i.e. matvec_mma for Q4_K / Q6_K; mmq with --parts x parts at 3..8 rows: 1 = bf16
 * activations, the default, 3 = fp32), "auto" = what kc_gpipe_want's table (mode 2) picks, "force" =
 * kc_gpipe_launch (GANTRY_GPIPE=1), each us per call and % of copy bandwidth, the pick and the
 * speedups cur / auto, cur / force. x parts of the pipelined product as the backend gives them (3 at
 * 1..2 rows, --parts at 3..8). Errors checked as below (bound 6e-3 where x is in one part).
 *
 * Variants: rRwWsSbB/kK = R weight rows per block, W warps, S cp.async stages, B blocks per SM (the
 * register bound), K = the K split (cluster size). Baselines: "matvec" (kc_matvec / _multi / _swiglu:
 * what the backend runs at 1..2 rows, the tensor-core matvec_mma there), "mmq3" (kc_mmq_prep +
 * kc_mmq_launch, x in 3 bf16 parts: the fp32-activation path at >= 3 rows) and "mmq1" (1 part, the
 * bf16-activation path; not exact: its error is printed, not checked).
 * 1. Check (--check 1, default; 2 = only this, for compute-sanitizer): every variant and K split at
 *    rows 1..8 on small shapes whose n_out is no multiple of a tile (plain, multi of 3, swiglu), both
 *    types: normalized error against the host reference (dt_dequant_row values + double dot) <= 1e-5,
 *    outputs pre-filled with NaN (an unwritten output fails).
 * 2. Timing: model shapes (qwen3-8b, qwen35-9b, qwen35-27b) x types x rows; each weight replicated to
 *    >= 256 MiB (up to 64 copies) and the copies cycled so every rep streams from HBM (H200 L2: 50 MB);
 *    every timed configuration is checked first (error printed in the row, FAIL lines on excess).
 *    Time per call: one CUDA graph of --reps calls (--graph 1, default: launch gaps as in the decode
 *    graphs) or --reps plain launches (--graph 0), after one warm-up.
 *    One table: shape | type | variant | rows | us | GB/s | % of copy BW | err, GB = weights + x + out,
 *    copy BW = 2 * bytes / time of a 1 GiB D2D cudaMemcpy in the same run. Then a summary: per shape,
 *    type and rows the best baseline and the best variant; per variant the sum of its times over the
 *    timed shapes at each row count (to pick a default).
 * For ncu: --only r64w8s4b2/k2 --shape "q3 swiglu" --rows 1 --reps 3 --check 0 --base 0.
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
#include "kernels/gemv_pipe_impl.cuh" /* and gemv_pipe.cuh: kc_gpipe_want / kc_gpipe_launch (--wired) */
#include "kernels/matvec.cuh"
#include "kernels/mmq.cuh"

#define GB_CHECK(expr)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = (cudaError_t)(expr);                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));      \
      exit(2);                                                                                    \
    }                                                                                             \
  } while (0)

#define GB_POOL 512           /* distinct weight rows per weight */
#define GB_FLUSH (256u << 20) /* bytes per weight and rep cycle at least */
#define GB_TOL 1e-5
#define GB_MAXN 8
#define GB_MAXSEG KC_MATVEC_MAX_SEGS

/* ---------------------------------------------------------------- variants */
typedef int (*gb_fn)(cudaStream_t, const gp_args_t &, int64_t, const float *, int, int);
typedef struct {
  const char *name;
  gb_fn q4, q5, q6;
} gb_var_t;
#define GB_V(R, W, S, B)                                                                                  \
  {"r" #R "w" #W "s" #S "b" #B, gp_go_n<gp_q4k, R, W, S, B>, gp_go_n<gp_q5k, R, W, S, B>,               \
   gp_go_n<gp_q6k, R, W, S, B>}
/* B: blocks per SM for the register bound (W * B = 16 warps: 128 registers; 8 warps: 255) */
static const gb_var_t k_vars[] = {
    GB_V(32, 4, 4, 4),  GB_V(64, 4, 4, 4),  GB_V(64, 4, 6, 3),  GB_V(64, 4, 4, 2),  GB_V(64, 8, 2, 2),
    GB_V(64, 8, 3, 2),  GB_V(64, 8, 4, 2),  GB_V(64, 8, 4, 1),  GB_V(128, 4, 3, 2), GB_V(128, 8, 3, 2),
    GB_V(128, 8, 4, 1), GB_V(32, 8, 3, 2),
};
#define GB_NV ((int)(sizeof k_vars / sizeof *k_vars))
static const int k_ks[] = {1, 2, 4, 8};
#define GB_NK 4

/* ---------------------------------------------------------------- weights */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float gb_rand(void) { /* uniform [-1, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* A weight [n_out, cols] of type t: copies back to back on the device; pool rows dequantized on the
 * host (row o of W is pool row o % GB_POOL) */
typedef struct {
  gt_type_t t;
  int64_t n_out, cols;
  size_t row_bytes, bytes;
  int copies;
  uint8_t *d;
  float *ref;
} gb_w_t;

static gb_w_t gb_weight(gt_type_t t, int64_t n_out, int64_t cols, int flush, unsigned seed) {
  gb_w_t w = {};
  w.t = t, w.n_out = n_out, w.cols = cols;
  w.row_bytes = dt_row_bytes(t, cols);
  w.bytes = w.row_bytes * (size_t)n_out;
  w.copies = flush ? (int)((GB_FLUSH + w.bytes - 1) / w.bytes) : 1;
  if (w.copies > 64) w.copies = 64;
  g_rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0x100000001b3ull);
  const int64_t pool = n_out < GB_POOL ? n_out : GB_POOL;
  uint8_t *hq = (uint8_t *)malloc(w.row_bytes * (size_t)pool);
  float *src = (float *)malloc(sizeof(float) * (size_t)cols);
  w.ref = (float *)malloc(sizeof(float) * (size_t)cols * (size_t)pool);
  for (int64_t r = 0; r < pool; r++) {
    const float amp = 0.02f * (1.0f + (float)(r % 7));
    for (int64_t c = 0; c < cols; c++) src[c] = amp * gb_rand() * (c % 97 == 0 ? 4.0f : 1.0f);
    if (qz_quantize_row(t, src, hq + w.row_bytes * (size_t)r, cols) ||
        qz_row_to_f32(t, hq + w.row_bytes * (size_t)r, w.ref + (size_t)cols * r, cols)) {
      fprintf(stderr, "quantize %s failed\n", dt_name(t));
      exit(2);
    }
  }
  GB_CHECK(cudaMalloc((void **)&w.d, w.bytes * (size_t)w.copies));
  for (int k = 0; k < w.copies; k++)
    for (int64_t r = 0; r < n_out; r += pool) {
      const int64_t m = n_out - r < pool ? n_out - r : pool;
      GB_CHECK(cudaMemcpy(w.d + w.bytes * (size_t)k + w.row_bytes * (size_t)r, hq, w.row_bytes * (size_t)m,
                          cudaMemcpyHostToDevice));
    }
  free(hq);
  free(src);
  return w;
}

/* ---------------------------------------------------------------- a product */
enum { GB_PLAIN, GB_MULTI, GB_SWIGLU };
typedef struct {
  const char *label;
  int kind;
  int n_seg; /* weights (swiglu: 2 = gate, up) */
  int64_t n_out[GB_MAXSEG], cols;
} gb_shape_t;

/* a product on the device with its sampled reference */
typedef struct {
  const gb_shape_t *s;
  gt_type_t t;
  gb_w_t w[GB_MAXSEG];
  int nw, nout_seg;   /* weights; output segments (swiglu 1) */
  int64_t off[GB_MAXSEG], out_total; /* output segment offsets (floats per x row times n: see gb_outs) */
  int64_t *fs[GB_MAXSEG];  /* sampled features per output segment */
  int nfs[GB_MAXSEG];
  double *ref[GB_MAXSEG];  /* [nfs][GB_MAXN] */
  double bytes_w;
} gb_prod_t;

static const float *g_hx; /* [GB_MAXN, max cols] */
static float *g_dx, *g_dout;
static void *g_scratch;
static cudaStream_t g_st; /* non-blocking: timed calls are captured into a CUDA graph */
static double g_copy_bw;
static int g_fail;

static gb_prod_t gb_make(const gb_shape_t *s, gt_type_t t, int flush) {
  gb_prod_t p = {};
  p.s = s, p.t = t, p.nw = s->n_seg, p.nout_seg = s->kind == GB_SWIGLU ? 1 : s->n_seg;
  for (int i = 0; i < p.nw; i++) {
    const int64_t no = s->kind == GB_SWIGLU ? s->n_out[0] : s->n_out[i];
    p.w[i] = gb_weight(t, no, s->cols, flush, (unsigned)(no * 31 + s->cols + t + 1000 * i));
    p.bytes_w += (double)p.w[i].bytes;
  }
  for (int i = 0; i < p.nout_seg; i++) {
    const int64_t no = p.w[i].n_out, stride = no > 512 ? no / 256 : 1;
    p.fs[i] = (int64_t *)malloc(sizeof(int64_t) * (size_t)no);
    for (int64_t o = 0; o < no; o++)
      if (o < 64 || o >= no - 64 || o % stride == 0) p.fs[i][p.nfs[i]++] = o;
    p.ref[i] = (double *)malloc(sizeof(double) * (size_t)p.nfs[i] * GB_MAXN);
    for (int k = 0; k < p.nfs[i]; k++)
      for (int r = 0; r < GB_MAXN; r++) {
        double v[2];
        for (int j = 0; j < (s->kind == GB_SWIGLU ? 2 : 1); j++) {
          const gb_w_t *w = &p.w[i + j];
          const float *wr = w->ref + (size_t)s->cols * (size_t)(p.fs[i][k] % GB_POOL), *xr = g_hx + (size_t)r * s->cols;
          double a = 0;
          for (int64_t c = 0; c < s->cols; c++) a += (double)wr[c] * xr[c];
          v[j] = a;
        }
        p.ref[i][k * GB_MAXN + r] = s->kind == GB_SWIGLU ? v[0] / (1.0 + exp(-v[0])) * v[1] : v[0];
      }
  }
  return p;
}
static void gb_free(gb_prod_t *p) {
  for (int i = 0; i < p->nw; i++) cudaFree(p->w[i].d), free(p->w[i].ref);
  for (int i = 0; i < p->nout_seg; i++) free(p->fs[i]), free(p->ref[i]);
}

/* output segments of n rows: segment i at g_dout + off[i], [n, n_out_i] */
static void gb_outs(gb_prod_t *p, int n) {
  int64_t o = 0;
  for (int i = 0; i < p->nout_seg; i++) p->off[i] = o, o += (int64_t)n * p->w[i].n_out;
  p->out_total = o;
}
static void gb_segs(const gb_prod_t *p, int copy, kc_mv_seg_t *seg) {
  for (int i = 0; i < p->nout_seg; i++) {
    seg[i].w = p->w[i].d + p->w[i].bytes * (size_t)(copy % p->w[i].copies);
    seg[i].out = g_dout + p->off[i];
    seg[i].n_out = p->w[i].n_out;
    seg[i].row_bytes = p->w[i].row_bytes;
  }
}
static const void *gb_wup(const gb_prod_t *p, int copy) {
  return p->s->kind == GB_SWIGLU ? p->w[1].d + p->w[1].bytes * (size_t)(copy % p->w[1].copies) : NULL;
}

/* A path: base 0 matvec, 1 mmq3, 2 mmq1, 3 a variant (v, ks); --wired: 4 cur, 5 auto, 6 force (v: the
 * x parts of mmq at >= 3 rows). Returns a cudaError_t value. */
typedef struct {
  int base, v, ks;
} gb_path_t;
static int gb_run(const gb_path_t *ph, gb_prod_t *p, int n, int copy);
/* the wired paths: the backend's cur / auto / force (see the header) */
static int gb_wired(const gb_path_t *ph, gb_prod_t *p, int n, int copy) {
  const int parts = n >= KC_MMQ_MIN_ROWS ? ph->v : 3;
  int gp = ph->base == 6;
  if (ph->base == 5) {
    kc_gpipe_set_mode(2);
    gp = kc_gpipe_want(p->t, p->s->cols, (size_t)p->bytes_w, n);
    kc_gpipe_set_mode(-1);
  }
  if (gp) {
    kc_mv_seg_t seg[GB_MAXSEG];
    gb_segs(p, copy, seg);
    return kc_gpipe_launch(g_st, p->t, p->nout_seg, seg, gb_wup(p, copy), p->s->cols, g_dx, n, parts);
  }
  const gb_path_t cur = {n >= KC_MMQ_MIN_ROWS ? (parts == 3 ? 1 : 2) : 0, 0, 0};
  return gb_run(&cur, p, n, copy);
}
static int gb_run(const gb_path_t *ph, gb_prod_t *p, int n, int copy) {
  if (ph->base >= 4) return gb_wired(ph, p, n, copy);
  kc_mv_seg_t seg[GB_MAXSEG];
  gb_segs(p, copy, seg);
  const void *wup = gb_wup(p, copy);
  const int64_t cols = p->s->cols;
  if (ph->base == 0) {
    if (p->s->kind == GB_PLAIN)
      return kc_matvec(g_st, p->t, seg[0].w, seg[0].n_out, cols, seg[0].row_bytes, g_dx, seg[0].out, n);
    if (p->s->kind == GB_MULTI) return kc_matvec_multi(g_st, p->t, p->nout_seg, seg, cols, g_dx, n);
    return kc_matvec_swiglu(g_st, p->t, seg[0].w, wup, seg[0].n_out, cols, seg[0].row_bytes, g_dx, seg[0].out, n);
  }
  if (ph->base == 1 || ph->base == 2) {
    const int parts = ph->base == 1 ? 3 : 1;
    int e = kc_mmq_prep(g_st, p->t, g_dx, cols, n, parts, g_scratch);
    return e ? e : kc_mmq_launch(g_st, p->t, p->nout_seg, seg, wup, cols, g_scratch, n, parts);
  }
  gp_args_t a;
  const int e = gp_args(a, p->t, p->nout_seg, seg, wup, cols, g_dx, n);
  if (e) return e;
  const gb_var_t *v = &k_vars[ph->v];
  return (p->t == GT_TYPE_Q4_K ? v->q4 : p->t == GT_TYPE_Q5_K ? v->q5 : v->q6)(g_st, a, cols, g_dx, n, ph->ks);
}
static void gb_pname(const gb_path_t *ph, char *buf, size_t len) {
  if (ph->base >= 4) snprintf(buf, len, "%s", ph->base == 4 ? "cur" : ph->base == 5 ? "auto" : "force");
  else if (ph->base < 3) snprintf(buf, len, "%s", ph->base == 0 ? "matvec" : ph->base == 1 ? "mmq3" : "mmq1");
  else snprintf(buf, len, "%s/k%d", k_vars[ph->v].name, ph->ks);
}

/* normalized error of the outputs of n rows (device, g_dout) against the reference */
static double gb_err(gb_prod_t *p, int n) {
  double num = 0, den = 0;
  float *ho = (float *)malloc(sizeof(float) * (size_t)p->out_total);
  GB_CHECK(cudaMemcpy(ho, g_dout, sizeof(float) * (size_t)p->out_total, cudaMemcpyDeviceToHost));
  for (int i = 0; i < p->nout_seg; i++)
    for (int k = 0; k < p->nfs[i]; k++)
      for (int r = 0; r < n; r++) {
        const double g = ho[p->off[i] + (int64_t)r * p->w[i].n_out + p->fs[i][k]], s = p->ref[i][k * GB_MAXN + r];
        if (!isfinite(g)) num = INFINITY;
        num += (g - s) * (g - s);
        den += s * s;
      }
  free(ho);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* runs the path once on copy 0 with NaN-filled outputs; returns the error (-1: the path refused) */
static double gb_check(const gb_path_t *ph, gb_prod_t *p, int n) {
  gb_outs(p, n);
  GB_CHECK(cudaMemsetAsync(g_dout, 0xff, sizeof(float) * (size_t)p->out_total, g_st));
  const int e = gb_run(ph, p, n, 0);
  if (e) { /* refused at launch (shared memory, K split, a cluster that cannot be placed) */
    cudaGetLastError();
    if (e != (int)cudaErrorInvalidConfiguration && e != (int)cudaErrorInvalidValue) {
      char nm[32];
      gb_pname(ph, nm, sizeof nm);
      printf("note: %s %s %s n=%d refused: %s\n", p->s->label, dt_name(p->t), nm, n, cudaGetErrorString((cudaError_t)e));
    }
    return -1;
  }
  GB_CHECK(cudaStreamSynchronize(g_st));
  return gb_err(p, n);
}

static void gb_copy_bw(void) {
  const size_t bytes = (size_t)1 << 30;
  void *a, *b;
  GB_CHECK(cudaMalloc(&a, bytes));
  GB_CHECK(cudaMalloc(&b, bytes));
  GB_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  GB_CHECK(cudaEventCreate(&e0));
  GB_CHECK(cudaEventCreate(&e1));
  GB_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  const int reps = 10;
  GB_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; i++) GB_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  GB_CHECK(cudaEventRecord(e1));
  GB_CHECK(cudaEventSynchronize(e1));
  float ms;
  GB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  g_copy_bw = 2.0 * (double)bytes * reps / (ms * 1e-3);
  printf("copy bandwidth (cudaMemcpy D2D 1 GiB, read + write): %.1f GB/s\n", g_copy_bw / 1e9);
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

/* ---------------------------------------------------------------- shapes */
/* label: model, weight, n_out x cols */
static const gb_shape_t k_time[] = {
    {"q3 qkv (4096+2x1024)x4096", GB_MULTI, 3, {4096, 1024, 1024}, 4096},
    {"q3 q/o 4096x4096", GB_PLAIN, 1, {4096}, 4096},
    {"q3 k/v 1024x4096", GB_PLAIN, 1, {1024}, 4096},
    {"q3 swiglu 2x12288x4096", GB_SWIGLU, 2, {12288}, 4096},
    {"q3 down 4096x12288", GB_PLAIN, 1, {4096}, 12288},
    {"q3 head 151936x4096", GB_PLAIN, 1, {151936}, 4096},
    {"q35 gdn-in (8192+4096+2x32)x4096", GB_MULTI, 4, {8192, 4096, 32, 32}, 4096},
    {"q35-27b swiglu 2x17408x5120", GB_SWIGLU, 2, {17408}, 5120},
    {"q35-27b down 5120x17408", GB_PLAIN, 1, {5120}, 17408},
    {"q35-27b gdn-in (10240+6144+2x48)x5120", GB_MULTI, 4, {10240, 6144, 48, 48}, 5120},
    {"q35-27b o/out 5120x6144", GB_PLAIN, 1, {5120}, 6144},
};
/* which types each timed shape runs in (Q4_K_M: Q6_K for v, down, head) */
static int gb_shape_types(int i, gt_type_t t) {
  const char *l = k_time[i].label;
  if (strstr(l, "head")) return t == GT_TYPE_Q6_K;
  if (strstr(l, "down") || strstr(l, "k/v")) return 1;
  return t != GT_TYPE_Q6_K; /* Q4_K (and Q5_K when asked for) */
}
static const gb_shape_t k_chk[] = {
    {"chk 300x1024", GB_PLAIN, 1, {300}, 1024},
    {"chk multi (200+72+40)x768", GB_MULTI, 3, {200, 72, 40}, 768},
    {"chk swiglu 2x150x512", GB_SWIGLU, 2, {150}, 512},
};

/* us per call of the path (one warm-up; a CUDA graph of reps calls with --graph 1, else plain
 * launches), weight copies cycled */
static double gb_time(const gb_path_t *ph, gb_prod_t *p, int n, int reps, int graph) {
  cudaEvent_t e0, e1;
  GB_CHECK(cudaEventCreate(&e0));
  GB_CHECK(cudaEventCreate(&e1));
  float ms;
  if (graph) { /* reps calls (weight copies cycled) in one CUDA graph, as decode steps run */
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    GB_CHECK(cudaStreamBeginCapture(g_st, cudaStreamCaptureModeRelaxed));
    for (int k = 0; k < reps; k++) GB_CHECK(gb_run(ph, p, n, k));
    GB_CHECK(cudaStreamEndCapture(g_st, &gr));
    GB_CHECK(cudaGraphInstantiate(&ge, gr, 0));
    GB_CHECK(cudaGraphLaunch(ge, g_st)); /* warm-up */
    GB_CHECK(cudaEventRecord(e0, g_st));
    GB_CHECK(cudaGraphLaunch(ge, g_st));
    GB_CHECK(cudaEventRecord(e1, g_st));
    GB_CHECK(cudaEventSynchronize(e1));
    GB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    GB_CHECK(cudaGraphExecDestroy(ge));
    GB_CHECK(cudaGraphDestroy(gr));
  } else {
    GB_CHECK(gb_run(ph, p, n, 1)); /* warm-up */
    GB_CHECK(cudaEventRecord(e0, g_st));
    for (int k = 0; k < reps; k++) gb_run(ph, p, n, k);
    GB_CHECK(cudaEventRecord(e1, g_st));
    GB_CHECK(cudaEventSynchronize(e1));
    GB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  }
  GB_CHECK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms * 1e3 / reps;
}

/* bytes a call moves: weights + x + out */
static double gb_bytes(const gb_prod_t *p, int n) {
  int64_t outs = 0;
  for (int i = 0; i < p->nout_seg; i++) outs += p->w[i].n_out;
  return p->bytes_w + 4.0 * n * (double)(p->s->cols + outs);
}

/* --wired 1: the backend's cur / auto / force per timed shape, type and rows (one table) */
static void gb_wired_table(const gt_type_t *types, int ntypes, const int *rows, int nrows, const char *shape_arg,
                           int reps, int graph, int parts) {
  printf("\nwired: cur = matvec (1..2 rows) / mmq%d (3..8 rows), auto = kc_gpipe_want's table, force = GANTRY_GPIPE=1\n",
         parts);
  printf("%-40s | %-4s | %2s | %9s %6s | %9s %6s %-5s | %9s %6s | %6s %6s | %s\n", "shape", "type", "n", "cur us",
         "%copy", "auto us", "%copy", "pick", "force us", "%copy", "x auto", "x frc", "err force");
  for (int ti = 0; ti < ntypes; ti++)
    for (int si = 0; si < (int)(sizeof k_time / sizeof *k_time); si++) {
      if (!gb_shape_types(si, types[ti]) || (shape_arg && !strstr(k_time[si].label, shape_arg))) continue;
      gb_prod_t p = gb_make(&k_time[si], types[ti], 1);
      for (int ni = 0; ni < nrows; ni++) {
        const int n = rows[ni];
        const double tol = n >= KC_MMQ_MIN_ROWS && parts == 1 ? 6e-3 : GB_TOL;
        double us[3], err[3];
        for (int b = 0; b < 3; b++) {
          const gb_path_t ph = {4 + b, parts, 0};
          err[b] = gb_check(&ph, &p, n);
          if (err[b] < 0 || !(err[b] <= tol)) {
            printf("FAIL %s %s %s n=%d: normalized error %.3g > %.0e%s\n", k_time[si].label, dt_name(types[ti]),
                   b == 0 ? "cur" : b == 1 ? "auto" : "force", n, err[b], tol, err[b] < 0 ? " (refused)" : "");
            g_fail = 1;
            us[b] = 0;
            continue;
          }
          us[b] = gb_time(&ph, &p, n, reps, graph);
        }
        kc_gpipe_set_mode(2);
        const int pick = kc_gpipe_want(types[ti], k_time[si].cols, (size_t)p.bytes_w, n);
        kc_gpipe_set_mode(-1);
        const double by = gb_bytes(&p, n), pc = 100.0 / g_copy_bw * 1e6 * by;
        printf("%-40s | %-4s | %2d | %9.2f %5.1f%% | %9.2f %5.1f%% %-5s | %9.2f %5.1f%% | %6.2f %6.2f | %.1e\n",
               k_time[si].label, dt_name(types[ti]), n, us[0], us[0] > 0 ? pc / us[0] : 0.0, us[1],
               us[1] > 0 ? pc / us[1] : 0.0, pick ? "gpipe" : "cur", us[2], us[2] > 0 ? pc / us[2] : 0.0,
               us[1] > 0 ? us[0] / us[1] : 0.0, us[2] > 0 ? us[0] / us[2] : 0.0, err[2]);
        fflush(stdout);
      }
      gb_free(&p);
    }
}

#define GB_MAXRES 4096
typedef struct {
  int shape, n;
  gt_type_t t;
  gb_path_t ph;
  double us;
} gb_res_t;
static gb_res_t g_res[GB_MAXRES];
static int g_nres;

static void gb_summary(void) {
  printf("\nsummary: best baseline and best variant per shape, type and rows\n");
  printf("%-40s | %-4s | %2s | %-16s | %8s | %-16s | %8s | %5s | %s\n", "shape", "type", "n", "best base", "us",
         "best variant", "us", "x", "% copy BW");
  for (int i = 0; i < g_nres; i++) {
    const gb_res_t *r = &g_res[i];
    int first = 1;
    for (int j = 0; j < i; j++)
      if (g_res[j].shape == r->shape && g_res[j].n == r->n && g_res[j].t == r->t) first = 0;
    if (!first) continue;
    int bb = -1, bv = -1;
    for (int j = i; j < g_nres; j++) {
      const gb_res_t *q = &g_res[j];
      if (q->shape != r->shape || q->n != r->n || q->t != r->t) continue;
      if (q->ph.base < 3 && q->ph.base != 2 && (bb < 0 || q->us < g_res[bb].us)) bb = j;
      if (q->ph.base == 3 && (bv < 0 || q->us < g_res[bv].us)) bv = j;
    }
    char nb[32] = "-", nv[32] = "-";
    if (bb >= 0) gb_pname(&g_res[bb].ph, nb, sizeof nb);
    if (bv >= 0) gb_pname(&g_res[bv].ph, nv, sizeof nv);
    double bytes = 0;
    {
      const gb_shape_t *s = &k_time[r->shape];
      const int nw = s->n_seg;
      int64_t outs = 0;
      for (int k = 0; k < (s->kind == GB_SWIGLU ? 1 : nw); k++) outs += s->n_out[k];
      for (int k = 0; k < nw; k++)
        bytes += (double)dt_row_bytes(r->t, s->cols) * (double)(s->kind == GB_SWIGLU ? s->n_out[0] : s->n_out[k]);
      bytes += 4.0 * r->n * (double)(s->cols + outs);
    }
    printf("%-40s | %-4s | %2d | %-16s | %8.2f | %-16s | %8.2f | %5.2f | %5.1f %%\n", k_time[r->shape].label,
           dt_name(r->t), r->n, nb, bb >= 0 ? g_res[bb].us : 0.0, nv, bv >= 0 ? g_res[bv].us : 0.0,
           bb >= 0 && bv >= 0 ? g_res[bb].us / g_res[bv].us : 0.0,
           bv >= 0 ? 100.0 * bytes / (g_res[bv].us * 1e-6) / g_copy_bw : 0.0);
  }
  printf("\nper variant: sum of us over the timed shapes (both types) at each row count ('-': not run everywhere)\n");
  int ns[GB_MAXN + 1] = {0}, nn = 0;
  for (int i = 0; i < g_nres; i++) {
    int seen = 0;
    for (int k = 0; k < nn; k++) seen |= ns[k] == g_res[i].n;
    if (!seen && nn < GB_MAXN) ns[nn++] = g_res[i].n;
  }
  printf("%-16s", "variant");
  for (int k = 0; k < nn; k++) printf(" | n=%-7d", ns[k]);
  printf("\n");
  for (int b = 0; b < 2 + GB_NV * GB_NK; b++) {
    gb_path_t ph = b < 2 ? gb_path_t{b, 0, 0} : gb_path_t{3, (b - 2) / GB_NK, k_ks[(b - 2) % GB_NK]};
    char nm[32];
    gb_pname(&ph, nm, sizeof nm);
    int any = 0;
    char line[256];
    int o = snprintf(line, sizeof line, "%-16s", nm);
    for (int k = 0; k < nn; k++) {
      double sum = 0;
      int cnt = 0, want = 0;
      for (int i = 0; i < g_nres; i++) {
        if (g_res[i].n != ns[k] || g_res[i].ph.base != 0) continue;
        want++; /* one matvec row per (shape, type, n) */
        for (int j = 0; j < g_nres; j++)
          if (g_res[j].n == ns[k] && g_res[j].shape == g_res[i].shape && g_res[j].t == g_res[i].t &&
              g_res[j].ph.base == ph.base && g_res[j].ph.v == ph.v && g_res[j].ph.ks == ph.ks)
            sum += g_res[j].us, cnt++;
      }
      if (cnt && cnt == want) o += snprintf(line + o, sizeof line - (size_t)o, " | %9.1f", sum), any = 1;
      else o += snprintf(line + o, sizeof line - (size_t)o, " | %9s", "-");
    }
    if (any) printf("%s\n", line);
  }
}

int main(int argc, char **argv) {
  int reps = 20, check = 1, base = 1, graph = 1, wired = 0, parts = 1;
  const char *types_arg = "Q4_K,Q6_K", *shape_arg = NULL, *only = NULL, *rows_arg = "1,2,4,8";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--types")) types_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--shape")) shape_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
    else if (!strcmp(argv[i], "--rows")) rows_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--check")) check = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--base")) base = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--graph")) graph = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--wired")) wired = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--parts")) parts = atoi(argv[i + 1]);
    else {
      fprintf(stderr,
              "usage: %s [--reps N] [--types Q4_K,Q5_K,Q6_K] [--rows 1,2,4,8] [--shape SUBSTR] [--only rRwWsSbB[/kK]] "
              "[--check 0|1|2] [--base 0|1] [--graph 0|1] [--wired 0|1] [--parts 1|3]\n",
              argv[0]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (parts != 1 && parts != 3) {
    fprintf(stderr, "--parts: 1 or 3\n");
    return 2;
  }
  int rows[GB_MAXN], nrows = 0;
  for (const char *c = rows_arg; *c && nrows < GB_MAXN; c = strchr(c, ',') ? strchr(c, ',') + 1 : "") {
    const int v = atoi(c);
    if (v < 1 || v > GB_MAXN) {
      fprintf(stderr, "--rows: 1..%d\n", GB_MAXN);
      return 2;
    }
    rows[nrows++] = v;
  }
  gt_type_t types[4];
  int ntypes = 0;
  {
    char list[64];
    snprintf(list, sizeof list, "%s", types_arg);
    for (char *tok = strtok(list, ","); tok && ntypes < 4; tok = strtok(NULL, ",")) {
      const int ti = dt_from_name(tok);
      if (ti != GT_TYPE_Q4_K && ti != GT_TYPE_Q5_K && ti != GT_TYPE_Q6_K) {
        fprintf(stderr, "--types: Q4_K, Q5_K, Q6_K\n");
        return 2;
      }
      types[ntypes++] = (gt_type_t)ti;
    }
  }
  /* --only: a variant name, optionally /kK */
  int only_v = -1, only_k = 0;
  if (only) {
    char nm[32];
    snprintf(nm, sizeof nm, "%s", only);
    char *sl = strchr(nm, '/');
    if (sl) *sl = '\0', only_k = atoi(sl + 2);
    for (int v = 0; v < GB_NV; v++)
      if (!strcmp(k_vars[v].name, nm)) only_v = v;
    if (only_v < 0) {
      fprintf(stderr, "--only: unknown variant %s; variants:", nm);
      for (int v = 0; v < GB_NV; v++) fprintf(stderr, " %s", k_vars[v].name);
      fprintf(stderr, "\n");
      return 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  GB_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  gb_copy_bw();

  const int64_t max_cols = 17408, max_out = 151936 + 64;
  float *hx = (float *)malloc(sizeof(float) * GB_MAXN * max_cols);
  for (size_t i = 0; i < (size_t)GB_MAXN * max_cols; i++) hx[i] = gb_rand();
  g_hx = hx;
  GB_CHECK(cudaMalloc((void **)&g_dx, sizeof(float) * GB_MAXN * max_cols));
  GB_CHECK(cudaMemcpy(g_dx, hx, sizeof(float) * GB_MAXN * max_cols, cudaMemcpyHostToDevice));
  GB_CHECK(cudaMalloc((void **)&g_dout, sizeof(float) * GB_MAXN * max_out));
  GB_CHECK(cudaMalloc(&g_scratch, kc_mmq_scratch_bytes(max_cols, GB_MAXN, 3)));
  GB_CHECK(cudaStreamCreateWithFlags(&g_st, cudaStreamNonBlocking));

  if (wired) { /* the backend's choice instead of the sweep */
    gb_wired_table(types, ntypes, rows, nrows, shape_arg, reps, graph, parts);
    check = 0;
  }

  /* 1. check on the small shapes: every variant x K split x rows 1..8 */
  if (check) {
    int runs = 0, refused = 0;
    double worst = 0;
    for (int ti = 0; ti < ntypes; ti++)
      for (size_t si = 0; si < sizeof k_chk / sizeof *k_chk; si++) {
        gb_prod_t p = gb_make(&k_chk[si], types[ti], 0);
        for (int v = 0; v < GB_NV; v++) {
          if (only_v >= 0 && v != only_v) continue;
          for (int k = 0; k < GB_NK; k++) {
            if (only_k && k_ks[k] != only_k) continue;
            for (int n = 1; n <= GB_MAXN; n++) {
              const gb_path_t ph = {3, v, k_ks[k]};
              const double e = gb_check(&ph, &p, n);
              if (e < 0) {
                refused++;
                continue;
              }
              runs++;
              if (e > worst) worst = e;
              if (!(e <= GB_TOL)) {
                char nm[32];
                gb_pname(&ph, nm, sizeof nm);
                printf("FAIL %s %s %s n=%d: normalized error %.3g > %.0e\n", k_chk[si].label, dt_name(types[ti]), nm, n,
                       e, GB_TOL);
                g_fail = 1;
              }
            }
          }
        }
        gb_free(&p);
      }
    printf("check: %d runs on odd shapes (rows 1..8), max normalized error %.3g, %d refused (shared memory / K split)\n",
           runs, worst, refused);
  }

  /* 2. timing */
  if (check != 2 && !wired) {
    printf("\n%-40s | %-4s | %-16s | %2s | %9s | %7s | %s | %s\n", "shape", "type", "variant", "n", "us", "GB/s",
           "% copy BW", "err");
    for (int ti = 0; ti < ntypes; ti++)
      for (int si = 0; si < (int)(sizeof k_time / sizeof *k_time); si++) {
        if (!gb_shape_types(si, types[ti]) || (shape_arg && !strstr(k_time[si].label, shape_arg))) continue;
        gb_prod_t p = gb_make(&k_time[si], types[ti], 1);
        for (int ni = 0; ni < nrows; ni++) {
          const int n = rows[ni];
          for (int b = 0; b < 3 + GB_NV * GB_NK; b++) {
            gb_path_t ph = b < 3 ? gb_path_t{b, 0, 0} : gb_path_t{3, (b - 3) / GB_NK, k_ks[(b - 3) % GB_NK]};
            if (b < 3 && !base) continue;
            if (b >= 3 && ((only_v >= 0 && ph.v != only_v) || (only_k && ph.ks != only_k))) continue;
            if (b >= 3 && ph.ks > p.s->cols / 256) continue;
            const double e = gb_check(&ph, &p, n);
            if (e < 0) continue; /* the variant does not fit (shared memory) */
            char nm[32];
            gb_pname(&ph, nm, sizeof nm);
            if (ph.base != 2 && !(e <= GB_TOL)) {
              printf("FAIL %s %s %s n=%d: normalized error %.3g > %.0e\n", k_time[si].label, dt_name(types[ti]), nm, n, e,
                     GB_TOL);
              g_fail = 1;
            }
            const double sec = gb_time(&ph, &p, n, reps, graph) * 1e-6;
            const double bw = gb_bytes(&p, n) / sec;
            printf("%-40s | %-4s | %-16s | %2d | %9.2f | %7.1f | %5.1f %% | %.1e\n", k_time[si].label, dt_name(types[ti]),
                   nm, n, sec * 1e6, bw / 1e9, 100.0 * bw / g_copy_bw, e);
            fflush(stdout);
            if (g_nres < GB_MAXRES) g_res[g_nres++] = gb_res_t{si, n, types[ti], ph, sec * 1e6};
          }
        }
        gb_free(&p);
      }
    gb_summary();
  }
  printf(g_fail ? "VALIDATION FAILED\n" : "all checks passed\n");
  free(hx);
  cudaFree(g_dx);
  cudaFree(g_dout);
  cudaFree(g_scratch);
  cudaStreamDestroy(g_st);
  return g_fail ? 1 : 0;
}
