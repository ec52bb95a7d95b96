/* engine/models/model.c — architecture registry, cache sizing and weight-loading helpers. */
#include "engine/models/model.h"
#include "engine/models/tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const model_arch_t *const arches[] = {&model_arch_qwen3, &model_arch_qwen35};

int model_hp_int(const gguf_t *g, const char *arch, const char *suffix, int def, int required, int *out,
                 gt_err_t *err) {
  char key[256];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  int64_t v;
  int rc = gguf_get_int(g, key, &v);
  if (rc == GT_ENOTFOUND && !required) {
    *out = def;
    return GT_OK;
  }
  if (rc == GT_ENOTFOUND) return gt_err_set(err, GT_EFORMAT, "missing metadata key %s", key);
  if (rc) return gt_err_set(err, GT_EFORMAT, "metadata key %s is not an integer", key);
  if (v < 0 || v > (1 << 30)) return gt_err_set(err, GT_EFORMAT, "metadata key %s = %lld out of range", key, (long long)v);
  *out = (int)v;
  return GT_OK;
}

int model_hp_float(const gguf_t *g, const char *arch, const char *suffix, float def, int required, float *out,
                   gt_err_t *err) {
  char key[256];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  double v;
  int rc = gguf_get_float(g, key, &v);
  if (rc == GT_ENOTFOUND && !required) {
    *out = def;
    return GT_OK;
  }
  if (rc == GT_ENOTFOUND) return gt_err_set(err, GT_EFORMAT, "missing metadata key %s", key);
  if (rc) return gt_err_set(err, GT_EFORMAT, "metadata key %s is not a number", key);
  *out = (float)v;
  return GT_OK;
}

/* Rows sel_r x columns sel_c of t (full shape rows x cols) into *out, a malloc'd host buffer of
 * rows' x row_bytes(cols'). GT_EUNSUPPORTED naming the tensor when a column span is off the
 * type's blocks; GT_ENOMEM. */
static int slice_host(const gguf_tensor_t *t, const char *name, int64_t rows, int64_t cols, const model_sel_t *sel_r,
                      const model_sel_t *sel_c, void **out, int64_t *out_rows, int64_t *out_cols, gt_err_t *err) {
  const int64_t blk = dt_block_elems(t->type);
  model_sel_t all_r = model_sel1(0, rows), all_c = model_sel1(0, cols);
  if (!sel_r || sel_r->n == 0) sel_r = &all_r;
  if (!sel_c || sel_c->n == 0) sel_c = &all_c;
  int64_t nr = 0, nc = 0;
  for (int i = 0; i < sel_r->n; i++) nr += sel_r->s[i].len;
  for (int i = 0; i < sel_c->n; i++) {
    const model_span_t *c = &sel_c->s[i];
    if (c->start % blk || c->len % blk)
      return gt_err_set(err, GT_EUNSUPPORTED,
                 "tensor %s (%s, blocks of %lld) cannot be split for tensor parallelism: its columns [%lld, %lld) "
                 "would cut a quantization block",
                 name, dt_name(t->type), (long long)blk, (long long)c->start, (long long)(c->start + c->len));
    nc += c->len;
  }
  const size_t src_rb = dt_row_bytes(t->type, cols), dst_rb = dt_row_bytes(t->type, nc);
  char *buf = malloc(dst_rb * (size_t)nr);
  if (!buf) return gt_err_set(err, GT_ENOMEM, "tensor %s: slice of %lld x %lld", name, (long long)nr, (long long)nc);
  char *dst = buf;
  for (int i = 0; i < sel_r->n; i++)
    for (int64_t r = sel_r->s[i].start; r < sel_r->s[i].start + sel_r->s[i].len; r++) {
      const char *row = (const char *)t->data + (size_t)r * src_rb;
      for (int j = 0; j < sel_c->n; j++) {
        const size_t off = dt_row_bytes(t->type, sel_c->s[j].start), n = dt_row_bytes(t->type, sel_c->s[j].len);
        memcpy(dst, row + off, n);
        dst += n;
      }
    }
  *out_rows = nr;
  *out_cols = nc;
  *out = buf;
  return GT_OK;
}

