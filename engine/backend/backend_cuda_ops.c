/* engine/backend/backend_cuda_ops.c — the eager launch of each op of the CUDA backend: checks the shapes on
 * the host, records a problem in be->err (ops do nothing after it) and launches its kernel
 * (kernels/, one op per .cu) on the backend stream; and the scratch the launches share. Called
 * directly outside decode steps, and by run_rec (backend_cuda_graph.c) when a recorded step runs
 * eagerly or is captured. */
#include "engine/backend/backend_cuda_internal.h"

#include "engine/backend/comm.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/add.cuh"
#include "kernels/attention.cuh"
#include "kernels/attn_decode.cuh"
#include "kernels/attn_flash.cuh"
#include "kernels/attn_prep.cuh"
#include "kernels/conv1d.cuh"
#include "kernels/dequant.cuh"
#include "kernels/embed.cuh"
#include "kernels/gather_out.cuh"
#include "kernels/gdn_chunked.cuh"
#include "kernels/gdn_conv_qkv.cuh"
#include "kernels/gdn_gates.cuh"
#include "kernels/gdn_scan.cuh"
#include "kernels/gemv_pipe.cuh"
#include "kernels/kv_store.cuh"
#include "kernels/l2norm.cuh"
#include "kernels/logits_mask.cuh"
#include "kernels/matvec.cuh"
#include "kernels/matvec_mma.cuh"
#include "kernels/mmq.cuh"
#include "kernels/mul_sigmoid.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rmsnorm_gated.cuh"
#include "kernels/rope.cuh"
#include "kernels/split_bf16.cuh"
#include "kernels/swiglu.cuh"

/* floats of fp32 scratch a prefill GEMM tile may take (128 MiB) */
#define CU_TILE_FLOATS ((size_t)32 << 20)
/* BF16 weights with at least this many rows of x: tensor-core GEMM on x split into two bf16
 * halves (x = hi + lo), which keeps ~2^-17 relative accuracy on x and reads W once */
#define CU_BF16_GEMM_MIN_ROWS 4

/* ---- scratch ---- */

/* Returns scratch of at least n floats (grown after the stream drains), or NULL (error set).
 * Growing it bumps buf_gen, which invalidates the captured graphs (they hold the old buffer). */
float *cu__scratch(be_t *be, size_t n) {
  be_cuda_t *c = CU_BE(be);
  if (n <= c->scratch_cap) return c->scratch;
  KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream));
  cudaFree(c->scratch);
  c->scratch = NULL;
  c->scratch_cap = 0;
  size_t want = n + n / 4;
  c->buf_gen++;
  if (KC_CUDA(CU_ERR(be), cudaMalloc((void **)&c->scratch, want * sizeof(float)))) return NULL;
  c->scratch_cap = want;
  return c->scratch;
}

/* ---- the all-reduce of a rank: its communicator queues it on the stream (comm.h bind_stream) ---- */
void cu__all_reduce(be_t *be, float *x, size_t n) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be) || !c->comm) return; /* a failed rank aborts the communicator: nobody waits */
  /* inside a capture that every rank agreed on (cu__finish_step), no per-call rendezvous */
  const int rc = c->ar_captured && c->comm->ops->all_reduce_captured
                     ? c->comm->ops->all_reduce_captured(c->comm, be->rank, x, n)
                     : c->comm->ops->all_reduce(c->comm, be->rank, x, n);
  if (!rc) return;
  const char *why = c->comm->ops->error ? c->comm->ops->error(c->comm, be->rank) : "";
  cu_fail(be, rc, "all_reduce",
          rc == GT_ECANCELLED ? "another rank failed (communicator aborted)" : *why ? why : "the communicator failed");
}

/* ---- dense ops ---- */

static int dense_ok(const be_weight_t *w) {
  return w && w->data && w->cols % 8 == 0 &&
         (w->type == GT_TYPE_F32 || w->type == GT_TYPE_F16 || w->type == GT_TYPE_BF16 || w->type == GT_TYPE_Q8_0 ||
          w->type == GT_TYPE_Q4_K || w->type == GT_TYPE_Q5_K || w->type == GT_TYPE_Q6_K);
}

void cu__embed(be_t *be, const be_weight_t *w, float *out) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be)) return;
  if (!dense_ok(w)) {
    cu_fail(be, GT_EUNSUPPORTED, "embed", "weight type or width not supported");
    return;
  }
  KC_CUDA(CU_ERR(be), kc_embed(c->stream, c->kb, (int)w->type, w->data, w->rows, w->cols, w->row_bytes, out));
}

void cu__gather_out(be_t *be, const float *x, float *out, int d) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be)) return;
  KC_CUDA(CU_ERR(be), kc_gather_out(c->stream, c->kb, x, out, d));
}

/* Scratch floats the bf16 split GEMM needs for w and rows, or 0 when w does not take it. */
size_t cu__bf16_gemm_floats(const be_weight_t *w, int rows) {
  if (w->type != GT_TYPE_BF16 || rows < CU_BF16_GEMM_MIN_ROWS || w->cols > (1 << 30) || w->rows > (1 << 30)) return 0;
  const size_t c2 = ((size_t)2 * rows * w->rows + 63) / 64 * 64, xs = ((size_t)rows * w->cols + 63) / 64 * 64;
  const size_t n = c2 + xs; /* xs: 2 rows * cols bf16 = rows * cols floats */
  return n <= 4 * CU_TILE_FLOATS ? n : 0;
}

/* ---- activations and prefill precision (be_cuda_set_activations / _prefill_precision) ---- */

static int g_act_bf16 = -1;     /* -1: GANTRY_ACTIVATIONS not read yet */
static int g_prefill_fast = -1; /* -1: follows the activations unless GANTRY_PREFILL_PRECISION says */
static int g_prefill_env = -2;  /* GANTRY_PREFILL_PRECISION: -2 not read yet, -1 unset, 0 exact, 1 fast */

