/* tests/gpu/test_comm_nccl_gpu.c — the NCCL communicator used the way the engine uses it: one
 * worker thread per rank, each with its own stream, calling nccl_comm_all_reduce for its rank only
 * (no group), eagerly and captured into a CUDA graph on that stream (thread-local capture, as
 * the decode graphs are) and replayed. For N = every visible GPU (at most 8; GANTRY_TEST_TP=N
 * picks fewer), each method and dtype: rank r fills rank+1, so after one all-reduce every
 * element is S = N(N+1)/2, and each further graph replay multiplies it by N.
 * Exit 77 (skipped) with no GPU visible or no usable NCCL. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/comm_nccl.h"

#define COUNT (16 * 1024) /* elements per all-reduce: 64 KB in f32 */
#define MAXR 8

typedef struct {
  nccl_comm_t *c;
  int rank;
  void *buf;
  gt_type_t dt;
  char err[600]; /* empty: passed */
} job_t;

static float elem(const void *host, gt_type_t dt, size_t i) {
  if (dt == GT_TYPE_F32) return ((const float *)host)[i];
  uint32_t u = (uint32_t)((const uint16_t *)host)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* every element of the rank's buffer == want, else the first mismatch in j->err */
static int expect(job_t *j, cudaStream_t s, void *host, float want, const char *when) {
  size_t esz = j->dt == GT_TYPE_F32 ? 4 : 2;
  if (cudaMemcpyAsync(host, j->buf, COUNT * esz, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess) {
    snprintf(j->err, sizeof j->err, "rank %d %s: copy back failed", j->rank, when);
    return 1;
  }
  for (size_t i = 0; i < COUNT; i++)
    if (elem(host, j->dt, i) != want) {
      snprintf(j->err, sizeof j->err, "rank %d %s: element %zu is %g, want %g", j->rank, when, i, elem(host, j->dt, i),
               want);
      return 1;
    }
  return 0;
}

static int fill(job_t *j, cudaStream_t s, void *host) {
  float v = (float)(j->rank + 1);
  for (size_t i = 0; i < COUNT; i++) {
    if (j->dt == GT_TYPE_F32) ((float *)host)[i] = v;
    else {
      uint32_t u;
      memcpy(&u, &v, 4);
      ((uint16_t *)host)[i] = (uint16_t)(u >> 16);
    }
  }
  return cudaMemcpyAsync(j->buf, host, COUNT * (j->dt == GT_TYPE_F32 ? 4 : 2), cudaMemcpyHostToDevice, s) != cudaSuccess;
}

static void *rank_main(void *arg) {
  job_t *j = arg;
  const int n = nccl_comm_size(j->c);
  const float S = (float)(n * (n + 1) / 2);
  cudaStream_t s = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  gt_err_t e = {0};
  void *host = malloc(COUNT * 4);
  if (!host || cudaSetDevice(nccl_comm_device(j->c, j->rank)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    snprintf(j->err, sizeof j->err, "rank %d: setup failed", j->rank);
    goto out;
  }
  /* eager */
  if (fill(j, s, host) || nccl_comm_all_reduce(j->c, j->rank, j->buf, COUNT, j->dt, s, &e)) {
    snprintf(j->err, sizeof j->err, "rank %d eager: %s", j->rank, e.msg[0] ? e.msg : "fill failed");
    goto out;
  }
  if (expect(j, s, host, S, "eager")) goto out;
  /* captured: nothing may run during capture, so the fill comes before it */
  if (fill(j, s, host) || cudaStreamSynchronize(s) != cudaSuccess ||
      cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    snprintf(j->err, sizeof j->err, "rank %d: begin capture failed", j->rank);
    goto out;
  }
  int rc = nccl_comm_all_reduce(j->c, j->rank, j->buf, COUNT, j->dt, s, &e);
  cudaError_t ce = cudaStreamEndCapture(s, &g);
  if (rc || ce != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
    snprintf(j->err, sizeof j->err, "rank %d capture: %s%s", j->rank, e.msg, ce != cudaSuccess ? cudaGetErrorString(ce) : "");
    goto out;
  }
  if (expect(j, s, host, (float)(j->rank + 1), "after capture (nothing may have run)")) goto out;
  if (cudaGraphLaunch(ge, s) != cudaSuccess || expect(j, s, host, S, "graph replay 1")) {
    if (!j->err[0]) snprintf(j->err, sizeof j->err, "rank %d: graph launch failed", j->rank);
    goto out;
  }
  if (cudaGraphLaunch(ge, s) != cudaSuccess || expect(j, s, host, S * (float)n, "graph replay 2")) {
    if (!j->err[0]) snprintf(j->err, sizeof j->err, "rank %d: graph launch failed", j->rank);
    goto out;
  }
out:
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  if (s) cudaStreamSynchronize(s), cudaStreamDestroy(s);
  free(host);
  return NULL;
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device visible: skipped\n");
    return 77;
  }
  int n = ndev < MAXR ? ndev : MAXR;
  const char *tp = getenv("GANTRY_TEST_TP");
  if (tp && atoi(tp) >= 1 && atoi(tp) < n) n = atoi(tp);
  nccl_comm_t *c = NULL;
  gt_err_t e = {0};
  int rc = nccl_comm_init_all(NULL, n, &c, &e);
  if (rc == GT_EUNSUPPORTED) {
    printf("%s: skipped\n", e.msg);
    return 77;
  }
  if (rc) {
    printf("FAILED: init_all(%d): %s\n", n, e.msg);
    return 1;
  }
  char desc[768];
  printf("%s\n", nccl_comm_describe(c, desc, sizeof desc));
  int failed = 0;
  for (int m = NCCL_COMM_PLAIN; m <= NCCL_COMM_SYMMETRIC; m++)
    for (int d = 0; d < 2; d++) {
      gt_type_t dt = d ? GT_TYPE_BF16 : GT_TYPE_F32;
      void *bufs[MAXR] = {0};
      const char *what = d ? "bf16" : "f32";
      if (nccl_comm_buffers_alloc(c, COUNT * 4, (nccl_comm_method_t)m, bufs, &e)) {
        printf("FAILED: N=%d %s %s: buffers: %s\n", n, nccl_comm_method_name(m), what, e.msg);
        failed = 1;
        continue;
      }
      job_t jobs[MAXR];
      pthread_t th[MAXR];
      for (int r = 0; r < n; r++) {
        jobs[r] = (job_t){.c = c, .rank = r, .buf = bufs[r], .dt = dt};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
      }
      int ok = 1;
      for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        if (jobs[r].err[0]) printf("FAILED: N=%d %s %s: %s\n", n, nccl_comm_method_name(m), what, jobs[r].err), ok = 0;
      }
      if (ok) printf("ok: N=%d %s %s: eager, captured, 2 graph replays\n", n, nccl_comm_method_name(m), what);
      failed |= !ok;
      nccl_comm_buffers_free(c, bufs);
    }
  nccl_comm_destroy(c);
  return failed;
}
