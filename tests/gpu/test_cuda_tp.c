/* tests/gpu/test_cuda_tp.c — CUDA ranks of a tensor-parallel group (engine/models/tp.h,
 * be_cuda_create_rank), over NCCL and over the device-local communicator (comm_local.h):
 * - one rank through the group and NCCL (the path `--tp N` takes, on one GPU) against the plain
 *   CUDA backend: teacher-forced logits of a 40-token prompt (chunks of 16) and 12 greedy decode
 *   tokens bit-identical (an all-reduce over one rank is the identity, every kernel the same);
 *   the rank's all-reduce went through NCCL (a counting communicator around it sees the calls)
 *   and its decode steps were captured into CUDA graphs with the all-reduce inside and replayed;
 * - with >= 2 GPUs visible, TP=2 on GPUs 0,1 against the plain backend, fp32 KV pools (the
 *   comparison of test_tp on the CPU, at the fixtures' GPU tolerance): logits within 1e-2 max
 *   row relative error and 12 greedy tokens identical. With one GPU this part is skipped (the
 *   multi-GPU run is scripts/gpu/tp.sh).
 * - TP 2 and 4 with every rank on GPU 0 (the device-local communicator: `--devices 0,0,0,0`),
 *   fp32 activations and KV pools, against TP 1 on the same GPU: qwen3-tiny bf16 / Q8_0,
 *   qwen35-tiny bf16 (TP 4 replicates its 2 GDN key heads), the demo model at TP 2; logits within
 *   the fixtures' GPU bar (1e-2), 12 greedy tokens identical (host argmax of the gathered logits)
 *   and 12 more sampled greedily on the device (each rank's argmax of its vocabulary slice, the
 *   group's pick), every rank's decode steps captured into graphs with the local all-reduce
 *   inside and replayed. Shapes that cannot be split (qwen3-tiny Q4_K_M at TP 2, the demo at
 *   TP 4, the hybrid demo35 at TP 2 and 4) must be refused with the error naming the tensor.
 * - production shapes (GANTRY_TP_SHAPE_MODELS: a space-separated list of GGUF files, e.g. the
 *   qwen3-8b / qwen35-9b / qwen35-27b layers scripts/gpu/tp_local.sh makes with gantry-mkmodel
 *   --layers 4 --vocab 8192): the same comparison at TP 2 and 4; every shape must split. Without
 *   the variable these cases skip.
 * Exits 77 (skipped) without a GPU; an NCCL case skips when libnccl cannot be loaded.
 * GANTRY_TEST_ONLY: run only the cases matching that cmocka pattern. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/backend/backend_cuda.h"
#include "engine/backend/comm_local.h"
#include "engine/backend/comm_nccl.h"
#include "engine/models/gen.h"
#include "engine/models/tp.h"
#include "tests/common/gen_run.h"
#include "tests/common/testutil.h"

#define N_PROMPT 40
#define N_GREEDY 12
#define N_CTX 64
#define GPU_TOL 1e-2 /* fixtures README: GPU backends with fp32 activations */

/* ---- a communicator that counts the all-reduce calls of each rank and forwards to NCCL ---- */
typedef struct {
  be_comm_t base;
  be_comm_t *in;
  long calls[TP_MAX_RANKS];
} count_comm_t;

static int cc_all_reduce(be_comm_t *c, int rank, float *x, size_t n) {
  count_comm_t *cc = (count_comm_t *)c;
  cc->calls[rank]++; /* each rank's own slot, from its own thread */
  return cc->in->ops->all_reduce(cc->in, rank, x, n);
}
static void cc_abort(be_comm_t *c) { ((count_comm_t *)c)->in->ops->abort(((count_comm_t *)c)->in); }
static void cc_destroy(be_comm_t *c) { /* the test frees it after reading the counts */ }
static int cc_bind(be_comm_t *c, int rank, int device, void *stream, gt_err_t *err) {
  be_comm_t *in = ((count_comm_t *)c)->in;
  return in->ops->bind_stream(in, rank, device, stream, err);
}
static const be_comm_ops_t cc_ops = {.name = "nccl-counted", .all_reduce = cc_all_reduce, .abort = cc_abort,
                                     .destroy = cc_destroy, .bind_stream = cc_bind};

