/* tests/unit/test_dtype_rows.c — dt_dot_rows must be bit-identical, row by row, to dt_dot_row with
 * the same kernel set: every computable type, both kernel sets, 1..33 rows, several lengths
 * (block tails for the per-element types), padded x rows, strided outputs, unaligned weight
 * rows, and the real weight rows of the fixture GGUFs. Compared with memcmp of the floats. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "tests/common/testutil.h"

static const gt_type_t k_comp[] = {GT_TYPE_F32,  GT_TYPE_F16,  GT_TYPE_BF16, GT_TYPE_Q8_0,
                                   GT_TYPE_Q4_K, GT_TYPE_Q5_K, GT_TYPE_Q6_K};
#define N_COMP (sizeof k_comp / sizeof k_comp[0])
#define MAX_ROWS 33

static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}
static float rndf(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); } /* [-1, 1) */

static void put_h(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }
static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Random row of n elements of type t with finite scales (quants are raw random bytes). */
static void random_row(gt_type_t t, uint8_t *w, int64_t n) {
  size_t bytes = dt_row_bytes(t, n), bb = dt_block_bytes(t);
  for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
  for (int64_t b = 0; b < n / dt_block_elems(t); b++) {
    uint8_t *p = w + b * bb;
    switch (t) {
      case GT_TYPE_F32: { float f = rndf() * 4; memcpy(p, &f, 4); break; }
      case GT_TYPE_F16: put_h(p, dt_f32_to_f16(rndf() * 4)); break;
      case GT_TYPE_BF16: put_h(p, dt_f32_to_bf16(rndf() * 4)); break;
      case GT_TYPE_Q8_0: put_h(p, dt_f32_to_f16(rndf() * 0.02f)); break;
      case GT_TYPE_Q4_K: case GT_TYPE_Q5_K:
        put_h(p, dt_f32_to_f16(fabsf(rndf()) * 0.01f));
        put_h(p + 2, dt_f32_to_f16(rndf() * 0.01f));
        break;
      case GT_TYPE_Q6_K: put_h(p + 208, dt_f32_to_f16(rndf() * 0.01f)); break;
      default: break;
    }
  }
}

/* The kernel sets this machine can run (portable always; AVX2 when the CPU has it). */
static int isas(dt_isa_t out[2]) {
  int k = 0;
  out[k++] = DT_ISA_PORTABLE;
  if (dt_set_isa(DT_ISA_AVX2) == DT_ISA_AVX2) out[k++] = DT_ISA_AVX2;
  dt_set_isa(DT_ISA_AUTO);
  return k;
}

/* For rows = 1..max_rows: dt_dot_rows over the first `rows` rows of x (x_ld floats apart) into
 * out (stride os) must equal dt_dot_row on each row, bit for bit. Fails with the first mismatch. */
static void check_rows(gt_type_t t, const uint8_t *w, const float *x, size_t x_ld, int64_t n, int max_rows,
                       size_t os, const char *what) {
  float want[MAX_ROWS];
  float *out = malloc(sizeof(float) * (size_t)MAX_ROWS * os + sizeof(float));
  assert_non_null(out);
  for (int r = 0; r < max_rows; r++) want[r] = dt_dot_row(t, w, x + (size_t)r * x_ld, n);
  for (int rows = 1; rows <= max_rows; rows++) {
    for (size_t i = 0; i < (size_t)MAX_ROWS * os + 1; i++) out[i] = -12345.0f; /* sentinel */
    dt_dot_rows(t, w, x, x_ld, rows, n, out, os);
    for (int r = 0; r < rows; r++) {
      if (memcmp(&out[(size_t)r * os], &want[r], sizeof(float)) != 0)
        fail_msg("%s %s isa=%s n=%lld rows=%d x_ld=%zu os=%zu: row %d got %.9g (0x%08x) want %.9g (0x%08x)",
                 what, dt_name(t), dt_isa_name(dt_get_isa()), (long long)n, rows, x_ld, os, r,
                 out[(size_t)r * os], fbits(out[(size_t)r * os]), want[r],
                 fbits(want[r]));
    }
    /* nothing written outside the outputs */
    for (size_t i = 0; i < (size_t)MAX_ROWS * os + 1; i++) {
      int is_out = i % os == 0 && i / os < (size_t)rows;
      if (!is_out && out[i] != -12345.0f) fail_msg("%s %s rows=%d: wrote out[%zu]", what, dt_name(t), rows, i);
    }
  }
  free(out);
}

/* Random rows: per type, lengths covering one block, several blocks and (F32/F16/BF16) the
 * kernels' vector tails; x rows packed (x_ld = n) and padded (x_ld = n + 5); outputs packed
 * and strided; weight rows at even and odd addresses. */
