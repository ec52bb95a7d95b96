#include "tests/common/golden_model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/models/gen.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "engine/models/model.h"
#include "engine/backend/sampler.h"
#include "tests/common/testutil.h"

int gm_rope_freq_bf16 = 0;
be_t *(*gm_backend_factory)(void) = NULL;
int gm_top1_margin_rows = 0, gm_greedy_assert = 1;

static int32_t *ids_of(json_t *arr, int *n) {
  *n = (int)json_array_size(arr);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
  for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
  return ids;
}

float gm_margin(const float *row, int n) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return a - b;
}

static int make_backend(be_t **be, gt_err_t *err) {
  if (!gm_backend_factory) return be_cpu_create(0, be, err);
  *be = gm_backend_factory();
  return *be ? 0 : gt_err_set(err, GT_EINTERNAL, "backend factory returned no backend");
}

int gm_run_case(const char *gguf_path, json_t *c, const char *dir, int chunk, gm_result_t *res) {
  memset(res, 0, sizeof *res);
  res->greedy_first_bad = -1;
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  gen_t *gen = NULL;
  float *logits = NULL, *ref = NULL, *last = NULL;
  int32_t *all = NULL, *prompt = NULL, *want = NULL;
  int rc = -1, n_all, n_prompt, n_gen;
  all = ids_of(json_object_get(c, "all_ids"), &n_all);
  prompt = ids_of(json_object_get(c, "prompt_ids"), &n_prompt);
  want = ids_of(json_object_get(c, "generated_ids"), &n_gen);
  int first_row = (int)json_integer_value(json_object_get(c, "logits_first_row"));
  json_t *shape = json_object_get(c, "logits_shape");
  int rows = (int)json_integer_value(json_array_get(shape, 0)), V = (int)json_integer_value(json_array_get(shape, 1));
  char rel[1024];
  snprintf(rel, sizeof rel, "%s%s%s", dir, *dir ? "/" : "", json_string_value(json_object_get(c, "logits_file")));
  size_t ref_len = 0;
  ref = tu_read_file(tu_golden(rel), &ref_len);
  if (!ref || ref_len != sizeof(float) * (size_t)rows * V) {
    fprintf(stderr, "cannot read %s (or wrong size)\n", rel);
    goto done;
  }
  if ((rc = gguf_open(gguf_path, &g, &err)) || (rc = make_backend(&be, &err)) ||
      (rc = model_load(g, be, chunk > 0 ? chunk : n_all, &m, &err)) || (rc = gen_create(m, n_all, &gen, &err))) {
    fprintf(stderr, "%s: %s\n", gguf_path, err.msg);
    goto done;
  }
  be->rope_freq_bf16 = gm_rope_freq_bf16;
  if (m->hp.n_vocab != V) {
    fprintf(stderr, "vocab %d != reference %d\n", m->hp.n_vocab, V);
    rc = -1;
    goto done;
  }
  logits = malloc(sizeof(float) * (size_t)n_all * V);
  if ((rc = gen_feed(gen, all, n_all, chunk, logits, NULL, &err))) {
    fprintf(stderr, "feed: %s\n", err.msg);
    goto done;
  }
  res->rows = rows;
  res->max_rel_err = tu_max_row_rel_err(logits + (size_t)first_row * V, ref, rows, V);
  for (int r = 0; r < rows; r++) {
    const int agree = tu_argmax(logits + (size_t)(first_row + r) * V, V) == tu_argmax(ref + (size_t)r * V, V);
    res->top1_agree += agree;
    if (gm_margin(ref + (size_t)r * V, V) >= 0.05f) res->rows_m05++, res->top1_agree_m05 += agree;
  }

  /* greedy continuation from the prompt */
  gen_reset(gen);
  last = malloc(sizeof(float) * (size_t)V);
  if ((rc = gen_feed(gen, prompt, n_prompt, chunk, NULL, last, &err))) {
    fprintf(stderr, "prefill: %s\n", err.msg);
    goto done;
  }
  res->greedy_match = 1;
  for (int j = 0; j < n_gen; j++) {
    int row = n_prompt - 1 + j - first_row; /* stored row predicting generated token j */
    if (row >= 0 && row < rows && gm_margin(ref + (size_t)row * V, V) < 1e-3f) break;
    if (row >= 0 && row < rows && tu_argmax(ref + (size_t)row * V, V) != want[j]) {
      res->fixture_inconsistent = 1;
      break;
    }
    int32_t tok = (int32_t)tu_argmax(last, V);
    res->greedy_checked++;
    if (tok != want[j]) {
      res->greedy_match = 0;
      res->greedy_first_bad = j;
      break;
    }
    if (j + 1 < n_gen && (rc = gen_feed(gen, &tok, 1, 1, NULL, last, &err))) {
      fprintf(stderr, "decode: %s\n", err.msg);
      goto done;
    }
  }
  rc = 0;
done:
  gen_free(gen);
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  free(logits);
  free(ref);
  free(last);
  free(all);
  free(prompt);
  free(want);
  return rc;
}