static int weight(model_t *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols, const model_sel_t *sel_r,
                  const model_sel_t *sel_c, be_weight_t *w, int optional, gt_err_t *err) {
  memset(w, 0, sizeof *w);
  const gguf_tensor_t *t = gguf_find_tensor(g, name);
  if (!t) return optional ? GT_OK : gt_err_set(err, GT_EFORMAT, "missing tensor %s", name);
  int64_t t_rows = 1;
  for (uint32_t i = 1; i < t->n_dims; i++) t_rows *= t->ne[i];
  if (t->ne[0] != cols || t_rows != rows)
    return gt_err_set(err, GT_EFORMAT, "tensor %s has shape [%lld, %lld], expected [%lld, %lld]", name,
                      (long long)t_rows, (long long)t->ne[0], (long long)rows, (long long)cols);
  if (!dt_computable(t->type))
    return gt_err_set(err, GT_EUNSUPPORTED, "tensor %s has type %s, which gantry cannot compute with", name,
                      dt_name(t->type));
  /* a selection of everything is no selection: one rank loads exactly as before */
  if (sel_r && sel_r->n == 1 && sel_r->s[0].start == 0 && sel_r->s[0].len == rows) sel_r = NULL;
  if (sel_c && sel_c->n == 1 && sel_c->s[0].start == 0 && sel_c->s[0].len == cols) sel_c = NULL;
  int rc;
  if ((sel_r && sel_r->n) || (sel_c && sel_c->n)) {
    int64_t nr, nc;
    void *host = NULL;
    if ((rc = slice_host(t, name, rows, cols, sel_r, sel_c, &host, &nr, &nc, err))) return rc;
    rc = be_weight_upload(m->be, w, t->type, nr, nc, host, err);
    free(host);
    if (!rc) m->weight_bytes += w->row_bytes * (size_t)w->rows;
  } else {
    rc = be_weight_upload(m->be, w, t->type, rows, cols, t->data, err);
    if (!rc) m->weight_bytes += t->nbytes;
  }
  if (rc) return gt_err_wrap(err, "tensor %s", name);
  m->n_params += rows * cols;
  return GT_OK;
}

int model_weight(model_t *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols, be_weight_t *w,
                 gt_err_t *err) {
  return weight(m, g, name, rows, cols, NULL, NULL, w, 0, err);
}

int model_weight_opt(model_t *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols, be_weight_t *w,
                     gt_err_t *err) {
  return weight(m, g, name, rows, cols, NULL, NULL, w, 1, err);
}

int model_weight_slice(model_t *m, const gguf_t *g, const char *name, int64_t rows, int64_t cols,
                       const model_sel_t *rows_sel, const model_sel_t *cols_sel, be_weight_t *w, gt_err_t *err) {
  return weight(m, g, name, rows, cols, rows_sel, cols_sel, w, 0, err);
}

be_weight_t model_head_weight(const model_t *m, const be_weight_t *w) {
  be_weight_t v = *w;
  if (w->rows == m->sh.n_vocab) return v; /* already this rank's rows (or one rank) */
  v.rows = m->sh.n_vocab;
  v.data = (char *)w->data + (size_t)m->sh.vocab0 * w->row_bytes;
  return v;
}

static int find_arch(const gguf_t *g, const model_arch_t **out, gt_err_t *err) {
  const char *arch = gguf_arch(g);
  if (!arch) return gt_err_set(err, GT_EFORMAT, "missing general.architecture");
  for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
    if (strcmp(arches[i]->name, arch) == 0) {
      *out = arches[i];
      return GT_OK;
    }
  return gt_err_set(err, GT_EUNSUPPORTED, "unknown architecture '%s' (supported: qwen3, qwen35)", arch);
}

static void set_names(model_hparams_t *hp, const gguf_t *g) {
  snprintf(hp->arch, sizeof hp->arch, "%s", gguf_arch(g));
  const char *name;
  size_t len;
  if (gguf_get_str(g, "general.name", &name, &len) == GT_OK)
    snprintf(hp->name, sizeof hp->name, "%.*s", (int)(len < 127 ? len : 127), name);
}

int model_read_hparams(const gguf_t *g, model_hparams_t *hp, gt_err_t *err) {
  const model_arch_t *a;
  int rc = find_arch(g, &a, err);
  if (rc) return rc;
  memset(hp, 0, sizeof *hp);
  set_names(hp, g);
  if (a->hparams) return a->hparams(hp, g, err);
  be_t *be;
  model_t *m;
  if ((rc = be_cpu_create(1, &be, err))) return rc;
  if (!(rc = model_load(g, be, 1, &m, err))) {
    *hp = m->hp;
    model_free(m);
  }
  be_destroy(be);
  return rc;
}

