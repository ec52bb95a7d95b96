/* engine/backend_cuda.c — the CUDA backend: memory, batch, caches and the launch of each op
 * (kernels/, one op per .cu) on one stream of one GPU.
 *
 * Activations, the paged KV pools and the recurrent states are fp32 in device memory; weights
 * stay in their GGUF type. Products with BF16 weights and >= 4 rows run a bf16 tensor-core GEMM
 * on x split into two bf16 halves (~2^-17 relative on x, W read once); other products of <= 32
 * rows run a matvec that reads each weight row once for all rows; larger ones dequantize row
 * tiles of W to fp32 scratch and run a cuBLAS SGEMM (no TF32). Decode steps replay CUDA graphs
 * (see "decode steps as CUDA graphs" below). Errors: shape problems are caught on
 * the host before launch; bad ids / positions / slots are flagged by the kernels in a device
 * word read at sync; CUDA and cuBLAS failures are recorded with KC_CUDA / KC_CUBLAS. The first
 * error of a step is sticky (be->err) and returned by sync / download; ops do nothing after it. */
#include "engine/backend_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/add.cuh"
#include "kernels/attention.cuh"
#include "kernels/common.cuh"
#include "kernels/conv1d.cuh"
#include "kernels/dequant.cuh"
#include "kernels/embed.cuh"
#include "kernels/gather_out.cuh"
#include "kernels/gdn_gates.cuh"
#include "kernels/gdn_scan.cuh"
#include "kernels/kv_store.cuh"
#include "kernels/l2norm.cuh"
#include "kernels/matvec.cuh"
#include "kernels/mul_sigmoid.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rmsnorm_gated.cuh"
#include "kernels/rope.cuh"
#include "kernels/split_bf16.cuh"
#include "kernels/swiglu.cuh"

/* floats of fp32 scratch a prefill GEMM tile may take (128 MiB) */
#define CU_TILE_FLOATS ((size_t)32 << 20)
#define CU_ROPE_TABLES 8
#define CU_BLAS_WS_BYTES ((size_t)32 << 20)
/* BF16 weights with at least this many rows of x: tensor-core GEMM on x split into two bf16
 * halves (x = hi + lo), which keeps ~2^-17 relative accuracy on x and reads W once */
#define CU_BF16_GEMM_MIN_ROWS 4

struct op_rec;
typedef struct {
  cudaGraphExec_t exec;
  struct op_rec *rec; /* the records it was captured from */
  int n_rec;
  kc_batch_t kb;
  uint64_t buf_gen;
} cu_graph_t;

typedef struct {
  be_t base;
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  int *d_eflag;            /* device error flags (KC_EFLAG_*) */
  /* batch: host copies (validated) and one device buffer of int32 arrays */
  be_batch_t b;
  int32_t *h_ints;         /* packed host arrays, h_cap ints */
  size_t h_cap;
  int32_t *d_ints;         /* device copy, d_cap ints */
  size_t d_cap;
  kc_batch_t kb;           /* device view of the batch */
  int max_ctx;             /* longest context of the batch (max pos + 1) */
  /* paged KV: pool [layer][K|V][n_blocks * block_tokens * kv_dim] */
  int kv_layers, kv_blocks, kv_block_tokens, kv_dim;
  float *kv_pool;
  /* recurrent state: conv [layer][slot][conv_dim], ssm [layer][slot][ssm_dim] */
  int st_layers, st_slots;
  size_t conv_dim, ssm_dim;
  float *conv, *ssm;
  /* fp32 scratch for GEMM tiles and attention partials */
  float *scratch;
  size_t scratch_cap;
  /* decode graphs (see "decode steps as CUDA graphs") */
  int graphs_on;           /* GANTRY_CUDA_GRAPHS=0 turns them off */
  int recording;           /* the current step is a decode step being recorded */
  int decode_batch;        /* the current batch is one token per sequence */
  struct op_rec *rec;      /* [n_rec] recorded ops of the current step */
  int n_rec, cap_rec;
  uint64_t buf_gen;        /* bumped whenever scratch or the batch buffer moves */
  cu_graph_t graphs[KC_MATVEC_MAX_ROWS + 1]; /* by batch size */
  long graph_steps, eager_steps, captures;
  uint64_t captured_mask;
  /* RoPE inverse-frequency tables (device, double [n_rot/2]), made once per configuration */
  struct {
    float theta;
    int n_rot, bf16;
    double *d;
  } rope_tab[CU_ROPE_TABLES];
  /* cuBLAS workspace (set explicitly so GEMMs can be captured into graphs) */
  void *blas_ws;
} be_cuda_t;

#define CU(be) ((be_cuda_t *)(be))
#define ERR(be) (&(be)->err)

static int fail(be_t *be, int code, const char *op, const char *what) {
  if (be->err.code == GT_OK) gt_err_set(&be->err, code, "cuda %s: %s", op, what);
  return code;
}
static int failed(be_t *be) { return be->err.code != GT_OK; }
static void flush_eager(be_t *be);
static void finish_step(be_t *be);

/* ---- memory ---- */

static void *cu_alloc(be_t *be, size_t bytes) {
  void *p = NULL;
  flush_eager(be);
  if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  if (KC_CUDA(ERR(be), cudaMemsetAsync(p, 0, bytes ? bytes : 256, CU(be)->stream)) ||
      KC_CUDA(ERR(be), cudaStreamSynchronize(CU(be)->stream))) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void cu_free(be_t *be, void *p) {
  if (!p) return;
  flush_eager(be);
  cudaStreamSynchronize(CU(be)->stream);
  KC_CUDA(ERR(be), cudaFree(p));
}

static int cu_upload(be_t *be, void *dst, const void *src, size_t bytes) {
  be_cuda_t *c = CU(be);
  flush_eager(be);
  if (KC_CUDA(ERR(be), cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream)) ||
      KC_CUDA(ERR(be), cudaStreamSynchronize(c->stream)))
    return GT_EINTERNAL;
  return GT_OK;
}

