/* engine/backend/backend.h — the ops model code is written against, once, for every backend.
 *
 * Contract
 * - All float* arguments are backend memory (host memory on the CPU backend, device memory on
 *   CUDA) obtained from be_alloc or offsets into it; model code never dereferences them.
 *   Activations are fp32 row-major: "[n, d]" means n rows of d contiguous floats.
 * - A step runs on one batch (be_set_batch): n_tok tokens from n_seq sequences, each
 *   sequence's tokens contiguous and in position order. Prefill chunks and decode tokens mix.
 * - Weights keep their GGUF type (be_weight_t). matmul computes out = x · Wᵀ with fp32
 *   accumulation, W of shape [rows, cols] (GGUF ne = {cols, rows}).
 * - KV cache: paged, blocks of `block_tokens` tokens; per attention layer a K pool and a V pool
 *   [n_blocks, block_tokens, kv_dim]. A sequence's logical block i lives in physical block
 *   block_table[seq * max_blocks + i]; token at position p sits in slot p % block_tokens.
 * - Recurrent state (hybrid models): per GDN layer and slot, a conv state [conv_dim] and an
 *   SSM state [ssm_dim] of fp32. A sequence whose first token in the batch has pos == 0 starts
 *   from zero state (the backend clears it); otherwise it continues from its slot.
 * - Ranks: model code runs on its rank's slice of the weights and calls be_all_reduce after
 *   row-parallel products (a no-op with one rank).
 * Every op is asynchronous with respect to the host except be_download and be_sync; errors
 * are sticky per step and returned by be_sync (and be_download). */
#ifndef GANTRY_ENGINE_BACKEND_H
#define GANTRY_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "format/dtype.h"

typedef struct be be_t;

/* Largest decode batch (sequences of one token each) a backend runs from a captured graph
 * (CUDA: one graph per size 1..BE_GRAPH_MAX_SEQS, captured at start by sched_warmup). Verify and
 * drafter steps of q tokens per sequence (every sequence the same q, 1 <= q <= BE_GRAPH_MAX_Q,
 * at most BE_GRAPH_MAX_SEQS tokens in all) have graphs of their own shape (kernels/README.md
 * "CUDA graphs"). */
#define BE_GRAPH_MAX_SEQS 256
#define BE_GRAPH_MAX_Q 9 /* 1 + SCHED_SPEC_MAX_K drafts */
#define BE_POS_SLOTS (BE_GRAPH_MAX_Q - 1) /* be_batch_t.state_pos_slot entries per sequence */
/* A set of batch sizes 0..BE_GRAPH_MAX_SEQS (bit n of w[n / 64]). */
typedef struct {
  uint64_t w[BE_GRAPH_MAX_SEQS / 64 + 1];
} be_sizes_t;
static inline void be_sizes_add(be_sizes_t *s, int n) {
  if (n >= 0 && n <= BE_GRAPH_MAX_SEQS) s->w[n >> 6] |= 1ull << (n & 63);
}
static inline int be_sizes_has(const be_sizes_t *s, int n) {
  return n >= 0 && n <= BE_GRAPH_MAX_SEQS && (s->w[n >> 6] >> (n & 63) & 1);
}
static inline int be_sizes_count(const be_sizes_t *s) {
  int c = 0;
  for (int i = 0; i <= BE_GRAPH_MAX_SEQS / 64; i++) c += __builtin_popcountll(s->w[i]);
  return c;
}

/* A weight matrix (or vector: rows = 1) in its storage type, in backend memory. */
typedef struct {
  gt_type_t type;
  int64_t rows;      /* output features */
  int64_t cols;      /* input features = elements per row */
  size_t row_bytes;  /* dt_row_bytes(type, cols) */
  void *data;        /* backend memory */
} be_weight_t;

