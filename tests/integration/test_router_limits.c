/* tests/integration/test_router_limits.c — request caps and small protocol defects of issue 15
 * (items 4 and 6), with a real redis-server, the real router (--auth keys --protect-info
 * --max-body-bytes 65536, HTTP and gRPC fronts) and a scripted fake engine (context 4096):
 *   - the gRPC front caps request messages like HTTP bodies (it accepted 64 MiB), and enforces
 *     the HTTP front's limits (logit_bias, stop strings, priority, n, sampling ranges);
 *   - max_tokens beyond the context: 400 context_length_exceeded (HTTP) / INVALID_ARGUMENT;
 *   - Content-Type text/plain: 415;
 *   - --protect-info: /metrics, /v1/models and ListModels need an API key or the admin key;
 *   - a 429's Retry-After comes from the measured admission rate and says when the full queue
 *     has room again (it said 26 s for a queue that drained in 7 s, then the time to drain it all);
 *   - gRPC admin calls are counted in gantry_router_requests_total with their outcome;
 *   - Router.Embed checks the key like Generate (UNAUTHENTICATED), then the HTTP route's limits
 *     (INVALID_ARGUMENT naming the field); success: tests/e2e/grpc_embed.test.mjs. */
#define _GNU_SOURCE
#include <setjmp.h>
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

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "common/clock.h"
#include "common/grpc_client.h"
#include "common/sha256.h"
#include "gantry/v1/router.pb-c.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static rstack_t g_k; /* redis, fake engine "A", router */
static gt_rpc_client_t *g_rpc;

static int setup(void **st) {
  (void)st;
  gt_err_t err;
  rstack_start(&g_k, "A", (const char *[]){"--grpc", "127.0.0.1:0", "--auth", "keys", "--admin-key", "adm",
                                            "--protect-info", "--max-body-bytes", "65536", "--health-ms", "100",
                                            "--admission-hold-ms", "1", NULL});
  redisContext *rc = redisConnect("127.0.0.1", rs_port(g_k.rs));
  char sha[65];
  gt_sha256_hex("k1", 2, sha);
  freeReplyObject(redisCommand(rc, "HSET gantry:apikeys %s acme", sha));
  redisFree(rc);
  assert_true(rp_wait_ready(&g_k.rp, 20000));
  char target[32];
  snprintf(target, sizeof target, "127.0.0.1:%d", g_k.rp.grpc_port);
  assert_int_equal(gt_rpc_client_create(target, NULL, &g_rpc, &err), GT_OK);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  gt_rpc_client_destroy(g_rpc);
  assert_int_equal(rstack_stop(&g_k), 0);
  return 0;
}

/* Router/Generate with a prompt of n bytes: the status code (the call is refused before any
 * token in every case here). */
static int grpc_generate(size_t n, uint32_t max_tokens) {
  char *prompt = malloc(n + 1);
  memset(prompt, 'a', n);
  prompt[n] = '\0';
  Gantry__V1__GenerateRequest g = GANTRY__V1__GENERATE_REQUEST__INIT;
  g.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  g.prompt = prompt;
  g.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  g.max_tokens = max_tokens;
  Gantry__V1__RouterGenerateRequest r = GANTRY__V1__ROUTER_GENERATE_REQUEST__INIT;
  r.model = "tiny";
  r.request = &g;
  gt_rpc_md_t md[] = {{"authorization", "Bearer k1"}};
  ProtobufCMessage *resp = NULL;
  gt_rpc_status_t s;
  gt_rpc_code_t code = gt_rpc_client_unary(g_rpc, "/gantry.v1.Router/Generate", &r.base,
                                           &gantry__v1__generate_response__descriptor, 10000, md, 1, &resp, &s);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  free(prompt);
  return code;
}

