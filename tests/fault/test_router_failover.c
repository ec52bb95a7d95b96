/* tests/fault/test_router_failover.c — Redis Sentinel failover under load, real processes: a
 * redis master, a replica and 3 redis-sentinels (tests/common/redis_server.c: down-after 500
 * ms, failover-timeout 2000 ms), two gantry-routers started with --redis-sentinel, a fake
 * engine (real gRPC; it counts streams open at once, in all and per tenant). 2 x 60 requests of
 * 100 ms (SLOW, 5 tokens) go through both routers for tenants gold and free (pool cap 6, free
 * cap 2); once they flow the master is killed -9. Checks: the replica is promoted; the caps
 * are never exceeded (engine counters); every request ends 200 or a clear 503 (no hang, no
 * other status); both routers admit again after the promotion; no slot is left in use.
 * Prints the timeline (kill -> promotion -> first admission after it, ms) and what was lost. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
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

#include "common/clock.h"
#include "common/sha256.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

#define NREQ 60

typedef struct batch {
  int port, n, ok, unavailable, other;
  double last_ok_ms; /* when the last 200 came back */
  char errs[4][256]; /* first distinct non-200 bodies */
  int nerrs;
} batch_t;

typedef struct cl {
  char *out;
  size_t n;
} cl_t;

static size_t sink(char *d, size_t sz, size_t nm, void *u) {
  cl_t *c = u;
  size_t k = sz * nm;
  if (c->n < 4096) {
    char *p = realloc(c->out, c->n + k + 1);
    memcpy(p + c->n, d, k);
    c->out = p;
    c->n += k;
    p[c->n] = 0;
  }
  return k;
}

static void *run_batch(void *arg) {
  batch_t *b = arg;
  CURLM *m = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
  CURL **cs = calloc((size_t)b->n, sizeof *cs);
  cl_t *cl = calloc((size_t)b->n, sizeof *cl);
  struct curl_slist *hg = curl_slist_append(NULL, "Content-Type: application/json");
  hg = curl_slist_append(hg, "Authorization: Bearer key-gold");
  struct curl_slist *hf = curl_slist_append(NULL, "Content-Type: application/json");
  hf = curl_slist_append(hf, "Authorization: Bearer key-free");
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", b->port);
  const char *body = "{\"model\":\"tiny\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}";
  for (int i = 0; i < b->n; i++) {
    cs[i] = curl_easy_init();
    curl_easy_setopt(cs[i], CURLOPT_URL, url);
    curl_easy_setopt(cs[i], CURLOPT_HTTPHEADER, i % 2 ? hf : hg);
    curl_easy_setopt(cs[i], CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(cs[i], CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(cs[i], CURLOPT_WRITEDATA, &cl[i]);
    curl_easy_setopt(cs[i], CURLOPT_TIMEOUT, 100L);
    curl_easy_setopt(cs[i], CURLOPT_NOSIGNAL, 1L);
    curl_multi_add_handle(m, cs[i]);
  }
  int running = 1;
  while (running) {
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int q;
    while ((msg = curl_multi_info_read(m, &q)))
      if (msg->msg == CURLMSG_DONE) {
        long st = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &st);
        if (st == 200) b->last_ok_ms = gt_now_ms();
      }
    if (running) curl_multi_poll(m, NULL, 0, 50, NULL);
  }
  for (int i = 0; i < b->n; i++) {
    long st = 0;
    curl_easy_getinfo(cs[i], CURLINFO_RESPONSE_CODE, &st);
    if (st == 200) b->ok++;
    else {
      if (st == 503) b->unavailable++;
      else b->other++;
      char e[256];
      snprintf(e, sizeof e, "%ld %.200s", st, cl[i].out ? cl[i].out : "(no body)");
      bool seen = false;
      for (int k = 0; k < b->nerrs; k++) seen |= !strcmp(b->errs[k], e);
      if (!seen && b->nerrs < 4) snprintf(b->errs[b->nerrs++], sizeof b->errs[0], "%s", e);
    }
    free(cl[i].out);
    curl_multi_remove_handle(m, cs[i]);
    curl_easy_cleanup(cs[i]);
  }
  curl_slist_free_all(hg);
  curl_slist_free_all(hf);
  free(cs);
  free(cl);
  curl_multi_cleanup(m);
  return NULL;
}

static void put_limits(int port, const char *body) {
  const char *h[] = {"Content-Type: application/json", "Authorization: Bearer adm", NULL};
  char *b;
  long s = http_req(port, "PUT", "/admin/limits", h, body, strlen(body), &b, NULL);
  if (s != 200) fail_msg("PUT /admin/limits %s -> %ld %s", body, s, b);
  free(b);
}

static long pool_inflight(int port) {
  const char *h[] = {"Authorization: Bearer adm", NULL};
  char *b;
  long s = http_req(port, "GET", "/admin/queues?model=tiny", h, NULL, 0, &b, NULL);
  long v = -1;
  if (s == 200) {
    json_t *j = json_loads(b, 0, NULL);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(j, "queues"), i, r) /* the pool row (no tenant) */
      if (json_is_null(json_object_get(r, "tenant")) || !json_object_get(r, "tenant"))
        v = (long)json_integer_value(json_object_get(r, "inflight"));
    json_decref(j);
  }
  free(b);
  return v;
}

