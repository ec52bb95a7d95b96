/* tests/unit/test_mkmodel.c — synthetic models: tiny presets written to disk open with the
 * reader and have the fixtures' key set, tensor names, shapes and types; weights look like a
 * trained model's (norms near 1, ssm_a < 0, matrices std ~0.02); generation is deterministic
 * and thread-count independent; the qwen35-9b table (header only, no data written) matches a
 * table derived here from the preset's numbers and llama.cpp's naming and Q4_K_M rules. */
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
#include "tools/mkmodel.h"
#include "tools/quantize.h"
#include "tests/common/testutil.h"

static char g_path[256];

static const char *tmp(const char *tag) {
  snprintf(g_path, sizeof g_path, "/tmp/gantry_test_mkmodel_%d_%s.gguf", (int)getpid(), tag);
  return g_path;
}

static gguf_t *open_ok(const char *path) {
  gguf_t *g = NULL;
  gt_err_t err = {0};
  int rc = gguf_open(path, &g, &err);
  if (rc) fprintf(stderr, "%s: %s\n", path, err.msg);
  assert_int_equal(rc, GT_OK);
  return g;
}

static void write_preset(const char *preset, const char *type, const char *path, uint64_t seed, int threads) {
  mk_plan_t *pl = NULL;
  gt_err_t err = {0};
  assert_int_equal(mk_plan_create(preset, type, -1, 0, &pl, &err), GT_OK);
  int rc = mk_write(pl, path, seed, threads, &err);
  if (rc) fprintf(stderr, "mk_write: %s\n", err.msg);
  assert_int_equal(rc, GT_OK);
  mk_plan_free(pl);
}

