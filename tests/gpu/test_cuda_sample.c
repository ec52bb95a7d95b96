/* The CUDA backend's `sample` op (kernels/sample.cu) against the CPU backend's (sampler_pick).
 * - Greedy rows: ids identical, on random logits with ties, -inf, huge values and NaN.
 * - Stochastic rows (temperature, top-k, top-p, min-p and their combinations; the same u on both
 *   sides): ids identical except where the CPU's expf and the GPU's double exp (rounded to fp32)
 *   differ by an ulp at a decision boundary. Every mismatch must be reproduced by emu_pick, a
 *   host model of the GPU arithmetic (double exp, the kernel's summation order, exact integer
 *   masses), and mismatches are counted and bounded (1 % of the rows + 2).
 * - Vocabularies 1024 and 151936 (qwen3), 1..32 rows per call, rows with mixed parameters.
 * - The model path: greedy decode on qwen3-tiny through gen_feed_sample (decode steps recorded
 *   into CUDA graphs, then sampled) gives the tokens of gen_feed + host argmax, with no eager step.
 * Exits 77 (skipped) when no CUDA device is visible. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "engine/backend/backend_cuda.h"
#include "engine/models/gen.h"
#include "format/gguf.h"
#include "engine/models/model.h"
#include "engine/backend/sampler.h"
#include "tests/common/testutil.h"

static be_t *CPU_BE, *GPU_BE;
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static uint64_t next64(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static double urand(void) { return (double)(next64() >> 11) * (1.0 / 9007199254740992.0); } /* k * 2^-53 */
static double nrand(void) { /* ~N(0, 1) */
  double s = 0;
  for (int i = 0; i < 4; i++) s += urand();
  return (s - 2) * 1.7320508;
}

/* ---- emu_pick: the GPU's arithmetic on the host (see kernels/sample.cu) ---- */

static const float *g_sort_prob;
static int cmp_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (g_sort_prob[x] != g_sort_prob[y]) return g_sort_prob[x] > g_sort_prob[y] ? -1 : 1;
  return x < y ? -1 : 1;
}
static uint64_t fx(float p) { return p > 0 ? (uint64_t)rint((double)p * 0x1p63) : 0; }

