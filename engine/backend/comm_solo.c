/* engine/backend/comm_solo.c — the timing-only communicator of one rank run alone (comm.h,
 * be_comm_solo_create): no rank waits for another, no sum is made. */
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/backend/comm.h"

typedef struct {
  be_comm_t base;
  atomic_long calls;
} comm_solo_t;

static int solo_all_reduce(be_comm_t *c, int rank, float *x, size_t n) {
  (void)rank, (void)x, (void)n;
  atomic_fetch_add(&((comm_solo_t *)c)->calls, 1);
  return GT_OK;
}
static void solo_abort(be_comm_t *c) { (void)c; }
static void solo_destroy(be_comm_t *c) { free(c); }
static int solo_bind(be_comm_t *c, int rank, int device, void *stream, gt_err_t *err) {
  return rank < 0 || rank >= c->n_ranks ? gt_err_set(err, GT_EINVAL, "solo communicator: rank %d of %d", rank, c->n_ranks)
                                        : GT_OK;
}

static const be_comm_ops_t solo_ops = {.name = "solo", .all_reduce = solo_all_reduce, .abort = solo_abort,
                                       .destroy = solo_destroy, .bind_stream = solo_bind};

int be_comm_solo_create(int n_ranks, be_comm_t **out, gt_err_t *err) {
  *out = NULL;
  if (n_ranks < 1 || n_ranks > BE_COMM_MAX_RANKS)
    return gt_err_set(err, GT_EINVAL, "solo communicator: %d ranks (1..%d)", n_ranks, BE_COMM_MAX_RANKS);
  comm_solo_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "solo communicator: out of memory");
  c->base.ops = &solo_ops;
  c->base.n_ranks = n_ranks;
  atomic_init(&c->calls, 0);
  *out = &c->base;
  return GT_OK;
}

long be_comm_solo_calls(be_comm_t *c) {
  return c && c->ops == &solo_ops ? atomic_load(&((comm_solo_t *)c)->calls) : 0;
}
