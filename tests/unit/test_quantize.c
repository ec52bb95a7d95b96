/* tests/unit/test_quantize.c — gantry's quantizer against llama-quantize's own files.
 * - Q8_0, Q6_K and Q4_K_M of qwen3-tiny (from the bf16 fixture) are byte-identical to
 *   llama.cpp's files (every tensor and the whole file, metadata included).
 * - Q4_K tensors reconstruct the bf16 weights with RMS error <= 1.10 x llama-quantize's
 *   (per-tensor ratios printed; implied by identity, kept as the documented bound).
 * - Q4_K_M type decisions equal manifest.json tensor_types_Q4_K_M; qwen35 decisions follow
 *   llama.cpp's rules (attn_qkv is attn_v-like, MTP layer counted).
 * - Round-trip error bounds per format on random data; bad arguments give errors. */
#include <math.h>
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
#include "tools/quantize.h"
#include "tests/common/testutil.h"

static char g_tmp[256];

static const char *tmp_path(const char *tag) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/gantry_test_quantize_%d_%s.gguf", (int)getpid(), tag);
  return g_tmp;
}

static gguf_t *open_or_fail(const char *path) {
  gguf_t *g = NULL;
  gt_err_t err = {0};
  int rc = gguf_open(path, &g, &err);
  if (rc) fprintf(stderr, "open %s: %s\n", path, err.msg);
  assert_int_equal(rc, GT_OK);
  return g;
}

/* Quantizes the bf16 fixture with mix into a temp file and returns it opened. */
static gguf_t *quantize_fixture(qz_mix_t mix, const char *tag, char *path_out) {
  gt_err_t err = {0};
  qz_opts_t o = {.n_threads = 2};
  qz_stats_t st = {0};
  const char *out = tmp_path(tag);
  strcpy(path_out, out);
  int rc = qz_quantize_file(tu_golden("qwen3-tiny.bf16.gguf"), path_out, mix, &o, &st, &err);
  if (rc) fprintf(stderr, "quantize: %s\n", err.msg);
  assert_int_equal(rc, GT_OK);
  assert_int_equal(st.n_tensors, 47);
  return open_or_fail(path_out);
}

static void check_identical_file(qz_mix_t mix, const char *golden) {
  char path[256];
  gguf_t *mine = quantize_fixture(mix, qz_mix_name(mix), path);
  gguf_t *ref = open_or_fail(tu_golden(golden));
  assert_int_equal(gguf_n_tensors(mine), gguf_n_tensors(ref));
  int64_t same = 0;
  for (int64_t i = 0; i < gguf_n_tensors(ref); i++) {
    const gguf_tensor_t *r = gguf_tensor(ref, i);
    const gguf_tensor_t *m = gguf_find_tensor(mine, r->name);
    assert_non_null(m);
    assert_int_equal(m->type, r->type);
    assert_int_equal(m->nbytes, r->nbytes);
    if (memcmp(m->data, r->data, r->nbytes) != 0) fprintf(stderr, "%s: %s differs\n", golden, r->name);
    else same++;
  }
  printf("%s: %lld/%lld tensors byte-identical\n", golden, (long long)same, (long long)gguf_n_tensors(ref));
  assert_int_equal(same, gguf_n_tensors(ref));
  /* the whole file, metadata included, too */
  size_t la = 0, lb = 0;
  void *a = tu_read_file(path, &la), *b = tu_read_file(tu_golden(golden), &lb);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  printf("%s: whole file byte-identical (%zu bytes)\n", golden, la);
  free(a);
  free(b);
  gguf_close(mine);
  gguf_close(ref);
  unlink(path);
}

static void test_q8_0_identical(void **state) {
  (void)state;
  check_identical_file(QZ_MIX_Q8_0, "qwen3-tiny.Q8_0.gguf");
}

static void test_q6_k_identical(void **state) {
  (void)state;
  check_identical_file(QZ_MIX_Q6_K, "qwen3-tiny.Q6_K.gguf");
}

