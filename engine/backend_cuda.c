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

#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/add.cuh"
#include "kernels/attention.cuh"
#include "kernels/attn_prep.cuh"
#include "kernels/common.cuh"
#include "kernels/conv1d.cuh"
#include "kernels/dequant.cuh"
#include "kernels/embed.cuh"
#include "kernels/gather_out.cuh"
#include "kernels/gdn_chunked.cuh"
#include "kernels/gdn_gates.cuh"
#include "kernels/gdn_scan.cuh"
#include "kernels/kv_store.cuh"
#include "kernels/l2norm.cuh"
#include "kernels/matvec.cuh"
#include "kernels/mul_sigmoid.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rmsnorm_gated.cuh"
#include "kernels/rope.cuh"
#include "kernels/sample.cuh"
#include "kernels/split_bf16.cuh"
#include "kernels/swiglu.cuh"

#include "common/clock.h"

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
  /* per-op profile (be_cuda_profile_arm / be_cuda_profile_get) */
  int prof_state;          /* CU_PROF_OFF / ARMED (next decode step) / GRAPH (timing replays) */
  be_cuda_prof_t *prof_rows; /* [n_prof_rows] by label, most time first */
  int n_prof_rows;
  be_cuda_prof_sum_t prof_sum;
  cudaEvent_t prof_gev[2]; /* around a timed graph launch */
  int prof_g_pending;      /* prof_gev recorded, not yet read */
  long prof_steps;
  /* RoPE inverse-frequency tables (device, double [n_rot/2]), made once per configuration */
  struct {
    float theta;
    int n_rot, bf16;
    double *d;
  } rope_tab[CU_ROPE_TABLES];
  /* cuBLAS workspace (set explicitly so GEMMs can be captured into graphs) */
  void *blas_ws;
  /* sampling (cu_sample): rows and ids staged in pinned host memory, probability scratch */
  int smp_cap;             /* rows the buffers hold */
  size_t smp_prob_cap;     /* floats of d_smp_prob */
  kc_sample_row_t *h_smp_rows, *d_smp_rows;
  int32_t *h_smp_ids, *d_smp_ids;
  float *d_smp_prob;
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
static void prof_collect_graph(be_t *be);
enum { CU_PROF_OFF, CU_PROF_ARMED, CU_PROF_GRAPH };

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
  prof_collect_graph(be);
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

_Static_assert(sizeof(kc_sample_row_t) == sizeof(be_sample_row_t) &&
                   offsetof(kc_sample_row_t, top_k) == offsetof(be_sample_row_t, top_k) &&
                   offsetof(kc_sample_row_t, top_p) == offsetof(be_sample_row_t, top_p) &&
                   offsetof(kc_sample_row_t, min_p) == offsetof(be_sample_row_t, min_p) &&
                   offsetof(kc_sample_row_t, u) == offsetof(be_sample_row_t, u),
               "kc_sample_row_t must mirror be_sample_row_t");

/* Grows the sampling buffers to n_rows rows of n_vocab (after the stream drains); GT_OK or an
 * error recorded in be->err. */
static int sample_bufs(be_t *be, int n_rows, int n_vocab) {
  be_cuda_t *c = CU(be);
  const size_t nf = kc_sample_scratch_floats(n_rows, n_vocab);
  if (n_rows <= c->smp_cap && nf <= c->smp_prob_cap) return GT_OK;
  if (KC_CUDA(ERR(be), cudaStreamSynchronize(c->stream))) return GT_EINTERNAL;
  if (n_rows > c->smp_cap) {
    cudaFreeHost(c->h_smp_rows);
    cudaFreeHost(c->h_smp_ids);
    cudaFree(c->d_smp_rows);
    cudaFree(c->d_smp_ids);
    c->h_smp_rows = c->d_smp_rows = NULL;
    c->h_smp_ids = c->d_smp_ids = NULL;
    c->smp_cap = 0;
    if (KC_CUDA(ERR(be), cudaMallocHost((void **)&c->h_smp_rows, sizeof(kc_sample_row_t) * (size_t)n_rows)) ||
        KC_CUDA(ERR(be), cudaMallocHost((void **)&c->h_smp_ids, sizeof(int32_t) * (size_t)n_rows)) ||
        KC_CUDA(ERR(be), cudaMalloc((void **)&c->d_smp_rows, sizeof(kc_sample_row_t) * (size_t)n_rows)) ||
        KC_CUDA(ERR(be), cudaMalloc((void **)&c->d_smp_ids, sizeof(int32_t) * (size_t)n_rows)))
      return GT_EINTERNAL;
    c->smp_cap = n_rows;
  }
  if (nf > c->smp_prob_cap) {
    cudaFree(c->d_smp_prob);
    c->d_smp_prob = NULL;
    c->smp_prob_cap = 0;
    if (KC_CUDA(ERR(be), cudaMalloc((void **)&c->d_smp_prob, sizeof(float) * nf))) return GT_EINTERNAL;
    c->smp_prob_cap = nf;
  }
  return GT_OK;
}

