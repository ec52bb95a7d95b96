/* engine/models/qwen35.c — Qwen3.5 hybrid decoder (Gated DeltaNet + gated attention) over
 * engine/backend/backend.h, with GGUF tensors and metadata exactly as llama.cpp's converter writes them.
 *
 * Layer i is a full-attention layer when (i + 1) % full_attention_interval == 0, otherwise a
 * Gated DeltaNet (GDN) layer. Every layer: h = rmsnorm(x); x += mixer(h); h = rmsnorm(x)
 * (post_attention_norm); x += (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ. Head: rmsnorm(x)·Woutᵀ.
 * Norm weights in the file already include the +1 of Qwen3.5's zero-centred RMSNorm (all but
 * ssm_norm, which is a plain weight).
 *
 * Gated attention: h·Wqᵀ gives per head [q (hd) | gate (hd)]; per-head RMSNorm of q and k; NeoX
 * RoPE on the first n_rot dims; causal GQA over the paged KV cache; att *= sigmoid(gate);
 * x += att·Woᵀ.
 *
 * GDN (n_k key heads of d_k, n_v value heads of d_v, stored in "tiled" order: value head h uses
 * key head h % n_k): qkv = h·Wqkvᵀ [q (n_k*d_k) | k (n_k*d_k) | v (n_v*d_v)]; causal depthwise
 * conv (kernel K, state = last K-1 inputs) + SiLU; q, k L2-normalised, q scaled by 1/sqrt(d_k);
 * beta = sigmoid(h·Wbetaᵀ); g = ssm_a * softplus(h·Walphaᵀ + dt_bias) (ssm_a = -exp(A_log));
 * per value head S = S*exp(g); S += k ⊗ beta (v - Sᵀk); o = Sᵀq; o = rmsnorm(o)·ssm_norm *
 * silu(h·Wzᵀ) per head; x += o·Woutᵀ. Each sequence keeps its conv and S state in its slot.
 *
 * Tensor parallelism: each rank runs this on its slice (engine/models/shard.h): its attention
 * heads, its GDN key heads with the value heads that use them (kept in the tiled order locally,
 * so the ops need nothing new), its FFN features and its vocabulary rows; the all-reduces after
 * the mixer and FFN outputs sum the ranks' parts. Shapes below are the rank's.
 *
 * MTP (nextn) blocks, when the file has them ({arch}.nextn_predict_layers > 0, blocks right after
 * the main stack, counted in block_count or not), are loaded and counted (hp.n_nextn); the first
 * is the speculative drafter of engine/models/qwen35_mtp.c (model_mtp_forward). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/models/qwen35_internal.h"

#define Q35_MAX_KERNEL 16  /* limits of the CPU GDN ops (engine/backend/backend_cpu_gdn.c) */
#define Q35_MAX_DV 1024

static void free_layer(be_t *be, q35_layer_t *L) {
  be_weight_t *ws[] = {&L->attn_norm, &L->post_norm, &L->w_gate, &L->w_up,   &L->w_down,  &L->wq,     &L->wqg,
                       &L->wk,        &L->wv,        &L->q_norm, &L->k_norm, &L->wo,      &L->wqkv,
                       &L->wz,        &L->w_alpha,   &L->w_beta, &L->ssm_a,  &L->dt_bias, &L->conv,
                       &L->ssm_norm,  &L->ssm_out};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) be_weight_free(be, ws[i]);
}

static void q35_free(model_t *m) {
  q35_t *s = m->arch_data;
  if (!s) return;
  be_t *be = m->be;
  be_weight_free(be, &s->tok_embd);
  be_weight_free(be, &s->output_norm);
  be_weight_free(be, &s->output);
  for (int l = 0; s->layers && l < m->hp.n_layer; l++) free_layer(be, &s->layers[l]);
  for (int i = 0; s->mtp && i < m->hp.n_nextn; i++) {
    q35_mtp_t *M = &s->mtp[i];
    be_weight_t *ws[] = {&M->eh_proj, &M->enorm, &M->hnorm, &M->shared_head_norm, &M->shared_head_head,
                         &M->embed_tokens};
    for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) be_weight_free(be, ws[j]);
    free_layer(be, &M->blk);
  }
  free(s->layers);
  free(s->mtp);
  float *bufs[] = {s->x,  s->h,  s->o,  s->gate, s->up, s->q,      s->ag,    s->k,  s->v,     s->att,
                   s->mixed, s->conv, s->gq, s->gk, s->gv, s->gz, s->go, s->galpha, s->gbeta, s->xo, s->logits,
                   s->hid, s->mcat, s->mprev, s->mtmp};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) be->ops->free(be, bufs[i]);
  free(s);
  m->arch_data = NULL;
}

