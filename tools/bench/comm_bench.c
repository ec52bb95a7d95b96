/* tools/bench/comm_bench.c — all-reduce latency of the NCCL communicator (engine/backend/comm_nccl.h)
 * for each clique size N, method (plain cudaMalloc buffers, symmetric ncclMemAlloc + window),
 * dtype (f32, bf16) and message size, eager and replayed from a CUDA graph:
 *   bench_comm [--tp 1,2,4] [--min 4096] [--max 4194304] [--iters 200] [--warmup 20]
 *              [--methods plain,symmetric] [--dtypes f32,bf16]
 * Default --tp: 1..(visible GPUs). Sizes: powers of two from --min to --max bytes.
 * Ranks run as the engine runs them: one thread per rank, each queuing its own all-reduce on its
 * own stream (graph mode: each thread captures its all-reduce into a graph in thread-local mode
 * and replays it). Timing: every iteration, the rank threads meet at a barrier, record an event,
 * queue the all-reduce (or cudaGraphLaunch), record a second event and wait for it; the
 * iteration's time is the largest elapsed time over the ranks (host launch included). Prints
 * median and p99 in us, and "in graph": a graph of CHAIN all-reduces back to back timed the same
 * way, divided by CHAIN: the cost of one all-reduce inside a decode graph, without the launch.
 * Check: before each timed series every rank fills its buffer with rank+1, and one all-reduce
 * (eager; then one graph replay) must leave N(N+1)/2 in every element of every rank.
 * Exit: 0 all checks passed; 1 a check or a CUDA / NCCL call failed (a rank failing inside a
 * collective can leave its peers waiting: run under a timeout, as scripts/gpu/tp.sh does); 2 bad
 * arguments; 77 skipped (no GPU visible, built without NCCL, or libnccl not loadable; the reason
 * is printed). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/comm_nccl.h"
#include "format/dtype.h"

#define MAXR 16
#define SKIP 77
#define CHAIN 16 /* all-reduces in the "in graph" graph */

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

/* one rank's part of one series (a method, dtype and size): filled by rank_series */
typedef struct {
  clique_t *q;
  int rank;
  void *buf;
  size_t count;
  gt_type_t dt;
  const opts_t *o;
  pthread_barrier_t *bar;
  double *eager, *graph, *chain; /* [o->iters] ms of this rank (chain: CHAIN all-reduces) */
  int bad;               /* a check failed (the series still runs to the end on every rank) */
  char err[600];         /* a CUDA / NCCL call failed */
} series_t;

#define RK(call)                                                                                       \
  do {                                                                                                 \
    cudaError_t ce_ = (call);                                                                          \
    if (ce_ != cudaSuccess) {                                                                          \
      snprintf(s->err, sizeof s->err, "rank %d: %s: %s", s->rank, #call, cudaGetErrorString(ce_));     \
      goto out;                                                                                        \
    }                                                                                                  \
  } while (0)

static size_t esize(gt_type_t dt) { return dt == GT_TYPE_F32 ? 4 : 2; }

/* host[0..count) := rank + 1 in dt */
static void host_fill(void *host, size_t count, gt_type_t dt, int rank) {
  for (size_t i = 0; i < count; i++) {
    if (dt == GT_TYPE_F32) ((float *)host)[i] = (float)(rank + 1);
    else ((uint16_t *)host)[i] = dt_f32_to_bf16((float)(rank + 1));
  }
}

/* 0 when every element is N(N+1)/2; else prints the first mismatch and returns 1 */
static int host_check(const series_t *s, const void *host, const char *what) {
  const int n = s->q->n;
  const float want = (float)(n * (n + 1) / 2);
  for (size_t i = 0; i < s->count; i++) {
    float got = s->dt == GT_TYPE_F32 ? ((const float *)host)[i] : dt_bf16_to_f32(((const uint16_t *)host)[i]);
    if (got != want) {
      fprintf(stderr, "bench_comm: CHECK FAILED (%s): N=%d rank %d element %zu of %zu: %g, want %g\n", what, n, s->rank,
              i, s->count, got, want);
      return 1;
    }
  }
  return 0;
}

/* timed iterations of eager all-reduces (ge NULL) or graph replays into times[] (ms) */
static int timed(series_t *s, cudaStream_t st, cudaGraphExec_t ge, double *times) {
  clique_t *q = s->q;
  gt_err_t e = {0};
  for (int it = 0; it < s->o->warmup + s->o->iters; it++) {
    pthread_barrier_wait(s->bar);
    RK(cudaEventRecord(q->e0[s->rank], st));
    if (ge) {
      RK(cudaGraphLaunch(ge, st));
    } else if (nccl_comm_all_reduce(q->c, s->rank, s->buf, s->count, s->dt, st, &e)) {
      snprintf(s->err, sizeof s->err, "rank %d: %s", s->rank, e.msg);
      goto out;
    }
    RK(cudaEventRecord(q->e1[s->rank], st));
    RK(cudaEventSynchronize(q->e1[s->rank]));
    float ms = 0;
    RK(cudaEventElapsedTime(&ms, q->e0[s->rank], q->e1[s->rank]));
    if (it >= s->o->warmup) times[it - s->o->warmup] = ms;
  }
  return 0;
out:
  return 1;
}

/* Captures `k` all-reduces of the series into *ge (thread-local capture, as the decode graphs). */
static int capture(series_t *s, cudaStream_t st, int k, cudaGraphExec_t *ge) {
  cudaGraph_t g = NULL;
  gt_err_t e = {0};
  int rc = 0;
  RK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < k && !rc; i++) rc = nccl_comm_all_reduce(s->q->c, s->rank, s->buf, s->count, s->dt, st, &e);
  RK(cudaStreamEndCapture(st, &g));
  if (rc) {
    snprintf(s->err, sizeof s->err, "rank %d: captured all-reduce: %s", s->rank, e.msg);
    goto out;
  }
  RK(cudaGraphInstantiate(ge, g, 0));
out:
  if (g) (void)cudaGraphDestroy(g);
  return s->err[0] != 0;
}