/* Ends the step (its graph runs first, as for download), samples eagerly on the stream and
 * copies back only the ids. */
static int cu_sample(be_t *be, const float *logits, int n_rows, int n_vocab, const be_sample_row_t *rows,
                     int32_t *ids) {
  be_cuda_t *c = CU(be);
  finish_step(be);
  if (n_rows > 0 && !failed(be) && sample_bufs(be, n_rows, n_vocab) == GT_OK) {
    memcpy(c->h_smp_rows, rows, sizeof(kc_sample_row_t) * (size_t)n_rows);
    (void)(KC_CUDA(ERR(be), cudaMemcpyAsync(c->d_smp_rows, c->h_smp_rows, sizeof(kc_sample_row_t) * (size_t)n_rows,
                                            cudaMemcpyHostToDevice, c->stream)) ||
           KC_CUDA(ERR(be), kc_sample(c->stream, logits, n_rows, n_vocab, c->d_smp_rows, c->d_smp_prob, c->d_smp_ids)) ||
           KC_CUDA(ERR(be), cudaMemcpyAsync(c->h_smp_ids, c->d_smp_ids, sizeof(int32_t) * (size_t)n_rows,
                                            cudaMemcpyDeviceToHost, c->stream)));
  }
  int rc = cu_sync(be);
  if (rc == GT_OK && n_rows > 0) memcpy(ids, c->h_smp_ids, sizeof(int32_t) * (size_t)n_rows);
  return rc;
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
  c->b.seq_first = sf; /* host copies, valid until the next set_batch (do_gdn_scan reads sn) */
  c->b.seq_ntok = sn;

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
  if (decode && (c->graphs_on || c->prof_state == CU_PROF_ARMED)) {
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

/* 1 when do_matmul takes the matvec path for w and rows of x. */
static int takes_matvec(const be_weight_t *w, const float *x, int rows) {
  return dense_ok(w) && rows > 0 && rows <= KC_MATVEC_MAX_ROWS && ((uintptr_t)x & 15) == 0 && !bf16_gemm_floats(w, rows);
}

/* n products of one x: runs of consecutive weights of one type on the matvec path go to one
 * kc_matvec_multi launch (each output equals kc_matvec's); any other weight is do_matmul. */
static void do_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[],
                            int rows) {
  be_cuda_t *c = CU(be);
  if (failed(be) || rows <= 0) return;
  if (n < 1 || n > BE_MATMUL_MULTI_MAX) {
    fail(be, GT_EINVAL, "matmul_multi", "weight count out of [1, BE_MATMUL_MULTI_MAX]");
    return;
  }
  for (int i = 0; i < n; i++)
    if (!w[i] || w[i]->cols != w[0]->cols) {
      fail(be, GT_EINVAL, "matmul_multi", "weights differ in cols");
      return;
    }
  for (int i = 0; i < n && !failed(be);) {
    if (!takes_matvec(w[i], x, rows)) {
      do_matmul(be, w[i], x, out[i], rows);
      i++;
      continue;
    }
    kc_mv_seg_t segs[BE_MATMUL_MULTI_MAX];
    int ns = 0;
    for (int j = i; j < n && ns < KC_MATVEC_MAX_SEGS && w[j]->type == w[i]->type && takes_matvec(w[j], x, rows); j++)
      segs[ns++] = (kc_mv_seg_t){.w = w[j]->data, .out = out[j], .n_out = w[j]->rows, .row_bytes = w[j]->row_bytes};
    if (ns == 1)
      KC_CUDA(ERR(be), kc_matvec(c->stream, (int)w[i]->type, w[i]->data, w[i]->rows, w[i]->cols, w[i]->row_bytes, x,
                                 out[i], rows));
    else
      KC_CUDA(ERR(be), kc_matvec_multi(c->stream, (int)w[i]->type, ns, segs, w[i]->cols, x, rows));
    i += ns;
  }
}

static void do_swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n);

