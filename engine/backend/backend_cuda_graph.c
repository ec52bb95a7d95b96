/* engine/backend/backend_cuda_graph.c — decode steps of the CUDA backend as CUDA graphs: the op records,
 * the be_ops_t entries that record (or launch at once), the eager flush, capture / update / replay
 * of the graph of each batch size, and the per-op profile mode (be_cuda_profile_arm / _get). */
#include "engine/backend/backend_cuda_internal.h"

#include "engine/backend/comm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.cuh"
#include "kernels/attn_decode.cuh"

#include "common/clock.h"

/* ---- decode steps as CUDA graphs ----
 * A decode batch (one token per sequence, n_seq <= BE_GRAPH_MAX_SEQS) is recorded instead of
 * launched: each op call becomes an op_rec_t. At the step's download the records are compared
 * with those the graph of that batch size was captured from; if equal (same buffers, shapes and
 * batch view, no internal buffer moved since) the graph is replayed, otherwise the records are
 * captured into a new graph (or an update of the old one) and that is launched. Anything else
 * that touches the stream first runs the recorded ops eagerly (counted as an eager step).
 * Verify and drafter steps of a graph shape (cu_set_batch: every sequence q <= BE_GRAPH_MAX_Q
 * tokens) are recorded the same way and kept by shape (step_graph). */
enum {
#define OP_ID(name) OP_##name,
  CU_REC_OPS(OP_ID) /* OP_<name>: the op of a record, one per op of CU_REC_OPS */
#undef OP_ID
};

/* A weight in a record: the fields of be_weight_t as 8-byte words. */
typedef struct {
  int64_t type, rows, cols, row_bytes;
  void *data;
} rec_weight_t;

/* cu_args_<name>_t: the arguments of a recorded call, one field per argument of
 * BE_ARGS_<name>, weights by value. Records compare with memcmp, so every field is an 8-byte
 * word (no padding: checked below) and rec_new zeroes the unused rest of a record. */
