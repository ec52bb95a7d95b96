/* router/openai_embed.c: /v1/embeddings request parsing, base64 (little-endian float32, RFC 4648
 * padding) and the response body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "router/openai_embed.h"

static void test_b64(void **st) {
  (void)st;
  /* 1.0f = 00 00 80 3f (LE) -> "AACAPw=="; 1.0, -2.0 = 00 00 80 3f 00 00 00 c0 -> "AACAPwAAAMA=" */
  const float one[1] = {1.0f}, two[2] = {1.0f, -2.0f};
  char *a = oa_embed_b64(one, 1), *b = oa_embed_b64(two, 2), *z = oa_embed_b64(two, 0);
  assert_string_equal(a, "AACAPw==");
  assert_string_equal(b, "AACAPwAAAMA=");
  assert_string_equal(z, "");
  free(a), free(b), free(z);
  float three[3] = {0.5f, 3.25f, -7.0f}; /* 12 bytes: no padding */
  char *c = oa_embed_b64(three, 3);
  assert_int_equal(strlen(c), 16);
  assert_null(strchr(c, '='));
  free(c);
}

static oa_error_t parse_err(const char *body) {
  oa_embed_req_t r;
  oa_error_t e = {0};
  assert_int_equal(oa_embed_parse(body, strlen(body), &r, &e), -1);
  assert_null(r.req);
  return e;
}

static void test_parse(void **st) {
  (void)st;
  oa_embed_req_t r;
  oa_error_t e;
  const char *b1 = "{\"model\":\"m\",\"input\":[\"a\",\"bc\"],\"dimensions\":8,\"encoding_format\":\"base64\",\"user\":\"u\"}";
  assert_int_equal(oa_embed_parse(b1, strlen(b1), &r, &e), 0);
  assert_string_equal(r.model, "m");
  assert_true(r.base64);
  assert_int_equal(r.req->n_texts, 2);
  assert_string_equal(r.req->texts[1], "bc");
  assert_int_equal(r.req->dimensions, 8);
  oa_embed_req_free(&r);
  const char *b2 = "{\"model\":\"m\",\"input\":[[1,2,3],[4]],\"truncate_prompt_tokens\":2}";
  assert_int_equal(oa_embed_parse(b2, strlen(b2), &r, &e), 0);
  assert_int_equal(r.req->n_tokens, 2);
  assert_int_equal(r.req->tokens[0]->n_ids, 3);
  assert_int_equal(r.req->tokens[1]->ids[0], 4);
  assert_int_equal(r.req->truncate_prompt_tokens, 2);
  assert_false(r.base64);
  oa_embed_req_free(&r);
  const char *b3 = "{\"model\":\"m\",\"input\":[7,8]}";
  assert_int_equal(oa_embed_parse(b3, strlen(b3), &r, &e), 0);
  assert_int_equal(r.req->n_tokens, 1);
  assert_int_equal(r.req->tokens[0]->n_ids, 2);
  oa_embed_req_free(&r);
  const struct { const char *body, *param; } bad[] = {
      {"{\"input\":\"x\"}", "model"},
      {"{\"model\":\"m\"}", "input"},
      {"{\"model\":\"m\",\"input\":\"\"}", "input"},
      {"{\"model\":\"m\",\"input\":[]}", "input"},
      {"{\"model\":\"m\",\"input\":[\"a\",1]}", "input"},
      {"{\"model\":\"m\",\"input\":[[1],[]]}", "input"},
      {"{\"model\":\"m\",\"input\":[-1]}", "input"},
      {"{\"model\":\"m\",\"input\":{}}", "input"},
      {"{\"model\":\"m\",\"input\":\"x\",\"dimensions\":0}", "dimensions"},
      {"{\"model\":\"m\",\"input\":\"x\",\"dimensions\":1.5}", "dimensions"},
      {"{\"model\":\"m\",\"input\":\"x\",\"encoding_format\":\"int8\"}", "encoding_format"},
      {"{\"model\":\"m\",\"input\":\"x\",\"truncate_prompt_tokens\":0}", "truncate_prompt_tokens"},
      {"{\"model\":\"m\",\"input\":\"x\",\"user\":3}", "user"},
      {"{\"model\":\"m\",\"input\":\"x\",\"temperature\":1}", "temperature"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    oa_error_t be = parse_err(bad[i].body);
    assert_int_equal(be.status, 400);
    assert_string_equal(be.param, bad[i].param);
  }
  assert_int_equal(parse_err("not json").status, 400);
}

static void test_body(void **st) {
  (void)st;
  float v0[2] = {0.6f, 0.8f}, v1[2] = {1.0f, 0.0f};
  Gantry__V1__Embedding e0 = GANTRY__V1__EMBEDDING__INIT, e1 = GANTRY__V1__EMBEDDING__INIT;
  e0.values = v0, e0.n_values = 2, e1.values = v1, e1.n_values = 2;
  Gantry__V1__Embedding *es[2] = {&e0, &e1};
  Gantry__V1__EmbedResponse r = GANTRY__V1__EMBED_RESPONSE__INIT;
  r.data = es, r.n_data = 2, r.prompt_tokens = 7;
  char *s = oa_embed_body(&r, "m", false);
  json_error_t je;
  json_t *o = json_loads(s, 0, &je);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "object")), "list");
  assert_string_equal(json_string_value(json_object_get(o, "model")), "m");
  json_t *d = json_object_get(o, "data");
  assert_int_equal(json_array_size(d), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(d, 1), "index")), 1);
  assert_float_equal(json_real_value(json_array_get(json_object_get(json_array_get(d, 0), "embedding"), 1)), 0.8, 1e-7);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")), 7);
  json_decref(o);
  free(s);
  s = oa_embed_body(&r, "m", true);
  o = json_loads(s, 0, &je);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 1), "embedding")),
                      "AACAPwAAAAA=");
  json_decref(o);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_b64), cmocka_unit_test(test_parse), cmocka_unit_test(test_body)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
