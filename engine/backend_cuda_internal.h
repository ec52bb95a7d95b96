/* engine/backend_cuda_internal.h — state of the CUDA backend, shared by its source files
 * (backend_cuda.c: memory, caches, batch, sync / download and the ops table; backend_cuda_ops.c:
 * the launch of each op (kernels/, one op per .cu); backend_cuda_graph.c: op records, decode steps
 * as CUDA graphs and the per-op profile). One stream of one GPU.
 *
 * Activations, the paged KV pools and the recurrent states are fp32 in device memory; weights
 * stay in their GGUF type. Products with BF16 weights and >= 4 rows run a bf16 tensor-core GEMM
 * on x split into two bf16 halves (~2^-17 relative on x, W read once); other products of <= 32
 * rows run a matvec that reads each weight row once for all rows; larger ones dequantize row
 * tiles of W to fp32 scratch and run a cuBLAS SGEMM (no TF32). Decode steps replay CUDA graphs
 * (see "decode steps as CUDA graphs" in backend_cuda_graph.c). Errors: shape problems are caught on
 * the host before launch; bad ids / positions / slots are flagged by the kernels in a device
 * word read at sync; CUDA and cuBLAS failures are recorded with KC_CUDA / KC_CUBLAS. The first
 * error of a step is sticky (be->err) and returned by sync / download; ops do nothing after it. */
#ifndef GANTRY_ENGINE_BACKEND_CUDA_INTERNAL_H
#define GANTRY_ENGINE_BACKEND_CUDA_INTERNAL_H

#include "engine/backend_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/common.cuh"
#include "kernels/matvec.cuh"
#include "kernels/sample.cuh"

#define CU_ROPE_TABLES 8

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
  int gdn_chunk_min;       /* tokens a sequence must bring for the chunked GDN scan (GANTRY_GDN_CHUNK_MIN) */
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

static inline int fail(be_t *be, int code, const char *op, const char *what) {
  if (be->err.code == GT_OK) gt_err_set(&be->err, code, "cuda %s: %s", op, what);
  return code;
}
static inline int failed(be_t *be) { return be->err.code != GT_OK; }
enum { CU_PROF_OFF, CU_PROF_ARMED, CU_PROF_GRAPH };

/* Layout of the caches: K and V of one layer in the KV pool; conv / ssm state of (layer, slot). */
static inline kc_kv_t kv_of(be_cuda_t *c, int layer) {
  size_t per = (size_t)c->kv_blocks * c->kv_block_tokens * c->kv_dim;
  kc_kv_t kv = {.k = c->kv_pool + (size_t)layer * 2 * per, .v = c->kv_pool + ((size_t)layer * 2 + 1) * per,
                .n_blocks = c->kv_blocks, .block_tokens = c->kv_block_tokens, .kv_dim = c->kv_dim};
  return kv;
}
static inline float *conv_state(be_cuda_t *c, int layer, int slot) {
  return c->conv + ((size_t)layer * c->st_slots + slot) * c->conv_dim;
}
static inline float *ssm_state(be_cuda_t *c, int layer, int slot) {
  return c->ssm + ((size_t)layer * c->st_slots + slot) * c->ssm_dim;
}

/* ---- backend_cuda.c ---- */

/* Returns scratch of at least n floats (grown after the stream drains), or NULL (error set).
 * Growing it bumps buf_gen. */
float *cu__scratch(be_t *be, size_t n);

/* ---- backend_cuda_ops.c: eager launches on c->stream, arguments as the be_ops_t op of the
 * name. Each does nothing once be->err is set and records a shape problem there (sticky). ---- */

/* Scratch floats the bf16 split GEMM needs for w and rows, or 0 when w does not take it. */
size_t cu__bf16_gemm_floats(const be_weight_t *w, int rows);
size_t cu__mmq_floats(const be_weight_t *w, int rows);
/* The device RoPE inverse-frequency table of (theta, n_rot, bf16), made once; NULL on failure
 * (error set). Not callable while capturing. */
const double *cu__rope_table(be_t *be, float theta, int n_rot, int bf16);
void cu__embed(be_t *be, const be_weight_t *w, float *out);
void cu__gather_out(be_t *be, const float *x, float *out, int d);
void cu__matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows);
void cu__matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[], int rows);
void cu__ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate, float *up,
                   int rows);
void cu__rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps);
void cu__add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows, int d,
                    float eps);
