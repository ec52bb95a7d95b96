/* gantry-engine's command line end to end: synthetic models from gantry-mkmodel load and
 * generate (both architectures, several weight types), the demo model writes Python,
 * eval matches the golden logits, and bad input gives one clear line and a non-zero exit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/common/testutil.h"

static char tmpdir[256];

static int setup(void **st) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/gantry-cli-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **st) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static int run(char **out, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return tu_run(cmd, out);
}

static void mk_and_generate(const char *preset, const char *type) {
  char bin[1024], *out = NULL;
  snprintf(bin, sizeof bin, "%s", tu_bin("gantry-mkmodel"));
  assert_int_equal(run(NULL, "%s --preset %s --type %s --out %s/m.gguf --seed 7 >/dev/null 2>&1", bin, preset, type, tmpdir), 0);
  snprintf(bin, sizeof bin, "%s", tu_bin("gantry-engine"));
  int rc = run(&out, "%s generate --model %s/m.gguf --prompt 'hello world' --max-tokens 12 --ignore-eos 2>&1", bin, tmpdir);
  printf("%s %s: %s", preset, type, out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "generated_tokens=12"));
  free(out);
  rc = run(&out, "%s info --model %s/m.gguf 2>&1", bin, tmpdir);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, strncmp(preset, "qwen35", 6) == 0 ? "qwen35" : "qwen3"));
  free(out);
}

static void test_mkmodel_qwen3_tiny(void **st) {
  mk_and_generate("qwen3-tiny", "bf16");
  mk_and_generate("qwen3-tiny", "Q4_K_M");
  mk_and_generate("qwen3-tiny", "Q8_0");
}

static void test_mkmodel_qwen35_tiny(void **st) {
  mk_and_generate("qwen35-tiny", "bf16");
  mk_and_generate("qwen35-tiny", "Q4_K_M");
}

static void test_demo_writes_python(void **st) {
  char *out = NULL;
  int rc = run(&out, "%s generate --model %s --prompt 'def fibonacci(n):\n' --max-tokens 24 2>/dev/null",
               tu_bin("gantry-engine"), tu_golden("demo/gantry-demo-code-22m.Q4_K_M.gguf"));
  assert_int_equal(rc, 0);
  /* the reference's greedy continuation (demo/manifest.json case 0 generated_text) */
  assert_non_null(strstr(out, "\"\"\"Returns the n-th fibonacci number"));
  free(out);
}

static void test_eval_matches_golden(void **st) {
  json_t *man = tu_json("manifest.json");
  json_t *c = json_array_get(json_object_get(json_object_get(json_object_get(man, "models"), "qwen3-tiny"), "cases_Q8_0"), 0);
  json_t *ids = json_object_get(c, "all_ids");
  char list[8192] = "";
  for (size_t i = 0; i < json_array_size(ids); i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", i ? "," : "",
             (long long)json_integer_value(json_array_get(ids, i)));
  char path[512];
  snprintf(path, sizeof path, "%s/logits.f32", tmpdir);
  assert_int_equal(run(NULL, "%s eval --model %s --ids %s --logits-out %s 2>/dev/null", tu_bin("gantry-engine"),
                       tu_golden("qwen3-tiny.Q8_0.gguf"), list, path), 0);
  size_t len = 0, rlen = 0;
  float *got = tu_read_file(path, &len);
  float *ref = tu_read_file(tu_golden(json_string_value(json_object_get(c, "logits_file"))), &rlen);
  assert_int_equal(len, sizeof(float) * json_array_size(ids) * 1024);
  assert_int_equal(rlen, len);
  double e = tu_max_row_rel_err(got, ref, (int)json_array_size(ids), 1024);
  printf("eval max_rel_err %.3e\n", e);
  assert_true(e <= 1e-3);
  free(got);
  free(ref);
  json_decref(man);
}

/* the decode benchmark runs on the CPU and prints one table row per batch size, then one
 * prefill row per --prompt length */