int be_cuda_set_activations(const char *name) {
  if (!name) g_act_bf16 = -1;
  else if (!strcmp(name, "bf16")) g_act_bf16 = 1;
  else if (!strcmp(name, "fp32")) g_act_bf16 = 0;
  else return -1;
  return 0;
}

static int act_bf16(void) {
  if (g_act_bf16 < 0) {
    const char *e = getenv("GANTRY_ACTIVATIONS");
    g_act_bf16 = !strcmp(e && (!strcmp(e, "bf16") || !strcmp(e, "fp32")) ? e : BE_CUDA_ACTIVATIONS_DEFAULT, "bf16");
  }
  return g_act_bf16;
}

const char *be_cuda_activations(void) { return act_bf16() ? "bf16" : "fp32"; }

/* The calling thread's backend is running a decode batch (one token per sequence): set by
 * cu_set_batch, read by the products of the same step. Thread-local because each rank of a
 * group runs its steps (set_batch, ops, their replay) on its own worker thread. */
__thread int cu__t_decode_batch;

/* x parts of a product of `rows` rows: 1 (bf16 x) with bf16 activations, else 3 for decode
 * batches of any size up to BE_GRAPH_MAX_SEQS (fp32-exact x: GPU decode keeps CPU greedy past
 * 64 sequences too), else kc_mmq_parts (3 up to KC_MMQ_EXACT_ROWS, the prefill setting above). */
static int x_parts(int rows) {
  return act_bf16() ? 1 : cu__t_decode_batch && rows <= BE_GRAPH_MAX_SEQS ? 3 : kc_mmq_parts(rows);
}

int be_cuda_set_prefill_precision(const char *name) {
  if (!name) g_prefill_fast = -1;
  else if (!strcmp(name, "exact")) g_prefill_fast = 0;
  else if (!strcmp(name, "fast")) g_prefill_fast = 1;
  else return -1;
  return 0;
}

/* called for every product: the environment is read once */
static int prefill_fast(void) {
  if (g_prefill_fast >= 0) return g_prefill_fast;
  if (g_prefill_env == -2) {
    const char *e = getenv("GANTRY_PREFILL_PRECISION");
    g_prefill_env = e && !strcmp(e, "fast") ? 1 : e && !strcmp(e, "exact") ? 0 : -1;
  }
  return g_prefill_env >= 0 ? g_prefill_env : act_bf16();
}

const char *be_cuda_prefill_precision(void) { return prefill_fast() ? "fast" : "exact"; }

/* bf16 elements of one dequantized weight tile of the fast prefill product (128 MiB) */
#define CU_DEQ_TILE_ELEMS ((size_t)64 << 20)

/* Rows of one tile: all of w when it fits CU_DEQ_TILE_ELEMS, else tiles of equal size rounded
 * up to a multiple of CU_DEQ_TILE_ALIGN rows (down when that would pass the limit). Every tile
 * but the last then starts at a row offset that keeps the GEMM's output pointer 512-byte aligned:
 * with odd tile sizes (13107 rows of qwen35-27b's 5120-column swiglu weights, 3855 of its
 * 17408-column down weight) cuBLAS fell back to kernels 4-8x slower per FLOP (issue 24's cliff). */
#define CU_DEQ_TILE_ALIGN 128
static int64_t deq_tile_rows(const be_weight_t *w) {
  const int64_t tmax = (int64_t)(CU_DEQ_TILE_ELEMS / (size_t)w->cols);
  if (tmax >= w->rows) return w->rows;
  if (tmax < CU_DEQ_TILE_ALIGN) return tmax < 1 ? 1 : tmax;
  const int64_t n_tiles = (w->rows + tmax - 1) / tmax;
  int64_t t = ((w->rows + n_tiles - 1) / n_tiles + CU_DEQ_TILE_ALIGN - 1) / CU_DEQ_TILE_ALIGN * CU_DEQ_TILE_ALIGN;
  if (t > tmax) t = tmax / CU_DEQ_TILE_ALIGN * CU_DEQ_TILE_ALIGN;
  return t;
}

/* x parts of the fast prefill product: 1 (bf16 x) when x_parts says 1, else 2 (hi + lo) */
static int deq_parts(int rows) { return x_parts(rows) == 1 ? 1 : 2; }

/* Scratch floats the fast prefill product needs for w and rows, or 0 when w does not take it:
 * precision "fast", a K-quant or Q8_0 weight, more than KC_MMQ_EXACT_ROWS rows (prefill; decode
 * batches keep the exact paths). Layout: xs [2][rows][cols] bf16 (hi, lo), then one weight tile
 * [deq_tile_rows][cols] bf16. */
size_t cu__deq_gemm_floats(const be_weight_t *w, int rows) {
  if (!prefill_fast() || rows <= KC_MMQ_EXACT_ROWS || !w || !w->data || w->cols % 8 || w->cols > (1 << 30) ||
      w->rows > (1 << 30))
    return 0;
  if (w->type != GT_TYPE_Q4_K && w->type != GT_TYPE_Q5_K && w->type != GT_TYPE_Q6_K && w->type != GT_TYPE_Q8_0) return 0;
  const size_t xs = ((size_t)rows * (size_t)w->cols + 63) / 64 * 64; /* 2 x rows x cols bf16 */
  const size_t wt = ((size_t)deq_tile_rows(w) * (size_t)w->cols / 2 + 63) / 64 * 64;
  return xs + wt <= 8 * CU_TILE_FLOATS ? xs + wt : 0;
}

/* out[rows, n_out] = x[rows, k] · Wᵀ for cu__deq_gemm_floats' weights: x split into bf16 parts
 * (kc_split_bf16: hi, and lo = bf16(x - hi) with 2 parts), W dequantized tile by tile to bf16
 * (kc_dequant_rows_bf16: each weight rounded to nearest even, 2^-9 relative) and one cuBLAS bf16
 * GEMM per tile and part with fp32 accumulation, the lo part added onto the hi part's result
 * (beta = 1). Column-major view per tile: outᵀ (nt x rows, ld n_out) = W_tile (k x nt, op T)ᵀ · xsᵀ. */