static void test_grpc_front_message_cap(void **st) {
  (void)st;
  /* 100 KB > --max-body-bytes 65536: refused by the transport, never reaches admission */
  assert_int_equal(grpc_generate(100000, 16), GT_RPC_RESOURCE_EXHAUSTED);
  /* 1 KB passes the cap (and is refused for max_tokens, below) */
  assert_int_equal(grpc_generate(1000, 1000000), GT_RPC_INVALID_ARGUMENT);
  assert_int_equal(fe_generates(g_k.fe), 0);
}

/* Router/Generate of a small prompt after mut(g) changed the request: the status, with its
 * message in msg. */
static gt_rpc_code_t grpc_mutated(void (*mut)(Gantry__V1__GenerateRequest *g), char *msg, size_t msz) {
  Gantry__V1__GenerateRequest g = GANTRY__V1__GENERATE_REQUEST__INIT;
  g.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  g.prompt = "hi";
  g.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  g.max_tokens = 2;
  mut(&g);
  Gantry__V1__RouterGenerateRequest r = GANTRY__V1__ROUTER_GENERATE_REQUEST__INIT;
  r.model = "tiny";
  r.request = &g;
  gt_rpc_md_t md[] = {{"authorization", "Bearer k1"}};
  ProtobufCMessage *resp = NULL;
  gt_rpc_status_t s;
  gt_rpc_code_t code = gt_rpc_client_unary(g_rpc, "/gantry.v1.Router/Generate", &r.base,
                                           &gantry__v1__generate_response__descriptor, 10000, md, 1, &resp, &s);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  snprintf(msg, msz, "%s", code == GT_RPC_OK ? "" : s.message);
  return code;
}

static Gantry__V1__TokenBias g_bias[2000], *g_biasp[2000];
static char *g_stops[17];
static char g_long_stop[2001];
static Gantry__V1__SamplingParams g_sp;
static void mut_logit_bias(Gantry__V1__GenerateRequest *g) {
  for (int i = 0; i < 2000; i++) {
    gantry__v1__token_bias__init(&g_bias[i]);
    g_bias[i].id = i;
    g_bias[i].bias = 1;
    g_biasp[i] = &g_bias[i];
  }
  g->n_logit_bias = 2000;
  g->logit_bias = g_biasp;
}
static void mut_bias_value(Gantry__V1__GenerateRequest *g) {
  mut_logit_bias(g);
  g->n_logit_bias = 1;
  g_bias[0].bias = 1e6f;
}
static void mut_stop_count(Gantry__V1__GenerateRequest *g) {
  for (int i = 0; i < 17; i++) g_stops[i] = "x";
  g->n_stop = 17;
  g->stop = g_stops;
}
static void mut_stop_len(Gantry__V1__GenerateRequest *g) {
  memset(g_long_stop, 'y', 2000);
  g_long_stop[2000] = '\0';
  g_stops[0] = g_long_stop;
  g->n_stop = 1;
  g->stop = g_stops;
}
static void mut_priority(Gantry__V1__GenerateRequest *g) { g->priority = 2147483647; }
static void mut_n(Gantry__V1__GenerateRequest *g) { g->n = 5000; }
static void mut_temperature(Gantry__V1__GenerateRequest *g) {
  gantry__v1__sampling_params__init(&g_sp);
  g_sp.temperature_opt_case = GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
  g_sp.temperature = 5;
  g->sampling = &g_sp;
}
static void mut_top_logprobs(Gantry__V1__GenerateRequest *g) {
  g->top_logprobs_opt_case = GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS;
  g->top_logprobs = 50;
}

/* The gRPC front refuses what the HTTP front refuses (it passed 2,000 logit_bias entries,
 * 17 stop strings, priority 2^31-1 and n 5000 to the engine), naming the value sent. */
