/* tests/unit/test_dtype.c — type table, half conversions, dequantization against gguf-py's
 * fixtures, and dt_dot_row (both kernel sets) against dequant-then-dot. */
#include <float.h>
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

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ------------------------------------------------------------ type table */

static void test_type_table(void **state) {
  (void)state;
  /* (id, block elems, block bytes) as in gguf-py's GGML_QUANT_SIZES */
  static const struct { int t; int64_t be; size_t bb; const char *name; } ref[] = {
      {0, 1, 4, "F32"},       {1, 1, 2, "F16"},         {2, 32, 18, "Q4_0"},
      {3, 32, 20, "Q4_1"},    {6, 32, 22, "Q5_0"},      {7, 32, 24, "Q5_1"},
      {8, 32, 34, "Q8_0"},    {9, 32, 36, "Q8_1"},      {10, 256, 84, "Q2_K"},
      {11, 256, 110, "Q3_K"}, {12, 256, 144, "Q4_K"},   {13, 256, 176, "Q5_K"},
      {14, 256, 210, "Q6_K"}, {15, 256, 292, "Q8_K"},   {16, 256, 66, "IQ2_XXS"},
      {17, 256, 74, "IQ2_XS"},{18, 256, 98, "IQ3_XXS"}, {19, 256, 50, "IQ1_S"},
      {20, 32, 18, "IQ4_NL"}, {21, 256, 110, "IQ3_S"},  {22, 256, 82, "IQ2_S"},
      {23, 256, 136, "IQ4_XS"},{24, 1, 1, "I8"},        {25, 1, 2, "I16"},
      {26, 1, 4, "I32"},      {27, 1, 8, "I64"},        {28, 1, 8, "F64"},
      {29, 256, 56, "IQ1_M"}, {30, 1, 2, "BF16"},       {34, 256, 54, "TQ1_0"},
      {35, 256, 66, "TQ2_0"}, {39, 32, 17, "MXFP4"},
  };
  int nknown = 0;
  for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
    gt_type_t t = (gt_type_t)ref[i].t;
    assert_true(dt_known(ref[i].t));
    assert_int_equal(dt_block_elems(t), ref[i].be);
    assert_int_equal(dt_block_bytes(t), ref[i].bb);
    assert_string_equal(dt_name(t), ref[i].name);
    assert_int_equal(dt_from_name(ref[i].name), ref[i].t);
  }
  for (int t = -3; t < GT_TYPE_COUNT + 5; t++) nknown += dt_known(t);
  assert_int_equal(nknown, (int)(sizeof ref / sizeof ref[0]));
  /* removed ggml ids are not types */
  static const int gone[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, -1};
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
    assert_false(dt_known(gone[i]));
    assert_string_equal(dt_name((gt_type_t)gone[i]), "?");
    assert_int_equal(dt_block_elems((gt_type_t)gone[i]), 0);
  }
  assert_int_equal(dt_from_name("q4_k"), GT_TYPE_Q4_K);
  assert_int_equal(dt_from_name("bf16"), GT_TYPE_BF16);
  assert_int_equal(dt_from_name("Q4_K_M"), -1);
  assert_int_equal(dt_from_name(""), -1);

  assert_int_equal(dt_row_bytes(GT_TYPE_Q4_K, 4096), 16 * 144);
  assert_int_equal(dt_row_bytes(GT_TYPE_Q8_0, 64), 68);
  assert_int_equal(dt_row_bytes(GT_TYPE_F32, 3), 12);
  assert_int_equal(dt_row_bytes(GT_TYPE_Q4_K, 100), 0);
  assert_int_equal(dt_row_bytes(GT_TYPE_Q8_0, -32), 0);
  assert_int_equal(dt_row_bytes((gt_type_t)4, 32), 0);
  assert_int_equal(dt_row_bytes(GT_TYPE_F64, INT64_MAX), 0); /* 8 * (2^63-1) overflows size_t */
  assert_int_equal(dt_row_bytes(GT_TYPE_Q6_K, INT64_MAX / 256 * 256), (size_t)(INT64_MAX / 256) * 210);

  static const gt_type_t comp[] = {GT_TYPE_F32, GT_TYPE_F16, GT_TYPE_BF16, GT_TYPE_Q8_0,
                                   GT_TYPE_Q4_K, GT_TYPE_Q5_K, GT_TYPE_Q6_K};
  int ncomp = 0;
  for (int t = 0; t < GT_TYPE_COUNT; t++) ncomp += dt_computable((gt_type_t)t);
  assert_int_equal(ncomp, 7);
  for (size_t i = 0; i < 7; i++) assert_true(dt_computable(comp[i]));
  float out[256];
  uint8_t blk[256] = {0};
  assert_int_equal(dt_dequant_row(GT_TYPE_Q4_0, blk, out, 32), GT_EUNSUPPORTED);
  assert_int_equal(dt_dequant_row(GT_TYPE_Q8_0, blk, out, 33), GT_EINVAL);
  assert_true(isnan(dt_dot_row(GT_TYPE_Q3_K, blk, out, 256)));
}

