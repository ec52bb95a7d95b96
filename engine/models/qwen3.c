/* engine/models/qwen3.c — Qwen3 dense decoder (Qwen3ForCausalLM) over engine/backend/backend.h.
 *
 * Per layer: h = rmsnorm(x); q,k,v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ; per-head RMSNorm of q and k; NeoX RoPE;
 * causal GQA attention over the paged KV cache; x += att·Woᵀ; h = rmsnorm(x);
 * x += (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ. Head: rmsnorm(x)·Woutᵀ (token_embd when tied).
 * With tensor parallelism each rank runs this on its slice (engine/models/shard.h) and the
 * all-reduces after the attention output and FFN down projections sum the ranks' parts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/models/model.h"


/* Shapes are this rank's (engine/models/shard.h): H = sh.n_head, Hk = sh.n_head_kv,
 * ff = sh.n_ff, Vl = sh.n_vocab; with one rank, the whole model's. */
typedef struct {
  be_weight_t attn_norm;    /* [d] */
  be_weight_t wq;           /* [H*hd, d] column-parallel */
  be_weight_t wk, wv;       /* [Hk*hd, d] column-parallel (replicated when Hk < ranks) */
  be_weight_t q_norm, k_norm; /* [hd] */
  be_weight_t wo;           /* [d, H*hd] row-parallel */
  be_weight_t ffn_norm;     /* [d] */
  be_weight_t w_gate, w_up; /* [ff, d] column-parallel */
  be_weight_t w_down;       /* [d, ff] row-parallel */
} q3_layer_t;

typedef struct {
  be_weight_t tok_embd;    /* [vocab, d] */
  be_weight_t output_norm; /* [d] */
  be_weight_t output;      /* [Vl, d] this rank's vocabulary rows; data NULL when tied */
  be_weight_t head;        /* the head as used: output, or rows of tok_embd when tied (a view) */
  q3_layer_t *layers;      /* [n_layer] */
  /* scratch, backend memory; T = max_tokens */
  float *x;      /* [T, d] residual stream */
  float *h;      /* [T, d] normed input */
  float *q;      /* [T, H*hd] */
  float *k, *v;  /* [T, Hk*hd] */
  float *att;    /* [T, H*hd] */
  float *o;      /* [T, d] layer output (delta) */
  float *gate, *up; /* [T, ff] */
  float *xo;     /* [T, d] rows whose logits are wanted */
  float *logits; /* [MODEL_HEAD_CHUNK, Vl] */
} q3_t;

static void q3_free(model_t *m) {
  q3_t *s = m->arch_data;
  if (!s) return;
  be_t *be = m->be;
  be_weight_free(be, &s->tok_embd);
  be_weight_free(be, &s->output_norm);
  be_weight_free(be, &s->output);
  for (int l = 0; s->layers && l < m->hp.n_layer; l++) {
    q3_layer_t *L = &s->layers[l];
    be_weight_t *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->q_norm, &L->k_norm,
                         &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) be_weight_free(be, ws[i]);
  }
  free(s->layers);
  float *bufs[] = {s->x, s->h, s->q, s->k, s->v, s->att, s->o, s->gate, s->up, s->xo, s->logits};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) be->ops->free(be, bufs[i]);
  free(s);
  m->arch_data = NULL;
}