static int read_hparams(model_t *m, const gguf_t *g, gt_err_t *err) {
  model_hparams_t *hp = &m->hp;
  const char *a = hp->arch;
  int rc = 0, inner = 0;
  rc = rc ? rc : model_hp_int(g, a, "block_count", 0, 1, &hp->n_layer, err);
  rc = rc ? rc : model_hp_int(g, a, "embedding_length", 0, 1, &hp->n_embd, err);
  rc = rc ? rc : model_hp_int(g, a, "attention.head_count", 0, 1, &hp->n_head, err);
  rc = rc ? rc : model_hp_int(g, a, "attention.head_count_kv", hp->n_head, 0, &hp->n_head_kv, err);
  rc = rc ? rc : model_hp_int(g, a, "feed_forward_length", 0, 1, &hp->n_ff, err);
  rc = rc ? rc : model_hp_int(g, a, "context_length", 4096, 0, &hp->n_ctx_train, err);
  rc = rc ? rc : model_hp_float(g, a, "rope.freq_base", 10000.0f, 0, &hp->rope_theta, err);
  rc = rc ? rc : model_hp_float(g, a, "attention.layer_norm_rms_epsilon", 1e-6f, 0, &hp->rms_eps, err);
  rc = rc ? rc : model_hp_int(g, a, "full_attention_interval", 4, 0, &hp->full_attn_interval, err);
  rc = rc ? rc : model_hp_int(g, a, "ssm.conv_kernel", 0, 1, &hp->conv_kernel, err);
  rc = rc ? rc : model_hp_int(g, a, "ssm.state_size", 0, 1, &hp->gdn_d_k, err);
  rc = rc ? rc : model_hp_int(g, a, "ssm.group_count", 0, 1, &hp->gdn_n_k, err);
  rc = rc ? rc : model_hp_int(g, a, "ssm.time_step_rank", 0, 1, &hp->gdn_n_v, err);
  rc = rc ? rc : model_hp_int(g, a, "ssm.inner_size", 0, 1, &inner, err);
  rc = rc ? rc : model_hp_int(g, a, "nextn_predict_layers", 0, 0, &hp->n_nextn, err);
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
  int vlen = hp->head_dim;
  rc = model_hp_int(g, a, "attention.value_length", hp->head_dim, 0, &vlen, err);
  if (rc) return rc;
  if (vlen != hp->head_dim)
    return gt_err_set(err, GT_EUNSUPPORTED, "attention value_length %d != key_length %d", vlen, hp->head_dim);
  if (hp->full_attn_interval <= 0)
    return gt_err_set(err, GT_EFORMAT, "%s.full_attention_interval = %d must be positive", a, hp->full_attn_interval);
  if (hp->conv_kernel < 2 || hp->conv_kernel > Q35_MAX_KERNEL)
    return gt_err_set(err, GT_EUNSUPPORTED, "%s.ssm.conv_kernel = %d outside [2, %d]", a, hp->conv_kernel,
                      Q35_MAX_KERNEL);
  if (hp->gdn_n_k <= 0 || hp->gdn_n_v <= 0 || hp->gdn_d_k <= 0 || hp->gdn_n_v % hp->gdn_n_k || inner <= 0 ||
      inner % hp->gdn_n_v)
    return gt_err_set(err, GT_EFORMAT,
                      "inconsistent GDN sizes (group_count %d, time_step_rank %d, state_size %d, inner_size %d)",
                      hp->gdn_n_k, hp->gdn_n_v, hp->gdn_d_k, inner);
  hp->gdn_d_v = inner / hp->gdn_n_v;
  if (hp->gdn_d_v > Q35_MAX_DV)
    return gt_err_set(err, GT_EUNSUPPORTED, "GDN value head dim %d > %d", hp->gdn_d_v, Q35_MAX_DV);
  if (hp->n_nextn < 0 || hp->n_nextn > 16 || hp->n_nextn >= hp->n_layer)
    return gt_err_set(err, GT_EFORMAT, "%s.nextn_predict_layers = %d out of range", a, hp->n_nextn);
  if (hp->n_nextn > 0) {
    /* MTP blocks follow the main stack; block_count may or may not include them */
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "blk.%d.nextn.eh_proj.weight", hp->n_layer);
    snprintf(n2, sizeof n2, "blk.%d.nextn.eh_proj.weight", hp->n_layer - hp->n_nextn);
    if (!gguf_find_tensor(g, n1)) {
      if (!gguf_find_tensor(g, n2))
        return gt_err_set(err, GT_EFORMAT, "%s.nextn_predict_layers = %d but neither %s nor %s exists", a,
                          hp->n_nextn, n1, n2);
      hp->n_layer -= hp->n_nextn;
    }
  }
  model_hp_layer_cap(hp);
  char last[64];
  snprintf(last, sizeof last, "blk.%d.attn_norm.weight", hp->n_layer - 1);
  if (!gguf_find_tensor(g, last))
    return gt_err_set(err, GT_EFORMAT, "%s.block_count = %d but tensor %s is missing", a, hp->n_layer, last);
  hp->n_attn_layers = hp->n_gdn_layers = 0;
  for (int l = 0; l < hp->n_layer; l++) {
    if ((l + 1) % hp->full_attn_interval == 0)
      hp->n_attn_layers++;
    else
      hp->n_gdn_layers++;
  }
  const gguf_tensor_t *te = gguf_find_tensor(g, "token_embd.weight");
  if (!te || te->n_dims != 2) return gt_err_set(err, GT_EFORMAT, "missing or malformed tensor token_embd.weight");
  hp->n_vocab = (int)te->ne[1];
  hp->tied_output = gguf_find_tensor(g, "output.weight") == NULL;
  return GT_OK;
}