static void compare_with_fixture(const char *preset, const char *fixture) {
  const char *path = tmp(preset);
  write_preset(preset, "bf16", path, 7, 2);
  gguf_t *m = open_ok(path), *f = open_ok(tu_golden(fixture));
  /* the fixture's key set with the same value types, plus what llama.cpp requires beyond the
   * fixture's converter output: qwen35 rope.dimension_sections (the tiny HF config has no
   * mrope_section, real Qwen3.5 checkpoints do) */
  const int qwen35 = strcmp(gguf_arch(f), "qwen35") == 0;
  assert_int_equal(gguf_n_kv(m), gguf_n_kv(f) + (qwen35 ? 1 : 0));
  if (qwen35) {
    gguf_vtype_t st;
    uint64_t ns;
    assert_int_equal(gguf_get_arr(m, "qwen35.rope.dimension_sections", &st, &ns), GT_OK);
    assert_int_equal(st, GGUF_VT_INT32);
    assert_int_equal(ns, 4);
    int64_t rd, sum = 0, v;
    assert_int_equal(gguf_get_int(m, "qwen35.rope.dimension_count", &rd), GT_OK);
    for (uint64_t i = 0; i < 4; i++) {
      assert_int_equal(gguf_arr_int(m, "qwen35.rope.dimension_sections", i, &v), GT_OK);
      assert_true(v >= 0);
      sum += v;
    }
    assert_int_equal(sum, rd / 2); /* the sections cover the rotary pairs */
  }
  for (int64_t i = 0; i < gguf_n_kv(f); i++) {
    int64_t j = gguf_find_key(m, gguf_key(f, i));
    if (j < 0) fprintf(stderr, "%s: missing key %s\n", preset, gguf_key(f, i));
    assert_true(j >= 0);
    assert_int_equal(gguf_kv_type(m, j), gguf_kv_type(f, i));
  }
  /* same architecture numbers */
  static const char *const k_num[] = {"block_count", "embedding_length", "feed_forward_length",
                                      "attention.head_count", "attention.head_count_kv",
                                      "attention.key_length", "ssm.conv_kernel", "ssm.state_size",
                                      "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
                                      "full_attention_interval", "rope.dimension_count"};
  for (size_t i = 0; i < sizeof k_num / sizeof k_num[0]; i++) {
    char key[128];
    int64_t a, b;
    snprintf(key, sizeof key, "%s.%s", gguf_arch(f), k_num[i]);
    if (gguf_get_int(f, key, &b) != GT_OK) continue;
    assert_int_equal(gguf_get_int(m, key, &a), GT_OK);
    assert_int_equal(a, b);
  }
  /* same tensors: names, dims, shapes, types (and the same order as llama.cpp's converter) */
  assert_int_equal(gguf_n_tensors(m), gguf_n_tensors(f));
  for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
    const gguf_tensor_t *a = gguf_tensor(m, i), *b = gguf_tensor(f, i);
    if (strcmp(a->name, b->name)) fprintf(stderr, "tensor %lld: %s vs %s\n", (long long)i, a->name, b->name);
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->n_dims, b->n_dims);
    assert_memory_equal(a->ne, b->ne, sizeof a->ne);
    assert_int_equal(a->type, b->type);
  }
  /* tokenizer: vocab size, specials at the end, eos = <|im_end|>, Qwen3 chat template */
  gguf_vtype_t et;
  uint64_t n;
  assert_int_equal(gguf_get_arr(m, "tokenizer.ggml.tokens", &et, &n), GT_OK);
  assert_int_equal(n, 1024);
  const char *s;
  size_t len;
  int64_t eos;
  assert_int_equal(gguf_get_int(m, "tokenizer.ggml.eos_token_id", &eos), GT_OK);
  assert_int_equal(gguf_arr_str(m, "tokenizer.ggml.tokens", (uint64_t)eos, &s, &len), GT_OK);
  assert_int_equal(len, 10);
  assert_memory_equal(s, "<|im_end|>", 10);
  assert_int_equal(gguf_arr_str(m, "tokenizer.ggml.tokens", 0, &s, &len), GT_OK);
  assert_memory_equal(s, "!", 1);
  assert_int_equal(gguf_arr_str(m, "tokenizer.ggml.tokens", 255, &s, &len), GT_OK);
  assert_memory_equal(s, "\xc5\x83", 2); /* byte 0xAD -> U+0143 */
  int64_t tt;
  assert_int_equal(gguf_arr_int(m, "tokenizer.ggml.token_type", (uint64_t)eos, &tt), GT_OK);
  assert_int_equal(tt, 3);
  gguf_t *voc = open_ok(tu_golden("qwen3-vocab.gguf"));
  const char *t1, *t2;
  size_t l1, l2;
  assert_int_equal(gguf_get_str(m, "tokenizer.chat_template", &t1, &l1), GT_OK);
  assert_int_equal(gguf_get_str(voc, "tokenizer.chat_template", &t2, &l2), GT_OK);
  assert_int_equal(l1, l2);
  assert_memory_equal(t1, t2, l1);
  gguf_close(voc);
  /* weights look trained: norms near 1, ssm_a negative, matrices std ~0.02 */
  for (int64_t i = 0; i < gguf_n_tensors(m); i++) {
    const gguf_tensor_t *t = gguf_tensor(m, i);
    int64_t cnt = t->ne[0] * t->ne[1];
    float *x = malloc((size_t)cnt * sizeof *x);
    assert_non_null(x);
    assert_int_equal(qz_row_to_f32(t->type, t->data, x, cnt), GT_OK);
    double mean = 0, var = 0, mx = -1e30;
    for (int64_t k = 0; k < cnt; k++) {
      mean += x[k];
      if (x[k] > mx) mx = x[k];
    }
    mean /= (double)cnt;
    for (int64_t k = 0; k < cnt; k++) var += (x[k] - mean) * (x[k] - mean);
    double sd = sqrt(var / (double)cnt);
    if (strstr(t->name, "norm")) {
      assert_true(fabs(mean - 1.0) < 0.01);
      assert_true(sd > 0.005 && sd < 0.05);
    } else if (strlen(t->name) > 6 && !strcmp(t->name + strlen(t->name) - 6, ".ssm_a")) {
      assert_true(mx < 0);
    } else if (t->n_dims == 2 && !strstr(t->name, "conv1d") && cnt >= 4096) {
      assert_true(fabs(mean) < 0.002);
      assert_true(sd > 0.018 && sd < 0.022);
    }
    free(x);
  }
  gguf_close(m);
  gguf_close(f);
  unlink(path);
}

static void test_qwen3_tiny(void **state) {
  (void)state;
  compare_with_fixture("qwen3-tiny", "qwen3-tiny.bf16.gguf");
}

static void test_qwen35_tiny(void **state) {
  (void)state;
  compare_with_fixture("qwen35-tiny", "qwen35-tiny.bf16.gguf");
}

/* Same seed: same bytes whatever the thread count; another seed: other weights. Quantized
 * types match the Q4_K_M plan and the CLI reports the file size. */