/* Waits for the stream, turns device error flags into be->err; returns and clears the code. */
static int cu_sync(be_t *be) {
  be_cuda_t *c = CU(be);
  finish_step(be);
  KC_CUDA(ERR(be), cudaStreamSynchronize(c->stream));
  KC_CUDA(ERR(be), cudaGetLastError());
  int flags = 0;
  if (c->d_eflag && cudaMemcpyAsync(&flags, c->d_eflag, sizeof flags, cudaMemcpyDeviceToHost, c->stream) == cudaSuccess &&
      cudaStreamSynchronize(c->stream) == cudaSuccess && flags) {
    const char *what = (flags & KC_EFLAG_TOKEN)      ? "embed: token id out of vocabulary"
                       : (flags & KC_EFLAG_OUT_TOK)  ? "gather_out: token index out of batch"
                       : (flags & KC_EFLAG_KV_SLOT)  ? "kv_store/attention: position outside the sequence's blocks"
                                                     : "gdn: state slot out of range";
    fail(be, GT_EINVAL, "kernel", what);
    cudaMemsetAsync(c->d_eflag, 0, sizeof(int), c->stream);
  }
  int code = be->err.code;
  be->err.code = GT_OK; /* the message stays readable in be->err.msg */
  return code;
}

static int cu_download(be_t *be, void *dst, const void *src, size_t bytes) {
  finish_step(be);
  KC_CUDA(ERR(be), cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, CU(be)->stream));
  return cu_sync(be);
}

/* Returns scratch of at least n floats (grown after the stream drains), or NULL (error set). */
static float *scratch(be_t *be, size_t n) {
  be_cuda_t *c = CU(be);
  if (n <= c->scratch_cap) return c->scratch;
  KC_CUDA(ERR(be), cudaStreamSynchronize(c->stream));
  cudaFree(c->scratch);
  c->scratch = NULL;
  c->scratch_cap = 0;
  size_t want = n + n / 4;
  c->buf_gen++;
  if (KC_CUDA(ERR(be), cudaMalloc((void **)&c->scratch, want * sizeof(float)))) return NULL;
  c->scratch_cap = want;
  return c->scratch;
}

/* ---- caches ---- */

static int cu_kv_init(be_t *be, int n_layers, int n_blocks, int block_tokens, int kv_dim) {
  be_cuda_t *c = CU(be);
  if (n_layers < 0 || n_blocks <= 0 || block_tokens <= 0 || kv_dim <= 0)
    return gt_err_set(ERR(be), GT_EINVAL, "cuda kv_init: bad sizes");
  flush_eager(be);
  c->buf_gen++;
  cu_free(be, c->kv_pool);
  c->kv_pool = NULL;
  c->kv_layers = 0;
  size_t n = (size_t)n_layers * 2 * n_blocks * block_tokens * kv_dim;
  c->kv_pool = cu_alloc(be, n * sizeof(float));
  if (!c->kv_pool) return gt_err_set(ERR(be), GT_ENOMEM, "cuda kv_init: %zu bytes of KV pool", n * sizeof(float));
  c->kv_layers = n_layers;
  c->kv_blocks = n_blocks;
  c->kv_block_tokens = block_tokens;
  c->kv_dim = kv_dim;
  return GT_OK;
}

static kc_kv_t kv_of(be_cuda_t *c, int layer) {
  size_t per = (size_t)c->kv_blocks * c->kv_block_tokens * c->kv_dim;
  kc_kv_t kv = {.k = c->kv_pool + (size_t)layer * 2 * per, .v = c->kv_pool + ((size_t)layer * 2 + 1) * per,
                .n_blocks = c->kv_blocks, .block_tokens = c->kv_block_tokens, .kv_dim = c->kv_dim};
  return kv;
}

static int cu_state_init(be_t *be, int n_layers, int n_slots, size_t conv_dim, size_t ssm_dim) {
  be_cuda_t *c = CU(be);
  flush_eager(be);
  c->buf_gen++;
  cu_free(be, c->conv);
  cu_free(be, c->ssm);
  c->conv = c->ssm = NULL;
  c->st_layers = c->st_slots = 0;
  c->conv = cu_alloc(be, ((size_t)n_layers * n_slots * conv_dim + 1) * sizeof(float));
  c->ssm = cu_alloc(be, ((size_t)n_layers * n_slots * ssm_dim + 1) * sizeof(float));
  if (!c->conv || !c->ssm) return gt_err_set(ERR(be), GT_ENOMEM, "cuda state_init: recurrent state");
  c->st_layers = n_layers;
  c->st_slots = n_slots;
  c->conv_dim = conv_dim;
  c->ssm_dim = ssm_dim;
  return GT_OK;
}

static float *conv_state(be_cuda_t *c, int layer, int slot) {
  return c->conv + ((size_t)layer * c->st_slots + slot) * c->conv_dim;
}
static float *ssm_state(be_cuda_t *c, int layer, int slot) {
  return c->ssm + ((size_t)layer * c->st_slots + slot) * c->ssm_dim;
}

static int cu_state_copy(be_t *be, int dst, int src) {
  be_cuda_t *c = CU(be);
  if (dst < 0 || src < 0 || dst >= c->st_slots || src >= c->st_slots)
    return gt_err_set(ERR(be), GT_EINVAL, "cuda state_copy %d <- %d of %d slots", dst, src, c->st_slots);
  flush_eager(be);
  for (int l = 0; l < c->st_layers; l++) {
    if (KC_CUDA(ERR(be), cudaMemcpyAsync(conv_state(c, l, dst), conv_state(c, l, src), c->conv_dim * sizeof(float),
                                         cudaMemcpyDeviceToDevice, c->stream)) ||
        KC_CUDA(ERR(be), cudaMemcpyAsync(ssm_state(c, l, dst), ssm_state(c, l, src), c->ssm_dim * sizeof(float),
                                         cudaMemcpyDeviceToDevice, c->stream)))
      return GT_EINTERNAL;
  }
  return GT_OK;
}

static int cu_state_zero(be_t *be, int slot) {
  be_cuda_t *c = CU(be);
  if (slot < 0 || slot >= c->st_slots)
    return gt_err_set(ERR(be), GT_EINVAL, "cuda state_zero %d of %d slots", slot, c->st_slots);
  flush_eager(be);
  for (int l = 0; l < c->st_layers; l++) {
    if (KC_CUDA(ERR(be), cudaMemsetAsync(conv_state(c, l, slot), 0, c->conv_dim * sizeof(float), c->stream)) ||
        KC_CUDA(ERR(be), cudaMemsetAsync(ssm_state(c, l, slot), 0, c->ssm_dim * sizeof(float), c->stream)))
      return GT_EINTERNAL;
  }
  return GT_OK;
}

/* ---- batch ---- */

