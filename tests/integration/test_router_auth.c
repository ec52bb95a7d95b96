/* tests/integration/test_router_auth.c — API keys fail closed (issue 15 item 1), with a real
 * redis-server, the real router binary (--auth keys) and a scripted fake engine:
 *   - keys required and none in Redis: 503 auth_no_keys, never 200 as an open tenant;
 *   - a known key runs as its tenant, no key / a wrong key get 401;
 *   - Redis restarts empty (data loss): the router logs it, counts it in /metrics and puts back
 *     the API keys and tenant limits it last saw, so the key works again and the limit holds;
 *     no request runs without a key meanwhile. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "common/clock.h"
#include "common/sha256.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static const char *REQ = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"auth test\"}]}";

static long chat(const rp_t *rp, const char *key, char **body) {
  char auth[128];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", key ? key : "");
  const char *h[] = {"Content-Type: application/json", key ? auth : NULL, NULL};
  return http_req(rp->http_port, "POST", "/v1/chat/completions", h, REQ, strlen(REQ), body, NULL);
}

static void test_keys_fail_closed(void **st) {
  (void)st;
  gt_err_t err;
  rstack_t k;
  rstack_start(&k, "A", (const char *[]){"--auth", "keys", "--admin-key", "adm", "--health-ms", "100",
                                          "--admission-hold-ms", "300", "--lease-ttl-ms", "900", NULL});
  rp_t rp = k.rp;
  fe_t *fe = k.fe;
  rs_t *rs = k.rs;
  assert_true(rp_wait_ready(&rp, 20000));

  /* no keys in Redis: closed with a clear error, with or without a key */
  char *b = NULL;
  assert_int_equal(chat(&rp, NULL, &b), 503);
  assert_non_null(strstr(b, "\"auth_no_keys\""));
  free(b);
  assert_int_equal(chat(&rp, "anything", &b), 503);
  free(b);
  assert_int_equal(fe_generates(fe), 0);

  redisContext *rc = redisConnect("127.0.0.1", rs_port(rs));
  assert_false(rc->err);
  char sha[65];
  gt_sha256_hex("key-of-acme", 11, sha);
  freeReplyObject(redisCommand(rc, "HSET gantry:apikeys %s acme", sha));
  assert_int_equal(chat(&rp, NULL, &b), 401);
  assert_non_null(strstr(b, "\"invalid_api_key\""));
  free(b);
  assert_int_equal(chat(&rp, "nope", &b), 401);
  free(b);
  assert_int_equal(chat(&rp, "key-of-acme", &b), 200);
  free(b);
  Gantry__V1__GenerateRequest *g = fe_last_request(fe);
  assert_string_equal(g->tenant, "acme");
  protobuf_c_message_free_unpacked(&g->base, NULL);
  /* admin routes need the admin key */
  const char *lim = "{\"model\":\"tiny\",\"tenant\":\"acme\",\"max_inflight\":3}";
  const char *anon[] = {"Content-Type: application/json", NULL};
  assert_int_equal(http_req(rp.http_port, "PUT", "/admin/limits", anon, lim, strlen(lim), &b, NULL), 401);
  free(b);
  const char *adm[] = {"Content-Type: application/json", "Authorization: Bearer adm", NULL};
  assert_int_equal(http_req(rp.http_port, "PUT", "/admin/limits", adm, lim, strlen(lim), &b, NULL), 200);
  free(b);

  /* the router's snapshot holds the key and the limit: 1 key + pools member + tenants member
   * + max_inflight (it polls once a second) */
  double end = gt_now_ms() + 10000;
  while (rp_metric(&rp, "gantry_router_redis_snapshot_entries", NULL) < 4 && gt_now_ms() < end) usleep(50000);
  assert_true(rp_metric(&rp, "gantry_router_redis_snapshot_entries", NULL) >= 4);
  assert_int_equal(rp_metric(&rp, "gantry_router_redis_data_loss_total", NULL), 0);

  /* Redis loses everything */
  redisFree(rc);
  assert_int_equal(rs_kill(rs), GT_OK);
  assert_int_equal(rs_restart(rs, &err), GT_OK);
  rc = redisConnect("127.0.0.1", rs_port(rs));
  assert_false(rc->err);
  /* never open: without a key the answer is 401 or 503 all along */
  int ok = 0;
  end = gt_now_ms() + 15000;
  while (gt_now_ms() < end && !ok) {
    long s = chat(&rp, NULL, &b);
    free(b);
    if (s == 200) fail_msg("a request without a key ran after the data loss");
    s = chat(&rp, "key-of-acme", &b);
    free(b);
    ok = s == 200;
    if (!ok) usleep(100000);
  }
  assert_true(ok);
  assert_int_equal(rp_metric(&rp, "gantry_router_redis_data_loss_total", NULL), 1);
  redisReply *r = redisCommand(rc, "HGET gantry:apikeys %s", sha);
  assert_int_equal(r->type, REDIS_REPLY_STRING);
  assert_string_equal(r->str, "acme");
  freeReplyObject(r);
  r = redisCommand(rc, "HGET gantry:adm:lim:tiny:acme max_inflight");
  assert_int_equal(r->type, REDIS_REPLY_STRING);
  assert_string_equal(r->str, "3");
  freeReplyObject(r);
  assert_int_equal(chat(&rp, "wrong", &b), 401);
  free(b);

  /* an operator deleting every key (no data loss) closes the router again: 503, not open */
  freeReplyObject(redisCommand(rc, "DEL gantry:apikeys"));
  assert_int_equal(chat(&rp, "key-of-acme", &b), 503);
  free(b);
  assert_int_equal(chat(&rp, NULL, &b), 503);
  free(b);
  redisFree(rc);
  assert_int_equal(rstack_stop(&k), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_keys_fail_closed)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
