/* engine/models/model.h — a loaded model: hyperparameters from GGUF metadata, weights uploaded to a
 * backend, and a forward pass over a batch (engine/backend/backend.h). One model_t per rank.
 *
 * Architectures register a model_arch_t (engine/models/<arch>.c); model_load picks it from
 * general.architecture and refuses unknown ones with GT_EUNSUPPORTED. */
#ifndef GANTRY_ENGINE_MODEL_H
#define GANTRY_ENGINE_MODEL_H

#include "engine/backend/backend.h"
#include "engine/models/shard.h"
#include "format/gguf.h"

typedef struct model_hparams {
  char arch[32];        /* general.architecture */
  char name[128];       /* general.name, or the file's base name */
  int n_layer;          /* {arch}.block_count */
  int n_embd;           /* {arch}.embedding_length */
  int n_head;           /* {arch}.attention.head_count */
  int n_head_kv;        /* {arch}.attention.head_count_kv */
  int head_dim;         /* {arch}.attention.key_length (default n_embd / n_head) */
  int n_ff;             /* {arch}.feed_forward_length */
  int n_vocab;          /* rows of token_embd */
  int n_ctx_train;      /* {arch}.context_length */
  int n_rot;            /* {arch}.rope.dimension_count (default head_dim) */
  float rope_theta;     /* {arch}.rope.freq_base */
  float rms_eps;        /* {arch}.attention.layer_norm_rms_epsilon */
  int tied_output;      /* no output.weight: the head is token_embd */
  /* hybrid (qwen35); zero for dense models */
  int n_attn_layers;    /* layers with a KV cache */
  int n_gdn_layers;     /* Gated DeltaNet layers */
  int full_attn_interval;
  int conv_kernel;      /* {arch}.ssm.conv_kernel */
  int gdn_n_k, gdn_n_v, gdn_d_k, gdn_d_v;
  int n_nextn;          /* MTP layers present in the file (the drafter runs the first: model_mtp_forward) */
} model_hparams_t;

typedef struct model model_t;

typedef struct model_arch {
  const char *name; /* general.architecture value */
  /* Reads hyperparameters and uploads this rank's weights; sets m->arch_data. */
  int (*load)(model_t *m, const gguf_t *g, gt_err_t *err);
  void (*free)(model_t *m);
  /* Runs the batch; writes logits of the batch's out_tok rows to host logits[n_out, n_vocab]
   * (logits may be NULL when n_out == 0). */
  int (*forward)(model_t *m, const be_batch_t *b, float *logits, gt_err_t *err);
  /* Optional: reads hyperparameters only (hp->arch and hp->name already set), without loading
   * weights; NULL means model_read_hparams falls back to a full load on the CPU. */
  int (*hparams)(model_hparams_t *hp, const gguf_t *g, gt_err_t *err);
  /* Optional (NULL: no MTP drafter): model_mtp_enable / model_mtp_forward below. */
  int (*mtp_enable)(model_t *m, gt_err_t *err);
  int (*mtp_forward)(model_t *m, const be_batch_t *b, const int32_t *src, float *logits, gt_err_t *err);
} model_arch_t;