static void test_bench(void **st) {
  char *out = NULL;
  int rc = run(&out, "%s bench --model %s --batch 1,3 --prompt 16,40 --gen 4 --threads 1 --prefill-precision fast --activations fp32 2>&1",
               tu_bin("gantry-engine"),
               tu_golden("qwen3-tiny.Q8_0.gguf"));
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "| batch | prefill tok/s"));
  assert_non_null(strstr(out, "\n| 1 | "));
  assert_non_null(strstr(out, "\n| 3 | "));
  assert_non_null(strstr(out, "| prompt | prefill ms | prefill tok/s |"));
  assert_non_null(strstr(out, "\n| 16 | "));
  assert_non_null(strstr(out, "\n| 40 | "));
  free(out);
  rc = run(&out, "%s bench --model %s --prompt 16,x 2>&1", tu_bin("gantry-engine"), tu_golden("qwen3-tiny.Q8_0.gguf"));
  assert_true(rc != 0);
  assert_non_null(strstr(out, "--prompt"));
  free(out);
  rc = run(&out, "%s bench --model %s --batch 0 2>&1", tu_bin("gantry-engine"), tu_golden("qwen3-tiny.Q8_0.gguf"));
  assert_true(rc != 0);
  assert_non_null(strstr(out, "--batch"));
  free(out);
}

static void expect_error_lines(const char *args, const char *needle, int one_line) {
  char *out = NULL;
  int rc = run(&out, "%s %s 2>&1", tu_bin("gantry-engine"), args);
  printf("$ gantry-engine %s -> %d: %s", args, rc, out);
  assert_true(rc != 0);
  assert_non_null(strstr(out, needle));
  char *nl = strchr(out, '\n');
  if (one_line) assert_true(nl == NULL || nl[1] == 0);
  free(out);
}

static void expect_error(const char *args, const char *needle) { expect_error_lines(args, needle, 1); }

/* gantry-engine args under env fails with the error want, or, from a build without the CUDA
 * backend or without NCCL, with the error that names that. */
static void expect_cuda_tp_error(const char *env, const char *args, const char *want) {
  char *out = NULL;
  int rc = run(&out, "%s %s %s 2>&1", env, tu_bin("gantry-engine"), args);
  printf("$ %s gantry-engine %s -> %d: %s", env, args, rc, out);
  assert_true(rc != 0);
  assert_true(strstr(out, want) || strstr(out, "tensor parallelism on CUDA (--tp 2): this build has no CUDA backend") ||
              strstr(out, "tensor parallelism on CUDA (--tp 2) needs NCCL: nccl: built without NCCL"));
  free(out);
}

static void test_errors(void **st) {
  char args[1024];
  expect_error("generate --model /nonexistent.gguf --prompt hi", "/nonexistent.gguf");
  snprintf(args, sizeof args, "info --model %s", tu_golden("manifest.json"));
  expect_error(args, "error");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --temperature -1", tu_golden("qwen3-tiny.bf16.gguf"));
  expect_error(args, "--temperature");
  snprintf(args, sizeof args, "eval --model %s --ids 1,2,99999 --logits-out %s/x.f32", tu_golden("qwen3-tiny.bf16.gguf"), tmpdir);
  expect_error(args, "99999");
  /* unknown architecture: the vocab-only file has none of qwen3's tensors */
  snprintf(args, sizeof args, "generate --model %s --prompt hi", tu_golden("qwen3-vocab.gguf"));
  expect_error(args, "error");
  expect_error_lines("frobnicate", "unknown command", 0); /* followed by the usage */
  /* --kv-dtype takes bf16 or fp32, checked before the model is opened */
  expect_error("serve --model /nonexistent.gguf --kv-dtype fp8", "--kv-dtype must be bf16 or fp32");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --kv-dtype q8", tu_golden("qwen3-tiny.bf16.gguf"));
  expect_error(args, "--kv-dtype must be bf16 or fp32");
  snprintf(args, sizeof args, "bench --model %s --kv-dtype f16", tu_golden("qwen3-tiny.bf16.gguf"));
  expect_error(args, "--kv-dtype must be bf16 or fp32");
  /* --prefill-precision takes exact or fast, checked before the model is opened */
  expect_error("serve --model /nonexistent.gguf --prefill-precision slow", "--prefill-precision must be exact or fast");
  snprintf(args, sizeof args, "bench --model %s --prefill-precision bf16", tu_golden("qwen3-tiny.bf16.gguf"));
  expect_error(args, "--prefill-precision must be exact or fast");
  /* the speculation switches take on or off, the suffix cache a bounded token count */
  expect_error("serve --model /nonexistent.gguf --spec-adaptive yes", "--spec-adaptive must be on or off, not 'yes'");
  expect_error("serve --model /nonexistent.gguf --spec-mtp-lookup 1", "--spec-mtp-lookup must be on or off, not '1'");
  expect_error("serve --model /nonexistent.gguf --spec-suffix-cache -1", "--spec-suffix-cache expects an integer in [0, 67108864]");
  /* --activations takes bf16 or fp32, checked before the model is opened */
  expect_error("serve --model /nonexistent.gguf --activations fp16", "--activations must be bf16 or fp32");
  snprintf(args, sizeof args, "bench --model %s --activations int8", tu_golden("qwen3-tiny.bf16.gguf"));
  expect_error(args, "--activations must be bf16 or fp32");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --activations x", tu_golden("qwen3-tiny.bf16.gguf"));
  expect_error(args, "--activations must be bf16 or fp32");
}