/* One step's batch, host memory; the backend copies what it needs in be_set_batch. */
typedef struct {
  int n_tok;
  int n_seq;
  const int32_t *tok;         /* [n_tok] token ids */
  const int32_t *pos;         /* [n_tok] absolute positions */
  const int32_t *seq_first;   /* [n_seq] index of the sequence's first token in the batch */
  const int32_t *seq_ntok;    /* [n_seq] its tokens in this step */
  const int32_t *block_table; /* [n_seq * max_blocks] physical KV block ids, logical order */
  int max_blocks;
  const int32_t *state_slot;  /* [n_seq] recurrent-state slot, or NULL for non-hybrid models */
  /* Per-position recurrent states (speculative verify, hybrid models only), NULL: none.
   * [n_seq * BE_POS_SLOTS]: for sequence s with n = seq_ntok[s] tokens in the batch and each
   * j < n - 1, state_pos_slot[s * BE_POS_SLOTS + j] >= 0 is a slot that also receives the
   * recurrent state after the sequence's token j (conv state and SSM state of every GDN layer:
   * exactly the state feeding tokens 0..j alone would leave in state_slot[s]); -1: not wanted.
   * Entries j >= n - 1 are ignored; state_slot[s] ends with the state after its last token as
   * without it. A sequence with any entry >= 0 must have n <= BE_GRAPH_MAX_Q tokens (backends
   * fail the step with GT_EINVAL otherwise); position slots are distinct from each other and
   * from every state_slot of the batch; what they held before is overwritten. Used by the
   * scheduler to roll a rejected draft back by swapping slots (engine/SERVE.md). */
  const int32_t *state_pos_slot;
  int n_out;
  const int32_t *out_tok;     /* [n_out] batch token indices whose logits are wanted */
  int drafter;                /* 1: a drafter's step (engine/sched/spec_mtp.c) between the model's own: on
                                 CUDA its graphs are keyed apart, so it never displaces the model's graph
                                 of the same shape */
  /* Tokens already in backend memory (the MTP drafter's chain: engine/sched/spec_mtp.c), optional.
   * tok_src NULL: every token is tok[t]. Else for each t with tok_src[t] >= 0 the token is
   * tok_dev[tok_src[t]] (int32 backend memory written by earlier work on the backend, e.g. an
   * argmax_dev of the previous step; the caller keeps the index in range) and tok[t] is ignored
   * (tok still holds n_tok ints); tok_src[t] < 0: tok[t]. The backend copies those ids on the device, ordered after the
   * batch upload and before the step's ops (CUDA: a graph replay still reads its fixed token buffer),
   * so no id crosses to the host in between. */
  const int32_t *tok_src; /* [n_tok] host, or NULL */
  const int32_t *tok_dev; /* backend memory */
} be_batch_t;

/* Sampling parameters of one logits row for the optional `sample` op (no penalties: those need
 * the host-side history). As sampler_pick_t, plus the row's uniform draw. */
typedef struct be_sample_row {
  float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
  int top_k;         /* <= 0: off; 1: greedy */
  float top_p;       /* >= 1: off */
  float min_p;       /* <= 0: off */
  double u;          /* uniform in [0, 1), a multiple of 2^-53 (sampler_next_u) */
} be_sample_row_t;

/* ---- the ops of a step, each declared once ----
 * BE_OPS(X) expands X(name) for every op, in order; BE_ARGS_<name>(A) lists the op's arguments
 * after `be` as A(kind, name), one per argument, so that each piece of plumbing is derived from
 * here: the be_ops_t members below, the backends' ops tables (backend_cpu.c, backend_cuda.c), the
 * CUDA backend's op records, graph replay and per-op profile names (backend_cuda_graph.c), and
 * the op coverage of tests/gpu/test_cuda_ops.c. Argument kinds:
 *   W     const be_weight_t *       a weight
 *   WN    const be_weight_t *const [] n weights (n = the op's N argument, named n, first)
 *   N     int                       count of the WN / OUTN arguments, 1..BE_MATMUL_MULTI_MAX
 *   IN    const float *             backend memory the op reads
 *   OUT   float *                   backend memory the op writes (or reads and writes)
 *   OUTN  float *const []           n outputs
 *   U32   const uint32_t *          backend memory the op reads as 32-bit words (bitmasks, maps)
 *   INT   int,  SIZE  size_t,  F  float
 *   ROPE_BF16  not an argument: be->rope_freq_bf16 as the op reads it (ops whose result depends
 *              on it list it, last, so that a recorded call keeps the value it ran with)
 * Code generated from the list names its own locals with a trailing underscore (ra_, k_) so that
 * they never shadow an argument.
 * Adding an op: its contract comment and BE_ARGS_ line here and its name in BE_OPS, the CPU
 * reference cpu_<name>, the CUDA launcher cu__<name> (backend_cuda_ops.c) with its kernel in
 * kernels/<name>.cu, and its case in tests/gpu/test_cuda_ops.c. */