/* ------------------------------------------------------------ half conversions */

/* Value of half h computed independently with ldexp (finite values only). */
static double half_ref(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (h & 0x8000) ? -v : v;
}

static void test_f16_all_values(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = dt_f16_to_f32((uint16_t)h);
    int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31 && m) {
      assert_true(isnan(f));
      assert_true(isnan(dt_f16_to_f32(dt_f32_to_f16(f))));
      assert_int_equal(dt_f32_to_f16(f) & 0x8000, h & 0x8000);
      continue;
    }
    if (e == 31) {
      assert_true(isinf(f));
      assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
    } else {
      if ((double)f != half_ref((uint16_t)h)) fail_msg("f16 0x%04x -> %a, want %a", h, f, half_ref((uint16_t)h));
      assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0); /* -0 stays -0 */
    }
    if (dt_f32_to_f16(f) != h) fail_msg("f16 round trip 0x%04x -> %a -> 0x%04x", h, f, dt_f32_to_f16(f));
  }
}

/* Rounding: the midpoint of two neighbouring halves goes to the even one, anything a float ulp
 * off the midpoint to the nearer one. Covers subnormals, the normal range and overflow (the
 * neighbour of 65504 is 65536 = inf, so 65520 rounds to inf, like IEEE and ggml). */