typedef struct {
  int dev[TP_MAX_RANKS];
  int kv_f32;
} ranks_t;

static int mk_cuda_rank(void *ud, int rank, be_comm_t *comm, be_t **out, gt_err_t *err) {
  const ranks_t *rk = ud;
  int rc = be_cuda_create_rank(rk->dev[rank], rank, comm, out, err);
  if (!rc && rk->kv_f32 && (rc = be_kv_set_type(*out, GT_TYPE_F32))) {
    be_destroy(*out);
    *out = NULL;
    return gt_err_set(err, rc, "kv_set_type(F32) refused");
  }
  return rc;
}

typedef struct {
  float *logits; /* [N_PROMPT, V] */
  int32_t greedy[N_GREEDY];
} run_t;

/* The plain CUDA backend on device 0 (fp32 KV pools if kv_f32). */
static void run_plain(gguf_t *g, int kv_f32, run_t *out) {
  gt_err_t err = {0};
  be_t *be;
  model_t *m;
  if (be_cuda_create(0, &be, &err)) fail_msg("be_cuda_create: %s", err.msg);
  if (kv_f32) assert_int_equal(be_kv_set_type(be, GT_TYPE_F32), 0);
  if (model_load(g, be, 16, &m, &err)) fail_msg("model_load: %s", err.msg);
  out->logits = tu_gen_greedy(m, N_CTX, N_PROMPT, 16, N_GREEDY, out->greedy);
  model_free(m);
  be_destroy(be);
}

/* Skips the test when libnccl cannot be loaded. A skip leaves the test by longjmp: call it
 * before the test allocates anything. */
static void skip_without_nccl(void) {
  gt_err_t err = {0};
  if (nccl_comm_load(&err)) {
    print_message("NCCL unavailable, skipped: %s\n", err.msg);
    skip();
  }
}

/* The NCCL communicator over devices 0..n-1 (libnccl loaded: skip_without_nccl). */
static be_comm_t *nccl_create(int n) {
  gt_err_t err = {0};
  be_comm_t *c;
  if (be_comm_nccl_create(NULL, n, &c, &err)) fail_msg("be_comm_nccl_create(%d): %s", n, err.msg);
  char d[256];
  print_message("%s\n", nccl_comm_describe(be_comm_nccl(c), d, sizeof d));
  return c;
}

static void one_rank(const char *file) {
  skip_without_nccl();
  gt_err_t err = {0};
  gguf_t *g;
  if (gguf_open(tu_golden(file), &g, &err)) fail_msg("%s: %s", file, err.msg);
  run_t ref, grp;
  run_plain(g, 0, &ref);
  be_comm_t *nccl = nccl_create(1);
  count_comm_t *cc = calloc(1, sizeof *cc);
  assert_non_null(cc);
  cc->in = nccl;
  cc->base.ops = &cc_ops;
  cc->base.n_ranks = 1;
  ranks_t rk = {.dev = {0}};
  model_t *m;
  be_t *be;
  if (tp_load(g, &cc->base, mk_cuda_rank, &rk, 16, &m, &be, &err)) fail_msg("%s: tp_load: %s", file, err.msg);
  assert_int_equal(be->n_ranks, 1);
  grp.logits = tu_gen_greedy(m, N_CTX, N_PROMPT, 16, N_GREEDY, grp.greedy);
  be_cuda_stats_t st;
  be_cuda_get_stats(tp_rank_model(m->tp, 0)->be, &st);
  const int V = m->hp.n_vocab;
  const double e = tu_max_row_rel_err(grp.logits, ref.logits, N_PROMPT, V);
  print_message("%s: one NCCL rank vs plain CUDA: max row rel err %.3g, greedy %s; %ld all-reduce calls, "
                "%ld graph steps, %ld captures, %ld eager steps\n",
                file, e, memcmp(grp.greedy, ref.greedy, sizeof ref.greedy) ? "DIFFERS" : "identical", cc->calls[0],
                st.graph_steps, st.captures, st.eager_steps);
  assert_memory_equal(grp.logits, ref.logits, sizeof(float) * (size_t)N_PROMPT * V);
  assert_memory_equal(grp.greedy, ref.greedy, sizeof ref.greedy);
  /* 2 per layer per forward (attention out, FFN down; GDN out-projection): prefill chunks,
   * the eager warm-up step and the capture each call it; replays do not reach the host */
  assert_true(cc->calls[0] >= 2L * m->hp.n_layer * 4);
  assert_true(st.captures >= 1);
  assert_true(st.graph_steps >= N_GREEDY - 2); /* all but the warm-up (and a capture) replay */
  model_free(m);
  be_destroy(be);
  be_comm_destroy(cc->in);
  free(cc);
  free(ref.logits);
  free(grp.logits);
  gguf_close(g);
}