static void test_grpc_front_same_limits(void **st) {
  (void)st;
  struct {
    void (*mut)(Gantry__V1__GenerateRequest *);
    const char *want;
  } cases[] = {
      {mut_logit_bias, "'logit_bias' has 2000 entries"}, {mut_bias_value, "must be a number in [-100, 100]"},
      {mut_stop_count, "'stop' has 17 entries"},         {mut_stop_len, "'stop[0]' has 2000 bytes"},
      {mut_priority, "got 2147483647"},                  {mut_n, "(got 5000)"},
      {mut_temperature, "'temperature' must be between 0 and 2, got 5"},
      {mut_top_logprobs, "'top_logprobs' must be at most 20, got 50"},
  };
  const int before = fe_generates(g_k.fe);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char msg[512];
    gt_rpc_code_t code = grpc_mutated(cases[i].mut, msg, sizeof msg);
    if (code != GT_RPC_INVALID_ARGUMENT || !strstr(msg, cases[i].want))
      fail_msg("case %zu: %s %s (want INVALID_ARGUMENT '%s')", i, gt_rpc_code_name(code), msg, cases[i].want);
  }
  assert_int_equal(fe_generates(g_k.fe), before); /* none reached the engine */
  /* the stop-string length holds on the HTTP front too */
  char req[2300];
  memset(g_long_stop, 'y', 2000);
  g_long_stop[2000] = '\0';
  snprintf(req, sizeof req, "{\"model\":\"tiny\",\"prompt\":\"hi\",\"stop\":[\"%s\"]}", g_long_stop);
  const char *h[] = {"Content-Type: application/json", "Authorization: Bearer k1", NULL};
  char *b = NULL;
  assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/completions", h, req, strlen(req), &b, NULL), 400);
  assert_non_null(strstr(b, "'stop[0]' has 2000 bytes"));
  free(b);
}

static void test_max_tokens_beyond_context(void **st) {
  (void)st;
  const char *req = "{\"model\":\"tiny\",\"max_tokens\":1000000000000,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  const char *h[] = {"Content-Type: application/json", "Authorization: Bearer k1", NULL};
  char *b = NULL;
  assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL), 400);
  assert_non_null(strstr(b, "\"context_length_exceeded\""));
  assert_non_null(strstr(b, "4096"));
  free(b);
  const char *ok = "{\"model\":\"tiny\",\"max_tokens\":4096,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", h, ok, strlen(ok), &b, NULL), 200);
  free(b);
}

static void test_content_type_415(void **st) {
  (void)st;
  const char *req = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  const char *h[] = {"Content-Type: text/plain", "Authorization: Bearer k1", NULL};
  char *b = NULL;
  assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", h, req, strlen(req), &b, NULL), 415);
  assert_non_null(strstr(b, "\"unsupported_media_type\""));
  free(b);
  const char *h2[] = {"Content-Type: application/json; charset=utf-8", "Authorization: Bearer k1", NULL};
  assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", h2, req, strlen(req), &b, NULL), 200);
  free(b);
}

static void test_protect_info(void **st) {
  (void)st;
  const char *paths[] = {"/metrics", "/v1/models"};
  for (int i = 0; i < 2; i++) {
    char *b = NULL;
    assert_int_equal(http_req(g_k.rp.http_port, "GET", paths[i], NULL, NULL, 0, &b, NULL), 401);
    free(b);
    const char *api[] = {"Authorization: Bearer k1", NULL};
    assert_int_equal(http_req(g_k.rp.http_port, "GET", paths[i], api, NULL, 0, &b, NULL), 200);
    free(b);
    const char *adm[] = {"Authorization: Bearer adm", NULL};
    assert_int_equal(http_req(g_k.rp.http_port, "GET", paths[i], adm, NULL, 0, &b, NULL), 200);
    free(b);
  }
  Gantry__V1__ListModelsRequest lr = GANTRY__V1__LIST_MODELS_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  gt_rpc_status_t s;
  assert_int_equal(gt_rpc_client_unary(g_rpc, "/gantry.v1.Router/ListModels", &lr.base,
                                       &gantry__v1__list_models_response__descriptor, 5000, NULL, 0, &resp, &s),
                   GT_RPC_UNAUTHENTICATED);
  gt_rpc_md_t md[] = {{"authorization", "Bearer k1"}};
  assert_int_equal(gt_rpc_client_unary(g_rpc, "/gantry.v1.Router/ListModels", &lr.base,
                                       &gantry__v1__list_models_response__descriptor, 5000, md, 1, &resp, &s),
                   GT_RPC_OK);
  assert_int_equal(((Gantry__V1__ListModelsResponse *)resp)->n_models, 1);
  protobuf_c_message_free_unpacked(resp, NULL);
}