static double rms_vs_source(const gguf_tensor_t *q, const gguf_tensor_t *src) {
  const int64_t n = q->ne[0], rows = q->ne[1] * q->ne[2] * q->ne[3];
  float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  assert_non_null(a);
  assert_non_null(b);
  const size_t qrow = dt_row_bytes(q->type, n), srow = dt_row_bytes(src->type, n);
  double e = 0;
  for (int64_t r = 0; r < rows; r++) {
    assert_int_equal(dt_dequant_row(q->type, (const uint8_t *)q->data + r * qrow, a, n), GT_OK);
    assert_int_equal(qz_row_to_f32(src->type, (const uint8_t *)src->data + r * srow, b, n), GT_OK);
    for (int64_t i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  }
  free(a);
  free(b);
  return sqrt(e / (double)(n * rows));
}

static void test_q4_k_m_vs_llama(void **state) {
  (void)state;
  char path[256];
  gguf_t *mine = quantize_fixture(QZ_MIX_Q4_K_M, "Q4_K_M", path);
  gguf_t *ref = open_or_fail(tu_golden("qwen3-tiny.Q4_K_M.gguf"));
  gguf_t *src = open_or_fail(tu_golden("qwen3-tiny.bf16.gguf"));
  json_t *man = tu_json("manifest.json");
  json_t *types = json_object_get(json_object_get(json_object_get(man, "models"), "qwen3-tiny"),
                                  "tensor_types_Q4_K_M");
  assert_non_null(types);
  assert_int_equal(json_object_size(types), gguf_n_tensors(mine));
  const char *name;
  json_t *jt;
  json_object_foreach(types, name, jt) {
    const gguf_tensor_t *m = gguf_find_tensor(mine, name);
    assert_non_null(m);
    if (strcmp(dt_name(m->type), json_string_value(jt)) != 0)
      fprintf(stderr, "%s: gantry %s, llama.cpp %s\n", name, dt_name(m->type), json_string_value(jt));
    assert_string_equal(dt_name(m->type), json_string_value(jt));
  }
  double worst = 0;
  int n_k = 0, n_ident = 0;
  for (int64_t i = 0; i < gguf_n_tensors(ref); i++) {
    const gguf_tensor_t *r = gguf_tensor(ref, i);
    const gguf_tensor_t *m = gguf_find_tensor(mine, r->name);
    const gguf_tensor_t *s = gguf_find_tensor(src, r->name);
    assert_non_null(m);
    assert_non_null(s);
    if (r->type == GT_TYPE_Q6_K) assert_memory_equal(m->data, r->data, r->nbytes);
    if (r->type != GT_TYPE_Q4_K) continue;
    double em = rms_vs_source(m, s), er = rms_vs_source(r, s);
    int ident = memcmp(m->data, r->data, r->nbytes) == 0;
    printf("  %-28s Q4_K rms gantry %.6e llama %.6e ratio %.4f%s\n", r->name, em, er, em / er,
           ident ? " (byte-identical)" : "");
    if (em / er > worst) worst = em / er;
    n_k++;
    n_ident += ident;
    assert_true(em <= 1.10 * er);
  }
  printf("Q4_K tensors: %d, worst rms ratio gantry/llama %.4f, byte-identical %d\n", n_k, worst, n_ident);
  assert_int_equal(n_ident, n_k);
  json_decref(man);
  gguf_close(mine);
  gguf_close(ref);
  gguf_close(src);
  size_t la = 0, lb = 0;
  void *a = tu_read_file(path, &la), *b = tu_read_file(tu_golden("qwen3-tiny.Q4_K_M.gguf"), &lb);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  printf("qwen3-tiny.Q4_K_M.gguf: whole file byte-identical (%zu bytes)\n", la);
  free(a);
  free(b);
  unlink(path);
}

/* qwen35-tiny names with llama.cpp's Q4_K_M rules: attn_qkv counts as attn_v (Q6_K where
 * use_more_bits), GDN 2-D weights Q4_K, ssm_conv1d / 1-D tensors keep their type; with the
 * flag the output head is BF16. */
static void test_plan_qwen35(void **state) {
  (void)state;
  gguf_t *g = open_or_fail(tu_golden("qwen35-tiny.bf16.gguf"));
  const int64_t n = gguf_n_tensors(g);
  qz_tensor_desc_t *d = calloc((size_t)n, sizeof *d);
  gt_type_t *ty = calloc((size_t)n, sizeof *ty);
  assert_non_null(d);
  assert_non_null(ty);
  for (int64_t i = 0; i < n; i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    d[i] = (qz_tensor_desc_t){t->name, t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->type};
  }
  gt_err_t err = {0};
  assert_int_equal(qz_plan_types(d, n, 4, QZ_MIX_Q4_K_M, QZ_KEEP_OUTPUT_BF16, ty, &err), GT_OK);
  for (int64_t i = 0; i < n; i++) {
    const char *nm = d[i].name;
    gt_type_t want;
    if (d[i].type == GT_TYPE_F32) want = GT_TYPE_F32; /* norms, ssm_a, ssm_dt.bias, ssm_conv1d */
    else if (!strcmp(nm, "output.weight")) want = GT_TYPE_BF16;
    /* n_attention_wv = 4 (3 attn_qkv + 1 attn_v): use_more_bits true for i = 2, 3;
     * n_ffn_down = 4: true for layers 2, 3 */
    else if (strstr(nm, "attn_qkv") || strstr(nm, "attn_v.weight") || strstr(nm, "ffn_down"))
      want = (strstr(nm, "blk.2.") || strstr(nm, "blk.3.")) ? GT_TYPE_Q6_K : GT_TYPE_Q4_K;
    else want = GT_TYPE_Q4_K;
    if (ty[i] != want) fprintf(stderr, "%s: got %s want %s\n", nm, dt_name(ty[i]), dt_name(want));
    assert_int_equal(ty[i], want);
  }
  /* without the flag the head is Q6_K; tied models quantize token_embd as the head */
  assert_int_equal(qz_plan_types(d, n, 4, QZ_MIX_Q4_K_M, 0, ty, &err), GT_OK);
  for (int64_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, "output.weight")) assert_int_equal(ty[i], GT_TYPE_Q6_K);
  d[0].name = "not_output.weight"; /* output.weight is tensor 0 in the fixture */
  assert_string_equal(gguf_tensor(g, 0)->name, "output.weight");
  assert_int_equal(qz_plan_types(d, n, 4, QZ_MIX_Q4_K_M, 0, ty, &err), GT_OK);
  for (int64_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, "token_embd.weight")) assert_int_equal(ty[i], GT_TYPE_Q6_K);
  /* rows that are not a multiple of 256 fall back to Q8_0 (multiple of 32) or stay */
  qz_tensor_desc_t odd[2] = {{"blk.0.ffn_up.weight", 2, {96, 8, 1, 1}, GT_TYPE_BF16},
                             {"blk.0.ffn_gate.weight", 2, {100, 8, 1, 1}, GT_TYPE_BF16}};
  gt_type_t oty[2];
  assert_int_equal(qz_plan_types(odd, 2, 1, QZ_MIX_Q4_K, 0, oty, &err), GT_OK);
  assert_int_equal(oty[0], GT_TYPE_Q8_0);
  assert_int_equal(oty[1], GT_TYPE_BF16);
  free(d);
  free(ty);
  gguf_close(g);
}

