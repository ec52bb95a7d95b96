/* tests/unit/test_router_responses.c — /v1/responses without a network: request items -> the
 * chat request the engine gets (messages, tool calls and results, reasoning, instructions,
 * tools, tool_choice, text.format, max_output_tokens, reasoning.effort, previous items), refused
 * fields, the response object and the streamed event sequence, the stored record. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/grpc_delta.h"
#include "router/openai.h"

static int parse(const char *body, const char *history, oa_req_t *r, oa_error_t *e) {
  return oa_parse_responses(body, strlen(body), history, NULL, r, e);
}

static void expect_err(const char *body, const char *code, const char *param) {
  oa_req_t r;
  oa_error_t e;
  if (parse(body, NULL, &r, &e) == 0) fail_msg("accepted: %s", body);
  assert_int_equal(e.status, 400);
  if (strcmp(e.code, code)) fail_msg("code %s want %s (%s) for %s", e.code, code, e.message, body);
  if (strcmp(e.param, param)) fail_msg("param %s want %s (%s) for %s", e.param, param, e.message, body);
}

static void test_items_to_chat(void **st) {
  (void)st;
  oa_req_t r;
  oa_error_t e;
  const char *b =
      "{\"model\":\"m\",\"instructions\":\"be brief\",\"max_output_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,"
      "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]},"
      "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"hmm\"}]},"
      "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"calling\"}]},"
      "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"},"
      "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"g\",\"arguments\":\"{}\"},"
      "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"one\"},"
      "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_text\",\"text\":\"two\"}]}],"
      "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"function\",\"name\":\"g\"}],"
      "\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"},\"reasoning\":{\"effort\":\"none\"},\"store\":false}";
  assert_int_equal(parse(b, NULL, &r, &e), 0);
  assert_int_equal(r.kind, OA_RESPONSES);
  assert_false(r.rs_store);
  Gantry__V1__GenerateRequest *g = r.gen;
  assert_int_equal(g->max_tokens, 9);
  assert_true(g->sampling->temperature == 0.5f);
  Gantry__V1__ChatInput *c = g->chat;
  assert_int_equal(c->n_messages, 5);
  assert_string_equal(c->messages[0]->role, "system");
  assert_string_equal(c->messages[0]->content, "be brief");
  assert_string_equal(c->messages[1]->content, "a\nb");
  /* the reasoning item, the text and both calls are one assistant turn */
  assert_string_equal(c->messages[2]->role, "assistant");
  assert_string_equal(c->messages[2]->reasoning_content, "hmm");
  assert_string_equal(c->messages[2]->content, "calling");
  assert_int_equal(c->messages[2]->n_tool_calls, 2);
  assert_string_equal(c->messages[2]->tool_calls[0]->id, "c1");
  assert_string_equal(c->messages[2]->tool_calls[0]->arguments, "{\"x\":1}");
  assert_string_equal(c->messages[2]->tool_calls[1]->name, "g");
  assert_string_equal(c->messages[3]->role, "tool");
  assert_string_equal(c->messages[3]->tool_call_id, "c1");
  assert_string_equal(c->messages[4]->content, "two");
  /* tool_choice names g: only g is offered, and its call is forced */
  assert_non_null(strstr(c->tools_json, "\"g\""));
  assert_null(strstr(c->tools_json, "\"f\""));
  assert_non_null(g->constraint);
  assert_string_equal(g->constraint->param, "tool_choice");
  assert_int_equal(c->enable_thinking_opt_case, GANTRY__V1__CHAT_INPUT__ENABLE_THINKING_OPT_ENABLE_THINKING);
  assert_false(c->enable_thinking);
  /* the conversation kept for storage: the input items as given */
  assert_int_equal(json_array_size(r.rs_items), 7);
  assert_string_equal(json_string_value(json_object_get(r.rs_echo, "instructions")), "be brief");
  oa_req_free(&r);

  /* a string input with history: the previous items come first, instructions are not carried */
  const char *hist = "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"q1\"}]},"
                     "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"a1\"}]}]";
  assert_int_equal(parse("{\"model\":\"m\",\"input\":\"q2\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\","
                         "\"schema\":{\"type\":\"object\"},\"strict\":true}}}", hist, &r, &e), 0);
  c = r.gen->chat;
  assert_int_equal(c->n_messages, 3);
  assert_string_equal(c->messages[1]->content, "a1");
  assert_string_equal(c->messages[2]->content, "q2");
  assert_true(r.rs_store); /* the default */
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA);
  assert_string_equal(r.gen->constraint->param, "text.format");
  assert_int_equal(json_array_size(r.rs_items), 3);
  oa_req_free(&r);
}