struct model {
  const model_arch_t *arch;
  model_hparams_t hp;   /* the whole model's */
  model_shard_t sh;     /* this rank's slice (be->rank of be->n_ranks; everything with one rank) */
  be_t *be;
  /* a tensor-parallel group (engine/models/tp.h): the model seen by the scheduler, whose
   * forward runs the rank models on their worker threads; NULL for a model on one backend */
  struct tp_group *tp;
  void *arch_data;
  size_t weight_bytes;   /* bytes of weights uploaded (this rank; a group: all ranks) */
  size_t cache_bytes;    /* KV pool + recurrent state of the last model_cache_init (likewise) */
  int64_t n_params;      /* parameters (all ranks) */
  int max_tokens;        /* largest n_tok a forward may get (scratch sizing) */
  int max_out;           /* largest n_out */
  int mtp_kv_layers;     /* KV layers the MTP drafter adds after the model's own (model_mtp_enable) */
  /* set only during model_forward_sample: model_head samples into head_ids instead of
   * downloading logits */
  const be_sample_row_t *head_rows;
  int32_t *head_ids;
  /* a rank of a group under the group's model_forward_sample (engine/models/tp.c): a greedy row
   * i gives the rank's argmax (a global id, lowest on ties) in head_ids[i] and its logit in
   * head_max[i], so only those cross; any other row writes the rank's columns of host
   * head_gather[i, n_vocab] (the all-gather the host sampler then reads) */
  float *head_max;
  float *head_gather;
  /* set only during model_forward_sample_mask with masks: logits_mask runs before sampling */
  const uint32_t *head_mask, *head_rmap;
  /* set only during model_forward_hidden: model_head downloads the final-normed out_tok rows to
   * host head_hidden[n_out, n_embd] and computes no logits */
  float *head_hidden;
  /* set by architecture code around its model_head call: model_head also copies the final-normed
   * out_tok rows into backend head_keep[n_out, n_embd], in the same step as the head (the MTP
   * drafter's chained hidden input) */
  float *head_keep;
  be_sample_row_t *mtp_greedy; /* [max_out] greedy rows of model_mtp_forward_greedy (host, owned) */
  /* the MTP drafter's vocabulary: model_mtp_forward_greedy drafts only ids [0, mtp_draft_vocab) (0: the
   * whole vocabulary). Set by the scheduler (sched_config_t.spec_draft_vocab). */
  int mtp_draft_vocab;
  /* set only during model_mtp_forward_greedy with a draft vocabulary: model_head multiplies the first
   * head_vocab rows of the head (ids 0 .. head_vocab - 1) and samples over those alone */
  int head_vocab;
  /* set only during model_mtp_forward_greedy_dev: model_head takes the greedy rows' ids with the
   * backend's argmax_dev into backend head_ids_dev[n_out] and ends the step without waiting */
  int32_t *head_ids_dev;
};

/* Loads the model of g onto be. max_tokens bounds the tokens per step (scratch buffers). */
int model_load(const gguf_t *g, be_t *be, int max_tokens, model_t **out, gt_err_t *err);
void model_free(model_t *m);
/* Hyperparameters of g's model without loading its weights. */
int model_read_hparams(const gguf_t *g, model_hparams_t *hp, gt_err_t *err);

/* Allocates the paged KV pool (n_blocks of block_tokens) and n_slots recurrent-state slots
 * (hybrid only) on the model's backend. */
int model_cache_init(model_t *m, int n_blocks, int block_tokens, int n_slots, gt_err_t *err);
/* Ranks of m (1 unless m is a tensor-parallel group) and rank r's model (m itself with one
 * rank): what per-rank reporting walks. */
int model_n_ranks(const model_t *m);
const model_t *model_rank(const model_t *m, int r);
/* Bytes of cache per token (all attention layers, K and V) and per state slot: this rank's, or
 * the sum over a group's ranks. */
size_t model_kv_bytes_per_token(const model_t *m);
size_t model_state_bytes_per_slot(const model_t *m);

static inline int model_forward(model_t *m, const be_batch_t *b, float *logits, gt_err_t *err) {
  return m->arch->forward(m, b, logits, err);
}
/* model_forward with sampling on the backend (its `sample` op; GT_EUNSUPPORTED when NULL): the
 * out_tok rows' logits stay in backend memory and only ids[n_out] (host) come back, row i sampled
 * with rows[i] (host, [n_out]). Penalties and logprobs need the host path (model_forward). */
int model_forward_sample(model_t *m, const be_batch_t *b, const be_sample_row_t *rows, int32_t *ids, gt_err_t *err);
/* model_forward_sample with constrained rows: before sampling, the backend's logits_mask op bans
 * in each out_tok row i the ids that mask row rmap[i] clears (mask [*, ceil(n_vocab / 32)] and
 * rmap [n_out] in backend memory; rmap[i] == BE_MASK_NONE: row untouched). mask NULL: no masks
 * (= model_forward_sample). */
int model_forward_sample_mask(model_t *m, const be_batch_t *b, const be_sample_row_t *rows, int32_t *ids,
                              const uint32_t *mask, const uint32_t *rmap, gt_err_t *err);