/* blk.<b>.<suffix>, with ".weight" appended unless the suffix is ssm_a or ends in ".bias". */
static void blk_name(char *n, size_t cap, int b, const char *suffix) {
  const size_t len = strlen(suffix);
  if (strcmp(suffix, "ssm_a") == 0 || (len > 5 && strcmp(suffix + len - 5, ".bias") == 0))
    snprintf(n, cap, "blk.%d.%s", b, suffix);
  else
    snprintf(n, cap, "blk.%d.%s.weight", b, suffix);
}

/* Loads tensor blk_name(b, suffix). */
static int lw(model_t *m, const gguf_t *g, int b, const char *suffix, int64_t rows, int64_t cols, be_weight_t *w,
              int optional, gt_err_t *err) {
  char n[160];
  blk_name(n, sizeof n, b, suffix);
  return optional ? model_weight_opt(m, g, n, rows, cols, w, err) : model_weight(m, g, n, rows, cols, w, err);
}

/* lw of a slice (engine/models/shard.h): rows rsel x columns csel, NULL: all. */
static int lws(model_t *m, const gguf_t *g, int b, const char *suffix, int64_t rows, int64_t cols,
               const model_sel_t *rsel, const model_sel_t *csel, be_weight_t *w, gt_err_t *err) {
  char n[160];
  blk_name(n, sizeof n, b, suffix);
  return model_weight_slice(m, g, n, rows, cols, rsel, csel, w, err);
}