/* ---- dense ops on the current batch ---- */
/* embed: out[n_tok, w.cols] = dequant(w)[tok[t]] */
#define BE_ARGS_embed(A) A(W, w) A(OUT, out)
/* gather_out: out[i, :] = x[out_tok[i], :] for i < n_out (d floats per row) */
#define BE_ARGS_gather_out(A) A(IN, x) A(OUT, out) A(INT, d)
/* matmul: out[rows, w.rows] = x[rows, w.cols] · wᵀ */
#define BE_ARGS_matmul(A) A(W, w) A(IN, x) A(OUT, out) A(INT, rows)
/* rmsnorm: out[r] = x[r] / rms(x[r]) * w  over rows of d (w F32 [d]); out may equal x */
#define BE_ARGS_rmsnorm(A) A(IN, x) A(W, w) A(OUT, out) A(INT, rows) A(INT, d) A(F, eps)
/* add_rmsnorm: x += delta, then out = rmsnorm(x) (fused residual add) */
#define BE_ARGS_add_rmsnorm(A) A(OUT, x) A(IN, delta) A(W, w) A(OUT, out) A(INT, rows) A(INT, d) A(F, eps)
/* add: y[i] += x[i] */
#define BE_ARGS_add(A) A(OUT, y) A(IN, x) A(SIZE, n)
/* rope: NeoX RoPE in place on x[n_tok, n_head, head_dim]: rotates dims [0, n_rot) of each head,
 * pairing i with i + n_rot/2, angle pos[t] * theta^(-2i/n_rot) (frequencies rounded to bf16
 * when be->rope_freq_bf16) */
#define BE_ARGS_rope(A) A(OUT, x) A(INT, n_head) A(INT, head_dim) A(INT, n_rot) A(F, theta) A(ROPE_BF16, bf16)
/* swiglu: out[n] = silu(gate[n]) * up[n] */
#define BE_ARGS_swiglu(A) A(IN, gate) A(IN, up) A(OUT, out) A(SIZE, n)
/* mul_sigmoid: x[n] *= sigmoid(g[n]) */
#define BE_ARGS_mul_sigmoid(A) A(OUT, x) A(IN, g) A(SIZE, n)
/* copy2d: dst[r, 0:cols] = src[r, 0:cols] with leading dimensions (floats) dst_ld / src_ld */
#define BE_ARGS_copy2d(A) A(OUT, dst) A(SIZE, dst_ld) A(IN, src) A(SIZE, src_ld) A(INT, rows) A(INT, cols)

/* ---- attention over the paged KV cache ---- */
/* kv_store: writes k, v [n_tok, kv_dim] of the batch into layer's pools at each token's position */
#define BE_ARGS_kv_store(A) A(INT, layer) A(IN, k) A(IN, v)
/* attention: causal GQA, out[n_tok, n_head*head_dim]; token t attends to its sequence's
 * positions 0..pos[t]; head h uses kv head h / (n_head / n_kv_head); softmax(q·k * scale) */
#define BE_ARGS_attention(A) \
  A(INT, layer) A(IN, q) A(OUT, out) A(INT, n_head) A(INT, n_kv_head) A(INT, head_dim) A(F, scale)