static void deq_gemm(be_t *be, const be_weight_t *w, const float *x, float *out, int rows) {
  be_cuda_t *c = CU_BE(be);
  const int parts = deq_parts(rows);
  const int64_t n_out = w->rows, k = w->cols, tile = deq_tile_rows(w);
  float *sc = cu__scratch(be, cu__deq_gemm_floats(w, rows));
  if (!sc) return;
  uint16_t *xs = (uint16_t *)sc; /* bf16 [2][rows][k]: hi, lo */
  void *wt = sc + ((size_t)rows * (size_t)k + 63) / 64 * 64;
  if (KC_CUDA(CU_ERR(be), kc_split_bf16(c->stream, x, rows, k, parts, xs))) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t r0 = 0; r0 < n_out; r0 += tile) {
    const int64_t nt = n_out - r0 < tile ? n_out - r0 : tile;
    if (KC_CUDA(CU_ERR(be), kc_dequant_rows_bf16(c->stream, (int)w->type, w->data, w->row_bytes, r0, nt, k, wt))) return;
    for (int p = 0; p < parts; p++)
      if (KC_CUBLAS(CU_ERR(be), cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nt, rows, (int)k, &one, wt,
                                            CUDA_R_16BF, (int)k, xs + (size_t)p * rows * (size_t)k, CUDA_R_16BF,
                                            (int)k, p ? &one : &zero, out + r0, CUDA_R_32F, (int)n_out,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
        return;
  }
}

/* Scratch floats of the tensor-core K-quant path (kernels/mmq.cuh) for w and rows when mmq can run
 * it (type, alignment, rows >= KC_MMQ_MIN_ROWS, not GANTRY_MMQ=0, not the fast prefill product's), else 0. */
static size_t mmq_floats_any(const be_weight_t *w, int rows) {
  if (!w || !w->data || rows < KC_MMQ_MIN_ROWS || !kc_mmq_ok((int)w->type, w->data, w->row_bytes, w->cols) ||
      cu__deq_gemm_floats(w, rows))
    return 0;
  return kc_mmq_scratch_bytes(w->cols, rows, x_parts(rows)) / sizeof(float);
}

/* mmq_floats_any for a weight that starts an mmq launch (also large enough: kc_mmq_size_ok), else 0. */
size_t cu__mmq_floats(const be_weight_t *w, int rows) {
  return w && kc_mmq_size_ok(w->rows, w->cols, rows) ? mmq_floats_any(w, rows) : 0;
}

static int takes_mmq(const be_weight_t *w, const float *x, int rows) {
  return ((uintptr_t)x & 15) == 0 && cu__mmq_floats(w, rows) != 0;
}

/* n_seg products of x on the mmq path (segs as kc_mmq_launch; wup: the swiglu up weight). With x in
 * one part at 3..KC_MVW_MAX_ROWS rows the ring kernels take them where they can (kc_mvm_rows_launch:
 * the same rounding of x, no prep launch; kernels/README.md "One part on the ring", "The wide
 * product"). */
static void mmq_run(be_t *be, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup, const be_weight_t *w0,
                    const float *x, int rows) {
  be_cuda_t *c = CU_BE(be);
  const int parts = x_parts(rows);
  if (parts == 1 && rows <= KC_MVW_MAX_ROWS) {
    const int rc = kc_mvm_rows_launch(c->stream, type, n_seg, segs, wup, w0->cols, x, rows);
    if (rc >= 0) {
      KC_CUDA(CU_ERR(be), rc);
      return;
    }
  }
  float *sc = cu__scratch(be, cu__mmq_floats(w0, rows));
  if (!sc || KC_CUDA(CU_ERR(be), kc_mmq_prep(c->stream, type, x, w0->cols, rows, parts, sc))) return;
  KC_CUDA(CU_ERR(be), kc_mmq_launch(c->stream, type, n_seg, segs, wup, w0->cols, sc, rows, parts));
}

/* ---- the pipelined decode product (kernels/gemv_pipe.cuh) at 1..KC_GPIPE_MAX_ROWS rows ---- */

/* x parts of the pipelined product: those of the path it replaces, so each product keeps its op
 * bound: matvec_mma's three (fp32-exact) at 1..2 rows in both activation modes, mmq's x_parts at
 * 3..8 rows (1 = x in bf16 under bf16 activations: a third of the mma work of three parts). */
static int gpipe_parts(int rows) { return rows >= KC_MMQ_MIN_ROWS && x_parts(rows) == 1 ? 1 : 3; }

/* 1 when w and x fit the path at rows (kc_gpipe_ok, x 16-byte aligned); the choice is
 * kc_gpipe_want's (GANTRY_GPIPE, its per-type table) */
static int gpipe_fits(const be_weight_t *w, const float *x, int rows) {
  return w && w->data && ((uintptr_t)x & 15) == 0 &&
         kc_gpipe_ok((int)w->type, w->data, w->row_bytes, w->cols, rows);
}

int cu__gpipe_takes(const be_weight_t *w, size_t wbytes, int rows) {
  return w && w->data && kc_gpipe_ok((int)w->type, w->data, w->row_bytes, w->cols, rows) &&
         kc_gpipe_want((int)w->type, w->cols, wbytes, rows);
}

static void gpipe_run(be_t *be, int type, int n_seg, const kc_mv_seg_t *segs, const void *wup, int64_t cols,
                      const float *x, int rows) {
  KC_CUDA(CU_ERR(be), kc_gpipe_launch(CU_BE(be)->stream, type, n_seg, segs, wup, cols, x, rows, gpipe_parts(rows)));
}

void cu__matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be) || rows <= 0) return;
  if (!dense_ok(w)) {
    cu_fail(be, GT_EUNSUPPORTED, "matmul", "weight type or width not supported");
    return;
  }
  if (cu__deq_gemm_floats(w, rows)) {
    deq_gemm(be, w, x, out, rows);
    return;
  }
  if (gpipe_fits(w, x, rows) && kc_gpipe_want((int)w->type, w->cols, w->row_bytes * (size_t)w->rows, rows)) {
    const kc_mv_seg_t seg = {w->data, out, w->rows, w->row_bytes};
    gpipe_run(be, (int)w->type, 1, &seg, NULL, w->cols, x, rows);
    return;
  }
  if (takes_mmq(w, x, rows)) {
    const kc_mv_seg_t seg = {w->data, out, w->rows, w->row_bytes};
    mmq_run(be, (int)w->type, 1, &seg, NULL, w, x, rows);
    return;
  }
  const size_t gemm_floats = cu__bf16_gemm_floats(w, rows);
  if (gemm_floats) {
    /* c2[2 rows, n_out] = [hi; lo] · Wᵀ (bf16 tensor cores, fp32 accumulation), out = c2[:rows] + c2[rows:] */
    float *sc = cu__scratch(be, gemm_floats);
    if (!sc) return;
    const int64_t n_out = w->rows, k = w->cols;
    float *c2 = sc;
    void *xs = sc + ((size_t)2 * rows * n_out + 63) / 64 * 64;
    const float one = 1.0f, zero = 0.0f;
    /* one x part (x_parts: bf16 activations, or GANTRY_PREFILL_XPARTS=1 at prefill rows): x in bf16, one GEMM into out */
    const int one_part = x_parts(rows) == 1;
    if (KC_CUDA(CU_ERR(be), kc_split_bf16(c->stream, x, rows, k, one_part ? 1 : 2, xs)) ||
        KC_CUBLAS(CU_ERR(be), cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, one_part ? rows : 2 * rows, (int)k,
                                        &one, w->data, CUDA_R_16BF, (int)k, xs, CUDA_R_16BF, (int)k, &zero,
                                        one_part ? out : c2, CUDA_R_32F, (int)n_out, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT)))
      return;
    if (!one_part) KC_CUDA(CU_ERR(be), kc_join_halves(c->stream, c2, out, rows, n_out));
    return;
  }
  if (rows <= KC_MATVEC_MAX_ROWS && ((uintptr_t)x & 15) == 0) {
    KC_CUDA(CU_ERR(be), kc_matvec(c->stream, (int)w->type, w->data, w->rows, w->cols, w->row_bytes, x, out, rows));
    return;
  }
  /* out[rows, n_out] (row-major) = x[rows, k] · W_tileᵀ, per tile of W rows, column-major view:
   * out_tileᵀ (nt x rows, ld n_out) = W_tile (k x nt, op T) ᵀ · xᵀ (k x rows) */
  const int64_t n_out = w->rows, k = w->cols;
  int64_t tile = w->type == GT_TYPE_F32 ? n_out : (int64_t)(CU_TILE_FLOATS / (size_t)k);
  if (tile < 1) tile = 1;
  if (tile > n_out) tile = n_out;
  float *tmp = w->type == GT_TYPE_F32 ? NULL : cu__scratch(be, (size_t)tile * k);
  if (w->type != GT_TYPE_F32 && !tmp) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t r0 = 0; r0 < n_out; r0 += tile) {
    const int64_t nt = n_out - r0 < tile ? n_out - r0 : tile;
    const float *a;
    if (w->type == GT_TYPE_F32) {
      a = (const float *)w->data + r0 * k;
    } else {
      if (KC_CUDA(CU_ERR(be), kc_dequant_rows(c->stream, (int)w->type, w->data, w->row_bytes, r0, nt, k, tmp))) return;
      a = tmp;
    }
    if (KC_CUBLAS(CU_ERR(be), cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nt, rows, (int)k, &one, a, (int)k, x,
                                       (int)k, &zero, out + r0, (int)n_out)))
      return;
  }
}