static int load_attn(model_t *m, const gguf_t *g, int b, q35_layer_t *L, gt_err_t *err) {
  const model_hparams_t *hp = &m->hp;
  const model_shard_t *sh = &m->sh;
  const int64_t d = hp->n_embd, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
  const model_sel_t heads = model_sel1(sh->head0 * hd, sh->n_head * hd), kv = model_sel1(sh->kv_head0 * hd, sh->n_head_kv * hd);
  /* attn_q is per head [q | gate]: the rank's heads' q rows and gate rows as two weights */
  model_sel_t sq = {0}, sg = {0};
  for (int h = sh->head0; h < sh->head0 + sh->n_head; h++)
    if (model_sel_add(&sq, h * 2 * hd, hd) || model_sel_add(&sg, h * 2 * hd + hd, hd))
      return gt_err_set(err, GT_EUNSUPPORTED, "layer %d: %d attention heads on a rank (at most %d)", b, sh->n_head,
                        MODEL_SPANS_MAX);
  const int64_t np = m->n_params;
  int rc = lws(m, g, b, "attn_q", 2 * qd, d, &sq, NULL, &L->wq, err);
  rc = rc ? rc : lws(m, g, b, "attn_q", 2 * qd, d, &sg, NULL, &L->wqg, err);
  if (!rc) m->n_params = np + 2 * qd * d; /* one tensor, loaded as two slices */
  rc = rc ? rc : lws(m, g, b, "attn_k", kvd, d, &kv, NULL, &L->wk, err);
  rc = rc ? rc : lws(m, g, b, "attn_v", kvd, d, &kv, NULL, &L->wv, err);
  rc = rc ? rc : lw(m, g, b, "attn_q_norm", 1, hp->head_dim, &L->q_norm, 0, err);
  rc = rc ? rc : lw(m, g, b, "attn_k_norm", 1, hp->head_dim, &L->k_norm, 0, err);
  rc = rc ? rc : lws(m, g, b, "attn_output", d, qd, NULL, &heads, &L->wo, err);
  return rc;
}

static int load_common(model_t *m, const gguf_t *g, int b, q35_layer_t *L, gt_err_t *err) {
  const model_hparams_t *hp = &m->hp;
  const int64_t d = hp->n_embd;
  const model_sel_t ff = model_sel1(m->sh.ff0, m->sh.n_ff);
  int rc = lw(m, g, b, "attn_norm", 1, d, &L->attn_norm, 0, err);
  rc = rc ? rc : lw(m, g, b, "post_attention_norm", 1, d, &L->post_norm, 0, err);
  rc = rc ? rc : lws(m, g, b, "ffn_gate", hp->n_ff, d, &ff, NULL, &L->w_gate, err);
  rc = rc ? rc : lws(m, g, b, "ffn_up", hp->n_ff, d, &ff, NULL, &L->w_up, err);
  rc = rc ? rc : lws(m, g, b, "ffn_down", d, hp->n_ff, NULL, &ff, &L->w_down, err);
  return rc;
}

static int load_gdn(model_t *m, const gguf_t *g, int b, q35_layer_t *L, gt_err_t *err) {
  const model_hparams_t *hp = &m->hp;
  const int64_t d = hp->n_embd, nv = hp->gdn_n_v, vd = (int64_t)hp->gdn_n_v * hp->gdn_d_v;
  const int64_t C = 2 * (int64_t)hp->gdn_n_k * hp->gdn_d_k + vd;
  /* the rank's key heads and the value heads that use them (tiled order): qkv rows and conv
   * channels, value features (z gate rows, out-projection columns), per-head vectors */
  model_sel_t qkv, vfeat = {0}, vhead = {0};
  if (model_shard_gdn_qkv(&m->sh, hp->gdn_n_k, hp->gdn_d_k, hp->gdn_n_v, hp->gdn_d_v, &qkv) ||
      model_shard_gdn_v(&m->sh, hp->gdn_n_k, hp->gdn_n_v, hp->gdn_d_v, 0, &vfeat) ||
      model_shard_gdn_v(&m->sh, hp->gdn_n_k, hp->gdn_n_v, 1, 0, &vhead))
    return gt_err_set(err, GT_EUNSUPPORTED, "tensor parallelism: GDN value heads of layer %d are too scattered", b);
  int rc = lws(m, g, b, "attn_qkv", C, d, &qkv, NULL, &L->wqkv, err);
  rc = rc ? rc : lws(m, g, b, "attn_gate", vd, d, &vfeat, NULL, &L->wz, err);
  rc = rc ? rc : lws(m, g, b, "ssm_alpha", nv, d, &vhead, NULL, &L->w_alpha, err);
  rc = rc ? rc : lws(m, g, b, "ssm_beta", nv, d, &vhead, NULL, &L->w_beta, err);
  rc = rc ? rc : lws(m, g, b, "ssm_a", 1, nv, NULL, &vhead, &L->ssm_a, err);
  rc = rc ? rc : lws(m, g, b, "ssm_dt.bias", 1, nv, NULL, &vhead, &L->dt_bias, err);
  rc = rc ? rc : lws(m, g, b, "ssm_conv1d", C, hp->conv_kernel, &qkv, NULL, &L->conv, err);
  rc = rc ? rc : lw(m, g, b, "ssm_norm", 1, hp->gdn_d_v, &L->ssm_norm, 0, err);
  rc = rc ? rc : lws(m, g, b, "ssm_out", d, vd, NULL, &vfeat, &L->ssm_out, err);
  if (rc) return rc;
  /* the GDN ops compute these in fp32 from the weight memory directly */
  const be_weight_t *f32[] = {&L->ssm_a, &L->dt_bias, &L->conv, &L->ssm_norm};
  static const char *names[] = {"ssm_a", "ssm_dt.bias", "ssm_conv1d", "ssm_norm"};
  for (int i = 0; i < 4; i++)
    if (f32[i]->type != GT_TYPE_F32)
      return gt_err_set(err, GT_EUNSUPPORTED, "tensor blk.%d.%s has type %s; gantry needs F32", b, names[i],
                        dt_name(f32[i]->type));
  return GT_OK;
}

