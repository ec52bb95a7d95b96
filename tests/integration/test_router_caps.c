/* tests/integration/test_router_caps.c — admission caps through the router: 200 concurrent
 * requests over two tenants (API keys in Redis) against a scripted engine. The engine observes
 * how many streams are open at once: never above the pool cap nor a tenant's cap; while both
 * tenants have a backlog, admissions follow their weights; a limit changed live applies to the
 * next admissions. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "common/clock.h"
#include "common/sha256.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static rs_t *g_rs;
static fe_t *g_e;
static rp_t g_rp;

static int setup(void **st) {
  (void)st;
  gt_err_t err;
  g_rs = rs_start(&err);
  if (!g_rs) fail_msg("redis: %s", err.msg);
  redisContext *rc = redisConnect("127.0.0.1", rs_port(g_rs));
  assert_false(rc->err);
  const char *keys[][2] = {{"key-gold", "gold"}, {"key-free", "free"}};
  for (int i = 0; i < 2; i++) {
    char sha[65];
    gt_sha256_hex(keys[i][0], strlen(keys[i][0]), sha);
    freeReplyObject(redisCommand(rc, "HSET gantry:apikeys %s %s", sha, keys[i][1]));
  }
  redisFree(rc);
  g_e = fe_start("E");
  assert_non_null(g_e);
  char redis[64], e[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(g_rs));
  snprintf(e, sizeof e, "tiny=127.0.0.1:%d", fe_port(g_e));
  const char *args[] = {"--redis", redis, "--engine", e, "--health-ms", "100", "--admission-hold-ms", "1",
                        "--queue-timeout-ms", "50000", "--admin-key", "adm", NULL};
  assert_int_equal(rp_start(&g_rp, args), 0);
  assert_true(rp_wait_ready(&g_rp, 20000));
  return 0;
}

static int teardown(void **st) {
  (void)st;
  int rc = rp_stop(&g_rp);
  fe_stop(g_e);
  rs_stop(g_rs);
  assert_int_equal(rc, 0);
  return 0;
}

static void put_limits(const char *body) {
  const char *h[] = {"Content-Type: application/json", "Authorization: Bearer adm", NULL};
  char *b;
  long s = http_req(g_rp.http_port, "PUT", "/admin/limits", h, body, strlen(body), &b, NULL);
  if (s != 200) fail_msg("PUT /admin/limits %s -> %ld %s", body, s, b);
  free(b);
}

typedef struct cl {
  CURL *c;
  struct curl_slist *h;
  char *out;
  size_t n;
} cl_t;

static size_t sink(char *d, size_t sz, size_t nm, void *u) {
  cl_t *c = u;
  size_t k = sz * nm;
  char *p = realloc(c->out, c->n + k + 1);
  memcpy(p + c->n, d, k);
  c->out = p;
  c->n += k;
  p[c->n] = '\0';
  return k;
}

/* Runs n requests at once (tenant of request i: gold if i % 2 == 0) and returns the number of
 * 200 answers. */