static int cu_set_batch(be_t *be, const be_batch_t *b) {
  be_cuda_t *c = CU(be);
  flush_eager(be); /* a step that ended without download / sync */
  c->decode_batch = 0;
  if (b->n_tok < 0 || b->n_seq < 0 || b->n_out < 0 || b->max_blocks < 0)
    return gt_err_set(ERR(be), GT_EINVAL, "cuda backend: negative batch sizes");
  const int nt = b->n_tok, ns = b->n_seq, no = b->n_out;
  const size_t n_bt = (size_t)ns * b->max_blocks;
  const size_t need = 3 * (size_t)nt + 3 * (size_t)ns + n_bt + (size_t)no + 1;
  if (need > c->h_cap) {
    int32_t *p = realloc(c->h_ints, need * sizeof(int32_t));
    if (!p) return gt_err_set(ERR(be), GT_ENOMEM, "cuda backend: batch of %d tokens", nt);
    c->h_ints = p;
    c->h_cap = need;
  }
  int32_t *tok = c->h_ints, *pos = tok + nt, *sot = pos + nt, *sf = sot + nt, *sn = sf + ns, *ss = sn + ns,
          *bt = ss + ns, *ot = bt + n_bt;
  if (nt) {
    memcpy(tok, b->tok, sizeof(int32_t) * nt);
    memcpy(pos, b->pos, sizeof(int32_t) * nt);
    memset(sot, 0, sizeof(int32_t) * nt);
  }
  if (ns) {
    memcpy(sf, b->seq_first, sizeof(int32_t) * ns);
    memcpy(sn, b->seq_ntok, sizeof(int32_t) * ns);
    if (b->state_slot) memcpy(ss, b->state_slot, sizeof(int32_t) * ns);
    else memset(ss, 0, sizeof(int32_t) * ns);
  }
  if (n_bt) memcpy(bt, b->block_table, sizeof(int32_t) * n_bt);
  if (no) memcpy(ot, b->out_tok, sizeof(int32_t) * no);
  for (int s = 0; s < ns; s++) {
    if (sf[s] < 0 || sn[s] < 0 || sf[s] + sn[s] > nt)
      return gt_err_set(ERR(be), GT_EINVAL, "cuda backend: sequence %d spans tokens [%d, %d) of %d", s, sf[s],
                        sf[s] + sn[s], nt);
    for (int t = 0; t < sn[s]; t++) sot[sf[s] + t] = s;
  }
  c->max_ctx = 0;
  for (int t = 0; t < nt; t++)
    if (pos[t] + 1 > c->max_ctx) c->max_ctx = pos[t] + 1;
  if (need > c->d_cap) {
    KC_CUDA(ERR(be), cudaStreamSynchronize(c->stream));
    cudaFree(c->d_ints);
    c->buf_gen++;
    c->d_ints = NULL;
    c->d_cap = 0;
    size_t want = need * 2;
    if (KC_CUDA(ERR(be), cudaMalloc((void **)&c->d_ints, want * sizeof(int32_t)))) return GT_ENOMEM;
    c->d_cap = want;
  }
  /* pageable source: the call returns once the bytes are staged, so h_ints may be reused */
  if (KC_CUDA(ERR(be), cudaMemcpyAsync(c->d_ints, c->h_ints, need * sizeof(int32_t), cudaMemcpyHostToDevice, c->stream)))
    return GT_EINTERNAL;
  const int32_t *d = c->d_ints;
  c->kb = (kc_batch_t){.n_tok = nt, .n_seq = ns, .n_out = no, .max_blocks = b->max_blocks,
                       .tok = d, .pos = d + nt, .seq_of_tok = d + 2 * nt, .seq_first = d + 3 * nt,
                       .seq_ntok = d + 3 * nt + ns, .state_slot = d + 3 * nt + 2 * ns,
                       .block_table = d + 3 * nt + 3 * ns, .out_tok = d + 3 * nt + 3 * ns + n_bt,
                       .eflag = c->d_eflag};
  c->b = *b;
  c->b.state_slot = b->state_slot ? ss : NULL;

  /* a sequence starting at position 0 starts from zero recurrent state */
  if (b->state_slot && c->st_slots > 0) {
    for (int s = 0; s < ns; s++) {
      if (ss[s] < 0 || ss[s] >= c->st_slots)
        return gt_err_set(ERR(be), GT_EINVAL, "cuda backend: state slot %d out of [0, %d)", ss[s], c->st_slots);
      if (sn[s] > 0 && pos[sf[s]] == 0) {
        int rc = cu_state_zero(be, ss[s]);
        if (rc) return rc;
      }
    }
  }
  /* decode step: one token per sequence -> recorded for a graph of its batch size */
  int decode = nt > 0 && nt == ns && nt <= KC_MATVEC_MAX_ROWS && no <= nt;
  for (int s = 0; s < ns && decode; s++) decode = sn[s] == 1;
  c->decode_batch = decode;
  if (decode && c->graphs_on) {
    c->recording = 1;
    c->n_rec = 0;
  }
  return GT_OK;
}

/* ---- dense ops ---- */

static int dense_ok(const be_weight_t *w) {
  return w && w->data && w->cols % 8 == 0 &&
         (w->type == GT_TYPE_F32 || w->type == GT_TYPE_F16 || w->type == GT_TYPE_BF16 || w->type == GT_TYPE_Q8_0 ||
          w->type == GT_TYPE_Q4_K || w->type == GT_TYPE_Q5_K || w->type == GT_TYPE_Q6_K);
}

static void do_embed(be_t *be, const be_weight_t *w, float *out) {
  be_cuda_t *c = CU(be);
  if (failed(be)) return;
  if (!dense_ok(w)) {
    fail(be, GT_EUNSUPPORTED, "embed", "weight type or width not supported");
    return;
  }
  KC_CUDA(ERR(be), kc_embed(c->stream, c->kb, (int)w->type, w->data, w->rows, w->cols, w->row_bytes, out));
}

static void do_gather_out(be_t *be, const float *x, float *out, int d) {
  be_cuda_t *c = CU(be);
  if (failed(be)) return;
  KC_CUDA(ERR(be), kc_gather_out(c->stream, c->kb, x, out, d));
}

/* Scratch floats the bf16 split GEMM needs for w and rows, or 0 when w does not take it. */
static size_t bf16_gemm_floats(const be_weight_t *w, int rows) {
  if (w->type != GT_TYPE_BF16 || rows < CU_BF16_GEMM_MIN_ROWS || w->cols > (1 << 30) || w->rows > (1 << 30)) return 0;
  const size_t c2 = ((size_t)2 * rows * w->rows + 63) / 64 * 64, xs = ((size_t)rows * w->cols + 63) / 64 * 64;
  const size_t n = c2 + xs; /* xs: 2 rows * cols bf16 = rows * cols floats */
  return n <= 4 * CU_TILE_FLOATS ? n : 0;
}

