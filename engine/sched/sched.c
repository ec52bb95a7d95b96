/* engine/sched/sched.c — see sched.h.
 *
 * A request's tokens[] holds its prompt followed by what it generated; the KV cache holds the
 * first n_computed of them. Each step feeds tokens[n_computed .. n_tokens) (all of them, or a
 * chunk); when the feed reaches n_tokens the last row's logits give the next token. Decode is
 * the special case of one pending token. A speculating sequence also feeds n_draft drafts
 * after it, with an output row each (verify); a hybrid one also gets the recurrent state after
 * each of its rows but the last in spare slots (req_t.pslot, be_batch_t.state_pos_slot), so that
 * a rejected draft rolls back by swapping its slot with the spare of the last kept row: no copy
 * before the step, no kept token fed twice. Preemption resets n_computed to 0 (recompute). */
#include "engine/sched/sched.h"
#include "engine/sched/bad_words.h"

#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "engine/sched/kv.h"
#include "engine/sched/sched_mem.h"
#include "engine/sched/spec.h"
#include "engine/sched/spec_cost.h"
#include "engine/sched/spec_index.h"
#include "engine/sched/spec_suffix.h"

typedef struct req {
  int64_t id;
  uint64_t arrival;
  sched_req_t r;
  int32_t *tokens;   /* [cap] prompt + generated */
  int32_t *stop_ids; /* copy of r.stop_ids */
  int32_t *allowed;  /* copy of r.allowed_ids [r.n_allowed] */
  float *allowed_lg; /* [r.n_allowed] scratch */
  int n_stop_ids;
  badw_t bad;        /* copy of r.bad_ids / r.bad_lens */
  int32_t *bias_ids; /* copy of r.bias_ids / r.bias_vals */
  float *bias_vals;
  int n_tokens, cap, n_prompt;
  int n_computed;    /* tokens whose K/V (and state) are computed */
  int n_generated;
  int32_t *blocks;   /* [max_blocks] */
  int n_blocks;
  int n_committed;   /* leading blocks registered in the prefix cache */
  uint64_t chain;    /* hash of the last committed block */
  int slot;          /* recurrent-state slot, -1 when none */
  int snap_boundary; /* hybrid: prompt position where a state snapshot is taken (0: none) */
  int cached_tokens;
  int chunk;         /* tokens fed this step */
  int running;
  int cancel_asked;  /* sched_cancel named its id (guarded by sched.mu; never cleared) */
  int cancel_now;    /* cancel_asked as take_inbox saw it (scheduler thread) */
  struct req *lprev, *lnext; /* sched.live (guarded by sched.mu) */
  sampler_t *smp;
  seqout_t *out;
  double t_submit, t_admit, t_first, t_prefill_done;
  struct req *next;  /* incoming list */
  int index;         /* choice (sched_req_t.n); the choices of one request share its id */
  struct req **forks; /* choices 1 .. n-1 until the fork (owned; none running yet) */
  int n_fork;
  cons_seq_t *cs;    /* constrained decoding: this choice's walk through r.constraint, or NULL */
  int cons_end;      /* this step's mask ended the walk (cons_mask_end): take_token finishes q */
  char fail[256];    /* take_token's reason for an ERROR finish ("" : output processing failed) */
  /* speculative decoding (verify) */
  int32_t draft[SCHED_SPEC_MAX_K]; /* this step's drafts, fed after the pending tokens */
  int n_draft;
  int n_fill;        /* of those, fillers at the tail (fill_drafts): verified like drafts, not counted as drafted */
  sched_draft_src_t draft_src; /* where this step's drafts came from */
  spec_index_t ngx;  /* prompt lookup (ngram, MTP's lookup): the n-grams of tokens (spec_index.h), built as they come */
  int pslot[SCHED_SPEC_MAX_K]; /* hybrid, this step's drafts: pslot[j] receives the state after
                                  row j of the sequence (its pending token, then draft j - 1) */
  int n_pslot;
  int spec_skip, spec_pause; /* steps left without drafts; the pause after the next full rejection */
  int32_t mtp_draft[SCHED_SPEC_MAX_K]; /* SCHED_SPEC_MTP: drafts for when n_tokens == mtp_at */
  int32_t ng_draft[SCHED_SPEC_MAX_K];  /* SCHED_SPEC_MTP: prompt lookup's spec_k drafts for when n_tokens == ng_at */
  int ng_at;
  int n_mtp_draft, mtp_at;
  int n_verify;      /* verify steps so far (spec_force_accept) */
  uint64_t rng0[4];  /* the sampler's RNG before this step's device draws (device_rows) */
  const float *embedding; /* embedding engine: the pooled row finish() delivers (in sched.hidden) */
} req_t;

struct sched {
  model_t *m;
  const tok_t *tok;
  sched_config_t cfg;
  kv_pool_t *kv;
  int hybrid, max_blocks, V;
  int32_t eos_ids[4];
  /* slots: [0, max_num_seqs) for running sequences, then n_snapshots snapshot slots, then the
   * spec_max_seqs * spec_k spare slots of hybrid speculation (spec_free) */
  int *slot_free, n_slot_free;
  int *snap_free, n_snap_free;
  /* hybrid speculation: the spare slots a verify step's per-row states go to (req_t.pslot), after
   * the snapshot slots; b_pslot [max_num_seqs * BE_POS_SLOTS] is the step's state_pos_slot */
  int *spec_free, n_spec_free;
  int32_t *b_pslot;
  int max_rows;            /* output rows per step: max_num_seqs, plus the draft rows speculation allows */
  /* SCHED_SPEC_MTP: the drafter's buffers; per batch sequence its pass (mseq) and whether it is
   * still running after the step's tokens were taken (b_alive) */
  spec_mtp_t *mtp;
  spec_mtp_seq_t *mseq;
  spec_suffix_t *suffix; /* speculation with spec_suffix_tokens: finished requests' outputs (spec_suffix.h) */
  uint8_t *b_alive;
  /* whether speculation pays per decode count (spec_cost.h; by_n NULL: not measured, !spec_adaptive),
   * and its choice for the next step (made before the MTP pass that step would need) */
  spec_cost_t cost;
  int spec_next;
  double pass_ms; /* MTP: average time of the drafter's pass (a cost of the speculative step it serves) */
  /* per snapshot slot (index id - max_num_seqs): the committed block carrying it (-1: free) and
   * when it was last taken or reused (snap_tick), so that a new snapshot takes the least recently
   * used slot when none is free (snap_take) */
  int32_t *snap_block;
  uint64_t *snap_used, snap_tick;
  req_t **waiting; int n_waiting;
  req_t **running; int n_running;
  /* cross-thread */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  req_t *incoming, *incoming_tail;
  /* every submitted request and choice until its final event: sched_cancel marks them here
   * (no allocation, so a cancel cannot be lost) and raises cancel_pending */
  req_t *live;
  int cancel_pending;
  int n_incoming, stop, draining;
  int n_waiting_seen; /* n_waiting as last published by the scheduler thread (under mu) */
  int64_t next_id;
  uint64_t arrivals;
  sched_stats_t st; /* guarded by mu for readers */
  /* step buffers */
  int32_t *b_tok, *b_pos, *b_first, *b_ntok, *b_bt, *b_slot, *b_out;
  req_t **b_req;
  be_sample_row_t *b_rows; /* [max_rows] device sampling: one row per output */
  int32_t *b_ids;          /* [max_rows] its sampled ids */
  float *logits;           /* [max_rows, V] host logits of the output rows */
  float *hidden;           /* embedding engine: [max_rows, n_embd] hidden states of the output rows */
  float *raw;              /* [V] */
  float *fork_tmp; /* [V] a copy of the forked prompt's logits row for each choice to sample from */
  /* constrained decoding */
  cons_cache_t *cons;
  int mask_words;          /* ceil(V / 32) */
  uint32_t *h_mask;        /* [max_num_seqs, mask_words] this step's masks of constrained output rows */
  uint32_t *h_rmap;        /* [max_rows] output row -> its mask row, or BE_MASK_NONE */
  uint32_t *h_mask1;       /* [mask_words] one row's mask on the host path (take_token) */
  req_t **b_mreq;          /* [max_num_seqs] the request of each mask row (device_masks) */
  uint32_t *d_mask, *d_rmap; /* backend copies of h_mask / h_rmap (the logits_mask op reads them) */
  uint64_t n_constrained;  /* tokens sampled under a mask (published in st) */
  double mask_ms;          /* time filling / uploading masks (published in st) */
};

static double now_ms(void) { return gt_now_ms(); }

/* ---- request lifetime ---- */

/* Gives q's spare slots (req_t.pslot) back. */
static void pslot_release(sched_t *s, req_t *q) {
  while (q->n_pslot > 0) s->spec_free[s->n_spec_free++] = q->pslot[--q->n_pslot];
}

static void release_resources(sched_t *s, req_t *q) {
  for (int i = 0; i < q->n_blocks; i++) kv_release(s->kv, q->blocks[i]);
  q->n_blocks = 0;
  q->n_committed = 0;
  q->chain = 0;
  if (q->slot >= 0) s->slot_free[s->n_slot_free++] = q->slot;
  q->slot = -1;
  pslot_release(s, q);
  q->n_draft = q->n_fill = 0;
}

static void free_req(req_t *q) {
  if (!q) return;
  for (int i = 0; i < q->n_fork; i++) free_req(q->forks[i]);
  free(q->forks);
  sampler_free(q->smp);
  seqout_free(q->out);
  cons_seq_free(q->cs);
  free(q->tokens);
  spec_index_free(&q->ngx);
  free(q->stop_ids);
  free(q->allowed);
  free(q->allowed_lg);
  free(q->bias_ids);
  badw_free(&q->bad);
  free(q->bias_vals);
  free(q->blocks);
  free(q->r.prompt);
  free(q);
}

/* sched.live, under s->mu. */
static void live_link(sched_t *s, req_t *q) {
  q->lprev = NULL;
  q->lnext = s->live;
  if (s->live) s->live->lprev = q;
  s->live = q;
}

static void live_unlink(sched_t *s, req_t *q) {
  if (!q->lprev && s->live != q) return; /* never linked (refused at submit) */
  if (q->lprev) q->lprev->lnext = q->lnext;
  else s->live = q->lnext;
  if (q->lnext) q->lnext->lprev = q->lprev;
  q->lprev = q->lnext = NULL;
}

/* Delivers the pending delta (if any) of q. */
static void emit_delta(req_t *q) {
  const seqout_delta_t *d = seqout_take(q->out);
  if (seqout_delta_empty(d)) return;
  sched_event_t ev = {.index = q->index, .is_final = 0, .delta = d};
  q->r.on_event(q->r.ud, &ev);
}

/* Ends q: flushes its output, sends the final event, releases everything and frees it. The
 * caller has already removed q from the waiting / running arrays. */
static void finish(sched_t *s, req_t *q, sched_finish_t why, const char *error) {
  gt_err_t err = {0};
  /* choices not forked yet (q ended before its prompt was computed) end the same way */
  for (int i = 0; i < q->n_fork; i++) finish(s, q->forks[i], why, error);
  q->n_fork = 0;
  if (why != SCHED_FINISH_ERROR && why != SCHED_FINISH_CANCELLED) {
    if (seqout_finish(q->out, &err)) {
      why = SCHED_FINISH_ERROR;
      error = err.msg;
    }
  }
  emit_delta(q);
  if (s->suffix && q->n_generated > 0 && (why == SCHED_FINISH_STOP || why == SCHED_FINISH_LENGTH))
    spec_suffix_add(s->suffix, q->tokens, q->n_tokens, q->n_prompt, q->r.cache_salt); /* out of memory: empty */
  if (why == SCHED_FINISH_STOP && seqout_tool_calls(q->out) > 0) why = SCHED_FINISH_TOOL_CALLS;
  double t = now_ms();
  sched_usage_t u = {
      .prompt_tokens = q->n_prompt, .completion_tokens = q->n_generated,
      .reasoning_tokens = seqout_reasoning_tokens(q->out), .cached_tokens = q->cached_tokens,
      .queued_ms = (q->t_admit > 0 ? q->t_admit : t) - q->t_submit,
      .prefill_ms = q->t_prefill_done > 0 ? q->t_prefill_done - q->t_admit : 0,
      .ttft_ms = q->t_first > 0 ? q->t_first - q->t_submit : 0,
      .decode_ms = q->t_first > 0 ? t - q->t_first : 0,
  };
  sched_event_t ev = {.index = q->index, .is_final = 1, .finish = why, .error = error, .usage = &u,
                      .embedding = why == SCHED_FINISH_STOP ? q->embedding : NULL, .n_embd = s->m->hp.n_embd};
  release_resources(s, q);
  pthread_mutex_lock(&s->mu);
  live_unlink(s, q);
  s->st.finished[why]++;
  s->st.generation_tokens += (uint64_t)q->n_generated;
  pthread_mutex_unlock(&s->mu);
  q->r.on_event(q->r.ud, &ev);
  free_req(q);
}