static int32_t emu_argmax(const float *x, int V) {
  int32_t best = 0;
  for (int i = 1; i < V; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static int32_t emu_pick(const be_sample_row_t *p, const float *x, int V, float *prob, int32_t *ord) {
  const int32_t best = emu_argmax(x, V);
  if (p->temperature <= 0 || p->top_k == 1) return best;
  const float mx = x[best];
  /* the kernel's summation order: thread t (of 1024) sums i = t mod 1024 ascending; warps reduce
   * by xor butterflies; the 32 warp sums are added in order */
  double lane[1024];
  for (int t = 0; t < 1024; t++) lane[t] = 0;
  for (int i = 0; i < V; i++) {
    volatile float a = x[i] - mx; /* fp32, as the kernel */
    volatile float b = a / p->temperature;
    prob[i] = (float)exp((double)b);
    lane[i % 1024] += (double)prob[i];
  }
  double sum = 0;
  for (int w = 0; w < 32; w++) {
    double v[32], nv[32];
    memcpy(v, lane + 32 * w, sizeof v);
    for (int o = 16; o > 0; o >>= 1) {
      for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ o];
      memcpy(v, nv, sizeof v);
    }
    sum += v[0];
  }
  const float pmax = (float)(1.0 / sum);
  for (int i = 0; i < V; i++) prob[i] = (float)((double)prob[i] / sum);
  if (p->top_k <= 0 && p->top_p >= 1 && p->min_p <= 0) {
    const uint64_t r = (uint64_t)(p->u * 0x1p63);
    uint64_t c = 0;
    for (int i = 0; i < V; i++) {
      c += fx(prob[i]);
      if (r < c) return i;
    }
    return best;
  }
  int n = 0;
  for (int i = 0; i < V; i++)
    if (prob[i] == prob[i]) ord[n++] = i;
  g_sort_prob = prob;
  qsort(ord, (size_t)n, sizeof(int32_t), cmp_desc);
  const float thr = p->min_p > 0 ? p->min_p * pmax : 0.0f;
  uint64_t lim_n = 0, lim_m = 0;
  for (int i = 0; i < n && prob[ord[i]] >= thr; i++) lim_n++, lim_m += fx(prob[ord[i]]);
  if (p->top_k > 0 && (uint64_t)p->top_k < lim_n) {
    lim_n = (uint64_t)p->top_k;
    lim_m = 0;
    for (uint64_t i = 0; i < lim_n; i++) lim_m += fx(prob[ord[i]]);
  }
  if (p->top_p < 1) {
    const uint64_t target = (uint64_t)ceil((double)p->top_p * 0x1p63);
    uint64_t c = 0;
    for (int i = 0; i < n; i++) {
      c += fx(prob[ord[i]]);
      if (c >= target) {
        if ((uint64_t)i + 1 < lim_n) lim_n = (uint64_t)i + 1, lim_m = c;
        break;
      }
    }
  }
  if (lim_n == 0) return best;
  const uint64_t k53 = (uint64_t)(p->u * 0x1p53);
  const uint64_t r = (uint64_t)(((unsigned __int128)k53 * lim_m) >> 53);
  uint64_t c = 0;
  for (uint64_t i = 0; i < lim_n; i++) {
    c += fx(prob[ord[i]]);
    if (c > r) return ord[i];
  }
  return ord[lim_n - 1];
}

/* ---- harness ---- */

typedef struct {
  long rows, greedy, exact, mismatch, emu_explained, gpu_vs_emu;
} tally_t;

/* logits [n_rows, V]: N(0, scale) with exact ties; kind 1 adds -inf and huge (+-3e38) values
 * (run_case adds NaN to greedy rows) */
static void fill(float *l, int n_rows, int V, int kind) {
  for (int r = 0; r < n_rows; r++) {
    float *x = l + (size_t)r * V;
    const double scale = 1 + 6 * urand();
    for (int i = 0; i < V; i++) {
      x[i] = (float)(nrand() * scale);
      const double q = urand();
      if (q < 0.03) x[i] = floorf(x[i]); /* exact ties */
      if (kind && q > 0.97) x[i] = -INFINITY;
    }
    if (urand() < 0.5) x[(size_t)(urand() * V)] = (float)(4 * scale); /* a peaked row */
    if (kind && urand() < 0.3) {
      x[(size_t)(urand() * V)] = 3e38f;
      x[(size_t)(urand() * V)] = 3e38f; /* tied huge maxima */
      x[(size_t)(urand() * V)] = -3e38f;
    }
  }
}

static const be_sample_row_t PRESETS[] = {
    {.temperature = 1.0f, .top_k = 0, .top_p = 1, .min_p = 0},
    {.temperature = 0.7f, .top_k = 40, .top_p = 1, .min_p = 0},
    {.temperature = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0},
    {.temperature = 0.8f, .top_k = 0, .top_p = 1, .min_p = 0.05f},
    {.temperature = 1.2f, .top_k = 100, .top_p = 0.95f, .min_p = 0.01f},
    {.temperature = 1.5f, .top_k = 200000, .top_p = 0.999f, .min_p = 0},
    {.temperature = 0.3f, .top_k = 0, .top_p = 0.5f, .min_p = 0},
    {.temperature = 2.0f, .top_k = 5000, .top_p = 1, .min_p = 0.001f},
    {.temperature = 0.05f, .top_k = 3, .top_p = 0.8f, .min_p = 0.2f},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

/* One call of n_rows rows on both backends; preset < 0: random preset per row, greedy included. */
static void run_case(int V, int n_rows, int preset, int greedy, tally_t *t) {
  const size_t n = (size_t)n_rows * V;
  float *l = malloc(sizeof(float) * n), *row = malloc(sizeof(float) * (size_t)V), *prob = malloc(sizeof(float) * (size_t)V);
  int32_t *ord = malloc(sizeof(int32_t) * (size_t)V), ids_c[32], ids_g[32];
  be_sample_row_t rows[32];
  fill(l, n_rows, V, 1);
  for (int r = 0; r < n_rows; r++) {
    const int k = preset >= 0 ? preset : (int)(urand() * (N_PRESETS + 2));
    rows[r] = greedy || k >= N_PRESETS ? (be_sample_row_t){.temperature = k == N_PRESETS ? 1.0f : 0, .top_k = 1}
                                       : PRESETS[k];
    if (greedy && r % 2) rows[r] = (be_sample_row_t){.temperature = 0, .top_p = 1};
    rows[r].u = urand();
    if (greedy && r == 0) l[0] = NAN; /* the CPU's argmax returns 0 then */
    if (greedy && r == 1) for (int i = 0; i < V; i++) l[(size_t)V + i] = -INFINITY; /* all -inf: 0 */
  }
  float *dc = CPU_BE->ops->alloc(CPU_BE, sizeof(float) * n), *dg = GPU_BE->ops->alloc(GPU_BE, sizeof(float) * n);
  assert_non_null(dc);
  assert_non_null(dg);
  assert_int_equal(CPU_BE->ops->upload(CPU_BE, dc, l, sizeof(float) * n), 0);
  assert_int_equal(GPU_BE->ops->upload(GPU_BE, dg, l, sizeof(float) * n), 0);
  assert_int_equal(CPU_BE->ops->sample(CPU_BE, dc, n_rows, V, rows, ids_c), 0);
  assert_int_equal(GPU_BE->ops->sample(GPU_BE, dg, n_rows, V, rows, ids_g), 0);
  for (int r = 0; r < n_rows; r++) {
    const int is_greedy = rows[r].temperature <= 0 || rows[r].top_k == 1;
    t->rows++;
    assert_true(ids_g[r] >= 0 && ids_g[r] < V);
    if (is_greedy) {
      t->greedy++;
      if (ids_g[r] != ids_c[r]) fail_msg("greedy V=%d row %d: gpu %d cpu %d", V, r, ids_g[r], ids_c[r]);
      continue;
    }
    const int32_t e = emu_pick(&rows[r], l + (size_t)r * V, V, prob, ord);
    t->gpu_vs_emu += e != ids_g[r];
    if (ids_g[r] == ids_c[r]) {
      t->exact++;
      continue;
    }
    t->mismatch++;
    memcpy(row, l + (size_t)r * V, sizeof(float) * (size_t)V);
    sampler_pick_t pk = {rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].min_p, NULL};
    (void)sampler_pick(&pk, row, V, rows[r].u); /* row = the CPU's probabilities */
    print_message("mismatch V=%d row %d (T=%g k=%d p=%g min_p=%g u=%.17g): gpu %d (p_cpu %.9g) cpu %d (p_cpu %.9g) "
                  "emu %d\n", V, r, rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].min_p, rows[r].u,
                  ids_g[r], row[ids_g[r]], ids_c[r], row[ids_c[r]], e);
    if (e != ids_g[r]) fail_msg("V=%d row %d: gpu %d matches neither the CPU (%d) nor the GPU model (%d)", V, r, ids_g[r],
                                ids_c[r], e);
    t->emu_explained++;
  }
  CPU_BE->ops->free(CPU_BE, dc);
  GPU_BE->ops->free(GPU_BE, dg);
  free(l), free(row), free(prob), free(ord);
}

