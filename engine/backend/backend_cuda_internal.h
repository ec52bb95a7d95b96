/* engine/backend/backend_cuda_internal.h — state of the CUDA backend, shared by its source files
 * (backend_cuda.c: memory, caches, batch, sync / download and the ops table; backend_cuda_ops.c:
 * the launch of each op (kernels/, one op per .cu); backend_cuda_graph.c: op records, decode steps
 * as CUDA graphs and the per-op profile). One stream of one GPU.
 *
 * Activations and the recurrent states are fp32 in device memory, the paged KV pools bf16 (fp32
 * with kv_set_type(F32), `--kv-dtype fp32`); weights
 * stay in their GGUF type. Products with BF16 weights and >= 4 rows run a bf16 tensor-core GEMM
 * on x split into two bf16 halves (~2^-17 relative on x, W read once); other products of <= 32
 * rows run a matvec that reads each weight row once for all rows; larger ones dequantize row
 * tiles of W to fp32 scratch and run a cuBLAS SGEMM (no TF32). Decode, verify and drafter steps replay CUDA graphs
 * (see "decode steps as CUDA graphs" in backend_cuda_graph.c). Errors: shape problems are caught on
 * the host before launch; bad ids / positions / slots are flagged by the kernels in a device
 * word read at sync; CUDA and cuBLAS failures are recorded with KC_CUDA / KC_CUBLAS. The first
 * error of a step is sticky (be->err) and returned by sync / download; ops do nothing after it. */
#ifndef GANTRY_ENGINE_BACKEND_CUDA_INTERNAL_H
#define GANTRY_ENGINE_BACKEND_CUDA_INTERNAL_H

#include "engine/backend/backend_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/common.cuh"
#include "kernels/matvec.cuh"
#include "kernels/sample.cuh"

#define CU_ROPE_TABLES 8

struct op_rec;
/* The shape a verify / drafter graph is kept for: n_seq sequences of q tokens each, n_out output
 * rows, the drafter tag (be_batch_t.drafter). Decode graphs are kept by batch size alone. */
typedef struct {
  int n_seq, q, n_out, drafter;
} cu_shape_t;
typedef struct {
  cudaGraphExec_t exec;
  struct op_rec *rec; /* the records it was captured from */
  int n_rec;
  kc_batch_t kb;
  uint64_t buf_gen;
  cu_shape_t shape;   /* shape graphs (be_cuda_t.sgraphs) */
  uint64_t used;      /* graph_tick of its last launch (the least recently used variant is replaced) */
} cu_graph_t;

typedef struct {
  be_t base;
  int device;
  cudaStream_t stream;
  struct be_comm *comm;    /* the group's communicator (be_cuda_create_rank; not owned), NULL: one rank */
  be_sizes_t comm_warm;    /* batch sizes whose decode step ran its collectives eagerly once */
  int ar_captured;         /* capturing a step every rank agreed on (comm step_gate): all_reduce_captured */
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
  /* paged KV: pool [layer][K|V][n_blocks * block_tokens * kv_dim] of bf16 (kv_bf16, the
   * default) or fp32 elements; kv_bf16_next: the type the next kv_init uses (kv_set_type) */
  int kv_layers, kv_blocks, kv_block_tokens, kv_dim;
  int kv_bf16, kv_bf16_next;
  void *kv_pool;
  /* recurrent state: conv [layer][slot][conv_dim], ssm [layer][slot][ssm_dim] */
  int st_layers, st_slots;
  size_t conv_dim, ssm_dim;
  float *conv, *ssm;
  /* fp32 scratch for GEMM tiles and attention partials */
  float *scratch;
  size_t scratch_cap;
  /* graphs (see "decode steps as CUDA graphs") */
  int graphs_on;           /* GANTRY_CUDA_GRAPHS=0 turns them off */
  int gdn_chunk_min;       /* tokens a sequence must bring for the chunked GDN scan (GANTRY_GDN_CHUNK_MIN) */
  int fa_min;              /* tokens a sequence must bring for the flash prefill attention (GANTRY_ATTN_FLASH_MIN; 0: off) */
  int recording;           /* the current step is being recorded (a graph shape, or a profile) */
  /* the current batch has a graph shape (decode, or a uniform verify / drafter step): its kernels'
   * launch shapes depend only on that shape (attention split counts from max_blocks, not from the
   * positions), whether or not graphs are on, so a graph of the shape serves every such step */
  int graph_batch;
  int step_kind;           /* BE_CUDA_STEP_* of the current batch, -1: none (prefill, mixed) */
  cu_shape_t shape;        /* the current batch's shape (graph_batch) */
  struct op_rec *rec;      /* [n_rec] recorded ops of the current step */
  int n_rec, cap_rec;
  uint64_t buf_gen;        /* bumped whenever scratch or the batch buffer moves */
  cu_graph_t graphs[BE_GRAPH_MAX_SEQS + 1]; /* decode graphs by batch size */
  cu_graph_t sgraphs[BE_CUDA_SHAPE_GRAPHS]; /* verify / drafter graphs by shape, n_sgraphs in use */
  int n_sgraphs;
  uint64_t graph_tick;     /* graph launches so far (cu_graph_t.used) */
  long graph_steps, eager_steps, captures; /* sums of the kind_* counters */
  long kind_graph[BE_CUDA_STEP_KINDS], kind_eager[BE_CUDA_STEP_KINDS], kind_captures[BE_CUDA_STEP_KINDS];
  be_sizes_t captured;     /* batch sizes with a graph */
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
  /* cu_argmax_dev: greedy rows (all-zero kc_sample_row_t: temperature 0), greedy_cap of them */
  kc_sample_row_t *d_greedy;
  int greedy_cap;
} be_cuda_t;