/* 1 when cu__matmul takes the matvec path for w and rows of x. */
static int takes_matvec(const be_weight_t *w, const float *x, int rows) {
  return dense_ok(w) && rows > 0 && !takes_mmq(w, x, rows) && rows <= KC_MATVEC_MAX_ROWS && ((uintptr_t)x & 15) == 0 && !cu__bf16_gemm_floats(w, rows);
}

/* n products of one x: runs of consecutive weights of one type on the pipelined product (when
 * kc_gpipe_want takes the run's weight bytes), on mmq or on the matvec path go to one launch
 * (kc_gpipe_launch / kc_mmq_launch / kc_matvec_multi; matvec: each output equals kc_matvec's);
 * any other weight is cu__matmul. */
void cu__matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[],
                     int rows) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be) || rows <= 0) return;
  if (n < 1 || n > BE_MATMUL_MULTI_MAX) {
    cu_fail(be, GT_EINVAL, "matmul_multi", "weight count out of [1, BE_MATMUL_MULTI_MAX]");
    return;
  }
  for (int i = 0; i < n; i++)
    if (!w[i] || w[i]->cols != w[0]->cols) {
      cu_fail(be, GT_EINVAL, "matmul_multi", "weights differ in cols");
      return;
    }
  for (int i = 0; i < n && !cu_failed(be);) {
    if (gpipe_fits(w[i], x, rows)) {
      kc_mv_seg_t segs[BE_MATMUL_MULTI_MAX];
      size_t bytes = 0;
      int ns = 0;
      for (int j = i; j < n && ns < KC_MATVEC_MAX_SEGS && w[j]->type == w[i]->type && gpipe_fits(w[j], x, rows); j++) {
        segs[ns++] = (kc_mv_seg_t){.w = w[j]->data, .out = out[j], .n_out = w[j]->rows, .row_bytes = w[j]->row_bytes};
        bytes += w[j]->row_bytes * (size_t)w[j]->rows;
      }
      if (kc_gpipe_want((int)w[i]->type, w[i]->cols, bytes, rows)) {
        gpipe_run(be, (int)w[i]->type, ns, segs, NULL, w[i]->cols, x, rows);
        i += ns;
        continue;
      }
    }
    if (takes_mmq(w[i], x, rows)) { /* one launch for a run of one type (scratch: the largest cols is the same) */
      kc_mv_seg_t segs[BE_MATMUL_MULTI_MAX];
      int ns = 0;
      for (int j = i; j < n && ns < KC_MATVEC_MAX_SEGS && w[j]->type == w[i]->type && mmq_floats_any(w[j], rows); j++)
        segs[ns++] = (kc_mv_seg_t){.w = w[j]->data, .out = out[j], .n_out = w[j]->rows, .row_bytes = w[j]->row_bytes};
      mmq_run(be, (int)w[i]->type, ns, segs, NULL, w[i], x, rows);
      i += ns;
      continue;
    }
    if (!takes_matvec(w[i], x, rows)) {
      cu__matmul(be, w[i], x, out[i], rows);
      i++;
      continue;
    }
    kc_mv_seg_t segs[BE_MATMUL_MULTI_MAX];
    int ns = 0;
    for (int j = i; j < n && ns < KC_MATVEC_MAX_SEGS && w[j]->type == w[i]->type && takes_matvec(w[j], x, rows); j++)
      segs[ns++] = (kc_mv_seg_t){.w = w[j]->data, .out = out[j], .n_out = w[j]->rows, .row_bytes = w[j]->row_bytes};
    if (ns == 1)
      KC_CUDA(CU_ERR(be), kc_matvec(c->stream, (int)w[i]->type, w[i]->data, w[i]->rows, w[i]->cols, w[i]->row_bytes, x,
                                 out[i], rows));
    else
      KC_CUDA(CU_ERR(be), kc_matvec_multi(c->stream, (int)w[i]->type, ns, segs, w[i]->cols, x, rows));
    i += ns;
  }
}

