/* The scheduler's memory planning (engine/sched/sched_mem.h): the pure sizing rule (full pool for
 * max_num_seqs x max_model_len when it fits 90 % / 25 % of the free memory, else what fits;
 * --kv-memory bytes or fraction; errors; the log line), and through sched_create that the pool
 * is sized from the memory the model's backend reports: the CPU backend with an injected
 * mem_info standing for a GPU's, so `--kv-memory 0.5` must give half of that memory, not half
 * of the host's; the weight and by-need pool checks read the same memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sched/sched.h"
#include "engine/sched/sched_mem.h"
#include "tests/common/model_fx.h"

#define MiB (1024.0 * 1024)
#define GiB (1024.0 * 1024 * 1024)

/* qwen35-9b on one H200 (issue 17): 8 attention layers x 2 x 1024 fp32 channels = 64 KiB per
 * token; 24 GDN layers x (24576 + 524288) floats = 50.25 MiB per state slot; 8 users x 32768
 * tokens; one running and two snapshot slots per sequence. */
static sched_mem_in_t h200(double free_gib) {
  sched_mem_in_t in = {.free_bytes = (uint64_t)(free_gib * GiB), .total_bytes = (uint64_t)(139.8 * GiB),
                       .share = SCHED_MEM_SHARE_DEVICE, .max_num_seqs = 8, .n_ctx = 32768, .block_tokens = 16,
                       .kv_bytes_per_token = 65536, .state_bytes_per_slot = 24 * (24576 + 524288) * 4,
                       .n_state_slots = 24, .weight_bytes = (uint64_t)(6.5 * GiB)};
  snprintf(in.mem_what, sizeof in.mem_what, "cuda:0");
  return in;
}

static void test_full_pool_when_it_fits(void **state) {
  (void)state;
  sched_mem_in_t in = h200(125.0);
  sched_mem_plan_t p;
  gt_err_t err = {0};
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_OK);
  assert_string_equal(p.rule, "full");
  assert_int_equal(p.n_blocks, 8 * 2048); /* eight 32K users at once */
  assert_int_equal(p.n_state_slots, 24);
  assert_true(p.max_concurrency == 8.0);
  assert_true(p.kv_bytes == (uint64_t)16 * 1024 * 1024 * 1024);
  assert_true(p.state_bytes == (uint64_t)24 * 24 * (24576 + 524288) * 4);
  char line[512];
  sched_mem_format(&in, &p, line, sizeof line);
  printf("%s\n", line);
  assert_non_null(strstr(line, "kv_pool_tokens=262144 kv_blocks=16384 "));
  assert_non_null(strstr(line, "max_concurrency_full_context=8.00 max_model_len=32768"));
  assert_non_null(strstr(line, "kv_rule=full kv_sized_from=\"cuda:0\" free=125.00GiB total=139.80GiB"));
  assert_non_null(strstr(line, "kv_cache=17.18GiB")); /* 16 GiB + 24 slots x 50.25 MiB */
  assert_non_null(strstr(line, "weights=6.50GiB"));
}

static void test_shrinks_to_the_share(void **state) {
  (void)state;
  sched_mem_in_t in = h200(10.0); /* 9 GiB of share: less than the 17.2 GiB asked */
  sched_mem_plan_t p;
  gt_err_t err = {0};
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_OK);
  assert_string_equal(p.rule, "fit");
  const double slots = 24.0 * 24 * (24576 + 524288) * 4;
  const int want = (int)((0.9 * 10 * GiB - slots) / MiB); /* one block = 16 x 64 KiB = 1 MiB */
  assert_int_equal(p.n_blocks, want);
  assert_true((double)p.kv_bytes + slots <= 0.9 * 10 * GiB);
  assert_true((double)p.kv_bytes + slots + MiB > 0.9 * 10 * GiB); /* nothing left on the table */
  assert_true(p.max_concurrency > 3.9 && p.max_concurrency < 4.0);
  /* the host's share is smaller: 25 % of 40 GiB free is 10 GiB, less than the 17.2 GiB asked */
  in = h200(40.0);
  in.share = SCHED_MEM_SHARE_HOST;
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_OK);
  assert_string_equal(p.rule, "fit");
  assert_int_equal(p.n_blocks, (int)((0.25 * 40 * GiB - slots) / MiB));
  /* unknown free memory: the full pool (the allocation is then the check) */
  in.free_bytes = in.total_bytes = 0;
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_OK);
  assert_string_equal(p.rule, "full");
  assert_int_equal(p.n_blocks, 8 * 2048);
}

static void test_kv_memory_overrides(void **state) {
  (void)state;
  sched_mem_in_t in = h200(40.0);
  sched_mem_plan_t p;
  gt_err_t err = {0};
  const double slots = 24.0 * 24 * (24576 + 524288) * 4;
  /* a fraction of the device's free memory, slots included */
  in.kv_fraction = 0.5;
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_OK);
  assert_string_equal(p.rule, "kv-memory");
  assert_int_equal(p.n_blocks, (int)((20 * GiB - slots) / MiB));
  /* bytes: larger than the default's full pool is allowed (an override) */
  in.kv_fraction = 0;
  in.kv_bytes = (uint64_t)(30 * GiB);
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_OK);
  assert_int_equal(p.n_blocks, (int)((30 * GiB - slots) / MiB));
  assert_true(p.max_concurrency > 8.0);
}