/* MTP blocks follow the main stack: blk.<n_layer + i> (n_layer already excludes them). */
static int load_mtp(model_t *m, const gguf_t *g, q35_t *s, gt_err_t *err) {
  const model_hparams_t *hp = &m->hp;
  if (hp->n_nextn == 0) return GT_OK;
  s->mtp = calloc((size_t)hp->n_nextn, sizeof *s->mtp);
  if (!s->mtp) return gt_err_set(err, GT_ENOMEM, "out of memory");
  const int64_t d = hp->n_embd;
  int rc = 0;
  for (int i = 0; !rc && i < hp->n_nextn; i++) {
    q35_mtp_t *M = &s->mtp[i];
    const int b = hp->n_layer + i;
    rc = lw(m, g, b, "nextn.eh_proj", d, 2 * d, &M->eh_proj, 0, err);
    rc = rc ? rc : lw(m, g, b, "nextn.enorm", 1, d, &M->enorm, 0, err);
    rc = rc ? rc : lw(m, g, b, "nextn.hnorm", 1, d, &M->hnorm, 0, err);
    rc = rc ? rc : lw(m, g, b, "nextn.shared_head_norm", 1, d, &M->shared_head_norm, 1, err); /* else output_norm */
    rc = rc ? rc : lw(m, g, b, "nextn.shared_head_head", hp->n_vocab, d, &M->shared_head_head, 1, err);
    rc = rc ? rc : lw(m, g, b, "nextn.embed_tokens", hp->n_vocab, d, &M->embed_tokens, 1, err);
    rc = rc ? rc : load_common(m, g, b, &M->blk, err);
    rc = rc ? rc : load_attn(m, g, b, &M->blk, err);
    M->blk.is_attn = 1;
  }
  return rc;
}