int model_load(const gguf_t *g, be_t *be, int max_tokens, model_t **out, gt_err_t *err) {
  const model_arch_t *a;
  int rc = find_arch(g, &a, err);
  if (rc) return rc;
  if (max_tokens <= 0) return gt_err_set(err, GT_EINVAL, "max_tokens must be positive");
  model_t *m = calloc(1, sizeof *m);
  if (!m) return gt_err_set(err, GT_ENOMEM, "out of memory");
  m->arch = a;
  m->be = be;
  m->max_tokens = max_tokens;
  m->max_out = max_tokens;
  set_names(&m->hp, g);
  rc = a->load(m, g, err);
  if (rc) {
    a->free(m);
    free(m);
    return rc;
  }
  *out = m;
  return GT_OK;
}

void model_free(model_t *m) {
  if (!m) return;
  m->arch->free(m);
  free(m->mtp_greedy);
  free(m);
}

/* Per-slot state sizes of a GDN layer (hybrid models), for the rank's heads. */
static size_t conv_dim(const model_t *m) {
  const model_hparams_t *hp = &m->hp;
  size_t channels = 2 * (size_t)m->sh.gdn_n_k * hp->gdn_d_k + (size_t)m->sh.gdn_n_v * hp->gdn_d_v;
  return channels * (size_t)(hp->conv_kernel > 0 ? hp->conv_kernel - 1 : 0);
}
static size_t ssm_dim(const model_t *m) { return (size_t)m->sh.gdn_n_v * m->hp.gdn_d_k * m->hp.gdn_d_v; }

size_t model_kv_bytes_per_token(const model_t *m) {
  if (m->tp) return tp_kv_bytes_per_token(m->tp);
  return (size_t)(m->hp.n_attn_layers + m->mtp_kv_layers) * be_kv_token_bytes(m->be, m->sh.n_head_kv * m->hp.head_dim);
}

size_t model_state_bytes_per_slot(const model_t *m) {
  if (m->tp) return tp_state_bytes_per_slot(m->tp);
  return sizeof(float) * (size_t)m->hp.n_gdn_layers * (conv_dim(m) + ssm_dim(m));
}

int model_n_ranks(const model_t *m) { return m->tp ? tp_n_ranks(m->tp) : 1; }
const model_t *model_rank(const model_t *m, int r) { return m->tp ? tp_rank_model(m->tp, r) : m; }

int model_cache_init(model_t *m, int n_blocks, int block_tokens, int n_slots, gt_err_t *err) {
  if (m->tp) {
    int rc = tp_cache_init(m->tp, n_blocks, block_tokens, n_slots, err);
    m->cache_bytes = 0;
    for (int r = 0; !rc && r < tp_n_ranks(m->tp); r++) m->cache_bytes += tp_rank_model(m->tp, r)->cache_bytes;
    return rc;
  }
  be_t *be = m->be;
  int rc = be->ops->kv_init(be, m->hp.n_attn_layers + m->mtp_kv_layers, n_blocks, block_tokens, m->sh.n_head_kv * m->hp.head_dim);
  if (!rc && m->hp.n_gdn_layers > 0)
    rc = be->ops->state_init(be, m->hp.n_gdn_layers, n_slots, conv_dim(m), ssm_dim(m));
  if (rc) {
    be->ops->sync(be);
    return gt_err_set(err, rc, "%s", be->err.msg);
  }
  m->cache_bytes = (size_t)n_blocks * block_tokens * model_kv_bytes_per_token(m) +
                   (m->hp.n_gdn_layers > 0 ? (size_t)n_slots * model_state_bytes_per_slot(m) : 0);
  return GT_OK;
}

int model_mtp_enable(model_t *m, gt_err_t *err) {
  if (m->tp) return gt_err_set(err, GT_EUNSUPPORTED, "the MTP drafter runs on one backend (no tensor parallelism)");
  if (!m->arch->mtp_enable || m->hp.n_nextn <= 0)
    return gt_err_set(err, GT_EUNSUPPORTED, "model %s has no MTP (nextn) block", m->hp.name);
  return m->arch->mtp_enable(m, err);
}

/* The drafter's step with the head mode set for it alone (host logits, or greedy rows + ids), the
 * caller's restored after. */