/* --tp: generate and eval over two CPU ranks (and one rank forced through the group) give what
 * one rank gives; bench prints the all-reduce table; unsplittable shapes, CUDA ranks without
 * GPUs or NCCL and bad --tp / --devices get one clear error */
static void test_tp(void **st) {
  char bin[1024], tiny[1024], demo[1024]; /* tu_bin / tu_golden return a static buffer */
  snprintf(bin, sizeof bin, "%s", tu_bin("gantry-engine"));
  snprintf(tiny, sizeof tiny, "%s", tu_golden("qwen3-tiny.bf16.gguf"));
  snprintf(demo, sizeof demo, "%s", tu_golden("demo/gantry-demo-code-22m.Q4_K_M.gguf"));
  char *one = NULL, *two = NULL;
  assert_int_equal(run(&one, "%s generate --model %s --prompt 'The quick brown fox' --max-tokens 12 --temperature 0 "
                             "--ignore-eos --threads 1 2>/dev/null", bin, tiny), 0);
  assert_int_equal(run(&two, "%s generate --model %s --prompt 'The quick brown fox' --max-tokens 12 --temperature 0 "
                             "--ignore-eos --threads 2 --tp 2 2>/dev/null", bin, tiny), 0);
  assert_true(strlen(one) > 1);
  assert_string_equal(one, two);
  free(two);
  /* GANTRY_TP_FORCE_GROUP=1: one rank through the group and its communicator, the same text */
  assert_int_equal(run(&two, "GANTRY_TP_FORCE_GROUP=1 %s generate --model %s --prompt 'The quick brown fox' "
                             "--max-tokens 12 --temperature 0 --ignore-eos --threads 1 2>/dev/null", bin, tiny), 0);
  assert_string_equal(one, two);
  free(one);
  free(two);
  char p1[512], p2[512];
  snprintf(p1, sizeof p1, "%s/tp1.f32", tmpdir);
  snprintf(p2, sizeof p2, "%s/tp4.f32", tmpdir);
  assert_int_equal(run(NULL, "%s eval --model %s --ids 5,6,7,8,9,10 --logits-out %s --threads 1 2>/dev/null", bin,
                       tiny, p1), 0);
  assert_int_equal(run(NULL, "%s eval --model %s --ids 5,6,7,8,9,10 --logits-out %s --threads 1 --tp 4 2>/dev/null",
                       bin, tiny, p2), 0);
  size_t l1 = 0, l2 = 0;
  float *a = tu_read_file(p1, &l1), *b = tu_read_file(p2, &l2);
  assert_int_equal(l1, sizeof(float) * 6 * 1024);
  assert_int_equal(l2, l1);
  double e = tu_max_row_rel_err(b, a, 6, 1024);
  printf("eval --tp 4 vs one rank: max_rel_err %.3e\n", e);
  assert_true(e <= 1e-5);
  free(a);
  free(b);
  char *out = NULL;
  int rc = run(&out, "%s bench --model %s --batch 1 --prompt 16 --gen 4 --threads 2 --tp 2 2>&1", bin, tiny);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "all-reduce per decode step, 2 ranks"));
  assert_non_null(strstr(out, "\n| 1 | 8 | ")); /* 4 layers x 2 all-reduces */
  free(out);
  char args[4096];
  snprintf(args, sizeof args, "generate --model %s --prompt hi --tp 4", demo);
  expect_error(args, "tensor blk.0.attn_output.weight (Q4_K, blocks of 256) cannot be split");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --tp 3", tiny);
  expect_error(args, "4 attention heads cannot be split over 3 ranks");
  /* CUDA ranks with every GPU hidden: the clear error of what is missing (a build without CUDA
   * or NCCL says that instead) */
  snprintf(args, sizeof args, "serve --model %s --tp 2 --device cuda --metrics-port -1 --listen 127.0.0.1:0", tiny);
  expect_cuda_tp_error("CUDA_VISIBLE_DEVICES=", args, "tensor parallelism on CUDA: --tp 2 needs 2 GPUs, 0 visible");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --device cuda --tp 2 --devices 1,0", tiny);
  expect_cuda_tp_error("CUDA_VISIBLE_DEVICES=", args, "tensor parallelism on CUDA: --tp 2 needs 2 GPUs, 0 visible");
  snprintf(args, sizeof args, "eval --model %s --ids 1 --logits-out %s/x.f32 --device cuda --tp 2", tiny, tmpdir);
  expect_cuda_tp_error("GANTRY_NCCL_LIB=/nonexistent/libnccl.so.2", args,
                       "tensor parallelism on CUDA (--tp 2) needs NCCL: nccl: cannot load NCCL from GANTRY_NCCL_LIB");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --device cuda:1 --tp 2", tiny);
  expect_error(args, "--device cuda:1 names one GPU; give the ranks' GPUs with --devices");
  snprintf(args, sizeof args, "bench --model %s --tp 0", tiny);
  expect_error(args, "--tp expects an integer in [1, 16]");
  snprintf(args, sizeof args, "eval --model %s --ids 1 --logits-out %s/x.f32 --tp 2 --devices 0,1", tiny, tmpdir);
  expect_error(args, "--devices names CUDA devices");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --device cuda --tp 2 --devices 0", tiny);
  expect_error(args, "--devices lists 1 devices for --tp 2");
  /* every rank on one GPU: the device-local communicator (no NCCL needed); with the GPUs hidden
   * it names the missing device. Some ranks sharing a GPU and some not: refused */
  snprintf(args, sizeof args, "generate --model %s --prompt hi --device cuda --tp 2 --devices 0,0", tiny);
  expect_cuda_tp_error("CUDA_VISIBLE_DEVICES=", args,
                       "tensor parallelism on CUDA: device-local communicator: cuda:0 not present (0 visible)");
  snprintf(args, sizeof args, "generate --model %s --prompt hi --device cuda --tp 4 --devices 0,0,1,1", tiny);
  expect_error(args, "--devices 0,0,1,1 mixes shared and distinct GPUs");
}