static void test_f16_rounding(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x7c00; h++) {
    for (int s = 0; s < 2; s++) {
      uint16_t lo = (uint16_t)(h | (s ? 0x8000 : 0)), hi = (uint16_t)(lo + 1);
      double vlo = half_ref(lo), vhi = (h + 1 == 0x7c00) ? (s ? -65536.0 : 65536.0) : half_ref(hi);
      float mid = (float)((vlo + vhi) / 2); /* exact: 12 significant bits */
      assert_true((double)mid == (vlo + vhi) / 2);
      uint16_t even = (lo & 1) ? hi : lo;
      if (dt_f32_to_f16(mid) != even) fail_msg("f32 %a -> 0x%04x, want 0x%04x", mid, dt_f32_to_f16(mid), even);
      float below = nextafterf(mid, (float)vlo), above = nextafterf(mid, (float)vhi);
      if (dt_f32_to_f16(below) != lo) fail_msg("f32 %a -> 0x%04x, want 0x%04x", below, dt_f32_to_f16(below), lo);
      if (dt_f32_to_f16(above) != hi) fail_msg("f32 %a -> 0x%04x, want 0x%04x", above, dt_f32_to_f16(above), hi);
    }
  }
  assert_int_equal(dt_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(dt_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(dt_f32_to_f16(1e30f), 0x7c00);
  assert_int_equal(dt_f32_to_f16(-FLT_MAX), 0xfc00);
  assert_int_equal(dt_f32_to_f16(1e-30f), 0x0000);
  assert_int_equal(dt_f32_to_f16(-1e-30f), 0x8000);
  assert_int_equal(dt_f32_to_f16(bitsf(1)), 0x0000);   /* float subnormal */
  assert_int_equal(dt_f32_to_f16(0x1p-25f), 0x0000);   /* tie -> even (0) */
  assert_int_equal(dt_f32_to_f16(0x1.000002p-25f), 0x0001);
  assert_int_equal(dt_f32_to_f16(0x3p-25f), 0x0002);   /* 1.5 * 2^-24: tie -> even (2) */
  assert_int_equal(dt_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(dt_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(dt_f32_to_f16(NAN) & 0x7e00, 0x7e00);
}

static void test_bf16(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = dt_bf16_to_f32((uint16_t)h);
    assert_int_equal(fbits(f), h << 16);
    uint16_t back = dt_f32_to_bf16(f);
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
      assert_true(isnan(dt_bf16_to_f32(back))); /* nan stays nan (quieted) */
      assert_int_equal(back & 0x8040, (h & 0x8000) | 0x40);
    } else if (back != h) {
      fail_msg("bf16 round trip 0x%04x -> 0x%04x", h, back);
    }
  }
  /* round to nearest even, subnormals kept (current ggml), overflow to inf */
  for (uint32_t h = 0; h < 0x7f80; h++) {
    uint32_t lo = h << 16, mid = lo | 0x8000;
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    assert_int_equal(dt_f32_to_bf16(bitsf(mid)), even);
    assert_int_equal(dt_f32_to_bf16(bitsf(mid - 1)), h);
    assert_int_equal(dt_f32_to_bf16(bitsf(mid + 1)), h + 1);
    assert_int_equal(dt_f32_to_bf16(bitsf(mid | 0x80000000u)), even | 0x8000);
  }
  assert_int_equal(dt_f32_to_bf16(FLT_MAX), 0x7f80);
  assert_int_equal(dt_f32_to_bf16(-INFINITY), 0xff80);
  assert_int_equal(dt_f32_to_bf16(bitsf(0x00010000u)), 0x0001); /* smallest subnormal bf16 */
  assert_int_equal(dt_f32_to_bf16(bitsf(0x7f800001u)), 0x7fc0);  /* sNaN -> qNaN */
}

/* ------------------------------------------------------------ fixtures */

static void test_dequant_fixtures(void **state) {
  (void)state;
  json_t *m = tu_json("manifest.json");
  json_t *models = json_object_get(m, "models");
  const char *mname;
  json_t *model;
  int nfix = 0;
  json_object_foreach(models, mname, model) {
    json_t *dq = json_object_get(model, "dequant");
    size_t i;
    json_t *e;
    json_array_foreach(dq, i, e) {
      const char *gpath = json_string_value(json_object_get(e, "gguf"));
      const char *tname = json_string_value(json_object_get(e, "tensor"));
      const char *tyname = json_string_value(json_object_get(e, "type"));
      const char *fpath = json_string_value(json_object_get(e, "file"));
      int64_t n = json_integer_value(json_object_get(e, "n"));
      assert_non_null(gpath);
      gguf_t *g = NULL;
      gt_err_t err = {0};
      int rc = gguf_open(tu_golden(gpath), &g, &err);
      if (rc) fail_msg("open %s: %s", gpath, err.msg);
      const gguf_tensor_t *t = gguf_find_tensor(g, tname);
      assert_non_null(t);
      assert_int_equal(t->type, dt_from_name(tyname));
      assert_int_equal(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3], n);
      size_t flen = 0;
      float *ref = tu_read_file(tu_golden(fpath), &flen);
      assert_non_null(ref);
      assert_int_equal(flen, (size_t)n * 4);
      float *out = malloc((size_t)n * 4);
      assert_non_null(out);
      /* row by row, as the backend does */
      size_t rb = dt_row_bytes(t->type, t->ne[0]);
      int64_t rows = n / t->ne[0];
      for (int64_t r = 0; r < rows; r++)
        assert_int_equal(dt_dequant_row(t->type, (const uint8_t *)t->data + r * rb, out + r * t->ne[0], t->ne[0]), GT_OK);
      double maxrel = 0;
      int64_t exact = 0;
      for (int64_t k = 0; k < n; k++) {
        double d = fabs((double)out[k] - (double)ref[k]);
        double rel = d / fmax(fabs((double)ref[k]), 1e-30);
        if (d == 0) exact++;
        if (d > 1e-6 * fabs((double)ref[k]))
          fail_msg("%s %s [%lld]: got %.9g want %.9g", gpath, tname, (long long)k, out[k], ref[k]);
        if (rel > maxrel) maxrel = rel;
      }
      printf("dequant %-24s %-18s %-5s n=%lld  max rel err %.3g  bit-exact %lld/%lld\n", gpath,
             tname, tyname, (long long)n, maxrel, (long long)exact, (long long)n);
      free(out);
      free(ref);
      gguf_close(g);
      nfix++;
    }
  }
  assert_true(nfix >= 4);
  json_decref(m);
}