int gm_write_bf16_copy(const char *src, const char *dst) {
  gt_err_t err = {0};
  gguf_t *g = NULL;
  gw_t *w = NULL;
  float *row = NULL;
  uint16_t *out = NULL;
  int rc = gguf_open(src, &g, &err);
  if (!rc) rc = gw_create(dst, &w, &err);
  const char *arch = g ? gguf_arch(g) : NULL;
  if (!rc && arch) rc = gw_kv_str(w, "general.architecture", arch, strlen(arch), &err);
  /* the architecture's scalar hyperparameters, by their value type */
  for (int64_t i = 0; !rc && arch && i < gguf_n_kv(g); i++) {
    const char *k = gguf_key(g, i);
    if (strncmp(k, arch, strlen(arch)) || k[strlen(arch)] != '.') continue;
    int64_t iv = 0;
    double fv = 0;
    switch (gguf_kv_type(g, i)) {
      case GGUF_VT_UINT32: gguf_get_int(g, k, &iv); rc = gw_kv_u32(w, k, (uint32_t)iv, &err); break;
      case GGUF_VT_INT32: gguf_get_int(g, k, &iv); rc = gw_kv_i32(w, k, (int32_t)iv, &err); break;
      case GGUF_VT_UINT64: gguf_get_int(g, k, &iv); rc = gw_kv_u64(w, k, (uint64_t)iv, &err); break;
      case GGUF_VT_FLOAT32: gguf_get_float(g, k, &fv); rc = gw_kv_f32(w, k, (float)fv, &err); break;
      case GGUF_VT_FLOAT64: gguf_get_float(g, k, &fv); rc = gw_kv_f64(w, k, fv, &err); break;
      case GGUF_VT_BOOL: gguf_get_int(g, k, &iv); rc = gw_kv_bool(w, k, (int)iv, &err); break;
      default: break; /* arrays and strings are not needed by the model */
    }
  }
  for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    rc = gw_tensor(w, t->name, t->n_dims, t->ne, t->n_dims >= 2 ? GT_TYPE_BF16 : t->type, &err);
  }
  if (!rc) rc = gw_begin_data(w, &err);
  for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    if (t->n_dims < 2) {
      rc = gw_write(w, t->data, t->nbytes, &err);
      continue;
    }
    int64_t n = t->ne[0], rows = (int64_t)(t->nbytes / dt_row_bytes(t->type, n));
    row = realloc(row, sizeof(float) * (size_t)n);
    out = realloc(out, sizeof(uint16_t) * (size_t)n);
    for (int64_t r = 0; !rc && r < rows; r++) {
      rc = dt_dequant_row(t->type, (const char *)t->data + (size_t)r * dt_row_bytes(t->type, n), row, n);
      for (int64_t j = 0; !rc && j < n; j++) out[j] = dt_f32_to_bf16(row[j]);
      if (!rc) rc = gw_write(w, out, sizeof(uint16_t) * (size_t)n, &err);
    }
  }
  if (!rc) {
    rc = gw_finish(w, &err);
    w = NULL;
  }
  if (rc) fprintf(stderr, "bf16 copy of %s: %s\n", src, err.msg);
  gw_free(w);
  gguf_close(g);
  free(row);
  free(out);
  return rc;
}