static void test_failover_under_load(void **st) {
  (void)st;
  gt_err_t err;
  rs_t *master = rs_start(&err);
  assert_non_null(master);
  rs_t *replica = rs_start_replica(master, &err);
  assert_non_null(replica);
  rs_t *sent[3];
  for (int i = 0; i < 3; i++)
    if (!(sent[i] = rs_start_sentinel(master, "gantry", &err)))
      fail_msg("redis-sentinel (scripts/deps.sh installs it): %s", err.msg);
  double t0 = gt_now_ms();
  assert_int_equal(rs_wait_failover_ready(sent, 3, replica, "gantry", 60000), GT_OK);
  printf("topology ready after %.0f ms\n", gt_now_ms() - t0);
  redisContext *rc = redisConnect("127.0.0.1", rs_port(master));
  assert_false(rc->err);
  const char *keys[][2] = {{"key-gold", "gold"}, {"key-free", "free"}};
  for (int i = 0; i < 2; i++) {
    char sha[65];
    gt_sha256_hex(keys[i][0], strlen(keys[i][0]), sha);
    freeReplyObject(redisCommand(rc, "HSET gantry:apikeys %s %s", sha, keys[i][1]));
  }
  freeReplyObject(redisCommand(rc, "WAIT 1 2000")); /* the keys are on the replica */
  redisFree(rc);

  fe_t *e = fe_start("E");
  char sl[128], eng[64];
  snprintf(sl, sizeof sl, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", rs_port(sent[0]), rs_port(sent[1]),
           rs_port(sent[2]));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", fe_port(e));
  const char *args[] = {"--redis-sentinel", sl, "--redis-master-name", "gantry", "--engine", eng, "--auth", "keys",
                        "--admin-key", "adm", "--health-ms", "100", "--lease-ttl-ms", "2000",
                        "--admission-hold-ms", "1", "--queue-timeout-ms", "60000", NULL};
  rp_t r[2];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(rp_start(&r[i], args), 0);
    assert_true(rp_wait_ready(&r[i], 20000));
  }
  put_limits(r[0].http_port, "{\"model\":\"tiny\",\"max_inflight\":6,\"max_queued\":1000}");
  put_limits(r[0].http_port, "{\"model\":\"tiny\",\"tenant\":\"gold\",\"max_inflight\":6}");
  put_limits(r[0].http_port, "{\"model\":\"tiny\",\"tenant\":\"free\",\"max_inflight\":2}");
  fe_reset_max(e);

  batch_t b[2] = {{.port = r[0].http_port, .n = NREQ}, {.port = r[1].http_port, .n = NREQ}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_batch, &b[i]);
  t0 = gt_now_ms();
  while (fe_generates(e) < 12) {
    assert_true(gt_now_ms() - t0 < 30000);
    usleep(5000);
  }
  int g_kill = fe_generates(e);
  double t_kill = gt_now_ms();
  assert_int_equal(rs_kill(master), GT_OK);
  double t_prom = 0, t_admit = 0;
  int g_prom = 0;
  while (gt_now_ms() - t_kill < 30000 && (!t_prom || !t_admit)) {
    if (!t_prom && rs_is_master(replica)) {
      t_prom = gt_now_ms();
      g_prom = fe_generates(e);
    }
    if (t_prom && !t_admit && fe_generates(e) > g_prom) t_admit = gt_now_ms();
    usleep(2000);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  int mx = fe_max_active(e), mg = fe_tenant_max_active(e, "gold"), mf = fe_tenant_max_active(e, "free");
  printf("failover timeline: kill -> promotion %.0f ms, promotion -> first admission %.0f ms "
         "(kill -> first admission %.0f ms); engine calls: %d before the kill, %d between kill and promotion\n",
         t_prom ? t_prom - t_kill : -1.0, t_admit && t_prom ? t_admit - t_prom : -1.0,
         t_admit ? t_admit - t_kill : -1.0, g_kill, g_prom - g_kill);
  printf("failover results: router A ok %d / 503 %d / other %d, router B ok %d / 503 %d / other %d; "
         "engine max in flight %d (cap 6), gold %d (cap 6), free %d (cap 2)\n",
         b[0].ok, b[0].unavailable, b[0].other, b[1].ok, b[1].unavailable, b[1].other, mx, mg, mf);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < b[i].nerrs; k++) printf("  router %c lost: %s\n", 'A' + i, b[i].errs[k]);
  assert_true(t_prom > 0);
  assert_true(t_admit > 0);
  assert_true(mx <= 6);
  assert_true(mg <= 6);
  assert_true(mf <= 2);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(b[i].ok + b[i].unavailable, NREQ);
    assert_int_equal(b[i].other, 0);
    assert_true(b[i].last_ok_ms > t_prom); /* this router admitted again after the promotion */
  }
  /* leases carry on: nothing stays in use once the load is over (reaped within the TTL) */
  t0 = gt_now_ms();
  long in = -1;
  while ((in = pool_inflight(r[0].http_port)) != 0 && gt_now_ms() - t0 < 10000) usleep(50000);
  printf("slots in use after the load: %ld (after %.0f ms)\n", in, gt_now_ms() - t0);
  assert_int_equal(in, 0);
  for (int i = 0; i < 2; i++) assert_int_equal(rp_stop(&r[i]), 0);
  fe_stop(e);
  for (int i = 0; i < 3; i++) rs_stop(sent[i]);
  rs_stop(replica);
  rs_stop(master);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_ALL);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_failover_under_load)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