static int run_batch(int n, int tokens) {
  static const char *body_fmt = "{\"model\":\"tiny\",\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW %d\"}]}";
  CURLM *m = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
  cl_t *cls = calloc((size_t)n, sizeof *cls);
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", g_rp.http_port);
  char **bodies = calloc((size_t)n, sizeof *bodies);
  for (int i = 0; i < n; i++) {
    cl_t *c = &cls[i];
    c->c = curl_easy_init();
    c->h = curl_slist_append(NULL, "Content-Type: application/json");
    c->h = curl_slist_append(c->h, i % 2 == 0 ? "Authorization: Bearer key-gold" : "Authorization: Bearer key-free");
    if (asprintf(&bodies[i], body_fmt, tokens, i) < 0) fail();
    curl_easy_setopt(c->c, CURLOPT_URL, url);
    curl_easy_setopt(c->c, CURLOPT_HTTPHEADER, c->h);
    curl_easy_setopt(c->c, CURLOPT_POSTFIELDS, bodies[i]);
    curl_easy_setopt(c->c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c->c, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->c, CURLOPT_TIMEOUT, 55L);
    curl_easy_setopt(c->c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->c, CURLOPT_FORBID_REUSE, 1L);
    curl_multi_add_handle(m, c->c);
  }
  int running = 1;
  while (running) {
    curl_multi_perform(m, &running);
    if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
  }
  int ok = 0;
  for (int i = 0; i < n; i++) {
    long st = 0;
    curl_easy_getinfo(cls[i].c, CURLINFO_RESPONSE_CODE, &st);
    if (st == 200) ok++;
    else fprintf(stderr, "request %d: status %ld %s\n", i, st, cls[i].out ? cls[i].out : "");
    curl_multi_remove_handle(m, cls[i].c);
    curl_easy_cleanup(cls[i].c);
    curl_slist_free_all(cls[i].h);
    free(cls[i].out);
    free(bodies[i]);
  }
  free(bodies);
  free(cls);
  curl_multi_cleanup(m);
  return ok;
}

static void test_200_concurrent_caps_and_weights(void **st) {
  (void)st;
  put_limits("{\"model\":\"tiny\",\"max_inflight\":8,\"max_queued\":1000}");
  put_limits("{\"model\":\"tiny\",\"tenant\":\"gold\",\"weight\":3,\"max_inflight\":8}");
  put_limits("{\"model\":\"tiny\",\"tenant\":\"free\",\"weight\":1,\"max_inflight\":3}");
  fe_reset_max(g_e);
  double t0 = gt_now_ms();
  int ok = run_batch(200, 3);
  double ms = gt_now_ms() - t0;
  assert_int_equal(ok, 200);
  int mx = fe_max_active(g_e), mg = fe_tenant_max_active(g_e, "gold"), mf = fe_tenant_max_active(g_e, "free");
  printf("200 requests in %.0f ms; engine saw max in flight %d (pool cap 8), gold %d, free %d (cap 3)\n", ms, mx, mg, mf);
  assert_true(mx <= 8);
  assert_true(mx >= 6); /* the caps were used, not just respected */
  assert_true(mf <= 3);
  /* weights: among the first 60 admissions (both tenants backlogged), gold:free near 3:1 */
  char arr[200][32];
  int n = fe_arrivals(g_e, arr, 200);
  assert_int_equal(n, 200);
  int gold = 0, free_ = 0;
  for (int i = 0; i < 60; i++) {
    if (!strcmp(arr[i], "gold")) gold++;
    else if (!strcmp(arr[i], "free")) free_++;
  }
  printf("first 60 admissions: gold %d free %d (weights 3:1)\n", gold, free_);
  assert_int_equal(gold + free_, 60);
  assert_true(gold >= 2 * free_);
  assert_true(free_ >= 8);
}

static void test_live_limit_change(void **st) {
  (void)st;
  put_limits("{\"model\":\"tiny\",\"tenant\":\"free\",\"max_inflight\":8}");
  put_limits("{\"model\":\"tiny\",\"max_inflight\":2}");
  fe_reset_max(g_e);
  assert_int_equal(run_batch(30, 2), 30);
  printf("after max_inflight=2: engine saw max in flight %d\n", fe_max_active(g_e));
  assert_true(fe_max_active(g_e) <= 2);
  put_limits("{\"model\":\"tiny\",\"max_inflight\":12}");
  fe_reset_max(g_e);
  assert_int_equal(run_batch(40, 2), 40);
  printf("after max_inflight=12: engine saw max in flight %d\n", fe_max_active(g_e));
  assert_true(fe_max_active(g_e) <= 12);
  assert_true(fe_max_active(g_e) > 2);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_200_concurrent_caps_and_weights),
                                     cmocka_unit_test(test_live_limit_change)};
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  curl_global_cleanup();
  return rc;
}
