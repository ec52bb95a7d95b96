/* tests/unit/test_comm_bench_skip.c — bench_comm (tools/bench/comm_bench.c) on a machine with no
 * visible GPU (every GPU hidden with CUDA_VISIBLE_DEVICES="", so GPU machines behave the same):
 * it must skip with exit 77 (the project's skip code) and say why, never crash or report numbers;
 * bad arguments exit 2 with the usage line before any CUDA call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/common/testutil.h"

/* runs bench_comm ARGS with no GPU visible; returns the exit status, *out: stdout + stderr */
static int run_bench(const char *args, char **out) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "CUDA_VISIBLE_DEVICES= '%s' %s 2>&1", tu_bin("bench_comm"), args);
  int rc = tu_run(cmd, out);
  print_message("bench_comm %s -> %d:\n%s", args, rc, *out);
  return rc;
}

static void test_skips_without_gpu(void **state) {
  char *out = NULL;
  assert_int_equal(run_bench("", &out), 77);
  assert_non_null(strstr(out, "bench_comm: no CUDA device visible ("));
  assert_non_null(strstr(out, "): skipped"));
  assert_null(strstr(out, "| N |")); /* no table */
  free(out);
  assert_int_equal(run_bench("--tp 2 --min 8192 --max 8192 --methods symmetric --dtypes bf16", &out), 77);
  assert_non_null(strstr(out, "skipped"));
  free(out);
}

static void test_bad_arguments(void **state) {
  const char *bad[] = {"--tp 0", "--tp 1,x", "--tp 17", "--min 3000", "--min 8192 --max 4096", "--iters 0",
                       "--methods plain,plain", "--methods nvls", "--dtypes f16", "--tp", "--frobnicate 1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *out = NULL;
    assert_int_equal(run_bench(bad[i], &out), 2);
    assert_non_null(strstr(out, "usage: bench_comm"));
    free(out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_skips_without_gpu), cmocka_unit_test(test_bad_arguments)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