/* ---- MTP drafter (multi-token prediction: Qwen3.5's nextn block, engine/models/qwen35_mtp.c) ----
 * model_mtp_enable: before model_cache_init; gives the MTP block its own KV layer in the paged
 * pool (after the model's attention layers: model_kv_bytes_per_token counts it) and makes every
 * later forward keep its final-normed hidden state of every row. GT_EUNSUPPORTED when the file
 * has no MTP block, the architecture has no drafter, or m is a tensor-parallel group.
 * model_mtp_forward: one MTP step over batch b, row t predicting the token at position pos[t] + 2:
 * tok[t] is the token at position pos[t] + 1 and its hidden input is src[t] >= 0: row src[t] of
 * the last model forward's batch, or src[t] < 0: out row -1 - src[t] of the previous
 * model_mtp_forward (chaining: the MTP block's own normed output hidden state). The MTP block's
 * K/V at pos[t] are written into its KV layer through b's block table (b.state_slot is ignored:
 * the block has no recurrent state). Logits of b's out_tok rows go to host logits[n_out, n_vocab].
 * model_mtp_forward_greedy: the same step, but each out_tok row's greedy token (argmax, lowest id
 * on ties: sampler_argmax of its logits) is taken on the backend (its `sample` op, as the greedy
 * rows of model_forward_sample) and only host ids[n_out] come back. GT_EUNSUPPORTED when the
 * backend cannot sample (use model_mtp_forward then). With m->mtp_draft_vocab = N (0 < N < n_vocab,
 * one rank) the head multiplies only its first N rows and the draft is the argmax over ids [0, N):
 * a draft vocabulary (FR-Spec, EAGLE-3's 32K draft vocabulary), exact because verification decides;
 * it cuts the drafter's largest cost, the full head (248,320 x 4096 BF16 on qwen35-9b, ~0.5 ms). */
int model_mtp_enable(model_t *m, gt_err_t *err);
int model_mtp_forward(model_t *m, const be_batch_t *b, const int32_t *src, float *logits, gt_err_t *err);
int model_mtp_forward_greedy(model_t *m, const be_batch_t *b, const int32_t *src, int32_t *ids, gt_err_t *err);
/* model_mtp_forward_greedy, but the ids go to backend memory dev_ids[n_out] (int32, be->ops->alloc)
 * through the backend's argmax_dev and the host does not wait for the step: a chain of drafter
 * steps feeds them to the next step on the device (be_batch_t.tok_src / tok_dev) and downloads
 * every step's ids at the end, one transfer (engine/sched/spec_mtp.c). The ids are those
 * model_mtp_forward_greedy returns. Host-side errors come back here; the step's device errors at
 * the next download / sync. GT_EUNSUPPORTED when the backend has no argmax_dev. */
int model_mtp_forward_greedy_dev(model_t *m, const be_batch_t *b, const int32_t *src, int32_t *dev_ids,
                                 gt_err_t *err);

/* model_forward, but for each out_tok row i the final-norm hidden state (rmsnorm(x)·norm, the
 * head's input) goes to host hidden[i, n_embd] instead of logits: what embedding pooling reads
 * (engine/models/embed.h). One rank only (GT_EUNSUPPORTED for a tensor-parallel group). */
int model_forward_hidden(model_t *m, const be_batch_t *b, float *hidden, gt_err_t *err);
/* ---- helpers for architecture code (engine/models/model.c) ---- */
/* Uploads tensor `name` as a weight; checks it exists, is computable and has shape
 * [rows, cols] (GGUF ne = {cols, rows}); rows = 1 for vectors. Adds to m->weight_bytes. */
int model_weight(model_t *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols,
                 be_weight_t *w, gt_err_t *err);
/* Same, but a missing tensor leaves w zeroed and returns GT_OK. */
int model_weight_opt(model_t *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols,
                     be_weight_t *w, gt_err_t *err);
/* The output head of this rank: rows [sh.vocab0, sh.vocab0 + sh.n_vocab) of full [vocab, d]
 * (a view into full's memory when sliced: never freed on its own). */