static void two_ranks(const char *file) {
  if (be_cuda_device_count() < 2) {
    print_message("%s TP=2: %d GPU visible, skipped (scripts/gpu/tp.sh runs TP > 1)\n", file, be_cuda_device_count());
    skip();
  }
  skip_without_nccl();
  gt_err_t err = {0};
  gguf_t *g;
  if (gguf_open(tu_golden(file), &g, &err)) fail_msg("%s: %s", file, err.msg);
  run_t ref, tp;
  run_plain(g, 1, &ref);
  be_comm_t *comm = nccl_create(2);
  ranks_t rk = {.dev = {0, 1}, .kv_f32 = 1};
  model_t *m;
  be_t *be;
  if (tp_load(g, comm, mk_cuda_rank, &rk, 16, &m, &be, &err)) fail_msg("%s: tp_load TP=2: %s", file, err.msg);
  assert_int_equal(be->n_ranks, 2);
  tp.logits = tu_gen_greedy(m, N_CTX, N_PROMPT, 16, N_GREEDY, tp.greedy);
  const int V = m->hp.n_vocab;
  const double e = tu_max_row_rel_err(tp.logits, ref.logits, N_PROMPT, V);
  print_message("%s TP=2 vs plain CUDA (fp32 KV): max row rel err %.3g, greedy %s\n", file, e,
                memcmp(tp.greedy, ref.greedy, sizeof ref.greedy) ? "DIFFERS" : "identical");
  assert_true(e <= GPU_TOL);
  assert_memory_equal(tp.greedy, ref.greedy, sizeof ref.greedy);
  model_free(m);
  be_destroy(be);
  free(ref.logits);
  free(tp.logits);
  gguf_close(g);
}

/* ---- ranks sharing GPU 0: the device-local communicator ---- */

/* 12 tokens sampled greedily on the backend (model_forward_sample: on a group, every rank's argmax
 * of its vocabulary slice and the group's pick) after the fixed prompt. */
static void sample_greedy(model_t *m, int32_t *ids_out) {
  gt_err_t err = {0};
  gen_t *gen;
  if (gen_create(m, N_CTX, &gen, &err)) fail_msg("gen_create: %s", err.msg);
  int32_t ids[N_PROMPT], t = 0;
  tu_gen_prompt(ids, N_PROMPT, m->hp.n_vocab);
  const be_sample_row_t row = {.temperature = 0};
  if (gen_feed_sample(gen, ids, N_PROMPT, 16, &row, &t, &err)) fail_msg("gen_feed_sample: %s", err.msg);
  for (int i = 0; i < N_GREEDY; i++) {
    ids_out[i] = t;
    const int32_t fed = t;
    if (i + 1 < N_GREEDY && gen_feed_sample(gen, &fed, 1, 0, &row, &t, &err)) fail_msg("gen_feed_sample: %s", err.msg);
  }
  gen_free(gen);
}

/* TP n on GPU 0 over the device-local communicator against TP 1 on GPU 0 (fp32 activations and
 * KV pools). expect_refusal: the load must fail with "cannot be split" (printed), nothing more. */
