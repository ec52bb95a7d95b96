/* tests/unit/test_demo35.c — the second demo model (tests/golden/demo35/: a trained Qwen3.5 hybrid,
 * Gated DeltaNet + gated attention, with one MTP block; Q4_K_M) on the CPU backend:
 * - its three cases (tests/golden/demo35/manifest.json): teacher-forced logits over all_ids within
 *   the CPU tolerance 1e-3 max row relative error of the reference (fp32 forward of the training
 *   code on the exact dequantized Q4_K_M weights), greedy continuation equal to generated_ids up to
 *   the first small reference margin, whole prompts and prompts fed in chunks of 7;
 * - the file's layout: 8 main layers and one MTP (nextn) block counted by the loader;
 * - its tokenizer is today's demo's (tests/golden/demo/): same tokens, types and merges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/models/model.h"
#include "format/gguf.h"
#include "tests/common/golden_model.h"
#include "tests/common/testutil.h"

#define CPU_TOL 1e-3

static const char *model_path(const char *dir, char *buf, size_t cap) {
  char rel[256];
  snprintf(rel, sizeof rel, "%s/manifest.json", dir);
  json_t *man = tu_json(rel);
  assert_non_null(man);
  snprintf(rel, sizeof rel, "%s/%s", dir, json_string_value(json_object_get(man, "model")));
  snprintf(buf, cap, "%s", tu_golden(rel));
  json_decref(man);
  return buf;
}

static void cases(int chunk) {
  char path[4096];
  model_path("demo35", path, sizeof path);
  json_t *man = tu_json("demo35/manifest.json");
  json_t *cs = json_object_get(man, "cases");
  assert_int_equal(json_array_size(cs), 3);
  gm_rope_freq_bf16 = 0; /* the reference built its model in fp32: exact RoPE frequencies */
  gm_check_cases(path, cs, "demo35", chunk, chunk ? "demo35 chunked" : "demo35", CPU_TOL, 0);
  json_decref(man);
}

static void test_cases(void **st) { (void)st; cases(0); }
static void test_cases_chunked(void **st) { (void)st; cases(7); }

static void test_layout(void **st) {
  (void)st;
  char path[4096];
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  if (gguf_open(model_path("demo35", path, sizeof path), &g, &err)) fail_msg("gguf_open: %s", err.msg);
  if (be_cpu_create(1, &be, &err)) fail_msg("be_cpu_create: %s", err.msg);
  if (model_load(g, be, 64, &m, &err)) fail_msg("model_load: %s", err.msg);
  int64_t bc = 0;
  assert_int_equal(gguf_get_int(g, "qwen35.block_count", &bc), 0);
  printf("demo35: block_count %lld, %d main layers (%d GDN, %d attention), %d MTP block\n", (long long)bc,
         m->hp.n_layer, m->hp.n_gdn_layers, m->hp.n_attn_layers, m->hp.n_nextn);
  assert_int_equal(m->hp.n_nextn, 1);
  assert_int_equal(m->hp.n_layer, 8);
  assert_int_equal(bc, 9); /* llama.cpp's convention: block_count counts the nextn block */
  assert_int_equal(m->hp.n_attn_layers, 2);
  assert_non_null(gguf_find_tensor(g, "blk.8.nextn.eh_proj.weight"));
  model_free(m);
  be_destroy(be);
  gguf_close(g);
}

/* every element of string array `key` equal in a and b */
static void same_str_arr(const gguf_t *a, const gguf_t *b, const char *key) {
  gguf_vtype_t ta, tb;
  uint64_t na = 0, nb = 0;
  assert_int_equal(gguf_get_arr(a, key, &ta, &na), 0);
  assert_int_equal(gguf_get_arr(b, key, &tb, &nb), 0);
  assert_int_equal(ta, GGUF_VT_STRING);
  assert_int_equal(tb, GGUF_VT_STRING);
  assert_int_equal(na, nb);
  for (uint64_t i = 0; i < na; i++) {
    const char *sa, *sb;
    size_t la, lb;
    assert_int_equal(gguf_arr_str(a, key, i, &sa, &la), 0);
    assert_int_equal(gguf_arr_str(b, key, i, &sb, &lb), 0);
    if (la != lb || memcmp(sa, sb, la)) fail_msg("%s[%llu] differs", key, (unsigned long long)i);
  }
}

static void test_same_tokenizer_as_demo(void **st) {
  (void)st;
  char p35[4096], p3[4096];
  gt_err_t err = {0};
  gguf_t *a = NULL, *b = NULL;
  if (gguf_open(model_path("demo35", p35, sizeof p35), &a, &err)) fail_msg("gguf_open: %s", err.msg);
  if (gguf_open(model_path("demo", p3, sizeof p3), &b, &err)) fail_msg("gguf_open: %s", err.msg);
  same_str_arr(a, b, "tokenizer.ggml.tokens");
  same_str_arr(a, b, "tokenizer.ggml.merges");
  gguf_vtype_t ta, tb;
  uint64_t na = 0, nb = 0;
  assert_int_equal(gguf_get_arr(a, "tokenizer.ggml.token_type", &ta, &na), 0);
  assert_int_equal(gguf_get_arr(b, "tokenizer.ggml.token_type", &tb, &nb), 0);
  assert_int_equal(ta, tb);
  assert_int_equal(na, nb);
  assert_memory_equal(gguf_arr_data(a, "tokenizer.ggml.token_type"), gguf_arr_data(b, "tokenizer.ggml.token_type"),
                      na * 4);
  const char *s, *t;
  size_t ls, lt;
  assert_int_equal(gguf_get_str(a, "tokenizer.ggml.pre", &s, &ls), 0);
  assert_int_equal(gguf_get_str(b, "tokenizer.ggml.pre", &t, &lt), 0);
  assert_true(ls == lt && !memcmp(s, t, ls));
  assert_int_equal(gguf_get_str(a, "tokenizer.chat_template", &s, &ls), 0);
  assert_int_equal(gguf_get_str(b, "tokenizer.chat_template", &t, &lt), 0);
  assert_true(ls == lt && !memcmp(s, t, ls));
  gguf_close(a);
  gguf_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_same_tokenizer_as_demo),
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_cases_chunked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
