/* tests/unit/test_comm_nccl.c — the NCCL communicator's paths that run without a GPU
 * (nccl_comm_*, and the engine's be_comm_nccl_create / nccl_comm_load):
 * argument checks, and the clear errors of a build without NCCL (COMM_NCCL_STUB, or no nccl.h at
 * build time), of a libnccl that cannot be loaded, and of a machine with no visible GPU (the test
 * hides every GPU with CUDA_VISIBLE_DEVICES="" before the first CUDA call, so it behaves the same
 * on GPU machines). The GPU path is exercised by tools/bench/comm_bench.c (sum check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/comm_nccl.h"

/* runs `call` (which may use `err`) and checks its code and that its message contains text */
#define ASSERT_ERR(call, code, text)                     \
  do {                                                   \
    gt_err_t e_ = {0}, *err = &e_;                       \
    int rc_ = (call);                                    \
    print_message("%s -> %d %s\n", #call, rc_, e_.msg); \
    assert_int_equal(rc_, (code));                       \
    assert_non_null(strstr(e_.msg, (text)));             \
  } while (0)

static void test_method_names(void **state) {
  assert_string_equal(nccl_comm_method_name(NCCL_COMM_PLAIN), "plain");
  assert_string_equal(nccl_comm_method_name(NCCL_COMM_SYMMETRIC), "symmetric");
}

#if defined(COMM_NCCL_STUB) || !defined(GANTRY_HAVE_NCCL)

/* every entry point says the build has no NCCL; nothing crashes on the NULL handle */
static void test_built_without_nccl(void **state) {
  nccl_comm_t *c = (nccl_comm_t *)1;
  gt_err_t e = {0};
  assert_int_equal(nccl_comm_init_all(NULL, 2, &c, &e), GT_EUNSUPPORTED);
  assert_null(c);
  assert_string_equal(e.msg, "nccl: built without NCCL (nccl.h was not found at build time)");
  void *ptrs[2] = {0};
  float x = 1;
  gt_err_t e2 = {0}, e3 = {0}, e4 = {0};
  assert_int_equal(nccl_comm_buffers_alloc(NULL, 4096, NCCL_COMM_PLAIN, ptrs, &e2), GT_EUNSUPPORTED);
  assert_int_equal(nccl_comm_all_reduce(NULL, 0, &x, 1, GT_TYPE_F32, NULL, &e3), GT_EUNSUPPORTED);
  nccl_comm_t *none = NULL;
  assert_int_equal(nccl_comm_init_all(NULL, 1, &none, &e4), GT_EUNSUPPORTED);
  assert_non_null(strstr(e2.msg, "built without NCCL"));
  assert_non_null(strstr(e3.msg, "built without NCCL"));
  assert_non_null(strstr(e4.msg, "built without NCCL"));
  char d[64];
  assert_string_equal(nccl_comm_describe(NULL, d, sizeof d), "built without NCCL");
  assert_int_equal(nccl_comm_size(NULL), 0);
  nccl_comm_buffers_free(NULL, ptrs);
  assert_int_equal(nccl_comm_abort(NULL), GT_OK);
  nccl_comm_destroy(NULL);
  /* the engine's entry points (the CLI's "needs NCCL" error) */
  gt_err_t e5 = {0}, e6 = {0};
  assert_int_equal(nccl_comm_load(&e5), GT_EUNSUPPORTED);
  assert_non_null(strstr(e5.msg, "built without NCCL"));
  be_comm_t *bc = (be_comm_t *)1;
  assert_int_equal(be_comm_nccl_create(NULL, 1, &bc, &e6), GT_EUNSUPPORTED);
  assert_null(bc);
  assert_non_null(strstr(e6.msg, "built without NCCL"));
  assert_null(be_comm_nccl(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_method_names), cmocka_unit_test(test_built_without_nccl)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

/* bad clique shapes are refused before NCCL or CUDA is touched */
static void test_bad_arguments(void **state) {
  nccl_comm_t *c = (nccl_comm_t *)1;
  gt_err_t e = {0};
  assert_int_equal(nccl_comm_init_all(NULL, 0, &c, &e), GT_EINVAL);
  assert_null(c);
  assert_string_equal(e.msg, "nccl: 0 ranks (1..16)");
  ASSERT_ERR(nccl_comm_init_all(NULL, 17, &c, err), GT_EINVAL, "17 ranks");
  const int dup[3] = {0, 1, 0}, neg[2] = {0, -1};
  ASSERT_ERR(nccl_comm_init_all(dup, 3, &c, err), GT_EINVAL, "device 0 given to ranks 0 and 2");
  ASSERT_ERR(nccl_comm_init_all(neg, 2, &c, err), GT_EINVAL, "rank 1: device -1");
  float x = 0;
  ASSERT_ERR(nccl_comm_all_reduce(NULL, 0, &x, 1, GT_TYPE_F32, NULL, err), GT_EINVAL, "rank 0 of 0");
  assert_int_equal(nccl_comm_abort(NULL), GT_OK);
  nccl_comm_destroy(NULL);
  be_comm_t *bc = (be_comm_t *)1;
  ASSERT_ERR(be_comm_nccl_create(NULL, 0, &bc, err), GT_EINVAL, "nccl: 0 ranks");
  assert_null(bc);
  ASSERT_ERR(be_comm_nccl_create(dup, 3, &bc, err), GT_EINVAL, "device 0 given to ranks 0 and 2");
  assert_null(bc);
}

/* a GANTRY_NCCL_LIB that does not exist: the error names it (the failed load is not cached: the
 * next test loads the real one); NCCL_NVLS_ENABLE=0 is set before any load */
static void test_library_missing(void **state) {
  setenv("GANTRY_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  unsetenv("NCCL_NVLS_ENABLE");
  nccl_comm_t *c = NULL;
  ASSERT_ERR(nccl_comm_init_all(NULL, 1, &c, err), GT_EUNSUPPORTED,
             "nccl: cannot load NCCL from GANTRY_NCCL_LIB: /nonexistent/libnccl.so.2");
  assert_null(c);
  ASSERT_ERR(nccl_comm_load(err), GT_EUNSUPPORTED, "nccl: cannot load NCCL from GANTRY_NCCL_LIB: /nonexistent/libnccl.so.2");
  /* NVLS is turned off before NCCL is loaded (the operator's value would be kept) */
  assert_non_null(getenv("NCCL_NVLS_ENABLE"));
  assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
  unsetenv("GANTRY_NCCL_LIB");
}

/* no GPU visible: "no CUDA device visible" once libnccl loads (it does where CMake found it),
 * else the load error with its remedy */
static void test_no_gpu(void **state) {
  nccl_comm_t *c = (nccl_comm_t *)1;
  gt_err_t e = {0};
  assert_int_equal(nccl_comm_init_all(NULL, 2, &c, &e), GT_EUNSUPPORTED);
  assert_null(c);
  print_message("init_all with no GPU: %s\n", e.msg);
  if (strstr(e.msg, "cannot load NCCL"))
    assert_non_null(strstr(e.msg, "put libnccl.so.2 on LD_LIBRARY_PATH or set GANTRY_NCCL_LIB"));
  else
    assert_non_null(strstr(e.msg, "nccl: no CUDA device visible ("));
  /* the engine's communicator: the same error, nothing made */
  be_comm_t *bc = (be_comm_t *)1;
  gt_err_t e2 = {0};
  assert_int_equal(be_comm_nccl_create(NULL, 2, &bc, &e2), GT_EUNSUPPORTED);
  assert_null(bc);
  assert_string_equal(e2.msg, e.msg);
}

int main(void) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1); /* before the first CUDA call */
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_method_names), cmocka_unit_test(test_bad_arguments),
                                     cmocka_unit_test(test_library_missing), cmocka_unit_test(test_no_gpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
