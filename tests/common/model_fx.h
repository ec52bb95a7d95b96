/* tests/common/model_fx.h — a model for scheduler-level tests: qwen3-tiny bf16 from the golden
 * directory on a CPU backend of 2 threads, at most 64 tokens per step, with its tokenizer. */
#ifndef GANTRY_TESTS_MODEL_FX_H
#define GANTRY_TESTS_MODEL_FX_H

#include "engine/backend/backend.h"
#include "format/gguf.h"
#include "engine/models/model.h"
#include "format/tokenizer.h"

typedef struct {
  gguf_t *g;
  be_t *be;
  model_t *m;
  tok_t *tok;
} tu_model_fx_t;

/* cmocka setup / teardown: *state becomes / was a tu_model_fx_t * (owned by the fixture). */
int tu_model_fx_setup(void **state);
int tu_model_fx_teardown(void **state);

#endif
