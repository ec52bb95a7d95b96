/* tests/unit/test_gguf_write.c — the streaming GGUF writer against the reader: every value
 * type and array kind round-trips; tensors written in pieces read back equal at aligned
 * offsets; order / size / duplicate / disk-full errors are values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "format/gguf_write.h"
#include "tests/common/testutil.h"

static char g_path[256];

static void test_roundtrip(void **state) {
  (void)state;
  snprintf(g_path, sizeof g_path, "/tmp/gantry_test_gguf_write_%d.gguf", (int)getpid());
  gt_err_t err = {0};
  gw_t *w = NULL;
  assert_int_equal(gw_create(g_path, &w, &err), GT_OK);
  assert_int_equal(gw_kv_u32(w, "general.alignment", 64, &err), GT_OK);
  assert_int_equal(gw_kv_u8(w, "t.u8", 200, &err), GT_OK);
  assert_int_equal(gw_kv_i8(w, "t.i8", -100, &err), GT_OK);
  assert_int_equal(gw_kv_u16(w, "t.u16", 60000, &err), GT_OK);
  assert_int_equal(gw_kv_i16(w, "t.i16", -30000, &err), GT_OK);
  assert_int_equal(gw_kv_u32(w, "t.u32", 4000000000u, &err), GT_OK);
  assert_int_equal(gw_kv_i32(w, "t.i32", -2000000000, &err), GT_OK);
  assert_int_equal(gw_kv_u64(w, "t.u64", 1ull << 62, &err), GT_OK);
  assert_int_equal(gw_kv_i64(w, "t.i64", -(1ll << 62), &err), GT_OK);
  assert_int_equal(gw_kv_f32(w, "t.f32", 1.5e-6f, &err), GT_OK);
  assert_int_equal(gw_kv_f64(w, "t.f64", 3.141592653589793, &err), GT_OK);
  assert_int_equal(gw_kv_bool(w, "t.bool", 1, &err), GT_OK);
  assert_int_equal(gw_kv_str(w, "t.str", "héllo\0x", 8, &err), GT_OK); /* embedded NUL kept */
  int32_t ai[5] = {1, -2, 3, -4, 5};
  float af[3] = {0.5f, -1.25f, 1e10f};
  uint8_t ab[2] = {1, 0};
  assert_int_equal(gw_kv_arr(w, "t.arr_i32", GGUF_VT_INT32, ai, 5, &err), GT_OK);
  assert_int_equal(gw_kv_arr(w, "t.arr_f32", GGUF_VT_FLOAT32, af, 3, &err), GT_OK);
  assert_int_equal(gw_kv_arr(w, "t.arr_bool", GGUF_VT_BOOL, ab, 2, &err), GT_OK);
  assert_int_equal(gw_kv_arr(w, "t.arr_empty", GGUF_VT_UINT64, NULL, 0, &err), GT_OK);
  const char *strs[3] = {"a", "", "Ġthe"};
  assert_int_equal(gw_kv_arr_str(w, "t.arr_str", strs, NULL, 3, &err), GT_OK);
  /* duplicate key, bad element type */
  assert_int_equal(gw_kv_u32(w, "t.u32", 1, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "t.u32"));
  assert_int_equal(gw_kv_arr(w, "t.bad", GGUF_VT_STRING, ai, 1, &err), GT_EINVAL);
  assert_int_equal(gw_kv_u32(w, "general.alignment2", 3, &err), GT_OK); /* not the alignment key */
  /* a failed string array leaves no trace: the key can be added again */
  const char *bad_strs[2] = {"x", NULL};
  assert_int_equal(gw_kv_arr_str(w, "t.rolled_back", bad_strs, NULL, 2, &err), GT_EINVAL);
  assert_int_equal(gw_kv_arr_str_begin(w, "t.rolled_back", 2, &err), GT_OK);
  assert_int_equal(gw_kv_u32(w, "t.in_between", 1, &err), GT_EINVAL); /* array still open */
  assert_int_equal(gw_kv_arr_str_add(w, "x", 1, &err), GT_OK);
  assert_int_equal(gw_kv_arr_str_add(w, NULL, 3, &err), GT_EINVAL);
  assert_int_equal(gw_has_key(w, "t.rolled_back"), 0);
  assert_int_equal(gw_kv_u32(w, "general.alignment", 16, &err), GT_EINVAL); /* duplicate key */
  assert_int_equal(gw_alignment(w), 64);
  assert_int_equal(gw_n_kv(w), 19);

  /* tensors: F32 [3, 2] (24 bytes), Q8_0 [64, 3] (204 bytes), BF16 [5] */
  const int64_t ne_a[2] = {3, 2}, ne_b[2] = {64, 3}, ne_c[1] = {5};
  assert_int_equal(gw_tensor(w, "a", 2, ne_a, GT_TYPE_F32, &err), GT_OK);
  assert_int_equal(gw_tensor(w, "b.weight", 2, ne_b, GT_TYPE_Q8_0, &err), GT_OK);
  assert_int_equal(gw_tensor(w, "c", 1, ne_c, GT_TYPE_BF16, &err), GT_OK);
  assert_int_equal(gw_tensor(w, "a", 2, ne_a, GT_TYPE_F32, &err), GT_EINVAL);      /* duplicate */
  const int64_t ne_bad[1] = {33};
  assert_int_equal(gw_tensor(w, "d", 1, ne_bad, GT_TYPE_Q8_0, &err), GT_EINVAL);   /* not blocks */
  assert_int_equal(gw_tensor_offset(w, 1), 64u);
  assert_int_equal(gw_tensor_offset(w, 2), 64u + 256u);
  assert_int_equal(gw_data_bytes(w), 64u + 256u + 64u);
  /* data before the header is an error */
  float fa[6] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(gw_write(w, fa, 4, &err), GT_EINVAL);
  uint64_t header = gw_header_bytes(w);
  assert_int_equal(header % 64, 0);
  assert_int_equal(gw_begin_data(w, &err), GT_OK);
  assert_int_equal(gw_kv_u32(w, "late", 1, &err), GT_EINVAL); /* metadata after data */
  /* tensor a in two pieces; a piece crossing into b is refused */
  assert_int_equal(gw_write(w, fa, 8, &err), GT_OK);
  assert_int_equal(gw_write(w, (uint8_t *)fa + 8, 24, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "tensor a"));
  assert_int_equal(gw_write(w, (uint8_t *)fa + 8, 16, &err), GT_OK);
  assert_int_equal(gw_current_tensor(w), 1);
  uint8_t qb[204];
  for (int i = 0; i < 204; i++) qb[i] = (uint8_t)(i * 7);
  for (int i = 0; i < 204; i += 17) assert_int_equal(gw_write(w, qb + i, 17, &err), GT_OK);
  uint16_t bc[5] = {0x3f80, 0x4000, 0xbf80, 0, 0x7f80};
  /* finishing early reports the incomplete tensor (and consumes the writer) */
  gw_t *w2 = NULL;
  char unfinished[256]; /* per process: two test runs at once must not share it */
  snprintf(unfinished, sizeof unfinished, "/tmp/gantry_test_gguf_write_unfinished_%d.gguf", (int)getpid());
  assert_int_equal(gw_create(unfinished, &w2, &err), GT_OK);
  assert_int_equal(gw_tensor(w2, "x", 1, ne_c, GT_TYPE_BF16, &err), GT_OK);
  assert_int_equal(gw_begin_data(w2, &err), GT_OK);
  assert_int_equal(gw_finish(w2, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "incomplete"));
  unlink(unfinished);
  assert_int_equal(gw_write(w, bc, 10, &err), GT_OK);
  assert_int_equal(gw_write(w, bc, 1, &err), GT_EINVAL); /* past the last tensor */
  assert_int_equal(gw_finish(w, &err), GT_OK);

  gguf_t *g = NULL;
  int rc = gguf_open(g_path, &g, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, GT_OK);
  assert_int_equal(gguf_version(g), 3);
  assert_int_equal(gguf_alignment(g), 64);
  assert_int_equal(gguf_data_offset(g), header);
  assert_int_equal(gguf_file_size(g), header + 64 + 256 + 64);
  assert_int_equal(gguf_n_kv(g), 19);
  int64_t iv;
  double dv;
  int bv;
  static const struct { const char *k; int64_t v; gguf_vtype_t t; } ints[] = {
      {"t.u8", 200, GGUF_VT_UINT8}, {"t.i8", -100, GGUF_VT_INT8}, {"t.u16", 60000, GGUF_VT_UINT16},
      {"t.i16", -30000, GGUF_VT_INT16}, {"t.u32", 4000000000ll, GGUF_VT_UINT32},
      {"t.i32", -2000000000ll, GGUF_VT_INT32}, {"t.u64", 1ll << 62, GGUF_VT_UINT64},
      {"t.i64", -(1ll << 62), GGUF_VT_INT64}, {"general.alignment", 64, GGUF_VT_UINT32}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    assert_int_equal(gguf_get_int(g, ints[i].k, &iv), GT_OK);
    assert_true(iv == ints[i].v);
    assert_int_equal(gguf_kv_type(g, gguf_find_key(g, ints[i].k)), ints[i].t);
  }
  assert_int_equal(gguf_get_float(g, "t.f32", &dv), GT_OK);
  assert_true((float)dv == 1.5e-6f);
  assert_int_equal(gguf_get_float(g, "t.f64", &dv), GT_OK);
  assert_true(dv == 3.141592653589793);
  assert_int_equal(gguf_get_bool(g, "t.bool", &bv), GT_OK);
  assert_int_equal(bv, 1);
  const char *s;
  size_t len;
  assert_int_equal(gguf_get_str(g, "t.str", &s, &len), GT_OK);
  assert_int_equal(len, 8);
  assert_memory_equal(s, "héllo\0x", 8);
  gguf_vtype_t et;
  uint64_t n;
  assert_int_equal(gguf_get_arr(g, "t.arr_i32", &et, &n), GT_OK);
  assert_int_equal(et, GGUF_VT_INT32);
  assert_int_equal(n, 5);
  assert_memory_equal(gguf_arr_data(g, "t.arr_i32"), ai, sizeof ai);
  assert_int_equal(gguf_get_arr(g, "t.arr_f32", &et, &n), GT_OK);
  assert_memory_equal(gguf_arr_data(g, "t.arr_f32"), af, sizeof af);
  assert_int_equal(gguf_get_arr(g, "t.arr_bool", &et, &n), GT_OK);
  assert_int_equal(et, GGUF_VT_BOOL);
  assert_int_equal(gguf_get_arr(g, "t.arr_empty", &et, &n), GT_OK);
  assert_int_equal(n, 0);
  assert_int_equal(gguf_get_arr(g, "t.arr_str", &et, &n), GT_OK);
  assert_int_equal(et, GGUF_VT_STRING);
  assert_int_equal(n, 3);
  for (uint64_t i = 0; i < 3; i++) {
    assert_int_equal(gguf_arr_str(g, "t.arr_str", i, &s, &len), GT_OK);
    assert_int_equal(len, strlen(strs[i]));
    assert_memory_equal(s, strs[i], len);
  }
  assert_int_equal(gguf_n_tensors(g), 3);
  const gguf_tensor_t *ta = gguf_find_tensor(g, "a"), *tb = gguf_find_tensor(g, "b.weight"),
                      *tc = gguf_find_tensor(g, "c");
  assert_non_null(ta);
  assert_non_null(tb);
  assert_non_null(tc);
  assert_int_equal(ta->n_dims, 2);
  assert_int_equal(ta->ne[0], 3);
  assert_int_equal(ta->ne[1], 2);
  assert_int_equal(tb->type, GT_TYPE_Q8_0);
  assert_int_equal(tb->offset, 64);
  assert_int_equal(tc->offset, 320);
  assert_memory_equal(ta->data, fa, 24);
  assert_memory_equal(tb->data, qb, 204);
  assert_memory_equal(tc->data, bc, 10);
  assert_int_equal((uintptr_t)tb->data % 64, (uintptr_t)ta->data % 64);
  gguf_close(g);
  unlink(g_path);
}

