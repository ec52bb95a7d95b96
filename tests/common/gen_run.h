/* tests/common/gen_run.h — the run that model-against-model comparisons share (test_tp on CPU
 * ranks, test_cuda_tp on CUDA ranks): teacher-forced logits of a fixed prompt, then a greedy
 * continuation, through gen_t (engine/models/gen.h). */
#ifndef GANTRY_TESTS_GEN_RUN_H
#define GANTRY_TESTS_GEN_RUN_H

#include <stdint.h>

#include "engine/models/model.h"

/* The fixed prompt of n tokens for a vocabulary of V: ids[i] = (i * 37 + 11) % V. */
void tu_gen_prompt(int32_t *ids, int n, int V);

/* On a new gen_t of n_ctx positions over m: feeds the prompt of n_prompt tokens (tu_gen_prompt)
 * in chunks of `chunk`, then n_greedy decode steps, each fed the argmax of the previous logits
 * (the first: of the prompt's last row); those tokens go to greedy[0..n_greedy-1]. Returns the
 * prompt's logits [n_prompt, V], malloc'd (the caller frees). A cmocka failure on any error. */
float *tu_gen_greedy(model_t *m, int n_ctx, int n_prompt, int chunk, int n_greedy, int32_t *greedy);

#endif