static void report(const char *what, const tally_t *t) {
  print_message("%s: rows %ld (greedy %ld, all equal), stochastic equal %ld, mismatches %ld (all reproduced by the "
                "GPU model), gpu != model %ld\n",
                what, t->rows, t->greedy, t->exact, t->mismatch, t->gpu_vs_emu);
  const long stoch = t->rows - t->greedy;
  assert_true(t->mismatch <= stoch / 100 + 2);
  assert_true(t->gpu_vs_emu <= 1); /* the model differs only where exp() differs by an ulp (~2^-29 per value) */
}

static void test_greedy(void **st) {
  if (!GPU_BE) skip();
  tally_t t = {0};
  const int vocabs[2] = {1024, 151936}, rows[4] = {1, 2, 13, 32};
  for (int v = 0; v < 2; v++)
    for (int r = 0; r < 4; r++) run_case(vocabs[v], rows[r], -1, 1, &t);
  report("greedy", &t);
  assert_int_equal(t.greedy, t.rows);
}

static void test_stochastic(void **st) {
  if (!GPU_BE) skip();
  tally_t t = {0};
  const int vocabs[2] = {1024, 151936};
  for (int v = 0; v < 2; v++) {
    for (int p = 0; p < N_PRESETS; p++) run_case(vocabs[v], v ? 8 : 32, p, 0, &t); /* one preset per call */
    const int rows[4] = {1, 5, 17, 32};
    for (int r = 0; r < 4; r++) run_case(vocabs[v], rows[r], -1, 0, &t); /* mixed rows, greedy among them */
  }
  for (int rep = 0; rep < 20; rep++) run_case(1024, 32, -1, 0, &t); /* many draws on the small vocabulary */
  report("stochastic", &t);
}