static void test_deterministic_and_cli(void **state) {
  (void)state;
  char a[256], b[256], c[256];
  snprintf(a, sizeof a, "%s", tmp("det1"));
  snprintf(b, sizeof b, "%s", tmp("det2"));
  snprintf(c, sizeof c, "%s", tmp("det3"));
  write_preset("qwen35-tiny", "Q4_K_M", a, 42, 1);
  write_preset("qwen35-tiny", "Q4_K_M", b, 42, 3);
  write_preset("qwen35-tiny", "Q4_K_M", c, 43, 2);
  size_t la, lb, lc;
  void *da = tu_read_file(a, &la), *db = tu_read_file(b, &lb), *dc = tu_read_file(c, &lc);
  assert_non_null(da);
  assert_non_null(db);
  assert_non_null(dc);
  assert_int_equal(la, lb);
  assert_int_equal(la, lc);
  assert_memory_equal(da, db, la);
  assert_true(memcmp(da, dc, la) != 0);
  free(da);
  free(db);
  free(dc);
  /* the Q4_K_M file holds what gantry-quantize makes of the bf16 file of the same seed */
  write_preset("qwen35-tiny", "bf16", b, 42, 2);
  gt_err_t qerr = {0};
  qz_opts_t qo = {.flags = QZ_KEEP_OUTPUT_BF16, .n_threads = 2};
  assert_int_equal(qz_quantize_file(b, c, QZ_MIX_Q4_K_M, &qo, NULL, &qerr), GT_OK);
  gguf_t *g = open_ok(a), *gq = open_ok(c);
  assert_int_equal(gguf_n_tensors(g), gguf_n_tensors(gq));
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *x = gguf_tensor(g, i), *y = gguf_find_tensor(gq, x->name);
    assert_non_null(y);
    assert_int_equal(x->type, y->type);
    assert_int_equal(x->nbytes, y->nbytes);
    assert_memory_equal(x->data, y->data, x->nbytes);
  }
  gguf_close(gq);
  assert_int_equal(gguf_find_tensor(g, "output.weight")->type, GT_TYPE_BF16); /* qwen35 default */
  assert_int_equal(gguf_find_tensor(g, "token_embd.weight")->type, GT_TYPE_Q4_K);
  assert_int_equal(gguf_find_tensor(g, "blk.0.attn_qkv.weight")->type, GT_TYPE_Q4_K);
  assert_int_equal(gguf_find_tensor(g, "blk.3.attn_v.weight")->type, GT_TYPE_Q6_K);
  assert_int_equal(gguf_find_tensor(g, "blk.0.ssm_conv1d.weight")->type, GT_TYPE_F32);
  int64_t ft;
  assert_int_equal(gguf_get_int(g, "general.file_type", &ft), GT_OK);
  assert_int_equal(ft, 15);
  gguf_close(g);
  unlink(a);
  unlink(b);
  unlink(c);

  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s --preset qwen3-tiny --type Q8_0 --out %s --seed 5", tu_bin("gantry-mkmodel"), a);
  assert_int_equal(tu_run(cmd, &out), 0);
  assert_non_null(out);
  assert_non_null(strstr(out, "bytes/token"));
  g = open_ok(a);
  char want[64];
  snprintf(want, sizeof want, "file %zu bytes", gguf_file_size(g));
  assert_non_null(strstr(out, want));
  gguf_close(g);
  free(out);
  unlink(a);
  out = NULL;
  snprintf(cmd, sizeof cmd, "%s --preset nope --type Q8_0 --out %s 2>&1", tu_bin("gantry-mkmodel"), a);
  assert_int_not_equal(tu_run(cmd, &out), 0);
  assert_non_null(strstr(out, "unknown preset"));
  free(out);
}

/* ---- the expected qwen35-9b Q4_K_M table, derived independently ---- */

typedef struct {
  char name[64];
  int64_t ne0, ne1; /* ne1 = 0: 1-D */
  gt_type_t type;
} exp_t;

static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static void push(exp_t *e, int *n, const char *name, int64_t ne0, int64_t ne1, gt_type_t ty) {
  snprintf(e[*n].name, sizeof e[*n].name, "%s", name);
  e[*n].ne0 = ne0;
  e[*n].ne1 = ne1;
  e[*n].type = ty;
  (*n)++;
}

