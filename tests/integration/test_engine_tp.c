/* tests/integration/test_engine_tp.c — the Engine service over a tensor-parallel rank group (two
 * CPU ranks, engine/models/tp.h) through a real gRPC client:
 * - a greedy request streams the same tokens as the same request on a one-rank engine, and
 *   /metrics gives each rank's weights and KV pool (gantry_engine_memory_bytes{rank=...});
 * - when a rank fails mid-request (tp_fail_rank_at), the running request ends with a clear
 *   UNAVAILABLE status naming the rank, the engine turns FAILED (grpc.health NOT_SERVING, /ready 503,
 *   Generate UNAVAILABLE) and srv_opts_t.on_fatal is called once (serve then exits non-zero). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/backend/comm.h"
#include "engine/models/tp.h"
#include "grpc/health/v1/health.pb-c.h"
#include "tests/common/testutil.h"
#include "tests/integration/engine_fixture.h"

#define MODEL "qwen3-tiny.bf16.gguf"
#define WAIT_MS 60000

/* on_fatal runs on the scheduler thread after the step that failed (the stream may end first) */
static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fatal_cv = PTHREAD_COND_INITIALIZER;
static int n_fatal;
static char fatal_why[512];
static void on_fatal(void *ud, const char *why) {
  (void)ud;
  pthread_mutex_lock(&fatal_mu);
  n_fatal++;
  snprintf(fatal_why, sizeof fatal_why, "%s", why);
  pthread_cond_broadcast(&fatal_cv);
  pthread_mutex_unlock(&fatal_mu);
}

/* Waits (bounded) for the first on_fatal; returns how many there were. */
static int wait_fatal(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += WAIT_MS / 1000;
  pthread_mutex_lock(&fatal_mu);
  while (n_fatal == 0 && pthread_cond_timedwait(&fatal_cv, &fatal_mu, &ts) == 0) {
  }
  int n = n_fatal;
  pthread_mutex_unlock(&fatal_mu);
  return n;
}

/* efx_start with the model loaded over n_ranks CPU ranks (efx_stop frees it). */
static void start_tp(efx_t *f, int n_ranks, const sched_config_t *cfg) {
  memset(f, 0, sizeof *f);
  gt_err_t err = {0};
  be_comm_t *comm;
  int rc = gguf_open(tu_golden(MODEL), &f->g, &err);
  if (!rc) rc = be_comm_cpu_create(n_ranks, &comm, &err);
  if (!rc) rc = tp_load(f->g, comm, tp_cpu_backend, NULL, cfg->max_batch_tokens, &f->m, &f->be, &err);
  if (!rc) rc = efx_serve(f, cfg, on_fatal, &err);
  if (rc) fail_msg("start_tp: %s", err.msg);
}

static void run(efx_t *f, const int32_t *ids, int n, int max_tokens, coll_t *c) {
  assert_int_equal(coll_run_tokens(f, c, ids, n, max_tokens, WAIT_MS), 0);
}

static int grpc_health(efx_t *f) {
  Grpc__Health__V1__HealthCheckRequest hq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  ProtobufCMessage *hr = NULL;
  gt_rpc_status_t hs;
  assert_int_equal(gt_rpc_client_unary(ec_rpc(f->ec), "/grpc.health.v1.Health/Check", &hq.base,
                                       &grpc__health__v1__health_check_response__descriptor, 5000, NULL, 0, &hr, &hs),
                   GT_RPC_OK);
  int st = ((Grpc__Health__V1__HealthCheckResponse *)hr)->status;
  protobuf_c_message_free_unpacked(hr, NULL);
  return st;
}