#define REC_FIELD(kind, v) REC_FIELD_##kind(v)
#define REC_FIELD_W(v) rec_weight_t v;
#define REC_FIELD_WN(v) rec_weight_t v[BE_MATMUL_MULTI_MAX];
#define REC_FIELD_N(v) int64_t v;
#define REC_FIELD_IN(v) const float *v;
#define REC_FIELD_OUT(v) float *v;
#define REC_FIELD_OUTN(v) float *v[BE_MATMUL_MULTI_MAX];
#define REC_FIELD_U32(v) const uint32_t *v;
#define REC_FIELD_INT(v) int64_t v;
#define REC_FIELD_SIZE(v) uint64_t v;
#define REC_FIELD_F(v) double v;
#define REC_FIELD_ROPE_BF16(v) int64_t v;
#define REC_ARGS_TYPE(name) typedef struct { BE_ARGS_##name(REC_FIELD) } cu_args_##name##_t;
CU_REC_OPS(REC_ARGS_TYPE)
#undef REC_ARGS_TYPE
/* 8-byte words per argument kind: a record without padding is 8 * their sum bytes */
#define REC_WORDS(kind, v) REC_WORDS_##kind
#define REC_WORDS_W +5
#define REC_WORDS_WN +5 * BE_MATMUL_MULTI_MAX
#define REC_WORDS_N +1
#define REC_WORDS_IN +1
#define REC_WORDS_OUT +1
#define REC_WORDS_OUTN +BE_MATMUL_MULTI_MAX
#define REC_WORDS_U32 +1
#define REC_WORDS_INT +1
#define REC_WORDS_SIZE +1
#define REC_WORDS_F +1
#define REC_WORDS_ROPE_BF16 +1
_Static_assert(sizeof(rec_weight_t) == 5 * 8, "rec_weight_t has padding");
#define REC_NOPAD_CHECK(name) \
  _Static_assert(sizeof(cu_args_##name##_t) == 8 * (0 BE_ARGS_##name(REC_WORDS)), "cu_args_" #name "_t has padding");
CU_REC_OPS(REC_NOPAD_CHECK)
#undef REC_NOPAD_CHECK

typedef struct op_rec {
  int64_t op; /* OP_* */
  union {
#define REC_MEMBER(name) cu_args_##name##_t name;
    CU_REC_OPS(REC_MEMBER)
#undef REC_MEMBER
  } a; /* a.<name>: the arguments of op <name> */
} op_rec_t;

/* at most REC_MAX_W weights per record (op_label, prepare_capture list them) */
#define REC_MAX_W 4
#define REC_NW(kind, v) REC_NW_##kind
#define REC_NW_W +1
#define REC_NW_WN +BE_MATMUL_MULTI_MAX
#define REC_NW_N
#define REC_NW_IN
#define REC_NW_OUT
#define REC_NW_OUTN
#define REC_NW_U32
#define REC_NW_INT
#define REC_NW_SIZE
#define REC_NW_F
#define REC_NW_ROPE_BF16
#define REC_NW_CHECK(name) _Static_assert(0 BE_ARGS_##name(REC_NW) <= REC_MAX_W, #name ": more than REC_MAX_W weights");
CU_REC_OPS(REC_NW_CHECK)
#undef REC_NW_CHECK

static op_rec_t *rec_new(be_t *be, int op) {
  be_cuda_t *c = CU_BE(be);
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
static void rec_w(rec_weight_t *d, const be_weight_t *w) {
  d->type = w->type;
  d->rows = w->rows;
  d->cols = w->cols;
  d->row_bytes = (int64_t)w->row_bytes;
  d->data = w->data;
}
static be_weight_t rec_get_w(const rec_weight_t *r) {
  be_weight_t w = {.type = (gt_type_t)r->type, .rows = r->rows, .cols = r->cols, .row_bytes = (size_t)r->row_bytes,
                   .data = r->data};
  return w;
}

/* The weights of a record in argument order into ws_[REC_MAX_W]; returns how many. */
#define REC_W(kind, v) REC_W_##kind(v)
#define REC_W_W(v) ws_[n_w++] = rec_get_w(&ra_->v);
#define REC_W_WN(v) for (int k_ = 0; k_ < ra_->n; k_++) ws_[n_w++] = rec_get_w(&ra_->v[k_]);
#define REC_W_N(v)
#define REC_W_IN(v)
#define REC_W_OUT(v)
#define REC_W_OUTN(v)
#define REC_W_U32(v)
#define REC_W_INT(v)
#define REC_W_SIZE(v)
#define REC_W_F(v)
#define REC_W_ROPE_BF16(v)
static int rec_weights(const op_rec_t *r, be_weight_t ws_[REC_MAX_W]) {
  int n_w = 0;
  switch ((int)r->op) {
#define REC_W_CASE(name)                      \
  case OP_##name: {                           \
    const cu_args_##name##_t *ra_ = &r->a.name; \
    (void)ra_;                                  \
    BE_ARGS_##name(REC_W) break;              \
  }
    CU_REC_OPS(REC_W_CASE)
#undef REC_W_CASE
  }
  return n_w;
}

/* Runs a record: its op's launcher with the recorded arguments (weights as be_weight_t
 * compound literals that live until the call returns). */
#define REC_WEIGHT(r) (&(be_weight_t){.type = (gt_type_t)(r).type, .rows = (r).rows, .cols = (r).cols, \
                                      .row_bytes = (size_t)(r).row_bytes, .data = (r).data})
#define REC_CALL(kind, v) REC_CALL_##kind(v)
#define REC_CALL_W(v) , REC_WEIGHT(ra_->v)
#define REC_CALL_WN(v)                                                                                 \
  , (const be_weight_t *const[BE_MATMUL_MULTI_MAX]){REC_WEIGHT(ra_->v[0]), REC_WEIGHT(ra_->v[1]),     \
                                                     REC_WEIGHT(ra_->v[2]), REC_WEIGHT(ra_->v[3])}
_Static_assert(BE_MATMUL_MULTI_MAX == 4, "REC_CALL_WN passes BE_MATMUL_MULTI_MAX weights");
#define REC_CALL_N(v) , (int)ra_->v
#define REC_CALL_IN(v) , ra_->v
#define REC_CALL_OUT(v) , ra_->v
#define REC_CALL_OUTN(v) , ra_->v
#define REC_CALL_U32(v) , ra_->v
#define REC_CALL_INT(v) , (int)ra_->v
#define REC_CALL_SIZE(v) , (size_t)ra_->v
#define REC_CALL_F(v) , (float)ra_->v
#define REC_CALL_ROPE_BF16(v) , (int)ra_->v
static void run_rec(be_t *be, const op_rec_t *r) {
  switch ((int)r->op) {
#define REC_RUN_CASE(name)                           \
  case OP_##name: {                                  \
    const cu_args_##name##_t *ra_ = &r->a.name;        \
    cu__##name(be BE_ARGS_##name(REC_CALL));         \
    break;                                           \
  }
    CU_REC_OPS(REC_RUN_CASE)
#undef REC_RUN_CASE
  }
}