void cu__add(be_t *be, float *y, const float *x, size_t n);
/* bf16 (here and in cu__attn_qk_prep): the rope_freq_bf16 the op was called (recorded) with */
void cu__rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta, int bf16);
void cu__swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n);
void cu__mul_sigmoid(be_t *be, float *x, const float *g, size_t n);
void cu__copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols);
void cu__kv_store(be_t *be, int layer, const float *k, const float *v);
void cu__attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                  float scale);
void cu__attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *qn,
                     const be_weight_t *kn, int n_head, int n_kv_head, int hd, int n_rot, float theta, float eps,
                     int bf16);
void cu__conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K);
void cu__l2norm(be_t *be, float *x, int rows, int d, float eps, float scale);
/* floats of scratch cu__gdn_conv_qkv takes for a batch of n_tok tokens / n_seq sequences (0:
 * none, the fused kernel serves those shapes) */
size_t cu__gdn_conv_qkv_scratch(int n_tok, int n_seq, int n_k, int d_k, int n_v, int d_v);
void cu__gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *q, float *k, float *v,
                      int n_k, int d_k, int n_v, int d_v, float eps, float q_scale);
void cu__gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                  const be_weight_t *dt_bias, float *g, float *beta, int n_v);
void cu__gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v, const float *g,
                 const float *beta, float *out, int n_k, int n_v, int d_k, int d_v);
void cu__rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out, int rows, int d,
                      float eps);

/* ---- backend_cuda_graph.c ---- */

/* Runs the recorded ops of the current step eagerly and stops recording (no-op when not
 * recording): called before anything else touches the stream. */
void cu__flush_eager(be_t *be);
/* Ends a recorded decode step: replays, updates or captures the graph of its batch size (or
 * profiles it); no-op when not recording. */
void cu__finish_step(be_t *be);
/* After the stream drained: adds a timed graph launch to the profile mean. */
void cu__prof_collect_graph(be_t *be);
/* The be_ops_t entries of the ops: recorded during a decode step, else launched at once (do_*). */
void cu_embed(be_t *be, const be_weight_t *w, float *out);
void cu_gather_out(be_t *be, const float *x, float *out, int d);
void cu_matmul(be_t *be, const be_weight_t *w, const float *x, float *out, int rows);
void cu_rmsnorm(be_t *be, const float *x, const be_weight_t *w, float *out, int rows, int d, float eps);
void cu_add_rmsnorm(be_t *be, float *x, const float *delta, const be_weight_t *w, float *out, int rows, int d,
                    float eps);
void cu_add(be_t *be, float *y, const float *x, size_t n);
void cu_rope(be_t *be, float *x, int n_head, int head_dim, int n_rot, float theta);
void cu_swiglu(be_t *be, const float *gate, const float *up, float *out, size_t n);
void cu_mul_sigmoid(be_t *be, float *x, const float *g, size_t n);
void cu_copy2d(be_t *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, int rows, int cols);
void cu_kv_store(be_t *be, int layer, const float *k, const float *v);
void cu_attention(be_t *be, int layer, const float *q, float *out, int n_head, int n_kv_head, int head_dim,
                  float scale);
void cu_conv1d_silu(be_t *be, int layer, const float *x, float *out, const be_weight_t *w, int C, int K);
void cu_l2norm(be_t *be, float *x, int rows, int d, float eps, float scale);
void cu_gdn_gates(be_t *be, const float *alpha, const float *beta_in, const be_weight_t *a,
                  const be_weight_t *dt_bias, float *g, float *beta, int n_v);
void cu_gdn_scan(be_t *be, int layer, const float *q, const float *k, const float *v, const float *g,
                 const float *beta, float *out, int n_k, int n_v, int d_k, int d_v);
void cu_rmsnorm_gated(be_t *be, const float *x, const be_weight_t *w, const float *z, float *out, int rows, int d,
                      float eps);
void cu_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[], int rows);
void cu_ffn_swiglu(be_t *be, const be_weight_t *wg, const be_weight_t *wu, const float *x, float *gate, float *up,
                   int rows);
void cu_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *q_norm,
                     const be_weight_t *k_norm, int n_head, int n_kv_head, int head_dim, int n_rot, float theta,
                     float eps);
void cu_gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *q, float *k, float *v,
                     int n_k, int d_k, int n_v, int d_v, float eps, float q_scale);

#endif