/* Dot products of the real fixture tensors against their dequantized fixture rows. */
static void test_dot_on_fixtures(void **state) {
  (void)state;
  gguf_t *g = NULL;
  gt_err_t err = {0};
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.Q4_K_M.gguf"), &g, &err), GT_OK);
  const gguf_tensor_t *t = gguf_find_tensor(g, "token_embd.weight");
  size_t flen = 0;
  float *ref = tu_read_file(tu_golden("qwen3-tiny.Q4_K_M.dequant.token_embd.weight.Q4_K.f32"), &flen);
  assert_non_null(ref);
  float x[256];
  srand(7);
  for (int i = 0; i < 256; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
  size_t rb = dt_row_bytes(t->type, t->ne[0]);
  for (int isa = DT_ISA_PORTABLE; isa <= DT_ISA_AVX2; isa++) {
    if ((int)dt_set_isa((dt_isa_t)isa) != isa) continue;
    for (int64_t r = 0; r < t->ne[1]; r++) {
      double want = 0, scale = 0;
      for (int i = 0; i < 256; i++) {
        want += (double)ref[r * 256 + i] * x[i];
        scale += fabs((double)ref[r * 256 + i] * x[i]);
      }
      float got = dt_dot_row(t->type, (const uint8_t *)t->data + r * rb, x, 256);
      if (fabs(got - want) > 1e-5 * scale) fail_msg("row %lld: %g vs %g", (long long)r, got, want);
    }
  }
  dt_set_isa(DT_ISA_AUTO);
  free(ref);
  gguf_close(g);
}

/* ------------------------------------------------------------ random blocks */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}
static float rndf(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); } /* [-1, 1) */

static void put_f16(uint8_t *p, float f) {
  uint16_t h = dt_f32_to_f16(f);
  p[0] = (uint8_t)h;
  p[1] = (uint8_t)(h >> 8);
}

/* Fills a row of n elements of type t with random but finite contents. */
static void random_row(gt_type_t t, uint8_t *w, int64_t n) {
  size_t bytes = dt_row_bytes(t, n);
  for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
  int64_t nb = n / dt_block_elems(t);
  size_t bb = dt_block_bytes(t);
  for (int64_t b = 0; b < nb; b++) {
    uint8_t *p = w + b * bb;
    switch (t) {
      case GT_TYPE_F32: { float f = rndf() * 4; memcpy(p, &f, 4); break; }
      case GT_TYPE_F16: put_f16(p, rndf() * 4); break;
      case GT_TYPE_BF16: { uint16_t h = dt_f32_to_bf16(rndf() * 4); memcpy(p, &h, 2); break; }
      case GT_TYPE_Q8_0: put_f16(p, rndf() * 0.02f); break;
      case GT_TYPE_Q4_K: case GT_TYPE_Q5_K:
        put_f16(p, fabsf(rndf()) * 0.01f);
        put_f16(p + 2, rndf() * 0.01f);
        break;
      case GT_TYPE_Q6_K: put_f16(p + 208, rndf() * 0.01f); break;
      default: break;
    }
  }
}

