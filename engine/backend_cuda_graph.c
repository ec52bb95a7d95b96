/* engine/backend_cuda_graph.c — decode steps of the CUDA backend as CUDA graphs: the op records,
 * the be_ops_t entries that record (or launch at once), the eager flush, capture / update / replay
 * of the graph of each batch size, and the per-op profile mode (be_cuda_profile_arm / _get). */
#include "engine/backend_cuda_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.cuh"

#include "common/clock.h"

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
  OP_MATMUL_MULTI, OP_FFN_SWIGLU, OP_ATTN_QK_PREP, OP_GDN_CONV_QKV
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
  case OP_EMBED: cu__embed(be, &w0, p0); break;
  case OP_GATHER: cu__gather_out(be, p0, p1, (int)i[0]); break;
  case OP_MATMUL: cu__matmul(be, &w0, p0, p1, (int)i[0]); break;
  case OP_RMSNORM: cu__rmsnorm(be, p0, &w0, p1, (int)i[0], (int)i[1], (float)r->f[0]); break;
  case OP_ADD_RMSNORM: cu__add_rmsnorm(be, p0, p1, &w0, p2, (int)i[0], (int)i[1], (float)r->f[0]); break;
  case OP_ADD: cu__add(be, p0, p1, (size_t)i[0]); break;
  case OP_ROPE: cu__rope(be, p0, (int)i[0], (int)i[1], (int)i[2], (float)r->f[0], (int)i[3]); break;
  case OP_SWIGLU: cu__swiglu(be, p0, p1, p2, (size_t)i[0]); break;
  case OP_MUL_SIGMOID: cu__mul_sigmoid(be, p0, p1, (size_t)i[0]); break;
  case OP_COPY2D: cu__copy2d(be, p0, (size_t)i[0], p1, (size_t)i[1], (int)i[2], (int)i[3]); break;
  case OP_KV_STORE: cu__kv_store(be, (int)i[0], p0, p1); break;
  case OP_ATTENTION: cu__attention(be, (int)i[0], p0, p1, (int)i[1], (int)i[2], (int)i[3], (float)r->f[0]); break;
  case OP_CONV1D: cu__conv1d_silu(be, (int)i[0], p0, p1, &w0, (int)i[1], (int)i[2]); break;
  case OP_L2NORM: cu__l2norm(be, p0, (int)i[0], (int)i[1], (float)r->f[0], (float)r->f[1]); break;
  case OP_GDN_GATES: cu__gdn_gates(be, p0, p1, &w0, &w1, p2, p3, (int)i[0]); break;
  case OP_GDN_SCAN:
    cu__gdn_scan(be, (int)i[0], p0, p1, p2, p3, p4, p5, (int)i[1], (int)i[2], (int)i[3], (int)i[4]);
    break;
  case OP_RMSNORM_GATED: cu__rmsnorm_gated(be, p0, &w0, p1, p2, (int)i[0], (int)i[1], (float)r->f[0]); break;
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
    cu__matmul_multi(be, n, wl, p0, outs, (int)i[0]);
    break;
  }
  case OP_FFN_SWIGLU: cu__ffn_swiglu(be, &w0, &w1, p0, p1, p2, (int)i[0]); break;
  case OP_ATTN_QK_PREP:
    cu__attn_qk_prep(be, (int)i[0], p0, p1, p2, &w0, &w1, (int)i[1], (int)i[2], (int)i[3], (int)i[4], (float)r->f[0],
                    (float)r->f[1], (int)i[5]);
    break;
  case OP_GDN_CONV_QKV:
    cu__gdn_conv_qkv(be, (int)i[0], p0, &w0, (int)i[1], p1, p2, p3, (int)i[2], (int)i[3], (int)i[4], (int)i[5],
                     (float)r->f[0], (float)r->f[1]);
    break;
  }
}