be_weight_t model_head_weight(const model_t *m, const be_weight_t *full_or_slice);
/* Reads "{arch}.{suffix}" as an int / float; missing -> GT_EFORMAT unless a default is used. */
/* Measurement knob ($GANTRY_MODEL_LAYERS=K, 1 <= K < n_layer): the loader keeps only the first K
 * decoder layers (and no MTP layers), so a bench can time one file at two depths (the per-layer
 * slope: scripts/gpu/tp_local.sh). Unset or out of range: nothing changes. */
void model_hp_layer_cap(struct model_hparams *hp);
int model_hp_int(const gguf_t *g, const char *arch, const char *suffix, int def, int required,
                 int *out, gt_err_t *err);
int model_hp_float(const gguf_t *g, const char *arch, const char *suffix, float def, int required,
                   float *out, gt_err_t *err);

/* Rows of logits per head matmul + download: architectures size their logits scratch
 * [MODEL_HEAD_CHUNK, n_vocab]. */
#define MODEL_HEAD_CHUNK 64

/* Returns the backend's step error (GT_OK if none) copied into err. */
int model_backend_err(be_t *be, gt_err_t *err);
/* SwiGLU feed-forward of T rows: out = (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ, all-reduced over ranks.
 * h [T, d]; gate, up scratch [T, ff] (gate is overwritten); out [T, d]. */
void model_swiglu_ffn(model_t *m, const be_weight_t *w_gate, const be_weight_t *w_up, const be_weight_t *w_down,
                      const float *h, float *gate, float *up, float *out, int T);
/* out[i][T, w[i]->rows] = x[T, cols] · w[i]ᵀ for i < n (<= BE_MATMUL_MULTI_MAX): the backend's
 * matmul_multi, or n matmul calls when it has none. */
void model_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[], int T);
/* Attention input prep of the current batch (T tokens): per-head rmsnorm of q [T, n_head*hd]
 * and k [T, n_kv_head*hd], rope on both, kv_store(layer, k, v): the backend's attn_qk_prep,
 * or that op sequence when it has none. */
void model_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *q_norm,
                        const be_weight_t *k_norm, int n_head, int n_kv_head, int hd, int n_rot, float theta,
                        float eps, int T);
/* Gated DeltaNet input prep of the current batch (T tokens), C = 2*n_k*d_k + n_v*d_v:
 * conv1d_silu(layer, x [T, C], w, K) then q [T, n_k*d_k] = l2norm * q_scale, k [T, n_k*d_k] =
 * l2norm, v [T, n_v*d_v] of its channel ranges: the backend's gdn_conv_qkv, or that op
 * sequence through conv [T, C] (scratch, only used then) when it has none. */
void model_gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *conv, float *q,
                        float *k, float *v, int n_k, int d_k, int n_v, int d_v, float eps, float q_scale, int T);
/* Finishes a forward: x [T, d] += delta (the last layer's output); for the batch's out_tok rows,
 * logits = rmsnorm(x)·headᵀ, downloaded to host logits[n_out, n_vocab] in MODEL_HEAD_CHUNK row
 * pieces through dev_logits [MODEL_HEAD_CHUNK, sh.n_vocab]; xo [n_out, d] is scratch. head holds
 * the rank's vocabulary rows (sh.vocab0..): each rank writes its columns of the host rows (the
 * ranks of a group share logits, so together they gather the whole vocabulary). Under
 * model_forward_sample (m->head_rows set) each piece is sampled on the backend into m->head_ids
 * instead and logits is not used. delta NULL: x already holds the last layer's output (no add). */
/* sampler_pick's greedy case: temperature <= 0 or top_k == 1 */
static inline int model_row_greedy(const be_sample_row_t *r) { return r->temperature <= 0 || r->top_k == 1; }
/* With every row an out row, in order (model_out_all: decode and verify steps), the norm reads x
 * itself: x += delta and the normed rows in one add_rmsnorm, into head_keep when it is set (no copy),
 * else xo. */
int model_head(model_t *m, const be_batch_t *b, float *x, const float *delta, float *xo, float *dev_logits,
               const be_weight_t *norm, const be_weight_t *head, float *logits, gt_err_t *err);
/* Whether b's out rows are all of its rows in order (out_tok[i] == i, n_out == n_tok > 0). */
int model_out_all(const be_batch_t *b);

extern const model_arch_t model_arch_qwen3;
extern const model_arch_t model_arch_qwen35;

#endif