/* gate = silu(x·wgᵀ) * (x·wuᵀ): one kc_matvec_swiglu launch when both weights take the matvec
 * path with one type, else two do_matmul (gate, up) and kc_swiglu. */
static void do_ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate,
                          float *up, int rows) {
  be_cuda_t *c = CU(be);
  if (failed(be) || rows <= 0) return;
  if (!wg || !wu || wg->rows != wu->rows || wg->cols != wu->cols) {
    fail(be, GT_EINVAL, "ffn_swiglu", "gate and up weights differ in shape");
    return;
  }
  if (wg->type == wu->type && wg->row_bytes == wu->row_bytes && takes_matvec(wg, x, rows) && takes_matvec(wu, x, rows)) {
    const int rc = kc_matvec_swiglu(c->stream, (int)wg->type, wg->data, wu->data, wg->rows, wg->cols, wg->row_bytes, x,
                                    gate, rows);
    if (rc != (int)cudaErrorNotSupported) {
      KC_CUDA(ERR(be), rc);
      return;
    } /* cudaErrorNotSupported: nothing was launched; the unfused path below */
  }
  do_matmul(be, wg, x, gate, rows);
  do_matmul(be, wu, x, up, rows);
  do_swiglu(be, gate, up, gate, (size_t)rows * (size_t)wg->rows);
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

/* rmsnorm q, rmsnorm k, rope q, rope k, kv_store in one kc_attn_qk_prep launch (the unfused
 * kernels when a head row is too wide for it); bf16: the rope_freq_bf16 it was recorded with. */
static void do_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *qn,
                            const be_weight_t *kn, int n_head, int n_kv_head, int hd, int n_rot, float theta, float eps,
                            int bf16) {
  be_cuda_t *c = CU(be);
  static const char op[] = "attn_qk_prep";
  if (failed(be)) return;
  if (layer < 0 || layer >= c->kv_layers || n_head <= 0 || n_kv_head <= 0 || hd <= 0 ||
      (int64_t)n_kv_head * hd != c->kv_dim || n_rot <= 0 || n_rot > hd || n_rot % 2) {
    fail(be, GT_EINVAL, op, "layer, head shape or n_rot does not match the KV pool");
    return;
  }
  if (!norm_weight_ok(be, qn, hd, op) || !norm_weight_ok(be, kn, hd, op)) return;
  const double *tab = rope_table(be, theta, n_rot, bf16);
  if (!tab || c->b.n_tok <= 0) return;
  const int n = c->b.n_tok;
  if (hd <= KC_ATTN_PREP_MAX_HD && n_head + n_kv_head <= 65535) {
    KC_CUDA(ERR(be), kc_attn_qk_prep(c->stream, c->kb, kv_of(c, layer), q, k, v, qn->data, kn->data, n_head, n_kv_head,
                                     hd, n_rot, tab, bf16, eps));
    return;
  }
  if (KC_CUDA(ERR(be), kc_rmsnorm(c->stream, q, qn->data, q, n * n_head, hd, eps)) ||
      KC_CUDA(ERR(be), kc_rmsnorm(c->stream, k, kn->data, k, n * n_kv_head, hd, eps)) ||
      KC_CUDA(ERR(be), kc_rope(c->stream, c->kb, q, n_head, hd, n_rot, tab, bf16)) ||
      KC_CUDA(ERR(be), kc_rope(c->stream, c->kb, k, n_kv_head, hd, n_rot, tab, bf16)))
    return;
  KC_CUDA(ERR(be), kc_kv_store(c->stream, c->kb, kv_of(c, layer), k, v));
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

/* tokens a sequence must bring to a step for the chunked GDN scan (kernels/gdn_chunked.cu) */
#define CU_GDN_CHUNK_MIN_TOK 16

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
  /* sequences bringing >= CU_GDN_CHUNK_MIN_TOK tokens take the chunked kernel, the others the
   * sequential one (decode batches never reach the threshold: their graphs hold only the
   * latter, which needs no scratch) */
  int n_long = 0;
  for (int s = 0; s < c->b.n_seq; s++) n_long += c->b.seq_ntok[s] >= CU_GDN_CHUNK_MIN_TOK;
  float *ssm = ssm_state(c, layer, 0);
  int skip_from = INT_MAX;
  if (n_long > 0 && kc_gdn_chunked_ok(d_k, d_v)) {
    skip_from = CU_GDN_CHUNK_MIN_TOK;
    if (KC_CUDA(ERR(be), kc_gdn_chunked(c->stream, c->kb, ssm, c->st_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v,
                                        CU_GDN_CHUNK_MIN_TOK)))
      return;
    if (n_long == c->b.n_seq) return;
  }
  KC_CUDA(ERR(be), kc_gdn_scan(c->stream, c->kb, ssm, c->st_slots, q, k, v, g, beta, out, n_k, n_v, d_k, d_v,
                               skip_from));
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
  OP_COPY2D, OP_KV_STORE, OP_ATTENTION, OP_CONV1D, OP_L2NORM, OP_GDN_GATES, OP_GDN_SCAN, OP_RMSNORM_GATED,
  OP_MATMUL_MULTI, OP_FFN_SWIGLU, OP_ATTN_QK_PREP
};

