/* tests/unit/test_tp.c — tensor parallelism on CPU ranks (engine/models/tp.h, shard.h,
 * engine/backend/comm.h):
 * - the CPU communicator sums in rank order, every rank gets the identical result, and an
 *   abort wakes a rank waiting for one that failed (no hang);
 * - for qwen3-tiny (bf16, Q8_0, Q4_K_M, Q6_K), qwen35-tiny (bf16) and the demo model (Q4_K /
 *   Q6_K) at TP=2 and TP=4: teacher-forced logits of a 40-token prompt (fed in chunks of 16)
 *   within 1e-5 max row relative error of TP=1, and 12 greedy decode tokens identical — or,
 *   where the shapes cannot be split (a K-quant block of 256 columns cut by the split of
 *   attn_output), load refuses with an error naming the tensor;
 * - sampling on the group (greedy picks across ranks from each rank's argmax and its logit;
 *   sampled rows from the gathered logits) gives the one-rank greedy token and exactly what the
 *   host sampler picks from the group's logits;
 * - a rank whose backend cannot be created fails the load with an error naming the rank. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/comm.h"
#include "engine/backend/sampler.h"
#include "engine/models/gen.h"
#include "engine/models/tp.h"
#include "tests/common/gen_run.h"
#include "tests/common/testutil.h"

#define N_PROMPT 40
#define N_GREEDY 12
#define N_CTX 64
#define TOL 1e-5

/* ---- communicator ---- */

typedef struct {
  be_comm_t *c;
  int rank, rc;
  float x[1000];
} ar_arg_t;

static void *ar_thread(void *p) {
  ar_arg_t *a = p;
  for (int it = 0; it < 3 && !a->rc; it++) a->rc = a->c->ops->all_reduce(a->c, a->rank, a->x, 1000 - it * 300);
  return NULL;
}

static void test_comm_cpu_sum(void **st) {
  (void)st;
  enum { N = 3 };
  be_comm_t *c;
  gt_err_t err = {0};
  assert_int_equal(be_comm_cpu_create(N, &c, &err), 0);
  static ar_arg_t a[N];
  pthread_t th[N];
  for (int r = 0; r < N; r++) {
    a[r] = (ar_arg_t){.c = c, .rank = r};
    for (int i = 0; i < 1000; i++) a[r].x[i] = (float)((i * 7 + r * 13) % 11) * 0.1f + 1e-7f * (float)r;
  }
  /* expected: three rounds (1000, 700, 400 elements), each the rank-order sum of the last */
  float want[1000];
  for (int i = 0; i < 1000; i++) want[i] = a[0].x[i];
  for (int it = 0; it < 3; it++)
    for (int i = 0; i < 1000 - it * 300; i++) {
      float s = it == 0 ? a[0].x[i] : want[i];
      for (int r = 1; r < N; r++) s += it == 0 ? a[r].x[i] : want[i];
      want[i] = s;
    }
  for (int r = 0; r < N; r++) assert_int_equal(pthread_create(&th[r], NULL, ar_thread, &a[r]), 0);
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < N; r++) {
    assert_int_equal(a[r].rc, 0);
    assert_memory_equal(a[r].x, want, sizeof want);
  }
  be_comm_destroy(c);
}

static void *ar_once(void *p) {
  ar_arg_t *a = p;
  a->rc = a->c->ops->all_reduce(a->c, a->rank, a->x, 10);
  return NULL;
}

/* rank 1 never arrives (it failed): abort releases rank 0 with GT_ECANCELLED */
static void test_comm_cpu_abort(void **st) {
  (void)st;
  be_comm_t *c;
  gt_err_t err = {0};
  assert_int_equal(be_comm_cpu_create(2, &c, &err), 0);
  static ar_arg_t a0;
  a0 = (ar_arg_t){.c = c, .rank = 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ar_once, &a0), 0);
  c->ops->abort(c);
  pthread_join(th, NULL);
  assert_int_equal(a0.rc, GT_ECANCELLED);
  assert_int_equal(c->ops->all_reduce(c, 1, a0.x, 10), GT_ECANCELLED);
  be_comm_destroy(c);
}

