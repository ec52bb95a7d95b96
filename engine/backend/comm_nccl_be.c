/* engine/backend/comm_nccl_be.c — the NCCL clique (comm_nccl.h) as the engine's communicator
 * (comm.h): what the CUDA ranks of a tensor-parallel group all-reduce through. Plain C over the
 * comm_nccl API; builds without NCCL get its "built without NCCL" error from be_comm_nccl_create. */
#include "engine/backend/comm_nccl.h"

#include <stdlib.h>

typedef struct {
  be_comm_t base;
  nccl_comm_t *nc;
  void *stream[BE_COMM_MAX_RANKS]; /* bound by each rank's backend (bind_stream) */
  int bound[BE_COMM_MAX_RANKS];
  gt_err_t errs[BE_COMM_MAX_RANKS]; /* each rank's last failure (written by its own thread) */
} nccl_be_comm_t;

#define NB(c) ((nccl_be_comm_t *)(c))

static int nb_all_reduce(be_comm_t *c, int rank, float *x, size_t n) {
  nccl_be_comm_t *b = NB(c);
  if (rank < 0 || rank >= c->n_ranks) return GT_EINVAL;
  if (!b->bound[rank])
    return gt_err_set(&b->errs[rank], GT_EINVAL, "nccl: rank %d has no stream (its backend did not bind one)", rank);
  return nccl_comm_all_reduce(b->nc, rank, x, n, GT_TYPE_F32, b->stream[rank], &b->errs[rank]);
}

static void nb_abort(be_comm_t *c) { (void)nccl_comm_abort(NB(c)->nc); }

static void nb_destroy(be_comm_t *c) {
  nccl_comm_destroy(NB(c)->nc);
  free(c);
}

static int nb_bind_stream(be_comm_t *c, int rank, int device, void *stream, gt_err_t *err) {
  nccl_be_comm_t *b = NB(c);
  if (rank < 0 || rank >= c->n_ranks)
    return gt_err_set(err, GT_EINVAL, "nccl: rank %d of %d", rank, c->n_ranks);
  const int want = nccl_comm_device(b->nc, rank);
  if (device != want)
    return gt_err_set(err, GT_EINVAL, "nccl: rank %d lives on cuda:%d, its backend is on cuda:%d", rank, want, device);
  b->stream[rank] = stream;
  b->bound[rank] = 1;
  return GT_OK;
}

static const char *nb_error(be_comm_t *c, int rank) {
  return rank >= 0 && rank < c->n_ranks ? NB(c)->errs[rank].msg : "";
}

static const be_comm_ops_t nccl_be_ops = {.name = "nccl",
                                          .all_reduce = nb_all_reduce,
                                          .abort = nb_abort,
                                          .destroy = nb_destroy,
                                          .bind_stream = nb_bind_stream,
                                          .error = nb_error};

int be_comm_nccl_create(const int *devices, int n, be_comm_t **out, gt_err_t *err) {
  *out = NULL;
  if (n < 1 || n > BE_COMM_MAX_RANKS) return gt_err_set(err, GT_EINVAL, "nccl: %d ranks (1..%d)", n, BE_COMM_MAX_RANKS);
  nccl_be_comm_t *b = calloc(1, sizeof *b);
  if (!b) return gt_err_set(err, GT_ENOMEM, "nccl: out of memory");
  int rc = nccl_comm_init_all(devices, n, &b->nc, err);
  if (rc) {
    free(b);
    return rc;
  }
  b->base.ops = &nccl_be_ops;
  b->base.n_ranks = n;
  *out = &b->base;
  return GT_OK;
}

nccl_comm_t *be_comm_nccl(be_comm_t *c) { return c && c->ops == &nccl_be_ops ? NB(c)->nc : NULL; }
