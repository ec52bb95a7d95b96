/* tests/integration/test_router_stop.c — stopping the router while its gRPC front still has
 * hand-offs in the mailbox (cq thread -> loop). The router runs in this process (rt_create on a
 * loop thread) so the test can hold the loop inside a mailbox item: what the gRPC front posts
 * meanwhile (a client's cancel, a new call) is certainly still queued when the loop stops and
 * rt_destroy runs; a real redis-server and the scripted fake engine serve it, real gRPC clients
 * call it. Before the fix, rgf_stop freed the front with such posts queued and the later mailbox
 * drain ran them on freed memory (ASan: heap-use-after-free), and a new call queued there was
 * never finished, so the gRPC server's shutdown waited for it forever. Also an admin call (gRPC,
 * HTTP) that waits on a Redis that stopped answering (SIGSTOP) when the router stops, and an
 * HTTP /tokenize waiting on an engine that keeps it unanswered; and the same HTTP calls whose
 * client leaves while they wait (counted 499, nothing sent, also when the router stops first); a
 * gRPC Generate whose client cancels during its key check, or once the stop refuses hand-offs
 * (counted 499). Run it under ASan. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cmocka.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "common/clock.h"
#include "common/engine_rpc.h"
#include "common/grpc_client.h"
#include "common/grpc_server.h"
#include "gantry/v1/router.pb-c.h"
#include "router/router.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

#define N_CANCEL 3 /* streams running at the engine whose clients cancel while the loop is held */
#define MAX_NEW 2  /* Generate calls that arrive while the loop is held */

/* routes of gantry_router_requests_total whose 499 and 503 counts a test reads at stop: the
 * N_GRPC_STOP_ROUTES gRPC ones first */
static const char *const stop_routes[] = {"grpc:Generate", "grpc:ListModels", "/gantry.v1.Admin/GetLimits",
                                          "/admin/limits"};
#define N_STOP_ROUTES (int)(sizeof stop_routes / sizeof stop_routes[0])
#define N_GRPC_STOP_ROUTES 3

/* Polls expr (up to 10 s) until it reaches n, then asserts it is exactly n (not more). */
#define WAIT_FOR_COUNT(expr, n)                                  \
  do {                                                           \
    const double until_ = gt_now_ms() + 10000;                   \
    while ((expr) < (n) && gt_now_ms() < until_) usleep(5000);   \
    assert_int_equal((expr), (n));                               \
  } while (0)

/* The router on its own loop thread: rt_run, then rt_destroy on the same thread (as main()). */
typedef struct rt_thread {
  router_t *rt;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool gate_in, gate_open, destroyed;
  bool hold_in, hold_open; /* hold() */
  /* set by the test: the fronts are stopped first, as rt_destroy stops them, and then (the
   * counts still there) stop_499[i] and stop_503[i] are those counts of stop_routes[i] */
  bool read_stop_counts;
  uint64_t stop_499[N_STOP_ROUTES], stop_503[N_STOP_ROUTES];
  /* set by the test: stop_waiter() ran (inside rgf_stop) and waits for a refused cancel */
  bool waiter_in;
  int refused_seen; /* rgf_refused_cancels when stop_waiter() returned */
} rt_thread_t;