/* ---- Gated DeltaNet (hybrid models); `layer` indexes GDN layers ---- */
/* conv1d_silu: causal depthwise conv over each sequence, continuing from its slot's conv state
 * (the last K-1 inputs), then SiLU: out[t, c] = silu(sum_j w[c, j] * x[t-K+1+j, c]).
 * x, out [n_tok, C]; w F32 [C, K]. Updates the conv state. */
#define BE_ARGS_conv1d_silu(A) A(INT, layer) A(IN, x) A(OUT, out) A(W, w) A(INT, C) A(INT, K)
/* l2norm: x[r] = x[r] * scale / sqrt(||x[r]||^2 + eps), rows of d (HF / fla's l2norm) */
#define BE_ARGS_l2norm(A) A(OUT, x) A(INT, rows) A(INT, d) A(F, eps) A(F, scale)
/* gdn_gates: g[t, h] = a[h] * softplus(alpha[t, h] + dt_bias[h]); beta[t, h] = sigmoid(beta_in[t, h])
 * (all [n_tok, n_v]; a, dt_bias F32 [n_v]); g and beta may alias alpha and beta_in */
#define BE_ARGS_gdn_gates(A) \
  A(IN, alpha) A(IN, beta_in) A(W, a) A(W, dt_bias) A(OUT, g) A(OUT, beta) A(INT, n_v)
/* gdn_scan: gated delta rule per sequence from its slot state S [n_v, d_k, d_v]; value head h
 * uses key head h % n_k. For each token: S = S * exp(g); S += k ⊗ beta * (v - Sᵀk); o = Sᵀq.
 * q, k [n_tok, n_k * d_k]; v, out [n_tok, n_v * d_v]; g, beta [n_tok, n_v]. Updates S. */
#define BE_ARGS_gdn_scan(A)                                                                               \
  A(INT, layer) A(IN, q) A(IN, k) A(IN, v) A(IN, g) A(IN, beta) A(OUT, out) A(INT, n_k) A(INT, n_v) \
  A(INT, d_k) A(INT, d_v)
/* rmsnorm_gated: out[r] = rmsnorm(x[r]) * w * silu(z[r]) over rows of d (w F32 [d]) */
#define BE_ARGS_rmsnorm_gated(A) A(IN, x) A(W, w) A(IN, z) A(OUT, out) A(INT, rows) A(INT, d) A(F, eps)

/* ---- fused ops, optional (NULL: model code runs the unfused sequence through the helpers
 * model_matmul_multi / model_swiglu_ffn / model_attn_qk_prep / model_gdn_conv_qkv of
 * engine/models/model.h). Each gives what its unfused sequence gives (bit for bit on the CPU
 * backend) ---- */
/* matmul_multi: out[i][rows, w[i]->rows] = x[rows, cols] · w[i]ᵀ for i < n,
 * 1 <= n <= BE_MATMUL_MULTI_MAX, every w[i]->cols == cols; outputs distinct and not aliasing x
 * (= n matmul calls) */
#define BE_ARGS_matmul_multi(A) A(N, n) A(WN, w) A(IN, x) A(OUTN, out) A(INT, rows)
/* ffn_swiglu: gate[rows, ff] = silu(x · wgᵀ) * (x · wuᵀ), wg and wu [ff, cols]; up [rows, ff] is
 * scratch the backend may use (contents undefined after) (= matmul wg, matmul wu, swiglu) */
#define BE_ARGS_ffn_swiglu(A) A(W, wg) A(W, wu) A(IN, x) A(OUT, gate) A(OUT, up) A(INT, rows)
/* attn_qk_prep: per-head rmsnorm in place of q [n_tok, n_head*head_dim] and k
 * [n_tok, n_kv_head*head_dim] (q_norm, k_norm F32 [head_dim]), NeoX rope on both (as the rope op,
 * honouring rope_freq_bf16), then kv_store(layer, k, v); n_kv_head*head_dim must be the pool's
 * kv_dim (= rmsnorm q, rmsnorm k, rope q, rope k, kv_store) */
