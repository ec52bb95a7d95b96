/* tests/integration/test_router_stop.c — stopping the router while its gRPC front still has
 * hand-offs in the mailbox (cq thread -> loop). The router runs in this process (rt_create on a
 * loop thread) so the test can hold the loop inside a mailbox item: what the gRPC front posts
 * meanwhile (a client's cancel, a new call) is certainly still queued when the loop stops and
 * rt_destroy runs; a real redis-server and the scripted fake engine serve it, real gRPC clients
 * call it. Before the fix, rgf_stop freed the front with such posts queued and the later mailbox
 * drain ran them on freed memory (ASan: heap-use-after-free), and a new call queued there was
 * never finished, so the gRPC server's shutdown waited for it forever. Run it under ASan. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "common/clock.h"
#include "common/grpc_client.h"
#include "gantry/v1/router.pb-c.h"
#include "router/router.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

#define N_CANCEL 3 /* streams running at the engine whose clients cancel while the loop is held */
#define MAX_NEW 2  /* Generate calls that arrive while the loop is held */

/* The router on its own loop thread: rt_run, then rt_destroy on the same thread (as main()). */
typedef struct rt_thread {
  router_t *rt;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool gate_in, gate_open, destroyed;
} rt_thread_t;

static void *loop_main(void *arg) {
  rt_thread_t *t = arg;
  rt_run(t->rt);
  rt_destroy(t->rt);
  pthread_mutex_lock(&t->mu);
  t->destroyed = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

/* Mailbox item (loop thread): holds the loop until the test opens the gate, then stops it. */
static void gate(void *a, void *b, intptr_t c) {
  rt_thread_t *t = a;
  (void)b, (void)c;
  pthread_mutex_lock(&t->mu);
  t->gate_in = true;
  pthread_cond_broadcast(&t->cv);
  while (!t->gate_open) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
  event_base_loopbreak(t->rt->base);
}

/* Waits (up to ms) for *flag under t->mu; returns it. */
static bool wait_flag(rt_thread_t *t, const bool *flag, int ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  pthread_mutex_lock(&t->mu);
  while (!*flag && pthread_cond_timedwait(&t->cv, &t->mu, &until) == 0) {}
  bool v = *flag;
  pthread_mutex_unlock(&t->mu);
  return v;
}

/* One client stream: the status it ended with. */
typedef struct cs {
  gt_rpc_stream_t *s;
  pthread_mutex_t *mu;
  int msgs;
  bool done;
  gt_rpc_code_t code;
} cs_t;

static void cs_msg(void *user, gt_rpc_stream_t *s, ProtobufCMessage *m) {
  cs_t *c = user;
  (void)s;
  protobuf_c_message_free_unpacked(m, NULL);
  pthread_mutex_lock(c->mu);
  c->msgs++;
  pthread_mutex_unlock(c->mu);
}

static void cs_done(void *user, gt_rpc_stream_t *s, const gt_rpc_status_t *st) {
  cs_t *c = user;
  (void)s;
  pthread_mutex_lock(c->mu);
  c->done = true;
  c->code = st->code;
  pthread_mutex_unlock(c->mu);
}

static void cs_start(gt_rpc_client_t *cl, cs_t *c, pthread_mutex_t *mu, const char *prompt) {
  Gantry__V1__GenerateRequest g = GANTRY__V1__GENERATE_REQUEST__INIT;
  g.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  g.prompt = (char *)prompt;
  g.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  g.max_tokens = 1000; /* SLOW: 20 s of tokens, longer than the test */
  Gantry__V1__RouterGenerateRequest r = GANTRY__V1__ROUTER_GENERATE_REQUEST__INIT;
  r.model = "tiny";
  r.request = &g;
  *c = (cs_t){.mu = mu};
  gt_rpc_stream_args_t a = {.method = "/gantry.v1.Router/Generate", .request = &r.base,
                            .response = &gantry__v1__generate_response__descriptor, .timeout_ms = 60000,
                            .on_msg = cs_msg, .on_done = cs_done, .user = c};
  gt_err_t err;
  assert_int_equal(gt_rpc_client_stream(cl, &a, &c->s, &err), GT_OK);
}

static int engine_busy(fe_t *f) { return fe_active(f) == N_CANCEL; }
static int engine_idle(fe_t *f) { return fe_active(f) == 0; }

/* Starts the router, N_CANCEL streams, holds the loop, cancels them and starts n_new calls, then
 * stops the router with all those hand-offs queued, and checks every call ended as it should. */
static void stop_with_posts_queued(int n_new) {
  gt_err_t err;
  rs_t *rs = rs_start(&err);
  assert_non_null(rs);
  fe_t *fe = fe_start("A");
  assert_non_null(fe);
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(fe));
  char *argv[] = {"router", "--redis", redis, "--engine", eng, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                  "--auth", "none", "--health-ms", "100", "--drain-timeout-s", "0", NULL};
  static rt_config_t cfg;
  bool help;
  rt_config_defaults(&cfg);
  assert_int_equal(rt_config_parse(&cfg, (int)(sizeof argv / sizeof argv[0]) - 1, argv, &help, &err), GT_OK);
  rt_thread_t t = {0};
  pthread_mutex_init(&t.mu, NULL);
  pthread_cond_init(&t.cv, NULL);
  t.rt = rt_create(&cfg, &err);
  assert_non_null(t.rt);
  const int http_port = t.rt->http_port, grpc_port = t.rt->grpc_port;
  rgf_t *front = t.rt->grpc;
  assert_int_equal(pthread_create(&t.th, NULL, loop_main, &t), 0);
  double until = gt_now_ms() + 20000;
  char *b = NULL;
  while (http_req(http_port, "GET", "/ready", NULL, NULL, 0, &b, NULL) != 200 && gt_now_ms() < until) {
    free(b);
    b = NULL;
    usleep(20000);
  }
  free(b);

  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", grpc_port);
  gt_rpc_client_t *cl;
  assert_int_equal(gt_rpc_client_create(target, NULL, &cl, &err), GT_OK);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  cs_t run[N_CANCEL], fresh[MAX_NEW];
  for (int i = 0; i < N_CANCEL; i++) cs_start(cl, &run[i], &mu, "SLOW");
  assert_true(fe_wait(fe, engine_busy, 10000)); /* admitted, streaming from the engine */

  /* hold the loop; meanwhile the front's cq thread posts a cancel per stream and a new call */
  assert_int_equal(mbox_post(t.rt->mb, gate, &t, NULL, 0), 0);
  assert_true(wait_flag(&t, &t.gate_in, 10000));
  for (int i = 0; i < N_CANCEL; i++) gt_rpc_stream_cancel(run[i].s);
  for (int i = 0; i < n_new; i++) cs_start(cl, &fresh[i], &mu, "SLOW");
  until = gt_now_ms() + 10000;
  while (rgf_pending_posts(front) < N_CANCEL + n_new && gt_now_ms() < until) usleep(5000);
  const int pending = rgf_pending_posts(front);
  printf("gRPC front hand-offs queued when the loop stops: %d\n", pending);
  assert_int_equal(pending, N_CANCEL + n_new);

  /* stop the loop: rt_destroy runs with them queued */
  const double t0 = gt_now_ms();
  pthread_mutex_lock(&t.mu);
  t.gate_open = true;
  pthread_cond_broadcast(&t.cv);
  pthread_mutex_unlock(&t.mu);
  const bool destroyed = wait_flag(&t, &t.destroyed, 20000);
  printf("router stopped in %.0f ms\n", gt_now_ms() - t0);
  assert_true(destroyed); /* before: the server's shutdown waited for the queued calls forever */
  pthread_join(t.th, NULL);

  /* the queued calls were answered (UNAVAILABLE), the cancelled streams ended, the engine too */
  until = gt_now_ms() + 10000;
  bool all = false;
  while (!all && gt_now_ms() < until) {
    all = true;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < N_CANCEL; i++) all = all && run[i].done;
    for (int i = 0; i < n_new; i++) all = all && fresh[i].done;
    pthread_mutex_unlock(&mu);
    if (!all) usleep(10000);
  }
  assert_true(all);
  for (int i = 0; i < N_CANCEL; i++) assert_int_equal(run[i].code, GT_RPC_CANCELLED);
  for (int i = 0; i < n_new; i++) {
    assert_int_equal(fresh[i].code, GT_RPC_UNAVAILABLE);
    assert_int_equal(fresh[i].msgs, 0);
  }
  assert_true(fe_wait(fe, engine_idle, 10000));
  for (int i = 0; i < N_CANCEL; i++) gt_rpc_stream_release(run[i].s);
  for (int i = 0; i < n_new; i++) gt_rpc_stream_release(fresh[i].s);
  gt_rpc_client_destroy(cl);
  fe_stop(fe);
  rs_stop(rs);
  pthread_mutex_destroy(&t.mu);
  pthread_cond_destroy(&t.cv);
}

/* Clients' cancels queued: before, they ran after rgf_stop freed the front (ASan). */
static void test_stop_with_cancels_queued(void **st) {
  (void)st;
  stop_with_posts_queued(0);
}

/* New calls queued too: before, nobody finished them and the gRPC server's shutdown hung. */
static void test_stop_with_new_calls_queued(void **st) {
  (void)st;
  stop_with_posts_queued(MAX_NEW);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_stop_with_cancels_queued),
                                     cmocka_unit_test(test_stop_with_new_calls_queued)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