typedef struct op_rec {
  int64_t op;
  const void *p[6];
  int64_t i[8];
  double f[2];
  int64_t wi[4][4]; /* weights: type, rows, cols, row_bytes (unused slots zero) */
  const void *wp[4];
} op_rec_t;
/* OP_MATMUL_MULTI keeps its n weights in wi/wp[0..n) and x, out[0..n) in p[0], p[1..n] */
_Static_assert(BE_MATMUL_MULTI_MAX <= 4, "op_rec_t has 4 weight slots and 5 pointers for matmul_multi");

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
  case OP_MATMUL_MULTI: {
    be_weight_t wm[BE_MATMUL_MULTI_MAX];
    const be_weight_t *wl[BE_MATMUL_MULTI_MAX];
    float *outs[BE_MATMUL_MULTI_MAX];
    const int n = (int)i[1];
    for (int k = 0; k < n; k++) {
      wm[k] = rec_get_w(r, k);
      wl[k] = &wm[k];
      outs[k] = (float *)r->p[1 + k];
    }
    do_matmul_multi(be, n, wl, p0, outs, (int)i[0]);
    break;
  }
  case OP_FFN_SWIGLU: do_ffn_swiglu(be, &w0, &w1, p0, p1, p2, (int)i[0]); break;
  case OP_ATTN_QK_PREP:
    do_attn_qk_prep(be, (int)i[0], p0, p1, p2, &w0, &w1, (int)i[1], (int)i[2], (int)i[3], (int)i[4], (float)r->f[0],
                    (float)r->f[1], (int)i[5]);
    break;
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
    } else if (r->op == OP_ATTN_QK_PREP) {
      if (!rope_table(be, (float)r->f[0], (int)r->i[4], r->i[5] != 0)) return -1;
    } else if (r->op == OP_MATMUL_MULTI || r->op == OP_FFN_SWIGLU) {
      const int n_w = r->op == OP_FFN_SWIGLU ? 2 : (int)r->i[1];
      for (int k = 0; k < n_w; k++) { /* each product as OP_MATMUL */
        const be_weight_t w = rec_get_w(r, k);
        const size_t n = bf16_gemm_floats(&w, (int)r->i[0]);
        if (n) {
          if (n > need) need = n;
        } else if (((uintptr_t)r->p[0] & 15) != 0 || r->i[0] > KC_MATVEC_MAX_ROWS) {
          return -1;
        }
      }
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

/* ---- per-op profile of one decode step (be_cuda_profile_arm / _get, backend_cuda.h) ---- */
#define CU_PROF_CHUNK 16     /* ops queued behind one host gate: far below the launch queue depth */
#define CU_PROF_GATE_MS 2000 /* a gate opens by itself after this long, so a stuck host never hangs */
#define CU_PROF_MAX_ROWS 128 /* distinct labels; the rest are summed into "(other ops)" */

/* Labels by OP_* id. An id without a name prints as "op#N": new ops only need a line here. */
static const char *const op_names[] = {
    [OP_EMBED] = "embed",         [OP_GATHER] = "gather_out",       [OP_MATMUL] = "matmul",
    [OP_RMSNORM] = "rmsnorm",     [OP_ADD_RMSNORM] = "add_rmsnorm", [OP_ADD] = "add",
    [OP_ROPE] = "rope",           [OP_SWIGLU] = "swiglu",           [OP_MUL_SIGMOID] = "mul_sigmoid",
    [OP_COPY2D] = "copy2d",       [OP_KV_STORE] = "kv_store",       [OP_ATTENTION] = "attention",
    [OP_CONV1D] = "conv1d_silu",  [OP_L2NORM] = "l2norm",           [OP_GDN_GATES] = "gdn_gates",
    [OP_GDN_SCAN] = "gdn_scan",   [OP_RMSNORM_GATED] = "rmsnorm_gated",
    [OP_MATMUL_MULTI] = "matmul_multi", [OP_FFN_SWIGLU] = "ffn_swiglu", [OP_ATTN_QK_PREP] = "attn_qk_prep",
};

/* "name[ TYPE colsxrows[+[TYPE ]colsxrows...] xROWS[ gemm]]": weight matrices (not vectors)
 * of the record with the batch rows; "gemm" when the first takes the bf16 tensor-core path. */
static void op_label(const op_rec_t *r, int rows, char *buf, size_t n) {
  const int op = (int)r->op;
  const int named = op >= 0 && (size_t)op < sizeof op_names / sizeof op_names[0] && op_names[op];
  size_t len = (size_t)(named ? snprintf(buf, n, "%s", op_names[op]) : snprintf(buf, n, "op#%d", op));
  int n_mat = 0;
  int64_t prev_type = -1;
  for (int k = 0; k < 4 && len < n; k++) {
    if (!r->wp[k] || r->wi[k][1] <= 1 || r->wi[k][2] <= 1) continue;
    const int64_t t = r->wi[k][0];
    len += (size_t)snprintf(buf + len, n - len, "%s%s%s%lldx%lld", n_mat ? "+" : " ",
                            t != prev_type ? dt_name((gt_type_t)t) : "", t != prev_type ? " " : "",
                            (long long)r->wi[k][2], (long long)r->wi[k][1]);
    prev_type = t;
    n_mat++;
  }
  if (n_mat && len < n) {
    const be_weight_t w = rec_get_w(r, 0);
    snprintf(buf + len, n - len, " x%d%s", rows, bf16_gemm_floats(&w, rows) ? " gemm" : "");
  }
}

static void prof_add(be_cuda_t *c, const char *label, double us) {
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < c->n_prof_rows; i++)
      if (!strcmp(c->prof_rows[i].label, label)) {
        c->prof_rows[i].calls++;
        c->prof_rows[i].us += us;
        return;
      }
    if (c->n_prof_rows < CU_PROF_MAX_ROWS - 1 || (pass == 1 && c->n_prof_rows < CU_PROF_MAX_ROWS)) {
      be_cuda_prof_t *p = &c->prof_rows[c->n_prof_rows++];
      snprintf(p->label, sizeof p->label, "%s", label);
      p->calls = 1;
      p->us = us;
      return;
    }
    label = "(other ops)";
  }
}