#define BE_ARGS_attn_qk_prep(A)                                                                   \
  A(INT, layer) A(OUT, q) A(OUT, k) A(IN, v) A(W, q_norm) A(W, k_norm) A(INT, n_head) A(INT, n_kv_head) \
  A(INT, head_dim) A(INT, n_rot) A(F, theta) A(F, eps) A(ROPE_BF16, bf16)
/* gdn_conv_qkv: Gated DeltaNet input prep, C = 2*n_k*d_k + n_v*d_v channels: conv =
 * conv1d_silu(layer, x, w, C, K) (updates the conv state; x [n_tok, C], w F32 [C, K]), then
 * q [n_tok, n_k*d_k] = l2norm(conv[:, 0:kd]) * q_scale, k [n_tok, n_k*d_k] = l2norm(conv[:, kd:2kd])
 * (scale 1), v [n_tok, n_v*d_v] = conv[:, 2kd:C], kd = n_k*d_k, l2norm over rows of d_k with eps
 * (= conv1d_silu, 3 copy2d, 2 l2norm); q, k, v distinct and not aliasing x */
#define BE_ARGS_gdn_conv_qkv(A)                                                                      \
  A(INT, layer) A(IN, x) A(W, w) A(INT, K) A(OUT, q) A(OUT, k) A(OUT, v) A(INT, n_k) A(INT, d_k) A(INT, n_v) \
  A(INT, d_v) A(F, eps) A(F, q_scale)

/* ---- constrained decoding ---- */
/* Rows of logits_mask that are left alone (rmap value). */
#define BE_MASK_NONE 0xffffffffu
/* logits_mask: x [rows, n_vocab]; for each row r with slot = rmap[r] != BE_MASK_NONE, x[r, v] =
 * -inf for every v whose bit v % 32 of mask[slot * words + v / 32] is clear (words =
 * ceil(n_vocab / 32)); rows with BE_MASK_NONE are untouched. mask [n_slots, words] and rmap
 * [rows] are backend memory: the scheduler uploads only the masks of its constrained rows. */
#define BE_ARGS_logits_mask(A) A(OUT, x) A(U32, mask) A(U32, rmap) A(INT, rows) A(INT, n_vocab)

#define BE_OPS(X)                                                                                          \
  X(embed) X(gather_out) X(matmul) X(rmsnorm) X(add_rmsnorm) X(add) X(rope) X(swiglu) X(mul_sigmoid)     \
  X(copy2d) X(kv_store) X(attention) X(conv1d_silu) X(l2norm) X(gdn_gates) X(gdn_scan) X(rmsnorm_gated) \
  X(matmul_multi) X(ffn_swiglu) X(attn_qk_prep) X(gdn_conv_qkv) X(logits_mask)

/* A = BE_PARAM: the C parameters (", const be_weight_t *w, ..."), for prototypes */
#define BE_PARAM(kind, name) BE_PARAM_##kind(name)
#define BE_PARAM_W(n) , const be_weight_t *n
#define BE_PARAM_WN(n) , const be_weight_t *const n[]
#define BE_PARAM_N(n) , int n
#define BE_PARAM_IN(n) , const float *n
#define BE_PARAM_OUT(n) , float *n
#define BE_PARAM_OUTN(n) , float *const n[]
#define BE_PARAM_U32(n) , const uint32_t *n
#define BE_PARAM_INT(n) , int n
#define BE_PARAM_SIZE(n) , size_t n
#define BE_PARAM_F(n) , float n
#define BE_PARAM_ROPE_BF16(n)
/* A = BE_ARG: the arguments (", w, ..."), to forward a call */
#define BE_ARG(kind, name) BE_ARG_##kind(name)
#define BE_ARG_W(n) , n
#define BE_ARG_WN(n) , n
#define BE_ARG_N(n) , n
#define BE_ARG_IN(n) , n
#define BE_ARG_OUT(n) , n
#define BE_ARG_OUTN(n) , n
#define BE_ARG_U32(n) , n
#define BE_ARG_INT(n) , n
#define BE_ARG_SIZE(n) , n
#define BE_ARG_F(n) , n
#define BE_ARG_ROPE_BF16(n)

