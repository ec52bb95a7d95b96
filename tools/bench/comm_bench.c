/* tools/bench/comm_bench.c — all-reduce latency of the NCCL communicator (engine/backend/comm_nccl.h)
 * for each clique size N, method (plain cudaMalloc buffers, symmetric ncclMemAlloc + window),
 * dtype (f32, bf16) and message size, eager and replayed from a CUDA graph:
 *   bench_comm [--tp 1,2,4] [--min 4096] [--max 4194304] [--iters 200] [--warmup 20]
 *              [--methods plain,symmetric] [--dtypes f32,bf16]
 * Default --tp: 1..(visible GPUs). Sizes: powers of two from --min to --max bytes.
 * Timing: every iteration records an event on each rank's stream, queues the all-reduce on all
 * ranks (one thread, ncclGroupStart/End; graph mode: cudaGraphLaunch of each rank's graph holding
 * the one captured all-reduce), records a second event and waits; the iteration's time is the
 * largest elapsed time over the ranks (host launch included). Prints median and p99 in us.
 * Check: before each timed series, every rank fills its buffer with rank+1 and one all-reduce
 * (eager, then the graph) must leave N(N+1)/2 in every element of every rank.
 * Exit: 0 all checks passed; 1 a check or a CUDA / NCCL call failed; 2 bad arguments;
 * 77 skipped (no GPU visible, built without NCCL, or libnccl not loadable; the reason is printed). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/comm_nccl.h"

#define MAXR 16
#define SKIP 77

typedef struct {
  int tp[MAXR], n_tp;
  size_t min, max;
  int iters, warmup;
  int methods[2], n_methods;
  gt_type_t dtypes[2];
  int n_dtypes;
} opts_t;

typedef struct {
  nccl_comm_t *c;
  int n;
  cudaStream_t s[MAXR];
  cudaEvent_t e0[MAXR], e1[MAXR];
} clique_t;

#define CK(call)                                                                                 \
  do {                                                                                           \
    cudaError_t ce_ = (call);                                                                    \
    if (ce_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "bench_comm: %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(ce_)); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

static int usage(void) {
  fprintf(stderr, "usage: bench_comm [--tp 1,2,4] [--min BYTES] [--max BYTES] [--iters N] [--warmup N]\n"
                  "                  [--methods plain,symmetric] [--dtypes f32,bf16]\n");
  return 2;
}

/* "a,b" over the two names -> indexes into out[2]; the count, or -1 on an unknown or repeated name */
static int parse_names(const char *v, const char *const names[2], int out[2]) {
  int n = 0;
  for (const char *p = v;;) {
    size_t len = strcspn(p, ",");
    int k = len == strlen(names[0]) && !strncmp(p, names[0], len) ? 0
            : len == strlen(names[1]) && !strncmp(p, names[1], len) ? 1 : -1;
    if (k < 0 || n == 2 || (n == 1 && out[0] == k)) return -1;
    out[n++] = k;
    if (!p[len]) return n;
    p += len + 1;
  }
}