/* Runs the recorded ops of the current step eagerly and stops recording. */
void cu__flush_eager(be_t *be) {
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
      if (!cu__rope_table(be, (float)r->f[0], (int)r->i[2], r->i[3] != 0)) return -1;
    } else if (r->op == OP_ATTN_QK_PREP) {
      if (!cu__rope_table(be, (float)r->f[0], (int)r->i[4], r->i[5] != 0)) return -1;
    } else if (r->op == OP_GDN_CONV_QKV) {
      const size_t n = cu__gdn_conv_qkv_scratch(c->b.n_tok, c->b.n_seq, (int)r->i[2], (int)r->i[3], (int)r->i[4],
                                                (int)r->i[5]);
      if (n > need) need = n;
    } else if (r->op == OP_MATMUL || r->op == OP_MATMUL_MULTI || r->op == OP_FFN_SWIGLU) {
      /* x in p[0], rows in i[0]; each weight's product as cu__matmul takes it */
      const int n_w = r->op == OP_MATMUL ? 1 : r->op == OP_FFN_SWIGLU ? 2 : (int)r->i[1];
      for (int k = 0; k < n_w; k++) {
        const be_weight_t w = rec_get_w(r, k);
        size_t n = cu__bf16_gemm_floats(&w, (int)r->i[0]);
        if (!n && ((uintptr_t)r->p[0] & 15) == 0) n = cu__mmq_floats(&w, (int)r->i[0]);
        if (n) {
          if (n > need) need = n;
        } else if (((uintptr_t)r->p[0] & 15) != 0 || r->i[0] > KC_MATVEC_MAX_ROWS) {
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

/* Labels by OP_* id. An id without a name prints as "op#N": new ops only need a line here. */
static const char *const op_names[] = {
    [OP_EMBED] = "embed",         [OP_GATHER] = "gather_out",       [OP_MATMUL] = "matmul",
    [OP_RMSNORM] = "rmsnorm",     [OP_ADD_RMSNORM] = "add_rmsnorm", [OP_ADD] = "add",
    [OP_ROPE] = "rope",           [OP_SWIGLU] = "swiglu",           [OP_MUL_SIGMOID] = "mul_sigmoid",
    [OP_COPY2D] = "copy2d",       [OP_KV_STORE] = "kv_store",       [OP_ATTENTION] = "attention",
    [OP_CONV1D] = "conv1d_silu",  [OP_L2NORM] = "l2norm",           [OP_GDN_GATES] = "gdn_gates",
    [OP_GDN_SCAN] = "gdn_scan",   [OP_RMSNORM_GATED] = "rmsnorm_gated",
    [OP_MATMUL_MULTI] = "matmul_multi", [OP_FFN_SWIGLU] = "ffn_swiglu", [OP_ATTN_QK_PREP] = "attn_qk_prep",
    [OP_GDN_CONV_QKV] = "gdn_conv_qkv",
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
    snprintf(buf + len, n - len, " x%d%s", rows, cu__bf16_gemm_floats(&w, rows) ? " gemm" : cu__mmq_floats(&w, rows) ? " mmq" : "");
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
void cu__prof_collect_graph(be_t *be) {
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

/* Ends a recorded decode step: replays, updates or captures the graph of its batch size (or
 * profiles it: be_cuda_profile_arm). */
void cu__finish_step(be_t *be) {
  be_cuda_t *c = CU(be);
  if (!c->recording) return;
  if (c->prof_state == CU_PROF_ARMED) {
    profile_step(be);
    return;
  }
  const int n = c->b.n_tok;
  cu_graph_t *g = &c->graphs[n];
  if (failed(be) || prepare_capture(be)) {
    cu__flush_eager(be);
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
    cu__flush_eager(be);
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
      cu__flush_eager(be);
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
      cu__flush_eager(be);                           \
    }                                            \
  }                                              \
  if (r)

void cu_embed(be_t *be, const be_weight_t *w, float *out) {
  RECORD(OP_EMBED) { rec_w(r, 0, w); r->p[0] = out; return; }
  cu__embed(be, w, out);
}
void cu_gather_out(be_t *be, const float *x, float *out, int d) {
  RECORD(OP_GATHER) { r->p[0] = x; r->p[1] = out; r->i[0] = d; return; }
  cu__gather_out(be, x, out, d);
}
void cu_matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows) {
  RECORD(OP_MATMUL) { rec_w(r, 0, w); r->p[0] = x; r->p[1] = out; r->i[0] = rows; return; }
  cu__matmul(be, w, x, out, rows);
}
void cu_rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps) {
  RECORD(OP_RMSNORM) { rec_w(r, 0, w); r->p[0] = x; r->p[1] = out; r->i[0] = rows; r->i[1] = d; r->f[0] = eps; return; }
  cu__rmsnorm(be, x, w, out, rows, d, eps);
}
void cu_add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows, int d,
                    float eps) {
  RECORD(OP_ADD_RMSNORM) {
    rec_w(r, 0, w); r->p[0] = x; r->p[1] = delta; r->p[2] = out; r->i[0] = rows; r->i[1] = d; r->f[0] = eps;
    return;
  }
  cu__add_rmsnorm(be, x, delta, w, out, rows, d, eps);
}
void cu_add(be_t *be, float *y, const float *x, size_t n) {
  RECORD(OP_ADD) { r->p[0] = y; r->p[1] = x; r->i[0] = (int64_t)n; return; }
  cu__add(be, y, x, n);
}
void cu_rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta) {
  const int bf16 = be->rope_freq_bf16 != 0;
  RECORD(OP_ROPE) {
    r->p[0] = x; r->i[0] = n_head; r->i[1] = head_dim; r->i[2] = n_rot; r->i[3] = bf16; r->f[0] = theta;
    return;
  }
  cu__rope(be, x, n_head, head_dim, n_rot, theta, bf16);
}
void cu_swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n) {
  RECORD(OP_SWIGLU) { r->p[0] = gate; r->p[1] = up; r->p[2] = out; r->i[0] = (int64_t)n; return; }
  cu__swiglu(be, gate, up, out, n);
}
void cu_mul_sigmoid(be_t *be, float *x, const float *g, size_t n) {
  RECORD(OP_MUL_SIGMOID) { r->p[0] = x; r->p[1] = g; r->i[0] = (int64_t)n; return; }
  cu__mul_sigmoid(be, x, g, n);
}
void cu_copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols) {
  RECORD(OP_COPY2D) {
    r->p[0] = dst; r->p[1] = src; r->i[0] = (int64_t)dst_ld; r->i[1] = (int64_t)src_ld; r->i[2] = rows; r->i[3] = cols;
    return;
  }
  cu__copy2d(be, dst, dst_ld, src, src_ld, rows, cols);
}
void cu_kv_store(be_t *be, int layer, const float *k, const float *v) {
  RECORD(OP_KV_STORE) { r->i[0] = layer; r->p[0] = k; r->p[1] = v; return; }
  cu__kv_store(be, layer, k, v);
}
void cu_attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                  float scale) {
  RECORD(OP_ATTENTION) {
    r->i[0] = layer; r->p[0] = q; r->p[1] = out; r->i[1] = n_head; r->i[2] = n_kv_head; r->i[3] = head_dim;
    r->f[0] = scale;
    return;
  }
  cu__attention(be, layer, q, out, n_head, n_kv_head, head_dim, scale);
}
void cu_conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K) {
  RECORD(OP_CONV1D) { rec_w(r, 0, w); r->i[0] = layer; r->p[0] = x; r->p[1] = out; r->i[1] = C; r->i[2] = K; return; }
  cu__conv1d_silu(be, layer, x, out, w, C, K);
}
void cu_l2norm(be_t *be, float *x, int rows, int d, float eps, float scale) {
  RECORD(OP_L2NORM) { r->p[0] = x; r->i[0] = rows; r->i[1] = d; r->f[0] = eps; r->f[1] = scale; return; }
  cu__l2norm(be, x, rows, d, eps, scale);
}
void cu_gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                  const be_weight_t *dt_bias, float *g, float *beta, int n_v) {
  RECORD(OP_GDN_GATES) {
    rec_w(r, 0, a); rec_w(r, 1, dt_bias); r->p[0] = alpha; r->p[1] = beta_in; r->p[2] = g; r->p[3] = beta; r->i[0] = n_v;
    return;
  }
  cu__gdn_gates(be, alpha, beta_in, a, dt_bias, g, beta, n_v);
}
void cu_gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v, const float *g,
                 const float *beta, float *out, int n_k, int n_v, int d_k, int d_v) {
  RECORD(OP_GDN_SCAN) {
    r->i[0] = layer; r->p[0] = q; r->p[1] = k; r->p[2] = v; r->p[3] = g; r->p[4] = beta; r->p[5] = out;
    r->i[1] = n_k; r->i[2] = n_v; r->i[3] = d_k; r->i[4] = d_v;
    return;
  }
  cu__gdn_scan(be, layer, q, k, v, g, beta, out, n_k, n_v, d_k, d_v);
}
void cu_rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out, int rows,
                      int d, float eps) {
  RECORD(OP_RMSNORM_GATED) {
    rec_w(r, 0, w); r->p[0] = x; r->p[1] = z; r->p[2] = out; r->i[0] = rows; r->i[1] = d; r->f[0] = eps;
    return;
  }
  cu__rmsnorm_gated(be, x, w, z, out, rows, d, eps);
}
void cu_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[],
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
  cu__matmul_multi(be, n, w, x, out, rows);
}
void cu_ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate,
                   float *up, int rows) {
  RECORD(OP_FFN_SWIGLU) { rec_w(r, 0, wg); rec_w(r, 1, wu); r->p[0] = x; r->p[1] = gate; r->p[2] = up; r->i[0] = rows; return; }
  cu__ffn_swiglu(be, wg, wu, x, gate, up, rows);
}
void cu_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *q_norm,
                     const be_weight_t *k_norm, int n_head, int n_kv_head, int head_dim, int n_rot, float theta,
                     float eps) {
  const int bf16 = be->rope_freq_bf16 != 0;
  RECORD(OP_ATTN_QK_PREP) {
    rec_w(r, 0, q_norm); rec_w(r, 1, k_norm); r->p[0] = q; r->p[1] = k; r->p[2] = v; r->i[0] = layer;
    r->i[1] = n_head; r->i[2] = n_kv_head; r->i[3] = head_dim; r->i[4] = n_rot; r->i[5] = bf16;
    r->f[0] = theta; r->f[1] = eps;
    return;
  }
  cu__attn_qk_prep(be, layer, q, k, v, q_norm, k_norm, n_head, n_kv_head, head_dim, n_rot, theta, eps, bf16);
}
void cu_gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *q, float *k, float *v,
                     int n_k, int d_k, int n_v, int d_v, float eps, float q_scale) {
  RECORD(OP_GDN_CONV_QKV) {
    rec_w(r, 0, w); r->p[0] = x; r->p[1] = q; r->p[2] = k; r->p[3] = v; r->i[0] = layer; r->i[1] = K;
    r->i[2] = n_k; r->i[3] = d_k; r->i[4] = n_v; r->i[5] = d_v; r->f[0] = eps; r->f[1] = q_scale;
    return;
  }
  cu__gdn_conv_qkv(be, layer, x, w, K, q, k, v, n_k, d_k, n_v, d_v, eps, q_scale);
}