/* The memory of the device a backend allocates from (mem_info), in bytes. */
typedef struct be_mem_info {
  uint64_t free_bytes;  /* what can still be allocated now (after the weights, model buffers, ...) */
  uint64_t total_bytes;
  char what[48];        /* which memory, for logs: "host MemAvailable", "cuda:0" */
} be_mem_info_t;

typedef struct be_ops {
  const char *name;
  void (*destroy)(be_t *be);

  /* memory: alloc returns zeroed memory or NULL */
  void *(*alloc)(be_t *be, size_t bytes);
  void (*free)(be_t *be, void *p);
  int (*upload)(be_t *be, void *dst, const void *src, size_t bytes);
  int (*download)(be_t *be, void *dst, const void *src, size_t bytes); /* waits for the step */
  int (*sync)(be_t *be);

  /* caches */
  int (*kv_init)(be_t *be, int n_layers, int n_blocks, int block_tokens, int kv_dim);
  int (*state_init)(be_t *be, int n_layers, int n_slots, size_t conv_dim, size_t ssm_dim);
  int (*state_copy)(be_t *be, int dst_slot, int src_slot); /* all layers; snapshot/restore */
  int (*state_zero)(be_t *be, int slot);
  /* K and V of physical block src copied to block dst, every layer (forking a sequence: n > 1) */
  int (*kv_block_copy)(be_t *be, int dst_block, int src_block);

  int (*set_batch)(be_t *be, const be_batch_t *b);

  /* the ops of a step (BE_OPS above): void (*name)(be_t *be, its BE_ARGS_name arguments) */
#define BE_OP_MEMBER(name) void (*name)(be_t *be BE_ARGS_##name(BE_PARAM));
  BE_OPS(BE_OP_MEMBER)
#undef BE_OP_MEMBER

  /* ---- ranks ---- */
  void (*all_reduce)(be_t *be, float *x, size_t n);

  /* ---- optional (NULL when not applicable) ---- */
  /* decode, verify and drafter steps that ran without a captured graph (CUDA): every decode step
   * (one token per sequence) and drafter step, and every verify step (a sequence with more than
   * one output row) that did not replay or capture a graph counts, whatever the reason (graphs
   * off, a shape past the graph limits, e.g. sequences bringing different token counts, an op
   * that cannot be captured); steady decode must keep it at 0 */
  long (*eager_steps)(be_t *be);
  /* graphs captured or updated so far (CUDA): constant in steady decode; a rise mid-stream is a
   * re-capture (tens of ms on a large model) */
  long (*graph_captures)(be_t *be);
  /* decode batch sizes that have a captured graph into *out (CUDA) */
  void (*graph_sizes)(be_t *be, be_sizes_t *out);
  /* Samples one token per row of logits (backend memory [n_rows, n_vocab]) into host ids[n_rows]
   * with host rows[n_rows] (be_sample_row_t); semantics of sampler_pick (engine/backend/sampler.h).
   * Ends and waits for the step like download; returns the step's error. NULL: not supported. */
  int (*sample)(be_t *be, const float *logits, int n_rows, int n_vocab, const struct be_sample_row *rows,
                int32_t *ids);
  /* The greedy rows of `sample` (argmax, lowest id on ties: the same ids), but into backend memory
   * dev_ids[n_rows] (int32) and without waiting: it ends the step like sample (CUDA: the step's
   * graph, then the argmax, queued on the stream) and returns the step's error so far; a later
   * error surfaces at the next sync / download. What lets a chain of steps feed each step's ids to
   * the next (be_batch_t.tok_src) and bring them all back in one download. NULL: not supported. */
  int (*argmax_dev)(be_t *be, const float *logits, int n_rows, int n_vocab, int32_t *dev_ids);
  /* Free and total memory of the device this backend allocates from (CPU: the host's
   * /proc/meminfo MemAvailable / MemTotal; CUDA: cudaMemGetInfo of its GPU). GT_OK, or an error
   * in be->err when it cannot tell. NULL: unknown. Memory planning: engine/sched/sched_mem.h. */
  int (*mem_info)(be_t *be, be_mem_info_t *out);

  /* ---- optional: KV pool element type (NULL: fp32 pools only) ----
   * kv_set_type: the element type the next kv_init uses, GT_TYPE_F32 or GT_TYPE_BF16; GT_OK or
   * GT_EUNSUPPORTED. CUDA: BF16 by default (bf16 pools, half the bytes; kv_store / attn_qk_prep
   * round K and V to nearest even). CPU: pools stay fp32; BF16 rounds K and V to bf16 as they
   * are stored (the values a BF16 pool holds: what tests compare the GPU against).
   * kv_type: the element type the pools are stored in (CPU: always F32). */
  int (*kv_set_type)(be_t *be, gt_type_t t);
  gt_type_t (*kv_type)(be_t *be);
} be_ops_t;

