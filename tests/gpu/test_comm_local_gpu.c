/* tests/gpu/test_comm_local_gpu.c — the device-local communicator (engine/backend/comm_local.h) on
 * its own, N ranks = N threads on GPU 0, each with its own stream, as the engine runs them:
 * - eager all_reduce at 2 and 4 ranks, of 3000 floats and of 1M + 5 (two rounds): every rank
 *   gets exactly ((x0 + x1) + x2) + ... computed in fp32 on the host, bit for bit;
 * - a graph of three captured all-reduces per rank (after step_gate, as cu__finish_step does),
 *   replayed three times with new inputs: each replay gives the rank-order sums of its inputs
 *   (device counters and stage parity right across replays with an odd round count);
 * - abort releases a rank whose peer never arrives (its stream drains), later calls are
 *   GT_ECANCELLED; with GANTRY_LOCAL_AR_TIMEOUT_S=1 such a wait gives up and `check` names the
 *   missing rank; bind_stream refuses another device.
 * Exits 77 (skipped) without a GPU. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "engine/backend/comm_local.h"

#define MAXR 4

static float val(int r, size_t i, int salt) { return (float)(r + 1) * 0.37f + (float)(i % 977) * 1e-3f + (float)salt * 0.011f; }

/* the host's rank-order sum */
static float want(int n, size_t i, int salt) {
  float s = val(0, i, salt);
  for (int r = 1; r < n; r++) s += val(r, i, salt);
  return s;
}

typedef struct {
  be_comm_t *c;
  int rank, n, graph, bad;
  size_t count;
  char err[768];
} rk_t;

static int fill(float *d, size_t count, int r, int salt, cudaStream_t st, float *h) {
  for (size_t i = 0; i < count; i++) h[i] = val(r, i, salt);
  return cudaMemcpyAsync(d, h, sizeof(float) * count, cudaMemcpyHostToDevice, st) != cudaSuccess;
}