static void do_matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows) {
  be_cuda_t *c = CU(be);
  if (failed(be) || rows <= 0) return;
  if (!dense_ok(w)) {
    fail(be, GT_EUNSUPPORTED, "matmul", "weight type or width not supported");
    return;
  }
  const size_t gemm_floats = bf16_gemm_floats(w, rows);
  if (gemm_floats) {
    /* c2[2 rows, n_out] = [hi; lo] · Wᵀ (bf16 tensor cores, fp32 accumulation), out = c2[:rows] + c2[rows:] */
    float *sc = scratch(be, gemm_floats);
    if (!sc) return;
    const int64_t n_out = w->rows, k = w->cols;
    float *c2 = sc;
    void *xs = sc + ((size_t)2 * rows * n_out + 63) / 64 * 64;
    const float one = 1.0f, zero = 0.0f;
    if (KC_CUDA(ERR(be), kc_split_bf16(c->stream, x, rows, k, xs)) ||
        KC_CUBLAS(ERR(be), cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, 2 * rows, (int)k, &one, w->data,
                                        CUDA_R_16BF, (int)k, xs, CUDA_R_16BF, (int)k, &zero, c2, CUDA_R_32F, (int)n_out,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
      return;
    KC_CUDA(ERR(be), kc_join_halves(c->stream, c2, out, rows, n_out));
    return;
  }
  if (rows <= KC_MATVEC_MAX_ROWS && ((uintptr_t)x & 15) == 0) {
    KC_CUDA(ERR(be), kc_matvec(c->stream, (int)w->type, w->data, w->rows, w->cols, w->row_bytes, x, out, rows));
    return;
  }
  /* out[rows, n_out] (row-major) = x[rows, k] · W_tileᵀ, per tile of W rows, column-major view:
   * out_tileᵀ (nt x rows, ld n_out) = W_tile (k x nt, op T) ᵀ · xᵀ (k x rows) */
  const int64_t n_out = w->rows, k = w->cols;
  int64_t tile = w->type == GT_TYPE_F32 ? n_out : (int64_t)(CU_TILE_FLOATS / (size_t)k);
  if (tile < 1) tile = 1;
  if (tile > n_out) tile = n_out;
  float *tmp = w->type == GT_TYPE_F32 ? NULL : scratch(be, (size_t)tile * k);
  if (w->type != GT_TYPE_F32 && !tmp) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t r0 = 0; r0 < n_out; r0 += tile) {
    const int64_t nt = n_out - r0 < tile ? n_out - r0 : tile;
    const float *a;
    if (w->type == GT_TYPE_F32) {
      a = (const float *)w->data + r0 * k;
    } else {
      if (KC_CUDA(ERR(be), kc_dequant_rows(c->stream, (int)w->type, w->data, w->row_bytes, r0, nt, k, tmp))) return;
      a = tmp;
    }
    if (KC_CUBLAS(ERR(be), cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nt, rows, (int)k, &one, a, (int)k, x,
                                       (int)k, &zero, out + r0, (int)n_out)))
      return;
  }
}

static int norm_weight_ok(be_t *be, const be_weight_t *w, int d, const char *op) {
  if (!w || !w->data || w->type != GT_TYPE_F32 || w->rows * w->cols != d) {
    fail(be, GT_EINVAL, op, "weight must be F32 of the row size");
    return 0;
  }
  return 1;
}

static void do_rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps) {
  if (failed(be) || !norm_weight_ok(be, w, d, "rmsnorm")) return;
  KC_CUDA(ERR(be), kc_rmsnorm(CU(be)->stream, x, w->data, out, rows, d, eps));
}

static void do_add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows, int d,
                           float eps) {
  if (failed(be) || !norm_weight_ok(be, w, d, "add_rmsnorm")) return;
  KC_CUDA(ERR(be), kc_add_rmsnorm(CU(be)->stream, x, delta, w->data, out, rows, d, eps));
}

static void do_add(be_t *be, float *y, const float *x, size_t n) {
  if (failed(be)) return;
  KC_CUDA(ERR(be), kc_add(CU(be)->stream, y, x, n));
}

/* The inverse frequencies of (theta, n_rot, bf16), computed on the host exactly as the CPU
 * backend does, uploaded once; NULL on failure (error set). Not callable while capturing. */
static const double *rope_table(be_t *be, float theta, int n_rot, int bf16) {
  be_cuda_t *c = CU(be);
  int k = 0;
  for (; k < CU_ROPE_TABLES && c->rope_tab[k].d; k++)
    if (c->rope_tab[k].theta == theta && c->rope_tab[k].n_rot == n_rot && c->rope_tab[k].bf16 == bf16)
      return c->rope_tab[k].d;
  if (k == CU_ROPE_TABLES) { /* full (tests): drop them all; graphs holding them are invalidated */
    KC_CUDA(ERR(be), cudaStreamSynchronize(c->stream));
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
    fail(be, GT_ENOMEM, "rope", "frequency table");
    return NULL;
  }
  for (int i = 0; i < half; i++)
    h[i] = bf16 ? (double)dt_bf16_to_f32(dt_f32_to_bf16((float)(1.0 / pow((double)theta, 2.0 * i / n_rot))))
                : pow((double)theta, -2.0 * i / n_rot);
  double *d = NULL;
  if (KC_CUDA(ERR(be), cudaMalloc((void **)&d, sizeof(double) * (size_t)half)) ||
      KC_CUDA(ERR(be), cudaMemcpy(d, h, sizeof(double) * (size_t)half, cudaMemcpyHostToDevice))) {
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

static void do_rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta) {
  be_cuda_t *c = CU(be);
  if (failed(be)) return;
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2) {
    fail(be, GT_EINVAL, "rope", "n_rot must be even and <= head_dim");
    return;
  }
  const int bf16 = be->rope_freq_bf16 != 0;
  const double *tab = rope_table(be, theta, n_rot, bf16);
  if (!tab) return;
  KC_CUDA(ERR(be), kc_rope(c->stream, c->kb, x, n_head, head_dim, n_rot, tab, bf16));
}

static void do_swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n) {
  if (failed(be)) return;
  KC_CUDA(ERR(be), kc_swiglu(CU(be)->stream, gate, up, out, n));
}

static void do_mul_sigmoid(be_t *be, float *x, const float *g, size_t n) {
  if (failed(be)) return;
  KC_CUDA(ERR(be), kc_mul_sigmoid(CU(be)->stream, x, g, n));
}