static void test_refused(void **st) {
  (void)st;
  expect_err("{\"model\":\"m\"}", "missing_required_parameter", "input");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "unsupported_value", "tools");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"background\":true}", "unsupported_value", "background");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"truncation\":\"auto\"}", "unsupported_value", "truncation");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}", "unsupported_value", "include");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"top_logprobs\":2}", "unsupported_value", "top_logprobs");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}", "invalid_value", "max_output_tokens");
  expect_err("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
             "unsupported_content", "input[0].content");
  expect_err("{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "invalid_value", "input[0]");
  expect_err("{\"model\":\"m\",\"input\":[{\"type\":\"web_search_call\",\"id\":\"x\"}]}", "unsupported_value", "input[0]");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"grammar\"}}}", "invalid_value", "text.format");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"effort\":\"max\"}}", "invalid_value", "reasoning.effort");
  expect_err("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":{\"type\":\"file_search\"},\"tools\":[]}", "unsupported_value",
             "tool_choice");
  char id[OA_RESP_ID_MAX + 1];
  oa_error_t e;
  const char *bad = "{\"previous_response_id\":\"resp_../x\"}";
  assert_int_equal(oa_responses_prev_id(bad, strlen(bad), id, sizeof id, &e), -1);
  assert_string_equal(e.param, "previous_response_id");
  const char *ok = "{\"previous_response_id\":\"resp_0a1b\"}";
  assert_int_equal(oa_responses_prev_id(ok, strlen(ok), id, sizeof id, &e), 1);
  assert_string_equal(id, "resp_0a1b");
  assert_int_equal(oa_responses_prev_id("{}", 2, id, sizeof id, &e), 0);
  /* an item_reference names its response (the AI SDK sends them for stored items) */
  const char *ref = "{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_0123456789abcdef0123456789abcdef_1\"}]}";
  assert_int_equal(oa_responses_prev_id(ref, strlen(ref), id, sizeof id, &e), 2);
  assert_string_equal(id, "resp_0123456789abcdef0123456789abcdef");
  /* ... and is resolved in the stored items (refs), as if its item were sent again */
  const char *refs = "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"q\"}]},"
                     "{\"type\":\"message\",\"id\":\"msg_0123456789abcdef0123456789abcdef_1\",\"role\":\"assistant\","
                     "\"content\":[{\"type\":\"output_text\",\"text\":\"earlier\"}]}]";
  const char *body = "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
                     "{\"type\":\"item_reference\",\"id\":\"msg_0123456789abcdef0123456789abcdef_1\"},"
                     "{\"role\":\"user\",\"content\":\"more\"}]}";
  oa_req_t r;
  assert_int_equal(oa_parse_responses(body, strlen(body), NULL, refs, &r, &e), 0);
  assert_int_equal(r.gen->chat->n_messages, 3);
  assert_string_equal(r.gen->chat->messages[1]->role, "assistant");
  assert_string_equal(r.gen->chat->messages[1]->content, "earlier");
  oa_req_free(&r);
  assert_int_equal(oa_parse_responses(body, strlen(body), NULL, NULL, &r, &e), -1);
  assert_string_equal(e.param, "input[1]");
}

/* The events of one message, in order: their types joined with ",". */
static void types_of(const char *sse, char *out, size_t n) {
  out[0] = '\0';
  for (const char *p = strstr(sse, "event: "); p; p = strstr(p + 1, "\nevent: ")) {
    const char *t = p[0] == '\n' ? p + 8 : p + 7;
    size_t l = strcspn(t, "\n");
    snprintf(out + strlen(out), n - strlen(out), "%s%.*s", out[0] ? "," : "", (int)l, t);
  }
}