static int q35_load(model_t *m, const gguf_t *g, gt_err_t *err) {
  int rc = read_hparams(m, g, err);
  if (!rc) rc = model_shard_plan(&m->hp, m->be->rank, m->be->n_ranks, &m->sh, err);
  if (rc) return rc;
  const model_hparams_t *hp = &m->hp;
  const model_shard_t *sh = &m->sh;
  q35_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "out of memory");
  m->arch_data = s;
  s->layers = calloc((size_t)hp->n_layer, sizeof *s->layers);
  if (!s->layers) return gt_err_set(err, GT_ENOMEM, "out of memory");
  const int64_t d = hp->n_embd;
  rc = model_weight(m, g, "token_embd.weight", hp->n_vocab, d, &s->tok_embd, err);
  rc = rc ? rc : model_weight(m, g, "output_norm.weight", 1, d, &s->output_norm, err);
  const model_sel_t vocab = model_sel1(sh->vocab0, sh->n_vocab);
  if (!rc && !hp->tied_output)
    rc = model_weight_slice(m, g, "output.weight", hp->n_vocab, d, &vocab, NULL, &s->output, err);
  if (!rc) s->head = model_head_weight(m, hp->tied_output ? &s->tok_embd : &s->output);
  int n_attn = 0, n_gdn = 0;
  for (int l = 0; !rc && l < hp->n_layer; l++) {
    q35_layer_t *L = &s->layers[l];
    L->is_attn = (l + 1) % hp->full_attn_interval == 0;
    L->idx = L->is_attn ? n_attn++ : n_gdn++;
    rc = load_common(m, g, l, L, err);
    rc = rc ? rc : (L->is_attn ? load_attn(m, g, l, L, err) : load_gdn(m, g, l, L, err));
  }
  rc = rc ? rc : load_mtp(m, g, s, err);
  if (rc) return rc;

  /* scratch */
  be_t *be = m->be;
  const size_t T = (size_t)m->max_tokens;
  const size_t qd = (size_t)sh->n_head * hp->head_dim, kvd = (size_t)sh->n_head_kv * hp->head_dim;
  const size_t kd = (size_t)sh->gdn_n_k * hp->gdn_d_k, vd = (size_t)sh->gdn_n_v * hp->gdn_d_v, C = 2 * kd + vd;
  const int A = hp->n_attn_layers > 0, G = hp->n_gdn_layers > 0;
  struct {
    float **p;
    size_t n;
  } bufs[] = {
      {&s->x, T * d},          {&s->h, T * d},           {&s->o, T * d},         {&s->gate, T * sh->n_ff},
      {&s->up, T * sh->n_ff},  {&s->q, A * T * qd},    {&s->ag, A * T * qd},
      {&s->k, A * T * kvd},    {&s->v, A * T * kvd},     {&s->att, A * T * qd},  {&s->mixed, G * T * C},
      {&s->conv, G * T * C},   {&s->gq, G * T * kd},     {&s->gk, G * T * kd},   {&s->gv, G * T * vd},
      {&s->gz, G * T * vd},    {&s->go, G * T * vd},     {&s->galpha, G * T * sh->gdn_n_v},
      {&s->gbeta, G * T * sh->gdn_n_v}, {&s->xo, T * d}, {&s->logits, (size_t)MODEL_HEAD_CHUNK * sh->n_vocab},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    if (bufs[i].n == 0) continue;
    *bufs[i].p = be->ops->alloc(be, bufs[i].n * sizeof(float));
    if (!*bufs[i].p) return gt_err_set(err, GT_ENOMEM, "scratch buffers for %zu tokens", T);
  }
  return GT_OK;
}


/* h [T, d] -> s->o [T, d]: gated attention of layer L (before the all-reduce). */
void q35_attn_mixer(model_t *m, const q35_layer_t *L, int T) {
  q35_t *s = m->arch_data;
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  const model_hparams_t *hp = &m->hp;
  const int H = m->sh.n_head, Hk = m->sh.n_head_kv, hd = hp->head_dim;
  const float eps = hp->rms_eps;
  const be_weight_t *wqkv[4] = {&L->wq, &L->wqg, &L->wk, &L->wv};
  float *const qkv[4] = {s->q, s->ag, s->k, s->v};
  model_matmul_multi(be, 4, wqkv, s->h, qkv, T);
  model_attn_qk_prep(be, L->idx, s->q, s->k, s->v, &L->q_norm, &L->k_norm, H, Hk, hd, hp->n_rot, hp->rope_theta, eps,
                     T);
  o->attention(be, L->idx, s->q, s->att, H, Hk, hd, 1.0f / sqrtf((float)hd));
  o->mul_sigmoid(be, s->att, s->ag, (size_t)T * H * hd);
  o->matmul(be, &L->wo, s->att, s->o, T);
}

