/* engine/models/qwen35_mtp.c — Qwen3.5's MTP (nextn) block as a speculative drafter
 * (model_mtp_forward, engine/models/model.h), over the backend ops like the decoder itself, so
 * every backend runs it.
 *
 * Row t (position p = pos[t], token tok[t] = the token at p + 1, hidden h = the main model's
 * head input at p, i.e. after its final norm, or the MTP block's own normed output of the
 * previous draft when chaining) predicts the token at p + 2:
 *   e = enorm(embed(tok))                         [T, d]  (nextn.embed_tokens, else token_embd)
 *   x = eh_proj · concat(e, hnorm(h))             [T, 2d] -> [T, d]
 *   x += gated_attention(attn_norm(x))            the block's own KV layer, RoPE at p, causal
 *   x += swiglu_ffn(post_attention_norm(x))
 *   logits = head(shared_head_norm(x))            (nextn.shared_head_head, else the model's head;
 *                                                  no shared_head_norm: output_norm)
 * This is the graph of vLLM's qwen3_5_mtp / Qwen3-Next MTP (and what the demo35 training code
 * trains): the hidden input is the main model's final-normed hidden state, the concat puts the
 * embedding first, and a chained draft feeds the block's normed output back. */
#include <string.h>

#include "engine/models/qwen35_internal.h"

int q35_mtp_enable(model_t *m, gt_err_t *err) {
  q35_t *s = m->arch_data;
  const model_hparams_t *hp = &m->hp;
  if (m->sh.n_ranks > 1) return gt_err_set(err, GT_EUNSUPPORTED, "the MTP drafter runs on one rank");
  if (hp->n_attn_layers == 0) return gt_err_set(err, GT_EUNSUPPORTED, "MTP drafter: the model has no attention layer");
  if (s->hid) return GT_OK;
  be_t *be = m->be;
  const size_t T = (size_t)m->max_tokens, d = (size_t)hp->n_embd;
  float **bufs[] = {&s->hid, &s->mcat, &s->mprev, &s->mtmp};
  const size_t n[] = {T * d, 2 * T * d, T * d, T * d};
  for (int i = 0; i < 4; i++) {
    *bufs[i] = be->ops->alloc(be, n[i] * sizeof(float));
    if (!*bufs[i]) return gt_err_set(err, GT_ENOMEM, "MTP scratch for %zu tokens", T);
  }
  s->mtp[0].blk.idx = hp->n_attn_layers; /* its KV layer follows the model's */
  m->mtp_kv_layers = 1;
  return GT_OK;
}

/* mtmp[t] = hid[src[t]] or mprev[-1 - src[t]], copied in runs of consecutive rows (copy 0: only
 * checks the rows, before the step starts, and sets *one to the rows' start when they are one run,
 * else NULL; copy 1: the copies, ops of the step). */
static int gather_hidden(model_t *m, const int32_t *src, int T, int copy, const float **one, gt_err_t *err) {
  q35_t *s = m->arch_data;
  be_t *be = m->be;
  const int d = m->hp.n_embd;
  for (int t = 0; t < T;) {
    const int own = src[t] < 0, r0 = own ? -1 - src[t] : src[t], lim = own ? s->mprev_rows : s->hid_rows;
    int n = 1;
    while (t + n < T && src[t + n] == (own ? src[t] - n : src[t] + n)) n++;
    if (r0 < 0 || r0 + n > lim)
      return gt_err_set(err, GT_EINVAL, "MTP hidden rows [%d, %d) of %s out of [0, %d)", r0, r0 + n,
                        own ? "the previous MTP step" : "the last forward", lim);
    if (copy) be->ops->copy2d(be, s->mtmp + (size_t)t * d, d, (own ? s->mprev : s->hid) + (size_t)r0 * d, d, n, d);
    if (one) *one = t == 0 && n == T ? (own ? s->mprev : s->hid) + (size_t)r0 * d : NULL;
    t += n;
  }
  return GT_OK;
}

int q35_mtp_forward(model_t *m, const be_batch_t *b, const int32_t *src, float *logits, gt_err_t *err) {
  q35_t *s = m->arch_data;
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  const model_hparams_t *hp = &m->hp;
  const q35_mtp_t *M = &s->mtp[0];
  const int T = b->n_tok, d = hp->n_embd;
  const float eps = hp->rms_eps;
  if (!s->hid) return gt_err_set(err, GT_EINVAL, "MTP forward before q35_mtp_enable");
  if (T <= 0 || T > m->max_tokens || b->n_out < 0 || b->n_out > T || (b->n_out > 0 && !logits && !m->head_rows))
    return gt_err_set(err, GT_EINVAL, "MTP batch of %d tokens / %d outputs (max %d tokens)", T, b->n_out, m->max_tokens);
  const float *one = NULL; /* the hidden rows in place when they are one run (no gather copy) */
  int rc = gather_hidden(m, src, T, 0, &one, err);
  if (rc) return rc;
  be_batch_t bb = *b;
  bb.state_slot = NULL; /* no recurrent layer runs: nothing may reset the sequences' slots */
  bb.drafter = 1;       /* CUDA: graphs of its own, the model's decode / verify graphs stay */
  if (o->set_batch(be, &bb)) return model_backend_err(be, err);
  if (!one) gather_hidden(m, src, T, 1, NULL, err);
  o->embed(be, M->embed_tokens.data ? &M->embed_tokens : &s->tok_embd, s->x);
  o->rmsnorm(be, s->x, &M->enorm, s->h, T, d, eps);
  o->copy2d(be, s->mcat, 2 * (size_t)d, s->h, d, T, d);
  o->rmsnorm(be, one ? one : s->mtmp, &M->hnorm, s->mtmp, T, d, eps);
  o->copy2d(be, s->mcat + d, 2 * (size_t)d, s->mtmp, d, T, d);
  o->matmul(be, &M->eh_proj, s->mcat, s->x, T);
  const q35_layer_t *L = &M->blk;
  o->rmsnorm(be, s->x, &L->attn_norm, s->h, T, d, eps);
  q35_attn_mixer(m, L, T);
  o->add_rmsnorm(be, s->x, s->o, &L->post_norm, s->h, T, d, eps);
  model_swiglu_ffn(m, &L->w_gate, &L->w_up, &L->w_down, s->h, s->gate, s->up, s->o, T);
  const be_weight_t *norm = M->shared_head_norm.data ? &M->shared_head_norm : &s->output_norm;
  const be_weight_t *head = M->shared_head_head.data ? &M->shared_head_head : &s->head;
  /* logits to the host, or greedy ids (model_mtp_forward_greedy: m->head_rows; kept in backend
   * memory without a wait under model_mtp_forward_greedy_dev: m->head_ids_dev); the normed out
   * rows also go to mprev in the same step: the chained draft's hidden input */
  m->head_keep = s->mprev;
  rc = model_head(m, &bb, s->x, s->o, s->xo, s->logits, norm, head, logits, err);
  m->head_keep = NULL;
  s->mprev_rows = rc ? 0 : b->n_out;
  return rc;
}
