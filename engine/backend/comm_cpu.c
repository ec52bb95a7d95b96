/* engine/backend/comm_cpu.c — the in-process communicator of CPU ranks (engine/backend/comm.h).
 *
 * all_reduce in three phases separated by an abortable barrier: (1) every rank publishes its
 * buffer; (2) rank r sums its slice of the elements over all ranks in rank order into the
 * shared result; (3) every rank copies the result into its buffer. A rank reads the others'
 * buffers only between barriers 1 and 2, and writes its own only after barrier 2, so no rank
 * sees a half-written buffer; the next call's phase 2 starts only after every rank has left
 * phase 3 (barrier 1 of that call). A call larger than any before grows the shared result
 * between barrier 1 and an extra barrier. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/comm.h"
#include "engine/backend/comm_barrier.h"

typedef struct {
  be_comm_t base;
  pthread_mutex_t mu;   /* guards bufs, n, cap between the barriers */
  comm_barrier_t bar;
  float *bufs[BE_COMM_MAX_RANKS]; /* phase 1: each rank's buffer */
  size_t n;             /* elements of the current call (rank 0's; all must agree) */
  float *result;        /* [cap] shared sums */
  size_t cap;
} comm_cpu_t;

/* Waits until all ranks arrived; GT_ECANCELLED once aborted. */
static int barrier(comm_cpu_t *c) { return comm_barrier_wait(&c->bar, 0, NULL) ? GT_ECANCELLED : GT_OK; }

static int cpu_all_reduce(be_comm_t *base, int rank, float *x, size_t n) {
  comm_cpu_t *c = (comm_cpu_t *)base;
  const int N = base->n_ranks;
  if (N == 1) return GT_OK;
  pthread_mutex_lock(&c->mu);
  c->bufs[rank] = x;
  if (rank == 0) c->n = n;
  const size_t cap = c->cap; /* changes only between this call's barriers 1 and 1b */
  pthread_mutex_unlock(&c->mu);
  int rc = barrier(c);
  if (rc) return rc;
  if (c->n != n) { /* model code out of step: a bug, never a silent wrong sum */
    base->ops->abort(base);
    return GT_ECANCELLED;
  }
  if (n > cap) { /* every rank sees the same cap: all take this branch (barrier 1b) */
    if (rank == 0) {
      float *p = realloc(c->result, sizeof(float) * n);
      if (p) {
        c->result = p;
        c->cap = n;
      }
    }
    if ((rc = barrier(c))) return rc;
    if (c->cap < n) { /* rank 0's realloc failed */
      base->ops->abort(base);
      return GT_ECANCELLED;
    }
  }
  const size_t per = (n + (size_t)N - 1) / (size_t)N, i0 = per * (size_t)rank < n ? per * (size_t)rank : n,
               i1 = i0 + per < n ? i0 + per : n;
  for (size_t i = i0; i < i1; i++) {
    float s = c->bufs[0][i];
    for (int r = 1; r < N; r++) s += c->bufs[r][i];
    c->result[i] = s;
  }
  if ((rc = barrier(c))) return rc;
  memcpy(x, c->result, sizeof(float) * n);
  return GT_OK;
}

static void cpu_abort(be_comm_t *base) { comm_barrier_abort(&((comm_cpu_t *)base)->bar); }

static void cpu_destroy(be_comm_t *base) {
  comm_cpu_t *c = (comm_cpu_t *)base;
  pthread_mutex_destroy(&c->mu);
  comm_barrier_destroy(&c->bar);
  free(c->result);
  free(c);
}

static const be_comm_ops_t comm_cpu_ops = {.name = "cpu", .all_reduce = cpu_all_reduce, .abort = cpu_abort,
                                           .destroy = cpu_destroy};

int be_comm_cpu_create(int n_ranks, be_comm_t **out, gt_err_t *err) {
  if (n_ranks < 1 || n_ranks > BE_COMM_MAX_RANKS)
    return gt_err_set(err, GT_EINVAL, "cpu communicator: %d ranks (1..%d)", n_ranks, BE_COMM_MAX_RANKS);
  comm_cpu_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "cpu communicator: out of memory");
  c->base.ops = &comm_cpu_ops;
  c->base.n_ranks = n_ranks;
  pthread_mutex_init(&c->mu, NULL);
  comm_barrier_init(&c->bar, n_ranks);
  *out = &c->base;
  return GT_OK;
}