static void *loop_main(void *arg) {
  rt_thread_t *t = arg;
  rt_run(t->rt);
  if (t->read_stop_counts) { /* rt_destroy's first step, taken here: its own does nothing more */
    rt_stop_fronts(t->rt);
    for (int i = 0; i < N_STOP_ROUTES; i++) {
      t->stop_499[i] = metrics_requests(t->rt->metrics, stop_routes[i], 499);
      t->stop_503[i] = metrics_requests(t->rt->metrics, stop_routes[i], 503);
    }
  }
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

/* Mailbox item (loop thread): holds the loop until the test opens the hold; the loop goes on. */
static void hold(void *a, void *b, intptr_t c) {
  rt_thread_t *t = a;
  (void)b, (void)c;
  pthread_mutex_lock(&t->mu);
  t->hold_in = true;
  pthread_cond_broadcast(&t->cv);
  while (!t->hold_open) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

/* Mailbox item posted while the loop is held in gate(), so rgf_stop's own drain of the mailbox runs
 * it (the front already refuses hand-offs): tells the test, then waits (up to 10 s) until the front
 * refused a client's cancel. */
static void stop_waiter(void *a, void *b, intptr_t c) {
  rt_thread_t *t = a;
  (void)b, (void)c;
  pthread_mutex_lock(&t->mu);
  t->waiter_in = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  const double until = gt_now_ms() + 10000;
  while (rgf_refused_cancels(t->rt->grpc) < 1 && gt_now_ms() < until) usleep(2000);
  t->refused_seen = rgf_refused_cancels(t->rt->grpc);
}

static void hold_release(rt_thread_t *t) {
  pthread_mutex_lock(&t->mu);
  t->hold_open = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
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

/* Starts a call of method with req (response of type resp) into c. */
static void call_start(gt_rpc_client_t *cl, cs_t *c, pthread_mutex_t *mu, const char *method,
                       const ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp) {
  *c = (cs_t){.mu = mu};
  gt_rpc_stream_args_t a = {.method = method, .request = req, .response = resp, .timeout_ms = 60000,
                            .on_msg = cs_msg, .on_done = cs_done, .user = c};
  gt_err_t err;
  assert_int_equal(gt_rpc_client_stream(cl, &a, &c->s, &err), GT_OK);
}

/* Starts a Generate of prompt for model tiny into c. */
static void cs_start(gt_rpc_client_t *cl, cs_t *c, pthread_mutex_t *mu, const char *prompt) {
  Gantry__V1__GenerateRequest g = GANTRY__V1__GENERATE_REQUEST__INIT;
  g.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  g.prompt = (char *)prompt;
  g.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  g.max_tokens = 1000; /* SLOW: 20 s of tokens, longer than the test */
  Gantry__V1__RouterGenerateRequest r = GANTRY__V1__ROUTER_GENERATE_REQUEST__INIT;
  r.model = "tiny";
  r.request = &g;
  call_start(cl, c, mu, "/gantry.v1.Router/Generate", &r.base, &gantry__v1__generate_response__descriptor);
}

static int engine_busy(fe_t *f) { return fe_active(f) == N_CANCEL; }
static int engine_idle(fe_t *f) { return fe_active(f) == 0; }
static int engine_one(fe_t *f) { return fe_active(f) == 1; }

/* A real redis-server, the fake engine "A" for model tiny, the router on its loop thread (ready)
 * and a gRPC client of it; extra_engine (or NULL): one more --engine MODEL=ADDR; auth: --auth. */
typedef struct stack {
  rs_t *rs;
  fe_t *fe;
  rt_thread_t t;
  rgf_t *front;
  gt_rpc_client_t *cl;
} rt_stack_t;

static void stack_start_with(rt_stack_t *k, const char *extra_engine, const char *auth) {
  gt_err_t err;
  *k = (rt_stack_t){0};
  k->rs = rs_start(&err);
  assert_non_null(k->rs);
  k->fe = fe_start("A");
  assert_non_null(k->fe);
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(k->rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(k->fe));
  char *argv[] = {"router", "--redis", redis, "--engine", eng, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                  "--auth", (char *)auth, "--health-ms", "100", "--drain-timeout-s", "0", NULL, NULL, NULL};
  int argc = (int)(sizeof argv / sizeof argv[0]) - 3;
  if (extra_engine) {
    argv[argc++] = "--engine";
    argv[argc++] = (char *)extra_engine;
  }
  static rt_config_t cfg;
  bool help;
  rt_config_defaults(&cfg);
  assert_int_equal(rt_config_parse(&cfg, argc, argv, &help, &err), GT_OK);
  rt_thread_t *t = &k->t;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  t->rt = rt_create(&cfg, &err);
  assert_non_null(t->rt);
  const int http_port = t->rt->http_port, grpc_port = t->rt->grpc_port;
  k->front = t->rt->grpc;
  assert_int_equal(pthread_create(&t->th, NULL, loop_main, t), 0);
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
  assert_int_equal(gt_rpc_client_create(target, NULL, &k->cl, &err), GT_OK);
}

static void stack_start(rt_stack_t *k) { stack_start_with(k, NULL, "none"); }

/* Holds the loop in gate() (posted to it): returns once the loop is there. */
static void hold_at_gate(rt_thread_t *t) {
  assert_int_equal(mbox_post(t->rt->mb, gate, t, NULL, 0), 0);
  assert_true(wait_flag(t, &t->gate_in, 10000));
}

/* Opens the gate of gate() (posted to the loop): the loop stops, rt_destroy runs. */
static void open_gate(rt_thread_t *t) {
  pthread_mutex_lock(&t->mu);
  t->gate_open = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

/* open_gate, then returns whether the router was destroyed within 20 s. */
static bool stop_router(rt_thread_t *t) {
  const double t0 = gt_now_ms();
  open_gate(t);
  const bool destroyed = wait_flag(t, &t->destroyed, 20000);
  printf("router stopped in %.0f ms\n", gt_now_ms() - t0);
  return destroyed;
}

static void stack_stop(rt_stack_t *k) {
  gt_rpc_client_destroy(k->cl);
  fe_stop(k->fe);
  rs_stop(k->rs);
  pthread_mutex_destroy(&k->t.mu);
  pthread_cond_destroy(&k->t.cv);
}

/* Waits (up to ms) until every cs in cs[0..n) is done; returns whether they were. */
static bool cs_wait_all(cs_t *cs, int n, pthread_mutex_t *mu, int ms) {
  const double until = gt_now_ms() + ms;
  bool all = false;
  while (!all && gt_now_ms() < until) {
    all = true;
    pthread_mutex_lock(mu);
    for (int i = 0; i < n; i++) all = all && cs[i].done;
    pthread_mutex_unlock(mu);
    if (!all) usleep(10000);
  }
  return all;
}

/* Starts the router, N_CANCEL streams, holds the loop, cancels them and starts n_new calls, then
 * stops the router with all those hand-offs queued, and checks every call ended as it should. */
static void stop_with_posts_queued(int n_new) {
  rt_stack_t k;
  stack_start(&k);
  rt_thread_t *t = &k.t;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  cs_t run[N_CANCEL + MAX_NEW], *fresh = run + N_CANCEL;
  for (int i = 0; i < N_CANCEL; i++) cs_start(k.cl, &run[i], &mu, "SLOW");
  assert_true(fe_wait(k.fe, engine_busy, 10000)); /* admitted, streaming from the engine */

  /* hold the loop; meanwhile the front's cq thread posts a cancel per stream and a new call */
  hold_at_gate(t);
  for (int i = 0; i < N_CANCEL; i++) gt_rpc_stream_cancel(run[i].s);
  for (int i = 0; i < n_new; i++) cs_start(k.cl, &fresh[i], &mu, "SLOW");
  WAIT_FOR_COUNT(rgf_pending_posts(k.front), N_CANCEL + n_new);

  /* stop the loop: rt_destroy runs with them queued */
  assert_true(stop_router(t)); /* before: the server's shutdown waited for the queued calls forever */
  pthread_join(t->th, NULL);

  /* the queued calls were answered (UNAVAILABLE), the cancelled streams ended, the engine too */
  assert_true(cs_wait_all(run, N_CANCEL + n_new, &mu, 10000));
  for (int i = 0; i < N_CANCEL; i++) assert_int_equal(run[i].code, GT_RPC_CANCELLED);
  for (int i = 0; i < n_new; i++) {
    assert_int_equal(fresh[i].code, GT_RPC_UNAVAILABLE);
    assert_int_equal(fresh[i].msgs, 0);
  }
  assert_true(fe_wait(k.fe, engine_idle, 10000));
  for (int i = 0; i < N_CANCEL + n_new; i++) gt_rpc_stream_release(run[i].s);
  stack_stop(&k);
}

/* process_id of the redis-server on port (from INFO server), or -1. */
static pid_t redis_pid(int port) {
  redisContext *r = redisConnect("127.0.0.1", port);
  pid_t pid = -1;
  redisReply *rep = r && !r->err ? redisCommand(r, "INFO server") : NULL;
  const char *p = rep && rep->type == REDIS_REPLY_STRING ? rep->str : NULL;
  if (p && (p = strstr(p, "process_id:"))) pid = (pid_t)atol(p + 11);
  if (rep) freeReplyObject(rep);
  if (r) redisFree(r);
  return pid;
}

/* Starts the stack and stops its redis-server answering (SIGSTOP); returns the server's pid. */
static pid_t stack_start_redis_stopped(rt_stack_t *k) {
  stack_start(k);
  const pid_t rpid = redis_pid(rs_port(k->rs));
  assert_true(rpid > 0);
  assert_int_equal(kill(rpid, SIGSTOP), 0);
  return rpid;
}

/* Stops the router with the redis-server rpid still stopped, then lets it run again (SIGCONT). */
static void stop_router_redis_stopped(rt_stack_t *k, pid_t rpid) {
  assert_int_equal(mbox_post(k->t.rt->mb, gate, &k->t, NULL, 0), 0);
  const bool destroyed = stop_router(&k->t);
  kill(rpid, SIGCONT);
  assert_true(destroyed);
  pthread_join(k->t.th, NULL);
}

/* An admin call (GetLimits) waiting on a Redis that stopped answering (SIGSTOP) when the router
 * stops: the router stops in bounded time, the call ends UNAVAILABLE, and (ASan) what the call
 * held is freed. Before, nothing ended the call, so the gRPC server's shutdown waited for it
 * forever on the loop thread that would have answered it. */
static void test_stop_with_admin_call_waiting_on_redis(void **st) {
  (void)st;
  rt_stack_t k;
  const pid_t rpid = stack_start_redis_stopped(&k);

  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  cs_t c;
  Gantry__V1__GetLimitsRequest q = GANTRY__V1__GET_LIMITS_REQUEST__INIT;
  q.model = "tiny";
  q.tenant = "";
  call_start(k.cl, &c, &mu, "/gantry.v1.Admin/GetLimits", &q.base, &gantry__v1__limits__descriptor);
  WAIT_FOR_COUNT(rgf_admin_calls(k.front), 1); /* its GetLimits script went to the stopped Redis */

  stop_router_redis_stopped(&k, rpid);
  assert_true(cs_wait_all(&c, 1, &mu, 10000));
  assert_int_equal(c.code, GT_RPC_UNAVAILABLE);
  assert_int_equal(c.msgs, 0);
  gt_rpc_stream_release(c.s);
  stack_stop(&k);
}

/* A Generate, a ListModels and a GetLimits call queued for the loop when the router stops: each
 * is refused UNAVAILABLE and counted once, 503, in gantry_router_requests_total. Before, only
 * Generate was counted; the other two not at all. */
static void test_stop_counts_refused_calls(void **st) {
  (void)st;
  rt_stack_t k;
  stack_start(&k);
  rt_thread_t *t = &k.t;
  t->read_stop_counts = true;
  hold_at_gate(t);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  cs_t cs[N_GRPC_STOP_ROUTES];
  cs_start(k.cl, &cs[0], &mu, "SLOW");
  Gantry__V1__ListModelsRequest lm = GANTRY__V1__LIST_MODELS_REQUEST__INIT;
  call_start(k.cl, &cs[1], &mu, "/gantry.v1.Router/ListModels", &lm.base, &gantry__v1__list_models_response__descriptor);
  Gantry__V1__GetLimitsRequest q = GANTRY__V1__GET_LIMITS_REQUEST__INIT;
  q.model = "tiny";
  q.tenant = "";
  call_start(k.cl, &cs[2], &mu, "/gantry.v1.Admin/GetLimits", &q.base, &gantry__v1__limits__descriptor);
  WAIT_FOR_COUNT(rgf_pending_posts(k.front), N_GRPC_STOP_ROUTES);

  assert_true(stop_router(t));
  pthread_join(t->th, NULL);
  assert_true(cs_wait_all(cs, N_GRPC_STOP_ROUTES, &mu, 10000));
  for (int i = 0; i < N_GRPC_STOP_ROUTES; i++) {
    assert_int_equal(cs[i].code, GT_RPC_UNAVAILABLE);
    printf("%s: %llu counted 503\n", stop_routes[i], (unsigned long long)t->stop_503[i]);
    assert_int_equal(t->stop_503[i], 1);
    gt_rpc_stream_release(cs[i].s);
  }
  stack_stop(&k);
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

/* An HTTP request on another thread (a GET without data, else a JSON POST): the status (-1 when the connection
 * dropped) and body. */
typedef struct http_call {
  int port;
  const char *path, *data;
  long status;
  char *body;
} http_call_t;

static void *http_call_run(void *arg) {
  http_call_t *c = arg;
  static const char *const json_hdr[] = {"Content-Type: application/json", NULL};
  c->status = http_req(c->port, c->data ? "POST" : "GET", c->path, c->data ? json_hdr : NULL, c->data,
                       c->data ? strlen(c->data) : 0, &c->body, NULL);
  return NULL;
}

/* Joins th, which ran http_call_run(c): c got the 503 router_shutdown error. */
static void http_call_join_shutdown(pthread_t th, http_call_t *c) {
  pthread_join(th, NULL);
  assert_int_equal(c->status, 503);
  assert_non_null(c->body);
  assert_non_null(strstr(c->body, "\"router_shutdown\""));
  free(c->body);
}

/* The same on the HTTP front: GET /admin/limits waiting on the SIGSTOPped Redis when the router
 * stops gets a 503 router_shutdown error, then its connection closes, and (ASan) what it held is
 * freed. Before, nothing freed it (a leak; and a use-after-free of its freed connection had Redis
 * answered while rt_destroy still ran the loop); then the connection closed with no reply. */
static void test_stop_with_http_admin_waiting_on_redis(void **st) {
  (void)st;
  rt_stack_t k;
  const pid_t rpid = stack_start_redis_stopped(&k);
  http_call_t c = {.port = k.t.rt->http_port, .path = "/admin/limits?model=tiny"};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, http_call_run, &c), 0);
  struct http_front *hf = k.t.rt->http;
  WAIT_FOR_COUNT(http_front_adm_waiting(hf), 1); /* its GetLimits script went to the stopped Redis */

  stop_router_redis_stopped(&k, rpid);
  http_call_join_shutdown(th, &c); /* before: -1, the connection closed without a reply */
  stack_stop(&k);
}

/* An engine for model "held": Health READY and Info, but every Tokenize call is kept unanswered
 * until he_stop (the engine's answer cannot come before the router stops). */
typedef struct held_engine {
  gt_rpc_server_t *srv;
  int port;
  pthread_mutex_t mu;
  gt_rpc_call_t *held[4];
  int n_held;
} held_engine_t;

static void he_health(void *user, gt_rpc_call_t *call) {
  (void)user;
  Gantry__V1__HealthResponse *r = malloc(sizeof *r);
  gantry__v1__health_response__init(r);
  r->status = GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY;
  gt_rpc_call_reply(call, &r->base);
}

static void he_info(void *user, gt_rpc_call_t *call) {
  (void)user;
  Gantry__V1__InfoResponse *r = malloc(sizeof *r);
  gantry__v1__info_response__init(r);
  r->model_name = strdup("held");
  r->context_length = 4096;
  r->max_num_seqs = 64;
  gt_rpc_call_reply(call, &r->base);
}

static void he_tokenize(void *user, gt_rpc_call_t *call) {
  held_engine_t *e = user;
  pthread_mutex_lock(&e->mu);
  if (e->n_held < 4) e->held[e->n_held++] = call;
  else gt_rpc_call_finish(call, GT_RPC_RESOURCE_EXHAUSTED, "too many held calls");
  pthread_mutex_unlock(&e->mu);
}

static int he_n_held(held_engine_t *e) {
  pthread_mutex_lock(&e->mu);
  const int n = e->n_held;
  pthread_mutex_unlock(&e->mu);
  return n;
}

static void he_start(held_engine_t *e) {
  gt_err_t err;
  *e = (held_engine_t){0};
  pthread_mutex_init(&e->mu, NULL);
  assert_int_equal(gt_rpc_server_create(NULL, &e->srv, &err), GT_OK);
  const gt_rpc_method_t ms[] = {
      {EC_METHOD_HEALTH, GT_RPC_UNARY, &gantry__v1__health_request__descriptor, he_health, NULL, NULL, e},
      {EC_METHOD_INFO, GT_RPC_UNARY, &gantry__v1__info_request__descriptor, he_info, NULL, NULL, e},
      {EC_METHOD_TOKENIZE, GT_RPC_UNARY, &gantry__v1__tokenize_request__descriptor, he_tokenize, NULL, NULL, e}};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) assert_int_equal(gt_rpc_server_add_method(e->srv, &ms[i], &err), GT_OK);
  assert_int_equal(gt_rpc_server_start(e->srv, "127.0.0.1:0", &e->port, &err), GT_OK);
}

static void he_stop(held_engine_t *e) {
  for (int i = 0; i < e->n_held; i++) gt_rpc_call_finish(e->held[i], GT_RPC_UNAVAILABLE, "held");
  gt_rpc_server_destroy(e->srv);
  pthread_mutex_destroy(&e->mu);
}

/* Starts he and the stack with he as its engine for model "held". */
static void stack_start_held(rt_stack_t *k, held_engine_t *he) {
  he_start(he);
  char eng[64];
  snprintf(eng, sizeof eng, "held=127.0.0.1:%d", he->port);
  stack_start_with(k, eng, "none");
}

/* Stops the router now (its loop stops at gate(), rt_destroy runs) and joins its thread. */
static void stop_router_join(rt_thread_t *t) {
  assert_int_equal(mbox_post(t->rt->mb, gate, t, NULL, 0), 0);
  assert_true(stop_router(t));
  pthread_join(t->th, NULL);
}

/* POST /tokenize whose engine has not answered when the router stops: the client gets a 503
 * router_shutdown error, then its connection closes, and (ASan) nothing is used after free or
 * leaked. Before, the request was in no list the stop walks: the connection closed with no reply,
 * and when the router's engine client ended the call (pool_destroy) its answer ran on the freed
 * request (heap-use-after-free). */
static void test_stop_with_tokenize_waiting_on_engine(void **st) {
  (void)st;
  held_engine_t he;
  rt_stack_t k;
  stack_start_held(&k, &he);
  http_call_t c = {.port = k.t.rt->http_port, .path = "/tokenize", .data = "{\"model\":\"held\",\"prompt\":\"hello\"}"};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, http_call_run, &c), 0);
  WAIT_FOR_COUNT(he_n_held(&he), 1); /* the router's Tokenize call is at the engine, unanswered */

  stop_router_join(&k.t);
  http_call_join_shutdown(th, &c); /* before: -1, the connection closed without a reply */
  he_stop(&he);
  stack_stop(&k);
}

