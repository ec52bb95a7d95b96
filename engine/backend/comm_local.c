/* engine/backend/comm_local.c — the device-local communicator (comm_local.h): host side. */
#include "engine/backend/comm_local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "engine/backend/comm_barrier.h"
#include "kernels/allreduce_local.cuh"

#define LOCAL_CAP ((size_t)1 << 20) /* floats per stage slot: larger sums take several rounds */

typedef struct {
  be_comm_t base;
  int device;
  kc_ar_local_t k;           /* device view: stage, counters, host-mapped flags */
  int *h_flags;              /* host side of the mapped [abort, timed_out] */
  long long timeout_ns;
  comm_barrier_t bar;        /* the host rendezvous (all_reduce, step_gate) */
  void *stream[BE_COMM_MAX_RANKS];
  int bound[BE_COMM_MAX_RANKS];
  gt_err_t errs[BE_COMM_MAX_RANKS]; /* each rank's last failure (written by its own thread) */
} comm_local_t;

#define CL(c) ((comm_local_t *)(c))

static int launch_fail(comm_local_t *c, int rank, int e, const char *what) {
  return gt_err_set(&c->errs[rank], GT_EINTERNAL, "device-local all-reduce: %s: %s", what,
                    cudaGetErrorString((cudaError_t)e));
}

static int cancelled(comm_local_t *c, int rank) {
  return gt_err_set(&c->errs[rank], GT_ECANCELLED, "device-local all-reduce: communicator aborted");
}

/* Queues the rounds of x[n] on rank's stream; with rendezvous, the host threads of all ranks meet
 * between each round's copy (which announces the rank) and its wait. */
static int reduce(be_comm_t *base, int rank, float *x, size_t n, int rendezvous) {
  comm_local_t *c = CL(base);
  if (rank < 0 || rank >= base->n_ranks) return GT_EINVAL;
  if (!c->bound[rank])
    return gt_err_set(&c->errs[rank], GT_EINVAL, "device-local all-reduce: rank %d has no stream", rank);
  if (__atomic_load_n(&c->h_flags[0], __ATOMIC_ACQUIRE)) return cancelled(c, rank);
  if (base->n_ranks == 1) return GT_OK;
  cudaStream_t st = (cudaStream_t)c->stream[rank];
  for (size_t off = 0; off < n; off += LOCAL_CAP) {
    const size_t len = n - off < LOCAL_CAP ? n - off : LOCAL_CAP;
    int e = kc_ar_local_put(st, c->k, rank, x + off, len);
    if (e) return launch_fail(c, rank, e, "copy");
    if (rendezvous && comm_barrier_wait(&c->bar, 0, NULL)) return cancelled(c, rank);
    if ((e = kc_ar_local_wait(st, c->k, rank, c->timeout_ns))) return launch_fail(c, rank, e, "wait");
    if ((e = kc_ar_local_sum(st, c->k, rank, x + off, len))) return launch_fail(c, rank, e, "sum");
  }
  return GT_OK;
}

static int cl_all_reduce(be_comm_t *c, int rank, float *x, size_t n) { return reduce(c, rank, x, n, 1); }
static int cl_all_reduce_captured(be_comm_t *c, int rank, float *x, size_t n) { return reduce(c, rank, x, n, 0); }

static int cl_step_gate(be_comm_t *base, int rank, int want, int *agreed) {
  comm_local_t *c = CL(base);
  return comm_barrier_wait(&c->bar, want, agreed) ? cancelled(c, rank) : GT_OK;
}

static int cl_check(be_comm_t *base, int rank) {
  comm_local_t *c = CL(base);
  const int q = __atomic_load_n(&c->h_flags[1], __ATOMIC_ACQUIRE);
  if (!q) return GT_OK;
  return gt_err_set(&c->errs[rank], GT_EINTERNAL,
                    "device-local all-reduce: a rank waited more than %lld s for rank %d (it never arrived)",
                    c->timeout_ns / 1000000000LL, q - 1);
}

static void cl_abort(be_comm_t *base) {
  comm_local_t *c = CL(base);
  __atomic_store_n(&c->h_flags[0], 1, __ATOMIC_RELEASE); /* the device's waits see it (mapped memory) */
  comm_barrier_abort(&c->bar);
}

static void cl_destroy(be_comm_t *base) {
  comm_local_t *c = CL(base);
  int cur = 0;
  (void)cudaGetDevice(&cur);
  if (cudaSetDevice(c->device) == cudaSuccess) {
    cudaFree(c->k.stage);
    cudaFree(c->k.arrive);
    cudaFree(c->k.done);
    if (c->h_flags) cudaFreeHost(c->h_flags);
  }
  (void)cudaGetLastError();
  (void)cudaSetDevice(cur);
  comm_barrier_destroy(&c->bar);
  free(c);
}

