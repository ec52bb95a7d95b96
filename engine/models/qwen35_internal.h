/* engine/models/qwen35_internal.h — what engine/models/qwen35.c (the decoder) and
 * engine/models/qwen35_mtp.c (the MTP drafter) share: the weights and scratch of a loaded
 * Qwen3.5 model, and the gated-attention mixer both run. Not for other modules. */
#ifndef GANTRY_ENGINE_QWEN35_INTERNAL_H
#define GANTRY_ENGINE_QWEN35_INTERNAL_H

#include "engine/models/model.h"

typedef struct {
  int is_attn;
  int idx;                    /* index among attention layers (KV) or among GDN layers (state) */
  be_weight_t attn_norm;      /* [d] */
  be_weight_t post_norm;      /* [d] post_attention_norm */
  be_weight_t w_gate, w_up;   /* [ff, d] */
  be_weight_t w_down;         /* [d, ff] */
  /* gated attention */
  be_weight_t wq;             /* [H*hd, d]: the q rows of attn_q (per head [q | gate] in the file) */
  be_weight_t wqg;            /* [H*hd, d]: its gate rows (two weights: the product writes q and gate apart) */
  be_weight_t wk, wv;         /* [Hk*hd, d] */
  be_weight_t q_norm, k_norm; /* [hd] */
  be_weight_t wo;             /* [d, H*hd] */
  /* Gated DeltaNet */
  be_weight_t wqkv;           /* [C, d], C = 2*n_k*d_k + n_v*d_v */
  be_weight_t wz;             /* [n_v*d_v, d] attn_gate */
  be_weight_t w_alpha, w_beta;/* [n_v, d] */
  be_weight_t ssm_a;          /* [n_v] = -exp(A_log) */
  be_weight_t dt_bias;        /* [n_v] */
  be_weight_t conv;           /* [C, K] */
  be_weight_t ssm_norm;       /* [d_v] */
  be_weight_t ssm_out;        /* [d, n_v*d_v] */
} q35_layer_t;

/* One MTP (nextn) block (engine/models/qwen35_mtp.c runs it). */
typedef struct {
  be_weight_t eh_proj;                        /* [d, 2d] */
  be_weight_t enorm, hnorm, shared_head_norm; /* [d] */
  be_weight_t shared_head_head;               /* [vocab, d], optional */
  be_weight_t embed_tokens;                   /* [vocab, d], optional */
  q35_layer_t blk;                            /* a full-attention layer */
} q35_mtp_t;

typedef struct {
  be_weight_t tok_embd;    /* [vocab, d] */
  be_weight_t output_norm; /* [d] */
  be_weight_t output;      /* [Vl, d] this rank's vocabulary rows; data NULL when tied */
  be_weight_t head;        /* the head as used: output, or rows of tok_embd when tied (a view) */
  q35_layer_t *layers;     /* [n_layer] */
  q35_mtp_t *mtp;          /* [n_nextn] */
  /* scratch, backend memory; T = max_tokens */
  float *x, *h, *o;        /* [T, d] residual stream, normed input, mixer / ffn output */
  float *gate, *up;        /* [T, ff] */
  float *q, *ag;           /* [T, H*hd] query, attention gate */
  float *k, *v;            /* [T, Hk*hd] */
  float *att;              /* [T, H*hd] */
  float *mixed, *conv;     /* [T, C] GDN qkv projection, after conv + SiLU */
  float *gq, *gk;          /* [T, n_k*d_k] */
  float *gv, *gz, *go;     /* [T, n_v*d_v] value, z gate, scan output */
  float *galpha, *gbeta;   /* [T, n_v] -> g, beta (in place) */
  float *xo;               /* [n_out, d] rows whose logits are wanted */
  float *logits;           /* [MODEL_HEAD_CHUNK, vocab] */
  /* MTP drafter (allocated by q35_mtp_enable; NULL until then) */
  float *hid;              /* [T, d] the last main forward's final-normed hidden state, every row */
  float *mcat;             /* [T, 2d] concat(enorm(embed(tok)), hnorm(h)) */
  float *mprev;            /* [T, d] the last mtp_forward's normed hidden of its out rows (chaining) */
  float *mtmp;             /* [T, d] the gathered hidden input */
  int hid_rows, mprev_rows; /* rows hid / mprev hold now */
} q35_t;

/* h [T, d] -> s->o [T, d]: gated attention of layer L (before the all-reduce); L->idx is its KV layer. */
void q35_attn_mixer(model_t *m, const q35_layer_t *L, int T);

/* engine/models/qwen35_mtp.c: model_arch_t.mtp_enable / mtp_forward of qwen35 */
int q35_mtp_enable(model_t *m, gt_err_t *err);
int q35_mtp_forward(model_t *m, const be_batch_t *b, const int32_t *src, float *logits, gt_err_t *err);

#endif