/* one rank's thread: fill + all-reduce + check, eager timing, capture, fill + replay + check,
 * graph timing, then the CHAIN graph's timing */
static void *rank_series(void *arg) {
  series_t *s = arg;
  clique_t *q = s->q;
  cudaStream_t st = q->s[s->rank];
  cudaGraphExec_t ge = NULL, gc = NULL;
  gt_err_t e = {0};
  const size_t bytes = s->count * esize(s->dt);
  void *host = malloc(bytes);
  if (!host) {
    snprintf(s->err, sizeof s->err, "rank %d: out of memory", s->rank);
    return NULL;
  }
  RK(cudaSetDevice(nccl_comm_device(q->c, s->rank)));
  host_fill(host, s->count, s->dt, s->rank);
  RK(cudaMemcpyAsync(s->buf, host, bytes, cudaMemcpyHostToDevice, st));
  if (nccl_comm_all_reduce(q->c, s->rank, s->buf, s->count, s->dt, st, &e)) {
    snprintf(s->err, sizeof s->err, "rank %d: %s", s->rank, e.msg);
    goto out;
  }
  RK(cudaMemcpyAsync(host, s->buf, bytes, cudaMemcpyDeviceToHost, st));
  RK(cudaStreamSynchronize(st));
  s->bad |= host_check(s, host, "eager");
  if (timed(s, st, NULL, s->eager)) goto out;
  /* graph: capture one all-reduce (nothing runs), refill, one replay must give the sum again */
  if (capture(s, st, 1, &ge)) goto out;
  host_fill(host, s->count, s->dt, s->rank);
  RK(cudaMemcpyAsync(s->buf, host, bytes, cudaMemcpyHostToDevice, st));
  RK(cudaGraphLaunch(ge, st));
  RK(cudaMemcpyAsync(host, s->buf, bytes, cudaMemcpyDeviceToHost, st));
  RK(cudaStreamSynchronize(st));
  s->bad |= host_check(s, host, "graph");
  if (timed(s, st, ge, s->graph)) goto out;
  /* values grow by N per all-reduce from here on (inf in the end): only the time matters */
  if (capture(s, st, CHAIN, &gc) || timed(s, st, gc, s->chain)) goto out;
out:
  if (ge) (void)cudaGraphExecDestroy(ge);
  if (gc) (void)cudaGraphExecDestroy(gc);
  (void)cudaStreamSynchronize(st);
  free(host);
  return NULL;
}

