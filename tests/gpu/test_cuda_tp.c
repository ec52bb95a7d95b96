/* tests/gpu/test_cuda_tp.c — CUDA ranks over the NCCL communicator (engine/models/tp.h,
 * be_cuda_create_rank, be_comm_nccl_create), on qwen3-tiny (bf16, Q8_0) and qwen35-tiny (bf16):
 * - one rank through the group and NCCL (the path `--tp N` takes, on one GPU) against the plain
 *   CUDA backend: teacher-forced logits of a 40-token prompt (chunks of 16) and 12 greedy decode
 *   tokens bit-identical (an all-reduce over one rank is the identity, every kernel the same);
 *   the rank's all-reduce went through NCCL (a counting communicator around it sees the calls)
 *   and its decode steps were captured into CUDA graphs with the all-reduce inside and replayed;
 * - with >= 2 GPUs visible, TP=2 on GPUs 0,1 against the plain backend, fp32 KV pools (the
 *   comparison of test_tp on the CPU, at the fixtures' GPU tolerance): logits within 1e-2 max
 *   row relative error and 12 greedy tokens identical. With one GPU this part is skipped (the
 *   multi-GPU run is scripts/gpu/tp.sh).
 * Exits 77 (skipped) without a GPU; a case skips when libnccl cannot be loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend_cuda.h"
#include "engine/backend/comm_nccl.h"
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

static void test_qwen3_bf16_one_rank(void **st) { one_rank("qwen3-tiny.bf16.gguf"); }
static void test_qwen3_q8_0_one_rank(void **st) { one_rank("qwen3-tiny.Q8_0.gguf"); }
static void test_qwen35_bf16_one_rank(void **st) { one_rank("qwen35-tiny.bf16.gguf"); }
static void test_qwen3_bf16_tp2(void **st) { two_ranks("qwen3-tiny.bf16.gguf"); }
static void test_qwen35_bf16_tp2(void **st) { two_ranks("qwen35-tiny.bf16.gguf"); }

int main(void) {
  if (!be_cuda_available()) { /* ctest reports exit 77 as skipped (SKIP_RETURN_CODE) */
    printf("no CUDA device visible: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_bf16_one_rank), cmocka_unit_test(test_qwen3_q8_0_one_rank),
      cmocka_unit_test(test_qwen35_bf16_one_rank), cmocka_unit_test(test_qwen3_bf16_tp2),
      cmocka_unit_test(test_qwen35_bf16_tp2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