static void test_tp2_serves_like_one_rank(void **state) {
  (void)state;
  sched_config_t cfg = {.max_num_seqs = 4, .max_batch_tokens = 64, .n_ctx = 256, .n_blocks = 64};
  int32_t ids[30];
  for (int i = 0; i < 30; i++) ids[i] = (int32_t)(1 + (i * 37 + 5) % 900);
  efx_t one;
  assert_int_equal(efx_start(&one, MODEL, &cfg), 0);
  coll_t c1;
  run(&one, ids, 30, 10, &c1);
  assert_int_equal(c1.st.code, GT_RPC_OK);
  assert_int_equal(c1.n_ids, 10);
  int32_t want[10];
  memcpy(want, c1.ids, sizeof want);
  coll_destroy(&c1);
  efx_stop(&one);

  efx_t f;
  start_tp(&f, 2, &cfg);
  coll_t c2;
  run(&f, ids, 30, 10, &c2);
  assert_int_equal(c2.st.code, GT_RPC_OK);
  assert_int_equal(c2.n_ids, 10);
  assert_memory_equal(c2.ids, want, sizeof want);
  coll_destroy(&c2);
  assert_int_equal(grpc_health(&f), GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  /* per-rank memory: each rank holds part of the weights and half the KV pool (2 of 4 KV heads) */
  char *text = NULL;
  size_t len = 0;
  gt_err_t err = {0};
  assert_int_equal(gt_metrics_render(f.reg, &text, &len, &err), 0);
  for (int r = 0; r < 2; r++) {
    const model_t *rm = tp_rank_model(f.m->tp, r);
    char want_w[160], want_kv[160];
    /* after the registry's model_name label */
    snprintf(want_w, sizeof want_w, "\",rank=\"%d\",kind=\"weights\"} %zu", r, rm->weight_bytes);
    snprintf(want_kv, sizeof want_kv, "\",rank=\"%d\",kind=\"kv_cache\"} %zu", r,
             rm->cache_bytes);
    assert_non_null(strstr(text, want_w));
    assert_non_null(strstr(text, want_kv));
    assert_true(rm->weight_bytes < f.m->weight_bytes);
    /* 64 blocks x 16 tokens x 4 layers x K and V x 1 KV head x 64 dims x fp32 */
    assert_int_equal(rm->cache_bytes, (size_t)64 * 16 * 4 * 2 * 64 * 4);
  }
  free(text);
  efx_stop(&f);
}

/* Two ranks, rank 1 failing on its third forward (the prompt step and one decode step run
 * first); fills ids with a 20-token prompt. */
static void start_failing_tp2(efx_t *f, int max_num_seqs, int32_t ids[20]) {
  sched_config_t cfg = {.max_num_seqs = max_num_seqs, .max_batch_tokens = 64, .n_ctx = 256, .n_blocks = 64};
  for (int i = 0; i < 20; i++) ids[i] = (int32_t)(1 + (i * 41 + 3) % 900);
  start_tp(f, 2, &cfg);
  n_fatal = 0;
  tp_fail_rank_at(f->m->tp, 1, 2);
}

static void test_rank_failure(void **state) {
  (void)state;
  int32_t ids[20];
  efx_t f;
  start_failing_tp2(&f, 4, ids);
  coll_t c;
  run(&f, ids, 20, 50, &c);
  assert_int_equal(wait_fatal(), 1);
  print_message("status %d: %s (after %d tokens); fatal: %s\n", (int)c.st.code, c.st.message, c.n_ids, fatal_why);
  assert_int_equal(c.st.code, GT_RPC_UNAVAILABLE);
  assert_int_equal(c.n_ids, 2);
  assert_non_null(strstr(c.st.message, "rank 1"));
  assert_non_null(strstr(c.st.message, "injected failure"));
  coll_destroy(&c);
  assert_non_null(strstr(fatal_why, "rank 1"));
  assert_int_equal(srv_state(f.srv), SRV_FAILED);
  assert_int_equal(grpc_health(&f), GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
  /* gantry's own Health says FAILED (not DRAINING: nothing will finish) */
  Gantry__V1__HealthResponse *h = NULL;
  assert_int_equal(ec_health(f.ec, NULL, &h, NULL), GT_RPC_OK);
  assert_int_equal(h->status, GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_FAILED);
  protobuf_c_message_free_unpacked(&h->base, NULL);
  /* later requests are refused at once */
  coll_t c3;
  run(&f, ids, 20, 4, &c3);
  assert_int_equal(c3.st.code, GT_RPC_UNAVAILABLE);
  assert_non_null(strstr(c3.st.message, "failed"));
  coll_destroy(&c3);
  efx_stop(&f);
}

/* One sequence at a time: the second request is still waiting when rank 1 fails. It too ends
 * UNAVAILABLE (its call is finished, not left open), and on_fatal is called only once. */
static void test_rank_failure_ends_waiting(void **state) {
  (void)state;
  int32_t ids[20];
  efx_t f;
  start_failing_tp2(&f, 1, ids);
  reqb_t b[2];
  coll_t c[2];
  for (int k = 0; k < 2; k++) {
    reqb_tokens(&b[k], ids, 20, 50);
    coll_init(&c[k]);
    assert_int_equal(coll_start(&f, &c[k], &b[k].req, WAIT_MS), 0);
  }
  for (int k = 0; k < 2; k++) {
    assert_true(coll_wait_done(&c[k], WAIT_MS));
    print_message("request %d: status %d: %s (after %d tokens)\n", k, (int)c[k].st.code, c[k].st.message, c[k].n_ids);
    assert_int_equal(c[k].st.code, GT_RPC_UNAVAILABLE);
    assert_non_null(strstr(c[k].st.message, "rank 1"));
    coll_destroy(&c[k]);
  }
  efx_stop(&f);
  assert_int_equal(n_fatal, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tp2_serves_like_one_rank),
      cmocka_unit_test(test_rank_failure),
      cmocka_unit_test(test_rank_failure_ends_waiting),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
