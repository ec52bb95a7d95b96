/* tests/common/model_fx.c — see model_fx.h. */
#include "tests/common/model_fx.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/common/testutil.h"

int tu_model_fx_setup(void **state) {
  tu_model_fx_t *f = calloc(1, sizeof *f);
  gt_err_t err = {0};
  if (!f) return -1;
  if (gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &f->g, &err) || be_cpu_create(2, &f->be, &err) ||
      model_load(f->g, f->be, 64, &f->m, &err) || tok_load(f->g, &f->tok, &err)) {
    fprintf(stderr, "setup: %s\n", err.msg);
    return -1;
  }
  *state = f;
  return 0;
}

int tu_model_fx_teardown(void **state) {
  tu_model_fx_t *f = *state;
  tok_free(f->tok);
  model_free(f->m);
  be_destroy(f->be);
  gguf_close(f->g);
  free(f);
  return 0;
}