static void test_layout_only_and_errors(void **state) {
  (void)state;
  gt_err_t err = {0};
  gw_t *w = NULL;
  assert_int_equal(gw_create(NULL, &w, &err), GT_OK);
  const int64_t ne[2] = {256, 4};
  assert_int_equal(gw_tensor(w, "q", 2, ne, GT_TYPE_Q4_K, &err), GT_OK);
  assert_int_equal(gw_tensor_nbytes(w, 0), 4 * 144);
  assert_int_equal(gw_begin_data(w, &err), GT_EINVAL); /* no file */
  assert_int_equal(gw_kv_u32(w, "general.alignment", 48, &err), GT_EINVAL);
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[79] = 0;
  assert_int_equal(gw_tensor(w, longname, 2, ne, GT_TYPE_F32, &err), GT_EINVAL);
  gw_free(w);
  assert_int_equal(gw_create("/nonexistent/dir/x.gguf", &w, &err), GT_EIO);
  assert_null(w);

  /* disk full: /dev/full accepts the open and fails every write */
  if (access("/dev/full", W_OK) == 0) {
    assert_int_equal(gw_create("/dev/full", &w, &err), GT_OK);
    static uint8_t big[1 << 16];
    const int64_t ne1[1] = {(int64_t)sizeof big * 40};
    assert_int_equal(gw_tensor(w, "big", 1, ne1, GT_TYPE_I8, &err), GT_OK);
    int rc = gw_begin_data(w, &err);
    for (int i = 0; i < 40 && rc == GT_OK; i++) rc = gw_write(w, big, sizeof big, &err);
    if (rc == GT_OK) rc = gw_finish(w, &err);
    else gw_free(w);
    assert_int_equal(rc, GT_EIO);
    assert_non_null(strstr(err.msg, "/dev/full"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_layout_only_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
