/* engine/backend/backend_cuda.h — the CUDA backend of engine/backend/backend.h (one GPU, one rank).
 * Plain C: no CUDA header is visible to includers. */
#ifndef GANTRY_ENGINE_BACKEND_CUDA_H
#define GANTRY_ENGINE_BACKEND_CUDA_H

#include "engine/backend/backend.h"

/* Creates a backend on CUDA device `device` (its own stream and cuBLAS handle). Returns GT_OK
 * and *out (free with be_destroy), GT_EUNSUPPORTED when the build has no CUDA or no such device
 * is present (err says which), or GT_EINTERNAL / GT_ENOMEM on a CUDA failure. */
int be_cuda_create(int device, be_t **out, gt_err_t *err);

/* Decode-step counters: steps replayed from (or captured into) a CUDA graph, steps run
 * eagerly (a decode step that could not use a graph; 0 in steady decode), graph captures, and a
 * bit mask of the batch sizes that have a graph (bit n = batch of n sequences). Decode steps
 * (one token per sequence, up to 32 sequences) use graphs unless GANTRY_CUDA_GRAPHS=0. */
typedef struct {
  long graph_steps, eager_steps, captures;
  uint64_t captured_sizes;
  long profiled_steps; /* decode steps run for be_cuda_profile_arm (not in eager_steps) */
} be_cuda_stats_t;
void be_cuda_get_stats(be_t *be, be_cuda_stats_t *st);

/* Per-op profile of one decode step (gantry-engine bench / bench_decode).
 * be_cuda_profile_arm: the NEXT decode step runs eagerly instead of from its graph (counted in
 * profiled_steps, not eager_steps; the graphs are left as they are) with a cudaEvent pair around
 * each recorded op. When every op of the step can be captured, the ops are queued in chunks
 * behind a host gate (cudaLaunchHostFunc) so the GPU runs each chunk back to back and host
 * launch latency is not counted as op time (gated = 1). Afterwards, graph replays of the same
 * batch size are timed (events around the launch) until be_cuda_profile_get. */
typedef struct {
  char label[64]; /* op kind; ops with a weight matrix add its type, cols x rows and the batch
                   * rows, e.g. "matmul Q4_K 4096x12288 x1" ("gemm": the bf16 tensor-core path) */
  int calls;      /* ops of this label in the step */
  double us;      /* their GPU time, summed */
} be_cuda_prof_t;
typedef struct {
  int batch;       /* sequences of the profiled step */
  int n_ops;       /* ops it ran */
  double ops_us;   /* their GPU time, summed (every op, also those past `max` rows) */
  int gated;       /* 1: ops queued ahead of the GPU (see above); 0: launch gaps are in the times */
  int graph_steps; /* graph replays of the same batch size timed after it */
  double graph_us; /* their mean GPU time (0 when none) */
} be_cuda_prof_sum_t;
void be_cuda_profile_arm(be_t *be);
/* Copies the profiled step's rows, most time first, into out[max] and its totals into *sum;
 * returns the number of rows copied, 0 when no decode step ran since the arm. Stops the
 * graph timing and disarms. */
int be_cuda_profile_get(be_t *be, be_cuda_prof_t *out, int max, be_cuda_prof_sum_t *sum);

/* 1 if this build has the CUDA backend and at least one device is visible. */
int be_cuda_available(void);

#endif