static void test_errors(void **state) {
  (void)state;
  sched_mem_plan_t p;
  gt_err_t err = {0};
  /* less than one 32K sequence (2048 blocks = 2 GiB + 1.18 GiB of slots) */
  sched_mem_in_t in = h200(40.0);
  in.kv_bytes = (uint64_t)(3 * GiB);
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_ENOMEM);
  printf("%s\n", err.msg);
  assert_non_null(strstr(err.msg, "not enough memory"));
  assert_non_null(strstr(err.msg, "32768 tokens"));
  assert_non_null(strstr(err.msg, "cuda:0 has 40.00GiB free"));
  /* more than the device has free */
  in.kv_bytes = (uint64_t)(41 * GiB);
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_ENOMEM);
  /* the default on a nearly full device */
  in = h200(3.0);
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_ENOMEM);
  assert_string_equal(p.rule, "fit");
  /* a fraction of an unknown memory */
  in = h200(0);
  in.kv_fraction = 0.5;
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_EUNSUPPORTED);
  assert_non_null(strstr(err.msg, "unknown"));
  /* bad sizes */
  in = h200(40.0);
  in.kv_bytes_per_token = 0;
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_EINVAL);
  in = h200(40.0);
  in.kv_fraction = 1.5;
  assert_int_equal(sched_mem_plan(&in, &p, &err), GT_EINVAL);
}

/* ---- through sched_create, with the device memory the backend reports ---- */

static uint64_t g_dev_free;
static int injected_mem_info(be_t *be, be_mem_info_t *out) {
  (void)be;
  *out = (be_mem_info_t){.free_bytes = g_dev_free, .total_bytes = 2 * g_dev_free};
  snprintf(out->what, sizeof out->what, "cuda:7");
  return GT_OK;
}

static int pool_blocks(tu_model_fx_t *f, const sched_config_t *c, int *blocks, gt_err_t *err) {
  sched_t *s = NULL;
  int rc = sched_create(f->m, f->tok, c, &s, err);
  if (rc) return rc;
  sched_stats_t st;
  sched_stats(s, &st);
  *blocks = st.kv_blocks;
  sched_free(s);
  return GT_OK;
}

static void test_sched_sizes_from_the_backend(void **state) {
  tu_model_fx_t *f = *state;
  const be_ops_t *cpu = f->be->ops;
  be_ops_t dev = *cpu;
  dev.mem_info = injected_mem_info;
  const size_t per_tok = model_kv_bytes_per_token(f->m); /* qwen3-tiny: 4 layers x 2 x 128 floats */
  assert_int_equal(per_tok, 4096);
  const double block = 16.0 * (double)per_tok; /* 64 KiB */
  gt_err_t err = {0};
  int blocks = 0;
  sched_config_t c = {.max_num_seqs = 4, .max_batch_tokens = 64, .n_ctx = 2048, .kv_mem_fraction = 0.5};

  f->be->ops = &dev;
  g_dev_free = (uint64_t)(48 * MiB);
  int rc = pool_blocks(f, &c, &blocks, &err);
  /* --kv-memory 0.5: half of the reported device memory (24 MiB), not of the host's */
  int want_half = (int)(24 * MiB / block);
  int rc_default = GT_OK, blocks_default = 0, rc_small = GT_OK, blocks_small = 0;
  if (!rc) {
    c.kv_mem_fraction = 0;
    rc_default = pool_blocks(f, &c, &blocks_default, &err); /* 4 x 2048 tokens = 32 MiB: over 25 % of 48 MiB */
    g_dev_free = (uint64_t)(4 * MiB);
    rc_small = pool_blocks(f, &c, &blocks_small, &err); /* not one 2048-token sequence (8 MiB) */
  }
  /* the checks of serve's weights and of generate / bench pools read the same memory */
  gt_err_t werr = {0}, perr = {0};
  const int rc_weights = sched_mem_check_weights(f->be, (uint64_t)(5 * MiB), &werr);
  const int rc_weights_fit = sched_mem_check_weights(f->be, (uint64_t)(3 * MiB), &werr);
  const int rc_pool = sched_mem_check(f->m, 128, 16, 1, &perr); /* 2048 tokens: 8 MiB */
  const int rc_pool_fit = sched_mem_check(f->m, 32, 16, 1, &perr);  /* 2 MiB */
  f->be->ops = cpu;
  assert_int_equal(rc, GT_OK);
  assert_int_equal(blocks, want_half);
  assert_int_equal(rc_default, GT_OK);
  assert_int_equal(blocks_default, (int)(0.25 * 48 * MiB / block));
  assert_int_equal(rc_small, GT_ENOMEM);
  assert_non_null(strstr(err.msg, "not enough memory"));
  assert_non_null(strstr(err.msg, "cuda:7"));
  assert_int_equal(rc_weights, GT_ENOMEM);
  assert_int_equal(rc_weights_fit, GT_OK);
  assert_non_null(strstr(werr.msg, "not enough memory: the weights need 5.0MiB, cuda:7 has 4.0MiB free"));
  assert_int_equal(rc_pool, GT_ENOMEM);
  assert_int_equal(rc_pool_fit, GT_OK);
  assert_non_null(strstr(perr.msg, "cuda:7"));

  /* the real CPU backend: the host's memory; 4 x 2048 tokens fit, so the full pool */
  assert_int_equal(pool_blocks(f, &c, &blocks, &err), GT_OK);
  assert_int_equal(blocks, 4 * 128);
}

int main(void) {
  const struct CMUnitTest pure[] = {
      cmocka_unit_test(test_full_pool_when_it_fits),
      cmocka_unit_test(test_shrinks_to_the_share),
      cmocka_unit_test(test_kv_memory_overrides),
      cmocka_unit_test(test_errors),
  };
  const struct CMUnitTest with_model[] = {
      cmocka_unit_test(test_sched_sizes_from_the_backend),
  };
  int rc = cmocka_run_group_tests(pure, NULL, NULL);
  return rc | cmocka_run_group_tests(with_model, tu_model_fx_setup, tu_model_fx_teardown);
}