static int mtp_forward(model_t *m, const be_batch_t *b, const int32_t *src, float *logits,
                       const be_sample_row_t *rows, int32_t *ids, gt_err_t *err) {
  if (!m->mtp_kv_layers) return gt_err_set(err, GT_EINVAL, "model_mtp_forward before model_mtp_enable");
  const be_sample_row_t *rows0 = m->head_rows;
  int32_t *ids0 = m->head_ids;
  const uint32_t *mask0 = m->head_mask, *rmap0 = m->head_rmap;
  m->head_rows = rows;
  m->head_ids = ids;
  m->head_mask = m->head_rmap = NULL;
  const int rc = m->arch->mtp_forward(m, b, src, logits, err);
  m->head_rows = rows0;
  m->head_ids = ids0;
  m->head_mask = mask0;
  m->head_rmap = rmap0;
  return rc;
}

int model_mtp_forward(model_t *m, const be_batch_t *b, const int32_t *src, float *logits, gt_err_t *err) {
  return mtp_forward(m, b, src, logits, NULL, NULL, err);
}

/* model_mtp_forward_greedy with the ids to host ids or (dev) backend dev_ids */
static int mtp_greedy(model_t *m, const be_batch_t *b, const int32_t *src, int32_t *ids, int dev, gt_err_t *err) {
  if (!(dev ? (void *)m->be->ops->argmax_dev : (void *)m->be->ops->sample))
    return gt_err_set(err, GT_EUNSUPPORTED, "backend %s cannot %s", m->be->ops->name, dev ? "keep greedy ids" : "sample");
  if (b->n_out < 0 || b->n_out > m->max_out || (b->n_out > 0 && !ids))
    return gt_err_set(err, GT_EINVAL, "MTP step of %d greedy rows (max %d)", b->n_out, m->max_out);
  if (!m->mtp_greedy) {
    m->mtp_greedy = malloc(sizeof(be_sample_row_t) * (size_t)(m->max_out > 0 ? m->max_out : 1));
    if (!m->mtp_greedy) return gt_err_set(err, GT_ENOMEM, "MTP greedy rows");
    for (int i = 0; i < m->max_out; i++)
      m->mtp_greedy[i] = (be_sample_row_t){.temperature = 0, .top_k = 1, .top_p = 1, .min_p = 0, .u = 0};
  }
  /* a draft vocabulary: the head's first rows only (one rank: a group's head is vocab-parallel) */
  const int dv = m->mtp_draft_vocab;
  m->head_vocab = dv > 0 && dv < m->hp.n_vocab && m->sh.n_ranks == 1 ? dv : 0;
  m->head_ids_dev = dev ? ids : NULL;
  const int rc = mtp_forward(m, b, src, NULL, m->mtp_greedy, dev ? NULL : ids, err);
  m->head_vocab = 0;
  m->head_ids_dev = NULL;
  return rc;
}

int model_mtp_forward_greedy(model_t *m, const be_batch_t *b, const int32_t *src, int32_t *ids, gt_err_t *err) {
  return mtp_greedy(m, b, src, ids, 0, err);
}

int model_mtp_forward_greedy_dev(model_t *m, const be_batch_t *b, const int32_t *src, int32_t *dev_ids,
                                 gt_err_t *err) {
  return mtp_greedy(m, b, src, dev_ids, 1, err);
}

int model_backend_err(be_t *be, gt_err_t *err) {
  int rc = be->ops->sync(be);
  return rc ? gt_err_set(err, rc, "%s", be->err.msg) : GT_OK;
}

void model_swiglu_ffn(model_t *m, const be_weight_t *w_gate, const be_weight_t *w_up, const be_weight_t *w_down,
                      const float *h, float *gate, float *up, float *out, int T) {
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  if (o->ffn_swiglu) {
    o->ffn_swiglu(be, w_gate, w_up, h, gate, up, T);
  } else {
    o->matmul(be, w_gate, h, gate, T);
    o->matmul(be, w_up, h, up, T);
    o->swiglu(be, gate, up, gate, (size_t)T * w_gate->rows);
  }
  o->matmul(be, w_down, gate, out, T);
  o->all_reduce(be, out, (size_t)T * w_down->rows);
}

void model_matmul_multi(be_t *be, int n, const be_weight_t *const w[], const float *x, float *const out[], int T) {
  const be_ops_t *o = be->ops;
  if (o->matmul_multi) {
    o->matmul_multi(be, n, w, x, out, T);
    return;
  }
  for (int i = 0; i < n; i++) o->matmul(be, w[i], x, out[i], T);
}