static void remove_at(req_t **arr, int *n, int i) {
  memmove(arr + i, arr + i + 1, sizeof(req_t *) * (size_t)(*n - i - 1));
  (*n)--;
}

/* waiting order: priority, then arrival */
static int before(const req_t *a, const req_t *b) {
  if (a->r.priority != b->r.priority) return a->r.priority < b->r.priority;
  return a->arrival < b->arrival;
}

/* Inserts q into arr[*n] (kept in `before` order) after its equals. */
static void insert_ordered(req_t **arr, int *n, req_t *q) {
  int i = *n;
  while (i > 0 && before(q, arr[i - 1])) i--;
  memmove(arr + i + 1, arr + i, sizeof(req_t *) * (size_t)(*n - i));
  arr[i] = q;
  (*n)++;
}

static void insert_waiting(sched_t *s, req_t *q) { insert_ordered(s->waiting, &s->n_waiting, q); }

/* Publishes n_waiting for sched_submit's queue bound (read under mu by other threads). Called
 * after every change of waiting[] that a submitter could observe before the step ends. */
static void waiting_changed(sched_t *s) {
  pthread_mutex_lock(&s->mu);
  s->n_waiting_seen = s->n_waiting;
  pthread_mutex_unlock(&s->mu);
}

/* ---- snapshots (hybrid prefix caching) ---- */

static void on_snapshot_evict(void *ud, int snapshot_id) {
  sched_t *s = ud;
  s->snap_block[snapshot_id - s->cfg.max_num_seqs] = -1;
  s->snap_free[s->n_snap_free++] = snapshot_id;
}

/* A snapshot slot for a new snapshot: a free one, else the least recently used one, detached from
 * its block (the prefix it served can no longer be reused). Without the second rule, slots stay
 * with the first 2 x max_num_seqs prompts until their blocks are evicted, which in a pool with
 * room is never: later prompts (a conversation's next turn) would never hit. -1: no slots. */
static int snap_take(sched_t *s) {
  if (s->n_snap_free == 0) {
    int victim = -1;
    for (int i = 0; i < s->cfg.n_snapshots; i++)
      if (s->snap_block[i] >= 0 && (victim < 0 || s->snap_used[i] < s->snap_used[victim])) victim = i;
    if (victim < 0) return -1;
    kv_set_snapshot(s->kv, s->snap_block[victim], -1); /* on_snapshot_evict frees it */
    s->st.snapshot_replaced++;
  }
  return s->n_snap_free > 0 ? s->snap_free[--s->n_snap_free] : -1;
}

/* ---- creation ---- */

/* Sets c->n_blocks (when 0) from the memory plan of m's device and logs the plan. */
static int plan_pool(model_t *m, sched_config_t *c, int hybrid, int n_spec_slots, gt_err_t *err) {
  sched_mem_in_t in = {.max_num_seqs = c->max_num_seqs, .n_ctx = c->n_ctx, .block_tokens = c->block_tokens,
                       .n_state_slots = hybrid ? c->max_num_seqs + c->n_snapshots + n_spec_slots : 0,
                       .kv_bytes = c->kv_mem_bytes, .kv_fraction = c->kv_mem_fraction};
  sched_mem_input(m, &in);
  sched_mem_plan_t p;
  if (c->n_blocks > 0) { /* given: only described */
    p = (sched_mem_plan_t){.n_blocks = c->n_blocks, .n_state_slots = in.n_state_slots,
                           .kv_bytes = (uint64_t)c->n_blocks * c->block_tokens * in.kv_bytes_per_token,
                           .state_bytes = (uint64_t)in.n_state_slots * in.state_bytes_per_slot,
                           .max_concurrency = (double)c->n_blocks * c->block_tokens / c->n_ctx, .rule = "blocks"};
  } else {
    int rc = sched_mem_plan(&in, &p, err);
    if (rc) return rc;
    c->n_blocks = p.n_blocks;
  }
  char line[512];
  GT_LOG_INFO("%s", sched_mem_format(&in, &p, line, sizeof line));
  return GT_OK;
}

int sched_spec_draft_vocab(int dv, int n_vocab) {
  return dv < 0 ? 0 : dv > 0 ? dv : n_vocab > 2 * SCHED_SPEC_DRAFT_VOCAB ? SCHED_SPEC_DRAFT_VOCAB : 0;
}

int sched_create(model_t *m, const tok_t *tok, const sched_config_t *cfg, sched_t **out, gt_err_t *err) {
  sched_t *s = calloc(1, sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "out of memory");
  sched_config_t c = cfg ? *cfg : (sched_config_t){0};
  if (c.max_num_seqs <= 0) c.max_num_seqs = 32;
  if (c.max_batch_tokens <= 0) c.max_batch_tokens = 512;
  if (c.max_batch_tokens > m->max_tokens) c.max_batch_tokens = m->max_tokens;
  if (c.max_batch_tokens < c.max_num_seqs) c.max_batch_tokens = c.max_num_seqs < m->max_tokens ? c.max_num_seqs : m->max_tokens;
  if (c.max_waiting <= 0) c.max_waiting = SCHED_DEFAULT_MAX_WAITING;
  if (c.block_tokens <= 0) c.block_tokens = 16;
  if (c.n_ctx <= 0 || c.n_ctx > m->hp.n_ctx_train) c.n_ctx = m->hp.n_ctx_train;
  s->hybrid = m->hp.n_gdn_layers > 0;
  if (c.n_snapshots <= 0) c.n_snapshots = s->hybrid ? 2 * c.max_num_seqs : 0;
  s->max_blocks = (c.n_ctx + c.block_tokens - 1) / c.block_tokens;
  if (c.embed) c.spec_mode = SCHED_SPEC_OFF; /* nothing is decoded */
  if (c.embed && model_n_ranks(m) > 1) {
    free(s);
    return gt_err_set(err, GT_EUNSUPPORTED, "an embedding engine runs on one rank (model_forward_hidden), not %d", model_n_ranks(m));
  }
  if (c.spec_mode != SCHED_SPEC_OFF) {
    if (c.spec_k <= 0) c.spec_k = 3;
    if (c.spec_k > SCHED_SPEC_MAX_K) c.spec_k = SCHED_SPEC_MAX_K;
    if (c.spec_max_seqs <= 0) c.spec_max_seqs = 8;
    if (c.spec_max_seqs > c.max_num_seqs) c.spec_max_seqs = c.max_num_seqs;
    if (c.spec_ngram_min <= 0) c.spec_ngram_min = 2;
    if (c.spec_ngram_max < c.spec_ngram_min) c.spec_ngram_max = c.spec_ngram_min > 4 ? c.spec_ngram_min : 4;
  } else {
    c.spec_k = c.spec_max_seqs = 0;
  }
  const int n_spec_slots = s->hybrid ? c.spec_max_seqs * c.spec_k : 0;
  s->max_rows = c.max_num_seqs + c.spec_k * c.spec_max_seqs;
  int rc = c.spec_mode == SCHED_SPEC_MTP ? model_mtp_enable(m, err) : GT_OK; /* before the pool: its KV layer */
  if (!rc) rc = plan_pool(m, &c, s->hybrid, n_spec_slots, err);
  if (rc) {
    free(s);
    return rc;
  }
  s->cfg = c;
  s->m = m;
  s->tok = tok;
  s->V = m->hp.n_vocab;
  int32_t ids[4] = {tok_eos(tok), tok_eot(tok), tok_find(tok, "<|im_end|>"), tok_find(tok, "<|endoftext|>")};
  memcpy(s->eos_ids, ids, sizeof ids);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  rc = kv_pool_create(c.n_blocks, c.block_tokens, &s->kv, err);
  if (rc) goto fail;
  kv_pool_on_evict(s->kv, on_snapshot_evict, s);
  int n_slots = s->hybrid ? c.max_num_seqs + c.n_snapshots + n_spec_slots : 0;
  if ((rc = model_cache_init(m, c.n_blocks, c.block_tokens, n_slots > 0 ? n_slots : 1, err))) goto fail;
  int T = c.max_batch_tokens, S = c.max_num_seqs, R = s->max_rows;
  s->slot_free = malloc(sizeof(int) * (size_t)S);
  s->snap_free = malloc(sizeof(int) * (size_t)(c.n_snapshots + 1));
  s->snap_block = malloc(sizeof(int32_t) * (size_t)(c.n_snapshots + 1));
  s->snap_used = calloc((size_t)c.n_snapshots + 1, sizeof(uint64_t));
  s->waiting = malloc(sizeof(req_t *) * (size_t)(c.max_waiting + S + 1));
  s->running = malloc(sizeof(req_t *) * (size_t)S);
  s->b_tok = malloc(sizeof(int32_t) * (size_t)T);
  s->b_pos = malloc(sizeof(int32_t) * (size_t)T);
  s->b_out = malloc(sizeof(int32_t) * (size_t)T);
  s->b_first = malloc(sizeof(int32_t) * (size_t)S);
  s->b_ntok = malloc(sizeof(int32_t) * (size_t)S);
  s->b_slot = malloc(sizeof(int32_t) * (size_t)S);
  s->b_pslot = malloc(sizeof(int32_t) * (size_t)S * BE_POS_SLOTS);
  s->b_req = malloc(sizeof(req_t *) * (size_t)S);
  s->b_bt = malloc(sizeof(int32_t) * (size_t)S * s->max_blocks);
  s->logits = malloc(sizeof(float) * (size_t)R * s->V);
  if (c.embed) s->hidden = malloc(sizeof(float) * (size_t)R * m->hp.n_embd);
  s->spec_free = malloc(sizeof(int) * (size_t)(n_spec_slots + 1));
  s->raw = malloc(sizeof(float) * (size_t)s->V);
  s->b_rows = malloc(sizeof(be_sample_row_t) * (size_t)R);
  s->b_ids = malloc(sizeof(int32_t) * (size_t)R);
  s->fork_tmp = malloc(sizeof(float) * (size_t)s->V);
  s->spec_next = 1;
  if (c.spec_mode != SCHED_SPEC_OFF && c.spec_adaptive && spec_cost_init(&s->cost, c.spec_max_seqs)) {
    rc = gt_err_set(err, GT_ENOMEM, "scheduler buffers (speculation costs)");
    goto fail;
  }
  if (c.spec_mode != SCHED_SPEC_OFF && c.spec_suffix_tokens > 0 && !(s->suffix = spec_suffix_create(c.spec_suffix_tokens))) {
    rc = gt_err_set(err, GT_ENOMEM, "scheduler buffers (suffix cache of %d tokens)", c.spec_suffix_tokens);
    goto fail;
  }
  if (c.spec_mode == SCHED_SPEC_MTP) {
    s->mtp = spec_mtp_create(T, S, s->max_blocks, s->V);
    m->mtp_draft_vocab = sched_spec_draft_vocab(c.spec_draft_vocab, s->V);
    s->mseq = calloc((size_t)S, sizeof *s->mseq);
    s->b_alive = calloc((size_t)S, 1);
    if (!s->mtp || !s->mseq || !s->b_alive) {
      rc = gt_err_set(err, GT_ENOMEM, "scheduler buffers (MTP drafter)");
      goto fail;
    }
  }
  s->mask_words = (s->V + 31) / 32;
  s->h_mask = malloc(sizeof(uint32_t) * (size_t)S * s->mask_words);
  s->h_rmap = malloc(sizeof(uint32_t) * (size_t)R);
  s->h_mask1 = malloc(sizeof(uint32_t) * (size_t)s->mask_words);
  s->b_mreq = malloc(sizeof(req_t *) * (size_t)S);
  /* a backend without logits_mask (a tensor-parallel group) samples constrained rows on the host */
  const int dev_mask = m->be->ops->logits_mask && m->be->ops->alloc;
  s->d_mask = dev_mask ? m->be->ops->alloc(m->be, sizeof(uint32_t) * (size_t)S * s->mask_words) : NULL;
  s->d_rmap = dev_mask ? m->be->ops->alloc(m->be, sizeof(uint32_t) * (size_t)R) : NULL;
  if ((rc = cons_cache_create(tok, SCHED_CONS_CACHE, s->cfg.cons_max_states, &s->cons, err))) goto fail;
  if (!s->h_mask || !s->h_rmap || !s->h_mask1 || !s->b_mreq || (dev_mask && (!s->d_mask || !s->d_rmap)) || !s->slot_free || !s->snap_free || !s->snap_block || !s->snap_used || !s->waiting || !s->running || !s->b_tok || !s->b_pos || !s->b_out ||
      !s->b_first || !s->b_ntok || !s->b_slot || !s->b_pslot || !s->b_req || !s->b_bt || !s->logits || !s->raw || (c.embed && !s->hidden) ||
      !s->b_rows || !s->b_ids || !s->fork_tmp || !s->spec_free) {
    rc = gt_err_set(err, GT_ENOMEM, "scheduler buffers");
    goto fail;
  }
  for (int i = S - 1; i >= 0; i--) s->slot_free[s->n_slot_free++] = i;
  for (int i = c.n_snapshots - 1; i >= 0; i--) s->snap_free[s->n_snap_free++] = S + i, s->snap_block[i] = -1;
  for (int i = n_spec_slots - 1; i >= 0; i--) s->spec_free[s->n_spec_free++] = S + c.n_snapshots + i;
  s->next_id = 1;
  s->st.kv_blocks = c.n_blocks;
  s->st.n_ctx = c.n_ctx;
  s->st.max_num_seqs = S;
  s->st.block_tokens = c.block_tokens;
  *out = s;
  return GT_OK;
fail:
  sched_free(s);
  return rc;
}