/* --kv-dtype bf16 on the CPU backend: fp32 pools holding bf16-rounded K/V (the GPU's values).
 * The run generates its tokens (stats on stderr), and greedy decoding of this prompt keeps the
 * fp32 pool's text (stdout; bf16 K/V are within the model's tolerance here); a type the backend
 * cannot store is refused with exit 2 and a message naming the option. */
static void test_kv_dtype(void **st) {
  (void)st;
  char *out = NULL, *ref = NULL, *stats = NULL;
  const char *fmt = "%s generate --model %s --prompt 'hello world' --max-tokens 16 --ignore-eos --threads 1 --kv-dtype %s %s";
  char bin[1024];
  snprintf(bin, sizeof bin, "%s", tu_bin("gantry-engine"));
  const char *model = tu_golden("qwen3-tiny.bf16.gguf");
  assert_int_equal(run(&stats, fmt, bin, model, "bf16", "2>&1 >/dev/null"), 0);
  printf("bf16 stats: %s", stats);
  assert_non_null(strstr(stats, " generated_tokens=16 "));
  assert_int_equal(run(&out, fmt, bin, model, "bf16", "2>/dev/null"), 0);
  assert_int_equal(run(&ref, fmt, bin, model, "fp32", "2>/dev/null"), 0);
  printf("bf16 text: %s\n", out);
  assert_true(strlen(out) > 0);
  assert_string_equal(out, ref);
  free(stats);
  free(out);
  free(ref);
  assert_int_equal(run(&out, "%s generate --model %s --prompt hi --max-tokens 4 --kv-dtype fp16 2>&1", bin, model), 2);
  assert_non_null(strstr(out, "--kv-dtype must be bf16 or fp32, got 'fp16'"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mkmodel_qwen3_tiny), cmocka_unit_test(test_mkmodel_qwen35_tiny),
      cmocka_unit_test(test_demo_writes_python), cmocka_unit_test(test_eval_matches_golden),
      cmocka_unit_test(test_errors), cmocka_unit_test(test_bench),     cmocka_unit_test(test_kv_dtype),
      cmocka_unit_test(test_tp),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