/* Runs the recorded ops of the current step eagerly and stops recording. */
void cu__flush_eager(be_t *be) {
  be_cuda_t *c = CU_BE(be);
  if (!c->recording) return;
  c->recording = 0;
  kc_pdl_set_rows(c->b.n_tok); /* the launch attributes of this step's kernels (kernels/common.cuh) */
  for (int k = 0; k < c->n_rec; k++) run_rec(be, &c->rec[k]);
  kc_pdl_set_rows(0);
  if (c->n_rec > 0) cu_count_eager(c);
  c->n_rec = 0;
}

/* Scratch the recorded ops will need, grown now (not allowed while capturing); 0 when every
 * op can be captured. */
static int prepare_capture(be_t *be) {
  be_cuda_t *c = CU_BE(be);
  size_t need = 0;
  for (int k = 0; k < c->n_rec; k++) {
    const op_rec_t *r = &c->rec[k];
    const float *x = NULL; /* matmul, matmul_multi, ffn_swiglu: x and its rows */
    int rows = 0;
    switch ((int)r->op) {
    case OP_attention: { /* as cu__attention: the split decode kernel on bf16 pools */
      const cu_args_attention_t *a = &r->a.attention;
      size_t n = c->kv_bf16 ? kc_attn_decode_part_floats(c->b.n_tok, (int)a->n_head, (int)a->head_dim,
                                                         cu__attn_splits(c, (int)a->n_head, (int)a->n_kv_head, (int)a->head_dim))
                            : kc_attention_part_floats(c->b.n_tok, (int)a->n_head, (int)a->head_dim,
                                                       kc_attention_splits(c->b.n_tok, (int)a->n_head, 1 << 30));
      if (n > need) need = n;
      break;
    }
    case OP_rope: {
      const cu_args_rope_t *a = &r->a.rope;
      if (!cu__rope_table(be, (float)a->theta, (int)a->n_rot, (int)a->bf16)) return -1;
      break;
    }
    case OP_attn_qk_prep: {
      const cu_args_attn_qk_prep_t *a = &r->a.attn_qk_prep;
      if (!cu__rope_table(be, (float)a->theta, (int)a->n_rot, (int)a->bf16)) return -1;
      break;
    }
    case OP_gdn_conv_qkv: {
      const cu_args_gdn_conv_qkv_t *a = &r->a.gdn_conv_qkv;
      const size_t n =
          cu__gdn_conv_qkv_scratch(c->b.n_tok, c->b.n_seq, (int)a->n_k, (int)a->d_k, (int)a->n_v, (int)a->d_v);
      if (n > need) need = n;
      break;
    }
    case OP_matmul: x = r->a.matmul.x, rows = (int)r->a.matmul.rows; break;
    case OP_matmul_multi: x = r->a.matmul_multi.x, rows = (int)r->a.matmul_multi.rows; break;
    case OP_ffn_swiglu: x = r->a.ffn_swiglu.x, rows = (int)r->a.ffn_swiglu.rows; break;
    }
    if (x) { /* each weight's product as cu__matmul takes it */
      be_weight_t w[REC_MAX_W];
      const int n_w = rec_weights(r, w);
      for (int j = 0; j < n_w; j++) {
        size_t n = cu__bf16_gemm_floats(&w[j], rows);
        if (!n) n = cu__deq_gemm_floats(&w[j], rows);
        if (!n && ((uintptr_t)x & 15) == 0) n = cu__mmq_floats(&w[j], rows);
        if (n) {
          if (n > need) need = n;
        } else if (((uintptr_t)x & 15) != 0 || rows > KC_MATVEC_MAX_ROWS) {
          return -1; /* would take the dequantize + SGEMM path */
        }
      }
    }
  }
  if (need > c->scratch_cap && !cu__scratch(be, need)) return -1; /* growing it bumps buf_gen */
  return 0;
}

