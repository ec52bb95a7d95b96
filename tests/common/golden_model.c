#include "tests/common/golden_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gen.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "tests/common/testutil.h"

int gm_rope_freq_bf16 = 0;
be_t *(*gm_backend_factory)(void) = NULL;

static int32_t *ids_of(json_t *arr, int *n) {
  *n = (int)json_array_size(arr);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
  for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
  return ids;
}

static float margin(const float *row, int n) {
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

static int argmax(const float *row, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (row[i] > row[best]) best = i;
  return best;
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
  for (int r = 0; r < rows; r++)
    res->top1_agree += argmax(logits + (size_t)(first_row + r) * V, V) == argmax(ref + (size_t)r * V, V);

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
    if (row >= 0 && row < rows && margin(ref + (size_t)row * V, V) < 1e-3f) break;
    if (row >= 0 && row < rows && argmax(ref + (size_t)row * V, V) != want[j]) {
      res->fixture_inconsistent = 1;
      break;
    }
    int32_t tok = (int32_t)argmax(last, V);
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
