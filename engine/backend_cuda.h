/* engine/backend_cuda.h — the CUDA backend of engine/backend.h (one GPU, one rank).
 * Plain C: no CUDA header is visible to includers. */
#ifndef GANTRY_ENGINE_BACKEND_CUDA_H
#define GANTRY_ENGINE_BACKEND_CUDA_H

#include "engine/backend.h"

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
} be_cuda_stats_t;
void be_cuda_get_stats(be_t *be, be_cuda_stats_t *st);

/* 1 if this build has the CUDA backend and at least one device is visible. */
int be_cuda_available(void);

#endif