/* gen_feed_sample on the GPU (decode steps through graphs) == gen_feed + argmax, no eager step */
static void test_model_path(void **st) {
  if (!GPU_BE) skip();
  gt_err_t err = {0};
  gguf_t *g = NULL;
  model_t *m = NULL;
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err), 0);
  assert_int_equal(model_load(g, GPU_BE, 64, &m, &err), 0);
  const int V = m->hp.n_vocab, n_gen = 24;
  float *logits = malloc(sizeof(float) * (size_t)V);
  int32_t prompt[7] = {3, 141, 59, 26, 535, 89, 79}, a[24], b[24];
  be_cuda_stats_t s0, s1;
  for (int pass = 0; pass < 2; pass++) {
    gen_t *gen = NULL;
    assert_int_equal(gen_create(m, 64, &gen, &err), 0);
    int32_t *out = pass ? b : a;
    const int32_t *feed = prompt;
    int n_feed = 7;
    be_sample_row_t row = {.temperature = 0, .top_p = 1};
    if (pass) be_cuda_get_stats(GPU_BE, &s0);
    for (int i = 0; i < n_gen; i++) {
      if (pass == 0) {
        assert_int_equal(gen_feed(gen, feed, n_feed, 0, NULL, logits, &err), 0);
        out[i] = emu_argmax(logits, V);
      } else {
        assert_int_equal(gen_feed_sample(gen, feed, n_feed, 0, &row, &out[i], &err), 0);
      }
      feed = &out[i];
      n_feed = 1;
    }
    if (pass) be_cuda_get_stats(GPU_BE, &s1);
    gen_free(gen);
  }
  assert_memory_equal(a, b, sizeof a);
  print_message("model path: %d greedy tokens equal; graph steps %ld, eager steps %ld\n", n_gen,
                s1.graph_steps - s0.graph_steps, s1.eager_steps - s0.eager_steps);
  assert_true(s1.graph_steps - s0.graph_steps >= n_gen - 2);
  assert_int_equal(s1.eager_steps - s0.eager_steps, 0);
  free(logits);
  model_free(m);
  gguf_close(g);
}

static int setup(void **state) {
  gt_err_t err = {0};
  if (be_cuda_create(0, &GPU_BE, &err)) {
    print_message("be_cuda_create: %s\n", err.msg);
    return -1;
  }
  return be_cpu_create(0, &CPU_BE, &err) ? -1 : 0;
}
static int teardown(void **state) {
  be_destroy(GPU_BE);
  be_destroy(CPU_BE);
  return 0;
}

int main(void) {
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy),
      cmocka_unit_test(test_stochastic),
      cmocka_unit_test(test_model_path),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
