/* Embedding pooling (engine/models/embed.h) on the CPU backend.
 *
 * - embed_normalize: unit L2 norm, Matryoshka truncation renormalizes the kept prefix, a zero
 *   vector stays zero.
 * - embed_pooling_type reads {arch}.pooling_type from a GGUF written here (absent -> unspecified).
 * - The last-token hidden state (gen_feed_hidden) is the head's input: hidden · W_outᵀ, with
 *   W_out the fixture's dequantized output weight, equals the logits gantry's own forward gives
 *   for the last token (max row relative error <= 1e-3, the CPU golden tolerance). This is a
 *   consistency test against gantry's forward, not against HF: scripts/gpu/embed_ref.py makes
 *   the HF reference.
 * - Chunked prefill gives the same hidden state as one pass.
 * - Against HF (tests/golden/embed_ref/, or $GANTRY_EMBED_REF: the OUT_DIR of scripts/gpu/embed_ref.py,
 *   HF's Qwen3Model in float32 on the bf16 fixture's weights): gantry's normalized last-token
 *   embedding of each case on qwen3-tiny.bf16 is within 1e-3 (max relative error) of HF's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/models/embed.h"
#include "engine/models/gen.h"
#include "format/gguf_write.h"
#include "tests/common/testutil.h"

static void test_normalize(void **st) {
  (void)st;
  float v[4] = {3, 4, 12, 0};
  assert_int_equal(embed_normalize(v, 4, 0), 4);
  assert_float_equal(v[0], 3.0f / 13, 1e-6);
  assert_float_equal(v[2], 12.0f / 13, 1e-6);
  float w[4] = {3, 4, 12, 0};
  assert_int_equal(embed_normalize(w, 4, 2), 2); /* Matryoshka: first 2, renormalized */
  assert_float_equal(w[0], 0.6f, 1e-6);
  assert_float_equal(w[1], 0.8f, 1e-6);
  float z[3] = {0, 0, 0};
  assert_int_equal(embed_normalize(z, 3, 9), 3); /* dims > d: all */
  assert_true(z[0] == 0 && z[1] == 0 && z[2] == 0);
}

static void pool_file(const char *path, int with_key, uint32_t v) {
  gw_t *w = NULL;
  gt_err_t err = {0};
  assert_int_equal(gw_create(path, &w, &err), 0);
  assert_int_equal(gw_kv_str(w, "general.architecture", "qwen3", 5, &err), 0);
  if (with_key) assert_int_equal(gw_kv_u32(w, "qwen3.pooling_type", v, &err), 0);
  assert_int_equal(gw_begin_data(w, &err), 0);
  assert_int_equal(gw_finish(w, &err), 0);
}

static void test_pooling_type(void **st) {
  (void)st;
  char path[] = "/tmp/gantry-embed-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  const struct { int key; uint32_t v; embed_pool_t want; } cases[] = {
      {1, 3, EMBED_POOL_LAST}, {1, 1, EMBED_POOL_MEAN}, {0, 0, EMBED_POOL_UNSPECIFIED}, {1, 9, EMBED_POOL_UNSPECIFIED}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pool_file(path, cases[i].key, cases[i].v);
    gguf_t *g = NULL;
    gt_err_t err = {0};
    assert_int_equal(gguf_open(path, &g, &err), 0);
    assert_int_equal(embed_pooling_type(g), cases[i].want);
    gguf_close(g);
  }
  assert_string_equal(embed_pool_name(EMBED_POOL_LAST), "last");
  unlink(path);
}

/* hidden of ids via gen_feed_hidden (chunk) and the last logits via gen_feed */
static void run_tiny(const int32_t *ids, int n, int chunk, float *hidden, float *logits, int *d, int *V) {
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  gen_t *gen = NULL;
  gt_err_t err = {0};
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.Q8_0.gguf"), &g, &err), 0);
  assert_int_equal(be_cpu_create(0, &be, &err), 0);
  assert_int_equal(model_load(g, be, n, &m, &err), 0);
  assert_int_equal(gen_create(m, n, &gen, &err), 0);
  *d = m->hp.n_embd, *V = m->hp.n_vocab;
  assert_int_equal(gen_feed_hidden(gen, ids, n, chunk, hidden, &err), 0);
  if (logits) {
    gen_reset(gen);
    assert_int_equal(gen_feed(gen, ids, n, 0, NULL, logits, &err), 0);
  }
  gen_free(gen);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
}

