/* Golden fixtures on the CUDA backend (tests/golden/README.md, GPU tolerances): qwen3-tiny in
 * every weight type, qwen35-tiny, the trained demo model and the trained hybrid demo35 (fp32 and bf16
 * activations, a trained model's bars), each twice:
 * - fp32 KV pools (`--kv-dtype fp32`): the backend keeps fp32 activations, so the bar is 10x
 *   the CPU tolerance (1e-2 max row relative error; the demo's tighter fp16/fp32 bar is the same
 *   1e-2), top-1 agreement on >= 99 % of all rows and greedy generation up to the first small
 *   reference margin;
 * - bf16 KV pools (the default): a reduced-precision path. Rounding K and V to bf16 alone moves
 *   the logits of the chaotic random tiny models by 4e-3..5.5e-3 (measured on the CPU backend
 *   with kv_set_type(BF16), exact fp32 attention: qwen3-tiny bf16 case 0 then leaves the greedy
 *   reference at token 5 and agrees on 30/31 top-1 rows), so the bar is the README's
 *   reduced-precision one: the same 1e-2 max row error, top-1 agreement on >= 99 % of the rows
 *   whose reference margin is >= 0.05, greedy generation printed, and asserted only on the trained
 *   demo model (top-1 on every row as well).
 * Both run with fp32 activations (be_cuda_set_activations("fp32"): x within ~1e-6 of fp32 in
 * every product). The default, bf16 activations (x rounded to bf16 in batches of 3+ rows and in
 * prefill, K-quant prefill weights dequantized to bf16), is a bf16-activation backend in the
 * README's sense and is held to that row of its table, on bf16 KV pools (the default), for every
 * model and weight type: max row error <= 0.099 (qwen3-tiny) / 0.059 (qwen35-tiny) / 2e-2 (the
 * demo's own bf16 bar), top-1 agreement on >= 99 % of the rows whose reference margin is >= 0.05
 * (the demo: every row); greedy generation printed, and asserted on the trained demo model only,
 * as for the bf16 pools above (on the H200 at 5d2ee48 one qwen3-tiny Q4_K_M case leaves the
 * reference at token 4 with max row errors of 1.0-1.4e-2, a seventh of the bar: the random models
 * amplify any rounding).
 * Skips (with a message) without a GPU.
 * GANTRY_GOLDEN_ONLY=<substring of the label> runs only the matching tests (memcheck runs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/backend/backend_cuda.h"
#include "tests/common/golden_model.h"
#include "tests/common/testutil.h"

#define GPU_TOL 1e-2
/* the fixtures README's bf16-activations bars (PyTorch's bf16 inference vs the fp32 reference) */
#define BF16_TOL_QWEN3 0.099
#define BF16_TOL_QWEN35 0.059
#define BF16_TOL_DEMO 2e-2

static int g_kv_bf16; /* the KV pool type of the backends cuda_factory makes */

static be_t *cuda_factory(void) {
  be_t *be = NULL;
  gt_err_t err = {0};
  if (be_cuda_create(0, &be, &err)) {
    fprintf(stderr, "be_cuda_create: %s\n", err.msg);
    return NULL;
  }
  if (be_kv_set_type(be, g_kv_bf16 ? GT_TYPE_BF16 : GT_TYPE_F32)) {
    be_destroy(be);
    return NULL;
  }
  return be;
}

/* the bar of the pool type, fp32 activations (see the top of the file) */
static void kv_mode(int bf16, int trained) {
  assert_int_equal(be_cuda_set_activations("fp32"), 0);
  g_kv_bf16 = bf16;
  gm_top1_margin_rows = bf16;
  gm_greedy_assert = !bf16 || trained;
}

/* bf16 activations (the default) on bf16 pools: the README's bf16 bar (see the top of the file) */
static void act_bf16_mode(void) {
  assert_int_equal(be_cuda_set_activations("bf16"), 0);
  assert_string_equal(be_cuda_activations(), "bf16");
  assert_string_equal(be_cuda_prefill_precision(), "fast");
  g_kv_bf16 = 1;
  gm_top1_margin_rows = 1;
  gm_greedy_assert = 0; /* demo(): asserted */
}

/* Skips (before anything is allocated) without a GPU or when GANTRY_GOLDEN_ONLY excludes it. */
static void need(const char *label) {
  if (!be_cuda_available()) {
    print_message("%s: no CUDA device visible, skipped\n", label);
    skip();
  }
  const char *only = getenv("GANTRY_GOLDEN_ONLY"); /* e.g. "qwen35": one model (memcheck runs) */
  if (only && !strstr(label, only)) skip();
}

/* what a golden run is checked on */
typedef enum {
  KV_FP32,  /* fp32 activations, fp32 KV pools (bar GPU_TOL) */
  KV_BF16,  /* fp32 activations, bf16 KV pools (bar GPU_TOL) */
  ACT_BF16, /* bf16 activations (the default) on bf16 pools (the README's bf16 bar) */
} gmode_t;