/* Sends req on a new loopback connection to port and returns the socket (nothing read). */
static int raw_send(int port, const char *req) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
  return fd;
}

/* The client of a request waiting in the HTTP front leaves (its write side closes: EOF for the
 * router); returns once the front's watcher has seen it: the FIN is at the router's socket before
 * the /health connection below exists, so the watcher runs no later than the loop iteration that
 * accepts it, and /health is read and answered in a later one. */
static void client_leaves(int fd, int port) {
  assert_int_equal(shutdown(fd, SHUT_WR), 0);
  char *b = NULL;
  assert_int_equal(http_req(port, "GET", "/health", NULL, NULL, 0, &b, NULL), 200);
  free(b);
}

/* Bytes the router sent on fd until it closed it (up to 10 s). */
static size_t bytes_until_close(int fd) {
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t total = 0;
  char buf[512];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) total += (size_t)n;
  assert_int_equal(n, 0); /* closed, not timed out */
  close(fd);
  return total;
}

/* gantry_router_requests_total{route,status} from the router's /metrics, or 0 when absent. */
static long long requests_total(int port, const char *route, int status) {
  char *b = NULL;
  assert_int_equal(http_req(port, "GET", "/metrics", NULL, NULL, 0, &b, NULL), 200);
  char key[256];
  snprintf(key, sizeof key, "gantry_router_requests_total{route=\"%s\",status=\"%d\"} ", route, status);
  const char *p = strstr(b, key);
  const long long v = p ? atoll(p + strlen(key)) : 0;
  free(b);
  return v;
}