/* gate = silu(x·wgᵀ) * (x·wuᵀ): one launch when both weights have one type and take the
 * pipelined product (kc_gpipe_want of both weights' bytes), mmq or the matvec path, else two
 * cu__matmul (gate, up) and kc_swiglu. */
void cu__ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate,
                   float *up, int rows) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be) || rows <= 0) return;
  if (!wg || !wu || wg->rows != wu->rows || wg->cols != wu->cols) {
    cu_fail(be, GT_EINVAL, "ffn_swiglu", "gate and up weights differ in shape");
    return;
  }
  if (wg->type == wu->type && wg->row_bytes == wu->row_bytes && gpipe_fits(wg, x, rows) && gpipe_fits(wu, x, rows) &&
      kc_gpipe_want((int)wg->type, wg->cols, 2 * wg->row_bytes * (size_t)wg->rows, rows)) {
    const kc_mv_seg_t seg = {wg->data, gate, wg->rows, wg->row_bytes};
    gpipe_run(be, (int)wg->type, 1, &seg, wu->data, wg->cols, x, rows);
    return;
  }
  if (wg->type == wu->type && wg->row_bytes == wu->row_bytes && takes_mmq(wg, x, rows) && takes_mmq(wu, x, rows)) {
    const kc_mv_seg_t seg = {wg->data, gate, wg->rows, wg->row_bytes};
    mmq_run(be, (int)wg->type, 1, &seg, wu->data, wg, x, rows);
    return;
  }
  if (wg->type == wu->type && wg->row_bytes == wu->row_bytes && takes_matvec(wg, x, rows) && takes_matvec(wu, x, rows)) {
    KC_CUDA(CU_ERR(be), kc_matvec_swiglu(c->stream, (int)wg->type, wg->data, wu->data, wg->rows, wg->cols, wg->row_bytes,
                                      x, gate, rows));
    return;
  }
  cu__matmul(be, wg, x, gate, rows);
  cu__matmul(be, wu, x, up, rows);
  cu__swiglu(be, gate, up, gate, (size_t)rows * (size_t)wg->rows);
}

static int norm_weight_ok(be_t *be, const be_weight_t *w, int d, const char *op) {
  if (!w || !w->data || w->type != GT_TYPE_F32 || w->rows * w->cols != d) {
    cu_fail(be, GT_EINVAL, op, "weight must be F32 of the row size");
    return 0;
  }
  return 1;
}

void cu__rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps) {
  if (cu_failed(be) || !norm_weight_ok(be, w, d, "rmsnorm")) return;
  KC_CUDA(CU_ERR(be), kc_rmsnorm(CU_BE(be)->stream, x, w->data, out, rows, d, eps));
}

void cu__add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows, int d,
                    float eps) {
  if (cu_failed(be) || !norm_weight_ok(be, w, d, "add_rmsnorm")) return;
  KC_CUDA(CU_ERR(be), kc_add_rmsnorm(CU_BE(be)->stream, x, delta, w->data, out, rows, d, eps));
}

void cu__add(be_t *be, float *y, const float *x, size_t n) {
  if (cu_failed(be)) return;
  KC_CUDA(CU_ERR(be), kc_add(CU_BE(be)->stream, y, x, n));
}

void cu__logits_mask(be_t *be, float *x, const uint32_t *mask, const uint32_t *rmap, int rows, int n_vocab) {
  if (cu_failed(be)) return;
  if (rows > 65535) { /* grid.y */
    cu_fail(be, GT_EINVAL, "logits_mask", "more than 65535 rows");
    return;
  }
  KC_CUDA(CU_ERR(be), kc_logits_mask(CU_BE(be)->stream, x, mask, rmap, rows, n_vocab));
}

/* The inverse frequencies of (theta, n_rot, bf16), computed on the host exactly as the CPU
 * backend does, uploaded once; NULL on failure (error set). Not callable while capturing. */