static void set_mode(gmode_t mode, int trained) {
  if (mode == ACT_BF16) act_bf16_mode();
  else kv_mode(mode == KV_BF16, trained);
}

static const char *mode_label(gmode_t mode) {
  return mode == ACT_BF16 ? "kv bf16 act bf16" : mode == KV_BF16 ? "kv bf16" : "kv fp32";
}

static void tiny_tol(const char *model, const char *type, const char *cases_key, int chunk, int rope_bf16, gmode_t mode,
                     double tol) {
  char label[64];
  snprintf(label, sizeof label, "%s %s", model, type);
  need(label);
  set_mode(mode, 0);
  json_t *man = tu_json("manifest.json");
  json_t *mdl = json_object_get(json_object_get(man, "models"), model);
  const char *file = json_string_value(json_object_get(json_object_get(mdl, "gguf"), type));
  assert_non_null(file);
  gm_rope_freq_bf16 = rope_bf16;
  gm_backend_factory = cuda_factory;
  char path[4096], l[96];
  snprintf(path, sizeof path, "%s", tu_golden(file));
  snprintf(l, sizeof l, "cuda %s %s", label, mode_label(mode));
  gm_check_cases(path, json_object_get(mdl, cases_key), "", chunk, l, tol, 99);
  json_decref(man);
  assert_int_equal(be_cuda_set_activations(NULL), 0);
}

static void tiny(const char *model, const char *type, const char *cases_key, int chunk, int rope_bf16, gmode_t mode) {
  tiny_tol(model, type, cases_key, chunk, rope_bf16, mode, GPU_TOL);
}

static void test_qwen3_bf16(void **st) { tiny("qwen3-tiny", "bf16", "cases", 0, 1, KV_FP32); }
static void test_qwen3_bf16_kvbf16(void **st) { tiny("qwen3-tiny", "bf16", "cases", 0, 1, KV_BF16); }
static void test_qwen3_bf16_chunked(void **st) { tiny("qwen3-tiny", "bf16", "cases", 7, 1, KV_FP32); }
static void test_qwen3_bf16_chunked_kvbf16(void **st) { tiny("qwen3-tiny", "bf16", "cases", 7, 1, KV_BF16); }
static void test_qwen3_q8_0(void **st) { tiny("qwen3-tiny", "Q8_0", "cases_Q8_0", 0, 0, KV_FP32); }
static void test_qwen3_q8_0_kvbf16(void **st) { tiny("qwen3-tiny", "Q8_0", "cases_Q8_0", 0, 0, KV_BF16); }
static void test_qwen3_q4_k_m(void **st) { tiny("qwen3-tiny", "Q4_K_M", "cases_Q4_K_M", 0, 0, KV_FP32); }
static void test_qwen3_q4_k_m_kvbf16(void **st) { tiny("qwen3-tiny", "Q4_K_M", "cases_Q4_K_M", 0, 0, KV_BF16); }
static void test_qwen3_q6_k(void **st) { tiny("qwen3-tiny", "Q6_K", "cases_Q6_K", 0, 0, KV_FP32); }
static void test_qwen3_q6_k_kvbf16(void **st) { tiny("qwen3-tiny", "Q6_K", "cases_Q6_K", 0, 0, KV_BF16); }
/* the qwen35 reference, like qwen3's bf16 one, used bf16-rounded RoPE frequencies */
static void test_qwen35_bf16(void **st) { tiny("qwen35-tiny", "bf16", "cases", 0, 1, KV_FP32); }
static void test_qwen35_bf16_kvbf16(void **st) { tiny("qwen35-tiny", "bf16", "cases", 0, 1, KV_BF16); }
static void test_qwen35_bf16_chunked(void **st) { tiny("qwen35-tiny", "bf16", "cases", 5, 1, KV_FP32); }
static void test_qwen35_bf16_chunked_kvbf16(void **st) { tiny("qwen35-tiny", "bf16", "cases", 5, 1, KV_BF16); }
/* bf16 activations, the default */
static void test_qwen3_bf16_act(void **st) { tiny_tol("qwen3-tiny", "bf16", "cases", 0, 1, ACT_BF16, BF16_TOL_QWEN3); }
static void test_qwen3_bf16_chunked_act(void **st) { tiny_tol("qwen3-tiny", "bf16", "cases", 7, 1, ACT_BF16, BF16_TOL_QWEN3); }
static void test_qwen3_q8_0_act(void **st) { tiny_tol("qwen3-tiny", "Q8_0", "cases_Q8_0", 0, 0, ACT_BF16, BF16_TOL_QWEN3); }
static void test_qwen3_q4_k_m_act(void **st) { tiny_tol("qwen3-tiny", "Q4_K_M", "cases_Q4_K_M", 0, 0, ACT_BF16, BF16_TOL_QWEN3); }
static void test_qwen3_q6_k_act(void **st) { tiny_tol("qwen3-tiny", "Q6_K", "cases_Q6_K", 0, 0, ACT_BF16, BF16_TOL_QWEN3); }
static void test_qwen35_bf16_act(void **st) { tiny_tol("qwen35-tiny", "bf16", "cases", 0, 1, ACT_BF16, BF16_TOL_QWEN35); }
static void test_qwen35_bf16_chunked_act(void **st) { tiny_tol("qwen35-tiny", "bf16", "cases", 5, 1, ACT_BF16, BF16_TOL_QWEN35); }

