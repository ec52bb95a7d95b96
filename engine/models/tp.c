/* engine/models/tp.c — the tensor-parallel rank group (engine/models/tp.h). */
#include "engine/models/tp.h"

#include "engine/backend/sampler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A job every rank runs on its worker: returns GT_OK or an error in *err. */
typedef int (*job_fn)(tp_group_t *g, int rank, void *arg, gt_err_t *err);

struct tp_group {
  int n;
  be_comm_t *comm;
  be_t *be[TP_MAX_RANKS];
  model_t *m[TP_MAX_RANKS];
  pthread_t th[TP_MAX_RANKS];
  int n_threads; /* workers started */
  pthread_mutex_t mu;
  pthread_cond_t cv_job, cv_done;
  unsigned long gen; /* job generation: a worker runs each one once */
  int pending, quit;
  job_fn job;
  void *arg;
  int rc[TP_MAX_RANKS];
  gt_err_t errs[TP_MAX_RANKS];
  gt_err_t failed; /* first failure: the group refuses work after it */
  model_t *gm;     /* the group model */
  /* sampling across ranks (tp_forward under model_forward_sample), grown to the step's n_out:
   * each rank's greedy picks and their logits, the gathered rows of the other picks */
  int pick_cap;
  int32_t *pick_ids[TP_MAX_RANKS];
  float *pick_max[TP_MAX_RANKS];
  float *gather;  /* [gather_cap, n_vocab], allocated when a step has a non-greedy row */
  int gather_cap;
  int32_t *idx;   /* [n_vocab] sampler scratch */
  int fail_rank; /* tp_fail_rank_at: the rank to fail (-1: none) after fail_in more forwards */
  long fail_in;  /* set by tp_fail_rank_at between steps, counted down by fail_rank's worker */
};

typedef struct {
  be_t base;
  tp_group_t *g; /* NULL once the group is freed */
  be_ops_t ops;
} tp_be_t;