void model_attn_qk_prep(be_t *be, int layer, float *q, float *k, const float *v, const be_weight_t *q_norm,
                        const be_weight_t *k_norm, int n_head, int n_kv_head, int hd, int n_rot, float theta,
                        float eps, int T) {
  const be_ops_t *o = be->ops;
  if (o->attn_qk_prep) {
    o->attn_qk_prep(be, layer, q, k, v, q_norm, k_norm, n_head, n_kv_head, hd, n_rot, theta, eps);
    return;
  }
  o->rmsnorm(be, q, q_norm, q, T * n_head, hd, eps);
  o->rmsnorm(be, k, k_norm, k, T * n_kv_head, hd, eps);
  o->rope(be, q, n_head, hd, n_rot, theta);
  o->rope(be, k, n_kv_head, hd, n_rot, theta);
  o->kv_store(be, layer, k, v);
}

void model_gdn_conv_qkv(be_t *be, int layer, const float *x, const be_weight_t *w, int K, float *conv, float *q,
                        float *k, float *v, int n_k, int d_k, int n_v, int d_v, float eps, float q_scale, int T) {
  const be_ops_t *o = be->ops;
  if (o->gdn_conv_qkv) {
    o->gdn_conv_qkv(be, layer, x, w, K, q, k, v, n_k, d_k, n_v, d_v, eps, q_scale);
    return;
  }
  const int kd = n_k * d_k, vd = n_v * d_v, C = 2 * kd + vd;
  o->conv1d_silu(be, layer, x, conv, w, C, K);
  o->copy2d(be, q, kd, conv, C, T, kd);
  o->copy2d(be, k, kd, conv + kd, C, T, kd);
  o->copy2d(be, v, vd, conv + 2 * kd, C, T, vd);
  o->l2norm(be, q, T * n_k, d_k, eps, q_scale);
  o->l2norm(be, k, T * n_k, d_k, eps, 1.0f);
}

int model_forward_sample_mask(model_t *m, const be_batch_t *b, const be_sample_row_t *rows, int32_t *ids,
                              const uint32_t *mask, const uint32_t *rmap, gt_err_t *err) {
  if (!m->be->ops->sample) return gt_err_set(err, GT_EUNSUPPORTED, "backend %s cannot sample", m->be->ops->name);
  if (m->sh.n_ranks > 1 && !m->tp) /* a rank holds part of the vocabulary: only its group samples */
    return gt_err_set(err, GT_EUNSUPPORTED, "sampling on rank %d of %d alone", m->sh.rank, m->sh.n_ranks);
  m->head_rows = rows;
  m->head_ids = ids;
  m->head_mask = mask;
  m->head_rmap = mask ? rmap : NULL;
  int rc = m->arch->forward(m, b, NULL, err);
  m->head_rows = NULL;
  m->head_ids = NULL;
  m->head_mask = m->head_rmap = NULL;
  return rc;
}

int model_forward_sample(model_t *m, const be_batch_t *b, const be_sample_row_t *rows, int32_t *ids, gt_err_t *err) {
  return model_forward_sample_mask(m, b, rows, ids, NULL, NULL, err);
}

/* A rank's part of its group's sampling (model_t.head_max) for rows r0..r0+nr of dev_logits
 * [nr, sh.n_vocab]: greedy rows through the backend's sample op (the slice's argmax) plus that
 * one logit; other rows downloaded into the rank's columns of head_gather. */
static int head_rank_pick(model_t *m, const float *dev_logits, int r0, int nr) {
  be_t *be = m->be;
  const int V = m->hp.n_vocab, Vl = m->sh.n_vocab;
  int rc = GT_OK;
  for (int i = 0; i < nr && !rc; i++) {
    const int row = r0 + i;
    const float *l = dev_logits + (size_t)i * Vl;
    if (model_row_greedy(&m->head_rows[row])) {
      int32_t id = 0;
      rc = be->ops->sample(be, l, 1, Vl, &m->head_rows[row], &id);
      if (!rc) rc = be->ops->download(be, &m->head_max[row], l + id, sizeof(float));
      m->head_ids[row] = m->sh.vocab0 + id;
    } else {
      rc = be->ops->download(be, m->head_gather + (size_t)row * V + m->sh.vocab0, l, sizeof(float) * (size_t)Vl);
    }
  }
  return rc;
}

int model_out_all(const be_batch_t *b) {
  if (b->n_out <= 0 || b->n_out != b->n_tok || !b->out_tok) return 0;
  for (int i = 0; i < b->n_out; i++)
    if (b->out_tok[i] != i) return 0;
  return 1;
}