static char demo_bf16_path[64];

static void remove_demo_bf16(void) {
  if (demo_bf16_path[0]) unlink(demo_bf16_path);
}

const char *gm_demo_model_for_case(int case_index) {
  static char orig[4096];
  json_t *man = tu_json("demo/manifest.json");
  char rel[512];
  snprintf(rel, sizeof rel, "demo/%s", json_string_value(json_object_get(man, "model")));
  json_decref(man);
  snprintf(orig, sizeof orig, "%s", tu_golden(rel));
  gm_rope_freq_bf16 = case_index > 0;
  if (case_index == 0) return orig;
  if (!demo_bf16_path[0]) {
    snprintf(demo_bf16_path, sizeof demo_bf16_path, "/tmp/gantry-demo-bf16-XXXXXX");
    int fd = mkstemp(demo_bf16_path);
    if (fd < 0) return NULL;
    close(fd);
    atexit(remove_demo_bf16);
    if (gm_write_bf16_copy(orig, demo_bf16_path)) {
      unlink(demo_bf16_path);
      demo_bf16_path[0] = 0;
      return NULL;
    }
  }
  return demo_bf16_path;
}

gm_result_t gm_check_case(const char *path, json_t *c, const char *dir, int chunk, const char *label, double tol,
                          int min_top1_pct) {
  gm_result_t r;
  assert_int_equal(gm_run_case(path, c, dir, chunk, &r), 0);
  printf("%-24s chunk %4d: max_rel_err %.3e  top1 %d/%d (margin >= 0.05: %d/%d)  greedy %d/%s%s\n", label, chunk,
         r.max_rel_err, r.top1_agree, r.rows, r.top1_agree_m05, r.rows_m05, r.greedy_checked,
         r.greedy_match ? "match" : "MISMATCH",
         r.fixture_inconsistent ? " (stopped: reference generation disagrees with its own logits)" : "");
  assert_true(r.max_rel_err <= tol);
  if (gm_top1_margin_rows) assert_true(r.top1_agree_m05 * 100 >= r.rows_m05 * min_top1_pct);
  else assert_true(r.top1_agree * 100 >= r.rows * min_top1_pct);
  if (gm_greedy_assert) assert_true(r.greedy_match);
  assert_true(r.greedy_checked > 0 || r.fixture_inconsistent);
  return r;
}

void gm_check_cases(const char *path, json_t *cases, const char *dir, int chunk, const char *label, double tol,
                    int min_top1_pct) {
  assert_true(json_array_size(cases) > 0);
  for (size_t i = 0; i < json_array_size(cases); i++) {
    char l[128];
    snprintf(l, sizeof l, "%s case %zu", label, i);
    gm_check_case(path, json_array_get(cases, i), dir, chunk, l, tol, min_top1_pct);
  }
}

void gm_check_demo(const char *label, double tol, int min_top1_pct) {
  json_t *man = tu_json("demo/manifest.json");
  json_t *cases = json_object_get(man, "cases");
  assert_int_equal(json_array_size(cases), 3);
  for (int i = 0; i < 3; i++) {
    const char *path = gm_demo_model_for_case(i);
    assert_non_null(path);
    char l[128];
    snprintf(l, sizeof l, "%s%s case %d", label, i ? " (bf16-rounded)" : "", i);
    gm_result_t r = gm_check_case(path, json_array_get(cases, (size_t)i), "demo", 0, l, tol, min_top1_pct);
    assert_false(r.fixture_inconsistent);
  }
  gm_rope_freq_bf16 = 0;
  json_decref(man);
}