static int q3_hparams(model_hparams_t *hp, const gguf_t *g, gt_err_t *err) {
  const char *a = hp->arch;
  int rc = 0;
  rc = rc ? rc : model_hp_int(g, a, "block_count", 0, 1, &hp->n_layer, err);
  rc = rc ? rc : model_hp_int(g, a, "embedding_length", 0, 1, &hp->n_embd, err);
  rc = rc ? rc : model_hp_int(g, a, "attention.head_count", 0, 1, &hp->n_head, err);
  rc = rc ? rc : model_hp_int(g, a, "attention.head_count_kv", hp->n_head, 0, &hp->n_head_kv, err);
  rc = rc ? rc : model_hp_int(g, a, "feed_forward_length", 0, 1, &hp->n_ff, err);
  rc = rc ? rc : model_hp_int(g, a, "context_length", 4096, 0, &hp->n_ctx_train, err);
  rc = rc ? rc : model_hp_float(g, a, "rope.freq_base", 10000.0f, 0, &hp->rope_theta, err);
  rc = rc ? rc : model_hp_float(g, a, "attention.layer_norm_rms_epsilon", 1e-6f, 0, &hp->rms_eps, err);
  if (rc) return rc;
  if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_ff <= 0 ||
      hp->n_head % hp->n_head_kv)
    return gt_err_set(err, GT_EFORMAT, "inconsistent hyperparameters (layers %d, embd %d, heads %d/%d, ffn %d)",
                      hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_ff);
  rc = model_hp_int(g, a, "attention.key_length", hp->n_embd / hp->n_head, 0, &hp->head_dim, err);
  rc = rc ? rc : model_hp_int(g, a, "rope.dimension_count", hp->head_dim, 0, &hp->n_rot, err);
  if (rc) return rc;
  if (hp->head_dim <= 0 || hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
    return gt_err_set(err, GT_EFORMAT, "head_dim %d / rope dims %d inconsistent", hp->head_dim, hp->n_rot);
  const gguf_tensor_t *te = gguf_find_tensor(g, "token_embd.weight");
  if (!te || te->n_dims != 2) return gt_err_set(err, GT_EFORMAT, "missing or malformed tensor token_embd.weight");
  hp->n_vocab = (int)te->ne[1];
  hp->tied_output = gguf_find_tensor(g, "output.weight") == NULL;
  model_hp_layer_cap(hp);
  hp->n_attn_layers = hp->n_layer;
  return GT_OK;
}

static int q3_load(model_t *m, const gguf_t *g, gt_err_t *err) {
  int rc = q3_hparams(&m->hp, g, err);
  if (!rc) rc = model_shard_plan(&m->hp, m->be->rank, m->be->n_ranks, &m->sh, err);
  if (rc) return rc;
  const model_hparams_t *hp = &m->hp;
  const model_shard_t *sh = &m->sh;
  q3_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "out of memory");
  m->arch_data = s;
  s->layers = calloc((size_t)hp->n_layer, sizeof *s->layers);
  if (!s->layers) return gt_err_set(err, GT_ENOMEM, "out of memory");
  const int64_t d = hp->n_embd, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
  const model_sel_t vocab = model_sel1(sh->vocab0, sh->n_vocab), heads = model_sel1(sh->head0 * hd, sh->n_head * hd),
                    kv = model_sel1(sh->kv_head0 * hd, sh->n_head_kv * hd), ff = model_sel1(sh->ff0, sh->n_ff);
  rc = model_weight(m, g, "token_embd.weight", hp->n_vocab, d, &s->tok_embd, err);
  rc = rc ? rc : model_weight(m, g, "output_norm.weight", 1, d, &s->output_norm, err);
  if (!rc && !hp->tied_output)
    rc = model_weight_slice(m, g, "output.weight", hp->n_vocab, d, &vocab, NULL, &s->output, err);
  if (!rc) s->head = model_head_weight(m, hp->tied_output ? &s->tok_embd : &s->output);
  for (int l = 0; !rc && l < hp->n_layer; l++) {
    q3_layer_t *L = &s->layers[l];
    char n[128];
#define W(field, suffix, rows, cols, rsel, csel)                                   \
  if (!rc) {                                                                       \
    snprintf(n, sizeof n, "blk.%d.%s.weight", l, suffix);                          \
    rc = model_weight_slice(m, g, n, rows, cols, rsel, csel, &L->field, err);      \
  }
    W(attn_norm, "attn_norm", 1, d, NULL, NULL);
    W(wq, "attn_q", qd, d, &heads, NULL);
    W(wk, "attn_k", kvd, d, &kv, NULL);
    W(wv, "attn_v", kvd, d, &kv, NULL);
    W(q_norm, "attn_q_norm", 1, hd, NULL, NULL);
    W(k_norm, "attn_k_norm", 1, hd, NULL, NULL);
    W(wo, "attn_output", d, qd, NULL, &heads);
    W(ffn_norm, "ffn_norm", 1, d, NULL, NULL);
    W(w_gate, "ffn_gate", hp->n_ff, d, &ff, NULL);
    W(w_up, "ffn_up", hp->n_ff, d, &ff, NULL);
    W(w_down, "ffn_down", d, hp->n_ff, NULL, &ff);
#undef W
  }
  if (rc) return rc;
  /* scratch */
  be_t *be = m->be;
  const size_t T = (size_t)m->max_tokens;
  const size_t qdl = (size_t)sh->n_head * hd, kvdl = (size_t)sh->n_head_kv * hd;
  struct { float **p; size_t n; } bufs[] = {
      {&s->x, T * d},    {&s->h, T * d},     {&s->q, T * qdl}, {&s->k, T * kvdl},
      {&s->v, T * kvdl}, {&s->att, T * qdl}, {&s->o, T * d},   {&s->gate, T * sh->n_ff},
      {&s->up, T * sh->n_ff}, {&s->xo, T * d}, {&s->logits, (size_t)MODEL_HEAD_CHUNK * sh->n_vocab},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    *bufs[i].p = be->ops->alloc(be, bufs[i].n * sizeof(float));
    if (!*bufs[i].p) return gt_err_set(err, GT_ENOMEM, "scratch buffers for %zu tokens", T);
  }
  return GT_OK;
}