static int check_sums(const float *d, size_t count, int n, int salt, cudaStream_t st, float *h) {
  if (cudaMemcpyAsync(h, d, sizeof(float) * count, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
      cudaStreamSynchronize(st) != cudaSuccess)
    return 1;
  for (size_t i = 0; i < count; i++)
    if (memcmp(&h[i], &(float){want(n, i, salt)}, sizeof(float))) return 1;
  return 0;
}

static void *rank_main(void *p) {
  rk_t *a = p;
  cudaStream_t st = NULL;
  float *d[3] = {NULL}, *h = malloc(sizeof(float) * a->count);
  gt_err_t err = {0};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
#define FAIL(...) do { snprintf(a->err, sizeof a->err, __VA_ARGS__); a->bad = 1; goto out; } while (0)
  if (!h || cudaSetDevice(0) != cudaSuccess || cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
    FAIL("rank %d: stream", a->rank);
  if (a->c->ops->bind_stream(a->c, a->rank, 0, st, &err)) FAIL("rank %d: bind: %s", a->rank, err.msg);
  for (int k = 0; k < 3; k++)
    if (cudaMalloc((void **)&d[k], sizeof(float) * a->count) != cudaSuccess) FAIL("rank %d: cudaMalloc", a->rank);
  if (!a->graph) {
    for (int salt = 0; salt < 2; salt++) {
      if (fill(d[0], a->count, a->rank, salt, st, h)) FAIL("rank %d: upload", a->rank);
      if (a->c->ops->all_reduce(a->c, a->rank, d[0], a->count)) FAIL("rank %d: all_reduce: %s", a->rank, a->c->ops->error(a->c, a->rank));
      if (check_sums(d[0], a->count, a->n, salt, st, h)) FAIL("rank %d: eager sum %d wrong", a->rank, salt);
    }
    goto out;
  }
  int how = 1, agreed = -1;
  if (a->c->ops->step_gate(a->c, a->rank, how + a->rank % 2, &agreed) || agreed != 2) FAIL("rank %d: gate agreed %d", a->rank, agreed);
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) FAIL("rank %d: capture", a->rank);
  for (int k = 0; k < 3; k++) a->c->ops->all_reduce_captured(a->c, a->rank, d[k], a->count);
  if (cudaStreamEndCapture(st, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    FAIL("rank %d: end capture / instantiate", a->rank);
  for (int rep = 0; rep < 3; rep++) {
    for (int k = 0; k < 3; k++)
      if (fill(d[k], a->count, a->rank, 10 * rep + k, st, h)) FAIL("rank %d: upload", a->rank);
    int z = 0;
    if (cudaStreamSynchronize(st) != cudaSuccess || a->c->ops->step_gate(a->c, a->rank, 0, &z) ||
        cudaGraphLaunch(exec, st) != cudaSuccess || a->c->ops->step_gate(a->c, a->rank, 0, &z))
      FAIL("rank %d: replay %d", a->rank, rep);
    for (int k = 0; k < 3; k++)
      if (check_sums(d[k], a->count, a->n, 10 * rep + k, st, h)) FAIL("rank %d: replay %d buffer %d wrong", a->rank, rep, k);
    if (a->c->ops->check(a->c, a->rank)) FAIL("rank %d: check: %s", a->rank, a->c->ops->error(a->c, a->rank));
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  for (int k = 0; k < 3; k++) cudaFree(d[k]);
  if (st) cudaStreamDestroy(st);
  free(h);
  return NULL;
#undef FAIL
}

static void run_ranks(int n, size_t count, int graph) {
  gt_err_t err = {0};
  be_comm_t *c;
  if (be_comm_local_create(0, n, &c, &err)) fail_msg("be_comm_local_create: %s", err.msg);
  rk_t a[MAXR];
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) {
    a[r] = (rk_t){.c = c, .rank = r, .n = n, .graph = graph, .count = count};
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    if (a[r].bad) print_message("%s\n", a[r].err);
    bad |= a[r].bad;
  }
  print_message("%d ranks, %zu floats, %s: %s\n", n, count, graph ? "3 captured all-reduces x 3 replays" : "eager x 2",
                bad ? "FAILED" : "exact rank-order sums on every rank");
  be_comm_destroy(c);
  assert_int_equal(bad, 0);
}

static void test_eager(void **st) {
  run_ranks(2, 3000, 0);
  run_ranks(4, 3000, 0);
  run_ranks(4, ((size_t)1 << 20) + 5, 0); /* two rounds */
}

static void test_graph(void **st) {
  run_ranks(2, 4096, 1);
  run_ranks(4, 8192, 1);
}

/* rank 0 alone queues a sum whose peer never comes */
static void lone_rank(be_comm_t *c, cudaStream_t s, float *d, int abort_it) {
  gt_err_t err = {0};
  assert_int_equal(c->ops->bind_stream(c, 0, 0, s, &err), 0);
  assert_int_equal(c->ops->all_reduce_captured(c, 0, d, 256), 0);
  if (abort_it) c->ops->abort(c);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess); /* released: by the abort, or by the timeout */
}

static void test_abort_and_timeout(void **st) {
  gt_err_t err = {0};
  be_comm_t *c;
  cudaStream_t s;
  float *d;
  assert_int_equal(cudaSetDevice(0), cudaSuccess);
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d, 1024), cudaSuccess);
  assert_int_equal(be_comm_local_create(0, 2, &c, &err), 0);
  assert_int_not_equal(c->ops->bind_stream(c, 1, 1, s, &err), 0);
  assert_non_null(strstr(err.msg, "rank 1's backend is on cuda:1, the ranks' GPU is cuda:0"));
  lone_rank(c, s, d, 1);
  assert_int_equal(c->ops->all_reduce(c, 0, d, 256), GT_ECANCELLED);
  int z;
  assert_int_equal(c->ops->step_gate(c, 0, 0, &z), GT_ECANCELLED);
  be_comm_destroy(c);
  setenv("GANTRY_LOCAL_AR_TIMEOUT_S", "1", 1);
  assert_int_equal(be_comm_local_create(0, 2, &c, &err), 0);
  unsetenv("GANTRY_LOCAL_AR_TIMEOUT_S");
  lone_rank(c, s, d, 0);
  assert_int_not_equal(c->ops->check(c, 0), 0);
  print_message("timeout: %s\n", c->ops->error(c, 0));
  assert_non_null(strstr(c->ops->error(c, 0), "waited more than 1 s for rank 1"));
  be_comm_destroy(c);
  cudaFree(d);
  cudaStreamDestroy(s);
}

int main(void) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1); /* before the context: each rank's stream its own queue */
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("no CUDA device visible: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_eager), cmocka_unit_test(test_graph),
                                     cmocka_unit_test(test_abort_and_timeout)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