/* ---- models ---- */

static int mk_fail_rank1(void *ud, int rank, be_comm_t *comm, be_t **out, gt_err_t *err) {
  if (rank == 1) return gt_err_set(err, GT_ENOMEM, "no memory for this rank");
  return tp_cpu_backend(ud, rank, comm, out, err);
}

typedef struct {
  float *logits; /* [N_PROMPT, V] */
  int32_t greedy[N_GREEDY];
} run_t;

/* Sampling on the group (model_forward_sample: picks across ranks) against the group's gathered
 * logits sampled on the host, and its greedy pick against the one-rank greedy token. */
static void check_sampling(model_t *m, int32_t want_greedy) {
  const int V = m->hp.n_vocab;
  gen_t *gen;
  gt_err_t err = {0};
  if (gen_create(m, N_CTX, &gen, &err)) fail_msg("gen_create: %s", err.msg);
  int32_t ids[N_PROMPT], id;
  tu_gen_prompt(ids, N_PROMPT, V);
  be_sample_row_t greedy = {.temperature = 0, .top_p = 1, .u = 0.5};
  if (gen_feed_sample(gen, ids, N_PROMPT, 16, &greedy, &id, &err)) fail_msg("gen_feed_sample: %s", err.msg);
  assert_int_equal(id, want_greedy);
  float *last = malloc(sizeof(float) * (size_t)V);
  assert_non_null(last);
  const be_sample_row_t rows[] = {
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .u = 0.37},
      {.temperature = 1.0f, .top_p = 1, .u = 0.91},
      {.temperature = 1.3f, .top_p = 0.5f, .min_p = 0.01f, .u = 0.05},
      {.temperature = 0.7f, .top_k = 1, .top_p = 1, .u = 0.5}, /* top_k 1: greedy */
  };
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    gen_reset(gen);
    if (gen_feed_sample(gen, ids, N_PROMPT, 16, &rows[k], &id, &err)) fail_msg("gen_feed_sample: %s", err.msg);
    gen_reset(gen);
    if (gen_feed(gen, ids, N_PROMPT, 16, NULL, last, &err)) fail_msg("gen_feed: %s", err.msg);
    sampler_pick_t pk = {.temperature = rows[k].temperature, .top_k = rows[k].top_k, .top_p = rows[k].top_p,
                         .min_p = rows[k].min_p};
    assert_int_equal(id, sampler_pick(&pk, last, V, rows[k].u));
  }
  free(last);
  gen_free(gen);
}

typedef struct {
  const char *file;
  const char *fail2, *fail4; /* NULL: TP=N must work; else the tensor its load error names */
} model_case_t;

static const model_case_t CASES[] = {
    {"qwen3-tiny.bf16.gguf", NULL, NULL},
    {"qwen3-tiny.Q8_0.gguf", NULL, NULL},
    {"qwen3-tiny.Q4_K_M.gguf", "blk.0.attn_output.weight", "blk.0.attn_output.weight"},
    {"qwen3-tiny.Q6_K.gguf", "blk.0.attn_output.weight", "blk.0.attn_output.weight"},
    {"qwen35-tiny.bf16.gguf", NULL, NULL},
    {"demo/gantry-demo-code-22m.Q4_K_M.gguf", NULL, "blk.0.attn_output.weight"},
};

