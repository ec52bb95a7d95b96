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
  /* the chain on the device (a backend with argmax_dev): every MTP step's greedy ids stay in backend
   * memory, dev_ids[slot], slots in step order; a chained row's token is its previous step's slot
   * (be_batch_t.tok_src); one download of all slots into host_ids at the end. slot_seq[slot]: the
   * seqs[] index the slot drafts for. */
  be_t *be;                                           /* dev_ids' backend (set at its allocation) */
  int32_t *dev_ids;                                   /* [max_seqs * SPEC_MTP_MAX_DRAFTS] backend memory */
  int32_t *host_ids, *tok_src;                        /* [max_seqs * SPEC_MTP_MAX_DRAFTS], [max_tokens] */
  int *slot_seq;                                      /* [max_seqs * SPEC_MTP_MAX_DRAFTS] */
};

/* drafts one sequence can take (spec_mtp_seq_t.draft) */
#define SPEC_MTP_MAX_DRAFTS ((int)(sizeof(((spec_mtp_seq_t *)0)->draft) / sizeof(int32_t)))

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
  w->host_ids = malloc(sizeof(int32_t) * S * SPEC_MTP_MAX_DRAFTS);
  w->slot_seq = malloc(sizeof(int) * S * SPEC_MTP_MAX_DRAFTS);
  w->tok_src = malloc(sizeof(int32_t) * T);
  if (!w->tok || !w->pos || !w->src || !w->first || !w->ntok || !w->out || !w->bt || !w->seq || !w->prev || !w->cur || !w->ids ||
      !w->host_ids || !w->slot_seq || !w->tok_src) {
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
  free(w->host_ids);
  free(w->slot_seq);
  free(w->tok_src);
  if (w->dev_ids) w->be->ops->free(w->be, w->dev_ids);
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

/* *dev = 1 when the chain stays on the device: the backend keeps greedy ids (argmax_dev); dev_ids
 * is allocated on its first use. GT_OK or GT_ENOMEM. */
static int chain_on_device(spec_mtp_t *w, model_t *m, int *dev, gt_err_t *err) {
  be_t *be = m->be;
  *dev = be->ops->argmax_dev != NULL;
  if (!*dev || (w->dev_ids && w->be == be)) return GT_OK;
  if (w->dev_ids) w->be->ops->free(w->be, w->dev_ids);
  w->be = be;
  w->dev_ids = be->ops->alloc(be, sizeof(int32_t) * (size_t)w->max_seqs * SPEC_MTP_MAX_DRAFTS);
  if (!w->dev_ids) return gt_err_set(err, GT_ENOMEM, "MTP draft ids for %d sequences", w->max_seqs);
  return GT_OK;
}

/* The row count every sequence of the pass runs (spec.h: the most any of them has, when all can be
 * padded to it), or 0: each its own n_rows. */
static int pass_rows(const spec_mtp_seq_t *seqs, int n, int block_tokens) {
  int R = 0;
  for (int i = 0; i < n; i++)
    if (seqs[i].n_rows > R) R = seqs[i].n_rows;
  if (R > BE_GRAPH_MAX_Q) return 0;
  for (int i = 0; i < n; i++) {
    const spec_mtp_seq_t *q = &seqs[i];
    if (q->n_rows > 0 && (R > q->src_rows || q->pos0 + R > q->n_blocks * block_tokens)) return 0;
  }
  return R;
}

int spec_mtp_run(spec_mtp_t *w, model_t *m, spec_mtp_seq_t *seqs, int n, int block_tokens, gt_err_t *err) {
  if (n > w->max_seqs) return gt_err_set(err, GT_EINVAL, "MTP pass over %d sequences (max %d)", n, w->max_seqs);
  int dev = 0;
  const int arc = chain_on_device(w, m, &dev, err);
  if (arc) return arc;
  /* 1. the pass: every sequence's rows (padded to R), an output row at the last of those that draft */
  const int R = pass_rows(seqs, n, block_tokens);
  int T = 0, ns = 0, no = 0;
  for (int i = 0; i < n; i++) {
    spec_mtp_seq_t *q = &seqs[i];
    q->n_draft = 0;
    if (q->n_rows <= 0) continue;
    const int nr = R ? R : q->n_rows;
    if (T + nr > w->max_tokens) return gt_err_set(err, GT_EINVAL, "MTP pass over more than %d rows", w->max_tokens);
    w->first[ns] = T;
    w->ntok[ns] = nr;
    put_bt(w, ns, q);
    for (int j = 0; j < nr; j++) {
      w->tok[T + j] = q->next[j < q->n_rows ? j : q->n_rows - 1];
      w->pos[T + j] = q->pos0 + j;
      w->src[T + j] = q->src_row + j;
    }
    if (q->k > 0) w->out[no++] = T + q->n_rows - 1;
    T += nr;
    w->seq[ns++] = i;
  }
  if (T == 0) return GT_OK;
  be_batch_t b = {.n_tok = T, .n_seq = ns, .tok = w->tok, .pos = w->pos, .seq_first = w->first, .seq_ntok = w->ntok,
                  .block_table = w->bt, .max_blocks = w->max_blocks, .n_out = no, .out_tok = w->out};
  int rc = dev ? model_mtp_forward_greedy_dev(m, &b, w->src, w->dev_ids, err) : mtp_step(w, m, &b, err);
  /* 2. drafts: the pass's out rows give draft 1; then one chained row per sequence still drafting,
   * its hidden input the previous MTP step's out row of that sequence, its token that row's draft
   * (on the device: the previous step's id slot, slot0 + r; else the host's copy). On the device
   * the drafts are only counted here (n_draft) and filled in from the one download at the end. */
  int *prev = w->prev, *cur = w->cur, n_prev = 0, slot0 = 0, n_slot = 0;
  for (int a = 0; a < ns && !rc; a++) {
    spec_mtp_seq_t *q = &seqs[w->seq[a]];
    if (q->k <= 0) continue;
    if (dev) w->slot_seq[n_slot++] = w->seq[a], q->n_draft++;
    else q->draft[q->n_draft++] = w->ids[n_prev];
    prev[n_prev++] = w->seq[a];
  }
  for (int step = 1; !rc && n_prev > 0; step++) {
    int nc = 0;
    T = 0;
    for (int r = 0; r < n_prev; r++) {
      spec_mtp_seq_t *q = &seqs[prev[r]];
      const int p = q->pos0 + q->n_rows - 1 + step; /* the position of the token q->draft[step - 1] */
      if (q->n_draft >= q->k || q->n_draft >= SPEC_MTP_MAX_DRAFTS || p / block_tokens >= q->n_blocks) continue;
      w->first[nc] = T;
      w->ntok[nc] = 1;
      put_bt(w, nc, q);
      w->tok[T] = dev ? 0 : q->draft[q->n_draft - 1];
      w->tok_src[T] = slot0 + r;
      w->pos[T] = p;
      w->src[T] = -1 - r;
      w->out[nc] = T;
      T++;
      cur[nc++] = prev[r];
    }
    if (nc == 0) break;
    b.n_tok = T;
    b.n_seq = b.n_out = nc;
    if (dev) {
      b.tok_src = w->tok_src;
      b.tok_dev = w->dev_ids;
      slot0 = n_slot;
      rc = model_mtp_forward_greedy_dev(m, &b, w->src, w->dev_ids + slot0, err);
      for (int r = 0; r < nc && !rc; r++) {
        w->slot_seq[n_slot++] = cur[r];
        seqs[cur[r]].n_draft++;
      }
    } else {
      rc = mtp_step(w, m, &b, err);
      for (int r = 0; r < nc && !rc; r++) {
        spec_mtp_seq_t *q = &seqs[cur[r]];
        q->draft[q->n_draft++] = w->ids[r];
      }
    }
    int *t = prev;
    prev = cur;
    cur = t;
    n_prev = nc;
  }
  if (dev) { /* the one transfer of the drafts (it also waits for the steps: their errors come back here);
               * none drafting: the pass had no out row and already waited */
    be_t *be = m->be;
    const int dl = n_slot > 0 ? be->ops->download(be, w->host_ids, w->dev_ids, sizeof(int32_t) * (size_t)n_slot) : GT_OK;
    if (!rc && dl) rc = gt_err_set(err, dl, "%s", be->err.msg);
    for (int i = 0; i < n; i++) seqs[i].n_draft = 0;
    for (int i = 0; i < n_slot && !rc; i++) {
      spec_mtp_seq_t *q = &seqs[w->slot_seq[i]];
      q->draft[q->n_draft++] = w->host_ids[i];
    }
  }
  return rc;
}