static void local_vs_one(const char *path, int n, int expect_refusal) {
  gt_err_t err = {0};
  gguf_t *g;
  if (gguf_open(path, &g, &err)) fail_msg("%s: %s", path, err.msg);
  assert_int_equal(be_cuda_set_activations("fp32"), 0);
  run_t ref, tp;
  be_comm_t *comm;
  if (be_comm_local_create(0, n, &comm, &err)) fail_msg("be_comm_local_create(0, %d): %s", n, err.msg);
  ranks_t rk = {.kv_f32 = 1}; /* every rank on device 0 */
  model_t *m;
  be_t *be;
  const int rc = tp_load(g, comm, mk_cuda_rank, &rk, 16, &m, &be, &err);
  if (expect_refusal) {
    print_message("%s TP=%d on one GPU: refused: %s\n", path, n, err.msg);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err.msg, "cannot be split"));
    gguf_close(g);
    assert_int_equal(be_cuda_set_activations(NULL), 0);
    return;
  }
  if (rc) fail_msg("%s: tp_load TP=%d on one GPU: %s", path, n, err.msg);
  run_plain(g, 1, &ref);
  int32_t ref_sampled[N_GREEDY], tp_sampled[N_GREEDY];
  {
    be_t *pb;
    model_t *pm;
    if (be_cuda_create(0, &pb, &err) || be_kv_set_type(pb, GT_TYPE_F32) || model_load(g, pb, 16, &pm, &err))
      fail_msg("plain backend: %s", err.msg);
    sample_greedy(pm, ref_sampled);
    model_free(pm);
    be_destroy(pb);
  }
  assert_int_equal(be->n_ranks, n);
  tp.logits = tu_gen_greedy(m, N_CTX, N_PROMPT, 16, N_GREEDY, tp.greedy);
  sample_greedy(m, tp_sampled);
  const int V = m->hp.n_vocab;
  const double e = tu_max_row_rel_err(tp.logits, ref.logits, N_PROMPT, V);
  be_cuda_stats_t s0, sl;
  be_cuda_get_stats(tp_rank_model(m->tp, 0)->be, &s0);
  be_cuda_get_stats(tp_rank_model(m->tp, n - 1)->be, &sl);
  print_message("%s TP=%d on one GPU vs TP 1 (fp32 activations and KV): max row rel err %.3g, greedy %s, sampled on "
                "the ranks %s; rank 0: %ld graph steps, %ld captures, %ld eager; rank %d: %ld graph steps\n",
                path, n, e, memcmp(tp.greedy, ref.greedy, sizeof ref.greedy) ? "DIFFERS" : "identical",
                memcmp(tp_sampled, ref_sampled, sizeof ref_sampled) ? "DIFFER" : "identical", s0.graph_steps,
                s0.captures, s0.eager_steps, n - 1, sl.graph_steps);
  assert_true(e <= GPU_TOL);
  assert_memory_equal(tp.greedy, ref.greedy, sizeof ref.greedy);
  assert_memory_equal(tp_sampled, ref_sampled, sizeof ref_sampled);
  assert_memory_equal(tp_sampled, tp.greedy, sizeof tp_sampled); /* device picks = host argmax */
  /* every rank replayed its decode graphs, the device-local all-reduce inside (unless
   * GANTRY_CUDA_GRAPHS=0: then every step ran eagerly, the per-call rendezvous path) */
  const char *graphs = getenv("GANTRY_CUDA_GRAPHS");
  if (!graphs || strcmp(graphs, "0")) {
    assert_true(s0.captures >= 1 && sl.captures >= 1);
    assert_true(s0.graph_steps >= 2 * N_GREEDY - 6 && sl.graph_steps == s0.graph_steps);
  }
  model_free(m);
  be_destroy(be);
  free(ref.logits);
  free(tp.logits);
  gguf_close(g);
  assert_int_equal(be_cuda_set_activations(NULL), 0);
}