/* ---- per-op profile of one decode step (be_cuda_profile_arm / _get, backend_cuda.h) ---- */
#define CU_PROF_CHUNK 16     /* ops queued behind one host gate: far below the launch queue depth */
#define CU_PROF_GATE_MS 2000 /* a gate opens by itself after this long, so a stuck host never hangs */
#define CU_PROF_MAX_ROWS 128 /* distinct labels; the rest are summed into "(other ops)" */

/* Labels by OP_* id: the op names of CU_REC_OPS. */
static const char *const op_names[] = {
#define OP_NAME(name) [OP_##name] = #name,
    CU_REC_OPS(OP_NAME)
#undef OP_NAME
};

/* "name[ TYPE colsxrows[+[TYPE ]colsxrows...] xROWS[ PATH]]": weight matrices (not vectors)
 * of the record with the batch rows (a product's own x rows: the output head runs on the rows
 * that want logits); PATH, for products, the one the first weight takes: "gemm" (bf16
 * tensor-core GEMM), "deq-gemm" (fast prefill), "gpipe" (the pipelined decode product, judged on
 * the bytes of the weights of the first one's type), "mmq". */
static void op_label(const op_rec_t *r, int rows, char *buf, size_t n) {
  const int op = (int)r->op;
  const int product = op == OP_matmul || op == OP_matmul_multi || op == OP_ffn_swiglu;
  if (op == OP_matmul) rows = (int)r->a.matmul.rows;
  if (op == OP_matmul_multi) rows = (int)r->a.matmul_multi.rows;
  if (op == OP_ffn_swiglu) rows = (int)r->a.ffn_swiglu.rows;
  size_t len = (size_t)snprintf(buf, n, "%s", op_names[op]);
  be_weight_t w[REC_MAX_W];
  const int n_w = rec_weights(r, w);
  int n_mat = 0;
  int64_t prev_type = -1;
  for (int k = 0; k < n_w && len < n; k++) {
    if (!w[k].data || w[k].rows <= 1 || w[k].cols <= 1) continue;
    const int64_t t = w[k].type;
    len += (size_t)snprintf(buf + len, n - len, "%s%s%s%lldx%lld", n_mat ? "+" : " ",
                            t != prev_type ? dt_name((gt_type_t)t) : "", t != prev_type ? " " : "",
                            (long long)w[k].cols, (long long)w[k].rows);
    prev_type = t;
    n_mat++;
  }
  size_t gp_bytes = 0; /* the weights of w[0]'s type (a multi's run, a swiglu's gate + up) */
  for (int k = 0; k < n_w; k++)
    if (w[k].data && w[k].type == w[0].type) gp_bytes += w[k].row_bytes * (size_t)w[k].rows;
  if (n_mat && len < n)
    snprintf(buf + len, n - len, " x%d%s", rows,
             !product                                  ? ""
             : cu__bf16_gemm_floats(&w[0], rows)        ? " gemm"
             : cu__deq_gemm_floats(&w[0], rows)         ? " deq-gemm"
             : cu__gpipe_takes(&w[0], gp_bytes, rows)   ? " gpipe"
             : cu__mmq_floats(&w[0], rows)              ? " mmq"
                                                        : "");
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

/* Runs the recorded step (decode, or a prefill) eagerly with an event pair around each op, waits for it and
 * keeps the sums per label (c->prof_rows, c->prof_sum); then times graph replays. Gating needs
 * prepare_capture to succeed: it guarantees no op of the step synchronizes the stream (which
 * would wait on a closed gate). Without events (creation failed) the ops just run. */
static void profile_step(be_t *be) {
  be_cuda_t *c = CU_BE(be);
  const int n = c->n_rec, rows = c->b.n_tok;
  c->recording = 0;
  c->prof_state = CU_PROF_OFF;
  c->prof_steps++;
  /* a prefill runs ungated: prepare_capture sizes scratch for decode kernels (the split
   * attention of every token would ask for gigabytes at long prompts), and its ops outlast the
   * host's launches anyway; its own scratch was sized by the unprofiled steps before it */
  int gated = c->graph_batch && !cu_failed(be) && prepare_capture(be) == 0;
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
  KC_CUDA(CU_ERR(be), se);
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

/* Launches g, timed with prof_gev when graph replays of the profiled batch size are timed (decode
 * graphs). */
static int graph_launch(be_t *be, cu_graph_t *g, int n) {
  be_cuda_t *c = CU_BE(be);
  int timed = c->prof_state == CU_PROF_GRAPH && c->step_kind == BE_CUDA_STEP_DECODE && n == c->prof_sum.batch &&
              !c->prof_g_pending;
  if (timed && cudaEventRecord(c->prof_gev[0], c->stream) != cudaSuccess) {
    (void)cudaGetLastError(); /* a profiling failure never fails the step */
    timed = 0;
  }
  if (KC_CUDA(CU_ERR(be), cudaGraphLaunch(g->exec, c->stream))) return -1;
  if (timed && !(c->prof_g_pending = cudaEventRecord(c->prof_gev[1], c->stream) == cudaSuccess))
    (void)cudaGetLastError();
  c->graph_steps++;
  c->kind_graph[c->step_kind]++;
  return 0;
}

/* After the stream drained: adds a timed graph launch to the mean. */
void cu__prof_collect_graph(be_t *be) {
  be_cuda_t *c = CU_BE(be);
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
  be_cuda_t *c = CU_BE(be);
  c->prof_state = CU_PROF_ARMED;
  c->n_prof_rows = 0;
  c->prof_g_pending = 0;
  c->prof_sum = (be_cuda_prof_sum_t){0};
}

int be_cuda_profile_get(be_t *be, be_cuda_prof_t *out, int max, be_cuda_prof_sum_t *sum) {
  be_cuda_t *c = CU_BE(be);
  if (c->prof_g_pending) {
    if (cudaEventSynchronize(c->prof_gev[1]) != cudaSuccess) (void)cudaGetLastError();
    cu__prof_collect_graph(be);
  }
  const int armed = c->prof_state == CU_PROF_ARMED;
  c->prof_state = CU_PROF_OFF;
  if (sum) *sum = c->prof_sum;
  if (armed || !c->prof_rows) return 0;
  const int n = c->n_prof_rows < max ? c->n_prof_rows : max;
  if (n > 0) memcpy(out, c->prof_rows, sizeof *out * (size_t)n);
  return n;
}

/* How a recorded decode step runs; ranks that share a device agree on the largest (step_gate). */
enum { STEP_REPLAY = 0, STEP_CAPTURE = 1, STEP_EAGER = 2 };

/* A rendezvous of the ranks of a device-local communicator (comm.h step_gate; every rank of the
 * group calls it at the same point of the same step): *how becomes the largest value the ranks
 * brought. 0, or -1 with the error set when the communicator was aborted. */
static int step_gate(be_t *be, int *how) {
  be_cuda_t *c = CU_BE(be);
  int agreed = *how;
  if (c->comm->ops->step_gate(c->comm, be->rank, *how, &agreed)) {
    cu_fail(be, GT_ECANCELLED, "all_reduce", "another rank failed (communicator aborted)");
    return -1;
  }
  *how = agreed;
  return 0;
}

/* Captures the recorded ops into the graph of their batch size (a new one or an update);
 * 0 when g->exec is ready to launch, -1 when capture was refused (the ops can still run eagerly)
 * or failed (error set). */
static int capture_step(be_t *be, cu_graph_t *g) {
  be_cuda_t *c = CU_BE(be);
  cudaGraph_t graph = NULL;
  if (KC_CUDA(CU_ERR(be), cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal))) return -1;
  c->recording = 0;
  c->ar_captured = c->comm && c->comm->ops->step_gate; /* every rank captures this step: no rendezvous */
  kc_pdl_set_rows(c->b.n_tok);
  for (int k = 0; k < c->n_rec; k++) run_rec(be, &c->rec[k]);
  kc_pdl_set_rows(0);
  c->ar_captured = 0;
  c->recording = 1; /* the records stay until they ran (a refused capture runs them eagerly) */
  cudaError_t ce = cudaStreamEndCapture(c->stream, &graph);
  if (ce != cudaSuccess || cu_failed(be)) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return -1;
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
    if (KC_CUDA(CU_ERR(be), cudaGraphInstantiate(&g->exec, graph, 0))) {
      cudaGraphDestroy(graph);
      g->exec = NULL;
      return -1;
    }
  }
  cudaGraphDestroy(graph);
  op_rec_t *copy = realloc(g->rec, sizeof(op_rec_t) * (size_t)(c->n_rec ? c->n_rec : 1));
  if (!copy) {
    cu_fail(be, GT_ENOMEM, "graph", "op records");
    return -1;
  }
  g->rec = copy;
  memcpy(g->rec, c->rec, sizeof(op_rec_t) * (size_t)c->n_rec);
  g->n_rec = c->n_rec;
  g->kb = c->kb;
  g->buf_gen = c->buf_gen;
  c->captures++;
  c->kind_captures[c->step_kind]++;
  if (c->step_kind == BE_CUDA_STEP_DECODE) be_sizes_add(&c->captured, c->b.n_tok);
  return 0;
}

