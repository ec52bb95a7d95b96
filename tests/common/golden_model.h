/* tests/common/golden_model.h — checks a model file against a golden case of the fixtures'
 * manifest (see tests/golden/README.md): teacher-forced logits over all_ids compared with the
 * stored rows by max row relative error, and greedy continuation of prompt_ids compared with
 * generated_ids up to the first position whose reference top-1 margin is < 1e-3, or whose
 * generated id is not the argmax of the reference's own logits (then the fixture's generation
 * and logits disagree, and the check stops there, flagged in fixture_inconsistent). */
#ifndef GANTRY_TESTS_GOLDEN_MODEL_H
#define GANTRY_TESTS_GOLDEN_MODEL_H

#include <jansson.h>

#include "engine/backend/backend.h"

typedef struct {
  double max_rel_err;   /* over stored rows */
  int rows;             /* rows compared */
  int top1_agree;       /* rows whose argmax equals the reference's */
  int rows_m05;         /* rows whose reference top-1 margin is >= 0.05 (README's reduced-precision rule) */
  int top1_agree_m05;   /* of those, rows whose argmax equals the reference's */
  int greedy_checked;   /* generated positions compared (up to the first small margin) */
  int greedy_match;     /* 1 if all compared positions matched */
  int greedy_first_bad; /* first mismatching position, or -1 */
  int fixture_inconsistent; /* generated_ids[j] != argmax of the reference's own logits row with
                               a margin >= 1e-3 at the position where the check stopped (the
                               long cases' generations do not follow their logits) */
} gm_result_t;

/* Runs one case: `gguf_path` the model, `c` a case object, logits files relative to `dir`
 * (a path under $GANTRY_GOLDEN). chunk: prefill chunk size for the teacher-forced pass (<= 0:
 * all at once). Returns 0 or a negative error (message printed). */
int gm_run_case(const char *gguf_path, json_t *c, const char *dir, int chunk, gm_result_t *res);

/* Writes to dst a copy of the model file src whose matrices (every tensor of 2+ dimensions) are
 * dequantized and rounded to BF16 (1-D tensors stay as they are), keeping the architecture's
 * metadata (no tokenizer). The demo fixture's cases 1 and 2 were computed by transformers on
 * such bf16-rounded weights (and bf16-rounded RoPE frequencies). Returns 0 or prints and < 0. */
int gm_write_bf16_copy(const char *src, const char *dst);

/* The model file a demo case's reference ran on, and its RoPE mode (sets gm_rope_freq_bf16):
 * case 0 the fixture's Q4_K_M file as it is; cases 1 and 2 a bf16-rounded copy (written to a
 * temporary file on first use, removed at exit) with bf16 RoPE frequencies — the fixture
 * generator converted its model in place to bf16 for its noise-floor runs before computing them
 * (a float64 forward on the exact weights agrees with the engine to ~1e-6 on all three cases
 * and is 4-5e-3 from the stored rows of cases 1-2; on the bf16-rounded weights and frequencies
 * it is ~1e-6 from them). Returns the path, or NULL (message printed). */
const char *gm_demo_model_for_case(int case_index);

/* Runs case c (gm_run_case), prints one line and asserts (cmocka): max row relative error <= tol,
 * top-1 agreement on at least min_top1_pct % of the stored rows, greedy continuation equal up
 * to where the check stops (and at least one position checked unless the fixture's generation
 * is inconsistent). Returns the result. */
gm_result_t gm_check_case(const char *path, json_t *c, const char *dir, int chunk, const char *label, double tol,
                          int min_top1_pct);
/* gm_check_case over every case of the array (at least one). */
void gm_check_cases(const char *path, json_t *cases, const char *dir, int chunk, const char *label, double tol,
                    int min_top1_pct);
/* The demo model's three cases, each on the weights its reference ran on (gm_demo_model_for_case);
 * its generations must be consistent with its logits. Leaves gm_rope_freq_bf16 at 0. */
void gm_check_demo(const char *label, double tol, int min_top1_pct);

/* Set before gm_run_case: the case's reference computed RoPE with bf16-rounded frequencies
 * (HF transformers running a bf16 checkpoint: the bf16 cases of tests/golden/manifest.json). */
extern int gm_rope_freq_bf16;
/* row[0..n)'s largest value minus its second largest (the reference's top-1 margin) */
float gm_margin(const float *row, int n);

/* Set by GPU tests of a reduced-precision path (bf16 KV pools): gm_check_case asserts top-1
 * agreement on the rows whose reference margin is >= 0.05 (tests/golden/README.md's rule for
 * reduced-precision backends) instead of every row, and greedy generation only when
 * gm_greedy_assert (it is printed either way). Defaults: 0 and 1. */
extern int gm_top1_margin_rows, gm_greedy_assert;

/* Optional: when set, gm_run_case runs on the backend this returns (NULL: the case fails);
 * gm_run_case destroys it. Unset (the default): the CPU backend. */
extern be_t *(*gm_backend_factory)(void);

#endif