static void check_dot_type(gt_type_t t, int64_t n, int trials) {
  size_t bytes = dt_row_bytes(t, n);
  /* +3 so the row can be placed at an odd address (rows inside a GGUF need not be aligned) */
  uint8_t *buf = malloc(bytes + 3);
  float *x = malloc((size_t)n * 4), *deq = malloc((size_t)n * 4);
  assert_non_null(buf);
  for (int tr = 0; tr < trials; tr++) {
    uint8_t *w = buf + (tr % 4 == 3 ? 1 : 0);
    random_row(t, w, n);
    for (int64_t i = 0; i < n; i++) x[i] = rndf();
    assert_int_equal(dt_dequant_row(t, w, deq, n), GT_OK);
    double want = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
      want += (double)deq[i] * x[i];
      scale += fabs((double)deq[i] * x[i]);
    }
    float got[3];
    int nisa = 0;
    for (int isa = DT_ISA_PORTABLE; isa <= DT_ISA_AVX2; isa++) {
      if ((int)dt_set_isa((dt_isa_t)isa) != isa) continue;
      got[nisa] = dt_dot_row(t, w, x, n);
      if (!(fabs(got[nisa] - want) <= 1e-5 * scale))
        fail_msg("%s n=%lld isa=%s trial %d: dot %.9g, dequant+dot %.9g (scale %.3g)", dt_name(t),
                 (long long)n, dt_isa_name((dt_isa_t)isa), tr, got[nisa], want, scale);
      nisa++;
    }
    assert_true(nisa >= 1);
  }
  dt_set_isa(DT_ISA_AUTO);
  free(buf);
  free(x);
  free(deq);
}

static void test_dot_vs_dequant(void **state) {
  (void)state;
  static const gt_type_t types[] = {GT_TYPE_F32, GT_TYPE_F16, GT_TYPE_BF16, GT_TYPE_Q8_0,
                                    GT_TYPE_Q4_K, GT_TYPE_Q5_K, GT_TYPE_Q6_K};
  static const int64_t lens[] = {256, 512, 4096, 2816};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) check_dot_type(types[i], lens[j], 24);
  /* lengths that exercise the scalar tails of the unquantized kernels */
  static const int64_t odd[] = {1, 3, 15, 17, 33, 255, 257, 1000};
  for (size_t j = 0; j < sizeof odd / sizeof odd[0]; j++) {
    check_dot_type(GT_TYPE_F32, odd[j], 8);
    check_dot_type(GT_TYPE_F16, odd[j], 8);
    check_dot_type(GT_TYPE_BF16, odd[j], 8);
  }
  check_dot_type(GT_TYPE_Q8_0, 32, 16);
  check_dot_type(GT_TYPE_Q8_0, 96, 16);
  printf("dt_dot_row checked on isa=%s (auto) and portable\n", dt_isa_name(dt_get_isa()));
}

/* Hand-made blocks with known values: catches layout errors the random test cannot (it uses
 * our own dequant as the reference). */
