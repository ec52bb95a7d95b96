/* engine/models/gen.c — see gen.h. */
#include "engine/models/gen.h"

#include <stdlib.h>
#include <string.h>

struct gen {
  model_t *m;
  int n_ctx, pos, n_blocks;
  int32_t *block_table; /* [n_blocks]: identity 0..n_blocks-1 */
  int32_t *tpos, *out_tok; /* [max_tokens] */
};

int gen_create(model_t *m, int n_ctx, gen_t **out, gt_err_t *err) {
  if (n_ctx <= 0) return gt_err_set(err, GT_EINVAL, "context length must be positive");
  if (m->hp.n_ctx_train > 0 && n_ctx > m->hp.n_ctx_train)
    return gt_err_set(err, GT_ERANGE, "context %d exceeds the model's %d", n_ctx, m->hp.n_ctx_train);
  gen_t *g = calloc(1, sizeof *g);
  if (!g) return gt_err_set(err, GT_ENOMEM, "out of memory");
  g->m = m;
  g->n_ctx = n_ctx;
  g->n_blocks = (n_ctx + GEN_BLOCK_TOKENS - 1) / GEN_BLOCK_TOKENS;
  g->block_table = malloc(sizeof(int32_t) * (size_t)g->n_blocks);
  g->tpos = malloc(sizeof(int32_t) * (size_t)m->max_tokens);
  g->out_tok = malloc(sizeof(int32_t) * (size_t)m->max_tokens);
  if (!g->block_table || !g->tpos || !g->out_tok) {
    gen_free(g);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  for (int i = 0; i < g->n_blocks; i++) g->block_table[i] = i;
  int rc = model_cache_init(m, g->n_blocks, GEN_BLOCK_TOKENS, 1, err);
  if (rc) {
    gen_free(g);
    return rc;
  }
  *out = g;
  return GT_OK;
}

void gen_free(gen_t *g) {
  if (!g) return;
  free(g->block_table);
  free(g->tpos);
  free(g->out_tok);
  free(g);
}

int gen_pos(const gen_t *g) { return g->pos; }
int gen_n_ctx(const gen_t *g) { return g->n_ctx; }
void gen_reset(gen_t *g) { g->pos = 0; }

/* gen_feed and gen_feed_sample: with row, the last token's next id is sampled into *out_id. */
static int feed(gen_t *g, const int32_t *ids, int n, int chunk, float *all_logits, float *last_logits,
                const be_sample_row_t *row, int32_t *out_id, float *last_hidden, gt_err_t *err) {
  model_t *m = g->m;
  if (n <= 0) return gt_err_set(err, GT_EINVAL, "nothing to feed");
  if (g->pos + n > g->n_ctx)
    return gt_err_set(err, GT_ERANGE, "%d tokens after %d exceed the context of %d tokens", n, g->pos, g->n_ctx);
  if (chunk <= 0 || chunk > m->max_tokens) chunk = m->max_tokens;
  const size_t V = (size_t)m->hp.n_vocab;
  for (int done = 0; done < n;) {
    int nt = n - done < chunk ? n - done : chunk;
    int last_chunk = done + nt == n;
    int n_out = 0;
    for (int i = 0; i < nt; i++) {
      g->tpos[i] = g->pos + i;
      if (all_logits) g->out_tok[n_out++] = i;
    }
    if (!all_logits && last_chunk && (last_logits || row || last_hidden)) g->out_tok[n_out++] = nt - 1;
    int32_t first = 0, slot = 0;
    be_batch_t b = {
        .n_tok = nt, .n_seq = 1, .tok = ids + done, .pos = g->tpos, .seq_first = &first, .seq_ntok = &nt,
        .block_table = g->block_table, .max_blocks = g->n_blocks,
        .state_slot = m->hp.n_gdn_layers > 0 ? &slot : NULL, .n_out = n_out, .out_tok = g->out_tok,
    };
    float *dst = all_logits ? all_logits + (size_t)done * V : last_logits;
    int rc = row && last_chunk           ? model_forward_sample(m, &b, row, out_id, err)
             : last_hidden && last_chunk ? model_forward_hidden(m, &b, last_hidden, err)
             : last_hidden               ? model_forward_hidden(m, &b, NULL, err)
                                         : model_forward(m, &b, n_out ? dst : NULL, err);
    if (rc) return rc;
    if (all_logits && last_chunk && last_logits) memcpy(last_logits, all_logits + (size_t)(n - 1) * V, V * sizeof(float));
    g->pos += nt;
    done += nt;
  }
  return GT_OK;
}

int gen_feed(gen_t *g, const int32_t *ids, int n, int chunk, float *all_logits, float *last_logits, gt_err_t *err) {
  return feed(g, ids, n, chunk, all_logits, last_logits, NULL, NULL, NULL, err);
}

int gen_feed_sample(gen_t *g, const int32_t *ids, int n, int chunk, const be_sample_row_t *row, int32_t *out_id,
                    gt_err_t *err) {
  if (!g->m->be->ops->sample) return gt_err_set(err, GT_EUNSUPPORTED, "backend %s cannot sample", g->m->be->ops->name);
  return feed(g, ids, n, chunk, NULL, NULL, row, out_id, NULL, err);
}

int gen_feed_hidden(gen_t *g, const int32_t *ids, int n, int chunk, float *last_hidden, gt_err_t *err) {
  if (!last_hidden) return gt_err_set(err, GT_EINVAL, "no buffer for the hidden state");
  return feed(g, ids, n, chunk, NULL, NULL, NULL, NULL, last_hidden, err);
}