static void do_copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols) {
  if (failed(be) || rows <= 0 || cols <= 0) return;
  if (dst_ld == (size_t)cols && src_ld == (size_t)cols) { /* contiguous: one plain copy */
    KC_CUDA(ERR(be), cudaMemcpyAsync(dst, src, (size_t)rows * cols * sizeof(float), cudaMemcpyDeviceToDevice,
                                     CU(be)->stream));
    return;
  }
  KC_CUDA(ERR(be), cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float), (size_t)cols * sizeof(float),
                                     (size_t)rows, cudaMemcpyDeviceToDevice, CU(be)->stream));
}

/* ---- attention ---- */

static void do_kv_store(be_t *be, int layer, const float *k, const float *v) {
  be_cuda_t *c = CU(be);
  if (failed(be)) return;
  if (layer < 0 || layer >= c->kv_layers) {
    fail(be, GT_EINVAL, "kv_store", "layer out of range");
    return;
  }
  KC_CUDA(ERR(be), kc_kv_store(c->stream, c->kb, kv_of(c, layer), k, v));
}

static void do_attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                         float scale) {
  be_cuda_t *c = CU(be);
  if (failed(be)) return;
  if (layer < 0 || layer >= c->kv_layers || n_kv_head <= 0 || n_kv_head * head_dim != c->kv_dim || n_head % n_kv_head) {
    fail(be, GT_EINVAL, "attention", "layer or head shape does not match the KV pool");
    return;
  }
  if (head_dim % 32 || head_dim > KC_ATTN_MAX_HEAD_DIM) {
    fail(be, GT_EUNSUPPORTED, "attention", "head_dim must be a multiple of 32 up to 256");
    return;
  }
  if (c->b.n_tok <= 0) return;
  /* decode: a split count independent of the context length, so one graph serves every step */
  const int n_split = kc_attention_splits(c->b.n_tok, n_head, c->decode_batch ? 1 << 30 : c->max_ctx);
  float *part = scratch(be, kc_attention_part_floats(c->b.n_tok, n_head, head_dim, n_split));
  if (!part) return;
  KC_CUDA(ERR(be), kc_attention(c->stream, c->kb, kv_of(c, layer), q, out, n_head, n_kv_head, head_dim, scale, n_split,
                                part));
}

/* ---- Gated DeltaNet ---- */

static int check_state(be_t *be, const char *op, int layer) {
  be_cuda_t *c = CU(be);
  if (!c->conv || !c->ssm || c->st_slots <= 0) return fail(be, GT_EINVAL, op, "recurrent state not initialised (state_init)");
  if (layer < 0 || layer >= c->st_layers) return fail(be, GT_EINVAL, op, "GDN layer index out of range");
  if (c->b.n_seq > 0 && !c->b.state_slot) return fail(be, GT_EINVAL, op, "batch has no state_slot for a hybrid model");
  return GT_OK;
}

static int is_f32_vec(const be_weight_t *w, int64_t n) {
  return w && w->data && w->type == GT_TYPE_F32 && w->rows * w->cols == n;
}

static void do_conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K) {
  be_cuda_t *c = CU(be);
  static const char op[] = "conv1d_silu";
  if (failed(be)) return;
  if (C <= 0 || K < 2 || K > KC_CONV_MAX_K) {
    fail(be, GT_EINVAL, op, "bad channel count or kernel size");
    return;
  }
  if (!w || !w->data || w->type != GT_TYPE_F32 || w->rows != C || w->cols != K) {
    fail(be, GT_EINVAL, op, "weight must be F32 [C, K]");
    return;
  }
  if (check_state(be, op, layer)) return;
  if (c->conv_dim != (size_t)(K - 1) * (size_t)C) {
    fail(be, GT_EINVAL, op, "conv state size != (K-1) * C");
    return;
  }
  KC_CUDA(ERR(be), kc_conv1d_silu(c->stream, c->kb, conv_state(c, layer, 0), c->st_slots, x, out, w->data, C, K));
}

static void do_l2norm(be_t *be, float *x, int rows, int d, float eps, float scale) {
  if (failed(be)) return;
  if (rows < 0 || d <= 0) {
    fail(be, GT_EINVAL, "l2norm", "bad shape");
    return;
  }
  KC_CUDA(ERR(be), kc_l2norm(CU(be)->stream, x, rows, d, eps, scale));
}

static void do_gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                         const be_weight_t *dt_bias, float *g, float *beta, int n_v) {
  be_cuda_t *c = CU(be);
  if (failed(be)) return;
  if (n_v <= 0 || !is_f32_vec(a, n_v) || !is_f32_vec(dt_bias, n_v)) {
    fail(be, GT_EINVAL, "gdn_gates", "a and dt_bias must be F32 vectors of n_v");
    return;
  }
  KC_CUDA(ERR(be), kc_gdn_gates(c->stream, alpha, beta_in, a->data, dt_bias->data, g, beta, c->b.n_tok, n_v));
}

static void do_gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, float *out, int n_k, int n_v, int d_k, int d_v) {
  be_cuda_t *c = CU(be);
  static const char op[] = "gdn_scan";
  if (failed(be)) return;
  if (n_k <= 0 || n_v <= 0 || d_k <= 0 || d_v <= 0 || d_v > 1024 || d_k > 4096 || n_v % n_k != 0) {
    fail(be, GT_EINVAL, op, "bad head counts or dims (n_v must be a multiple of n_k)");
    return;
  }
  if (check_state(be, op, layer)) return;
  if (c->ssm_dim != (size_t)n_v * d_k * d_v) {
    fail(be, GT_EINVAL, op, "ssm state size != n_v * d_k * d_v");
    return;
  }
  KC_CUDA(ERR(be), kc_gdn_scan(c->stream, c->kb, ssm_state(c, layer, 0), c->st_slots, q, k, v, g, beta, out, n_k, n_v,
                               d_k, d_v));
}

static void do_rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out, int rows,
                             int d, float eps) {
  if (failed(be)) return;
  if (rows < 0 || d <= 0 || !is_f32_vec(w, d)) {
    fail(be, GT_EINVAL, "rmsnorm_gated", "weight must be F32 [d]");
    return;
  }
  KC_CUDA(ERR(be), kc_rmsnorm_gated(CU(be)->stream, x, w->data, z, out, rows, d, eps));
}

/* ---- decode steps as CUDA graphs ----
 * A decode batch (one token per sequence, n_seq <= KC_MATVEC_MAX_ROWS) is recorded instead of
 * launched: each op call becomes an op_rec_t. At the step's download the records are compared
 * with those the graph of that batch size was captured from; if equal (same buffers, shapes and
 * batch view, no internal buffer moved since) the graph is replayed, otherwise the records are
 * captured into a new graph (or an update of the old one) and that is launched. Anything else
 * that touches the stream first runs the recorded ops eagerly (counted as an eager step). */