static int prof_cmp(const void *a, const void *b) {
  const double x = ((const be_cuda_prof_t *)a)->us, y = ((const be_cuda_prof_t *)b)->us;
  return x > y ? -1 : x < y;
}

/* Host function holding the stream until the host has queued the gate's chunk of ops. */
static void CUDART_CB prof_gate(void *p) {
  const int *open = p;
  const double t0 = gt_now_ms();
  while (!__atomic_load_n(open, __ATOMIC_ACQUIRE) && gt_now_ms() - t0 < CU_PROF_GATE_MS) sched_yield();
}

/* Runs the recorded decode step eagerly with an event pair around each op, waits for it and
 * keeps the sums per label (c->prof_rows, c->prof_sum); then times graph replays. Gating needs
 * prepare_capture to succeed: it guarantees no op of the step synchronizes the stream (which
 * would wait on a closed gate). Without events (creation failed) the ops just run. */
static void profile_step(be_t *be) {
  be_cuda_t *c = CU(be);
  const int n = c->n_rec, rows = c->b.n_tok;
  c->recording = 0;
  c->prof_state = CU_PROF_OFF;
  c->prof_steps++;
  int gated = !failed(be) && prepare_capture(be) == 0;
  cudaEvent_t *ev = calloc((size_t)2 * n + 1, sizeof *ev);
  int *gate = calloc((size_t)n / CU_PROF_CHUNK + 1, sizeof *gate);
  if (!c->prof_rows) c->prof_rows = malloc(sizeof(be_cuda_prof_t) * CU_PROF_MAX_ROWS);
  int n_ev = 0;
  if (ev && gate && c->prof_rows)
    while (n_ev < 2 * n && cudaEventCreate(&ev[n_ev]) == cudaSuccess) n_ev++;
  if (n_ev < 2 * n) (void)cudaGetLastError(); /* no events: the ops just run */
  const int timed = n_ev == 2 * n;
  gated = gated && timed;
  for (int k = 0; k < n; k++) {
    int *g = gate + k / CU_PROF_CHUNK;
    if (gated && k % CU_PROF_CHUNK == 0 && cudaLaunchHostFunc(c->stream, prof_gate, g) != cudaSuccess) {
      (void)cudaGetLastError();
      gated = 0;
    }
    if (timed && cudaEventRecord(ev[2 * k], c->stream) != cudaSuccess) (void)cudaGetLastError();
    run_rec(be, &c->rec[k]);
    if (timed && cudaEventRecord(ev[2 * k + 1], c->stream) != cudaSuccess) (void)cudaGetLastError();
    if (gated && (k % CU_PROF_CHUNK == CU_PROF_CHUNK - 1 || k == n - 1)) __atomic_store_n(g, 1, __ATOMIC_RELEASE);
  }
  const cudaError_t se = cudaStreamSynchronize(c->stream);
  KC_CUDA(ERR(be), se);
  c->n_prof_rows = 0;
  double total = 0;
  for (int k = 0; timed && k < n; k++) {
    float ms = 0;
    if (se != cudaSuccess || cudaEventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1]) != cudaSuccess) {
      (void)cudaGetLastError();
      ms = 0;
    }
    char label[sizeof c->prof_rows[0].label];
    op_label(&c->rec[k], rows, label, sizeof label);
    prof_add(c, label, ms * 1e3);
    total += ms * 1e3;
  }
  for (int k = 0; k < n_ev; k++) cudaEventDestroy(ev[k]);
  free(ev);
  if (se == cudaSuccess) free(gate); /* else a pending host function may still read it: kept */
  if (c->n_prof_rows > 1) qsort(c->prof_rows, (size_t)c->n_prof_rows, sizeof c->prof_rows[0], prof_cmp);
  c->prof_sum = (be_cuda_prof_sum_t){.batch = rows, .n_ops = n, .ops_us = total, .gated = gated};
  c->n_rec = 0;
  if (!c->prof_gev[0] && (cudaEventCreate(&c->prof_gev[0]) != cudaSuccess ||
                          cudaEventCreate(&c->prof_gev[1]) != cudaSuccess)) {
    (void)cudaGetLastError();
    return;
  }
  c->prof_state = CU_PROF_GRAPH;
}