/* Router/Embed with texts[n] (every one "x", or "" for the last when empty_last): the status. */
static gt_rpc_code_t grpc_embed(const gt_rpc_md_t *md, size_t n_md, size_t n, bool empty_last, char *param, size_t psz) {
  char *texts[4] = {"x", "x", "x", "x"};
  if (empty_last) texts[n - 1] = "";
  Gantry__V1__EmbedRequest er = GANTRY__V1__EMBED_REQUEST__INIT;
  er.texts = texts;
  er.n_texts = n;
  Gantry__V1__RouterEmbedRequest rr = GANTRY__V1__ROUTER_EMBED_REQUEST__INIT;
  rr.model = "tiny";
  rr.request = &er;
  ProtobufCMessage *resp = NULL;
  gt_rpc_status_t s;
  gt_rpc_code_t code = gt_rpc_client_unary(g_rpc, "/gantry.v1.Router/Embed", &rr.base,
                                           &gantry__v1__embed_response__descriptor, 5000, md, n_md, &resp, &s);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  snprintf(param, psz, "%s", code == GT_RPC_OK ? "" : s.param);
  return code;
}

static void test_grpc_embed_auth_and_limits(void **st) {
  (void)st;
  char param[64];
  assert_int_equal(grpc_embed(NULL, 0, 1, false, param, sizeof param), GT_RPC_UNAUTHENTICATED);
  gt_rpc_md_t bad[] = {{"authorization", "Bearer nope"}};
  assert_int_equal(grpc_embed(bad, 1, 1, false, param, sizeof param), GT_RPC_UNAUTHENTICATED);
  gt_rpc_md_t md[] = {{"authorization", "Bearer k1"}};
  assert_int_equal(grpc_embed(md, 1, 0, false, param, sizeof param), GT_RPC_INVALID_ARGUMENT);
  assert_string_equal(param, "input");
  assert_int_equal(grpc_embed(md, 1, 3, true, param, sizeof param), GT_RPC_INVALID_ARGUMENT);
  assert_string_equal(param, "input");
  gt_rpc_md_t key[] = {{"x-api-key", "k1"}};
  assert_int_equal(grpc_embed(key, 1, 2, true, param, sizeof param), GT_RPC_INVALID_ARGUMENT);
}

static const char *ADM_HDR[] = {"Content-Type: application/json", "Authorization: Bearer adm", NULL};

static long put_limits(const char *json) {
  char *b = NULL;
  long s = http_req(g_k.rp.http_port, "PUT", "/admin/limits", ADM_HDR, json, strlen(json), &b, NULL);
  free(b);
  return s;
}

/* Requests waiting in the pool's queue (GET /admin/queues), or -1. */
static long pool_queued(void) {
  char *b = NULL;
  long v = -1;
  if (http_req(g_k.rp.http_port, "GET", "/admin/queues?model=tiny", ADM_HDR, NULL, 0, &b, NULL) == 200) {
    json_t *j = json_loads(b, 0, NULL);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(j, "queues"), i, r) {
      json_t *t = json_object_get(r, "tenant");
      if (!t || json_is_null(t)) v = (long)json_integer_value(json_object_get(r, "queued"));
    }
    json_decref(j);
  }
  free(b);
  return v;
}

/* A streaming SLOW request on a raw socket, not waited for. */
static int start_slow(int tokens) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_k.rp.http_port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char body[200], req[512];
  snprintf(body, sizeof body, "{\"model\":\"tiny\",\"stream\":true,\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}", tokens);
  int n = snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Authorization: Bearer k1\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
  assert_int_equal(write(fd, req, (size_t)n), n);
  return fd;
}

