/* tests/unit/test_tp_parts.c — the GPU-less parts of TP on ranks sharing one GPU and of the TP
 * prediction (engine/TP.md "Ranks sharing one GPU", "The TP4 prediction"):
 * - comm_barrier: every thread leaves each round with the largest value brought (how the ranks of
 *   the device-local communicator agree on a decode step's path), round after round; an abort
 *   releases a thread that waits for a peer that never comes, and every later wait fails;
 * - the solo communicator: all_reduce leaves x as it is and counts the calls, bind_stream accepts
 *   the group's ranks only, bad sizes are refused;
 * - a solo rank (rank 0 of 2 alone over the solo communicator) on the CPU backend loads its
 *   shard (half the heads / FFN / vocabulary), runs gantry's decode bench with its greedy pick of
 *   its vocabulary slice, and queues 2 all-reduces per layer per step;
 * - GANTRY_MODEL_LAYERS=2 loads the first 2 of qwen3-tiny's 4 layers (and nothing for 0 or >= 4). */
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
#include "engine/backend/comm_barrier.h"
#include "engine/models/bench.h"
#include "tests/common/testutil.h"

#define N_THREADS 4
#define ROUNDS 200

typedef struct {
  comm_barrier_t *b;
  int id, bad, rc;
} bar_arg_t;

static int value_of(int round, int id) { return (round * 7 + id * 3) % 11 - 5; }

static void *bar_thread(void *p) {
  bar_arg_t *a = p;
  for (int k = 0; k < ROUNDS && !a->rc; k++) {
    int want = value_of(k, 0), agreed = 0;
    for (int i = 1; i < N_THREADS; i++) want = value_of(k, i) > want ? value_of(k, i) : want;
    a->rc = comm_barrier_wait(a->b, value_of(k, a->id), &agreed);
    a->bad += agreed != want;
  }
  return NULL;
}

static void test_barrier_agrees(void **st) {
  (void)st;
  comm_barrier_t b;
  comm_barrier_init(&b, N_THREADS);
  bar_arg_t a[N_THREADS];
  pthread_t th[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    a[i] = (bar_arg_t){.b = &b, .id = i};
    assert_int_equal(pthread_create(&th[i], NULL, bar_thread, &a[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(a[i].rc, 0);
    assert_int_equal(a[i].bad, 0);
  }
  assert_int_equal(comm_barrier_aborted(&b), 0);
  comm_barrier_destroy(&b);
}

static void *wait_once(void *p) {
  bar_arg_t *a = p;
  a->rc = comm_barrier_wait(a->b, 1, NULL);
  return NULL;
}

static void test_barrier_abort(void **st) {
  (void)st;
  comm_barrier_t b;
  comm_barrier_init(&b, 2);
  bar_arg_t a = {.b = &b};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, wait_once, &a), 0);
  comm_barrier_abort(&b); /* whether the thread waits already or arrives later: released with -1 */
  pthread_join(th, NULL);
  assert_int_equal(a.rc, -1);
  assert_int_equal(comm_barrier_wait(&b, 0, NULL), -1);
  assert_int_equal(comm_barrier_aborted(&b), 1);
  comm_barrier_destroy(&b);
}

static void test_solo_comm(void **st) {
  (void)st;
  gt_err_t err = {0};
  be_comm_t *c;
  assert_int_not_equal(be_comm_solo_create(0, &c, &err), 0);
  assert_non_null(strstr(err.msg, "solo communicator: 0 ranks"));
  assert_int_equal(be_comm_solo_create(4, &c, &err), 0);
  assert_string_equal(c->ops->name, "solo");
  assert_int_equal(c->n_ranks, 4);
  float x[3] = {1, 2, 3};
  for (int i = 0; i < 5; i++) assert_int_equal(c->ops->all_reduce(c, 0, x, 3), 0);
  assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3);
  assert_int_equal(be_comm_solo_calls(c), 5);
  int dummy;
  assert_int_equal(c->ops->bind_stream(c, 3, 0, &dummy, &err), 0);
  assert_int_not_equal(c->ops->bind_stream(c, 4, 0, &dummy, &err), 0);
  assert_int_equal(be_comm_solo_calls(NULL), 0);
  be_comm_destroy(c);
}

/* The bench's output into a string (caller frees). */
static char *bench_to_string(model_t *m, gguf_t *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  int batches[2] = {1, 3};
  eb_opts_t o = {.batches = batches, .n_batches = 2, .prompt = 8, .gen = 4, .copy_bytes = 1 << 20};
  gt_err_t err = {0};
  if (eb_run(m, g, &o, f, &err)) fail_msg("eb_run: %s", err.msg);
  fclose(f);
  return buf;
}

static void test_solo_rank_bench(void **st) {
  (void)st;
  gt_err_t err = {0};
  gguf_t *g;
  be_comm_t *c;
  be_t *be;
  model_t *m;
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err), 0);
  assert_int_equal(be_comm_solo_create(2, &c, &err), 0);
  assert_int_equal(be_cpu_create_rank(1, 0, c, &be, &err), 0);
  if (model_load(g, be, 16, &m, &err)) fail_msg("model_load: %s", err.msg);
  assert_int_equal(m->sh.n_ranks, 2);
  assert_int_equal(m->sh.n_head, m->hp.n_head / 2);
  assert_int_equal(m->sh.n_ff, m->hp.n_ff / 2);
  assert_int_equal(m->sh.n_vocab, m->hp.n_vocab / 2);
  const long c0 = be_comm_solo_calls(c);
  char *out = bench_to_string(m, g);
  printf("%s", out);
  assert_non_null(strstr(out, "rank 0 of 2 alone"));
  assert_non_null(strstr(out, "\n| 1 | "));
  assert_non_null(strstr(out, "\n| 3 | "));
  /* warm-up (a prefill, 2 decode steps), then per batch size its prefills and 4 decode steps:
   * each forward queues 2 all-reduces per layer */
  const long calls = be_comm_solo_calls(c) - c0, fwd = 1 + 1 + 2 + (1 + 4) + (3 + 4);
  printf("solo rank: %ld all-reduce calls for %ld forwards of %d layers\n", calls, fwd, m->hp.n_layer);
  assert_int_equal(calls, fwd * 2 * m->hp.n_layer);
  free(out);
  model_free(m);
  be_destroy(be);
  be_comm_destroy(c);
  gguf_close(g);
}

static int layers_with(const char *v) {
  gt_err_t err = {0};
  gguf_t *g;
  be_t *be;
  model_t *m;
  if (v) setenv("GANTRY_MODEL_LAYERS", v, 1);
  assert_int_equal(gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err), 0);
  assert_int_equal(be_cpu_create(1, &be, &err), 0);
  if (model_load(g, be, 16, &m, &err)) fail_msg("model_load: %s", err.msg);
  const int n = m->hp.n_layer;
  model_free(m);
  be_destroy(be);
  gguf_close(g);
  unsetenv("GANTRY_MODEL_LAYERS");
  return n;
}

static void test_layer_cap(void **st) {
  (void)st;
  assert_int_equal(layers_with(NULL), 4);
  assert_int_equal(layers_with("2"), 2);
  assert_int_equal(layers_with("0"), 4);
  assert_int_equal(layers_with("9"), 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_barrier_agrees), cmocka_unit_test(test_barrier_abort),
      cmocka_unit_test(test_solo_comm),      cmocka_unit_test(test_solo_rank_bench),
      cmocka_unit_test(test_layer_cap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
