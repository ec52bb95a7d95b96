/* kernels/sample.cuh — token sampling on the device, one block per logits row: the semantics of
 * sampler_pick (engine/backend/sampler.h) for engine/backend/backend.h's `sample` op, so only ids cross to the host.
 *
 * Greedy rows (temperature <= 0 or top_k == 1): argmax, lowest id on ties (NaN ignored; a NaN at
 * id 0 gives 0, as the CPU) — bit-exact. Other rows: p = softmax(logits / T) as the CPU computes it
 * (max subtracted and the division in fp32, exp rounded to fp32 — here from a double exp, the CPU
 * uses expf —, sum in double, p = (float)(p / sum)); then the candidates, ordered by p descending
 * and id ascending, are cut by min-p, top-k, top-p and drawn from without sorting: radix selection
 * over the fp32 bit patterns of p (three passes of 11/11/10 bits, histograms of count and mass in
 * shared memory), ties resolved by id. Masses are exact integer sums of round(p * 2^63), so every
 * decision is deterministic and agrees with the CPU's double sums except within ~1e-15 of a
 * threshold (and where expf and the rounded double exp differ by an ulp). */
#ifndef GANTRY_KERNELS_SAMPLE_CUH
#define GANTRY_KERNELS_SAMPLE_CUH
#include "kernels/common.cuh"

/* One row's parameters: the layout of be_sample_row_t (engine/backend/backend.h). */
typedef struct {
  float temperature; /* <= 0: greedy */
  int top_k;         /* <= 0: off; 1: greedy */
  float top_p;       /* >= 1: off */
  float min_p;       /* <= 0: off */
  double u;          /* uniform in [0, 1), a multiple of 2^-53 (other values are truncated to one) */
} kc_sample_row_t;

/* Floats of device scratch kc_sample needs (the probabilities of every row). */
KC_API size_t kc_sample_scratch_floats(int n_rows, int n_vocab);
/* ids[r] = the token sampled from logits[r, :] with rows[r], r < n_rows. logits [n_rows, n_vocab]
 * fp32, rows [n_rows], ids [n_rows] int32 and scratch [kc_sample_scratch_floats] are device memory.
 * Returns a cudaError_t value. */
KC_API int kc_sample(cudaStream_t st, const float *logits, int n_rows, int n_vocab, const kc_sample_row_t *rows,
                     float *scratch, int32_t *ids);
#endif
