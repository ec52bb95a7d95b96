/* Golden tests of the Qwen3 dense model on the CPU backend: qwen3-tiny in bf16, Q8_0, Q4_K_M and
 * Q6_K (four cases each) and the trained demo model (Q4_K_M with a tied Q6_K embedding; three
 * cases). CPU tolerance: max row relative error <= 1e-3 (tests/golden/README.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/common/golden_model.h"
#include "tests/common/testutil.h"

#define CPU_TOL 1e-3

static void tiny(const char *type, const char *cases_key, int chunk) {
  json_t *man = tu_json("manifest.json");
  json_t *mdl = json_object_get(json_object_get(man, "models"), "qwen3-tiny");
  const char *file = json_string_value(json_object_get(json_object_get(mdl, "gguf"), type));
  assert_non_null(file);
  char label[64];
  snprintf(label, sizeof label, "qwen3-tiny %s", type);
  /* the bf16 references were computed by transformers on the bf16 checkpoint, whose rotary
   * frequencies are bf16-rounded (the quantized ones ran an fp32 model: exact frequencies) */
  gm_rope_freq_bf16 = !strcmp(type, "bf16");
  char path[4096];
  snprintf(path, sizeof path, "%s", tu_golden(file));
  gm_check_cases(path, json_object_get(mdl, cases_key), "", chunk, label, CPU_TOL, 0);
  json_decref(man);
}

static void test_tiny_bf16(void **st) { tiny("bf16", "cases", 0); }
static void test_tiny_q8_0(void **st) { tiny("Q8_0", "cases_Q8_0", 0); }
static void test_tiny_q4_k_m(void **st) { tiny("Q4_K_M", "cases_Q4_K_M", 0); }
static void test_tiny_q6_k(void **st) { tiny("Q6_K", "cases_Q6_K", 0); }
/* chunked prefill must give the same logits as one pass */
static void test_tiny_bf16_chunked(void **st) { tiny("bf16", "cases", 7); }

/* The demo model's three cases, each on the weights its reference ran on (see
 * gm_demo_model_for_case: cases 1 and 2 were computed on bf16-rounded weights). */
static void test_demo(void **st) { gm_check_demo("demo", CPU_TOL, 0); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiny_bf16),  cmocka_unit_test(test_tiny_q8_0), cmocka_unit_test(test_tiny_q4_k_m),
      cmocka_unit_test(test_tiny_q6_k),  cmocka_unit_test(test_tiny_bf16_chunked), cmocka_unit_test(test_demo),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