/* g can replay the recorded step: captured from the same records and batch view, no internal
 * buffer moved since. */
static int graph_matches(const be_cuda_t *c, const cu_graph_t *g) {
  return g->exec && g->buf_gen == c->buf_gen && g->n_rec == c->n_rec && !memcmp(&g->kb, &c->kb, sizeof c->kb) &&
         !memcmp(g->rec, c->rec, sizeof(op_rec_t) * (size_t)c->n_rec);
}

/* The graph for the current step (after prepare_capture): decode steps the graph of their batch
 * size; verify / drafter steps one of the up to CU_SHAPE_VARIANTS graphs of their shape: one that
 * matches the records (replay), else a free slot, else the least recently used of the shape's
 * (capture). Variants: a drafter step's records also depend on where its hidden rows come from
 * (the pass after a decode or a verify step, a chained row), so a shape may recur with a few
 * op sequences that would otherwise take turns re-capturing one graph. NULL: no graph shape (a
 * profiled prefill), or the shape has no graph and every slot is taken. */
#define CU_SHAPE_VARIANTS 4
static cu_graph_t *step_graph(be_cuda_t *c) {
  if (!c->graph_batch) return NULL;
  if (c->step_kind == BE_CUDA_STEP_DECODE) return &c->graphs[c->b.n_tok];
  cu_graph_t *lru = NULL;
  int n_same = 0;
  for (int i = 0; i < c->n_sgraphs; i++) {
    cu_graph_t *g = &c->sgraphs[i];
    if (memcmp(&g->shape, &c->shape, sizeof c->shape)) continue;
    if (graph_matches(c, g)) return g;
    n_same++;
    if (!lru || g->used < lru->used) lru = g;
  }
  if (n_same < CU_SHAPE_VARIANTS && c->n_sgraphs < BE_CUDA_SHAPE_GRAPHS) {
    cu_graph_t *g = &c->sgraphs[c->n_sgraphs++];
    memset(g, 0, sizeof *g);
    g->shape = c->shape;
    return g;
  }
  return lru;
}

