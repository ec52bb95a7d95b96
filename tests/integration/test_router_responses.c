/* tests/integration/test_router_responses.c — stored responses and tenants, with a real
 * redis-server, the real router binary (--auth keys, two tenants) and the scripted fake engine:
 *   - a stored response lives in Redis under --responses-ttl-s; its owner reads it back (GET),
 *     chains on it (previous_response_id: the engine gets the earlier turns) and deletes it;
 *   - another tenant gets 404 for GET, DELETE and previous_response_id (and deletes nothing);
 *   - prefix caches are salted per tenant: the engine's cache_salt differs between tenants and,
 *     within one, with the request's cache_salt;
 *   - the body's request_id names the request (X-Request-Id, the completion id);
 *   - CORS: a preflight from an allowed origin gets 204 with the allowed methods and headers,
 *     answers carry Access-Control-Allow-Origin for it and not for another origin. */
#define _GNU_SOURCE
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

#include "common/sha256.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static rstack_t g_k;

static long call(const char *key, const char *method, const char *path, const char *body, char **out, char **hdr) {
  char auth[128];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
  const char *h[] = {"Content-Type: application/json", auth, NULL};
  return http_req(g_k.rp.http_port, method, path, h, body, body ? strlen(body) : 0, out, hdr);
}

static char *field(const char *body, const char *k) {
  json_t *j = json_loads(body, 0, NULL);
  assert_non_null(j);
  char *s = strdup(json_string_value(json_object_get(j, k)));
  json_decref(j);
  return s;
}