static void test_retry_after_from_admission_rate(void **st) {
  (void)st;
  /* limits for a model no engine serves: 404 (a typo used to create a new pool silently) */
  assert_int_equal(put_limits("{\"model\":\"tinny\",\"max_inflight\":1}"), 404);
  assert_int_equal(put_limits("{\"model\":\"tiny\",\"max_inflight\":1,\"max_queued\":30}"), 200);
  /* about 10 admissions a second: 20 requests of 5 tokens at 20 ms */
  const char *h[] = {"Content-Type: application/json", "Authorization: Bearer k1", NULL};
  const char *slow = "{\"model\":\"tiny\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}";
  for (int i = 0; i < 20; i++) {
    char *b = NULL;
    assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", h, slow, strlen(slow), &b, NULL), 200);
    free(b);
  }
  int fds[31];
  for (int i = 0; i < 31; i++) fds[i] = start_slow(5); /* one runs, thirty wait */
  double end = gt_now_ms() + 5000;
  while (pool_queued() < 30 && gt_now_ms() < end) usleep(2000);
  char *b = NULL, *hd = NULL;
  long s = http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", h, slow, strlen(slow), &b, &hd);
  const char *ra = hd ? strcasestr(hd, "Retry-After:") : NULL;
  printf("full queue of 30 at ~10 admissions/s: status %ld, %.20s\n", s, ra ? ra : "no Retry-After");
  assert_int_equal(s, 429);
  assert_non_null(ra);
  /* the queue has room after one admission (~0.1 s): 1 s; the time to drain it all said 4 s,
   * and the pool-cap guess 31 s */
  assert_int_equal(atoi(ra + 12), 1);
  free(b);
  free(hd);
  for (int i = 0; i < 31; i++) close(fds[i]);
  assert_int_equal(put_limits("{\"model\":\"tiny\",\"max_inflight\":64,\"max_queued\":1024}"), 200);
}

/* "cannot listen" says why (issue 15: it did not say the address was in use). */
static void test_listen_error_says_why(void **st) {
  (void)st;
  char cmd[512], out[1024] = "";
  snprintf(cmd, sizeof cmd, "%s/gantry-router --http 127.0.0.1:%d --engine tiny=127.0.0.1:1 --auth none 2>&1",
           getenv("GANTRY_BIN") ? getenv("GANTRY_BIN") : ".", g_k.rp.http_port);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int rc = pclose(p);
  assert_int_not_equal(rc, 0);
  if (!strstr(out, "Address already in use")) fail_msg("no reason in: %s", out);
}

/* Runs cmd through popen; its output (malloc'd). */
static char *run_out(const char *cmd) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char *out = calloc(1, 65536);
  size_t n = fread(out, 1, 65535, p);
  out[n] = '\0';
  pclose(p);
  return out;
}

/* `gantry queues` / `limits get`: a table on a terminal, JSON otherwise or with --json; `gantry
 * check --model M` reports on M. */
static void test_cli_table_on_terminal(void **st) {
  (void)st;
  const char *bin = getenv("GANTRY_BIN") ? getenv("GANTRY_BIN") : ".";
  char base[256], cmd[768];
  snprintf(base, sizeof base, "%s/gantry --url http://127.0.0.1:%d --admin-key adm", bin, g_k.rp.http_port);
  snprintf(cmd, sizeof cmd, "script -qec '%s queues' /dev/null", base); /* a pseudo-terminal */
  char *t = run_out(cmd);
  if (!strstr(t, "MODEL") || !strstr(t, "MAX_INFLIGHT") || !strstr(t, "tiny")) fail_msg("no table: %s", t);
  assert_null(strstr(t, "{"));
  free(t);
  snprintf(cmd, sizeof cmd, "script -qec '%s limits get --model tiny --json' /dev/null", base);
  t = run_out(cmd);
  assert_non_null(strstr(t, "\"max_inflight\""));
  free(t);
  snprintf(cmd, sizeof cmd, "%s queues", base); /* a pipe: JSON */
  t = run_out(cmd);
  assert_non_null(strstr(t, "\"queues\""));
  free(t);
  /* gantry check --model M reports on M (it reported the first model listed) */
  snprintf(cmd, sizeof cmd, "%s/gantry --api-key k1 check http://127.0.0.1:%d --model nope 2>&1", bin, g_k.rp.http_port);
  t = run_out(cmd);
  if (!strstr(t, "model nope is not served") || !strstr(t, "lists: tiny")) fail_msg("check: %s", t);
  free(t);
  snprintf(cmd, sizeof cmd, "%s/gantry --api-key k1 check http://127.0.0.1:%d --model tiny 2>&1", bin, g_k.rp.http_port);
  t = run_out(cmd);
  if (!strstr(t, "model tiny")) fail_msg("check: %s", t);
  free(t);
}