static void test_stream_events(void **st) {
  (void)st;
  oa_req_t q;
  oa_error_t e;
  assert_int_equal(parse("{\"model\":\"m\",\"input\":\"x\",\"stream\":true}", NULL, &q, &e), 0);
  oa_resp_t *r = oa_resp_new(&q, "ignored", 7, OA_REASONING_BOTH);
  assert_non_null(r);
  assert_int_equal(strncmp(oa_resp_id(r), "resp_", 5), 0);
  assert_int_equal(strlen(oa_resp_id(r)), 37);
  oa_sb_t sb = {0};
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_token(m, 1, NULL, "think");
  assert_int_equal(oa_resp_delta(r, m->delta, &sb), 0);
  gt_genresp_free(m);
  m = gt_delta_new();
  gt_delta_add_token(m, 2, "Hi", NULL);
  assert_int_equal(oa_resp_delta(r, m->delta, &sb), 0);
  gt_genresp_free(m);
  m = gt_delta_new();
  gt_delta_add_tool_call(m, 0, "call_9", "f", "{\"a\":");
  assert_int_equal(oa_resp_delta(r, m->delta, &sb), 0);
  gt_genresp_free(m);
  m = gt_delta_new();
  gt_delta_add_tool_call(m, 0, NULL, NULL, "1}");
  assert_int_equal(oa_resp_delta(r, m->delta, &sb), 0);
  gt_genresp_free(m);
  gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS, NULL);
  f->final->usage->prompt_tokens = 5;
  f->final->usage->completion_tokens = 4;
  f->final->usage->reasoning_tokens = 1;
  assert_int_equal(oa_resp_final_sse(r, f->final, &sb), 0);
  char types[2048];
  types_of(sb.p, types, sizeof types);
  assert_string_equal(types,
                      "response.created,response.in_progress,"
                      "response.output_item.added,response.content_part.added,response.reasoning_text.delta,"
                      "response.reasoning_text.done,response.content_part.done,response.output_item.done,"
                      "response.output_item.added,response.content_part.added,response.output_text.delta,"
                      "response.output_text.done,response.content_part.done,response.output_item.done,"
                      "response.output_item.added,response.function_call_arguments.delta,"
                      "response.function_call_arguments.delta,response.function_call_arguments.done,"
                      "response.output_item.done,response.completed");
  /* the items' whole text in their .done events (written in place of placeholders) */
  assert_null(strstr(sb.p, "\\u0001"));
  static const char *const dones[][3] = {{"response.reasoning_text.done", "text", "think"},
                                         {"response.output_text.done", "text", "Hi"},
                                         {"response.function_call_arguments.done", "arguments", "{\"a\":1}"}};
  for (int k = 0; k < 3; k++) {
    char pat[96];
    snprintf(pat, sizeof pat, "event: %s\ndata: ", dones[k][0]);
    const char *at = strstr(sb.p, pat);
    assert_non_null(at);
    json_t *d = json_loads(at + strlen(pat), JSON_DISABLE_EOF_CHECK, NULL);
    assert_string_equal(json_string_value(json_object_get(d, dones[k][1])), dones[k][2]);
    json_decref(d);
  }
  /* sequence numbers count from 0; the completed response has the items and the usage */
  const char *last = strstr(sb.p, "event: response.completed\ndata: ") + strlen("event: response.completed\ndata: ");
  json_t *done = json_loads(last, JSON_DISABLE_EOF_CHECK, NULL);
  assert_int_equal(json_integer_value(json_object_get(done, "sequence_number")), 19);
  json_t *resp = json_object_get(done, "response");
  assert_string_equal(json_string_value(json_object_get(resp, "status")), "completed");
  json_t *out = json_object_get(resp, "output");
  assert_int_equal(json_array_size(out), 3);
  json_t *call = json_array_get(out, 2);
  assert_string_equal(json_string_value(json_object_get(call, "call_id")), "call_9");
  assert_string_equal(json_string_value(json_object_get(call, "arguments")), "{\"a\":1}");
  json_t *u = json_object_get(resp, "usage");
  assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 5);
  assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 9);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens")), 1);
  json_decref(done);
  /* the record: tenant, the response, the input items then the output items */
  char *rec = oa_resp_record(r, "acme");
  const char *tenant = NULL;
  json_t *o = oa_record_parse(rec, strlen(rec), &tenant);
  assert_non_null(o);
  assert_string_equal(tenant, "acme");
  assert_int_equal(json_array_size(json_object_get(o, "items")), 4);
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(o, "items"), 3), "arguments")),
                      "{\"a\":1}");
  assert_null(strstr(rec, "\\u0001"));
  json_decref(o);
  free(rec);
  gt_genresp_free(f);
  oa_sb_free(&sb);
  oa_resp_free(r);
  oa_req_free(&q);
}

static void test_body_incomplete_and_failed(void **st) {
  (void)st;
  oa_req_t q;
  oa_error_t e;
  assert_int_equal(parse("{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":2,\"metadata\":{\"k\":\"v\"}}", NULL, &q, &e), 0);
  oa_resp_t *r = oa_resp_new(&q, "", 7, OA_REASONING_BOTH);
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_token(m, 2, "Hi", NULL);
  assert_int_equal(oa_resp_delta(r, m->delta, NULL), 0);
  gt_genresp_free(m);
  gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH, NULL);
  char *body = oa_resp_body(r, f->final);
  json_t *j = json_loads(body, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(j, "object")), "response");
  assert_string_equal(json_string_value(json_object_get(j, "status")), "incomplete");
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "incomplete_details"), "reason")), "max_output_tokens");
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "metadata"), "k")), "v");
  assert_int_equal(json_integer_value(json_object_get(j, "max_output_tokens")), 2);
  json_t *msg = json_array_get(json_object_get(j, "output"), 0);
  assert_string_equal(json_string_value(json_object_get(msg, "status")), "incomplete");
  assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text")), "Hi");
  json_decref(j);
  free(body);
  gt_genresp_free(f);
  oa_resp_free(r);
  /* a failed one is not stored */
  r = oa_resp_new(&q, "", 7, OA_REASONING_BOTH);
  f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR, "boom");
  body = oa_resp_body(r, f->final);
  assert_non_null(strstr(body, "\"status\":\"failed\""));
  assert_non_null(strstr(body, "boom"));
  assert_string_equal(oa_resp_error(r), "boom");
  assert_null(oa_resp_record(r, "t"));
  free(body);
  gt_genresp_free(f);
  oa_resp_free(r);
  oa_req_free(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_items_to_chat),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_stream_events),
      cmocka_unit_test(test_body_incomplete_and_failed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
