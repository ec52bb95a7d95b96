/* engine/backend/comm.h — the communicator the ranks of one tensor-parallel group share.
 *
 * A backend gets its communicator at creation (be_cpu_create_rank with the CPU one;
 * be_cuda_create_rank with the NCCL one, be_comm_nccl_create in engine/backend/comm_nccl.h) and
 * its all_reduce op goes through it. One
 * communicator serves n_ranks ranks, each calling from its own worker thread; every rank makes
 * the same collective calls in the same order (same step, same model code).
 *
 * Contract of every implementation
 * - all_reduce(c, rank, x, n): x[n] (the rank's backend memory, fp32) becomes the sum over all
 *   ranks of their x[n]; every rank gets bit-identical values, and the same inputs give the same
 *   result on every call (a fixed summation order). Blocks until every rank has contributed.
 *   GT_OK, or GT_ECANCELLED once the communicator was aborted (then x is unspecified).
 * - abort(c): any thread; every rank waiting in a collective (now or later) returns
 *   GT_ECANCELLED. A rank that fails calls it so that the others never wait for it forever.
 * - destroy(c): after every rank has stopped using it.
 * - bind_stream (NULL for host communicators): a device communicator queues rank's collectives
 *   on the stream of the rank's backend, given here once when that backend is created
 *   (be_cuda_create_rank); device is the rank's CUDA ordinal, checked against the
 *   communicator's. all_reduce then only queues (the result is ready when the stream reaches
 *   it) and may be captured into a CUDA graph of that stream.
 * - error (NULL: none kept): the message of rank's last failed call, "" if none.
 * - step_gate, all_reduce_captured, check (NULL except in the device-local communicator, whose
 *   ranks share one GPU: engine/backend/comm_local.h, engine/TP.md "Ranks sharing one GPU"):
 *   step_gate(c, rank, want, &agreed) is a rendezvous of every rank's host thread that also agrees
 *   on a value (each rank brings `want`, all leave with the largest): the CUDA backend agrees there
 *   on how a recorded decode step runs, so that every rank runs it the same way.
 *   all_reduce_captured queues the same sum without the host rendezvous that all_reduce makes per
 *   call: only while capturing a decode graph after such an agreement. check(c, rank), after the
 *   rank's stream drained: GT_OK, or the failure the device reported (message in error). */
#ifndef GANTRY_ENGINE_COMM_H
#define GANTRY_ENGINE_COMM_H

#include <stddef.h>

#include "common/err.h"

typedef struct be_comm be_comm_t;

typedef struct be_comm_ops {
  const char *name; /* "cpu", "nccl", "local", "solo" */
  int (*all_reduce)(be_comm_t *c, int rank, float *x, size_t n);
  void (*abort)(be_comm_t *c);
  void (*destroy)(be_comm_t *c);
  int (*bind_stream)(be_comm_t *c, int rank, int device, void *stream, gt_err_t *err);
  const char *(*error)(be_comm_t *c, int rank);
  int (*step_gate)(be_comm_t *c, int rank, int want, int *agreed);
  int (*all_reduce_captured)(be_comm_t *c, int rank, float *x, size_t n);
  int (*check)(be_comm_t *c, int rank);
} be_comm_ops_t;

struct be_comm {
  const be_comm_ops_t *ops;
  int n_ranks;
};

/* In-process communicator for n_ranks (1..BE_COMM_MAX_RANKS) CPU ranks (threads of one
 * process, host memory): the sum of element i is ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank
 * order, each rank computing 1/n of the elements, then every rank copies the whole result. */
#define BE_COMM_MAX_RANKS 64
int be_comm_cpu_create(int n_ranks, be_comm_t **out, gt_err_t *err);

/* Timing only: rank `rank` of an n_ranks-way group run alone (gantry's TP prediction, bench_decode
 * --solo N): all_reduce leaves x as it is (no sum: the results are wrong) and counts the calls,
 * bind_stream accepts any stream, so one CUDA backend runs exactly one rank's share of the work.
 * be_comm_solo_calls: the all_reduce calls so far. */
int be_comm_solo_create(int n_ranks, be_comm_t **out, gt_err_t *err);
long be_comm_solo_calls(be_comm_t *c);

static inline void be_comm_destroy(be_comm_t *c) {
  if (c) c->ops->destroy(c);
}

#endif
