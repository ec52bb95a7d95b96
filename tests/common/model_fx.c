/* tests/common/model_fx.c — see model_fx.h. */
#include "tests/common/model_fx.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/common/testutil.h"

int tu_model_fx_open(tu_model_fx_t *f, const char *name, tu_be_new_fn be_new, gt_err_t *err) {
  memset(f, 0, sizeof *f);
  if (gguf_open(tu_golden(name), &f->g, err) || be_new(&f->be, err) || model_load(f->g, f->be, 64, &f->m, err) ||
      tok_load(f->g, &f->tok, err))
    return -1;
  return 0;
}

void tu_model_fx_close(tu_model_fx_t *f) {
  tok_free(f->tok);
  model_free(f->m);
  be_destroy(f->be);
  gguf_close(f->g);
}

int tu_be_cpu2(be_t **be, gt_err_t *err) { return be_cpu_create(2, be, err); }

int tu_model_fx_setup_on(void **state, tu_be_new_fn be_new) {
  tu_model_fx_t *f = calloc(1, sizeof *f);
  gt_err_t err = {0};
  if (!f) return -1;
  if (tu_model_fx_open(f, "qwen3-tiny.bf16.gguf", be_new, &err)) {
    fprintf(stderr, "setup: %s\n", err.msg);
    tu_model_fx_close(f);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

int tu_model_fx_setup(void **state) { return tu_model_fx_setup_on(state, tu_be_cpu2); }

int tu_model_fx_teardown(void **state) {
  tu_model_fx_t *f = *state;
  if (!f) return 0; /* setup failed */
  tu_model_fx_close(f);
  free(f);
  return 0;
}

void tu_sched_run_all(sched_t *s, int64_t *steps) {
  gt_err_t err = {0};
  for (int i = 0; i < 100000; i++) {
    int rc = sched_step(s, &err);
    assert_true(rc >= 0);
    if (rc == 0) return;
    if (steps) (*steps)++;
  }
  fail_msg("scheduler did not go idle");
}