/* Ends a recorded step: replays, updates or captures the graph of its batch size (decode) or
 * shape (verify, drafter: step_graph), or profiles it (be_cuda_profile_arm).
 * Ranks that share one device (a communicator with step_gate: comm_local.h) must never let a
 * stream wait for work a peer has not queued (engine/TP.md "Ranks sharing one GPU"), so there every
 * rank (1) prepares (scratch, tables: host calls that may synchronise the device) and picks replay /
 * capture / eager, (2) meets the others and takes the largest choice, so all run the step the same
 * way: eager runs the records with all_reduce's own per-call rendezvous; capture captures and
 * instantiates, then (3) meets again, all falling back to eager if any capture failed; (4) launches;
 * (5) meets once more, so that no rank makes a synchronising call before every graph is queued. */
void cu__finish_step(be_t *be) {
  be_cuda_t *c = CU_BE(be);
  if (!c->recording) return;
  const int gated = c->comm && c->comm->ops->step_gate;
  if (c->prof_state == CU_PROF_ARMED && !gated) {
    profile_step(be);
    return;
  }
  const int n = c->b.n_tok;
  if (cu_failed(be)) {
    if (gated) c->comm->ops->abort(c->comm); /* nobody waits for this rank at the gates */
    cu__flush_eager(be);
    return;
  }
  int how = STEP_CAPTURE;
  cu_graph_t *g = NULL;
  if (!c->graph_batch || prepare_capture(be)) {
    how = STEP_EAGER;
  } else if (c->comm && !be_sizes_has(&c->comm_warm, n)) {
    /* a rank's first step of each token count runs eagerly: the communicator's lazy setup for
     * these all-reduce sizes (connections, buffers) happens outside capture (comm_nccl.h) */
    be_sizes_add(&c->comm_warm, n);
    how = STEP_EAGER;
  } else if (!(g = step_graph(c))) {
    how = STEP_EAGER;
  } else if (graph_matches(c, g)) {
    how = STEP_REPLAY;
  }
  if (gated && step_gate(be, &how)) {
    c->recording = 0;
    c->n_rec = 0;
    return;
  }
  if (how == STEP_CAPTURE) {
    int bad = capture_step(be, g) ? 1 : 0;
    if (gated && step_gate(be, &bad)) { /* every rank launches, or every rank runs eagerly */
      c->recording = 0;
      c->n_rec = 0;
      return;
    }
    if (bad || cu_failed(be)) how = STEP_EAGER;
  }
  if (how == STEP_EAGER) {
    cu__flush_eager(be);
    return;
  }
  c->recording = 0;
  c->n_rec = 0;
  g->used = ++c->graph_tick;
  graph_launch(be, g, n);
  int after = 0;
  if (gated) (void)step_gate(be, &after);
}

