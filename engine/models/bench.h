/* engine/models/bench.h — the engine's decode benchmark on any backend (`gantry-engine bench`,
 * tools/bench/bench_decode.c on GPU machines): per batch size, prefill tok/s (each
 * sequence's prompt in one step), decode ms per step (median), tok/s per sequence and in total,
 * bytes streamed per step (the weights a step reads + the KV its attention reads + the logits
 * written), the backend's measured copy bandwidth (read + write) and the fraction of that
 * roofline; with a backend that counts them (CUDA), decode steps replayed from graphs vs eager.
 * Prints a markdown table to out. Token ids are pseudo-random (fixed seed).
 * Before timing, a warm-up runs one prefill and one decode step per batch size with the real
 * steps' layout (a graph backend captures its decode graphs there; the captured sizes are
 * printed). With the profile hooks set, one more decode step per batch size is profiled per op
 * and a table "op | calls | us | % of step" follows, with the sum of op times against the GPU
 * time of a graph replay of the same step: the gap is launch / idle time inside the graph. Each
 * prefill length is profiled the same way (one more prefill of it, shares of its best timed
 * wall time), and every profile starts with its shares by op kind (products, attention, GDN,
 * the rest). */
#ifndef GANTRY_ENGINE_BENCH_H
#define GANTRY_ENGINE_BENCH_H

#include <stdio.h>

#include "engine/backend/backend_cuda.h" /* be_cuda_prof_t (plain C; nothing is linked from it here) */
#include "format/gguf.h"
#include "engine/models/model.h"

typedef struct {
  const int *batches; /* batch sizes, each >= 1 */
  int n_batches;
  int prompt;         /* prompt tokens per sequence (>= 1; the model's max_tokens must allow it) */
  /* optional prompt lengths timed as one-sequence prefills after the decode table ("| prompt |
   * prefill ms | prefill tok/s |", best of two runs after a warm-up run); each <= max_tokens */
  const int *prefill;
  int n_prefill;
  int gen;            /* decode steps (>= 2) */
  size_t copy_bytes;  /* buffer size of the copy-bandwidth measurement */
  /* optional per-op profile of one decode step per batch size and one prefill per length: be_cuda_profile_arm /
   * be_cuda_profile_get on CUDA; NULL: no profile */
  void (*prof_arm)(be_t *be);
  int (*prof_get)(be_t *be, be_cuda_prof_t *out, int max, be_cuda_prof_sum_t *sum);
} eb_opts_t;

/* m must have been loaded with max_tokens >= prompt and every prefill length; its cache is
 * (re)initialised here. */
int eb_run(model_t *m, const gguf_t *g, const eb_opts_t *o, FILE *out, gt_err_t *err);

/* Parses "1,8,32" into b[cap] (each 1..max); returns the count or -1 on a bad list. */
int eb_parse_list(const char *s, int *b, int cap, long max);
/* eb_parse_list with max 4096 */
int eb_parse_batches(const char *s, int *b, int cap);

#endif