static void *worker(void *p) {
  tp_group_t *g = p;
  pthread_mutex_lock(&g->mu);
  const int r = g->n_threads++; /* ranks start in order under mu (tp_load waits for each) */
  pthread_cond_broadcast(&g->cv_done);
  unsigned long seen = g->gen;
  for (;;) {
    while (g->gen == seen && !g->quit) pthread_cond_wait(&g->cv_job, &g->mu);
    if (g->quit) break;
    seen = g->gen;
    job_fn fn = g->job;
    void *arg = g->arg;
    pthread_mutex_unlock(&g->mu);
    memset(&g->errs[r], 0, sizeof g->errs[r]);
    int rc = fn(g, r, arg, &g->errs[r]);
    if (rc) g->comm->ops->abort(g->comm); /* nobody waits for this rank */
    pthread_mutex_lock(&g->mu);
    g->rc[r] = rc;
    if (--g->pending == 0) pthread_cond_broadcast(&g->cv_done);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* Runs fn on every rank and waits. A failure of any rank fails the group for good; the error
 * reported is the first rank's own (not a GT_ECANCELLED from the aborted communicator). */
static int run_all(tp_group_t *g, job_fn fn, void *arg, gt_err_t *err) {
  if (g->failed.code) return gt_err_set(err, g->failed.code, "tensor-parallel group failed: %s", g->failed.msg);
  pthread_mutex_lock(&g->mu);
  g->job = fn;
  g->arg = arg;
  g->pending = g->n;
  g->gen++;
  pthread_cond_broadcast(&g->cv_job);
  while (g->pending) pthread_cond_wait(&g->cv_done, &g->mu);
  pthread_mutex_unlock(&g->mu);
  int bad = -1;
  for (int r = 0; r < g->n; r++)
    if (g->rc[r] && (bad < 0 || (g->rc[bad] == GT_ECANCELLED && g->rc[r] != GT_ECANCELLED))) bad = r;
  if (bad < 0) return GT_OK;
  gt_err_set(&g->failed, g->rc[bad], "rank %d: %s", bad, g->errs[bad].msg);
  return gt_err_set(err, g->rc[bad], "%s", g->failed.msg);
}

/* ---- jobs ---- */

typedef struct {
  const be_batch_t *b;
  float *logits;
} fwd_arg_t;

static int job_forward(tp_group_t *g, int r, void *p, gt_err_t *err) {
  fwd_arg_t *a = p;
  if (r == g->fail_rank && g->fail_in-- == 0)
    return gt_err_set(err, GT_EINTERNAL, "injected failure (tp_fail_rank_at)");
  model_t *m = g->m[r];
  const be_sample_row_t *rows = g->gm->head_rows;
  if (rows) {
    m->head_rows = rows;
    m->head_ids = g->pick_ids[r];
    m->head_max = g->pick_max[r];
    m->head_gather = g->gather;
  }
  int rc = model_forward(m, a->b, a->logits, err);
  m->head_rows = NULL;
  m->head_ids = NULL;
  m->head_max = m->head_gather = NULL;
  return rc;
}

typedef struct {
  int n_blocks, block_tokens, n_slots;
} cache_arg_t;

static int job_cache(tp_group_t *g, int r, void *p, gt_err_t *err) {
  cache_arg_t *a = p;
  return model_cache_init(g->m[r], a->n_blocks, a->block_tokens, a->n_slots, err);
}

typedef struct {
  int op; /* 0 state_copy, 1 state_zero, 2 kv_block_copy */
  int a, b;
} state_arg_t;

static int job_state(tp_group_t *g, int r, void *p, gt_err_t *err) {
  state_arg_t *a = p;
  be_t *be = g->be[r];
  int rc = a->op == 0 ? be->ops->state_copy(be, a->a, a->b)
           : a->op == 1 ? be->ops->state_zero(be, a->a)
                        : be->ops->kv_block_copy(be, a->a, a->b);
  if (!rc) rc = be->ops->sync(be);
  return rc ? gt_err_set(err, rc, "%s", be->err.msg) : GT_OK;
}

/* ---- the group model ---- */

/* Buffers of a sampling step with n rows (any of them non-greedy: gather too). */
static int pick_bufs(tp_group_t *g, int n, int gather, gt_err_t *err) {
  const size_t V = (size_t)g->gm->hp.n_vocab;
  if (n > g->pick_cap) {
    for (int r = 0; r < g->n; r++) {
      int32_t *ids = realloc(g->pick_ids[r], sizeof(int32_t) * (size_t)n);
      if (ids) g->pick_ids[r] = ids;
      float *mx = realloc(g->pick_max[r], sizeof(float) * (size_t)n);
      if (mx) g->pick_max[r] = mx;
      if (!ids || !mx) return gt_err_set(err, GT_ENOMEM, "sampling buffers for %d rows", n);
    }
    g->pick_cap = n;
  }
  if (gather && n > g->gather_cap) {
    float *p = realloc(g->gather, sizeof(float) * V * (size_t)n);
    if (!p) return gt_err_set(err, GT_ENOMEM, "gathered logits of %d rows", n);
    g->gather = p;
    g->gather_cap = n;
  }
  if (gather && !g->idx && !(g->idx = malloc(sizeof(int32_t) * V)))
    return gt_err_set(err, GT_ENOMEM, "sampler scratch");
  return GT_OK;
}

/* Under model_forward_sample (m->head_rows): greedy rows take the largest of the ranks' argmax
 * logits, the earliest rank on ties (= the lowest id: ranks hold ascending vocabulary ranges),
 * which is the argmax over the whole vocabulary; other rows run sampler_pick on the gathered
 * row, as the backends' sample op does on their logits. */
static int tp_forward(model_t *m, const be_batch_t *b, float *logits, gt_err_t *err) {
  tp_group_t *g = m->tp;
  const be_sample_row_t *rows = m->head_rows;
  if (b->n_out > 0 && !logits && !rows)
    return gt_err_set(err, GT_EINVAL, "logits buffer is NULL with %d outputs", b->n_out);
  int gather = 0;
  for (int i = 0; rows && i < b->n_out; i++) gather |= !model_row_greedy(&rows[i]);
  int rc = rows && b->n_out > 0 ? pick_bufs(g, b->n_out, gather, err) : GT_OK;
  fwd_arg_t a = {b, logits};
  if (!rc) rc = run_all(g, job_forward, &a, err);
  for (int i = 0; !rc && rows && i < b->n_out; i++) {
    const be_sample_row_t *q = &rows[i];
    if (model_row_greedy(q)) {
      int best = 0;
      for (int r = 1; r < g->n; r++)
        if (g->pick_max[r][i] > g->pick_max[best][i]) best = r;
      m->head_ids[i] = g->pick_ids[best][i];
    } else {
      sampler_pick_t pk = {.temperature = q->temperature, .top_k = q->top_k, .top_p = q->top_p, .min_p = q->min_p,
                           .idx = g->idx};
      m->head_ids[i] = sampler_pick(&pk, g->gather + (size_t)i * m->hp.n_vocab, m->hp.n_vocab, q->u);
    }
  }
  return rc;
}

static void group_free(tp_group_t *g) {
  if (g->n_threads) {
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_broadcast(&g->cv_job);
    pthread_mutex_unlock(&g->mu);
    for (int r = 0; r < g->n_threads; r++) pthread_join(g->th[r], NULL);
  }
  for (int r = 0; r < g->n; r++) {
    model_free(g->m[r]);
    be_destroy(g->be[r]);
  }
  be_comm_destroy(g->comm);
  for (int r = 0; r < g->n; r++) {
    free(g->pick_ids[r]);
    free(g->pick_max[r]);
  }
  free(g->gather);
  free(g->idx);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv_job);
  pthread_cond_destroy(&g->cv_done);
  free(g);
}

static void tp_model_free(model_t *m) {
  if (!m->tp) return;
  tp_be_t *tb = (tp_be_t *)m->be;
  if (tb) tb->g = NULL;
  group_free(m->tp);
  m->tp = NULL;
}

static const model_arch_t tp_arch = {.name = "tp", .load = NULL, .free = tp_model_free, .forward = tp_forward};

/* ---- the group backend: what the scheduler calls on m->be ---- */

#define TPB(be) ((tp_be_t *)(be))

static int gone(be_t *be) { return gt_err_set(&be->err, GT_EINTERNAL, "tensor-parallel group already freed"); }

static int state_op(be_t *be, int op, int a, int b) {
  tp_group_t *g = TPB(be)->g;
  if (!g) return gone(be);
  state_arg_t s = {op, a, b};
  int rc = run_all(g, job_state, &s, &be->err);
  return rc;
}
static int tpb_state_copy(be_t *be, int dst, int src) { return state_op(be, 0, dst, src); }
static int tpb_state_zero(be_t *be, int slot) { return state_op(be, 1, slot, 0); }
static int tpb_kv_block_copy(be_t *be, int dst, int src) { return state_op(be, 2, dst, src); }

static int tpb_sync(be_t *be) {
  int code = be->err.code;
  be->err.code = GT_OK;
  return code;
}

typedef struct {
  be_mem_info_t mi[TP_MAX_RANKS];
  int rc[TP_MAX_RANKS];
  gt_err_t err[TP_MAX_RANKS];
} mem_arg_t;

/* Each rank's memory, queried on its own worker (a CUDA rank's device belongs to that thread).
 * Never fails the group: a rank that cannot tell reports it in a->rc / a->err. */
static int job_mem(tp_group_t *g, int r, void *p, gt_err_t *err) {
  mem_arg_t *a = p;
  be_t *rb = g->be[r];
  a->rc[r] = rb->ops->mem_info(rb, &a->mi[r]);
  if (a->rc[r]) {
    a->err[r] = rb->err;
    rb->ops->sync(rb); /* clears the sticky error: unknown memory is not a failed rank */
  }
  return GT_OK;
}

/* CPU ranks share the host: rank 0's memory. Device ranks (one device each; the shards, and so
 * the per-rank KV bytes, are even): the smallest free and total memory among the ranks' devices,
 * times the ranks, so that the group's KV bytes (the sum over ranks, tp_kv_bytes_per_token)
 * planned against it give each rank its share of the smallest device. Ranks that all report the
 * same device (the device-local communicator) share it: its memory once. */
static int tpb_mem_info(be_t *be, be_mem_info_t *out) {
  tp_group_t *g = TPB(be)->g;
  if (!g) return gone(be);
  be_t *r0 = g->be[0];
  if (!r0->ops->mem_info) return gt_err_set(&be->err, GT_EUNSUPPORTED, "rank backend reports no memory");
  if (!strcmp(r0->ops->name, "cpu")) {
    int rc = r0->ops->mem_info(r0, out);
    if (rc) {
      gt_err_set(&be->err, rc, "%s", r0->err.msg);
      r0->ops->sync(r0);
    }
    return rc;
  }
  mem_arg_t *a = calloc(1, sizeof *a);
  if (!a) return gt_err_set(&be->err, GT_ENOMEM, "out of memory");
  int rc = run_all(g, job_mem, a, &be->err);
  int lo = 0;
  for (int r = 0; !rc && r < g->n; r++) {
    if (a->rc[r]) rc = gt_err_set(&be->err, a->rc[r], "rank %d: %s", r, a->err[r].msg);
    else if (a->mi[r].free_bytes < a->mi[lo].free_bytes) lo = r;
  }
  if (!rc) {
    uint64_t tot = a->mi[0].total_bytes;
    for (int r = 1; r < g->n; r++)
      if (a->mi[r].total_bytes < tot) tot = a->mi[r].total_bytes;
    int shared = 1; /* every rank on one device (the device-local communicator): its memory once */
    for (int r = 1; r < g->n; r++) shared &= !strcmp(a->mi[r].what, a->mi[0].what);
    *out = a->mi[lo];
    if (shared && g->n > 1) {
      snprintf(out->what, sizeof out->what, "%s (shared by %d ranks)", a->mi[lo].what, g->n);
    } else {
      out->free_bytes *= (uint64_t)g->n;
      out->total_bytes = tot * (uint64_t)g->n;
      if (g->n > 1) snprintf(out->what, sizeof out->what, "%d x %s (smallest free)", g->n, a->mi[lo].what);
    }
  }
  free(a);
  return rc;
}

static int tpb_kv_set_type(be_t *be, gt_type_t t) {
  tp_group_t *g = TPB(be)->g;
  if (!g) return gone(be);
  for (int r = 0; r < g->n; r++) {
    int rc = be_kv_set_type(g->be[r], t);
    if (rc) return rc;
  }
  return GT_OK;
}

static gt_type_t tpb_kv_type(be_t *be) {
  tp_group_t *g = TPB(be)->g;
  return g ? be_kv_type(g->be[0]) : GT_TYPE_F32;
}

static void tpb_destroy(be_t *be) { free(be); }

/* Present so that the scheduler samples through model_forward_sample (tp_forward picks across
 * the ranks); the group has no logits of its own to sample from. */
static int tpb_sample(be_t *be, const float *logits, int n_rows, int n_vocab, const be_sample_row_t *rows,
                      int32_t *ids) {
  (void)logits, (void)n_rows, (void)n_vocab, (void)rows, (void)ids;
  return gt_err_set(&be->err, GT_EUNSUPPORTED, "a tensor-parallel group samples through model_forward_sample");
}

/* ---- loading ---- */

typedef struct {
  const gguf_t *g;
  tp_backend_fn mk;
  void *ud;
  int max_tokens;
} load_arg_t;

/* Each rank creates its backend and loads its shard on its own worker (a CUDA rank then owns
 * its device context on that thread). */
static int job_load(tp_group_t *g, int r, void *p, gt_err_t *err) {
  load_arg_t *a = p;
  int rc = a->mk(a->ud, r, g->comm, &g->be[r], err);
  if (!rc && g->be[r]->n_ranks != g->n)
    rc = gt_err_set(err, GT_EINTERNAL, "backend of rank %d has %d ranks, the group %d", r, g->be[r]->n_ranks, g->n);
  if (!rc) rc = model_load(a->g, g->be[r], a->max_tokens, &g->m[r], err);
  return rc;
}

int tp_load(const gguf_t *gg, be_comm_t *comm, tp_backend_fn mk, void *ud, int max_tokens, model_t **out_model,
            be_t **out_be, gt_err_t *err) {
  const int n = comm->n_ranks;
  if (n < 1 || n > TP_MAX_RANKS) {
    be_comm_destroy(comm);
    return gt_err_set(err, GT_EINVAL, "tensor parallelism over %d ranks (1..%d)", n, TP_MAX_RANKS);
  }
  tp_group_t *g = calloc(1, sizeof *g);
  model_t *gm = calloc(1, sizeof *gm);
  tp_be_t *tb = calloc(1, sizeof *tb);
  if (!g || !gm || !tb) {
    free(g);
    free(gm);
    free(tb);
    be_comm_destroy(comm);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  g->n = n;
  g->comm = comm;
  g->fail_rank = -1;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv_job, NULL);
  pthread_cond_init(&g->cv_done, NULL);
  int rc = GT_OK;
  pthread_mutex_lock(&g->mu);
  for (int r = 0; r < n && !rc; r++) {
    if (pthread_create(&g->th[r], NULL, worker, g)) {
      rc = gt_err_set(err, GT_EINTERNAL, "cannot start the worker thread of rank %d", r);
      break;
    }
    while (g->n_threads == r) pthread_cond_wait(&g->cv_done, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  load_arg_t la = {gg, mk, ud, max_tokens};
  if (!rc) rc = run_all(g, job_load, &la, err);
  if (rc) {
    free(gm);
    free(tb);
    group_free(g);
    return rc;
  }
  const model_t *m0 = g->m[0];
  gm->arch = &tp_arch;
  gm->hp = m0->hp;
  gm->sh = m0->sh; /* rank 0's; n_ranks tells a group (no backend sampling) */
  gm->tp = g;
  gm->max_tokens = m0->max_tokens;
  gm->max_out = m0->max_out;
  gm->n_params = m0->n_params;
  for (int r = 0; r < n; r++) gm->weight_bytes += g->m[r]->weight_bytes;
  g->gm = gm;

  const be_ops_t *r0 = g->be[0]->ops;
  tb->g = g;
  tb->ops = (be_ops_t){.name = r0->name,
                       .destroy = tpb_destroy,
                       .sync = tpb_sync,
                       .state_copy = tpb_state_copy,
                       .state_zero = tpb_state_zero,
                       .kv_block_copy = tpb_kv_block_copy,
                       .mem_info = tpb_mem_info,
                       .kv_set_type = tpb_kv_set_type,
                       .sample = r0->sample ? tpb_sample : NULL,
                       .kv_type = tpb_kv_type};
  tb->base.ops = &tb->ops;
  tb->base.rank = 0;
  tb->base.n_ranks = n;
  gm->be = &tb->base;
  *out_model = gm;
  *out_be = &tb->base;
  return GT_OK;
}

int tp_cpu_backend(void *ud, int rank, be_comm_t *comm, be_t **out, gt_err_t *err) {
  return be_cpu_create_rank(ud ? *(const int *)ud : 1, rank, comm, out, err);
}

int tp_n_ranks(const tp_group_t *g) { return g->n; }
int tp_failed(const tp_group_t *g) { return g->failed.code != GT_OK; }

void tp_fail_rank_at(tp_group_t *g, int rank, long step) {
  g->fail_rank = rank;
  g->fail_in = step;
}
model_t *tp_rank_model(tp_group_t *g, int rank) { return g->m[rank]; }

size_t tp_kv_bytes_per_token(tp_group_t *g) {
  size_t s = 0;
  for (int r = 0; r < g->n; r++) s += model_kv_bytes_per_token(g->m[r]);
  return s;
}

size_t tp_state_bytes_per_slot(tp_group_t *g) {
  size_t s = 0;
  for (int r = 0; r < g->n; r++) s += model_state_bytes_per_slot(g->m[r]);
  return s;
}

int tp_cache_init(tp_group_t *g, int n_blocks, int block_tokens, int n_slots, gt_err_t *err) {
  cache_arg_t a = {n_blocks, block_tokens, n_slots};
  return run_all(g, job_cache, &a, err);
}

void tp_comm_stats(tp_group_t *g, uint64_t *calls, uint64_t *ns) {
  for (int r = 0; r < g->n; r++) {
    calls[r] = ns[r] = 0;
    if (!strcmp(g->be[r]->ops->name, "cpu")) be_cpu_comm_stats(g->be[r], &calls[r], &ns[r]);
  }
}