static void test_rows_random(void **state) {
  (void)state;
  dt_isa_t set[2];
  int nisa = isas(set);
  static const int64_t len_el[] = {1, 5, 15, 16, 17, 31, 33, 100, 256, 259, 512, 1000};
  static const int64_t len_q8[] = {32, 64, 96, 288, 1024};
  static const int64_t len_k[] = {256, 512, 768, 1536};
  int checked = 0;
  for (int ii = 0; ii < nisa; ii++) {
    assert_int_equal(dt_set_isa(set[ii]), set[ii]);
    for (size_t ti = 0; ti < N_COMP; ti++) {
      gt_type_t t = k_comp[ti];
      const int64_t *lens = dt_block_elems(t) == 1 ? len_el : dt_block_elems(t) == 32 ? len_q8 : len_k;
      size_t nl = dt_block_elems(t) == 1 ? sizeof len_el / sizeof len_el[0]
                  : dt_block_elems(t) == 32 ? sizeof len_q8 / sizeof len_q8[0]
                                            : sizeof len_k / sizeof len_k[0];
      for (size_t li = 0; li < nl; li++) {
        int64_t n = lens[li];
        size_t rb = dt_row_bytes(t, n);
        uint8_t *buf = malloc(rb + 1);
        size_t ld = (size_t)n + (li % 2 ? 5 : 0);
        float *x = malloc(sizeof(float) * ld * MAX_ROWS);
        assert_non_null(buf);
        assert_non_null(x);
        uint8_t *w = buf + (li % 3 == 2 ? 1 : 0);
        random_row(t, w, n);
        for (size_t i = 0; i < ld * MAX_ROWS; i++) x[i] = rndf();
        check_rows(t, w, x, ld, n, MAX_ROWS, li % 2 ? 1 : 3, "random");
        checked++;
        free(x);
        free(buf);
      }
    }
  }
  dt_set_isa(DT_ISA_AUTO);
  printf("dt_dot_rows: %d (type, isa, length) cases x rows 1..%d bit-identical\n", checked, MAX_ROWS);
}

/* Real weight rows: for each fixture GGUF and each computable 2-D tensor type in it, the first
 * tensor of that type, its first and last rows, against 33 random x rows. */
static void test_rows_fixtures(void **state) {
  (void)state;
  static const char *files[] = {"qwen3-tiny.Q4_K_M.gguf", "qwen3-tiny.Q6_K.gguf", "qwen3-tiny.Q8_0.gguf",
                                "qwen3-tiny.bf16.gguf", "qwen35-tiny.bf16.gguf"};
  dt_isa_t set[2];
  int nisa = isas(set);
  int seen[GT_TYPE_COUNT] = {0};
  int checked = 0;
  for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
    gguf_t *g = NULL;
    gt_err_t err = {0};
    if (gguf_open(tu_golden(files[fi]), &g, &err) != GT_OK) fail_msg("open %s: %s", files[fi], err.msg);
    int done[GT_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
      const gguf_tensor_t *tn = gguf_tensor(g, i);
      assert_non_null(tn);
      gt_type_t t = (gt_type_t)tn->type;
      if (!dt_computable(t) || done[t] || tn->ne[1] < 2) continue;
      done[t] = seen[t] = 1;
      int64_t n = tn->ne[0];
      size_t rb = dt_row_bytes(t, n);
      float *x = malloc(sizeof(float) * (size_t)n * MAX_ROWS);
      assert_non_null(x);
      for (size_t k = 0; k < (size_t)n * MAX_ROWS; k++) x[k] = rndf();
      int64_t pick[2] = {0, tn->ne[1] - 1};
      for (int ii = 0; ii < nisa; ii++) {
        assert_int_equal(dt_set_isa(set[ii]), set[ii]);
        for (int p = 0; p < 2; p++) {
          check_rows(t, (const uint8_t *)tn->data + (size_t)pick[p] * rb, x, (size_t)n, n, MAX_ROWS, 1, files[fi]);
          checked++;
        }
      }
      free(x);
    }
    gguf_close(g);
  }
  dt_set_isa(DT_ISA_AUTO);
  /* the fixtures hold these types (and F32 norms are 1-D): make sure they were all exercised */
  assert_true(seen[GT_TYPE_Q4_K] && seen[GT_TYPE_Q6_K] && seen[GT_TYPE_Q8_0] && seen[GT_TYPE_BF16]);
  printf("dt_dot_rows: %d fixture rows x rows 1..%d bit-identical\n", checked, MAX_ROWS);
}

/* rows <= 0 writes nothing; a non-computable type or a length that is not a multiple of the
 * block writes NAN everywhere (dt_dot_row returns NAN). */
static void test_rows_edges(void **state) {
  (void)state;
  uint8_t w[144 * 2] = {0};
  float x[512 * 3] = {0}, out[40];
  for (int i = 0; i < 40; i++) out[i] = 7.0f;
  dt_dot_rows(GT_TYPE_Q4_K, w, x, 512, 0, 512, out, 1);
  dt_dot_rows(GT_TYPE_Q4_K, w, x, 512, -3, 512, out, 1);
  for (int i = 0; i < 40; i++) assert_true(out[i] == 7.0f);
  dt_dot_rows(GT_TYPE_Q4_0, w, x, 512, 3, 512, out, 2);
  for (int i = 0; i < 6; i++) assert_true(i % 2 ? out[i] == 7.0f : isnan(out[i]));
  for (int i = 0; i < 40; i++) out[i] = 7.0f;
  dt_dot_rows(GT_TYPE_Q4_K, w, x, 512, 3, 300, out, 1);
  for (int i = 0; i < 3; i++) assert_true(isnan(out[i]));
  assert_true(out[3] == 7.0f);
  /* zero weights give exact zeros */
  dt_dot_rows(GT_TYPE_Q4_K, w, x, 512, 3, 512, out, 1);
  for (int i = 0; i < 3; i++) assert_true(out[i] == 0.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_random),
      cmocka_unit_test(test_rows_fixtures),
      cmocka_unit_test(test_rows_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