/* each case on the weights its reference ran on (gm_demo_model_for_case); a trained model:
 * top-1 on every row (all reference margins >= 0.05) */
static void demo(gmode_t mode) {
  need("demo Q4_K_M");
  set_mode(mode, 1);
  if (mode == ACT_BF16) gm_greedy_assert = 1;
  gm_backend_factory = cuda_factory;
  char l[64];
  snprintf(l, sizeof l, "cuda demo %s", mode_label(mode));
  gm_check_demo(l, mode == ACT_BF16 ? BF16_TOL_DEMO : GPU_TOL, 100);
  assert_int_equal(be_cuda_set_activations(NULL), 0);
}
/* the trained hybrid demo (tests/golden/demo35/): its three cases on the GPU, a trained model's bars
 * (top-1 on every row). Skipped when its files are not in the tree (a GPU call that left them out
 * to stay under the device tool's size limit: scripts/gpu/slim.sh). */
static void demo35(gmode_t mode) {
  need("demo35 Q4_K_M");
  char man_path[4096], rel[512], path[4096], l[64];
  snprintf(man_path, sizeof man_path, "%s", tu_golden("demo35/manifest.json"));
  json_t *man = access(man_path, R_OK) ? NULL : tu_json("demo35/manifest.json");
  if (man) {
    snprintf(rel, sizeof rel, "demo35/%s", json_string_value(json_object_get(man, "model")));
    snprintf(path, sizeof path, "%s", tu_golden(rel));
  }
  if (!man || access(path, R_OK)) {
    print_message("demo35: its manifest or model is absent, skipped\n");
    json_decref(man);
    skip();
  }
  set_mode(mode, 1);
  if (mode == ACT_BF16) gm_greedy_assert = 1;
  gm_backend_factory = cuda_factory;
  gm_rope_freq_bf16 = 0; /* its reference built the model in fp32 */
  snprintf(l, sizeof l, "cuda demo35 %s", mode_label(mode));
  gm_check_cases(path, json_object_get(man, "cases"), "demo35", 0, l, mode == ACT_BF16 ? BF16_TOL_DEMO : GPU_TOL, 100);
  json_decref(man);
  assert_int_equal(be_cuda_set_activations(NULL), 0);
}
static void test_demo35(void **st) { demo35(KV_FP32); }
static void test_demo35_act(void **st) { demo35(ACT_BF16); }
static void test_demo(void **st) { demo(KV_FP32); }
static void test_demo_kvbf16(void **st) { demo(KV_BF16); }
static void test_demo_act(void **st) { demo(ACT_BF16); }

int main(void) {
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_bf16),   cmocka_unit_test(test_qwen3_bf16_chunked),
      cmocka_unit_test(test_qwen3_q8_0),   cmocka_unit_test(test_qwen3_q4_k_m),
      cmocka_unit_test(test_qwen3_q6_k),   cmocka_unit_test(test_qwen35_bf16),
      cmocka_unit_test(test_qwen35_bf16_chunked), cmocka_unit_test(test_demo),
      cmocka_unit_test(test_qwen3_bf16_kvbf16),   cmocka_unit_test(test_qwen3_bf16_chunked_kvbf16),
      cmocka_unit_test(test_qwen3_q8_0_kvbf16),   cmocka_unit_test(test_qwen3_q4_k_m_kvbf16),
      cmocka_unit_test(test_qwen3_q6_k_kvbf16),   cmocka_unit_test(test_qwen35_bf16_kvbf16),
      cmocka_unit_test(test_qwen35_bf16_chunked_kvbf16), cmocka_unit_test(test_demo_kvbf16),
      cmocka_unit_test(test_qwen3_bf16_act),      cmocka_unit_test(test_qwen3_bf16_chunked_act),
      cmocka_unit_test(test_qwen3_q8_0_act),      cmocka_unit_test(test_qwen3_q4_k_m_act),
      cmocka_unit_test(test_qwen3_q6_k_act),      cmocka_unit_test(test_qwen35_bf16_act),
      cmocka_unit_test(test_qwen35_bf16_chunked_act), cmocka_unit_test(test_demo_act),
      cmocka_unit_test(test_demo35),              cmocka_unit_test(test_demo35_act),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