static double pct(const double *sorted, int n, double p) {
  int i = (int)ceil(p * n) - 1;
  return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* per iteration the largest time over the ranks (of series `which`: 0 eager, 1 graph, 2 chain
 * divided by CHAIN), sorted, in us */
static void worst_sorted(series_t *s, int n, int iters, int which, double *out) {
  for (int it = 0; it < iters; it++) {
    double w = 0;
    for (int r = 0; r < n; r++) w = fmax(w, (which == 0 ? s[r].eager : which == 1 ? s[r].graph : s[r].chain)[it]);
    out[it] = w * 1e3 / (which == 2 ? CHAIN : 1);
  }
  qsort(out, (size_t)iters, sizeof *out, cmp_double);
}

/* one method on one clique: every dtype and size; prints table rows. Returns 1 on a failure. */
static int run_method(clique_t *q, nccl_comm_method_t m, const opts_t *o) {
  void *ptrs[MAXR] = {0};
  gt_err_t err = {0};
  if (nccl_comm_buffers_alloc(q->c, o->max, m, ptrs, &err)) {
    printf("| %d | %s | | | unavailable: %s | | | | | | FAILED |\n", q->n, nccl_comm_method_name(m), err.msg);
    fflush(stdout);
    return 1;
  }
  const int n = q->n, iters = o->iters;
  series_t s[MAXR];
  pthread_t th[MAXR];
  pthread_barrier_t bar;
  double *times = malloc(sizeof(double) * (size_t)iters * (3 * (size_t)n + 1));
  int fail = !times;
  for (int d = 0; d < o->n_dtypes && !fail; d++) {
    gt_type_t dt = o->dtypes[d];
    for (size_t bytes = o->min; bytes <= o->max && !fail; bytes *= 2) {
      pthread_barrier_init(&bar, NULL, (unsigned)n);
      for (int r = 0; r < n; r++) {
        s[r] = (series_t){.q = q, .rank = r, .buf = ptrs[r], .count = bytes / esize(dt), .dt = dt, .o = o, .bar = &bar,
                          .eager = times + (size_t)iters * (3 * r + 1), .graph = times + (size_t)iters * (3 * r + 2),
                          .chain = times + (size_t)iters * (3 * r + 3)};
        if (pthread_create(&th[r], NULL, rank_series, &s[r])) { /* the others would wait at the barrier */
          fprintf(stderr, "bench_comm: cannot start the thread of rank %d\n", r);
          exit(1);
        }
      }
      int bad = 0;
      for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        if (s[r].err[0]) fprintf(stderr, "bench_comm: N=%d %s: %s\n", n, nccl_comm_method_name(m), s[r].err), fail = 1;
        bad |= s[r].bad;
      }
      pthread_barrier_destroy(&bar);
      if (fail) break;
      worst_sorted(s, n, iters, 0, times);
      double em = pct(times, iters, 0.5), ep = pct(times, iters, 0.99);
      worst_sorted(s, n, iters, 1, times);
      double gm = pct(times, iters, 0.5), gp = pct(times, iters, 0.99);
      worst_sorted(s, n, iters, 2, times);
      printf("| %d | %s | %s | %zu | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %s |\n", n, nccl_comm_method_name(m),
             dt == GT_TYPE_F32 ? "f32" : "bf16", bytes, em, ep, gm, gp, pct(times, iters, 0.5), pct(times, iters, 0.99),
             bad ? "FAILED" : "ok");
      fflush(stdout);
      fail |= bad;
    }
  }
  free(times);
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
static int run_clique(int n, const opts_t *o) {
  clique_t q = {.n = n};
  gt_err_t err = {0};
  int rc = nccl_comm_init_all(NULL, n, &q.c, &err);
  if (rc) {
    fprintf(stderr, "bench_comm: N=%d: %s\n", n, err.msg);
    return rc == GT_EUNSUPPORTED ? SKIP : 1;
  }
  char desc[768];
  printf("\nN=%d: %s\n\n| N | method | dtype | bytes | eager median us | eager p99 us | graph median us | graph p99 us "
         "| in graph median us | in graph p99 us | check |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
         n, nccl_comm_describe(q.c, desc, sizeof desc));
  fflush(stdout);
  int fail = 0;
  for (int r = 0; r < n && !fail; r++) {
    fail = cudaSetDevice(nccl_comm_device(q.c, r)) != cudaSuccess ||
           cudaStreamCreateWithFlags(&q.s[r], cudaStreamNonBlocking) != cudaSuccess ||
           cudaEventCreate(&q.e0[r]) != cudaSuccess || cudaEventCreate(&q.e1[r]) != cudaSuccess;
    if (fail) fprintf(stderr, "bench_comm: streams / events on rank %d failed\n", r);
  }
  for (int i = 0; i < o->n_methods && !fail; i++) fail |= run_method(&q, (nccl_comm_method_t)o->methods[i], o);
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
  printf("bench_comm: %d GPU%s visible; sizes %zu..%zu bytes; %d iterations (+%d warm-up); time = max over ranks of "
         "the stream time from before the launch to after the all-reduce\n",
         ndev, ndev == 1 ? "" : "s", o.min, o.max, o.iters, o.warmup);
  int rc = 0;
  for (int i = 0; i < o.n_tp; i++) {
    int r = run_clique(o.tp[i], &o);
    if (r == SKIP) {
      printf("bench_comm: NCCL unavailable: skipped\n");
      rc = i == 0 ? SKIP : 1;
      break;
    }
    rc |= r;
  }
  if (rc == 1) fprintf(stderr, "bench_comm: FAILED (see above)\n");
  return rc;
}