/* A gRPC admin call: its status code (key: "Bearer K" or NULL). */
static gt_rpc_code_t grpc_admin(const char *method, ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp_desc,
                                const char *key) {
  gt_rpc_md_t md[] = {{"authorization", key}};
  ProtobufCMessage *resp = NULL;
  gt_rpc_status_t s;
  gt_rpc_code_t code = gt_rpc_client_unary(g_rpc, method, req, resp_desc, 5000, md, key ? 1 : 0, &resp, &s);
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  return code;
}

#define ADMIN_METRIC(m, status) "gantry_router_requests_total{route=\"/gantry.v1.Admin/" m "\",status=\"" status "\"}"

/* gRPC admin calls are counted in gantry_router_requests_total with their outcome, as on the
 * HTTP front; before, every admin call was counted 200 on arrival, refused or not. */
static void test_grpc_admin_counted_by_outcome(void **st) {
  (void)st;
  Gantry__V1__GetLimitsRequest g = GANTRY__V1__GET_LIMITS_REQUEST__INIT;
  g.model = "tiny";
  assert_int_equal(grpc_admin("/gantry.v1.Admin/GetLimits", &g.base, &gantry__v1__limits__descriptor, NULL),
                   GT_RPC_PERMISSION_DENIED);
  assert_int_equal(grpc_admin("/gantry.v1.Admin/GetLimits", &g.base, &gantry__v1__limits__descriptor, "Bearer adm"),
                   GT_RPC_OK);
  Gantry__V1__SetLimitsRequest sl = GANTRY__V1__SET_LIMITS_REQUEST__INIT;
  sl.model = "nosuch";
  sl.max_inflight_opt_case = GANTRY__V1__SET_LIMITS_REQUEST__MAX_INFLIGHT_OPT_MAX_INFLIGHT;
  sl.max_inflight = 3;
  assert_int_equal(grpc_admin("/gantry.v1.Admin/SetLimits", &sl.base, &gantry__v1__limits__descriptor, "Bearer adm"),
                   GT_RPC_NOT_FOUND);
  const char *adm = "Authorization: Bearer adm";
  assert_int_equal(rp_metric(&g_k.rp, ADMIN_METRIC("GetLimits", "403"), adm), 1);
  assert_int_equal(rp_metric(&g_k.rp, ADMIN_METRIC("GetLimits", "200"), adm), 1);
  assert_int_equal(rp_metric(&g_k.rp, ADMIN_METRIC("SetLimits", "404"), adm), 1);
  assert_int_equal(rp_metric(&g_k.rp, ADMIN_METRIC("SetLimits", "200"), adm), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grpc_front_message_cap),
      cmocka_unit_test(test_grpc_front_same_limits),
      cmocka_unit_test(test_max_tokens_beyond_context),
      cmocka_unit_test(test_content_type_415),
      cmocka_unit_test(test_protect_info),
      cmocka_unit_test(test_grpc_embed_auth_and_limits),
      cmocka_unit_test(test_grpc_admin_counted_by_outcome),
      cmocka_unit_test(test_retry_after_from_admission_rate),
      cmocka_unit_test(test_listen_error_says_why),
      cmocka_unit_test(test_cli_table_on_terminal),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