static void test_qwen35_9b_header(void **state) {
  (void)state;
  /* Qwen3.5-9B: hidden 4096, 32 layers (every 4th full attention), 16 heads, 4 KV heads,
   * head_dim 256, GDN 16 key / 32 value heads of 128, conv 4, ffn 12288, vocab 248320,
   * untied, one MTP layer (blk.32). Q4_K_M with the BF16 head. */
  const int64_t E = 4096, L = 32, H = 16, KV = 4, HD = 256, KH = 16, VH = 32, D = 128, F = 12288,
                V = 248320, NL = L + 1;
  const int64_t conv = 2 * KH * D + VH * D;
  exp_t *e = calloc(600, sizeof *e);
  int n = 0;
  char nm[64];
  push(e, &n, "output.weight", E, V, GT_TYPE_BF16);
  push(e, &n, "token_embd.weight", E, V, GT_TYPE_Q4_K);
  push(e, &n, "output_norm.weight", E, 0, GT_TYPE_F32);
  for (int il = 0; il < NL; il++) {
    const int attn = il == L || il % 4 == 3;
    const gt_type_t v_type = more_bits(il, (int)NL) ? GT_TYPE_Q6_K : GT_TYPE_Q4_K;
#define P(suffix, a, b, t) (snprintf(nm, sizeof nm, "blk.%d." suffix, il), push(e, &n, nm, a, b, t))
    P("attn_norm.weight", E, 0, GT_TYPE_F32);
    P("post_attention_norm.weight", E, 0, GT_TYPE_F32);
    P("ffn_gate.weight", E, F, GT_TYPE_Q4_K);
    P("ffn_up.weight", E, F, GT_TYPE_Q4_K);
    P("ffn_down.weight", F, E, v_type);
    if (attn) {
      P("attn_q.weight", E, 2 * H * HD, GT_TYPE_Q4_K);
      P("attn_k.weight", E, KV * HD, GT_TYPE_Q4_K);
      P("attn_v.weight", E, KV * HD, v_type);
      P("attn_output.weight", H * HD, E, GT_TYPE_Q4_K);
      P("attn_q_norm.weight", HD, 0, GT_TYPE_F32);
      P("attn_k_norm.weight", HD, 0, GT_TYPE_F32);
    } else {
      P("attn_qkv.weight", E, conv, v_type);
      P("attn_gate.weight", E, VH * D, GT_TYPE_Q4_K);
      P("ssm_conv1d.weight", 4, conv, GT_TYPE_F32);
      P("ssm_a", VH, 0, GT_TYPE_F32);
      P("ssm_dt.bias", VH, 0, GT_TYPE_F32);
      P("ssm_alpha.weight", E, VH, GT_TYPE_Q4_K);
      P("ssm_beta.weight", E, VH, GT_TYPE_Q4_K);
      P("ssm_norm.weight", D, 0, GT_TYPE_F32);
      P("ssm_out.weight", VH * D, E, GT_TYPE_Q4_K);
    }
    if (il == L) {
      P("nextn.eh_proj.weight", 2 * E, E, GT_TYPE_Q4_K);
      P("nextn.enorm.weight", E, 0, GT_TYPE_F32);
      P("nextn.hnorm.weight", E, 0, GT_TYPE_F32);
      P("nextn.shared_head_norm.weight", E, 0, GT_TYPE_F32);
    }
#undef P
  }
  mk_plan_t *pl = NULL;
  gt_err_t err = {0};
  /* without --mtp: what llama.cpp's converter writes (no nextn layers) */
  assert_int_equal(mk_plan_create("qwen35-9b", "Q4_K_M", -1, 0, &pl, &err), GT_OK);
  int n_main = 0;
  for (int i = 0; i < n; i++) n_main += !strstr(e[i].name, "blk.32.");
  assert_int_equal(pl->n, n_main);
  assert_int_equal(pl->n_nextn, 0);
  assert_int_equal(pl->mtp_bytes, 0);
  for (int64_t j = 0; j < pl->n; j++) assert_null(strstr(pl->t[j].name, "blk.32."));
  mk_plan_free(pl);
  pl = NULL;
  assert_int_equal(mk_plan_create("qwen35-9b", "Q4_K_M", -1, 1, &pl, &err), GT_OK);
  assert_int_equal(pl->n, n);
  uint64_t data = 0, per_token = 0;
  for (int i = 0; i < n; i++) {
    const mk_tensor_t *t = NULL;
    for (int64_t j = 0; j < pl->n && !t; j++)
      if (!strcmp(pl->t[j].name, e[i].name)) t = &pl->t[j];
    if (!t) fprintf(stderr, "missing %s\n", e[i].name);
    assert_non_null(t);
    assert_int_equal(t->n_dims, e[i].ne1 ? 2 : 1);
    assert_int_equal(t->ne[0], e[i].ne0);
    assert_int_equal(t->ne[1], e[i].ne1 ? e[i].ne1 : 1);
    if (t->type != e[i].type) fprintf(stderr, "%s: %s want %s\n", e[i].name, dt_name(t->type), dt_name(e[i].type));
    assert_int_equal(t->type, e[i].type);
    uint64_t bytes = (uint64_t)dt_row_bytes(e[i].type, e[i].ne0) * (uint64_t)(e[i].ne1 ? e[i].ne1 : 1);
    assert_int_equal(t->nbytes, bytes);
    data += (bytes + 31) / 32 * 32;
    if (strcmp(e[i].name, "token_embd.weight") && !strstr(e[i].name, "blk.32.")) per_token += bytes;
  }
  /* offsets are consecutive, 32-aligned, in table order */
  uint64_t off = 0;
  for (int64_t j = 0; j < pl->n; j++) {
    assert_int_equal(pl->t[j].offset, off);
    off += (pl->t[j].nbytes + 31) / 32 * 32;
  }
  assert_int_equal(pl->data_bytes, data);
  assert_int_equal(pl->bytes_per_token, per_token);
  printf("qwen35-9b Q4_K_M: %lld tensors, file %llu bytes, bytes/token %llu\n", (long long)pl->n,
         (unsigned long long)(pl->header_bytes + pl->data_bytes), (unsigned long long)pl->bytes_per_token);
  mk_plan_free(pl);
  free(e);
}