static int cl_bind(be_comm_t *base, int rank, int device, void *stream, gt_err_t *err) {
  comm_local_t *c = CL(base);
  if (rank < 0 || rank >= base->n_ranks)
    return gt_err_set(err, GT_EINVAL, "device-local communicator: rank %d of %d", rank, base->n_ranks);
  if (device != c->device)
    return gt_err_set(err, GT_EINVAL, "device-local communicator: rank %d's backend is on cuda:%d, the ranks' GPU is cuda:%d",
                      rank, device, c->device);
  c->stream[rank] = stream;
  c->bound[rank] = 1;
  return GT_OK;
}

static const char *cl_error(be_comm_t *c, int rank) {
  return rank >= 0 && rank < c->n_ranks ? CL(c)->errs[rank].msg : "";
}

static const be_comm_ops_t local_ops = {.name = "local",
                                        .all_reduce = cl_all_reduce,
                                        .abort = cl_abort,
                                        .destroy = cl_destroy,
                                        .bind_stream = cl_bind,
                                        .error = cl_error,
                                        .step_gate = cl_step_gate,
                                        .all_reduce_captured = cl_all_reduce_captured,
                                        .check = cl_check};

int be_comm_local_create(int device, int n_ranks, be_comm_t **out, gt_err_t *err) {
  *out = NULL;
  if (n_ranks < 1 || n_ranks > KC_AR_LOCAL_MAX_RANKS || n_ranks > BE_COMM_MAX_RANKS)
    return gt_err_set(err, GT_EINVAL, "device-local communicator: %d ranks (1..%d)", n_ranks, KC_AR_LOCAL_MAX_RANKS);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); /* read when the context is created */
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || device < 0 || device >= count) {
    (void)cudaGetLastError();
    return gt_err_set(err, GT_EUNSUPPORTED, "device-local communicator: cuda:%d not present (%d visible)", device,
                      ce == cudaSuccess ? count : 0);
  }
  comm_local_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "device-local communicator: out of memory");
  c->base.ops = &local_ops;
  c->base.n_ranks = n_ranks;
  c->device = device;
  const char *to = getenv("GANTRY_LOCAL_AR_TIMEOUT_S");
  c->timeout_ns = (to && atoi(to) > 0 ? atoi(to) : 30) * 1000000000LL;
  comm_barrier_init(&c->bar, n_ranks);
  c->k.n_ranks = n_ranks;
  c->k.cap = LOCAL_CAP;
  const size_t words = (size_t)n_ranks * KC_AR_LOCAL_STRIDE * sizeof(unsigned);
  int cur = 0;
  (void)cudaGetDevice(&cur);
  int rc = GT_OK;
  if ((ce = cudaSetDevice(device)) != cudaSuccess ||
      (ce = cudaMalloc((void **)&c->k.stage, sizeof(float) * 2 * (size_t)n_ranks * LOCAL_CAP)) != cudaSuccess ||
      (ce = cudaMalloc((void **)&c->k.arrive, words)) != cudaSuccess ||
      (ce = cudaMalloc((void **)&c->k.done, words)) != cudaSuccess ||
      (ce = cudaMemset(c->k.arrive, 0, words)) != cudaSuccess || (ce = cudaMemset(c->k.done, 0, words)) != cudaSuccess ||
      (ce = cudaHostAlloc((void **)&c->h_flags, 2 * sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
      (ce = cudaHostGetDevicePointer((void **)&c->k.abort, c->h_flags, 0)) != cudaSuccess ||
      (ce = cudaDeviceSynchronize()) != cudaSuccess)
    rc = gt_err_set(err, ce == cudaErrorMemoryAllocation ? GT_ENOMEM : GT_EINTERNAL, "device-local communicator: %s",
                    cudaGetErrorString(ce));
  if (!rc) {
    c->h_flags[0] = c->h_flags[1] = 0;
    c->k.timed_out = c->k.abort + 1;
  }
  (void)cudaSetDevice(cur);
  if (rc) {
    (void)cudaGetLastError();
    cl_destroy(&c->base);
    return rc;
  }
  *out = &c->base;
  return GT_OK;
}

const char *be_comm_local_describe(be_comm_t *c, char *buf, size_t cap) {
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  snprintf(buf, cap,
           "device-local communicator: %d ranks on cuda:%d (test and measurement backend: rank-order sums on one GPU, "
           "synchronised in device memory; NCCL serves distinct GPUs), CUDA_DEVICE_MAX_CONNECTIONS=%s",
           c->n_ranks, CL(c)->device, conn ? conn : "unset");
  return buf;
}