static int q3_forward(model_t *m, const be_batch_t *b, float *logits, gt_err_t *err) {
  q3_t *s = m->arch_data;
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  const model_hparams_t *hp = &m->hp;
  const int T = b->n_tok, d = hp->n_embd, H = m->sh.n_head, Hk = m->sh.n_head_kv, hd = hp->head_dim;
  const float eps = hp->rms_eps;
  if (T <= 0 || T > m->max_tokens || b->n_out < 0 || b->n_out > T)
    return gt_err_set(err, GT_EINVAL, "batch of %d tokens / %d outputs (max %d tokens)", T, b->n_out, m->max_tokens);
  if (o->set_batch(be, b)) return model_backend_err(be, err);

  o->embed(be, &s->tok_embd, s->x);
  for (int l = 0; l < hp->n_layer; l++) {
    const q3_layer_t *L = &s->layers[l];
    if (l == 0)
      o->rmsnorm(be, s->x, &L->attn_norm, s->h, T, d, eps);
    else
      o->add_rmsnorm(be, s->x, s->o, &L->attn_norm, s->h, T, d, eps); /* x += previous ffn output */
    const be_weight_t *wqkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const qkv[3] = {s->q, s->k, s->v};
    model_matmul_multi(be, 3, wqkv, s->h, qkv, T);
    model_attn_qk_prep(be, l, s->q, s->k, s->v, &L->q_norm, &L->k_norm, H, Hk, hd, hp->n_rot, hp->rope_theta, eps, T);
    o->attention(be, l, s->q, s->att, H, Hk, hd, 1.0f / sqrtf((float)hd));
    o->matmul(be, &L->wo, s->att, s->o, T);
    o->all_reduce(be, s->o, (size_t)T * d);
    o->add_rmsnorm(be, s->x, s->o, &L->ffn_norm, s->h, T, d, eps); /* x += attention output */
    model_swiglu_ffn(m, &L->w_gate, &L->w_up, &L->w_down, s->h, s->gate, s->up, s->o, T);
  }
  return model_head(m, b, s->x, s->o, s->xo, s->logits, &s->output_norm, &s->head, logits, err);
}

const model_arch_t model_arch_qwen3 = {"qwen3", q3_load, q3_free, q3_forward, q3_hparams};