static void test_hidden_is_head_input(void **st) {
  (void)st;
  json_t *man = tu_json("manifest.json");
  json_t *c = json_array_get(json_object_get(json_object_get(json_object_get(man, "models"), "qwen3-tiny"), "cases_Q8_0"), 0);
  json_t *jids = json_object_get(c, "prompt_ids");
  const int n = (int)json_array_size(jids);
  assert_true(n >= 2);
  int32_t *ids = malloc(sizeof *ids * n);
  for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
  float hidden[4096], hidden_chunked[4096];
  int d = 0, V = 0;
  float *logits = malloc(sizeof(float) * 65536);
  run_tiny(ids, n, 0, hidden, logits, &d, &V);
  assert_true(d <= 4096 && V <= 65536);
  size_t wlen = 0;
  float *W = tu_read_file(tu_golden("qwen3-tiny.Q8_0.dequant.output.weight.Q8_0.f32"), &wlen);
  assert_non_null(W);
  assert_int_equal(wlen, sizeof(float) * (size_t)V * d);
  float *proj = malloc(sizeof(float) * V);
  for (int v = 0; v < V; v++) {
    double s = 0;
    for (int j = 0; j < d; j++) s += (double)hidden[j] * W[(size_t)v * d + j];
    proj[v] = (float)s;
  }
  const double rel = tu_max_row_rel_err(proj, logits, 1, V);
  printf("hidden . W_out^T vs logits: rel err %.3g (d %d, V %d, %d tokens)\n", rel, d, V, n);
  assert_true(rel <= 1e-3);
  /* chunked prefill: same hidden state */
  run_tiny(ids, n, 3, hidden_chunked, NULL, &d, &V);
  assert_true(tu_max_row_rel_err(hidden_chunked, hidden, 1, d) <= 1e-5);
  free(proj);
  free(W);
  free(logits);
  free(ids);
  json_decref(man);
}

static void test_hf_reference(void **st) {
  (void)st;
  /* the reference in the tree (tests/golden/embed_ref/, made by scripts/gpu/embed_ref.py on the GPU
   * machine), or another one from $GANTRY_EMBED_REF */
  char golden[2048], path[4096];
  const char *dir = getenv("GANTRY_EMBED_REF");
  if (!dir || !*dir) {
    snprintf(golden, sizeof golden, "%s", tu_golden("embed_ref"));
    dir = golden;
  }
  snprintf(path, sizeof path, "%s/embed_ref.json", dir);
  if (access(path, R_OK)) {
    print_message("%s absent: HF reference skipped\n", path);
    skip();
  }
  json_error_t je;
  json_t *man = json_load_file(path, 0, &je);
  assert_non_null(man);
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  gt_err_t err = {0};
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err), 0);
  assert_int_equal(be_cpu_create(0, &be, &err), 0);
  assert_int_equal(model_load(g, be, 256, &m, &err), 0);
  be->rope_freq_bf16 = 0; /* the reference ran in float32: exact rotary frequencies */
  json_t *cases = json_object_get(man, "cases");
  assert_true(json_array_size(cases) > 0);
  for (size_t k = 0; k < json_array_size(cases); k++) {
    json_t *c = json_array_get(cases, k), *jids = json_object_get(c, "ids");
    const int n = (int)json_array_size(jids), d = m->hp.n_embd;
    int32_t ids[256];
    assert_true(n > 0 && n <= 256);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
    gen_t *gen = NULL;
    assert_int_equal(gen_create(m, n, &gen, &err), 0);
    float h[4096];
    assert_int_equal(gen_feed_hidden(gen, ids, n, 0, h, &err), 0);
    gen_free(gen);
    embed_normalize(h, d, 0);
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(c, "file")));
    size_t len = 0;
    float *ref = tu_read_file(path, &len);
    assert_non_null(ref);
    assert_int_equal(len, sizeof(float) * (size_t)d);
    const double e = tu_max_row_rel_err(h, ref, 1, d);
    printf("HF reference case %zu (%d tokens): rel err %.3g\n", k, n, e);
    assert_true(e <= 1e-3);
    free(ref);
  }
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  json_decref(man);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_normalize),
      cmocka_unit_test(test_pooling_type),
      cmocka_unit_test(test_hidden_is_head_input),
      cmocka_unit_test(test_hf_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