/* Waits (up to 10 s) until no HTTP request waits on Redis or an engine. */
static void wait_no_adm_waiting(struct http_front *hf) {
  const double until = gt_now_ms() + 10000;
  while (http_front_adm_waiting(hf) > 0 && gt_now_ms() < until) usleep(5000);
  assert_int_equal(http_front_adm_waiting(hf), 0);
}

/* GET /admin/limits whose client leaves while the call waits on the SIGSTOPped Redis: when Redis
 * answers, nothing is written to the client, its connection closes, the request is counted 499
 * (not 200) and (ASan) freed. Before, the answer was sent and counted 200. */
static void test_http_admin_client_leaves(void **st) {
  (void)st;
  rt_stack_t k;
  const pid_t rpid = stack_start_redis_stopped(&k);
  const int port = k.t.rt->http_port;
  struct http_front *hf = k.t.rt->http;
  const int fd = raw_send(port, "GET /admin/limits?model=tiny HTTP/1.1\r\nHost: x\r\n\r\n");
  WAIT_FOR_COUNT(http_front_adm_waiting(hf), 1);
  client_leaves(fd, port);

  assert_int_equal(kill(rpid, SIGCONT), 0);
  wait_no_adm_waiting(hf);
  assert_int_equal(bytes_until_close(fd), 0); /* before: the 200 answer */
  assert_int_equal(requests_total(port, "/admin/limits", 499), 1);
  assert_int_equal(requests_total(port, "/admin/limits", 200), 0);

  stop_router_join(&k.t);
  stack_stop(&k);
}