enum {
  OP_EMBED, OP_GATHER, OP_MATMUL, OP_RMSNORM, OP_ADD_RMSNORM, OP_ADD, OP_ROPE, OP_SWIGLU, OP_MUL_SIGMOID,
  OP_COPY2D, OP_KV_STORE, OP_ATTENTION, OP_CONV1D, OP_L2NORM, OP_GDN_GATES, OP_GDN_SCAN, OP_RMSNORM_GATED
};

typedef struct op_rec {
  int64_t op;
  const void *p[6];
  int64_t i[8];
  double f[2];
  int64_t wi[2][4]; /* weights: type, rows, cols, row_bytes */
  const void *wp[2];
} op_rec_t;

static op_rec_t *rec_new(be_t *be, int op) {
  be_cuda_t *c = CU(be);
  if (c->n_rec == c->cap_rec) {
    int cap = c->cap_rec ? 2 * c->cap_rec : 1024;
    op_rec_t *r = realloc(c->rec, sizeof(op_rec_t) * (size_t)cap);
    if (!r) return NULL;
    c->rec = r;
    c->cap_rec = cap;
  }
  op_rec_t *r = &c->rec[c->n_rec++];
  memset(r, 0, sizeof *r);
  r->op = op;
  return r;
}
static void rec_w(op_rec_t *r, int k, const be_weight_t *w) {
  r->wi[k][0] = w->type;
  r->wi[k][1] = w->rows;
  r->wi[k][2] = w->cols;
  r->wi[k][3] = (int64_t)w->row_bytes;
  r->wp[k] = w->data;
}
static be_weight_t rec_get_w(const op_rec_t *r, int k) {
  be_weight_t w = {.type = (gt_type_t)r->wi[k][0], .rows = r->wi[k][1], .cols = r->wi[k][2],
                   .row_bytes = (size_t)r->wi[k][3], .data = (void *)r->wp[k]};
  return w;
}

static void run_rec(be_t *be, const op_rec_t *r) {
  be_weight_t w0 = rec_get_w(r, 0), w1 = rec_get_w(r, 1);
  float *p0 = (float *)r->p[0], *p1 = (float *)r->p[1], *p2 = (float *)r->p[2], *p3 = (float *)r->p[3],
        *p4 = (float *)r->p[4], *p5 = (float *)r->p[5];
  const int64_t *i = r->i;
  switch ((int)r->op) {
  case OP_EMBED: do_embed(be, &w0, p0); break;
  case OP_GATHER: do_gather_out(be, p0, p1, (int)i[0]); break;
  case OP_MATMUL: do_matmul(be, &w0, p0, p1, (int)i[0]); break;
  case OP_RMSNORM: do_rmsnorm(be, p0, &w0, p1, (int)i[0], (int)i[1], (float)r->f[0]); break;
  case OP_ADD_RMSNORM: do_add_rmsnorm(be, p0, p1, &w0, p2, (int)i[0], (int)i[1], (float)r->f[0]); break;
  case OP_ADD: do_add(be, p0, p1, (size_t)i[0]); break;
  case OP_ROPE: do_rope(be, p0, (int)i[0], (int)i[1], (int)i[2], (float)r->f[0]); break;
  case OP_SWIGLU: do_swiglu(be, p0, p1, p2, (size_t)i[0]); break;
  case OP_MUL_SIGMOID: do_mul_sigmoid(be, p0, p1, (size_t)i[0]); break;
  case OP_COPY2D: do_copy2d(be, p0, (size_t)i[0], p1, (size_t)i[1], (int)i[2], (int)i[3]); break;
  case OP_KV_STORE: do_kv_store(be, (int)i[0], p0, p1); break;
  case OP_ATTENTION: do_attention(be, (int)i[0], p0, p1, (int)i[1], (int)i[2], (int)i[3], (float)r->f[0]); break;
  case OP_CONV1D: do_conv1d_silu(be, (int)i[0], p0, p1, &w0, (int)i[1], (int)i[2]); break;
  case OP_L2NORM: do_l2norm(be, p0, (int)i[0], (int)i[1], (float)r->f[0], (float)r->f[1]); break;
  case OP_GDN_GATES: do_gdn_gates(be, p0, p1, &w0, &w1, p2, p3, (int)i[0]); break;
  case OP_GDN_SCAN:
    do_gdn_scan(be, (int)i[0], p0, p1, p2, p3, p4, p5, (int)i[1], (int)i[2], (int)i[3], (int)i[4]);
    break;
  case OP_RMSNORM_GATED: do_rmsnorm_gated(be, p0, &w0, p1, p2, (int)i[0], (int)i[1], (float)r->f[0]); break;
  }
}

/* Runs the recorded ops of the current step eagerly and stops recording. */
static void flush_eager(be_t *be) {
  be_cuda_t *c = CU(be);
  if (!c->recording) return;
  c->recording = 0;
  for (int k = 0; k < c->n_rec; k++) run_rec(be, &c->rec[k]);
  if (c->n_rec > 0) c->eager_steps++;
  c->n_rec = 0;
}

/* Scratch the recorded ops will need, grown now (not allowed while capturing); 0 when every
 * op can be captured. */
static int prepare_capture(be_t *be) {
  be_cuda_t *c = CU(be);
  size_t need = 0;
  for (int k = 0; k < c->n_rec; k++) {
    const op_rec_t *r = &c->rec[k];
    if (r->op == OP_ATTENTION) {
      size_t n = kc_attention_part_floats(c->b.n_tok, (int)r->i[1], (int)r->i[3],
                                          kc_attention_splits(c->b.n_tok, (int)r->i[1], 1 << 30));
      if (n > need) need = n;
    } else if (r->op == OP_ROPE) {
      if (!rope_table(be, (float)r->f[0], (int)r->i[2], r->i[3] != 0)) return -1;
    } else if (r->op == OP_MATMUL) {
      const be_weight_t w = rec_get_w(r, 0);
      const size_t n = bf16_gemm_floats(&w, (int)r->i[0]);
      if (n) {
        if (n > need) need = n;
      } else if (((uintptr_t)r->p[0] & 15) != 0 || r->i[0] > KC_MATVEC_MAX_ROWS) {
        return -1; /* would take the dequantize + SGEMM path */
      }
    }
  }
  if (need > c->scratch_cap) {
    if (!scratch(be, need)) return -1;
    c->buf_gen++;
  }
  return 0;
}