/* h [T, d] -> s->o [T, d]: Gated DeltaNet of layer L (before the all-reduce). */
static void gdn_mixer(model_t *m, const q35_layer_t *L, int T) {
  q35_t *s = m->arch_data;
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  const model_hparams_t *hp = &m->hp;
  const int nk = m->sh.gdn_n_k, nv = m->sh.gdn_n_v, dk = hp->gdn_d_k, dv = hp->gdn_d_v;
  const be_weight_t *win[4] = {&L->wqkv, &L->wz, &L->w_alpha, &L->w_beta};
  float *const outs[4] = {s->mixed, s->gz, s->galpha, s->gbeta};
  model_matmul_multi(be, 4, win, s->h, outs, T);
  model_gdn_conv_qkv(be, L->idx, s->mixed, &L->conv, hp->conv_kernel, s->conv, s->gq, s->gk, s->gv, nk, dk, nv, dv,
                     hp->rms_eps, 1.0f / sqrtf((float)dk), T);
  o->gdn_gates(be, s->galpha, s->gbeta, &L->ssm_a, &L->dt_bias, s->galpha, s->gbeta, nv);
  o->gdn_scan(be, L->idx, s->gq, s->gk, s->gv, s->galpha, s->gbeta, s->go, nk, nv, dk, dv);
  o->rmsnorm_gated(be, s->go, &L->ssm_norm, s->gz, s->go, T * nv, dv, hp->rms_eps);
  o->matmul(be, &L->ssm_out, s->go, s->o, T);
}

static int q35_forward(model_t *m, const be_batch_t *b, float *logits, gt_err_t *err) {
  q35_t *s = m->arch_data;
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  const model_hparams_t *hp = &m->hp;
  const int T = b->n_tok, d = hp->n_embd;
  const float eps = hp->rms_eps;
  if (T <= 0 || T > m->max_tokens || b->n_out < 0 || b->n_out > T)
    return gt_err_set(err, GT_EINVAL, "batch of %d tokens / %d outputs (max %d tokens)", T, b->n_out, m->max_tokens);
  if (hp->n_gdn_layers > 0 && !b->state_slot)
    return gt_err_set(err, GT_EINVAL, "qwen35 is a hybrid model: the batch needs a state slot per sequence");
  if (b->n_out > 0 && !logits && !m->head_rows) return gt_err_set(err, GT_EINVAL, "logits buffer is NULL with %d outputs", b->n_out);
  if (o->set_batch(be, b)) return model_backend_err(be, err);

  o->embed(be, &s->tok_embd, s->x);
  for (int l = 0; l < hp->n_layer; l++) {
    const q35_layer_t *L = &s->layers[l];
    if (l == 0)
      o->rmsnorm(be, s->x, &L->attn_norm, s->h, T, d, eps);
    else
      o->add_rmsnorm(be, s->x, s->o, &L->attn_norm, s->h, T, d, eps); /* x += previous ffn output */
    if (L->is_attn)
      q35_attn_mixer(m, L, T);
    else
      gdn_mixer(m, L, T);
    o->all_reduce(be, s->o, (size_t)T * d);
    o->add_rmsnorm(be, s->x, s->o, &L->post_norm, s->h, T, d, eps); /* x += mixer output */
    model_swiglu_ffn(m, &L->w_gate, &L->w_up, &L->w_down, s->h, s->gate, s->up, s->o, T);
  }
  /* the MTP drafter's input: the head's input, every row, computed in the step (before the head
   * ends it: on CUDA inside the step's graph); the head's own normed rows when every row is an out
   * row (model_out_all: decode, verify), else an add and a norm of all rows first */
  const float *delta = s->o;
  const int keep = s->hid && model_out_all(b);
  if (keep) {
    m->head_keep = s->hid;
  } else if (s->hid) {
    o->add(be, s->x, s->o, (size_t)T * d);
    o->rmsnorm(be, s->x, &s->output_norm, s->hid, T, d, eps);
    delta = NULL;
  }
  int rc = model_head(m, b, s->x, delta, s->xo, s->logits, &s->output_norm, &s->head, logits, err);
  if (keep) m->head_keep = NULL;
  if (s->hid) s->hid_rows = rc ? 0 : T;
  return rc;
}

const model_arch_t model_arch_qwen35 = {.name = "qwen35", .load = q35_load, .free = q35_free, .forward = q35_forward,
                                        .mtp_enable = q35_mtp_enable, .mtp_forward = q35_mtp_forward};