#define CU_BE(be) ((be_cuda_t *)(be))
#define CU_ERR(be) (&(be)->err)

static inline int cu_fail(be_t *be, int code, const char *op, const char *what) {
  if (be->err.code == GT_OK) gt_err_set(&be->err, code, "cuda %s: %s", op, what);
  return code;
}
static inline int cu_failed(be_t *be) { return be->err.code != GT_OK; }
/* The current step (of a counted kind) ran eagerly. */
static inline void cu_count_eager(be_cuda_t *c) {
  if (c->step_kind < 0) return;
  c->eager_steps++;
  c->kind_eager[c->step_kind]++;
}
enum { CU_PROF_OFF, CU_PROF_ARMED, CU_PROF_GRAPH };

/* Layout of the caches: K and V of one layer in the KV pool; conv / ssm state of (layer, slot). */
static inline kc_kv_t kv_of(be_cuda_t *c, int layer) {
  const size_t per = (size_t)c->kv_blocks * c->kv_block_tokens * c->kv_dim * (c->kv_bf16 ? 2 : sizeof(float));
  char *base = (char *)c->kv_pool;
  kc_kv_t kv = {.k = base + (size_t)layer * 2 * per, .v = base + ((size_t)layer * 2 + 1) * per,
                .n_blocks = c->kv_blocks, .block_tokens = c->kv_block_tokens, .kv_dim = c->kv_dim,
                .bf16 = c->kv_bf16};
  return kv;
}
static inline float *conv_state(be_cuda_t *c, int layer, int slot) {
  return c->conv + ((size_t)layer * c->st_slots + slot) * c->conv_dim;
}
static inline float *ssm_state(be_cuda_t *c, int layer, int slot) {
  return c->ssm + ((size_t)layer * c->st_slots + slot) * c->ssm_dim;
}

/* The three source files call downwards only: backend_cuda.c (ops table, memory, caches, batch,
 * sync) -> backend_cuda_graph.c (op records, graphs, profile) -> backend_cuda_ops.c (launches,
 * scratch). */

/* ---- backend_cuda_ops.c: eager launches on c->stream, and what they share ---- */

/* Returns scratch of at least n floats (grown after the stream drains), or NULL (error set).
 * Growing it bumps buf_gen. */
float *cu__scratch(be_t *be, size_t n);
/* Scratch floats the bf16 split GEMM needs for w and rows, or 0 when w does not take it. */
size_t cu__bf16_gemm_floats(const be_weight_t *w, int rows);
/* Scratch floats the mmq path needs for w and rows, or 0 when w does not take it. */
size_t cu__mmq_floats(const be_weight_t *w, int rows);
/* 1 when a product of rows rows over w (and weights of its type, wbytes weight bytes in all) takes
 * the pipelined decode product (kernels/gemv_pipe.cuh; no scratch). */