/* A chat completion with an API key (--auth none still looks a given key up) whose client leaves
 * while the key is checked on the SIGSTOPped Redis: when Redis answers, nothing is written to
 * the client, its connection closes, the request is counted 499 and (ASan) freed. Before, a 499
 * error body was written to the gone client. */
static void test_http_key_check_client_leaves(void **st) {
  (void)st;
  rt_stack_t k;
  const pid_t rpid = stack_start_redis_stopped(&k);
  const int port = k.t.rt->http_port;
  static const char body[] = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  char req[512];
  snprintf(req, sizeof req,
           "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n"
           "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  const int fd = raw_send(port, req);
  /* its bytes are at the router before the /health connection of client_leaves exists, so the
   * router has read it (and sent the key's lookup) before it answers that /health */
  client_leaves(fd, port);

  assert_int_equal(kill(rpid, SIGCONT), 0);
  WAIT_FOR_COUNT(requests_total(port, "/v1/chat/completions", 499), 1);
  assert_int_equal(bytes_until_close(fd), 0); /* before: the 499 client_closed error */
  stop_router_join(&k.t);
  stack_stop(&k);
}

/* POST /tokenize whose client leaves while the engine holds the call: when the engine ends it,
 * nothing is written to the client, its connection closes, the request is counted 499 (not 503)
 * and (ASan) freed. Before, the 503 was sent and counted. */
static void test_http_tokenize_client_leaves(void **st) {
  (void)st;
  held_engine_t he;
  rt_stack_t k;
  stack_start_held(&k, &he);
  const int port = k.t.rt->http_port;
  static const char body[] = "{\"model\":\"held\",\"prompt\":\"hello\"}";
  char req[256];
  snprintf(req, sizeof req,
           "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  const int fd = raw_send(port, req);
  WAIT_FOR_COUNT(he_n_held(&he), 1);
  client_leaves(fd, port);

  pthread_mutex_lock(&he.mu);
  gt_rpc_call_finish(he.held[0], GT_RPC_UNAVAILABLE, "held");
  he.n_held = 0;
  pthread_mutex_unlock(&he.mu);
  wait_no_adm_waiting(k.t.rt->http);
  assert_int_equal(bytes_until_close(fd), 0); /* before: the 503 engine_unavailable answer */
  assert_int_equal(requests_total(port, "/tokenize", 499), 1);
  assert_int_equal(requests_total(port, "/tokenize", 503), 0);

  stop_router_join(&k.t);
  he_stop(&he);
  stack_stop(&k);
}

/* A Generate call whose client cancels while its key is checked, the check then failing
 * (--auth keys, no keys in Redis: 503 auth_no_keys): counted 499, as a client that leaves at any
 * later point, not 503. The loop is held while the call and its cancel are posted, so the call is
 * already cancelled when the check's answer comes. Before, it was counted 503 (401 for a wrong
 * key). */
static void test_grpc_cancel_during_key_check(void **st) {
  (void)st;
  rt_stack_t k;
  stack_start_with(&k, NULL, "keys");
  rt_thread_t *t = &k.t;
  const int port = t->rt->http_port;
  assert_int_equal(mbox_post(t->rt->mb, hold, t, NULL, 0), 0);
  assert_true(wait_flag(t, &t->hold_in, 10000));
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  cs_t c;
  cs_start(k.cl, &c, &mu, "SLOW");
  WAIT_FOR_COUNT(rgf_pending_posts(k.front), 1);
  gt_rpc_stream_cancel(c.s);
  WAIT_FOR_COUNT(rgf_pending_posts(k.front), 2); /* the server saw the cancel */
  hold_release(t);

  WAIT_FOR_COUNT(requests_total(port, "grpc:Generate", 499), 1); /* before: 0 (503 instead) */
  assert_int_equal(requests_total(port, "grpc:Generate", 503), 0);
  assert_true(cs_wait_all(&c, 1, &mu, 10000));
  assert_int_equal(c.code, GT_RPC_CANCELLED);
  gt_rpc_stream_release(c.s);
  stop_router_join(t);
  stack_stop(&k);
}

/* A Generate call streaming when the router stops, whose client cancels once the front refuses
 * hand-offs (its cancel is not posted: rgf_stop ends the call): counted 499, as a client that
 * leaves while the router runs, not 503. Before, 503. */
static void test_stop_counts_late_cancel_499(void **st) {
  (void)st;
  rt_stack_t k;
  stack_start(&k);
  rt_thread_t *t = &k.t;
  t->read_stop_counts = true;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  cs_t c;
  cs_start(k.cl, &c, &mu, "SLOW");
  assert_true(fe_wait(k.fe, engine_one, 10000)); /* admitted, streaming from the engine */
  hold_at_gate(t);
  assert_int_equal(mbox_post(t->rt->mb, stop_waiter, t, NULL, 0), 0);
  open_gate(t); /* the loop stops; rgf_stop runs stop_waiter */
  assert_true(wait_flag(t, &t->waiter_in, 10000));
  gt_rpc_stream_cancel(c.s);
  assert_true(wait_flag(t, &t->destroyed, 20000));
  pthread_join(t->th, NULL);

  assert_int_equal(t->refused_seen, 1); /* the cancel came while rgf_stop ran */
  printf("grpc:Generate at stop: %llu counted 499, %llu counted 503\n", (unsigned long long)t->stop_499[0],
         (unsigned long long)t->stop_503[0]);
  assert_int_equal(t->stop_499[0], 1); /* before: 0 */
  assert_int_equal(t->stop_503[0], 0); /* before: 1 */
  assert_true(cs_wait_all(&c, 1, &mu, 10000));
  assert_int_equal(c.code, GT_RPC_CANCELLED);
  assert_true(fe_wait(k.fe, engine_idle, 10000));
  gt_rpc_stream_release(c.s);
  stack_stop(&k);
}

/* GET /admin/limits whose client leaves while the call waits on the SIGSTOPped Redis, and the
 * router stops before Redis answers: nothing is written to the client, its connection closes, and
 * the request is counted 499 (as when Redis answers first), not 503. Before, 503. */
static void test_http_admin_client_leaves_at_stop(void **st) {
  (void)st;
  rt_stack_t k;
  const pid_t rpid = stack_start_redis_stopped(&k);
  k.t.read_stop_counts = true;
  const int port = k.t.rt->http_port;
  struct http_front *hf = k.t.rt->http;
  const int fd = raw_send(port, "GET /admin/limits?model=tiny HTTP/1.1\r\nHost: x\r\n\r\n");
  WAIT_FOR_COUNT(http_front_adm_waiting(hf), 1);
  client_leaves(fd, port);

  stop_router_redis_stopped(&k, rpid);
  assert_int_equal(bytes_until_close(fd), 0);
  assert_string_equal(stop_routes[3], "/admin/limits");
  assert_int_equal(k.t.stop_499[3], 1); /* before: 0 */
  assert_int_equal(k.t.stop_503[3], 0); /* before: 1 */
  stack_stop(&k);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_stop_with_cancels_queued),
                                     cmocka_unit_test(test_stop_with_new_calls_queued),
                                     cmocka_unit_test(test_stop_counts_refused_calls),
                                     cmocka_unit_test(test_stop_with_admin_call_waiting_on_redis),
                                     cmocka_unit_test(test_stop_with_http_admin_waiting_on_redis),
                                     cmocka_unit_test(test_stop_with_tokenize_waiting_on_engine),
                                     cmocka_unit_test(test_http_admin_client_leaves),
                                     cmocka_unit_test(test_http_key_check_client_leaves),
                                     cmocka_unit_test(test_http_tokenize_client_leaves),
                                     cmocka_unit_test(test_grpc_cancel_during_key_check),
                                     cmocka_unit_test(test_stop_counts_late_cancel_499),
                                     cmocka_unit_test(test_http_admin_client_leaves_at_stop)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