static void test_local_qwen3_bf16(void **st) {
  local_vs_one(tu_golden("qwen3-tiny.bf16.gguf"), 2, 0);
  local_vs_one(tu_golden("qwen3-tiny.bf16.gguf"), 4, 0);
}
static void test_local_qwen3_q8_0(void **st) {
  local_vs_one(tu_golden("qwen3-tiny.Q8_0.gguf"), 2, 0);
  local_vs_one(tu_golden("qwen3-tiny.Q8_0.gguf"), 4, 0);
}
static void test_local_qwen35_bf16(void **st) {
  local_vs_one(tu_golden("qwen35-tiny.bf16.gguf"), 2, 0);
  local_vs_one(tu_golden("qwen35-tiny.bf16.gguf"), 4, 0);
}
static void test_local_demo(void **st) {
  local_vs_one(tu_golden("demo/gantry-demo-code-22m.Q4_K_M.gguf"), 2, 0);
  local_vs_one(tu_golden("demo/gantry-demo-code-22m.Q4_K_M.gguf"), 4, 1); /* its 256-wide rows at TP 4 */
}
static void test_local_refused(void **st) { local_vs_one(tu_golden("qwen3-tiny.Q4_K_M.gguf"), 2, 1); }
/* the trained hybrid demo: its FFN of 768 (Q6_K / Q4_K rows of 256-element blocks) splits into 384 / 192
 * columns per rank, so TP 2 and 4 are refused naming blk.0.ffn_down.weight (the same on CPU ranks) */
static void test_local_demo35(void **st) {
  const char *p = tu_golden("demo35/gantry-demo35-code-22m.Q4_K_M.gguf");
  if (access(p, R_OK)) {
    print_message("%s absent (left out of this GPU call: scripts/gpu/slim.sh), skipped\n", p);
    skip();
  }
  local_vs_one(p, 2, 1);
  local_vs_one(p, 4, 1);
}

/* Production shapes: every file of GANTRY_TP_SHAPE_MODELS at TP 2 and 4 (each must split). */
static void test_local_shapes(void **st) {
  const char *list = getenv("GANTRY_TP_SHAPE_MODELS");
  if (!list || !*list) {
    print_message("GANTRY_TP_SHAPE_MODELS unset: production shapes skipped (scripts/gpu/tp_local.sh sets it)\n");
    skip();
  }
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *sv = NULL, *p = strtok_r(buf, " ", &sv); p; p = strtok_r(NULL, " ", &sv)) {
    local_vs_one(p, 2, 0);
    local_vs_one(p, 4, 0);
  }
}

static void test_qwen3_bf16_one_rank(void **st) { one_rank("qwen3-tiny.bf16.gguf"); }
static void test_qwen3_q8_0_one_rank(void **st) { one_rank("qwen3-tiny.Q8_0.gguf"); }
static void test_qwen35_bf16_one_rank(void **st) { one_rank("qwen35-tiny.bf16.gguf"); }
static void test_qwen3_bf16_tp2(void **st) { two_ranks("qwen3-tiny.bf16.gguf"); }
static void test_qwen35_bf16_tp2(void **st) { two_ranks("qwen35-tiny.bf16.gguf"); }

int main(void) {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1); /* before the first context: ranks' streams on their own queues */
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_bf16_one_rank), cmocka_unit_test(test_qwen3_q8_0_one_rank),
      cmocka_unit_test(test_qwen35_bf16_one_rank), cmocka_unit_test(test_qwen3_bf16_tp2),
      cmocka_unit_test(test_qwen35_bf16_tp2),  cmocka_unit_test(test_local_qwen3_bf16),
      cmocka_unit_test(test_local_qwen3_q8_0), cmocka_unit_test(test_local_qwen35_bf16),
      cmocka_unit_test(test_local_demo),       cmocka_unit_test(test_local_refused),
      cmocka_unit_test(test_local_demo35),       cmocka_unit_test(test_local_shapes),
  };
  const char *only = getenv("GANTRY_TEST_ONLY"); /* e.g. "test_local_*" (scripts/gpu/tp_local.sh) */
  if (only && *only) cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
