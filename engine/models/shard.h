/* engine/models/shard.h — which slice of the model one tensor-parallel rank holds (Megatron
 * style), and loading a weight's slice. engine/TP.md has the layout.
 *
 * Column-parallel weights (attention Q/K/V, FFN gate/up, GDN in-projections, the output head)
 * keep a subset of their rows (output features); row-parallel weights (attention output, FFN
 * down, GDN out-projection) keep the matching subset of their columns (input features) and are
 * followed by an all-reduce. A row subset never splits a quantization block (blocks run along a
 * row); a column subset must start and end on block boundaries, checked at load. */
#ifndef GANTRY_ENGINE_SHARD_H
#define GANTRY_ENGINE_SHARD_H

#include <stdint.h>

#include "common/err.h"
#include "engine/backend/backend.h"
#include "format/gguf.h"

struct model;
struct model_hparams;

/* This rank's part of every sharded dimension; with one rank, the whole model. */
typedef struct model_shard {
  int rank, n_ranks;
  int n_head, head0;       /* query heads [head0, head0 + n_head) */
  int n_head_kv, kv_head0; /* KV heads held: the ones the rank's query heads use (replicated
                            * across ranks when the model has fewer KV heads than ranks) */
  int n_ff, ff0;           /* FFN intermediate features [ff0, ff0 + n_ff) */
  /* Gated DeltaNet, value heads in the GGUF's tiled order (v-head h uses k-head h % n_k):
   * key heads [gdn_k0, gdn_k0 + gdn_n_k) (replicated when n_k < n_ranks); local v-head j is
   * global (gdn_k0 + j % gdn_n_k) + (gdn_m0 + j / gdn_n_k) * n_k, so that local v-head j uses
   * local k-head j % gdn_n_k — the same tiled rule the ops apply. */
  int gdn_n_k, gdn_k0;
  int gdn_n_v, gdn_m0;
  int vocab0, n_vocab;     /* output head rows [vocab0, vocab0 + n_vocab) (vocab-parallel) */
} model_shard_t;

/* Plans rank's slice of a model with hyperparameters hp over n_ranks (>= 1). GT_EUNSUPPORTED
 * naming the dimension when n_ranks does not divide it (heads, KV heads, FFN, GDN heads). */
int model_shard_plan(const struct model_hparams *hp, int rank, int n_ranks, model_shard_t *sh, gt_err_t *err);

/* A run of rows or columns [start, start + len). */
typedef struct {
  int64_t start, len;
} model_span_t;

#define MODEL_SPANS_MAX 64

/* A subset of rows or columns: n spans in order (n == 0: all of them). */
typedef struct {
  int n;
  model_span_t s[MODEL_SPANS_MAX];
} model_sel_t;

/* sel = one span */
static inline model_sel_t model_sel1(int64_t start, int64_t len) {
  model_sel_t s = {.n = 1};
  s.s[0] = (model_span_t){start, len};
  return s;
}
/* Appends a span (merged with the last when contiguous); -1 when full. */
int model_sel_add(model_sel_t *sel, int64_t start, int64_t len);

/* Uploads the rows `rows_sel` x columns `cols_sel` of tensor `name` (full shape [rows, cols],
 * checked as model_weight does); NULL or empty selections take everything (and then the bytes
 * go to the backend straight from the file). GT_EUNSUPPORTED naming the tensor when a column
 * span does not start and end on a block of the tensor's type. Adds the slice's bytes to
 * m->weight_bytes and the whole tensor's elements to m->n_params. */
int model_weight_slice(struct model *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols,
                       const model_sel_t *rows_sel, const model_sel_t *cols_sel, be_weight_t *w, gt_err_t *err);

/* Selections of the GDN in-projection rows (and conv channels) [q | k | v] for sh: the q and k
 * rows of its key heads (d_k each) and the v rows of its value heads (d_v each). */
int model_shard_gdn_qkv(const model_shard_t *sh, int n_k, int d_k, int n_v, int d_v, model_sel_t *out);
/* Selection of sh's value heads in a [n_v * per] layout (per = d_v for rows / columns of
 * value features, 1 for per-head vectors). */
int model_shard_gdn_v(const model_shard_t *sh, int n_k, int n_v, int per, int64_t base, model_sel_t *out);

#endif