/* Ends a recorded decode step: replays, updates or captures the graph of its batch size. */
static void finish_step(be_t *be) {
  be_cuda_t *c = CU(be);
  if (!c->recording) return;
  const int n = c->b.n_tok;
  cu_graph_t *g = &c->graphs[n];
  if (failed(be) || prepare_capture(be)) {
    flush_eager(be);
    return;
  }
  if (g->exec && g->buf_gen == c->buf_gen && g->n_rec == c->n_rec && !memcmp(&g->kb, &c->kb, sizeof c->kb) &&
      !memcmp(g->rec, c->rec, sizeof(op_rec_t) * (size_t)c->n_rec)) {
    c->recording = 0;
    c->n_rec = 0;
    if (KC_CUDA(ERR(be), cudaGraphLaunch(g->exec, c->stream))) return;
    c->graph_steps++;
    return;
  }
  /* capture the recorded ops */
  cudaGraph_t graph = NULL;
  if (KC_CUDA(ERR(be), cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal))) {
    flush_eager(be);
    return;
  }
  c->recording = 0;
  for (int k = 0; k < c->n_rec; k++) run_rec(be, &c->rec[k]);
  cudaError_t ce = cudaStreamEndCapture(c->stream, &graph);
  if (ce != cudaSuccess || failed(be)) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    if (!failed(be)) { /* capture refused: run them eagerly */
      c->recording = 1;
      flush_eager(be);
    }
    return;
  }
  int ok = 0;
  if (g->exec && g->n_rec == c->n_rec) {
    cudaGraphExecUpdateResultInfo info;
    ok = cudaGraphExecUpdate(g->exec, graph, &info) == cudaSuccess;
    (void)cudaGetLastError();
  }
  if (!ok) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
    if (KC_CUDA(ERR(be), cudaGraphInstantiate(&g->exec, graph, 0))) {
      cudaGraphDestroy(graph);
      g->exec = NULL;
      return;
    }
  }
  cudaGraphDestroy(graph);
  op_rec_t *copy = realloc(g->rec, sizeof(op_rec_t) * (size_t)(c->n_rec ? c->n_rec : 1));
  if (!copy) {
    fail(be, GT_ENOMEM, "graph", "op records");
    return;
  }
  g->rec = copy;
  memcpy(g->rec, c->rec, sizeof(op_rec_t) * (size_t)c->n_rec);
  g->n_rec = c->n_rec;
  g->kb = c->kb;
  g->buf_gen = c->buf_gen;
  c->n_rec = 0;
  c->captures++;
  c->captured_mask |= 1ull << n;
  if (KC_CUDA(ERR(be), cudaGraphLaunch(g->exec, c->stream))) return;
  c->graph_steps++;
}

#define RECORD(op_id)                            \
  op_rec_t *r = NULL;                            \
  if (CU(be)->recording) {                       \
    r = rec_new(be, op_id);                      \
    if (!r) {                                    \
      flush_eager(be);                           \
    }                                            \
  }                                              \
  if (r)

static void cu_embed(be_t *be, const be_weight_t *w, float *out) {
  RECORD(OP_EMBED) { rec_w(r, 0, w); r->p[0] = out; return; }
  do_embed(be, w, out);
}
static void cu_gather_out(be_t *be, const float *x, float *out, int d) {
  RECORD(OP_GATHER) { r->p[0] = x; r->p[1] = out; r->i[0] = d; return; }
  do_gather_out(be, x, out, d);
}
static void cu_matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows) {
  RECORD(OP_MATMUL) { rec_w(r, 0, w); r->p[0] = x; r->p[1] = out; r->i[0] = rows; return; }
  do_matmul(be, w, x, out, rows);
}
static void cu_rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps) {
  RECORD(OP_RMSNORM) { rec_w(r, 0, w); r->p[0] = x; r->p[1] = out; r->i[0] = rows; r->i[1] = d; r->f[0] = eps; return; }
  do_rmsnorm(be, x, w, out, rows, d, eps);
}
static void cu_add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows, int d,
                           float eps) {
  RECORD(OP_ADD_RMSNORM) {
    rec_w(r, 0, w); r->p[0] = x; r->p[1] = delta; r->p[2] = out; r->i[0] = rows; r->i[1] = d; r->f[0] = eps;
    return;
  }
  do_add_rmsnorm(be, x, delta, w, out, rows, d, eps);
}
static void cu_add(be_t *be, float *y, const float *x, size_t n) {
  RECORD(OP_ADD) { r->p[0] = y; r->p[1] = x; r->i[0] = (int64_t)n; return; }
  do_add(be, y, x, n);
}
static void cu_rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta) {
  RECORD(OP_ROPE) {
    r->p[0] = x; r->i[0] = n_head; r->i[1] = head_dim; r->i[2] = n_rot; r->i[3] = be->rope_freq_bf16; r->f[0] = theta;
    return;
  }
  do_rope(be, x, n_head, head_dim, n_rot, theta);
}
static void cu_swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n) {
  RECORD(OP_SWIGLU) { r->p[0] = gate; r->p[1] = up; r->p[2] = out; r->i[0] = (int64_t)n; return; }
  do_swiglu(be, gate, up, out, n);
}
static void cu_mul_sigmoid(be_t *be, float *x, const float *g, size_t n) {
  RECORD(OP_MUL_SIGMOID) { r->p[0] = x; r->p[1] = g; r->i[0] = (int64_t)n; return; }
  do_mul_sigmoid(be, x, g, n);
}
static void cu_copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols) {
  RECORD(OP_COPY2D) {
    r->p[0] = dst; r->p[1] = src; r->i[0] = (int64_t)dst_ld; r->i[1] = (int64_t)src_ld; r->i[2] = rows; r->i[3] = cols;
    return;
  }
  do_copy2d(be, dst, dst_ld, src, src_ld, rows, cols);
}
static void cu_kv_store(be_t *be, int layer, const float *k, const float *v) {
  RECORD(OP_KV_STORE) { r->i[0] = layer; r->p[0] = k; r->p[1] = v; return; }
  do_kv_store(be, layer, k, v);
}
static void cu_attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                         float scale) {
  RECORD(OP_ATTENTION) {
    r->i[0] = layer; r->p[0] = q; r->p[1] = out; r->i[1] = n_head; r->i[2] = n_kv_head; r->i[3] = head_dim;
    r->f[0] = scale;
    return;
  }
  do_attention(be, layer, q, out, n_head, n_kv_head, head_dim, scale);
}
static void cu_conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K) {
  RECORD(OP_CONV1D) { rec_w(r, 0, w); r->i[0] = layer; r->p[0] = x; r->p[1] = out; r->i[1] = C; r->i[2] = K; return; }
  do_conv1d_silu(be, layer, x, out, w, C, K);
}
static void cu_l2norm(be_t *be, float *x, int rows, int d, float eps, float scale) {
  RECORD(OP_L2NORM) { r->p[0] = x; r->i[0] = rows; r->i[1] = d; r->f[0] = eps; r->f[1] = scale; return; }
  do_l2norm(be, x, rows, d, eps, scale);
}
static void cu_gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                         const be_weight_t *dt_bias, float *g, float *beta, int n_v) {
  RECORD(OP_GDN_GATES) {
    rec_w(r, 0, a); rec_w(r, 1, dt_bias); r->p[0] = alpha; r->p[1] = beta_in; r->p[2] = g; r->p[3] = beta; r->i[0] = n_v;
    return;
  }
  do_gdn_gates(be, alpha, beta_in, a, dt_bias, g, beta, n_v);
}
static void cu_gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, float *out, int n_k, int n_v, int d_k, int d_v) {
  RECORD(OP_GDN_SCAN) {
    r->i[0] = layer; r->p[0] = q; r->p[1] = k; r->p[2] = v; r->p[3] = g; r->p[4] = beta; r->p[5] = out;
    r->i[1] = n_k; r->i[2] = n_v; r->i[3] = d_k; r->i[4] = d_v;
    return;
  }
  do_gdn_scan(be, layer, q, k, v, g, beta, out, n_k, n_v, d_k, d_v);
}
static void cu_rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out, int rows,
                             int d, float eps) {
  RECORD(OP_RMSNORM_GATED) {
    rec_w(r, 0, w); r->p[0] = x; r->p[1] = z; r->p[2] = out; r->i[0] = rows; r->i[1] = d; r->f[0] = eps;
    return;
  }
  do_rmsnorm_gated(be, x, w, z, out, rows, d, eps);
}