const double *cu__rope_table(be_t *be, float theta, int n_rot, int bf16) {
  be_cuda_t *c = CU_BE(be);
  int k = 0;
  for (; k < CU_ROPE_TABLES && c->rope_tab[k].d; k++)
    if (c->rope_tab[k].theta == theta && c->rope_tab[k].n_rot == n_rot && c->rope_tab[k].bf16 == bf16)
      return c->rope_tab[k].d;
  if (k == CU_ROPE_TABLES) { /* full (tests): drop them all; graphs holding them are invalidated */
    KC_CUDA(CU_ERR(be), cudaStreamSynchronize(c->stream));
    for (k = 0; k < CU_ROPE_TABLES; k++) {
      cudaFree(c->rope_tab[k].d);
      c->rope_tab[k].d = NULL;
    }
    c->buf_gen++;
    k = 0;
  }
  const int half = n_rot / 2;
  double *h = malloc(sizeof(double) * (size_t)half);
  if (!h) {
    cu_fail(be, GT_ENOMEM, "rope", "frequency table");
    return NULL;
  }
  for (int i = 0; i < half; i++)
    h[i] = bf16 ? (double)dt_bf16_to_f32(dt_f32_to_bf16((float)(1.0 / pow((double)theta, 2.0 * i / n_rot))))
                : pow((double)theta, -2.0 * i / n_rot);
  double *d = NULL;
  if (KC_CUDA(CU_ERR(be), cudaMalloc((void **)&d, sizeof(double) * (size_t)half)) ||
      KC_CUDA(CU_ERR(be), cudaMemcpy(d, h, sizeof(double) * (size_t)half, cudaMemcpyHostToDevice))) {
    free(h);
    cudaFree(d);
    return NULL;
  }
  free(h);
  c->rope_tab[k].theta = theta;
  c->rope_tab[k].n_rot = n_rot;
  c->rope_tab[k].bf16 = bf16;
  c->rope_tab[k].d = d;
  return d;
}

void cu__rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta, int bf16) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be)) return;
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2) {
    cu_fail(be, GT_EINVAL, "rope", "n_rot must be even and <= head_dim");
    return;
  }
  const double *tab = cu__rope_table(be, theta, n_rot, bf16);
  if (!tab) return;
  KC_CUDA(CU_ERR(be), kc_rope(c->stream, c->kb, x, n_head, head_dim, n_rot, tab, bf16));
}

void cu__swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n) {
  if (cu_failed(be)) return;
  KC_CUDA(CU_ERR(be), kc_swiglu(CU_BE(be)->stream, gate, up, out, n));
}

void cu__mul_sigmoid(be_t *be, float *x, const float *g, size_t n) {
  if (cu_failed(be)) return;
  KC_CUDA(CU_ERR(be), kc_mul_sigmoid(CU_BE(be)->stream, x, g, n));
}

void cu__copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols) {
  if (cu_failed(be) || rows <= 0 || cols <= 0) return;
  if (dst_ld == (size_t)cols && src_ld == (size_t)cols) { /* contiguous: one plain copy */
    KC_CUDA(CU_ERR(be), cudaMemcpyAsync(dst, src, (size_t)rows * cols * sizeof(float), cudaMemcpyDeviceToDevice,
                                     CU_BE(be)->stream));
    return;
  }
  KC_CUDA(CU_ERR(be), cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float), (size_t)cols * sizeof(float),
                                     (size_t)rows, cudaMemcpyDeviceToDevice, CU_BE(be)->stream));
}

/* ---- attention ---- */

void cu__kv_store(be_t *be, int layer, const float *k, const float *v) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be)) return;
  if (layer < 0 || layer >= c->kv_layers) {
    cu_fail(be, GT_EINVAL, "kv_store", "layer out of range");
    return;
  }
  KC_CUDA(CU_ERR(be), kc_kv_store(c->stream, c->kb, kv_of(c, layer), k, v));
}

void cu__attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                  float scale) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be)) return;
  if (layer < 0 || layer >= c->kv_layers || n_kv_head <= 0 || n_kv_head * head_dim != c->kv_dim || n_head % n_kv_head) {
    cu_fail(be, GT_EINVAL, "attention", "layer or head shape does not match the KV pool");
    return;
  }
  if (head_dim % 32 || head_dim > KC_ATTN_MAX_HEAD_DIM) {
    cu_fail(be, GT_EUNSUPPORTED, "attention", "head_dim must be a multiple of 32 up to 256");
    return;
  }
  if (c->b.n_tok <= 0) return;
  if (c->kv_bf16) {
    /* sequences bringing >= fa_min tokens: the tensor-core flash kernel; the rest (decode) the
     * split kernel, whose split count follows the graph's fixed max_blocks (cu__attn_splits) */
    const int fa_min = cu__attn_fa_min(c, head_dim);
    int mt = 1;
    const int n_tiles =
        fa_min < INT_MAX ? kc_attn_flash_plan(c->b.seq_ntok, c->b.n_seq, fa_min, head_dim, n_head, &mt) : 0;
    if (n_tiles > 0 &&
        KC_CUDA(CU_ERR(be), kc_attn_flash(c->stream, c->kb, kv_of(c, layer), q, out, n_head, n_kv_head, head_dim, scale,
                                       fa_min, n_tiles, mt)))
      return;
    int rest = 0; /* tokens of sequences the flash kernel leaves to the split kernel */
    for (int i = 0; i < c->b.n_seq; i++) rest += c->b.seq_ntok[i] < fa_min ? c->b.seq_ntok[i] : 0;
    if (rest == 0) return;
    const int n_split = cu__attn_splits(c, n_head, n_kv_head, head_dim);
    float *part = cu__scratch(be, kc_attn_decode_part_floats(c->b.n_tok, n_head, head_dim, n_split));
    if (part)
      KC_CUDA(CU_ERR(be), kc_attn_decode(c->stream, c->kb, kv_of(c, layer), q, out, n_head, n_kv_head, head_dim, scale,
                                      n_split, fa_min, part));
    return;
  }
  /* fp32 pools (--kv-dtype fp32): a split count independent of the context length for decode,
   * so one graph serves every step */
  const int n_split = kc_attention_splits(c->b.n_tok, n_head, c->graph_batch ? 1 << 30 : c->max_ctx);
  float *part = cu__scratch(be, kc_attention_part_floats(c->b.n_tok, n_head, head_dim, n_split));
  if (!part) return;
  KC_CUDA(CU_ERR(be), kc_attention(c->stream, c->kb, kv_of(c, layer), q, out, n_head, n_kv_head, head_dim, scale, n_split,
                                part));
}