/* ---- the be_ops_t entries: cu_<name> records the call during a recorded step (the arguments into
 * a cu_args_<name>_t), else launches it at once (cu__<name>) ---- */
#define REC_SET(kind, v) REC_SET_##kind(v)
#define REC_SET_W(v) rec_w(&ra_->v, v);
#define REC_SET_WN(v) for (int k_ = 0; k_ < n; k_++) rec_w(&ra_->v[k_], v[k_]); /* n: the N argument */
#define REC_SET_N(v) ra_->v = v;
#define REC_SET_IN(v) ra_->v = v;
#define REC_SET_OUT(v) ra_->v = v;
#define REC_SET_OUTN(v) for (int k_ = 0; k_ < n; k_++) ra_->v[k_] = v[k_];
#define REC_SET_U32(v) ra_->v = v;
#define REC_SET_INT(v) ra_->v = v;
#define REC_SET_SIZE(v) ra_->v = v;
#define REC_SET_F(v) ra_->v = v;
#define REC_SET_ROPE_BF16(v) ra_->v = be->rope_freq_bf16 != 0;
/* checked before recording: the record holds at most BE_MATMUL_MULTI_MAX weights */
#define REC_CHECK(kind, v) REC_CHECK_##kind(v)
#define REC_CHECK_N(v)                                                                             \
  if (v < 1 || v > BE_MATMUL_MULTI_MAX) {                                                          \
    cu_fail(be, GT_EINVAL, op_names[op_id], "weight count out of [1, BE_MATMUL_MULTI_MAX]");      \
    return;                                                                                        \
  }
#define REC_CHECK_W(v)
#define REC_CHECK_WN(v)
#define REC_CHECK_IN(v)
#define REC_CHECK_OUT(v)
#define REC_CHECK_OUTN(v)
#define REC_CHECK_U32(v)
#define REC_CHECK_INT(v)
#define REC_CHECK_SIZE(v)
#define REC_CHECK_F(v)
#define REC_CHECK_ROPE_BF16(v)
/* the launcher's arguments: the op's, plus the current rope_freq_bf16 */
#define REC_EAGER(kind, v) REC_EAGER_##kind(v)
#define REC_EAGER_W(v) , v
#define REC_EAGER_WN(v) , v
#define REC_EAGER_N(v) , v
#define REC_EAGER_IN(v) , v
#define REC_EAGER_OUT(v) , v
#define REC_EAGER_OUTN(v) , v
#define REC_EAGER_U32(v) , v
#define REC_EAGER_INT(v) , v
#define REC_EAGER_SIZE(v) , v
#define REC_EAGER_F(v) , v
#define REC_EAGER_ROPE_BF16(v) , be->rope_freq_bf16 != 0

#define REC_OP(name)                                                                            \
  void cu_##name(be_t *be BE_ARGS_##name(BE_PARAM)) {                                           \
    enum { op_id = OP_##name };                                                                 \
    BE_ARGS_##name(REC_CHECK)                                                                   \
    if (CU_BE(be)->recording) {                                                                 \
      op_rec_t *r = rec_new(be, op_id);                                                         \
      if (r) {                                                                                  \
        cu_args_##name##_t *ra_ = &r->a.name;                                                     \
        BE_ARGS_##name(REC_SET)                                                                 \
        return;                                                                                 \
      }                                                                                         \
      cu__flush_eager(be); /* no memory for the record: what was recorded runs now, this too */ \
    }                                                                                           \
    cu__##name(be BE_ARGS_##name(REC_EAGER));                                                   \
  }
CU_REC_OPS(REC_OP)
#undef REC_OP