static int parse_args(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.min = 4096, .max = 4u << 20, .iters = 200, .warmup = 20, .methods = {NCCL_COMM_PLAIN, NCCL_COMM_SYMMETRIC},
                .n_methods = 2, .dtypes = {GT_TYPE_F32, GT_TYPE_BF16}, .n_dtypes = 2};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return usage();
    const char *k = argv[i], *v = argv[i + 1];
    char *end;
    if (!strcmp(k, "--tp")) {
      o->n_tp = 0;
      for (const char *p = v; *p;) {
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > MAXR || o->n_tp == MAXR || (*end && *end != ',')) return usage();
        o->tp[o->n_tp++] = (int)t;
        p = *end ? end + 1 : end;
      }
    } else if (!strcmp(k, "--min") || !strcmp(k, "--max")) {
      unsigned long long b = strtoull(v, &end, 10);
      if (*end || b < 4 || b > (1ull << 32) || (b & (b - 1))) return usage(); /* a power of two */
      *(!strcmp(k, "--min") ? &o->min : &o->max) = (size_t)b;
    } else if (!strcmp(k, "--iters") || !strcmp(k, "--warmup")) {
      long n = strtol(v, &end, 10);
      if (*end || n < (!strcmp(k, "--iters") ? 1 : 0) || n > 1000000) return usage();
      *(!strcmp(k, "--iters") ? &o->iters : &o->warmup) = (int)n;
    } else if (!strcmp(k, "--methods")) {
      static const char *const names[] = {"plain", "symmetric"}; /* indexed by nccl_comm_method_t */
      if ((o->n_methods = parse_names(v, names, o->methods)) < 0) return usage();
    } else if (!strcmp(k, "--dtypes")) {
      static const char *const names[] = {"f32", "bf16"};
      int d[2];
      if ((o->n_dtypes = parse_names(v, names, d)) < 0) return usage();
      for (int j = 0; j < o->n_dtypes; j++) o->dtypes[j] = d[j] ? GT_TYPE_BF16 : GT_TYPE_F32;
    } else {
      return usage();
    }
  }
  if (o->min > o->max || o->n_methods == 0 || o->n_dtypes == 0) return usage();
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* bf16 <-> float for the small integers the check uses (exact: truncation loses nothing) */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Every rank's first `count` elements := rank + 1. host: scratch of count * 4 bytes. */
static int fill(clique_t *q, void **ptrs, size_t count, gt_type_t dt, void *host) {
  for (int r = 0; r < q->n; r++) {
    for (size_t i = 0; i < count; i++) {
      if (dt == GT_TYPE_F32) ((float *)host)[i] = (float)(r + 1);
      else ((uint16_t *)host)[i] = to_bf16((float)(r + 1));
    }
    CK(cudaMemcpy(ptrs[r], host, count * (dt == GT_TYPE_F32 ? 4 : 2), cudaMemcpyHostToDevice));
  }
  return 0;
}

