/* tests/unit/test_demo35.c — the second demo model (tests/golden/demo35/: a trained Qwen3.5 hybrid,
 * Gated DeltaNet + gated attention, with one MTP block; Q4_K_M) on the CPU backend:
 * - its three cases (tests/golden/demo35/manifest.json): teacher-forced logits over all_ids within
 *   the CPU tolerance 1e-3 max row relative error of the reference (fp32 forward of the training
 *   code on the exact dequantized Q4_K_M weights), greedy continuation equal to generated_ids up to
 *   the first small reference margin, whole prompts and prompts fed in chunks of 7;
 * - its MTP head: the MTP block's teacher-forced logits (model_mtp_forward over every position, row p
 *   drafting token p + 2 from the main model's hidden at p and token p + 1) against the reference's
 *   MTP rows at the same CPU tolerance, top-1 equal on every row whose reference margin is >= 0.05;
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

/* demo35's model on the CPU backend for up to max_tokens per step (fails the test on error). */
static model_t *open_demo35(int max_tokens, gguf_t **g, be_t **be) {
  char path[4096];
  gt_err_t err = {0};
  model_t *m = NULL;
  if (gguf_open(model_path("demo35", path, sizeof path), g, &err)) fail_msg("gguf_open: %s", err.msg);
  if (be_cpu_create(1, be, &err)) fail_msg("be_cpu_create: %s", err.msg);
  if (model_load(*g, *be, max_tokens, &m, &err)) fail_msg("model_load: %s", err.msg);
  return m;
}

/* One case's MTP rows: the main forward over all_ids keeps every row's final-normed hidden state
 * (model_mtp_enable), then one MTP pass over positions 0 .. L-2 (its KV layer filled causally, as
 * the reference's MTP attention sees them), compared on the stored rows. */
static void mtp_case(model_t *m, json_t *c) {
  gt_err_t err = {0};
  const int V = m->hp.n_vocab;
  json_t *ja = json_object_get(c, "all_ids");
  const int L = (int)json_array_size(ja), r0 = (int)json_integer_value(json_object_get(c, "mtp_logits_first_row"));
  const int keep = (int)json_integer_value(json_array_get(json_object_get(c, "mtp_logits_shape"), 0));
  assert_true(L > 1 && L <= 256 && r0 >= 0 && keep > 0 && r0 + keep <= L - 1);
  int32_t *ids = malloc(sizeof(int32_t) * 6 * (size_t)L), *pos = ids + L, *tok = pos + L, *src = tok + L, *out = src + L;
  int32_t bt[16], first = 0, slot = 0, ntok = L, last = L - 1, n1 = L - 1;
  for (int i = 0; i < 16; i++) bt[i] = i;
  for (int i = 0; i < L; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ja, i)), pos[i] = i;
  for (int p = 0; p < L - 1; p++) tok[p] = ids[p + 1], src[p] = p, out[p] = p;
  float *lg = malloc(sizeof(float) * (size_t)L * V);
  be_batch_t b = {.n_tok = L, .n_seq = 1, .tok = ids, .pos = pos, .seq_first = &first, .seq_ntok = &ntok,
                  .block_table = bt, .max_blocks = 16, .state_slot = &slot, .n_out = 1, .out_tok = &last};
  if (model_forward(m, &b, lg, &err)) fail_msg("model_forward: %s", err.msg);
  be_batch_t mb = {.n_tok = n1, .n_seq = 1, .tok = tok, .pos = pos, .seq_first = &first, .seq_ntok = &n1,
                   .block_table = bt, .max_blocks = 16, .n_out = n1, .out_tok = out};
  if (model_mtp_forward(m, &mb, src, lg, &err)) fail_msg("model_mtp_forward: %s", err.msg);
  char rel[512];
  snprintf(rel, sizeof rel, "demo35/%s", json_string_value(json_object_get(c, "mtp_logits_file")));
  size_t len = 0;
  float *ref = tu_read_file(tu_golden(rel), &len);
  assert_non_null(ref);
  assert_int_equal(len, sizeof(float) * (size_t)keep * V);
  /* the fixtures' metric (max row relative error) and top-1 rule (margin >= 0.05), as gm_run_case */
  const double worst = tu_max_row_rel_err(lg + (size_t)r0 * V, ref, keep, V);
  int agree = 0, strong = 0;
  for (int r = 0; r < keep; r++) {
    const float *a = lg + (size_t)(r0 + r) * V, *e = ref + (size_t)r * V;
    const int ta = tu_argmax(a, V), te = tu_argmax(e, V);
    const float me = gm_margin(e, V);
    if (me >= 0.05f) {
      strong++;
      if (ta != te) fail_msg("MTP row %d: top-1 %d, reference %d (margin %.3f)", r0 + r, ta, te, me);
    }
    agree += ta == te;
  }
  printf("demo35 MTP head, rows %d..%d: max_rel_err %.3e  top1 %d/%d (margin >= 0.05: %d)\n", r0, r0 + keep - 1, worst,
         agree, keep, strong);
  assert_true(worst <= CPU_TOL);
  free(ref), free(lg), free(ids);
}

static void test_mtp_cases(void **st) {
  (void)st;
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = open_demo35(256, &g, &be);
  if (model_mtp_enable(m, &err) || model_cache_init(m, 16, 16, 1, &err)) fail_msg("MTP setup: %s", err.msg);
  json_t *man = tu_json("demo35/manifest.json");
  json_t *cs = json_object_get(man, "cases");
  for (size_t i = 0; i < json_array_size(cs); i++) mtp_case(m, json_array_get(cs, i));
  json_decref(man);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
}

static void test_layout(void **st) {
  (void)st;
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = open_demo35(64, &g, &be);
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
      cmocka_unit_test(test_mtp_cases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