int cu__attn_fa_min(const be_cuda_t *c, int head_dim) {
  return c->kv_bf16 && c->fa_min > 0 && kc_attn_flash_ok(head_dim) ? c->fa_min : INT_MAX;
}

int cu__attn_splits(const be_cuda_t *c, int n_head, int n_kv_head, int head_dim) {
  /* graph shapes: the longest context the block table can hold, fixed per graph */
  const int max_ctx = c->graph_batch ? c->b.max_blocks * c->kv_block_tokens : c->max_ctx;
  return kc_attn_decode_splits(c->b.n_tok, n_head, n_kv_head, head_dim, max_ctx);
}

/* rmsnorm q, rmsnorm k, rope q, rope k, kv_store in one kc_attn_qk_prep launch (the unfused
 * kernels when a head row is too wide for it); bf16: the rope_freq_bf16 it was recorded with. */
void cu__attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *qn,
                     const be_weight_t *kn, int n_head, int n_kv_head, int hd, int n_rot, float theta, float eps,
                     int bf16) {
  be_cuda_t *c = CU_BE(be);
  static const char op[] = "attn_qk_prep";
  if (cu_failed(be)) return;
  if (layer < 0 || layer >= c->kv_layers || n_head <= 0 || n_kv_head <= 0 || hd <= 0 ||
      (int64_t)n_kv_head * hd != c->kv_dim || n_rot <= 0 || n_rot > hd || n_rot % 2) {
    cu_fail(be, GT_EINVAL, op, "layer, head shape or n_rot does not match the KV pool");
    return;
  }
  if (!norm_weight_ok(be, qn, hd, op) || !norm_weight_ok(be, kn, hd, op)) return;
  const double *tab = cu__rope_table(be, theta, n_rot, bf16);
  if (!tab || c->b.n_tok <= 0) return;
  const int n = c->b.n_tok;
  if (hd <= KC_ATTN_PREP_MAX_HD && n_head + n_kv_head <= 65535) {
    KC_CUDA(CU_ERR(be), kc_attn_qk_prep(c->stream, c->kb, kv_of(c, layer), q, k, v, qn->data, kn->data, n_head, n_kv_head,
                                     hd, n_rot, tab, bf16, eps));
    return;
  }
  if (KC_CUDA(CU_ERR(be), kc_rmsnorm(c->stream, q, qn->data, q, n * n_head, hd, eps)) ||
      KC_CUDA(CU_ERR(be), kc_rmsnorm(c->stream, k, kn->data, k, n * n_kv_head, hd, eps)) ||
      KC_CUDA(CU_ERR(be), kc_rope(c->stream, c->kb, q, n_head, hd, n_rot, tab, bf16)) ||
      KC_CUDA(CU_ERR(be), kc_rope(c->stream, c->kb, k, n_kv_head, hd, n_rot, tab, bf16)))
    return;
  KC_CUDA(CU_ERR(be), kc_kv_store(c->stream, c->kb, kv_of(c, layer), k, v));
}

/* ---- Gated DeltaNet ---- */

static int check_state(be_t *be, const char *op, int layer) {
  be_cuda_t *c = CU_BE(be);
  if (!c->conv || !c->ssm || c->st_slots <= 0) return cu_fail(be, GT_EINVAL, op, "recurrent state not initialised (state_init)");
  if (layer < 0 || layer >= c->st_layers) return cu_fail(be, GT_EINVAL, op, "GDN layer index out of range");
  if (c->b.n_seq > 0 && !c->b.state_slot) return cu_fail(be, GT_EINVAL, op, "batch has no state_slot for a hybrid model");
  return GT_OK;
}

static int is_f32_vec(const be_weight_t *w, int64_t n) {
  return w && w->data && w->type == GT_TYPE_F32 && w->rows * w->cols == n;
}

/* The conv weight F32 [C, K] and the layer's conv state ((K-1) * C per slot) of a GDN conv op;
 * 0 after recording the error. */
static int conv_args_ok(be_t *be, const char *op, int layer, const be_weight_t *w, int C, int K) {
  if (!w || !w->data || w->type != GT_TYPE_F32 || w->rows != C || w->cols != K) {
    cu_fail(be, GT_EINVAL, op, "weight must be F32 [C, K]");
    return 0;
  }
  if (check_state(be, op, layer)) return 0;
  if (CU_BE(be)->conv_dim != (size_t)(K - 1) * (size_t)C) {
    cu_fail(be, GT_EINVAL, op, "conv state size != (K-1) * C");
    return 0;
  }
  return 1;
}

void cu__conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K) {
  be_cuda_t *c = CU_BE(be);
  static const char op[] = "conv1d_silu";
  if (cu_failed(be)) return;
  if (C <= 0 || K < 2 || K > KC_CONV_MAX_K) {
    cu_fail(be, GT_EINVAL, op, "bad channel count or kernel size");
    return;
  }
  if (!conv_args_ok(be, op, layer, w, C, K)) return;
  KC_CUDA(CU_ERR(be), kc_conv1d_silu(c->stream, c->kb, conv_state(c, layer, 0), c->st_slots, x, out, w->data, C, K));
}

void cu__l2norm(be_t *be, float *x, int rows, int d, float eps, float scale) {
  if (cu_failed(be)) return;
  if (rows < 0 || d <= 0) {
    cu_fail(be, GT_EINVAL, "l2norm", "bad shape");
    return;
  }
  KC_CUDA(CU_ERR(be), kc_l2norm(CU_BE(be)->stream, x, rows, d, eps, scale));
}