void sched_free(sched_t *s) {
  if (!s) return;
  /* everything still held gets a final CANCELLED event */
  for (req_t *q = s->incoming, *n; q; q = n) {
    n = q->next;
    finish(s, q, SCHED_FINISH_CANCELLED, NULL);
  }
  while (s->n_running) {
    req_t *q = s->running[--s->n_running];
    finish(s, q, SCHED_FINISH_CANCELLED, NULL);
  }
  while (s->n_waiting) {
    req_t *q = s->waiting[--s->n_waiting];
    finish(s, q, SCHED_FINISH_CANCELLED, NULL);
  }
  kv_pool_free(s->kv);
  cons_cache_free(s->cons); /* after the requests: they held references */
  free(s->h_mask);
  free(s->h_rmap);
  free(s->h_mask1);
  free(s->b_mreq);
  if (s->d_mask) s->m->be->ops->free(s->m->be, s->d_mask);
  if (s->d_rmap) s->m->be->ops->free(s->m->be, s->d_rmap);
  free(s->slot_free);
  free(s->snap_free);
  free(s->spec_free);
  spec_mtp_free(s->mtp);
  spec_suffix_free(s->suffix);
  spec_cost_free(&s->cost);
  free(s->mseq);
  free(s->b_alive);
  free(s->snap_block);
  free(s->snap_used);
  free(s->waiting);
  free(s->running);
  free(s->b_tok);
  free(s->b_pos);
  free(s->b_out);
  free(s->b_first);
  free(s->b_ntok);
  free(s->b_slot);
  free(s->b_pslot);
  free(s->b_req);
  free(s->b_bt);
  free(s->logits);
  free(s->hidden);
  free(s->raw);
  free(s->b_rows);
  free(s->b_ids);
  free(s->fork_tmp);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ---- submission (any thread) ---- */

/* A request for choice `index` of r (validated): its own copies of the prompt, stop ids and
 * biases, its sampler (seed + index) and output state; q->r.prompt stays NULL (the caller
 * owns r->prompt). GT_ENOMEM (or the sampler's / seqout's error) with nothing kept. */
static int req_new(sched_t *s, const sched_req_t *r, int index, req_t **out, gt_err_t *err) {
  req_t *q = calloc(1, sizeof *q);
  if (!q) return gt_err_set(err, GT_ENOMEM, "out of memory");
  int rc = GT_OK;
  q->r = *r;
  q->r.prompt = NULL;
  q->r.sampling.seed += (uint64_t)index;
  q->index = index;
  q->slot = -1;
  q->n_prompt = r->n_prompt;
  int room = s->cfg.n_ctx - r->n_prompt;
  if (q->r.max_tokens > room) q->r.max_tokens = room;
  q->cap = r->n_prompt + q->r.max_tokens;
  q->tokens = malloc(sizeof(int32_t) * (size_t)q->cap);
  q->blocks = malloc(sizeof(int32_t) * (size_t)s->max_blocks);
  if (r->n_stop_ids > 0) {
    q->stop_ids = malloc(sizeof(int32_t) * (size_t)r->n_stop_ids);
    if (q->stop_ids) memcpy(q->stop_ids, r->stop_ids, sizeof(int32_t) * (size_t)r->n_stop_ids);
    q->n_stop_ids = q->stop_ids ? r->n_stop_ids : 0;
  }
  q->r.stop_ids = NULL;
  if (r->n_bias > 0) {
    q->bias_ids = malloc(sizeof(int32_t) * (size_t)r->n_bias);
    q->bias_vals = malloc(sizeof(float) * (size_t)r->n_bias);
    if (q->bias_ids && q->bias_vals) {
      memcpy(q->bias_ids, r->bias_ids, sizeof(int32_t) * (size_t)r->n_bias);
      memcpy(q->bias_vals, r->bias_vals, sizeof(float) * (size_t)r->n_bias);
    }
  }
  q->r.bias_ids = NULL;
  q->r.bias_vals = NULL;
  if (r->n_allowed > 0 && (q->allowed = malloc(sizeof(int32_t) * (size_t)r->n_allowed)) &&
      (q->allowed_lg = malloc(sizeof(float) * (size_t)r->n_allowed)))
    memcpy(q->allowed, r->allowed_ids, sizeof(int32_t) * (size_t)r->n_allowed);
  q->r.allowed_ids = NULL;
  const int bad_rc = badw_copy(&q->bad, r->bad_ids, r->bad_lens, r->n_bad);
  q->r.bad_ids = q->r.bad_lens = NULL;
  if (!q->tokens || !q->blocks || bad_rc || (r->n_bias > 0 && (!q->bias_ids || !q->bias_vals)) ||
      (r->n_allowed > 0 && (!q->allowed || !q->allowed_lg)))
    rc = gt_err_set(err, GT_ENOMEM, "out of memory");
  if (!rc) {
    memcpy(q->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    q->n_tokens = r->n_prompt;
    rc = sampler_create(&q->r.sampling, s->V, &q->smp, err);
  }
  seqout_config_t oc = r->out;
  oc.id_seed += (uint64_t)index; /* each choice's tool-call ids differ */
  if (!rc) rc = seqout_create(s->tok, &oc, &q->out, err);
  if (!rc && r->constraint) rc = cons_seq_create(r->constraint, r->out.starts_in_reasoning, r->cons_may_think, &q->cs, err);
  if (!rc && q->cs) cons_seq_set_think_budget(q->cs, r->max_tokens);
  q->r.constraint = NULL; /* each choice holds its own reference through q->cs */
  if (rc) {
    free_req(q);
    return rc;
  }
  for (int i = 0; i < r->n_prompt; i++) sampler_accept(q->smp, r->prompt[i], 0);
  *out = q;
  return GT_OK;
}

int64_t sched_submit(sched_t *s, sched_req_t *r, gt_err_t *err) {
  int rc = GT_OK;
  req_t *q = NULL;
  if (r->n_prompt <= 0 || !r->prompt) {
    rc = gt_err_set(err, GT_EINVAL, "the prompt is empty");
  } else if (r->n_prompt >= s->cfg.n_ctx) {
    rc = gt_err_set(err, GT_EINVAL,
                    "the prompt has %d tokens; this model's context is %d tokens, which leaves no room to generate",
                    r->n_prompt, s->cfg.n_ctx);
  } else if (r->max_tokens <= 0) {
    rc = gt_err_set(err, GT_EINVAL, "max_tokens must be at least 1, got %d", r->max_tokens);
  } else if (s->cfg.embed && (r->max_tokens != 1 || r->n > 1 || r->constraint)) {
    rc = gt_err_set(err, GT_EINVAL, "an embedding engine takes max_tokens 1, n 1 and no constraint");
  } else if (r->min_tokens < 0 || r->min_tokens > r->max_tokens) {
    rc = gt_err_set(err, GT_EINVAL, "min_tokens must be in [0, max_tokens], got %d", r->min_tokens);
  } else if (r->logprobs > SEQOUT_MAX_TOP) {
    rc = gt_err_set(err, GT_EINVAL, "logprobs must be at most %d, got %d", SEQOUT_MAX_TOP, r->logprobs);
  } else if (!r->on_event) {
    rc = gt_err_set(err, GT_EINVAL, "no event callback");
  } else {
    for (int i = 0; i < r->n_prompt; i++)
      if (r->prompt[i] < 0 || r->prompt[i] >= s->V) {
        rc = gt_err_set_param(err, GT_EINVAL, "tokens", "token id %d at position %d is outside the vocabulary of %d", r->prompt[i], i, s->V);
        break;
      }
  }
  for (int i = 0; !rc && i < r->n_allowed; i++)
    if (r->allowed_ids[i] < 0 || r->allowed_ids[i] >= s->V)
      rc = gt_err_set_param(err, GT_EINVAL, "allowed_token_ids", "allowed_token_ids: token id %d is outside the vocabulary of %d",
                            r->allowed_ids[i], s->V);
  for (int i = 0; !rc && i < r->n_bias; i++) {
    if (r->bias_ids[i] < 0 || r->bias_ids[i] >= s->V)
      rc = gt_err_set_param(err, GT_EINVAL, "logit_bias", "logit_bias: token id %d is outside the vocabulary of %d", r->bias_ids[i], s->V);
    else if (!(r->bias_vals[i] >= -100.0f && r->bias_vals[i] <= 100.0f))
      rc = gt_err_set_param(err, GT_EINVAL, "logit_bias", "logit_bias: the bias of token %d must be in [-100, 100], got %g", r->bias_ids[i],
                            (double)r->bias_vals[i]);
  }
  const int n = r->n <= 0 ? 1 : r->n;
  if (!rc && (n > SCHED_MAX_N || n > s->cfg.max_num_seqs))
    rc = gt_err_set_param(err, GT_EINVAL, "n", "n must be at most %d (the engine runs %d sequences at once), got %d",
                    SCHED_MAX_N < s->cfg.max_num_seqs ? SCHED_MAX_N : s->cfg.max_num_seqs, s->cfg.max_num_seqs, n);
  if (!rc && n > 1) { /* every choice at its longest must fit the pool at once */
    const int bt = s->cfg.block_tokens, room = s->cfg.n_ctx - r->n_prompt;
    const int mt = r->max_tokens < room ? r->max_tokens : room;
    const int64_t need = (r->n_prompt / bt) + (int64_t)n * ((r->n_prompt % bt + mt + bt - 1) / bt);
    if (need > s->cfg.n_blocks)
      rc = gt_err_set_param(err, GT_EINVAL, "n", "n = %d choices of up to %d tokens need %lld KV blocks; the pool has %d", n, mt,
                      (long long)need, s->cfg.n_blocks);
  }
  if (!rc) rc = sampler_check(&r->sampling, err);
  if (!rc) rc = req_new(s, r, 0, &q, err);
  if (!rc && n > 1 && !(q->forks = calloc((size_t)n - 1, sizeof *q->forks))) rc = gt_err_set(err, GT_ENOMEM, "out of memory");
  for (int i = 1; !rc && i < n; i++) {
    rc = req_new(s, r, i, &q->forks[i - 1], err);
    if (!rc) q->n_fork = i;
  }
  if (!rc) {
    q->t_submit = now_ms();
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->stop) {
      rc = gt_err_set(err, GT_ECANCELLED, "the engine is draining and accepts no new requests");
    } else if (s->n_incoming + s->n_waiting_seen >= s->cfg.max_waiting) {
      rc = gt_err_set(err, GT_EBUSY, "the waiting queue is full (%d requests)", s->cfg.max_waiting);
    } else {
      q->id = s->next_id++;
      q->arrival = s->arrivals++;
      live_link(s, q);
      for (int i = 0; i < q->n_fork; i++) { /* choices not forked yet carry the id for sched_cancel */
        q->forks[i]->id = q->id;
        live_link(s, q->forks[i]);
      }
      if (s->incoming_tail) s->incoming_tail->next = q; else s->incoming = q;
      s->incoming_tail = q;
      s->n_incoming++;
      pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
  }
  cons_unref(r->constraint); /* the choices hold theirs */
  r->constraint = NULL;
  if (rc) {
    free_req(q);
    free(r->prompt);
    r->prompt = NULL;
    return rc;
  }
  q->r.prompt = r->prompt;
  r->prompt = NULL; /* owned by the request now (q->r.prompt) */
  return q->id;
}

int sched_constraint(sched_t *s, cons_kind_t kind, const char *spec, size_t len, cons_t **out, gt_err_t *err) {
  return cons_get(s->cons, kind, spec, len, out, err);
}

void sched_constraint_stats(sched_t *s, cons_cache_stats_t *out) { cons_cache_stats(s->cons, out); }

void sched_cancel(sched_t *s, int64_t id) {
  pthread_mutex_lock(&s->mu);
  for (req_t *q = s->live; q; q = q->lnext)
    if (q->id == id && !q->cancel_asked) {
      q->cancel_asked = 1;
      s->cancel_pending = 1;
    }
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

void sched_stop(sched_t *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

void sched_drain(sched_t *s) {
  pthread_mutex_lock(&s->mu);
  s->draining = 1;
  pthread_mutex_unlock(&s->mu);
}

void sched_stats(sched_t *s, sched_stats_t *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->st;
  pthread_mutex_unlock(&s->mu);
}

/* ---- the step ---- */

/* Removes the requests of arr[*n] marked cancel_now and finishes them CANCELLED. */
static void finish_cancelled(sched_t *s, req_t **arr, int *n) {
  for (int i = 0; i < *n;) {
    req_t *q = arr[i];
    if (!q->cancel_now) {
      i++;
      continue;
    }
    remove_at(arr, n, i);
    finish(s, q, SCHED_FINISH_CANCELLED, NULL);
  }
}

/* Moves incoming requests to the waiting queue and applies cancellations. */
static void take_inbox(sched_t *s) {
  pthread_mutex_lock(&s->mu);
  req_t *in = s->incoming;
  s->incoming = s->incoming_tail = NULL;
  s->n_incoming = 0;
  for (req_t *q = in; q; q = q->next) s->n_waiting_seen++; /* moving to waiting[] below */
  pthread_mutex_unlock(&s->mu);
  for (req_t *q = in, *n; q; q = n) {
    n = q->next;
    q->next = NULL;
    insert_waiting(s, q);
  }
  /* every choice of a cancelled request was marked (they share its id); choices not forked yet
   * end with their parent */
  pthread_mutex_lock(&s->mu);
  const int cancels = s->cancel_pending;
  s->cancel_pending = 0;
  for (int i = 0; cancels && i < s->n_waiting; i++) s->waiting[i]->cancel_now = s->waiting[i]->cancel_asked;
  for (int i = 0; cancels && i < s->n_running; i++) s->running[i]->cancel_now = s->running[i]->cancel_asked;
  pthread_mutex_unlock(&s->mu);
  if (cancels) {
    finish_cancelled(s, s->waiting, &s->n_waiting);
    finish_cancelled(s, s->running, &s->n_running);
  }
  waiting_changed(s);
}

/* q is decoding: one pending token */
static int decoding(const req_t *q) { return q->n_tokens - q->n_computed == 1; }

/* Free blocks kept for the running decodes: one each, so that every running stream can start
 * its next block without preempting anyone. Prompt chunks (admission included) use only the
 * blocks beyond these (engine/SERVE.md "Scheduling"). */
static int decode_headroom(const sched_t *s) {
  int n = 0;
  for (int i = 0; i < s->n_running; i++) n += decoding(s->running[i]);
  return n;
}

/* Admits waiting requests in order while fewer than max_num_seqs run and the blocks of the
 * request's first chunk (its prompt up to max_batch_tokens, without counting cache hits) are
 * free beyond the decodes' headroom; the first one that does not fit waits, and so does
 * everything behind it. With nothing running the head is admitted whatever the pool holds (a
 * request that can never fit then fails in step()). Looks up each admitted one's cached prefix. */
static void admit(sched_t *s) {
  const int bt = s->cfg.block_tokens;
  int spare = kv_n_available(s->kv) - decode_headroom(s);
  int reserved = 0; /* running places (and state slots) kept for choices still to fork */
  for (int i = 0; i < s->n_running; i++) reserved += s->running[i]->n_fork;
  while (s->n_waiting > 0 && s->n_running + reserved + 1 + s->waiting[0]->n_fork <= s->cfg.max_num_seqs) {
    req_t *q = s->waiting[0];
    reserved += q->n_fork;
    const int chunk = q->n_tokens < s->cfg.max_batch_tokens ? q->n_tokens : s->cfg.max_batch_tokens;
    const int need = (chunk + bt - 1) / bt;
    if (s->n_running > 0 && spare < need) break;
    spare -= need;
    remove_at(s->waiting, &s->n_waiting, 0);
    if (s->hybrid) {
      q->slot = s->slot_free[--s->n_slot_free];
      s->m->be->ops->state_zero(s->m->be, q->slot);
    }
    /* reuse cached blocks, always leaving the last token to compute (its logits are needed) */
    int snap = -1;
    int matched = kv_match(s->kv, q->r.cache_salt, q->tokens, q->n_tokens - 1, s->max_blocks, s->hybrid, q->blocks, &snap);
    if (s->hybrid && matched > 0 && snap >= 0) {
      s->m->be->ops->state_copy(s->m->be, q->slot, snap);
      s->snap_used[snap - s->cfg.max_num_seqs] = ++s->snap_tick;
    }
    q->n_blocks = q->n_committed = matched;
    q->n_computed = matched * bt;
    q->chain = q->r.cache_salt; /* the chain of kv_match */
    for (int i = 0; i < matched; i++) q->chain = kv_hash_block(q->chain, q->tokens + (size_t)i * bt, bt);
    if (q->t_admit == 0) { /* first admission (not a resume after preemption) */
      q->t_admit = now_ms();
      q->cached_tokens = q->n_computed;
      pthread_mutex_lock(&s->mu);
      s->st.prefix_queried_tokens += (uint64_t)(q->n_tokens - 1);
      s->st.prefix_hit_tokens += (uint64_t)q->n_computed;
      s->st.prompt_tokens += (uint64_t)q->n_prompt;
      pthread_mutex_unlock(&s->mu);
    }
    /* hybrid: snapshot the state at the prompt's last block boundary (multi-turn reuse) */
    int b = ((q->n_prompt - 1) / bt) * bt;
    q->snap_boundary = s->hybrid && b > q->n_computed ? b : 0;
    q->running = 1;
    insert_ordered(s->running, &s->n_running, q); /* oldest first: they grow (and preempt) first */
  }
  waiting_changed(s);
}

/* Preempts, for `keep`, the youngest running request (lowest priority, latest arrival) among
 * those younger than keep and not in this step's batch; returns 0 if there is none. A newcomer
 * therefore never takes blocks from a stream that was running before it. */
static int preempt_one(sched_t *s, const req_t *keep) {
  int victim = -1;
  for (int i = 0; i < s->n_running; i++) {
    req_t *q = s->running[i];
    if (q == keep || q->chunk > 0 || !before(keep, q)) continue;
    if (victim < 0 || before(s->running[victim], q)) victim = i;
  }
  if (victim < 0) return 0;
  req_t *q = s->running[victim];
  remove_at(s->running, &s->n_running, victim);
  release_resources(s, q);
  q->n_computed = 0;
  q->running = 0;
  insert_waiting(s, q);
  pthread_mutex_lock(&s->mu);
  s->n_waiting_seen = s->n_waiting;
  s->st.preemptions++;
  pthread_mutex_unlock(&s->mu);
  GT_LOG_DEBUG("sched preempt id=%lld tokens=%d", (long long)q->id, q->n_tokens);
  return 1;
}

/* Makes sure q has blocks for its first n_computed + n tokens; preempts others if needed.
 * Returns 0 on success, -1 if the pool cannot hold it now. */
static int ensure_blocks(sched_t *s, req_t *q, int n) {
  int need = (q->n_computed + n + s->cfg.block_tokens - 1) / s->cfg.block_tokens;
  while (q->n_blocks < need) {
    int32_t b = kv_alloc(s->kv);
    if (b < 0) {
      if (!preempt_one(s, q)) return -1;
      continue;
    }
    q->blocks[q->n_blocks++] = b;
  }
  return 0;
}

/* Tokens a prompt chunk of q can take now without preempting: room left in its blocks plus the
 * available blocks beyond the decodes' headroom. */
static int chunk_fit(const sched_t *s, const req_t *q) {
  const int spare = kv_n_available(s->kv) - decode_headroom(s);
  return (q->n_blocks + (spare > 0 ? spare : 0)) * s->cfg.block_tokens - q->n_computed;
}

/* Registers q's newly completed blocks in the prefix cache. */
static void commit_blocks(sched_t *s, req_t *q) {
  int bt = s->cfg.block_tokens;
  while (q->n_committed < q->n_blocks && (q->n_committed + 1) * bt <= q->n_computed) {
    int i = q->n_committed++;
    q->chain = kv_hash_block(q->chain, q->tokens + (size_t)i * bt, bt);
    kv_commit(s->kv, q->blocks[i], q->chain, q->tokens + (size_t)i * bt);
  }
}

static int is_eos(const sched_t *s, int32_t id) {
  for (int i = 0; i < 4; i++)
    if (s->eos_ids[i] >= 0 && s->eos_ids[i] == id) return 1;
  return 0;
}

/* cons_seq_mask's result n as req_t.cons_end: 0 (tokens allowed), CONS_DEAD_END (none), or the
 * grammar's negative GT_E* error. */
enum { CONS_DEAD_END = 1 };
static int cons_mask_end(int n) { return n > 0 ? 0 : n == 0 ? CONS_DEAD_END : n; }

/* Finishes q for its constraint (end: cons_mask_end, or cons_seq_accept's error): a dead end and a
 * grammar error are both ERROR finishes, each with a message naming its cause (the router turns it
 * into an OpenAI-style error). Returns take_token's result. */
static int cons_fail(req_t *q, int end, int32_t tok) {
  if (end == CONS_DEAD_END)
    snprintf(q->fail, sizeof q->fail,
             "constraint: dead end after %d tokens: the constraint allows no token of the model's vocabulary "
             "next (no text can complete the output)",
             q->n_generated);
  else if (end == GT_EINVAL) /* the mask allowed it: a bug, reported rather than emitted */
    snprintf(q->fail, sizeof q->fail, "constraint: sampled token %d that the mask does not allow", tok);
  else
    snprintf(q->fail, sizeof q->fail, "constraint: %s (after %d tokens)", cons_strerror(end), q->n_generated);
  return 1 + SCHED_FINISH_ERROR;
}

/* Takes q's next token: sampled here from logits row lg, or (lg NULL) the id the backend sampled
 * with a draw from q's sampler (see device_rows). Returns 1 + sched_finish_t if q is done, else 0. */
static int take_token(sched_t *s, req_t *q, float *lg, int32_t sampled) {
  gt_err_t err = {0};
  /* logprobs are of the raw logits: only the penalties, logit_bias and a constraint's mask change
   * lg before the draw, so a copy is taken only then (one O(vocab) pass per token saved otherwise) */
  const int masked = q->cs && cons_seq_active(q->cs);
  const float *raw = lg;
  if (lg && q->r.logprobs >= 0 && (q->r.n_bias > 0 || q->r.n_allowed > 0 || q->bad.n > 0 || masked || sampler_has_penalties(&q->r.sampling))) {
    memcpy(s->raw, lg, sizeof(float) * (size_t)s->V);
    raw = s->raw;
  }
  if (lg)
    for (int i = 0; i < q->r.n_bias; i++) lg[q->bias_ids[i]] += q->bias_vals[i];
  if (lg && q->bad.n > 0) badw_apply(&q->bad, q->tokens + q->n_prompt, q->n_tokens - q->n_prompt, lg, s->V);
  /* min_tokens holds against any logit_bias (a constraint's mask decides where it applies) */
  if (lg && !masked && q->n_generated < q->r.min_tokens && !q->r.ignore_eos)
    for (int i = 0; i < 4; i++)
      if (s->eos_ids[i] >= 0 && s->eos_ids[i] < s->V) lg[s->eos_ids[i]] = -INFINITY;
  if (lg && q->r.n_allowed > 0) { /* allowed_token_ids: every other id to -inf */
    for (int i = 0; i < q->r.n_allowed; i++) q->allowed_lg[i] = lg[q->allowed[i]];
    for (int i = 0; i < s->V; i++) lg[i] = -INFINITY;
    for (int i = 0; i < q->r.n_allowed; i++) lg[q->allowed[i]] = q->allowed_lg[i];
  }
  if (lg && masked) { /* host path: the mask now (the device path applied it on the backend) */
    const double t0 = now_ms();
    q->cons_end = cons_mask_end(cons_seq_mask(q->cs, s->h_mask1, s->V));
    if (!q->cons_end) sampler_mask_logits(lg, s->h_mask1, s->V);
    s->mask_ms += now_ms() - t0;
  }
  if (masked && q->cons_end) return cons_fail(q, q->cons_end, -1);
  int32_t t = lg ? sampler_sample(q->smp, lg) : sampled;
  int cons_done = 0;
  if (q->cs) {
    s->n_constrained += masked;
    const int a = cons_seq_accept(q->cs, t);
    if (a < 0) return cons_fail(q, a, t);
    cons_done = a == CONS_DONE;
  }
  sampler_accept(q->smp, t, 1);
  q->n_generated++;
  if (q->t_first == 0) q->t_first = now_ms();
  if (lg && q->r.logprobs >= 0) {
    seqout_logprob_t lp = {.id = t, .logprob = sampler_logprob(raw, s->V, t)};
    lp.n_top = sampler_top_ids(raw, s->V, q->r.logprobs, lp.top_ids);
    /* log-softmax is the logit less one constant: one O(vocab) pass for all, not one per top id */
    for (int i = 0; i < lp.n_top; i++) lp.top_lps[i] = (float)((double)lp.logprob + ((double)raw[lp.top_ids[i]] - raw[t]));
    seqout_add_logprob(q->out, &lp);
  }
  int can_stop = q->n_generated >= q->r.min_tokens;
  int user_stop = 0;
  for (int i = 0; i < q->n_stop_ids; i++) user_stop |= q->stop_ids[i] == t;
  if (can_stop && (user_stop || (!q->r.ignore_eos && is_eos(s, t)))) {
    seqout_push_id(q->out, t);
    return 1 + SCHED_FINISH_STOP;
  }
  int rc = seqout_push(q->out, t, can_stop, &err);
  if (rc < 0) return 1 + SCHED_FINISH_ERROR;
  q->tokens[q->n_tokens++] = t;
  if (rc == 1 || cons_done) return 1 + SCHED_FINISH_STOP; /* cons_done: the constraint is complete */
  if (q->n_generated >= q->r.max_tokens) return 1 + SCHED_FINISH_LENGTH;
  return 0;
}

/* The error message of take_token's result done (NULL unless an ERROR finish). */
static const char *fail_msg(const req_t *q, int done) {
  if (done - 1 != SCHED_FINISH_ERROR) return NULL;
  return q->fail[0] ? q->fail : "output processing failed";
}

/* Device sampling for this step's n_out output rows: possible when the backend has `sample` and
 * no output row's request needs penalties, logit_bias or logprobs (those need the host sampler). Then fills b_rows (drawing each request's
 * uniform now: its RNG advances once per token on either path) and returns 1; else 0. */
static int device_rows(sched_t *s, int n_seq, int n_out) {
  if (!s->m->be->ops->sample || n_out == 0 || s->cfg.embed) return 0;
  for (int i = 0; i < n_seq; i++) {
    const req_t *q = s->b_req[i];
    if (q->n_computed + q->chunk < q->n_tokens) continue; /* no output row */
    if (q->r.logprobs >= 0 || q->r.n_bias > 0 || sampler_has_penalties(&q->r.sampling) || q->n_fork > 0) return 0;
    if (q->n_generated < q->r.min_tokens) return 0; /* EOS is masked on the host until min_tokens */
    if (q->r.n_allowed > 0) return 0;              /* allowed_token_ids: masked on the host */
    if (q->bad.n > 0) return 0;                    /* bad_words: masked on the host */
    if (q->cs && !s->d_mask) return 0; /* no logits_mask op: masked on the host */
    if (q->cs && q->n_draft > 0) return 0; /* a draft row's mask follows the drafts before it: take_token */
  }
  int o = 0;
  for (int i = 0; i < n_seq; i++) {
    req_t *q = s->b_req[i];
    if (q->n_computed + q->chunk < q->n_tokens) continue;
    const sampler_params_t *p = &q->r.sampling;
    /* a draw per row; verify rewinds the RNG to the draws of the tokens it keeps */
    if (q->n_draft > 0) sampler_rng_get(q->smp, q->rng0);
    for (int j = 0; j <= q->n_draft; j++)
      s->b_rows[o++] = (be_sample_row_t){.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p,
                                         .min_p = p->min_p, .u = sampler_next_u(q->smp)};
  }
  return 1;
}

/* Device sampling with constraints: the masks of this step's constrained output rows into h_mask
 * (packed), h_rmap[n_out] (their rows, else BE_MASK_NONE), uploaded to d_mask / d_rmap for the
 * backend's logits_mask op. Returns 1 when the op is to run (the batch holds a constrained
 * sequence), 0 when not (nothing uploaded), -1 on an upload error (err set); a row whose mask
 * allows nothing (a dead end) or failed (a grammar error) gets BE_MASK_NONE and q->cons_end
 * (take_token ends it). The masks are filled in parallel (OpenMP). */
static int device_masks(sched_t *s, int n_seq, int n_out, gt_err_t *err) {
  int o = 0, k = 0, any = 0;
  for (int i = 0; i < n_seq; i++) {
    req_t *q = s->b_req[i];
    any |= q->cs != NULL;
    if (q->n_computed + q->chunk < q->n_tokens) continue;
    s->h_rmap[o] = BE_MASK_NONE;
    if (q->cs && cons_seq_active(q->cs)) {
      s->b_mreq[k] = q;
      s->h_rmap[o] = (uint32_t)k++;
    }
    o++;
    for (int j = 0; j < q->n_draft; j++) s->h_rmap[o++] = BE_MASK_NONE; /* unconstrained (device_rows) */
  }
  if (!any) return 0;
  /* the rows' masks in parallel (a cold grammar state walks the vocabulary: ~ms on 248K ids);
   * matchers are per sequence; the grammar's cache is shared and locks itself (grammar.h), so the
   * rows of one grammar take turns and a state's mask is computed once for all of them */
#pragma omp parallel for schedule(dynamic, 1) if (k > 1)
  for (int j = 0; j < k; j++) {
    req_t *q = s->b_mreq[j];
    q->cons_end = cons_mask_end(cons_seq_mask(q->cs, s->h_mask + (size_t)j * s->mask_words, s->V));
  }
  for (int j = 0; j < n_out; j++) /* a row without a mask is left unmasked: take_token ends it */
    if (s->h_rmap[j] != BE_MASK_NONE && s->b_mreq[s->h_rmap[j]]->cons_end) s->h_rmap[j] = BE_MASK_NONE;
  /* the op runs in every step of a batch that holds a constrained sequence, even when none of its
   * rows is masked now (reasoning, mid-prompt): the decode graph then keeps one op list while
   * the sequence runs instead of being captured again whenever its mask comes and goes */
  be_t *be = s->m->be;
  const size_t w = sizeof(uint32_t) * (size_t)s->mask_words;
  if ((k && be->ops->upload(be, s->d_mask, s->h_mask, w * (size_t)k)) ||
      be->ops->upload(be, s->d_rmap, s->h_rmap, sizeof(uint32_t) * (size_t)n_out)) {
    if (!model_backend_err(be, err)) gt_err_set(err, GT_EINTERNAL, "uploading the constraint masks failed");
    return -1;
  }
  return 1;
}

static void publish_stats(sched_t *s) {
  pthread_mutex_lock(&s->mu);
  s->st.running = s->n_running;
  s->st.waiting = s->n_waiting + s->n_incoming;
  s->n_waiting_seen = s->n_waiting;
  if (s->m->be->ops->eager_steps) s->st.eager_steps = (uint64_t)s->m->be->ops->eager_steps(s->m->be);
  if (s->m->be->ops->graph_captures) s->st.graph_captures = (uint64_t)s->m->be->ops->graph_captures(s->m->be);
  s->st.kv_used = kv_n_used(s->kv);
  s->st.constrained_tokens = s->n_constrained;
  s->st.mask_ms = s->mask_ms;
  pthread_mutex_unlock(&s->mu);
}

static int step(sched_t *s, gt_err_t *err);

/* Forks q's pending choices once its prompt is computed (step): each shares q's full blocks,
 * copies the partial last block and the recurrent state, and takes its first token from row
 * (q's logits, before q samples from it). A choice that gets no block waits (recompute). */
static void fork_choices(sched_t *s, req_t *q, const float *row) {
  be_t *be = s->m->be;
  const int bt = s->cfg.block_tokens, full = q->n_computed / bt, part = q->n_computed % bt;
  for (int k = 0; k < q->n_fork; k++) {
    req_t *c = q->forks[k];
    c->id = q->id;
    c->arrival = q->arrival;
    c->t_submit = q->t_submit;
    c->t_admit = q->t_admit;
    c->t_prefill_done = q->t_prefill_done;
    c->cached_tokens = q->cached_tokens;
    for (int b = 0; b < full; b++) {
      kv_ref(s->kv, q->blocks[b]);
      c->blocks[c->n_blocks++] = q->blocks[b];
    }
    c->n_committed = q->n_committed;
    c->chain = q->chain;
    int ok = 1;
    if (part) {
      int32_t nb = kv_alloc(s->kv);
      if (nb >= 0 && be->ops->kv_block_copy(be, nb, q->blocks[full]) == GT_OK) {
        c->blocks[c->n_blocks++] = nb;
      } else {
        if (nb >= 0) kv_release(s->kv, nb);
        ok = 0;
      }
    }
    if (ok && s->hybrid) {
      c->slot = s->slot_free[--s->n_slot_free]; /* reserved by admit */
      if (be->ops->state_copy(be, c->slot, q->slot)) ok = 0;
    }
    if (ok) {
      c->n_computed = q->n_computed;
    } else { /* no block: the choice waits and is computed again (its prompt from the prefix cache) */
      release_resources(s, c);
      c->n_computed = 0;
      pthread_mutex_lock(&s->mu);
      s->st.fork_waits++;
      pthread_mutex_unlock(&s->mu);
    }
    memcpy(s->fork_tmp, row, sizeof(float) * (size_t)s->V); /* take_token writes the biases into it */
    int done = take_token(s, c, s->fork_tmp, -1);
    if (!done && c->n_tokens >= s->cfg.n_ctx) done = 1 + SCHED_FINISH_LENGTH;
    if (done) {
      finish(s, c, (sched_finish_t)(done - 1), fail_msg(c, done));
      continue;
    }
    emit_delta(c);
    if (ok) {
      c->running = 1;
      insert_ordered(s->running, &s->n_running, c);
    } else {
      insert_waiting(s, c);
      waiting_changed(s);
    }
  }
  free(q->forks);
  q->forks = NULL;
  q->n_fork = 0;
}

/* Lays out b_req[i] (its chunk of q->chunk pending tokens, then its q->n_draft drafts) at row
 * *n_tok of the step's batch: b_first / b_ntok / b_slot / b_pslot, its tokens and positions, its out
 * rows at *n_out (the last pending token's when the chunk reaches it, a row per draft); *n_pos counts
 * the sequences with per-position states. */
static void lay_seq(sched_t *s, int i, int *n_tok, int *n_out, int *n_pos) {
  req_t *q = s->b_req[i];
  const int n = q->chunk, nd = q->n_draft;
  s->b_first[i] = *n_tok;
  s->b_ntok[i] = n + nd;
  s->b_slot[i] = q->slot;
  int32_t *ps = s->b_pslot + (size_t)i * BE_POS_SLOTS;
  for (int j = 0; j < BE_POS_SLOTS; j++) ps[j] = -1;
  for (int j = 0; j < nd && s->hybrid; j++) ps[n - 1 + j] = q->pslot[j]; /* n == 1: decoding */
  *n_pos += nd > 0 && s->hybrid;
  for (int k = 0; k < n + nd; k++) {
    s->b_tok[*n_tok + k] = k < n ? q->tokens[q->n_computed + k] : q->draft[k - n];
    s->b_pos[*n_tok + k] = q->n_computed + k;
  }
  *n_tok += n;
  if (q->n_computed + n == q->n_tokens) s->b_out[(*n_out)++] = *n_tok - 1;
  for (int j = 0; j < nd; j++) s->b_out[(*n_out)++] = (*n_tok)++; /* a row per draft */
}

static int fill_drafts(sched_t *s, req_t *q, int want, int tokens, int rows);

/* Fillers may make up at most 1 / SCHED_FILL_SHARE of a filled step's rows: beyond that the rows
 * they add are taken to cost more than the graph saves over an eager step (a bound chosen, not yet
 * measured; a batch where few sequences draft, as prompt lookup on unrepetitive text, stays mixed). */
#define SCHED_FILL_SHARE 4

/* After the step's n decoding sequences were laid out (rows from 0) with drafts for some: when their
 * draft counts differ and the fillers needed are within SCHED_FILL_SHARE, fillers (fill_drafts) bring
 * each to the most drafts any of them has, within the step's budget (tokens left) and output rows,
 * and the n are laid out again. Returns the tokens added. */
static int fill_decodes(sched_t *s, int n, int budget, int *n_tok, int *n_out, int *n_pos) {
  int want = 0, need = 0, rows = 0;
  for (int i = 0; i < n; i++)
    if (s->b_req[i]->n_draft > want) want = s->b_req[i]->n_draft;
  for (int i = 0; i < n; i++) need += want - s->b_req[i]->n_draft, rows += s->b_req[i]->chunk + want;
  if (need == 0 || SCHED_FILL_SHARE * need > rows) return 0;
  int added = 0;
  for (int i = 0; i < n && budget - added > 0; i++)
    added += fill_drafts(s, s->b_req[i], want, budget - added, s->max_rows - *n_out - added);
  if (added == 0) return 0;
  *n_tok = *n_out = *n_pos = 0;
  for (int i = 0; i < n; i++) lay_seq(s, i, n_tok, n_out, n_pos);
  return added;
}

/* ---- speculative decoding (sched.h) ---- */

/* How many of nd drafts of decoding q fit: its blocks plus free ones beyond the decodes' headroom
 * (taken into q->blocks), 1 + nd rows <= BE_GRAPH_MAX_Q, and for a hybrid q the spare slots for its
 * rows' states (taken into q->pslot). */
static int draft_room(sched_t *s, req_t *q, int nd) {
  const int bt = s->cfg.block_tokens;
  int room = q->n_blocks * bt - q->n_tokens; /* slots after the pending tokens */
  while (room < nd && kv_n_available(s->kv) > decode_headroom(s)) {
    const int32_t b = kv_alloc(s->kv);
    if (b < 0) break;
    q->blocks[q->n_blocks++] = b;
    room += bt;
  }
  if (nd > room) nd = room;
  if (nd > BE_POS_SLOTS) nd = BE_POS_SLOTS; /* 1 + nd rows <= BE_GRAPH_MAX_Q (state_pos_slot) */
  if (nd > 0 && s->hybrid) {
    while (q->n_pslot < nd && s->n_spec_free > 0) q->pslot[q->n_pslot++] = s->spec_free[--s->n_spec_free];
    if (nd > q->n_pslot) nd = q->n_pslot;
  }
  return nd > 0 ? nd : 0;
}

/* The suffix cache's drafts for q (spec_suffix.h) into q->draft when it matches the last
 * SPEC_SUFFIX_MAX_N tokens of q, more than q's own drafter matched (g_own tokens: prompt lookup's
 * n-gram, 0 for MTP), and gives at least min_nd drafts (q->draft_src). A shorter match across
 * requests predicts worse: on demo35's held-out prompts (each a new prompt, CPU stack, k 3 and 6)
 * taking matches of 5..7 tokens too cost prompt lookup 0.02-0.06 of acceptance length, while
 * full matches cost at most 0.01. Returns the drafts taken (0: none). */
static int cached_drafts(sched_t *s, req_t *q, int k, int g_own, int min_nd) {
  if (!s->suffix) return 0;
  int32_t d[SCHED_SPEC_MAX_K];
  int gc = 0;
  const int nc = spec_suffix_draft(s->suffix, q->tokens, q->n_tokens, q->r.cache_salt, k, d, &gc);
  if (nc <= 0 || nc < min_nd || gc < SPEC_SUFFIX_MAX_N || gc <= g_own) return 0;
  memcpy(q->draft, d, sizeof(int32_t) * (size_t)nc);
  q->draft_src = SCHED_DRAFT_CACHE;
  return nc;
}

/* Prompt lookup's drafts (spec.h) for q into q->draft, at most k: from q's own tokens through its
 * index (a scan when that is out of memory), or from the suffix cache (cached_drafts). Returns the
 * count. */
static int ngram_drafts(sched_t *s, req_t *q, int k) {
  const int lo = s->cfg.spec_ngram_min, hi = s->cfg.spec_ngram_max;
  int g = 0, nd = spec_index_draft(&q->ngx, q->tokens, q->n_tokens, k, lo, hi, q->draft, &g);
  if (nd < 0) {
    nd = spec_ngram_draft(q->tokens, q->n_tokens, k, lo, hi, q->draft);
    g = hi;
  }
  const int nc = cached_drafts(s, q, k, g, 0);
  return nc > 0 ? nc : nd;
}

/* Drafts for decoding q, whose pending tokens all go into this step, into q->draft: at most
 * spec_k, `tokens` more tokens of the step's budget and `rows` more output rows, what fits in
 * n_ctx and max_tokens, and what q's blocks plus the free blocks beyond the decodes' headroom
 * hold (speculation never preempts), and for a hybrid q the spare slots free for its rows' states
 * (one per draft: q->pslot, given back by verify). Returns q->n_draft. */
static int propose(sched_t *s, req_t *q, int tokens, int rows) {
  q->n_draft = q->n_fill = 0;
  q->draft_src = SCHED_DRAFT_OWN;
  if (q->r.no_spec || q->n_generated == 0 || q->n_fork > 0) return 0;
  if (q->spec_skip > 0) { /* paused after a full rejection */
    q->spec_skip--;
    return 0;
  }
  int k = s->cfg.spec_k;
  const int room_ctx = s->cfg.n_ctx - q->n_tokens, room_out = q->r.max_tokens - q->n_generated - 1;
  if (k > tokens) k = tokens;
  if (k > rows) k = rows;
  if (k > room_ctx) k = room_ctx;
  if (k > room_out) k = room_out;
  if (k <= 0) return 0;
  int nd = 0;
  if (s->cfg.spec_draft) {
    nd = s->cfg.spec_draft(s->cfg.spec_draft_ud, q->id, q->index, q->tokens, q->n_tokens, k, q->draft);
  } else if (s->cfg.spec_mode == SCHED_SPEC_MTP) { /* drafted after the last step (mtp_pass) */
    nd = q->mtp_at == q->n_tokens ? (q->n_mtp_draft < k ? q->n_mtp_draft : k) : 0;
    memcpy(q->draft, q->mtp_draft, sizeof(int32_t) * (size_t)(nd > 0 ? nd : 0));
    if (q->ng_at == q->n_tokens && nd >= 1 && q->ng_draft[0] == q->draft[0]) { /* the lookup's, as mtp_pass chose */
      nd = k; /* k <= spec_k, the lookup's count */
      memcpy(q->draft, q->ng_draft, sizeof(int32_t) * (size_t)nd);
      q->draft_src = SCHED_DRAFT_LOOKUP;
    }
    const int nc = cached_drafts(s, q, k, 0, nd);
    if (nc > 0) nd = nc;
  } else {
    nd = ngram_drafts(s, q, k);
  }
  if (nd > k) nd = k;
  for (int j = 0; j < nd; j++)
    if (q->draft[j] < 0 || q->draft[j] >= s->V) nd = j; /* a hook's bad id ends the drafts */
  q->n_draft = draft_room(s, q, nd);
  return q->n_draft;
}

/* Fillers after q's n_draft drafts up to want (capped as propose caps drafts: `tokens` more tokens
 * of the step's budget and `rows` more output rows, n_ctx, max_tokens, blocks, spare slots), so that
 * the step's decoding sequences all bring the same row count, the shape of a verify graph (CUDA: a
 * verify step of mixed draft counts runs eagerly). A filler is the last draft (or the pending token)
 * again: verified like a draft, so the output is the same whatever it is; not counted as drafted
 * (verify). None for a sequence that opted out, is constrained (host path), forks, has generated
 * nothing yet or whose chunk stops short of its newest token. Returns the fillers added. */
static int fill_drafts(sched_t *s, req_t *q, int want, int tokens, int rows) {
  if (q->r.no_spec || q->cs || q->n_fork > 0 || q->n_generated == 0 || q->n_draft >= want ||
      q->n_computed + q->chunk != q->n_tokens) /* drafts follow the newest token only */
    return 0;
  const int room_ctx = s->cfg.n_ctx - q->n_tokens, room_out = q->r.max_tokens - q->n_generated - 1;
  int k = want;
  if (k > q->n_draft + tokens) k = q->n_draft + tokens;
  if (k > q->n_draft + rows) k = q->n_draft + rows;
  if (k > room_ctx) k = room_ctx;
  if (k > room_out) k = room_out;
  if (k <= q->n_draft) return 0;
  const int nd = draft_room(s, q, k);
  if (nd <= q->n_draft) return 0;
  const int32_t t = q->n_draft > 0 ? q->draft[q->n_draft - 1] : q->tokens[q->n_tokens - 1];
  const int added = nd - q->n_draft;
  for (int j = q->n_draft; j < nd; j++) q->draft[j] = t;
  q->n_fill += added;
  q->n_draft = nd;
  return added;
}

/* Takes q's tokens from its 1 + n_draft output rows starting at row o (host logits, or the
 * device-sampled ids) while each equals the draft of its row; the first that differs (or the
 * row after the last draft) is kept too. Then drops what the rejected drafts left: KV blocks
 * past the kept tokens, and a hybrid q's state: with rows 0..a kept (a drafts accepted, a < n_draft)
 * its state is the one after row a, in q->pslot[a], which becomes q's slot (its old slot a
 * spare); the spare slots go back. Returns take_token's result for the last token taken
 * (1 + sched_finish_t, or 0). */
static int verify(sched_t *s, req_t *q, int o, int on_dev) {
  const int nd = q->n_draft, bt = s->cfg.block_tokens;
  int a = 0, done = 0, forced = 0, force_acc = 0;
  if (s->cfg.spec_force_accept > 1) { /* benchmark hook (sched.h) */
    const double f = s->cfg.spec_force_accept - 1;
    q->n_verify++;
    force_acc = (int)(floor(q->n_verify * f) - floor((q->n_verify - 1) * f));
  }
  if (on_dev) sampler_rng_set(q->smp, q->rng0); /* each kept token replays its row's draw */
  for (int j = 0; j <= nd; j++) {
    if (on_dev) sampler_next_u(q->smp);
    if (j < nd && j < force_acc)
      done = take_token(s, q, NULL, q->draft[j]); /* taken as if the row had drawn it */
    else
      done = on_dev ? take_token(s, q, NULL, s->b_ids[o + j]) : take_token(s, q, s->logits + (size_t)(o + j) * s->V, -1);
    if (!done && q->n_tokens >= s->cfg.n_ctx) done = 1 + SCHED_FINISH_LENGTH;
    if (done || j == nd || q->tokens[q->n_tokens - 1] != q->draft[j]) break;
    if (s->cfg.spec_force_reject == j + 1) {
      forced = 1;
      break;
    }
    a++;
  }
  /* the counts and the pause are the drafts' (fillers after them: fill_drafts, neither) */
  const int real = nd - q->n_fill, a_real = a < real ? a : real;
  pthread_mutex_lock(&s->mu);
  s->st.spec_drafts += real > 0;
  s->st.spec_draft_tokens += (uint64_t)real;
  s->st.spec_accepted_tokens += (uint64_t)a_real;
  for (int j = 0; j < a_real; j++) s->st.spec_accepted_pos[j]++;
  s->st.spec_fill_tokens += (uint64_t)q->n_fill;
  s->st.spec_fill_accepted += (uint64_t)(a - a_real);
  s->st.spec_src_draft_tokens[q->draft_src] += (uint64_t)real;
  s->st.spec_src_accepted[q->draft_src] += (uint64_t)a_real;
  s->st.spec_rollbacks += !done && s->hybrid && a < nd;
  pthread_mutex_unlock(&s->mu);
  if (real > 0 && (a > 0 || forced)) {
    q->spec_pause = 0;
  } else if (real > 0) { /* all rejected: pause 1, 2, 4 .. 16 steps */
    q->spec_skip = q->spec_pause = q->spec_pause ? (q->spec_pause < 16 ? 2 * q->spec_pause : 16) : 1;
  }
  if (done) return done; /* finish releases everything */
  q->n_computed += a; /* the accepted drafts' K/V (and state) are the sequence's */
  if (s->hybrid && a < nd) { /* the state went past the kept tokens: take the one after row a */
    const int t = q->slot;
    q->slot = q->pslot[a];
    q->pslot[a] = t;
  }
  pslot_release(s, q);
  q->n_draft = q->n_fill = 0;
  /* blocks past the kept tokens held only rejected drafts (never committed) */
  const int keep = (q->n_tokens + bt - 1) / bt;
  while (q->n_blocks > keep && q->n_blocks > q->n_committed) kv_release(s->kv, q->blocks[--q->n_blocks]);
  commit_blocks(s, q);
  return 0;
}

/* With MTP, prompt lookup in place of the block's chain (sched_config_t.spec_lookup_off 0): when q's
 * last spec_ngram_max tokens recur earlier with at least spec_k tokens after them, those tokens go
 * to q->ng_draft (ng_at) and the pass computes only the block's first draft; propose takes the
 * lookup's drafts when that first draft agrees with theirs, else the block's one draft. Chained MTP
 * steps are the drafter's cost on the GPU (~60 us each on demo35, launch-bound), and on code the
 * lookup's drafts are right more often: on demo35's held-out prompts (CPU stack, k 3, each request
 * a new prompt) acceptance length 3.03 -> 3.39 (edit) and 3.25 -> 3.36 (completion), with half
 * the drafts the block computed (1,892 -> 873 on edit). Returns whether it took them. */
static int lookup_strong(sched_t *s, req_t *q) {
  if (s->cfg.spec_lookup_off) return 0;
  int g = 0;
  const int nd = spec_index_draft(&q->ngx, q->tokens, q->n_tokens, s->cfg.spec_k, s->cfg.spec_ngram_min,
                                  s->cfg.spec_ngram_max, q->ng_draft, &g); /* -1: out of memory, none */
  if (nd < s->cfg.spec_k || g < s->cfg.spec_ngram_max) return 0;
  q->ng_at = q->n_tokens;
  return 1;
}

/* SCHED_SPEC_MTP, after the step's tokens were taken: the MTP pass over each still running
 * sequence's rows of the step whose next token is known now (spec.h "MTP drafting"), and the
 * drafts of those that decode (q->mtp_draft, for the step that finds n_tokens == mtp_at). The
 * rows a rejected draft left are not passed; the kept ones are (rows 0..a of a sequence that
 * accepted a drafts: their hidden states are exact). */
static int mtp_pass(sched_t *s, int n_seq, gt_err_t *err) {
  int n = 0;
  /* the next step speculates only with at most spec_max_seqs decodes (step()): past that no pass
   * runs at all. The block's K/V at the positions computed meanwhile stay what the pool held (zeros
   * or an earlier sequence's rows: finite), so drafts after the batch shrinks again are worse there
   * (a lower acceptance, which the pause after a full rejection bounds; never a different output).
   * Keeping them current cost every large step a pass (demo35 through the stack at c32: tpot 1.27
   * against 1.02 ms without speculation). */
  if (decode_headroom(s) > s->cfg.spec_max_seqs || !s->spec_next) return GT_OK;
  /* likewise before a step that will not draft because drafting does not pay there (spec_cost.h) */
  for (int i = 0; i < n_seq; i++) {
    if (!s->b_alive[i]) continue;
    req_t *q = s->b_req[i];
    if (q->r.no_spec) continue;
    const int p0 = s->b_pos[s->b_first[i]];
    int rows = q->n_tokens - 1 - p0; /* rows whose next token is known */
    if (rows > s->b_ntok[i]) rows = s->b_ntok[i];
    if (rows <= 0) continue;
    const int last = p0 + rows - 1 == q->n_tokens - 2; /* the pass reaches the newest token */
    q->mtp_at = q->ng_at = -1;
    int k = last && q->n_generated > 0 && q->n_fork == 0 && q->spec_skip == 0 ? s->cfg.spec_k : 0;
    if (k > 1 && lookup_strong(s, q)) k = 1; /* the block's first draft only, to check the lookup's against */
    s->mseq[n] = (spec_mtp_seq_t){.src_row = s->b_first[i], .n_rows = rows, .pos0 = p0, .next = q->tokens + p0 + 1,
                                  .src_rows = s->b_ntok[i], .blocks = q->blocks, .n_blocks = q->n_blocks, .k = k};
    s->b_req[n] = q; /* b_req is not read again this step */
    n++;
  }
  if (n == 0) return GT_OK;
  s->st.spec_mtp_passes++;
  const int rc = spec_mtp_run(s->mtp, s->m, s->mseq, n, s->cfg.block_tokens, err);
  for (int i = 0; i < n && !rc; i++) {
    req_t *q = s->b_req[i];
    q->n_mtp_draft = s->mseq[i].n_draft;
    s->st.spec_mtp_drafted += (uint64_t)q->n_mtp_draft;
    memcpy(q->mtp_draft, s->mseq[i].draft, sizeof(int32_t) * (size_t)q->n_mtp_draft);
    if (q->n_mtp_draft > 0) q->mtp_at = q->n_tokens;
  }
  return rc;
}

int sched_step(sched_t *s, gt_err_t *err) {
  int rc = step(s, err);
  publish_stats(s);
  return rc;
}

/* GANTRY_LOG_SLOW_STEP_MS: steps longer than this are logged with their phases (0: off) */
static double slow_step_ms(void) {
  static double v = -1;
  if (v < 0) {
    const char *e = getenv("GANTRY_LOG_SLOW_STEP_MS");
    v = e ? atof(e) : 0;
    if (v < 0) v = 0;
  }
  return v;
}

static int step(sched_t *s, gt_err_t *err) {
  const double t_step = now_ms();
  take_inbox(s);
  admit(s);
  if (s->n_running == 0) return 0;
  const int bt = s->cfg.block_tokens;
  int budget = s->cfg.max_batch_tokens;
  int n_tok = 0, n_seq = 0, n_out = 0, n_pos = 0;
  for (int i = 0; i < s->n_running; i++) s->running[i]->chunk = s->running[i]->n_draft = s->running[i]->n_fill = 0;
  /* adaptive speculation: none in a step of many decodes (compute-bound), nor where the measured
   * costs say it does not pay (spec_next, decided at the end of the previous step) */
  const int spec_on = s->cfg.spec_mode != SCHED_SPEC_OFF && decode_headroom(s) <= s->cfg.spec_max_seqs && s->spec_next;
  int n_dec = 0, n_pf = 0, n_drafts = 0; /* this step: decoding sequences, prompt rows, drafts */
  /* decoding sequences first, then prefill chunks, in admission order */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < s->n_running && budget > 0; i++) {
      req_t *q = s->running[i];
      int pending = q->n_tokens - q->n_computed;
      if ((pass == 0) != decoding(q) || q->chunk > 0 || pending <= 0) continue;
      int n = pending < budget ? pending : budget;
      if (q->snap_boundary > q->n_computed && q->n_computed + n > q->snap_boundary) n = q->snap_boundary - q->n_computed;
      if (pass == 1) { /* a prompt chunk: what its blocks and the spare ones hold */
        int fit;
        while ((fit = chunk_fit(s, q)) < 1 && preempt_one(s, q)) {}
        if (fit < 1 && s->n_running > 1) continue; /* waits, holding what it computed */
        if (fit >= 1 && fit < n) n = fit;
      }
      if (ensure_blocks(s, q, n)) {
        if (s->n_running == 1 && n_seq == 0) { /* alone and still too big: it can never fit */
          remove_at(s->running, &s->n_running, i);
          finish(s, q, SCHED_FINISH_ERROR, "the KV cache pool is too small for this request");
          return 1;
        }
        continue;
      }
      i = -1; /* preemption may have reordered running[]: rescan (chunk > 0 marks done) */
      q->chunk = n;
      const int nd = pass == 0 && spec_on && n == pending ? propose(s, q, budget - n, s->max_rows - n_out - 1) : 0;
      n_dec += pass == 0, n_pf += pass == 1 ? n : 0, n_drafts += nd;
      s->b_req[n_seq] = q;
      lay_seq(s, n_seq, &n_tok, &n_out, &n_pos);
      budget -= n + nd;
      n_seq++;
    }
    if (pass == 0 && spec_on && n_drafts > 0) budget -= fill_decodes(s, n_seq, budget, &n_tok, &n_out, &n_pos);
  }
  if (n_seq == 0) return 0;
  /* the block table always has max_blocks columns: every decode step of n sequences then has
   * the same batch layout, so the backend replays its decode graph of that size (captured by
   * sched_warmup) instead of capturing it again whenever a context grows by a block */
  const int maxb = s->max_blocks;
  for (int i = 0; i < n_seq; i++) {
    memcpy(s->b_bt + (size_t)i * maxb, s->b_req[i]->blocks, sizeof(int32_t) * (size_t)s->b_req[i]->n_blocks);
    for (int k = s->b_req[i]->n_blocks; k < maxb; k++) s->b_bt[(size_t)i * maxb + k] = -1;
  }
  be_batch_t b = {.n_tok = n_tok, .n_seq = n_seq, .tok = s->b_tok, .pos = s->b_pos, .seq_first = s->b_first,
                  .seq_ntok = s->b_ntok, .block_table = s->b_bt, .max_blocks = maxb,
                  .state_slot = s->hybrid ? s->b_slot : NULL, .state_pos_slot = n_pos ? s->b_pslot : NULL,
                  .n_out = n_out, .out_tok = s->b_out};
  const int on_dev = device_rows(s, n_seq, n_out);
  const double t_mask = now_ms();
  const long caps0 = s->m->be->ops->graph_captures ? s->m->be->ops->graph_captures(s->m->be) : 0;
  const int n_masked = on_dev ? device_masks(s, n_seq, n_out, err) : 0; /* 1: run logits_mask */
  if (n_masked) s->mask_ms += now_ms() - t_mask;
  int rc = n_masked < 0 ? GT_EINTERNAL
           : on_dev  ? model_forward_sample_mask(s->m, &b, s->b_rows, s->b_ids, n_masked ? s->d_mask : NULL, s->d_rmap, err)
           : s->cfg.embed ? model_forward_hidden(s->m, &b, s->hidden, err)
                     : model_forward(s->m, &b, s->logits, err);
  const double t_fwd = now_ms();
  const uint64_t acc0 = s->st.spec_accepted_tokens + s->st.spec_fill_accepted; /* tokens kept past the pending ones */
  pthread_mutex_lock(&s->mu);
  s->st.steps++;
  s->st.computed_tokens += (uint64_t)n_tok;
  pthread_mutex_unlock(&s->mu);
  if (rc) {
    while (s->n_running) {
      req_t *q = s->running[--s->n_running];
      finish(s, q, SCHED_FINISH_ERROR, err->msg);
    }
    return rc;
  }
  int o = 0;
  for (int i = 0; i < n_seq; i++) {
    req_t *q = s->b_req[i];
    q->n_computed += q->chunk;
    if (s->b_alive) s->b_alive[i] = 1;
    if (q->n_draft > 0) { /* its rows are verified together; blocks committed after the rollback */
      const int rows = 1 + q->n_draft, done = verify(s, q, o, on_dev);
      o += rows;
      if (done) {
        if (s->b_alive) s->b_alive[i] = 0;
        for (int k = 0; k < s->n_running; k++)
          if (s->running[k] == q) remove_at(s->running, &s->n_running, k);
        finish(s, q, (sched_finish_t)(done - 1), fail_msg(q, done));
      } else {
        emit_delta(q);
      }
      continue;
    }
    commit_blocks(s, q);
    if (q->snap_boundary && q->n_computed == q->snap_boundary && q->n_committed * bt == q->snap_boundary) {
      /* on the block kv_match finds: q's own, or the cached one q recomputed (its snapshot lost) */
      const int32_t blk = kv_committed_block(s->kv, q->blocks[q->n_committed - 1], q->chain,
                                             q->tokens + (size_t)(q->n_committed - 1) * bt);
      /* an equal prompt that ran alongside q may have snapshotted that block already: its
       * snapshot serves (a second one would only push out the least recently used) */
      const int held = blk >= 0 ? kv_block_snapshot(s->kv, blk) : -1;
      if (held >= 0) s->snap_used[held - s->cfg.max_num_seqs] = ++s->snap_tick;
      const int snap = blk >= 0 && held < 0 ? snap_take(s) : -1;
      if (snap >= 0) {
        s->m->be->ops->state_copy(s->m->be, snap, q->slot);
        const int si = snap - s->cfg.max_num_seqs;
        s->snap_block[si] = blk; /* before: kv_set_snapshot may hand it back */
        s->snap_used[si] = ++s->snap_tick;
        kv_set_snapshot(s->kv, blk, snap);
      }
      q->snap_boundary = 0;
    }
    if (q->n_computed < q->n_tokens) continue; /* mid-prompt chunk: no token yet */
    if (q->t_prefill_done == 0) q->t_prefill_done = now_ms();
    if (s->cfg.embed) { /* the pooled row: last prompt token */
      q->embedding = s->hidden + (size_t)o++ * s->m->hp.n_embd;
      for (int k = 0; k < s->n_running; k++)
        if (s->running[k] == q) remove_at(s->running, &s->n_running, k);
      finish(s, q, SCHED_FINISH_STOP, NULL);
      continue;
    }
    if (q->n_fork > 0) fork_choices(s, q, s->logits + (size_t)o * s->V); /* host row: device_rows */
    int done = on_dev ? take_token(s, q, NULL, s->b_ids[o]) : take_token(s, q, s->logits + (size_t)o * s->V, -1);
    o++;
    if (!done && q->n_tokens >= s->cfg.n_ctx) done = 1 + SCHED_FINISH_LENGTH;
    if (done) {
      if (s->b_alive) s->b_alive[i] = 0;
      for (int k = 0; k < s->n_running; k++)
        if (s->running[k] == q) remove_at(s->running, &s->n_running, k);
      finish(s, q, (sched_finish_t)(done - 1), fail_msg(q, done));
    } else {
      emit_delta(q);
    }
  }
  /* the next step's choice, before the pass it would need; this step's cost sample after it */
  const int pure = n_pf == 0 && n_dec == n_seq && n_dec <= s->cfg.spec_max_seqs;
  const int n_next = decode_headroom(s);
  s->spec_next = s->cost.by_n && n_next <= s->cfg.spec_max_seqs ? spec_cost_decide(&s->cost, n_next) : 1;
  if (!s->spec_next) {
    pthread_mutex_lock(&s->mu);
    s->st.spec_cost_off_steps++;
    pthread_mutex_unlock(&s->mu);
  }
  const uint64_t passes0 = s->st.spec_mtp_passes;
  const double t_pass = now_ms();
  if (s->mtp && (rc = mtp_pass(s, n_seq, err)) != GT_OK) {
    while (s->n_running) {
      req_t *q = s->running[--s->n_running];
      finish(s, q, SCHED_FINISH_ERROR, err->msg);
    }
    return rc;
  }
  const double slow = slow_step_ms(), t_end = now_ms();
  const long caps = s->m->be->ops->graph_captures ? s->m->be->ops->graph_captures(s->m->be) - caps0 : 0;
  /* the cost sample: the step without its MTP pass, plus (speculative steps) the average pass, the
   * cost of drafting for a step whichever step it ran after */
  const double pass = s->st.spec_mtp_passes != passes0 ? t_end - t_pass : 0;
  if (pass > 0) s->pass_ms = s->pass_ms > 0 ? s->pass_ms + SPEC_COST_ALPHA * (pass - s->pass_ms) : pass;
  if (s->cost.by_n && pure && caps == 0) {
    const double clk = t_end - t_step - pass + (n_drafts > 0 ? s->pass_ms : 0);
    const double ms = s->cfg.spec_step_ms ? s->cfg.spec_step_ms(s->cfg.spec_step_ud, n_dec, n_drafts, clk) : clk;
    spec_cost_record(&s->cost, n_dec, n_drafts > 0, ms, 1.0 + (double)(s->st.spec_accepted_tokens + s->st.spec_fill_accepted - acc0) / n_dec);
  }
  if (slow > 0 && t_end - t_step > slow) {
    GT_LOG_INFO("slow step: ms=%.2f plan_ms=%.2f forward_ms=%.2f emit_ms=%.2f seqs=%d tokens=%d captures=%ld", t_end - t_step,
                t_mask - t_step, t_fwd - t_mask, t_end - t_fwd, n_seq, n_tok, caps);
  }
  return 1;
}

/* ---- warm-up (sched.h) ---- */

/* One warm-up step: the same model entry real steps take (device sampling when the backend
 * has it, greedy rows), so the backend records the same op sequence. */
static int warm_forward(sched_t *s, const be_batch_t *b, gt_err_t *err) {
  if (!s->m->be->ops->sample || b->n_out == 0) return model_forward(s->m, b, s->logits, err);
  for (int i = 0; i < b->n_out; i++) s->b_rows[i] = (be_sample_row_t){.temperature = 0, .top_p = 1, .u = 0.5};
  return model_forward_sample(s->m, b, s->b_rows, s->b_ids, err);
}

int sched_warmup(sched_t *s, sched_warmup_t *out, gt_err_t *err) {
  pthread_mutex_lock(&s->mu);
  const int fresh = s->st.steps == 0 && !s->incoming && s->arrivals == 0;
  pthread_mutex_unlock(&s->mu);
  if (!fresh || s->n_running || s->n_waiting)
    return gt_err_set(err, GT_EINVAL, "the warm-up runs only before the first request");
  be_t *be = s->m->be;
  const int S = s->cfg.max_num_seqs, T = s->cfg.max_batch_tokens, mb = s->max_blocks, bt = s->cfg.block_tokens;
  const int n_blocks = s->cfg.n_blocks, n_ctx = s->cfg.n_ctx;
  const double t0 = now_ms();
  const long e0 = be->ops->eager_steps ? be->ops->eager_steps(be) : 0;
  /* 1. the largest step: nt tokens over ns sequences (each at most n_ctx tokens), an output
   * row each; its blocks are taken round-robin from the whole pool */
  const int ns = S < T ? S : T;
  const int nt = (int64_t)ns * n_ctx < T ? ns * n_ctx : T;
  int next_block = 0, first = 0;
  for (int i = 0; i < ns; i++) {
    const int len = nt / ns + (i < nt % ns);
    s->b_first[i] = first;
    s->b_ntok[i] = len;
    s->b_slot[i] = i;
    s->b_out[i] = first + len - 1;
    for (int k = 0; k < len; k++) {
      s->b_tok[first + k] = (int32_t)(((int64_t)k * 31 + i) % s->V);
      s->b_pos[first + k] = k;
    }
    for (int k = 0; k < mb; k++) s->b_bt[(size_t)i * mb + k] = k * bt < len ? (next_block++) % n_blocks : -1;
    first += len;
  }
  be_batch_t b = {.n_tok = nt, .n_seq = ns, .tok = s->b_tok, .pos = s->b_pos, .seq_first = s->b_first,
                  .seq_ntok = s->b_ntok, .block_table = s->b_bt, .max_blocks = mb,
                  .state_slot = s->hybrid ? s->b_slot : NULL, .n_out = ns, .out_tok = s->b_out};
  int rc = warm_forward(s, &b, err);
  /* 2. one decode step per batch size, one token at position 0 per sequence */
  int sizes = ns < SCHED_WARMUP_MAX_SEQS ? ns : SCHED_WARMUP_MAX_SEQS;
  for (int n = 1; n <= sizes && !rc; n++) {
    for (int i = 0; i < n; i++) {
      s->b_tok[i] = (int32_t)(i % s->V);
      s->b_pos[i] = 0;
      s->b_first[i] = i;
      s->b_ntok[i] = 1;
      s->b_slot[i] = i;
      s->b_out[i] = i;
      s->b_bt[(size_t)i * mb] = i % n_blocks;
      for (int k = 1; k < mb; k++) s->b_bt[(size_t)i * mb + k] = -1;
    }
    b.n_tok = b.n_seq = b.n_out = n;
    rc = warm_forward(s, &b, err);
  }
  /* 3. speculation: one verify step per batch size 1..min(spec_max_seqs, decode sizes) (1 + spec_k
   * tokens per sequence at positions 0..spec_k, an output row each: the step of sequences that all
   * got spec_k drafts), and with MTP the drafter's steps after each (its pass over r = 1..1 + spec_k
   * kept rows per sequence, each with the chained draft rows that follow), so that a backend with
   * graphs captures those shapes here too. Steps of fewer drafts get theirs when they first run. */
  const int kq = 1 + s->cfg.spec_k;
  int vsizes = 0;
  if (s->cfg.spec_mode != SCHED_SPEC_OFF && s->cfg.spec_k > 0) {
    vsizes = s->cfg.spec_max_seqs < sizes ? s->cfg.spec_max_seqs : sizes;
    while (vsizes > 0 && ((int64_t)vsizes * kq > T || vsizes * kq > s->max_rows || vsizes * kq > BE_GRAPH_MAX_SEQS))
      vsizes--;
  }
  int vblocks = (kq + bt) / bt; /* positions 0..kq: the pass's rows and the first chained row */
  if (vblocks > mb) vblocks = mb;
  int32_t next[SCHED_SPEC_MAX_K + 1];
  for (int j = 0; j < kq; j++) next[j] = (int32_t)((j * 13 + 5) % s->V);
  for (int n = 1; n <= vsizes && !rc; n++) {
    for (int i = 0; i < n; i++) {
      s->b_first[i] = i * kq;
      s->b_ntok[i] = kq;
      s->b_slot[i] = i;
      for (int j = 0; j < kq; j++) {
        s->b_tok[i * kq + j] = (int32_t)((i * 7 + j) % s->V);
        s->b_pos[i * kq + j] = j;
        s->b_out[i * kq + j] = i * kq + j;
      }
      for (int k = 0; k < mb; k++) s->b_bt[(size_t)i * mb + k] = k < vblocks ? (i * vblocks + k) % n_blocks : -1;
      for (int j = 0; j < BE_POS_SLOTS; j++) /* the spare slots of sequence i's rows (verify) */
        s->b_pslot[(size_t)i * BE_POS_SLOTS + j] = j < s->cfg.spec_k ? S + s->cfg.n_snapshots + i * s->cfg.spec_k + j : -1;
    }
    b.n_tok = b.n_out = n * kq;
    b.n_seq = n;
    b.state_pos_slot = s->hybrid ? s->b_pslot : NULL;
    rc = warm_forward(s, &b, err);
    for (int r = 1; s->mtp && r <= kq && !rc; r++) {
      for (int i = 0; i < n; i++)
        s->mseq[i] = (spec_mtp_seq_t){.src_row = i * kq, .n_rows = r, .pos0 = 0, .next = next,
                                      .blocks = s->b_bt + (size_t)i * mb, .n_blocks = vblocks, .k = s->cfg.spec_k};
      rc = spec_mtp_run(s->mtp, s->m, s->mseq, n, bt, err);
    }
  }
  /* the running slots start from zero state again (admit zeroes them too) */
  for (int i = 0; i < S && s->hybrid && !rc; i++) rc = be->ops->state_zero(be, i);
  if (!rc) rc = model_backend_err(be, err);
  if (rc) return rc;
  sched_warmup_t w = {.prefill_tokens = nt, .decode_sizes = sizes, .verify_sizes = vsizes, .verify_tokens = vsizes ? kq : 0,
                      .ms = now_ms() - t0,
                      .eager_steps = be->ops->eager_steps ? be->ops->eager_steps(be) - e0 : 0,
                      .graph_sizes = {{0}}};
  if (be->ops->graph_sizes) be->ops->graph_sizes(be, &w.graph_sizes);
  char buf[256];
  char vbuf[96] = "";
  if (vsizes)
    snprintf(vbuf, sizeof vbuf, ", verify sizes 1-%d x %d tokens%s", vsizes, kq, s->mtp ? " and the MTP drafter's steps" : "");
  if (be->ops->graph_sizes)
    GT_LOG_INFO("%s graphs: captured %d decode sizes (%s) in %.0f ms (warm-up: a step of %d tokens, decode sizes 1-%d%s, "
                "eager_steps=%ld, captures=%ld)",
                be->ops->name, be_sizes_count(&w.graph_sizes), be_fmt_graph_sizes(&w.graph_sizes, buf, sizeof buf), w.ms, nt,
                sizes, vbuf, w.eager_steps, be->ops->graph_captures ? be->ops->graph_captures(be) : 0L);
  else
    GT_LOG_INFO("warm-up: a step of %d tokens, decode sizes 1-%d%s in %.0f ms (the %s backend keeps no graphs)", nt, sizes,
                vbuf, w.ms, be->ops->name);
  if (out) *out = w;
  return GT_OK;
}

void sched_run(sched_t *s) {
  gt_err_t err = {0};
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->stop && !s->incoming && !s->cancel_pending && s->n_running == 0 && s->n_waiting == 0)
      pthread_cond_wait(&s->cv, &s->mu);
    int stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stop) return;
    if (sched_step(s, &err) < 0) GT_LOG_ERROR("sched step failed: %s", err.msg);
  }
}