int cu__gpipe_takes(const be_weight_t *w, size_t wbytes, int rows);
/* 1 while the calling thread's backend runs a batch of one token per sequence (backend_cuda_ops.c
 * x_parts) */
extern __thread int cu__t_decode_batch;
/* Scratch floats the fast prefill product (dequantize to bf16 + cuBLAS GEMM, "fast" prefill
 * precision) needs for w and rows, or 0 when w does not take it. */
size_t cu__deq_gemm_floats(const be_weight_t *w, int rows);
/* The device RoPE inverse-frequency table of (theta, n_rot, bf16), made once; NULL on failure
 * (error set). Not callable while capturing. */
const double *cu__rope_table(be_t *be, float theta, int n_rot, int bf16);
/* bf16 pools: the tokens a sequence must bring to take the flash prefill kernel (INT_MAX: none
 * does), and the split count of the decode kernel for the current batch (graph shapes: from
 * max_blocks, so it is the same for every step a graph replays) */
int cu__attn_fa_min(const be_cuda_t *c, int head_dim);
int cu__attn_splits(const be_cuda_t *c, int n_head, int n_kv_head, int head_dim);
/* floats of scratch cu__gdn_conv_qkv takes for a batch of n_tok tokens / n_seq sequences (0:
 * none, the fused kernel serves those shapes) */
size_t cu__gdn_conv_qkv_scratch(int n_tok, int n_seq, int n_k, int d_k, int n_v, int d_v);

/* CU_PARAM: the parameters of a launcher, those of the op (BE_PARAM) plus the ROPE_BF16 value
 * the op was called (recorded) with as `int bf16`. */
#define CU_PARAM(kind, name) CU_PARAM_##kind(name)
#define CU_PARAM_W(n) BE_PARAM_W(n)
#define CU_PARAM_WN(n) BE_PARAM_WN(n)
#define CU_PARAM_N(n) BE_PARAM_N(n)
#define CU_PARAM_IN(n) BE_PARAM_IN(n)
#define CU_PARAM_OUT(n) BE_PARAM_OUT(n)
#define CU_PARAM_OUTN(n) BE_PARAM_OUTN(n)
#define CU_PARAM_U32(n) BE_PARAM_U32(n)
#define CU_PARAM_INT(n) BE_PARAM_INT(n)
#define CU_PARAM_SIZE(n) BE_PARAM_SIZE(n)
#define CU_PARAM_F(n) BE_PARAM_F(n)
#define CU_PARAM_ROPE_BF16(n) , int n

/* The ops the decode graphs record: those of BE_OPS plus the all-reduce of a rank over its
 * communicator (x[n] fp32 summed in place over the ranks, queued on the backend's stream), so
 * that graph replays include it. be_ops_t.all_reduce (cu_rank_all_reduce) records it only for a
 * backend with a communicator (be_cuda_create_rank); without one it does nothing. */
#define BE_ARGS_all_reduce(A) A(OUT, x) A(SIZE, n)
#define CU_REC_OPS(X) BE_OPS(X) X(all_reduce)

/* cu__<op>: the eager launch of each op of CU_REC_OPS (engine/backend/backend.h), arguments as the
 * op's. Each does nothing once be->err is set and records a shape problem there (sticky). */
#define CU_LAUNCH_DECL(name) void cu__##name(be_t *be BE_ARGS_##name(CU_PARAM));
CU_REC_OPS(CU_LAUNCH_DECL)
#undef CU_LAUNCH_DECL

/* ---- backend_cuda_graph.c ---- */

/* Runs the recorded ops of the current step eagerly and stops recording (no-op when not
 * recording): called before anything else touches the stream. */
void cu__flush_eager(be_t *be);
/* Ends a recorded step: replays, updates or captures the graph of its batch size (decode) or
 * shape (verify, drafter), or profiles it; no-op when not recording. */
void cu__finish_step(be_t *be);
/* After the stream drained: adds a timed graph launch to the profile mean. */
void cu__prof_collect_graph(be_t *be);
/* cu_<op>: the be_ops_t entries of the ops: recorded during a decode step, else launched at once
 * (cu__<op>). */
#define CU_OP_DECL(name) void cu_##name(be_t *be BE_ARGS_##name(BE_PARAM));
CU_REC_OPS(CU_OP_DECL)
#undef CU_OP_DECL

#endif