/* 0 when every element of every rank is N(N+1)/2; else prints the first mismatch and returns 1 */
static int check(clique_t *q, void **ptrs, size_t count, gt_type_t dt, void *host, const char *what) {
  const float want = (float)(q->n * (q->n + 1) / 2);
  for (int r = 0; r < q->n; r++) {
    CK(cudaMemcpy(host, ptrs[r], count * (dt == GT_TYPE_F32 ? 4 : 2), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) {
      float got = dt == GT_TYPE_F32 ? ((float *)host)[i] : from_bf16(((uint16_t *)host)[i]);
      if (got != want) {
        fprintf(stderr, "bench_comm: CHECK FAILED (%s): N=%d rank %d element %zu of %zu: %g, want %g\n", what, q->n, r, i,
                count, got, want);
        return 1;
      }
    }
  }
  return 0;
}

/* one all-reduce on every rank (eager, one thread, grouped) */
static int all_reduce_all(clique_t *q, void **ptrs, size_t count, gt_type_t dt) {
  gt_err_t err = {0};
  int rc = nccl_comm_group_start(&err);
  for (int r = 0; r < q->n && !rc; r++) rc = nccl_comm_all_reduce(q->c, r, ptrs[r], count, dt, q->s[r], &err);
  int rc2 = nccl_comm_group_end(rc ? NULL : &err);
  if (rc || rc2) fprintf(stderr, "bench_comm: all-reduce: %s\n", err.msg);
  return rc || rc2;
}

/* iters timed iterations after warmup ones; graphs: NULL = eager. times[iters] in us. */
static int time_series(clique_t *q, void **ptrs, size_t count, gt_type_t dt, cudaGraphExec_t *graphs,
                       const opts_t *o, double *times) {
  for (int it = 0; it < o->warmup + o->iters; it++) {
    for (int r = 0; r < q->n; r++) CK(cudaEventRecord(q->e0[r], q->s[r]));
    if (graphs) {
      for (int r = 0; r < q->n; r++) CK(cudaGraphLaunch(graphs[r], q->s[r]));
    } else if (all_reduce_all(q, ptrs, count, dt)) {
      return 1;
    }
    for (int r = 0; r < q->n; r++) CK(cudaEventRecord(q->e1[r], q->s[r]));
    double worst = 0;
    for (int r = 0; r < q->n; r++) {
      float ms = 0;
      CK(cudaEventSynchronize(q->e1[r]));
      CK(cudaEventElapsedTime(&ms, q->e0[r], q->e1[r]));
      worst = ms > worst ? ms : worst;
    }
    if (it >= o->warmup) times[it - o->warmup] = worst * 1e3;
  }
  qsort(times, (size_t)o->iters, sizeof *times, cmp_double);
  return 0;
}

/* captures one all-reduce per rank into graphs[r] (each rank's stream, thread-local capture mode
 * like the engine's decode graphs) */
static int capture(clique_t *q, void **ptrs, size_t count, gt_type_t dt, cudaGraphExec_t *graphs) {
  cudaGraph_t g[MAXR] = {0};
  for (int r = 0; r < q->n; r++) {
    CK(cudaSetDevice(nccl_comm_device(q->c, r)));
    CK(cudaStreamBeginCapture(q->s[r], cudaStreamCaptureModeThreadLocal));
  }
  int rc = all_reduce_all(q, ptrs, count, dt);
  for (int r = 0; r < q->n; r++) {
    CK(cudaSetDevice(nccl_comm_device(q->c, r)));
    cudaError_t ce = cudaStreamEndCapture(q->s[r], &g[r]);
    if (ce == cudaSuccess && !rc) ce = cudaGraphInstantiate(&graphs[r], g[r], 0);
    if (g[r]) (void)cudaGraphDestroy(g[r]);
    if (ce != cudaSuccess) {
      fprintf(stderr, "bench_comm: graph capture of the all-reduce (rank %d): %s\n", r, cudaGetErrorString(ce));
      rc = 1;
    }
  }
  return rc;
}

static double pct(const double *sorted, int n, double p) {
  int i = (int)ceil(p * n) - 1;
  return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* one method on one clique: every dtype and size; prints table rows. Returns 1 on a failure. */
static int run_method(clique_t *q, nccl_comm_method_t m, const opts_t *o, double *times, void *host) {
  void *ptrs[MAXR] = {0};
  gt_err_t err = {0};
  int rc = nccl_comm_buffers_alloc(q->c, o->max, m, ptrs, &err);
  if (rc) {
    printf("| %d | %s | | | unavailable: %s | | | | |\n", q->n, nccl_comm_method_name(m), err.msg);
    fflush(stdout);
    return 1;
  }
  int fail = 0;
  for (int d = 0; d < o->n_dtypes && !fail; d++) {
    gt_type_t dt = o->dtypes[d];
    size_t esz = dt == GT_TYPE_F32 ? 4 : 2;
    for (size_t bytes = o->min; bytes <= o->max && !fail; bytes *= 2) {
      size_t count = bytes / esz;
      double em, ep, gm = NAN, gp = NAN;
      cudaGraphExec_t graphs[MAXR] = {0};
      fail = fill(q, ptrs, count, dt, host) || all_reduce_all(q, ptrs, count, dt);
      for (int r = 0; r < q->n && !fail; r++) fail = cudaStreamSynchronize(q->s[r]) != cudaSuccess;
      fail = fail || check(q, ptrs, count, dt, host, "eager") || time_series(q, ptrs, count, dt, NULL, o, times);
      if (fail) break;
      em = pct(times, o->iters, 0.5), ep = pct(times, o->iters, 0.99);
      fail = capture(q, ptrs, count, dt, graphs) || fill(q, ptrs, count, dt, host);
      for (int r = 0; r < q->n && !fail; r++)
        fail = cudaGraphLaunch(graphs[r], q->s[r]) != cudaSuccess;
      for (int r = 0; r < q->n && !fail; r++) fail = cudaStreamSynchronize(q->s[r]) != cudaSuccess;
      fail = fail || check(q, ptrs, count, dt, host, "graph") || time_series(q, ptrs, count, dt, graphs, o, times);
      if (!fail) gm = pct(times, o->iters, 0.5), gp = pct(times, o->iters, 0.99);
      for (int r = 0; r < q->n; r++)
        if (graphs[r]) (void)cudaGraphExecDestroy(graphs[r]);
      printf("| %d | %s | %s | %zu | %.1f | %.1f | %.1f | %.1f | %s |\n", q->n, nccl_comm_method_name(m),
             dt == GT_TYPE_F32 ? "f32" : "bf16", bytes, em, ep, gm, gp, fail ? "FAILED" : "ok");
      fflush(stdout);
    }
  }
  for (int r = 0; r < q->n; r++) (void)cudaStreamSynchronize(q->s[r]);
  nccl_comm_buffers_free(q->c, ptrs);
  return fail;
}

static void clique_close(clique_t *q) {
  for (int r = 0; r < q->n; r++) {
    if (q->e0[r]) cudaEventDestroy(q->e0[r]);
    if (q->e1[r]) cudaEventDestroy(q->e1[r]);
    if (q->s[r]) cudaStreamDestroy(q->s[r]);
  }
  nccl_comm_destroy(q->c);
  q->c = NULL;
}

/* 0 ok, 1 failure, SKIP when NCCL is missing */
static int run_clique(int n, const opts_t *o, double *times, void *host) {
  clique_t q = {.n = n};
  gt_err_t err = {0};
  int rc = nccl_comm_init_all(NULL, n, &q.c, &err);
  if (rc) {
    fprintf(stderr, "bench_comm: N=%d: %s\n", n, err.msg);
    return rc == GT_EUNSUPPORTED ? SKIP : 1;
  }
  char desc[768];
  printf("\nN=%d: %s\n\n| N | method | dtype | bytes | eager median us | eager p99 us | graph median us | graph p99 us "
         "| check |\n|---|---|---|---|---|---|---|---|---|\n",
         n, nccl_comm_describe(q.c, desc, sizeof desc));
  fflush(stdout);
  int fail = 0;
  for (int r = 0; r < n && !fail; r++) {
    fail = cudaSetDevice(nccl_comm_device(q.c, r)) != cudaSuccess ||
           cudaStreamCreateWithFlags(&q.s[r], cudaStreamNonBlocking) != cudaSuccess ||
           cudaEventCreate(&q.e0[r]) != cudaSuccess || cudaEventCreate(&q.e1[r]) != cudaSuccess;
    if (fail) fprintf(stderr, "bench_comm: streams / events on rank %d failed\n", r);
  }
  for (int i = 0; i < o->n_methods && !fail; i++) fail |= run_method(&q, (nccl_comm_method_t)o->methods[i], o, times, host);
  clique_close(&q);
  return fail;
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse_args(argc, argv, &o)) return 2;
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0) {
    printf("bench_comm: no CUDA device visible (%s): skipped\n", ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    return SKIP;
  }
  if (!o.n_tp)
    for (int n = 1; n <= ndev && n <= MAXR; n++) o.tp[o.n_tp++] = n;
  for (int i = 0; i < o.n_tp; i++)
    if (o.tp[i] > ndev) {
      fprintf(stderr, "bench_comm: --tp %d but %d GPU%s visible\n", o.tp[i], ndev, ndev == 1 ? "" : "s");
      return 2;
    }
  double *times = malloc(sizeof(double) * (size_t)o.iters);
  void *host = malloc(o.max);
  if (!times || !host) return free(times), free(host), 1;
  printf("bench_comm: %d GPU%s visible; sizes %zu..%zu bytes; %d iterations (+%d warm-up); time = max over ranks of "
         "the stream time from before the launch to after the all-reduce\n",
         ndev, ndev == 1 ? "" : "s", o.min, o.max, o.iters, o.warmup);
  int rc = 0;
  for (int i = 0; i < o.n_tp; i++) {
    int r = run_clique(o.tp[i], &o, times, host);
    if (r == SKIP) {
      printf("bench_comm: NCCL unavailable: skipped\n");
      rc = i == 0 ? SKIP : 1;
      break;
    }
    rc |= r;
  }
  free(times);
  free(host);
  if (rc == 1) fprintf(stderr, "bench_comm: FAILED (see above)\n");
  return rc;
}