int model_head(model_t *m, const be_batch_t *b, float *x, const float *delta, float *xo, float *dev_logits,
               const be_weight_t *norm, const be_weight_t *head, float *logits, gt_err_t *err) {
  be_t *be = m->be;
  const be_ops_t *o = be->ops;
  const int d = m->hp.n_embd, V = m->hp.n_vocab, Vl = m->sh.n_vocab;
  if (model_out_all(b)) { /* every row, in order: no gather; the add fused into the norm, whose rows
                              * go straight to head_keep when it is set */
    if (m->head_keep) xo = m->head_keep;
    if (delta)
      o->add_rmsnorm(be, x, delta, norm, xo, b->n_tok, d, m->hp.rms_eps);
    else
      o->rmsnorm(be, x, norm, xo, b->n_tok, d, m->hp.rms_eps);
  } else {
    if (delta) o->add(be, x, delta, (size_t)b->n_tok * d);
    if (b->n_out == 0) return model_backend_err(be, err);
    o->gather_out(be, x, xo, d);
    o->rmsnorm(be, xo, norm, xo, b->n_out, d, m->hp.rms_eps);
    if (m->head_keep) o->copy2d(be, m->head_keep, d, xo, d, b->n_out, d);
  }
  if (m->head_hidden) {
    if (o->download(be, m->head_hidden, xo, sizeof(float) * (size_t)b->n_out * d))
      return gt_err_set(err, GT_EINTERNAL, "%s", be->err.msg);
    return model_backend_err(be, err);
  }
  /* a draft vocabulary (model_mtp_forward_greedy): rows [0, head_vocab) of the head, a view of the
   * same memory (rows are contiguous in every weight type), sampled over those ids alone */
  be_weight_t hv;
  if (m->head_vocab > 0 && m->head_rows) { /* set only with greedy rows on one rank, no mask */
    hv = *head;
    hv.rows = m->head_vocab;
    head = &hv;
  }
  const int Vs = head == &hv ? m->head_vocab : V;
  for (int r0 = 0; r0 < b->n_out; r0 += MODEL_HEAD_CHUNK) {
    int nr = b->n_out - r0 < MODEL_HEAD_CHUNK ? b->n_out - r0 : MODEL_HEAD_CHUNK;
    o->matmul(be, head, xo + (size_t)r0 * d, dev_logits, nr);
    /* a group's rank never gets a mask: the scheduler samples constrained rows of a group on the host */
    if (m->head_rows && m->head_mask) o->logits_mask(be, dev_logits, m->head_mask, m->head_rmap + r0, nr, V);
    int rc = GT_OK;
    if (m->head_rows && m->head_ids_dev) { /* greedy rows only, one rank (model_mtp_forward_greedy_dev) */
      if (o->argmax_dev(be, dev_logits, nr, Vs, m->head_ids_dev + r0)) return model_backend_err(be, err);
    } else if (m->head_rows && m->sh.n_ranks > 1)
      rc = head_rank_pick(m, dev_logits, r0, nr);
    else if (m->head_rows)
      rc = o->sample(be, dev_logits, nr, Vs, m->head_rows + r0, m->head_ids + r0);
    else if (Vl == V)
      rc = o->download(be, logits + (size_t)r0 * V, dev_logits, sizeof(float) * (size_t)nr * V);
    else /* vocab-parallel: this rank's columns of each row */
      for (int i = 0; i < nr && !rc; i++)
        rc = o->download(be, logits + (size_t)(r0 + i) * V + m->sh.vocab0, dev_logits + (size_t)i * Vl,
                         sizeof(float) * (size_t)Vl);
    if (rc) return gt_err_set(err, rc, "%s", be->err.msg);
  }
  if (m->head_ids_dev) return GT_OK; /* no wait: the caller's download reports the step */
  return model_backend_err(be, err);
}

void model_hp_layer_cap(model_hparams_t *hp) {
  const char *v = getenv("GANTRY_MODEL_LAYERS");
  const int k = v ? atoi(v) : 0;
  if (k < 1 || k >= hp->n_layer) return;
  hp->n_layer = k;
  hp->n_nextn = 0;
}

int model_forward_hidden(model_t *m, const be_batch_t *b, float *hidden, gt_err_t *err) {
  if (m->tp || m->sh.n_ranks > 1)
    return gt_err_set(err, GT_EUNSUPPORTED, "hidden states of a tensor-parallel model (%d ranks)", model_n_ranks(m));
  if (b->n_out > 0 && !hidden) return gt_err_set(err, GT_EINVAL, "no buffer for %d hidden rows", b->n_out);
  m->head_hidden = hidden;
  int rc = m->arch->forward(m, b, NULL, err);
  m->head_hidden = NULL;
  return rc;
}