static void test_known_blocks(void **state) {
  (void)state;
  float y[256];
  /* Q8_0: d = 0.5, q[l] = l - 16 */
  uint8_t q8[34];
  put_f16(q8, 0.5f);
  for (int l = 0; l < 32; l++) q8[2 + l] = (uint8_t)(int8_t)(l - 16);
  assert_int_equal(dt_dequant_row(GT_TYPE_Q8_0, q8, y, 32), GT_OK);
  for (int l = 0; l < 32; l++) assert_true(y[l] == 0.5f * (l - 16));

  /* Q4_K: d = 1, dmin = 0.5; sub-block j has scale j+1 and min 2j (j < 4 low 6 bits; j >= 4
   * split across bytes). q = low nibble l%16 for even sub-blocks, high nibble 15 - l%16 odd. */
  uint8_t q4[144] = {0};
  put_f16(q4, 1.0f);
  put_f16(q4 + 2, 0.5f);
  uint8_t *sc = q4 + 4;
  int scs[8], mns[8];
  for (int j = 0; j < 8; j++) { scs[j] = 8 * j + 3; mns[j] = 7 * j + 1; } /* up to 63 */
  for (int j = 0; j < 4; j++) {
    sc[j] = (uint8_t)((scs[j] & 63) | ((scs[j + 4] >> 4) << 6));
    sc[j + 4] = (uint8_t)((mns[j] & 63) | ((mns[j + 4] >> 4) << 6));
    sc[j + 8] = (uint8_t)((scs[j + 4] & 15) | ((mns[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 4; j++)
    for (int l = 0; l < 32; l++) q4[16 + 32 * j + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
  assert_int_equal(dt_dequant_row(GT_TYPE_Q4_K, q4, y, 256), GT_OK);
  for (int s = 0; s < 8; s++)
    for (int l = 0; l < 32; l++) {
      int q = (s % 2 == 0) ? l % 16 : 15 - l % 16;
      float want = (float)scs[s] * (float)q - 0.5f * (float)mns[s];
      if (y[32 * s + l] != want) fail_msg("q4_k sub %d l %d: %g want %g", s, l, y[32 * s + l], want);
    }

  /* Q6_K: d = 0.25, scales[k] = k - 8, element i: q = (i * 7) % 64 - 32 */
  uint8_t q6[210] = {0};
  put_f16(q6 + 208, 0.25f);
  for (int k = 0; k < 16; k++) q6[192 + k] = (uint8_t)(int8_t)(k - 8);
  for (int i = 0; i < 256; i++) {
    int q = (i * 7) % 64; /* stored unsigned 6-bit */
    int half = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    uint8_t *ql = q6 + 64 * half, *qh = q6 + 128 + 32 * half;
    int lo = q & 15, hi = q >> 4;
    if (quarter == 0) ql[l] |= (uint8_t)lo;
    if (quarter == 1) ql[l + 32] |= (uint8_t)lo;
    if (quarter == 2) ql[l] |= (uint8_t)(lo << 4);
    if (quarter == 3) ql[l + 32] |= (uint8_t)(lo << 4);
    qh[l] |= (uint8_t)(hi << (2 * quarter));
  }
  assert_int_equal(dt_dequant_row(GT_TYPE_Q6_K, q6, y, 256), GT_OK);
  for (int i = 0; i < 256; i++) {
    float want = 0.25f * (float)(i / 16 - 8) * (float)((i * 7) % 64 - 32);
    if (y[i] != want) fail_msg("q6_k %d: %g want %g", i, y[i], want);
  }

  /* Q5_K: same scales as the Q4_K block, 5-bit q = (i * 11) % 32 */
  uint8_t q5[176] = {0};
  memcpy(q5, q4, 16);
  for (int i = 0; i < 256; i++) {
    int q = (i * 11) % 32, s = i / 32, l = i % 32;
    uint8_t *ql = q5 + 48 + 32 * (s / 2);
    ql[l] |= (uint8_t)((q & 15) << (s % 2 ? 4 : 0));
    q5[16 + l] |= (uint8_t)((q >> 4) << s);
  }
  assert_int_equal(dt_dequant_row(GT_TYPE_Q5_K, q5, y, 256), GT_OK);
  for (int i = 0; i < 256; i++) {
    int s = i / 32;
    float want = (float)scs[s] * (float)((i * 11) % 32) - 0.5f * (float)mns[s];
    if (y[i] != want) fail_msg("q5_k %d: %g want %g", i, y[i], want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_type_table),    cmocka_unit_test(test_f16_all_values),
      cmocka_unit_test(test_f16_rounding),  cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_known_blocks),  cmocka_unit_test(test_dequant_fixtures),
      cmocka_unit_test(test_dot_on_fixtures), cmocka_unit_test(test_dot_vs_dequant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