static uint64_t g_rng = 88172645463325252ull;
static float randn(void) {
  double u1, u2;
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  u1 = ((g_rng >> 11) + 0.5) / 9007199254740992.0;
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  u2 = ((g_rng >> 11) + 0.5) / 9007199254740992.0;
  return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Relative RMS error bounds on N(0,1) rows (uniform 4-bit/5-bit/6-bit/8-bit grids give about
 * 2^-b / sqrt(12) x range; bounds have ~1.5x margin over measured values). */
static void test_roundtrip_random(void **state) {
  (void)state;
  static const struct { gt_type_t t; double bound; } k[] = {
      {GT_TYPE_Q8_0, 0.008}, {GT_TYPE_Q6_K, 0.030}, {GT_TYPE_Q5_K, 0.055},
      {GT_TYPE_Q4_K, 0.110}, {GT_TYPE_BF16, 0.004}, {GT_TYPE_F16, 0.0006}, {GT_TYPE_F32, 0.0},
  };
  enum { N = 4096 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  uint8_t *q = malloc(N * 4);
  for (int i = 0; i < N; i++) x[i] = randn() * (i < N / 2 ? 0.02f : 1.0f); /* two scales */
  for (size_t j = 0; j < sizeof k / sizeof k[0]; j++) {
    assert_int_equal(qz_quantize_row(k[j].t, x, q, N), GT_OK);
    assert_int_equal(dt_dequant_row(k[j].t, q, y, N), GT_OK);
    double worst = 0;
    for (int h = 0; h < 2; h++) {
      double e = 0, s = 0;
      for (int i = h * N / 2; i < (h + 1) * N / 2; i++) {
        e += (double)(y[i] - x[i]) * (y[i] - x[i]);
        s += (double)x[i] * x[i];
      }
      if (sqrt(e / s) > worst) worst = sqrt(e / s);
    }
    printf("  %-5s relative rms error %.5f (bound %.4f)\n", dt_name(k[j].t), worst, k[j].bound);
    assert_true(worst <= k[j].bound);
  }
  /* an all-zero row quantizes to zeros */
  memset(x, 0, N * sizeof *x);
  for (size_t j = 0; j < sizeof k / sizeof k[0]; j++) {
    assert_int_equal(qz_quantize_row(k[j].t, x, q, N), GT_OK);
    assert_int_equal(dt_dequant_row(k[j].t, q, y, N), GT_OK);
    for (int i = 0; i < N; i++) assert_true(y[i] == 0.0f);
  }
  /* bad arguments */
  assert_int_equal(qz_quantize_row(GT_TYPE_Q4_K, x, q, 100), GT_EINVAL);
  assert_int_equal(qz_quantize_row(GT_TYPE_Q8_0, x, q, 33), GT_EINVAL);
  assert_int_equal(qz_quantize_row(GT_TYPE_Q2_K, x, q, 256), GT_EUNSUPPORTED);
  assert_int_equal(qz_quantize_row(GT_TYPE_Q4_K, NULL, q, 256), GT_EINVAL);
  free(x);
  free(y);
  free(q);
}

static void test_file_errors(void **state) {
  (void)state;
  gt_err_t err = {0};
  qz_mix_t m;
  assert_int_equal(qz_mix_from_name("q4_k_m", &m), GT_OK);
  assert_int_equal(m, QZ_MIX_Q4_K_M);
  assert_int_equal(qz_mix_from_name("Q3_K", &m), GT_EINVAL);
  assert_int_not_equal(qz_quantize_file("/nonexistent/in.gguf", tmp_path("x"), QZ_MIX_Q8_0, NULL, NULL, &err), GT_OK);
  assert_true(strlen(err.msg) > 0);
  memset(&err, 0, sizeof err);
  assert_int_equal(qz_quantize_file(tu_golden("qwen3-tiny.bf16.gguf"), "/nonexistent/dir/out.gguf",
                                    QZ_MIX_Q8_0, NULL, NULL, &err), GT_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent/dir/out.gguf"));
  /* the CLI: one-line error, non-zero exit */
  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s %s /dev/null Q9_9 2>&1", tu_bin("gantry-quantize"), tu_golden("qwen3-tiny.bf16.gguf"));
  int st = tu_run(cmd, &out);
  assert_int_not_equal(st, 0);
  assert_non_null(out);
  assert_non_null(strstr(out, "unknown TYPE"));
  free(out);
  out = NULL;
  snprintf(cmd, sizeof cmd, "%s %s %s Q8_0 --threads 2", tu_bin("gantry-quantize"), tu_golden("qwen3-tiny.bf16.gguf"), tmp_path("cli"));
  st = tu_run(cmd, &out);
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "blk.3.ffn_down.weight"));
  assert_non_null(strstr(out, "file 3109248 bytes"));
  free(out);
  unlink(tmp_path("cli"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_q8_0_identical),  cmocka_unit_test(test_q6_k_identical),
      cmocka_unit_test(test_q4_k_m_vs_llama), cmocka_unit_test(test_plan_qwen35),
      cmocka_unit_test(test_roundtrip_random), cmocka_unit_test(test_file_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