/* Launches g, timed with prof_gev when graph replays of the profiled batch size are timed. */
static int graph_launch(be_t *be, cu_graph_t *g, int n) {
  be_cuda_t *c = CU(be);
  int timed = c->prof_state == CU_PROF_GRAPH && n == c->prof_sum.batch && !c->prof_g_pending;
  if (timed && cudaEventRecord(c->prof_gev[0], c->stream) != cudaSuccess) {
    (void)cudaGetLastError(); /* a profiling failure never fails the step */
    timed = 0;
  }
  if (KC_CUDA(ERR(be), cudaGraphLaunch(g->exec, c->stream))) return -1;
  if (timed && !(c->prof_g_pending = cudaEventRecord(c->prof_gev[1], c->stream) == cudaSuccess))
    (void)cudaGetLastError();
  c->graph_steps++;
  return 0;
}

/* After the stream drained: adds a timed graph launch to the mean. */
static void prof_collect_graph(be_t *be) {
  be_cuda_t *c = CU(be);
  if (!c->prof_g_pending) return;
  c->prof_g_pending = 0;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, c->prof_gev[0], c->prof_gev[1]) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  be_cuda_prof_sum_t *s = &c->prof_sum;
  s->graph_us = (s->graph_us * s->graph_steps + ms * 1e3) / (s->graph_steps + 1);
  s->graph_steps++;
}

void be_cuda_profile_arm(be_t *be) {
  be_cuda_t *c = CU(be);
  c->prof_state = CU_PROF_ARMED;
  c->n_prof_rows = 0;
  c->prof_g_pending = 0;
  c->prof_sum = (be_cuda_prof_sum_t){0};
}

