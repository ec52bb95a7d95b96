/* engine/sched/spec_mtp.c — see spec.h (MTP drafting). */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/sampler.h"
#include "engine/models/model.h"
#include "engine/sched/spec.h"

struct spec_mtp {
  int max_tokens, max_seqs, max_blocks, V;
  int32_t *tok, *pos, *src, *first, *ntok, *out, *bt; /* one MTP batch */
  int *seq;                                           /* [max_seqs] batch sequence -> seqs[] index */
  int *prev, *cur;                                    /* [max_seqs] seqs[] index of each out row */
  int32_t *ids;                                       /* [max_seqs] the greedy token of each out row */
  float *logits;                                      /* [max_seqs, V], only for a backend that cannot sample */
};

spec_mtp_t *spec_mtp_create(int max_tokens, int max_seqs, int max_blocks, int n_vocab) {
  spec_mtp_t *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  *w = (spec_mtp_t){.max_tokens = max_tokens, .max_seqs = max_seqs, .max_blocks = max_blocks, .V = n_vocab};
  const size_t T = (size_t)max_tokens, S = (size_t)max_seqs;
  w->tok = malloc(sizeof(int32_t) * T);
  w->pos = malloc(sizeof(int32_t) * T);
  w->src = malloc(sizeof(int32_t) * T);
  w->first = malloc(sizeof(int32_t) * S);
  w->ntok = malloc(sizeof(int32_t) * S);
  w->out = malloc(sizeof(int32_t) * S);
  w->bt = malloc(sizeof(int32_t) * S * (size_t)max_blocks);
  w->seq = malloc(sizeof(int) * S);
  w->prev = malloc(sizeof(int) * S);
  w->cur = malloc(sizeof(int) * S);
  w->ids = malloc(sizeof(int32_t) * S);
  if (!w->tok || !w->pos || !w->src || !w->first || !w->ntok || !w->out || !w->bt || !w->seq || !w->prev || !w->cur || !w->ids) {
    spec_mtp_free(w);
    return NULL;
  }
  return w;
}

void spec_mtp_free(spec_mtp_t *w) {
  if (!w) return;
  free(w->tok);
  free(w->pos);
  free(w->src);
  free(w->first);
  free(w->ntok);
  free(w->out);
  free(w->bt);
  free(w->seq);
  free(w->prev);
  free(w->cur);
  free(w->ids);
  free(w->logits);
  free(w);
}


/* One MTP step; the greedy token of each out row into w->ids: taken on the backend when it can
 * sample (only n_out ids come back), else argmax of the host logits (the same token). */
static int mtp_step(spec_mtp_t *w, model_t *m, const be_batch_t *b, gt_err_t *err) {
  if (m->be->ops->sample) return model_mtp_forward_greedy(m, b, w->src, w->ids, err);
  if (!w->logits && !(w->logits = malloc(sizeof(float) * (size_t)w->max_seqs * (size_t)w->V)))
    return gt_err_set(err, GT_ENOMEM, "MTP logits of %d rows", w->max_seqs);
  int rc = model_mtp_forward(m, b, w->src, w->logits, err);
  for (int r = 0; r < b->n_out && !rc; r++) w->ids[r] = sampler_argmax(w->logits + (size_t)r * w->V, w->V);
  return rc;
}

static void put_bt(spec_mtp_t *w, int i, const spec_mtp_seq_t *q) {
  int32_t *row = w->bt + (size_t)i * w->max_blocks;
  const int nb = q->n_blocks < w->max_blocks ? q->n_blocks : w->max_blocks;
  memcpy(row, q->blocks, sizeof(int32_t) * (size_t)nb);
  for (int k = nb; k < w->max_blocks; k++) row[k] = -1;
}

int spec_mtp_run(spec_mtp_t *w, model_t *m, spec_mtp_seq_t *seqs, int n, int block_tokens, gt_err_t *err) {
  if (n > w->max_seqs) return gt_err_set(err, GT_EINVAL, "MTP pass over %d sequences (max %d)", n, w->max_seqs);
  /* 1. the pass: every sequence's rows, an output row at the last of those that draft */
  int T = 0, ns = 0, no = 0;
  for (int i = 0; i < n; i++) {
    spec_mtp_seq_t *q = &seqs[i];
    q->n_draft = 0;
    if (q->n_rows <= 0) continue;
    if (T + q->n_rows > w->max_tokens) return gt_err_set(err, GT_EINVAL, "MTP pass over more than %d rows", w->max_tokens);
    w->first[ns] = T;
    w->ntok[ns] = q->n_rows;
    put_bt(w, ns, q);
    for (int j = 0; j < q->n_rows; j++) {
      w->tok[T + j] = q->next[j];
      w->pos[T + j] = q->pos0 + j;
      w->src[T + j] = q->src_row + j;
    }
    T += q->n_rows;
    if (q->k > 0) w->out[no++] = T - 1;
    w->seq[ns++] = i;
  }
  if (T == 0) return GT_OK;
  be_batch_t b = {.n_tok = T, .n_seq = ns, .tok = w->tok, .pos = w->pos, .seq_first = w->first, .seq_ntok = w->ntok,
                  .block_table = w->bt, .max_blocks = w->max_blocks, .n_out = no, .out_tok = w->out};
  int rc = mtp_step(w, m, &b, err);
  /* 2. drafts: the pass's out rows give draft 1; then one chained row per sequence still drafting,
   * its hidden input the previous MTP step's out row of that sequence */
  int *prev = w->prev, *cur = w->cur, n_prev = 0;
  for (int a = 0; a < ns && !rc; a++) {
    spec_mtp_seq_t *q = &seqs[w->seq[a]];
    if (q->k <= 0) continue;
    q->draft[q->n_draft++] = w->ids[n_prev];
    prev[n_prev++] = w->seq[a];
  }
  for (int step = 1; !rc && n_prev > 0; step++) {
    int nc = 0;
    T = 0;
    for (int r = 0; r < n_prev; r++) {
      spec_mtp_seq_t *q = &seqs[prev[r]];
      const int p = q->pos0 + q->n_rows - 1 + step; /* the position of the token q->draft[step - 1] */
      if (q->n_draft >= q->k || q->n_draft >= (int)(sizeof q->draft / sizeof q->draft[0]) || p / block_tokens >= q->n_blocks) continue;
      w->first[nc] = T;
      w->ntok[nc] = 1;
      put_bt(w, nc, q);
      w->tok[T] = q->draft[q->n_draft - 1];
      w->pos[T] = p;
      w->src[T] = -1 - r;
      w->out[nc] = T;
      T++;
      cur[nc++] = prev[r];
    }
    if (nc == 0) break;
    b.n_tok = T;
    b.n_seq = b.n_out = nc;
    rc = mtp_step(w, m, &b, err);
    for (int r = 0; r < nc && !rc; r++) {
      spec_mtp_seq_t *q = &seqs[cur[r]];
      q->draft[q->n_draft++] = w->ids[r];
    }
    int *t = prev;
    prev = cur;
    cur = t;
    n_prev = nc;
  }
  return rc;
}
