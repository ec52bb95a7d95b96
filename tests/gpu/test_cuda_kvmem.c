/* The KV pool on CUDA is sized from the GPU's memory (engine/sched/sched_mem.h): the CUDA backend's
 * mem_info reports cudaMemGetInfo of its device; `--kv-memory 0.5` (sched_config_t
 * kv_mem_fraction) gives half of the GPU's free memory after the weights, the pool is allocated
 * there (the GPU's free memory drops by it) and a request runs in it; without the option the
 * pool is max_num_seqs x n_ctx. qwen3-tiny bf16. Exits 77 (skipped) when no CUDA device is
 * visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "engine/backend/backend_cuda.h"
#include "format/gguf.h"
#include "engine/models/model.h"
#include "engine/sched/sched.h"
#include "format/tokenizer.h"
#include "tests/common/model_fx.h"
#include "tests/common/testutil.h"

typedef tu_model_fx_t fx_t; /* tests/common/model_fx.h */

static int cuda_be(be_t **be, gt_err_t *err) { return be_cuda_create(0, be, err); }
static int setup(void **state) { return tu_model_fx_setup_on(state, cuda_be); }
#define teardown tu_model_fx_teardown

static int g_finals, g_tokens;
static void on_event(void *ud, const sched_event_t *ev) {
  (void)ud;
  if (ev->is_final) g_finals++;
  else g_tokens += ev->delta->n_ids;
}

static void test_kv_memory_fraction_of_the_gpu(void **state) {
  fx_t *f = *state;
  be_mem_info_t before, after, host;
  gt_err_t err = {0};
  assert_non_null(f->be->ops->mem_info);
  assert_int_equal(f->be->ops->mem_info(f->be, &before), GT_OK);
  assert_int_equal(be_host_mem_info(&host, &err), GT_OK);
  print_message("%s: free %.2f GiB of %.2f GiB; host MemAvailable %.2f GiB\n", before.what, before.free_bytes / 1073741824.0,
                before.total_bytes / 1073741824.0, host.free_bytes / 1073741824.0);
  assert_string_equal(before.what, "cuda:0");
  assert_true(before.free_bytes > 0 && before.free_bytes < before.total_bytes);

  const double block = 16.0 * (double)model_kv_bytes_per_token(f->m);
  sched_config_t c = {.max_num_seqs = 4, .max_batch_tokens = 64, .n_ctx = 2048, .kv_mem_fraction = 0.5};
  sched_t *s = NULL;
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), GT_OK);
  sched_stats_t st;
  sched_stats(s, &st);
  const double want = 0.5 * (double)before.free_bytes / block;
  print_message("--kv-memory 0.5: %d blocks, %.0f expected from the GPU's free memory\n", st.kv_blocks, want);
  assert_true(st.kv_blocks >= (int)(want * 0.99) && st.kv_blocks <= (int)want + 1);
  /* the pool is on the GPU: its free memory dropped by the pool's size */
  assert_int_equal(f->be->ops->mem_info(f->be, &after), GT_OK);
  const double pool = (double)st.kv_blocks * block;
  assert_true((double)before.free_bytes - (double)after.free_bytes >= 0.99 * pool);
  /* and a request runs in it */
  sched_req_t r = {.n_prompt = 10, .sampling = sampler_defaults(), .max_tokens = 4, .ignore_eos = 1, .logprobs = -1,
                   .on_event = on_event};
  r.prompt = malloc(sizeof(int32_t) * 10);
  for (int i = 0; i < 10; i++) r.prompt[i] = 100 + i;
  assert_true(sched_submit(s, &r, &err) > 0);
  for (int i = 0; i < 100 && sched_step(s, &err) > 0; i++) {}
  assert_int_equal(g_finals, 1);
  assert_int_equal(g_tokens, 4);
  sched_free(s);

  /* the default: max_num_seqs x n_ctx, which fits easily */
  c.kv_mem_fraction = 0;
  assert_int_equal(sched_create(f->m, f->tok, &c, &s, &err), GT_OK);
  sched_stats(s, &st);
  assert_int_equal(st.kv_blocks, 4 * 128);
  sched_free(s);
}

int main(void) {
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_kv_memory_fraction_of_the_gpu)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
