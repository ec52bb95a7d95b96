/* tests/common/tp_rank.c — see tp_rank.h. */
#include "tests/common/tp_rank.h"

#include <stdio.h>
#include <string.h>

#include "format/dtype.h"

model_hparams_t tpr_preset_hp(const mk_preset_t *p) {
  model_hparams_t hp = {.n_layer = p->n_layer, .n_embd = p->n_embd, .n_head = p->n_head, .n_head_kv = p->n_head_kv,
                        .head_dim = p->head_dim, .n_ff = p->n_ff, .n_vocab = p->n_vocab,
                        .n_rot = p->rope_dim ? p->rope_dim : p->head_dim};
  snprintf(hp.arch, sizeof hp.arch, "%s", p->arch);
  if (!strcmp(p->arch, "qwen35")) {
    hp.full_attn_interval = p->full_attn_interval;
    hp.n_gdn_layers = p->n_layer - p->n_layer / p->full_attn_interval;
    hp.n_attn_layers = p->n_layer / p->full_attn_interval;
    hp.conv_kernel = p->ssm_conv;
    hp.gdn_n_k = p->ssm_k_heads;
    hp.gdn_n_v = p->ssm_v_heads;
    hp.gdn_d_k = hp.gdn_d_v = p->ssm_head_dim;
  } else {
    hp.n_attn_layers = p->n_layer;
  }
  return hp;
}

int tpr_shard_shape(const model_hparams_t *hp, const model_shard_t *sh, const char *name, int64_t *rows, int64_t *cols,
                    int *row_parallel) {
  const char *t = strchr(name, '.') && !strncmp(name, "blk.", 4) ? strchr(name + 4, '.') + 1 : name;
  const int64_t hd = hp->head_dim, q35 = !strcmp(hp->arch, "qwen35");
  *row_parallel = 0;
  if (!strcmp(t, "attn_q.weight")) *rows = (q35 ? 2 : 1) * sh->n_head * hd;
  else if (!strcmp(t, "attn_k.weight") || !strcmp(t, "attn_v.weight")) *rows = sh->n_head_kv * hd;
  else if (!strcmp(t, "attn_output.weight")) *cols = sh->n_head * hd, *row_parallel = 1;
  else if (!strcmp(t, "ffn_gate.weight") || !strcmp(t, "ffn_up.weight")) *rows = sh->n_ff;
  else if (!strcmp(t, "ffn_down.weight")) *cols = sh->n_ff, *row_parallel = 1;
  else if (!strcmp(t, "attn_qkv.weight")) *rows = 2 * (int64_t)sh->gdn_n_k * hp->gdn_d_k + (int64_t)sh->gdn_n_v * hp->gdn_d_v;
  else if (!strcmp(t, "attn_gate.weight")) *rows = (int64_t)sh->gdn_n_v * hp->gdn_d_v;
  else if (!strcmp(t, "ssm_alpha.weight") || !strcmp(t, "ssm_beta.weight")) *rows = sh->gdn_n_v;
  else if (!strcmp(t, "ssm_out.weight")) *cols = (int64_t)sh->gdn_n_v * hp->gdn_d_v, *row_parallel = 1;
  else if (!strcmp(t, "output.weight")) *rows = sh->n_vocab;
  else return 0;
  return 1;
}


int tpr_rank_products(const char *preset, const model_hparams_t *hp, const model_shard_t *sh, tpr_product_t *out,
                      gt_err_t *err) {
  mk_plan_t *pl = NULL;
  if (mk_plan_create(preset, "Q4_K_M", -1, 0, &pl, err)) return -1;
  int np = 0;
  for (int64_t i = 0; i < pl->n; i++) {
    const mk_tensor_t *t = &pl->t[i];
    int64_t rows = t->ne[1], cols = t->ne[0];
    int rp = 0;
    if (t->n_dims != 2 || !tpr_shard_shape(hp, sh, t->name, &rows, &cols, &rp)) continue;
    if (rp && cols % dt_block_elems(t->type)) {
      gt_err_set(err, GT_EUNSUPPORTED, "tensor %s (%s, blocks of %lld) refuses to split: its %lld columns per rank cut a block",
                 t->name, dt_name(t->type), (long long)dt_block_elems(t->type), (long long)cols);
      np = -1;
      break;
    }
    int seen = 0;
    for (int k = 0; k < np && !seen; k++) seen = out[k].t == t->type && out[k].rows == rows && out[k].cols == cols;
    if (seen) continue;
    if (np == TPR_MAX_PRODUCTS) {
      gt_err_set(err, GT_EINVAL, "more than %d distinct products", TPR_MAX_PRODUCTS);
      np = -1;
      break;
    }
    out[np] = (tpr_product_t){.t = t->type, .rows = rows, .cols = cols, .row_parallel = rp};
    snprintf(out[np].name, sizeof out[np].name, "%s", t->name);
    np++;
  }
  mk_plan_free(pl);
  return np;
}
