/* tests/common/model_fx.h — a model for scheduler-level tests: qwen3-tiny bf16 from the golden
 * directory on a CPU backend of 2 threads, at most 64 tokens per step, with its tokenizer. */
#ifndef GANTRY_TESTS_MODEL_FX_H
#define GANTRY_TESTS_MODEL_FX_H

#include "engine/backend/backend.h"
#include "format/gguf.h"
#include "engine/models/model.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"

typedef struct {
  gguf_t *g;
  be_t *be;
  model_t *m;
  tok_t *tok;
} tu_model_fx_t;

/* Makes a backend: 0 or an error code (err set). */
typedef int (*tu_be_new_fn)(be_t **be, gt_err_t *err);
/* The CPU backend of 2 threads. */
int tu_be_cpu2(be_t **be, gt_err_t *err);

/* Opens golden model `name` (e.g. "qwen3-tiny.bf16.gguf") on a backend from be_new, at most 64
 * tokens per step, with its tokenizer, into *f (zeroed first). 0, or non-zero with err set and
 * what was opened left in *f for tu_model_fx_close. */
int tu_model_fx_open(tu_model_fx_t *f, const char *name, tu_be_new_fn be_new, gt_err_t *err);
/* Frees what tu_model_fx_open put in *f. */
void tu_model_fx_close(tu_model_fx_t *f);

/* cmocka setup / teardown: *state becomes / was a tu_model_fx_t * (owned by the fixture).
 * tu_model_fx_setup_on opens qwen3-tiny on a backend from be_new (tu_model_fx_setup: the CPU
 * backend of 2 threads); tu_model_fx_teardown frees either. */
int tu_model_fx_setup_on(void **state, tu_be_new_fn be_new);
int tu_model_fx_setup(void **state);
int tu_model_fx_teardown(void **state);

/* Steps s until it is idle (a cmocka failure if a step fails or it is still busy after 100000
 * steps); *steps (when not NULL) counts the steps that did work. */
void tu_sched_run_all(sched_t *s, int64_t *steps);

#endif