void be_cuda_get_stats(be_t *be, be_cuda_stats_t *st) {
  be_cuda_t *c = CU(be);
  *st = (be_cuda_stats_t){.graph_steps = c->graph_steps, .eager_steps = c->eager_steps, .captures = c->captures,
                          .captured_sizes = c->captured_mask};
}

/* ---- ranks ---- */

static void cu_all_reduce(be_t *be, float *x, size_t n) { /* one rank: nothing to do */ }

static void cu_destroy(be_t *be) {
  be_cuda_t *c = CU(be);
  if (!c) return;
  cudaStreamSynchronize(c->stream);
  for (int i = 0; i <= KC_MATVEC_MAX_ROWS; i++) {
    if (c->graphs[i].exec) cudaGraphExecDestroy(c->graphs[i].exec);
    free(c->graphs[i].rec);
  }
  free(c->rec);
  for (int i = 0; i < CU_ROPE_TABLES; i++) cudaFree(c->rope_tab[i].d);
  cudaFree(c->blas_ws);
  cudaFree(c->kv_pool);
  cudaFree(c->conv);
  cudaFree(c->ssm);
  cudaFree(c->scratch);
  cudaFree(c->d_ints);
  cudaFree(c->d_eflag);
  if (c->blas) cublasDestroy(c->blas);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c->h_ints);
  free(c);
}

static long cu_eager_steps(be_t *be) {
  be_cuda_stats_t st;
  be_cuda_get_stats(be, &st);
  return st.eager_steps;
}

static const be_ops_t cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .sync = cu_sync,
    .kv_init = cu_kv_init,
    .state_init = cu_state_init,
    .state_copy = cu_state_copy,
    .state_zero = cu_state_zero,
    .set_batch = cu_set_batch,
    .embed = cu_embed,
    .gather_out = cu_gather_out,
    .matmul = cu_matmul,
    .rmsnorm = cu_rmsnorm,
    .add_rmsnorm = cu_add_rmsnorm,
    .add = cu_add,
    .rope = cu_rope,
    .swiglu = cu_swiglu,
    .mul_sigmoid = cu_mul_sigmoid,
    .copy2d = cu_copy2d,
    .kv_store = cu_kv_store,
    .attention = cu_attention,
    .conv1d_silu = cu_conv1d_silu,
    .l2norm = cu_l2norm,
    .gdn_gates = cu_gdn_gates,
    .gdn_scan = cu_gdn_scan,
    .rmsnorm_gated = cu_rmsnorm_gated,
    .all_reduce = cu_all_reduce,
    .eager_steps = cu_eager_steps,
};

int be_cuda_available(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n > 0;
}

int be_cuda_create(int device, be_t **out, gt_err_t *err) {
  *out = NULL;
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || device < 0 || device >= n) {
    (void)cudaGetLastError();
    return gt_err_set(err, GT_EUNSUPPORTED, "cuda backend: device %d not present (%d devices%s%s)", device, n,
                      ce != cudaSuccess ? ": " : "", ce != cudaSuccess ? cudaGetErrorString(ce) : "");
  }
  be_cuda_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "cuda backend: out of memory");
  c->base.ops = &cuda_ops;
  c->base.rank = 0;
  c->base.n_ranks = 1;
  c->device = device;
  const char *ge = getenv("GANTRY_CUDA_GRAPHS");
  c->graphs_on = !(ge && !strcmp(ge, "0"));
  if (KC_CUDA(err, cudaSetDevice(device)) || KC_CUDA(err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) ||
      KC_CUDA(err, cudaMalloc((void **)&c->d_eflag, sizeof(int))) || KC_CUDA(err, cudaMemset(c->d_eflag, 0, sizeof(int))) ||
      KC_CUDA(err, cudaDeviceSynchronize()) ||
      KC_CUBLAS(err, cublasCreate(&c->blas)) || KC_CUBLAS(err, cublasSetStream(c->blas, c->stream)) ||
      KC_CUBLAS(err, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) || /* SGEMM stays fp32: no TF32 */
      KC_CUDA(err, cudaMalloc(&c->blas_ws, CU_BLAS_WS_BYTES)) ||
      KC_CUBLAS(err, cublasSetWorkspace(c->blas, c->blas_ws, CU_BLAS_WS_BYTES))) {
    cu_destroy(&c->base);
    return GT_EINTERNAL;
  }
  c->kb.eflag = c->d_eflag;
  *out = &c->base;
  return GT_OK;
}