size_t cu__gdn_conv_qkv_scratch(int n_tok, int n_seq, int n_k, int d_k, int n_v, int d_v) {
  if (d_k <= KC_GDN_CONV_QKV_MAX_HD && d_v <= KC_GDN_CONV_QKV_MAX_HD && n_seq <= 65535) return 0;
  return (size_t)n_tok * (2 * (size_t)n_k * d_k + (size_t)n_v * d_v);
}

/* conv1d_silu, 3 copy2d, 2 l2norm in one kc_gdn_conv_qkv launch (the unfused kernels through a
 * [n_tok, C] scratch when a head is too wide for its block). */
void cu__gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *q, float *k, float *v,
                      int n_k, int d_k, int n_v, int d_v, float eps, float q_scale) {
  be_cuda_t *c = CU_BE(be);
  static const char op[] = "gdn_conv_qkv";
  if (cu_failed(be)) return;
  if (n_k <= 0 || d_k <= 0 || n_v <= 0 || d_v <= 0 || (int64_t)n_k * d_k > INT_MAX / 4 ||
      (int64_t)n_v * d_v > INT_MAX / 4 || K < 2 || K > KC_CONV_MAX_K) {
    cu_fail(be, GT_EINVAL, op, "bad head counts, dims or kernel size");
    return;
  }
  const int kd = n_k * d_k, vd = n_v * d_v, C = 2 * kd + vd, n = c->b.n_tok;
  if (!conv_args_ok(be, op, layer, w, C, K)) return;
  const size_t need = cu__gdn_conv_qkv_scratch(n, c->b.n_seq, n_k, d_k, n_v, d_v);
  if (!need) {
    KC_CUDA(CU_ERR(be), kc_gdn_conv_qkv(c->stream, c->kb, conv_state(c, layer, 0), c->st_slots, x, w->data, K, q, k, v,
                                     n_k, d_k, n_v, d_v, eps, q_scale));
    return;
  }
  float *conv = cu__scratch(be, need); /* [n_tok, C] */
  if (!conv) return;
  if (KC_CUDA(CU_ERR(be), kc_conv1d_silu(c->stream, c->kb, conv_state(c, layer, 0), c->st_slots, x, conv, w->data, C, K)))
    return;
  cu__copy2d(be, q, kd, conv, C, n, kd);
  cu__copy2d(be, k, kd, conv + kd, C, n, kd);
  cu__copy2d(be, v, vd, conv + 2 * kd, C, n, vd);
  if (cu_failed(be) || n <= 0) return;
  if (KC_CUDA(CU_ERR(be), kc_l2norm(c->stream, q, n * n_k, d_k, eps, q_scale))) return;
  KC_CUDA(CU_ERR(be), kc_l2norm(c->stream, k, n * n_k, d_k, eps, 1.0f));
}

void cu__gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                  const be_weight_t *dt_bias, float *g, float *beta, int n_v) {
  be_cuda_t *c = CU_BE(be);
  if (cu_failed(be)) return;
  if (n_v <= 0 || !is_f32_vec(a, n_v) || !is_f32_vec(dt_bias, n_v)) {
    cu_fail(be, GT_EINVAL, "gdn_gates", "a and dt_bias must be F32 vectors of n_v");
    return;
  }
  KC_CUDA(CU_ERR(be), kc_gdn_gates(c->stream, alpha, beta_in, a->data, dt_bias->data, g, beta, c->b.n_tok, n_v));
}

void cu__gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v, const float *g,
                 const float *beta, float *out, int n_k, int n_v, int d_k, int d_v) {
  be_cuda_t *c = CU_BE(be);
  static const char op[] = "gdn_scan";
  if (cu_failed(be)) return;
  if (n_k <= 0 || n_v <= 0 || d_k <= 0 || d_v <= 0 || d_v > 1024 || d_k > 4096 || n_v % n_k != 0) {
    cu_fail(be, GT_EINVAL, op, "bad head counts or dims (n_v must be a multiple of n_k)");
    return;
  }
  if (check_state(be, op, layer)) return;
  if (c->ssm_dim != (size_t)n_v * d_k * d_v) {
    cu_fail(be, GT_EINVAL, op, "ssm state size != n_v * d_k * d_v");
    return;
  }
  /* sequences bringing >= c->gdn_chunk_min tokens take the chunked kernel (kernels/gdn_chunked.cu),
   * the others the sequential one (decode batches never reach the threshold: their graphs hold
   * only the latter, which needs no scratch) */
  int n_long = 0;
  /* position slots (state_pos_slot) only come from the per-token kernels: sequences carrying them
   * (<= BE_GRAPH_MAX_Q tokens, set_batch) stay below the chunked / long kernels' thresholds */
  const int chunk_min = c->kb.state_pos_slot && c->gdn_chunk_min <= BE_GRAPH_MAX_Q ? BE_GRAPH_MAX_Q + 1 : c->gdn_chunk_min;
  for (int s = 0; s < c->b.n_seq; s++) n_long += c->b.seq_ntok[s] >= chunk_min;
  float *ssm = ssm_state(c, layer, 0);
  int skip_from = INT_MAX;
  if (n_long > 0 && kc_gdn_chunked_ok(d_k, d_v)) {
    skip_from = chunk_min;
    if (KC_CUDA(CU_ERR(be), kc_gdn_chunked(c->stream, c->kb, ssm, c->st_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v,
                                        chunk_min)))
      return;
    if (n_long == c->b.n_seq) return;
  }
  KC_CUDA(CU_ERR(be), kc_gdn_scan(c->stream, c->kb, ssm, c->st_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v,
                               skip_from));
}

void cu__rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out, int rows,
                      int d, float eps) {
  if (cu_failed(be)) return;
  if (rows < 0 || d <= 0 || !is_f32_vec(w, d)) {
    cu_fail(be, GT_EINVAL, "rmsnorm_gated", "weight must be F32 [d]");
    return;
  }
  KC_CUDA(CU_ERR(be), kc_rmsnorm_gated(CU_BE(be)->stream, x, w->data, z, out, rows, d, eps));
}