static void test_tenants_and_store(void **st) {
  (void)st;
  rstack_start(&g_k, "A", (const char *[]){"--auth", "keys", "--health-ms", "100", "--responses-ttl-s", "120",
                                            "--cors-origins", "https://a.example, https://app.example", NULL});
  assert_true(rp_wait_ready(&g_k.rp, 20000));
  redisContext *rc = redisConnect("127.0.0.1", rs_port(g_k.rs));
  assert_false(rc->err);
  char sha[65];
  gt_sha256_hex("key-a", 5, sha);
  freeReplyObject(redisCommand(rc, "HSET gantry:apikeys %s acme", sha));
  gt_sha256_hex("key-b", 5, sha);
  freeReplyObject(redisCommand(rc, "HSET gantry:apikeys %s bravo", sha));

  char *b = NULL, path[128], body[512];
  Gantry__V1__GenerateRequest *g = NULL;
  assert_int_equal(call("key-a", "POST", "/v1/responses", "{\"model\":\"tiny\",\"input\":\"first turn\"}", &b, NULL), 200);
  char *id = field(b, "id");
  free(b);
  redisReply *r = redisCommand(rc, "TTL gantry:resp:%s", id);
  assert_int_equal(r->type, REDIS_REPLY_INTEGER);
  assert_true(r->integer > 0 && r->integer <= 120);
  freeReplyObject(r);

  /* the other tenant sees nothing */
  snprintf(path, sizeof path, "/v1/responses/%s", id);
  assert_int_equal(call("key-b", "GET", path, NULL, &b, NULL), 404);
  assert_non_null(strstr(b, "\"not_found\""));
  free(b);
  assert_int_equal(call("key-b", "DELETE", path, NULL, &b, NULL), 404);
  free(b);
  snprintf(body, sizeof body, "{\"model\":\"tiny\",\"input\":\"again\",\"previous_response_id\":\"%s\"}", id);
  assert_int_equal(call("key-b", "POST", "/v1/responses", body, &b, NULL), 404);
  assert_non_null(strstr(b, "\"previous_response_id\""));
  free(b);

  /* an item_reference to the response's message: its owner only */
  json_t *rj = NULL;
  assert_int_equal(call("key-a", "GET", path, NULL, &b, NULL), 200);
  rj = json_loads(b, 0, NULL);
  free(b);
  const char *msg_id = json_string_value(json_object_get(json_array_get(json_object_get(rj, "output"), 0), "id"));
  assert_non_null(msg_id);
  snprintf(body, sizeof body, "{\"model\":\"tiny\",\"input\":[{\"type\":\"item_reference\",\"id\":\"%s\"},"
                              "{\"role\":\"user\",\"content\":\"and?\"}]}", msg_id);
  json_decref(rj);
  assert_int_equal(call("key-b", "POST", "/v1/responses", body, &b, NULL), 404);
  free(b);
  assert_int_equal(call("key-a", "POST", "/v1/responses", body, &b, NULL), 200);
  free(b);
  g = fe_last_request(g_k.fe);
  assert_int_equal(g->chat->n_messages, 2);
  assert_string_equal(g->chat->messages[0]->content, "Hello world");
  protobuf_c_message_free_unpacked(&g->base, NULL);
  snprintf(body, sizeof body, "{\"model\":\"tiny\",\"input\":\"again\",\"previous_response_id\":\"%s\"}", id);

  /* the owner reads it, chains on it (the engine gets both turns), deletes it */
  assert_int_equal(call("key-a", "GET", path, NULL, &b, NULL), 200);
  assert_non_null(strstr(b, "Hello world"));
  free(b);
  assert_int_equal(call("key-a", "POST", "/v1/responses", body, &b, NULL), 200);
  free(b);
  g = fe_last_request(g_k.fe);
  assert_int_equal(g->chat->n_messages, 3);
  assert_string_equal(g->chat->messages[0]->content, "first turn");
  assert_string_equal(g->chat->messages[1]->role, "assistant");
  assert_string_equal(g->chat->messages[1]->content, "Hello world");
  assert_string_equal(g->chat->messages[2]->content, "again");
  protobuf_c_message_free_unpacked(&g->base, NULL);
  assert_int_equal(call("key-a", "DELETE", path, NULL, &b, NULL), 200);
  assert_non_null(strstr(b, "\"deleted\":true"));
  free(b);
  assert_int_equal(call("key-a", "GET", path, NULL, &b, NULL), 404);
  free(b);
  free(id);

  /* prefix caches: salted per tenant, and per cache_salt within a tenant */
  const char *chat = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  const char *salted = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"cache_salt\":\"s1\"}";
  char salts[3][128];
  const char *const keys[3] = {"key-a", "key-b", "key-a"};
  const char *const bodies[3] = {chat, chat, salted};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(call(keys[i], "POST", "/v1/chat/completions", bodies[i], &b, NULL), 200);
    free(b);
    g = fe_last_request(g_k.fe);
    snprintf(salts[i], sizeof salts[i], "%s", g->cache_salt);
    protobuf_c_message_free_unpacked(&g->base, NULL);
  }
  assert_non_null(strstr(salts[0], "acme"));
  assert_non_null(strstr(salts[1], "bravo"));
  assert_string_not_equal(salts[0], salts[1]);
  assert_string_not_equal(salts[0], salts[2]);
  assert_non_null(strstr(salts[2], "s1"));

  /* the body's request_id names the request */
  const char *rid = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"request_id\":\"my-req-7\"}";
  char *hdr = NULL;
  assert_int_equal(call("key-a", "POST", "/v1/chat/completions", rid, &b, &hdr), 200);
  assert_non_null(strstr(b, "\"chatcmpl-my-req-7\""));
  assert_non_null(strcasestr(hdr, "X-Request-Id: my-req-7"));
  free(hdr);
  free(b);
  g = fe_last_request(g_k.fe);
  assert_string_equal(g->request_id, "my-req-7");
  protobuf_c_message_free_unpacked(&g->base, NULL);

  /* CORS */
  const char *pre[] = {"Origin: https://app.example", "Access-Control-Request-Method: POST",
                       "Access-Control-Request-Headers: authorization, content-type", NULL};
  assert_int_equal(http_req(g_k.rp.http_port, "OPTIONS", "/v1/responses", pre, NULL, 0, &b, &hdr), 204);
  assert_non_null(strcasestr(hdr, "Access-Control-Allow-Origin: https://app.example"));
  assert_non_null(strcasestr(hdr, "Access-Control-Allow-Methods: GET, POST, PUT, DELETE, OPTIONS"));
  assert_non_null(strcasestr(hdr, "Access-Control-Allow-Headers: authorization, content-type"));
  free(b);
  free(hdr);
  const char *other[] = {"Origin: https://evil.example", NULL};
  assert_int_equal(http_req(g_k.rp.http_port, "OPTIONS", "/v1/responses", other, NULL, 0, &b, &hdr), 204);
  assert_null(strcasestr(hdr, "Access-Control-Allow-Origin"));
  free(b);
  free(hdr);
  char auth[64];
  snprintf(auth, sizeof auth, "Authorization: Bearer key-a");
  const char *post[] = {"Content-Type: application/json", auth, "Origin: https://a.example", NULL};
  assert_int_equal(http_req(g_k.rp.http_port, "POST", "/v1/chat/completions", post, chat, strlen(chat), &b, &hdr), 200);
  assert_non_null(strcasestr(hdr, "Access-Control-Allow-Origin: https://a.example"));
  free(b);
  free(hdr);
  redisFree(rc);
  assert_int_equal(rstack_stop(&g_k), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_tenants_and_store)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