/* most weights one matmul_multi call takes */
#define BE_MATMUL_MULTI_MAX 4

struct be {
  const be_ops_t *ops;
  int rank, n_ranks;
  gt_err_t err;   /* first error of the current step (sticky until be_sync returns it) */
  /* RoPE frequencies rounded to bf16, as HF transformers computes them when it runs a bf16
   * checkpoint (its inv_freq buffer is cast with the model). Off by default (exact fp32
   * frequencies, as llama.cpp and vLLM); the golden tests of bf16 files turn it on because
   * their reference was made that way (tests/golden/README.md). */
  int rope_freq_bf16;
};

/* Uploads a host weight (rows x cols of type t) into backend memory; w->data owned by be. */
int be_weight_upload(be_t *be, be_weight_t *w, gt_type_t t, int64_t rows, int64_t cols,
                     const void *host, gt_err_t *err);
void be_weight_free(be_t *be, be_weight_t *w);

/* Storage element type of the backend's KV pools (GT_TYPE_F32 when it has no kv_type op), and the
 * bytes one token's K and V rows of kv_dim elements take in one layer's pools (what a pool of
 * n tokens x layers costs: the scheduler sizes the pool with it). be_kv_set_type: GT_OK, or
 * GT_EUNSUPPORTED for a type the backend cannot store (F32 is always accepted). */
int be_kv_set_type(be_t *be, gt_type_t t);
gt_type_t be_kv_type(be_t *be);
size_t be_kv_token_bytes(be_t *be, int kv_dim);

/* The sizes of a set as ranges ("1-256", "1-4,8") into buf[n] (n > 0); returns buf, or "none"
 * for an empty set. */
const char *be_fmt_graph_sizes(const be_sizes_t *set, char *buf, size_t n);

/* The host's memory from /proc/meminfo (MemAvailable, MemTotal); GT_OK or GT_EUNSUPPORTED. */
int be_host_mem_info(be_mem_info_t *out, gt_err_t *err);

/* CPU backend (the reference). n_threads <= 0: every core. */
int be_cpu_create(int n_threads, be_t **out, gt_err_t *err);
/* CPU backend of rank `rank` of a tensor-parallel group: its all_reduce goes through comm
 * (engine/backend/comm.h; not owned, must outlive the backend; NULL: one rank, rank 0).
 * be_cpu_comm_stats: all_reduce calls so far and the nanoseconds they took (waiting included). */
struct be_comm;
int be_cpu_create_rank(int n_threads, int rank, struct be_comm *comm, be_t **out, gt_err_t *err);
void be_cpu_comm_stats(be_t *be, uint64_t *calls, uint64_t *ns);

static inline void be_destroy(be_t *be) { if (be) be->ops->destroy(be); }

#endif