int be_cuda_profile_get(be_t *be, be_cuda_prof_t *out, int max, be_cuda_prof_sum_t *sum) {
  be_cuda_t *c = CU(be);
  if (c->prof_g_pending) {
    if (cudaEventSynchronize(c->prof_gev[1]) != cudaSuccess) (void)cudaGetLastError();
    prof_collect_graph(be);
  }
  const int armed = c->prof_state == CU_PROF_ARMED;
  c->prof_state = CU_PROF_OFF;
  if (sum) *sum = c->prof_sum;
  if (armed || !c->prof_rows) return 0;
  const int n = c->n_prof_rows < max ? c->n_prof_rows : max;
  if (n > 0) memcpy(out, c->prof_rows, sizeof *out * (size_t)n);
  return n;
}

/* Ends a recorded decode step: replays, updates or captures the graph of its batch size (or
 * profiles it: be_cuda_profile_arm). */
static void finish_step(be_t *be) {
  be_cuda_t *c = CU(be);
  if (!c->recording) return;
  if (c->prof_state == CU_PROF_ARMED) {
    profile_step(be);
    return;
  }
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
    graph_launch(be, g, n);
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
  graph_launch(be, g, n);
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
static void cu_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[],
                            int rows) {
  if (n < 1 || n > BE_MATMUL_MULTI_MAX) { /* before recording: the record holds at most that many */
    fail(be, GT_EINVAL, "matmul_multi", "weight count out of [1, BE_MATMUL_MULTI_MAX]");
    return;
  }
  RECORD(OP_MATMUL_MULTI) {
    for (int k = 0; k < n; k++) {
      rec_w(r, k, w[k]);
      r->p[1 + k] = out[k];
    }
    r->p[0] = x; r->i[0] = rows; r->i[1] = n;
    return;
  }
  do_matmul_multi(be, n, w, x, out, rows);
}
static void cu_ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate,
                          float *up, int rows) {
  RECORD(OP_FFN_SWIGLU) { rec_w(r, 0, wg); rec_w(r, 1, wu); r->p[0] = x; r->p[1] = gate; r->p[2] = up; r->i[0] = rows; return; }
  do_ffn_swiglu(be, wg, wu, x, gate, up, rows);
}
static void cu_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *q_norm,
                            const be_weight_t *k_norm, int n_head, int n_kv_head, int head_dim, int n_rot, float theta,
                            float eps) {
  const int bf16 = be->rope_freq_bf16 != 0;
  RECORD(OP_ATTN_QK_PREP) {
    rec_w(r, 0, q_norm); rec_w(r, 1, k_norm); r->p[0] = q; r->p[1] = k; r->p[2] = v; r->i[0] = layer;
    r->i[1] = n_head; r->i[2] = n_kv_head; r->i[3] = head_dim; r->i[4] = n_rot; r->i[5] = bf16;
    r->f[0] = theta; r->f[1] = eps;
    return;
  }
  do_attn_qk_prep(be, layer, q, k, v, q_norm, k_norm, n_head, n_kv_head, head_dim, n_rot, theta, eps, bf16);
}

void be_cuda_get_stats(be_t *be, be_cuda_stats_t *st) {
  be_cuda_t *c = CU(be);
  *st = (be_cuda_stats_t){.graph_steps = c->graph_steps, .eager_steps = c->eager_steps, .captures = c->captures,
                          .captured_sizes = c->captured_mask, .profiled_steps = c->prof_steps};
}

static uint64_t cu_graph_sizes(be_t *be) { return CU(be)->captured_mask; }

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
  free(c->prof_rows);
  for (int i = 0; i < 2; i++)
    if (c->prof_gev[i]) cudaEventDestroy(c->prof_gev[i]);
  for (int i = 0; i < CU_ROPE_TABLES; i++) cudaFree(c->rope_tab[i].d);
  cudaFree(c->blas_ws);
  cudaFreeHost(c->h_smp_rows);
  cudaFreeHost(c->h_smp_ids);
  cudaFree(c->d_smp_rows);
  cudaFree(c->d_smp_ids);
  cudaFree(c->d_smp_prob);
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
    .sample = cu_sample,
    .graph_sizes = cu_graph_sizes,
    .matmul_multi = cu_matmul_multi,
    .ffn_swiglu = cu_ffn_swiglu,
    .attn_qk_prep = cu_attn_qk_prep,
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