static void check_model(const model_case_t *mc) {
  gt_err_t err = {0};
  gguf_t *g;
  if (gguf_open(tu_golden(mc->file), &g, &err)) fail_msg("%s: %s", mc->file, err.msg);
  be_t *be1;
  model_t *m1;
  assert_int_equal(be_cpu_create(1, &be1, &err), 0);
  if (model_load(g, be1, 16, &m1, &err)) fail_msg("%s: %s", mc->file, err.msg);
  run_t ref;
  ref.logits = tu_gen_greedy(m1, N_CTX, N_PROMPT, 16, N_GREEDY, ref.greedy);
  const int V = m1->hp.n_vocab;
  for (int N = 2; N <= 4; N += 2) {
    const char *fail = N == 2 ? mc->fail2 : mc->fail4;
    be_comm_t *comm;
    assert_int_equal(be_comm_cpu_create(N, &comm, &err), 0);
    model_t *m;
    be_t *be;
    int rc = tp_load(g, comm, tp_cpu_backend, NULL, 16, &m, &be, &err);
    if (fail) {
      print_message("%s TP=%d refused: %s\n", mc->file, N, err.msg);
      assert_int_equal(rc, GT_EUNSUPPORTED);
      assert_non_null(strstr(err.msg, fail));
      assert_non_null(strstr(err.msg, "quantization block"));
      continue;
    }
    if (rc) fail_msg("%s TP=%d: %s", mc->file, N, err.msg);
    assert_int_equal(m->be->n_ranks, N);
    run_t tp;
    tp.logits = tu_gen_greedy(m, N_CTX, N_PROMPT, 16, N_GREEDY, tp.greedy);
    double e = tu_max_row_rel_err(tp.logits, ref.logits, N_PROMPT, V);
    print_message("%s TP=%d: max row rel err %.3g vs TP=1, greedy %s\n", mc->file, N, e,
                  memcmp(tp.greedy, ref.greedy, sizeof tp.greedy) ? "DIFFERS" : "identical");
    assert_true(e <= TOL);
    assert_memory_equal(tp.greedy, ref.greedy, sizeof tp.greedy);
    check_sampling(m, ref.greedy[0]);
    free(tp.logits);
    model_free(m);
    be_destroy(be);
  }
  free(ref.logits);
  model_free(m1);
  be_destroy(be1);
  gguf_close(g);
}

static void test_qwen3_bf16(void **st) { (void)st; check_model(&CASES[0]); }
static void test_qwen3_q8_0(void **st) { (void)st; check_model(&CASES[1]); }
static void test_qwen3_q4_k_m(void **st) { (void)st; check_model(&CASES[2]); }
static void test_qwen3_q6_k(void **st) { (void)st; check_model(&CASES[3]); }
static void test_qwen35_bf16(void **st) { (void)st; check_model(&CASES[4]); }
static void test_demo(void **st) { (void)st; check_model(&CASES[5]); }

/* qwen3-tiny has 4 attention heads: 3 ranks cannot split them */
static void test_heads_not_divisible(void **st) {
  (void)st;
  gt_err_t err = {0};
  gguf_t *g;
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err), 0);
  be_comm_t *comm;
  assert_int_equal(be_comm_cpu_create(3, &comm, &err), 0);
  model_t *m;
  be_t *be;
  assert_int_equal(tp_load(g, comm, tp_cpu_backend, NULL, 16, &m, &be, &err), GT_EUNSUPPORTED);
  print_message("TP=3: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "4 attention heads cannot be split over 3 ranks"));
  gguf_close(g);
}

static void test_rank_backend_fails(void **st) {
  (void)st;
  gt_err_t err = {0};
  gguf_t *g;
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err), 0);
  be_comm_t *comm;
  assert_int_equal(be_comm_cpu_create(2, &comm, &err), 0);
  model_t *m;
  be_t *be;
  assert_int_equal(tp_load(g, comm, mk_fail_rank1, NULL, 16, &m, &be, &err), GT_ENOMEM);
  assert_non_null(strstr(err.msg, "rank 1: no memory for this rank"));
  gguf_close(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_comm_cpu_sum),     cmocka_unit_test(test_comm_cpu_abort),
      cmocka_unit_test(test_qwen3_bf16),       cmocka_unit_test(test_qwen3_q8_0),
      cmocka_unit_test(test_qwen3_q4_k_m),     cmocka_unit_test(test_qwen3_q6_k),
      cmocka_unit_test(test_qwen35_bf16),      cmocka_unit_test(test_demo),
      cmocka_unit_test(test_heads_not_divisible), cmocka_unit_test(test_rank_backend_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