/* mk_plan_create_sized: a production-width stack of a few layers with a small vocabulary (the TP
 * shape checks of scripts/gpu/tp_local.sh): the layers and the vocabulary asked for, the widths of
 * the preset; bad sizes refused. */
static void test_sized(void **st) {
  (void)st;
  mk_plan_t *pl = NULL;
  gt_err_t err = {0};
  assert_int_equal(mk_plan_create_sized("qwen35-27b", "Q4_K_M", -1, 0, 4, 8192, &pl, &err), GT_OK);
  assert_int_equal(pl->p->n_layer, 4);
  assert_int_equal(pl->p->n_vocab, 8192);
  assert_int_equal(pl->p->n_embd, 5120);
  assert_int_equal(pl->p->n_ff, 17408);
  assert_int_equal(mk_preset("qwen35-27b")->n_layer, 64); /* the preset itself is unchanged */
  int blk3 = 0, blk4 = 0;
  for (int64_t j = 0; j < pl->n; j++) {
    const mk_tensor_t *t = &pl->t[j];
    blk3 += !strncmp(t->name, "blk.3.", 6);
    blk4 += !strncmp(t->name, "blk.4.", 6);
    if (!strcmp(t->name, "token_embd.weight") || !strcmp(t->name, "output.weight")) {
      assert_int_equal(t->ne[0], 5120);
      assert_int_equal(t->ne[1], 8192);
    }
    if (!strcmp(t->name, "blk.0.ffn_down.weight")) assert_int_equal(t->ne[0], 17408);
  }
  assert_true(blk3 > 0);
  assert_int_equal(blk4, 0);
  mk_plan_free(pl);
  pl = NULL;
  assert_int_equal(mk_plan_create_sized("qwen3-8b", "bf16", -1, 0, 0, 0, &pl, &err), GT_OK);
  assert_int_equal(pl->p->n_layer, 36); /* 0: the preset's */
  mk_plan_free(pl);
  pl = NULL;
  assert_int_not_equal(mk_plan_create_sized("qwen3-8b", "bf16", -1, 0, -1, 0, &pl, &err), GT_OK);
  assert_int_not_equal(mk_plan_create_sized("qwen3-8b", "bf16", -1, 0, 2, 100, &pl, &err), GT_OK);
  assert_non_null(strstr(err.msg, "vocabulary of 100"));
  assert_int_not_equal(mk_plan_create_sized("qwen35-9b", "Q4_K_M", -1, 1, 1, 0, &pl, &err), GT_OK);
  assert_null(pl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_tiny),
      cmocka_unit_test(test_qwen35_tiny),
      cmocka_unit_test(test_deterministic_and_cli),
      cmocka_unit_test(test_qwen35_9b_header),
      cmocka_unit_test(test_sized),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
