/* tests/gpu/test_comm_nccl_gpu.c — the NCCL communicator used the way the engine uses it: one
 * worker thread per rank, each with its own stream, calling nccl_comm_all_reduce for its rank only
 * (no group), eagerly and captured into a CUDA graph on that stream (thread-local capture, as
 * the decode graphs are) and replayed. For N = every visible GPU (at most 8; GANTRY_TEST_TP=N
 * picks fewer), each method and dtype: rank r fills rank+1, so after one all-reduce every
 * element is S = N(N+1)/2, and each further graph replay multiplies it by N.
 * Then nccl_comm_abort on a fresh clique: with N >= 2, ranks 0..N-2 queue an all-reduce that
 * rank N-1 never joins and wait on their streams; once all have queued, the main thread aborts,
 * and every waiting rank must be released (within 30 s) and see GT_ECANCELLED on its next call.
 * Exit 77 (skipped) with no GPU visible or no usable NCCL. */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* ---- abort: ranks waiting in a collective a peer never joins are released ---- */

typedef struct {
  nccl_comm_t *c;
  int rank;
  void *buf;
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  int *queued; /* ranks that have queued their all-reduce */
  int next_rc; /* the all_reduce after the abort */
  char err[600];
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  cudaStream_t s = NULL;
  gt_err_t e = {0};
  if (cudaSetDevice(nccl_comm_device(w->c, w->rank)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    snprintf(w->err, sizeof w->err, "rank %d: setup failed", w->rank);
  } else if (nccl_comm_all_reduce(w->c, w->rank, w->buf, COUNT, GT_TYPE_F32, s, &e)) {
    snprintf(w->err, sizeof w->err, "rank %d: all_reduce before the abort: %s", w->rank, e.msg);
  }
  pthread_mutex_lock(w->mu);
  ++*w->queued;
  pthread_cond_signal(w->cv);
  pthread_mutex_unlock(w->mu);
  if (s) {
    (void)cudaStreamSynchronize(s); /* blocks until the abort stops the collective */
    (void)cudaGetLastError();
    w->next_rc = nccl_comm_all_reduce(w->c, w->rank, w->buf, COUNT, GT_TYPE_F32, s, &e);
    cudaStreamDestroy(s);
  }
  return NULL;
}

static int test_abort(int n) {
  nccl_comm_t *c = NULL;
  gt_err_t e = {0};
  void *bufs[MAXR] = {0};
  char desc[768];
  if (nccl_comm_init_all(NULL, n, &c, &e) || nccl_comm_buffers_alloc(c, COUNT * 4, NCCL_COMM_PLAIN, bufs, &e)) {
    printf("FAILED: abort N=%d: %s\n", n, e.msg);
    nccl_comm_destroy(c);
    return 1;
  }
  const int waiters = n - 1, can_revoke = !strstr(nccl_comm_describe(c, desc, sizeof desc), "revoke unavailable");
  if (waiters == 0 || !can_revoke) {
    /* no peer to wait for (or no revoke to release one): the mark alone */
    int rc = nccl_comm_abort(c), next = nccl_comm_all_reduce(c, 0, bufs[0], COUNT, GT_TYPE_F32, NULL, &e);
    int ok = rc == (can_revoke ? GT_OK : GT_EUNSUPPORTED) && next == GT_ECANCELLED &&
             strstr(e.msg, "communicator aborted");
    printf("%s: abort N=%d: abort rc %d, next all_reduce rc %d (%s)%s\n", ok ? "ok" : "FAILED", n, rc, next, e.msg,
           can_revoke ? "" : "; libnccl without revoke: waiting ranks not tested");
    nccl_comm_destroy(c);
    return !ok;
  }
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  int queued = 0;
  waiter_t w[MAXR];
  pthread_t th[MAXR];
  for (int r = 0; r < waiters; r++) {
    w[r] = (waiter_t){.c = c, .rank = r, .buf = bufs[r], .mu = &mu, .cv = &cv, .queued = &queued, .next_rc = 1};
    pthread_create(&th[r], NULL, waiter_main, &w[r]);
  }
  pthread_mutex_lock(&mu);
  while (queued < waiters) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  int rc = nccl_comm_abort(c), failed = rc != GT_OK;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 30;
  for (int r = 0; r < waiters; r++) {
    if (pthread_timedjoin_np(th[r], NULL, &deadline)) {
      printf("FAILED: abort N=%d: rank %d still waits 30 s after nccl_comm_abort\n", n, r);
      fflush(stdout);
      _exit(1); /* the thread holds the clique: nothing can be released */
    }
    if (w[r].err[0] || w[r].next_rc != GT_ECANCELLED)
      printf("FAILED: abort N=%d rank %d: %s next rc %d\n", n, r, w[r].err, w[r].next_rc), failed = 1;
  }
  printf("%s: abort N=%d: %d waiting rank(s) released, their next all_reduce cancelled (abort rc %d)\n",
         failed ? "FAILED" : "ok", n, waiters, rc);
  nccl_comm_destroy(c);
  return failed;
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
  failed |= test_abort(n);
  return failed;
}
