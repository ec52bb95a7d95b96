/* tests/unit/test_router_openai.c — router/openai: request parsing and validation, response and
 * SSE mapping, without a network. */
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

static int parse(oa_kind_t k, const char *body, oa_req_t *r, oa_error_t *e) {
  return oa_parse_request(k, body, strlen(body), r, e);
}

static void expect_err(oa_kind_t k, const char *body, int status, const char *code, const char *param) {
  oa_req_t r;
  oa_error_t e;
  if (parse(k, body, &r, &e) == 0) fail_msg("accepted: %s", body);
  assert_int_equal(e.status, status);
  if (strcmp(e.code, code)) fail_msg("code %s want %s (%s) for %s", e.code, code, e.message, body);
  if (param) assert_string_equal(e.param, param);
  char *j = oa_error_json(&e);
  json_t *o = json_loads(j, 0, NULL);
  assert_non_null(json_object_get(json_object_get(o, "error"), "message"));
  json_decref(o);
  free(j);
}

static void test_chat_full_mapping(void **st) {
  (void)st;
  oa_req_t r;
  oa_error_t e;
  const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],"
                  "\"max_completion_tokens\":7,\"max_tokens\":99,\"temperature\":0,\"top_p\":0.9,\"top_k\":20,\"min_p\":0.05,"
                  "\"repetition_penalty\":1.1,\"seed\":5,\"stop\":[\"x\",\"\",\"y\"],\"min_tokens\":2,\"ignore_eos\":true,"
                  "\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                  "\"chat_template_kwargs\":{\"enable_thinking\":false},"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
                  "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}";
  assert_int_equal(parse(OA_CHAT, b, &r, &e), 0);
  Gantry__V1__GenerateRequest *g = r.gen;
  assert_true(r.stream && r.include_usage && r.logprobs && r.has_tools);
  assert_int_equal(g->max_tokens, 7);
  assert_int_equal(g->sampling->temperature_opt_case, GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE);
  assert_true(g->sampling->temperature == 0.0f);
  assert_int_equal(g->sampling->top_k, 20);
  assert_int_equal(g->sampling->seed, 5);
  assert_int_equal(g->n_stop, 2);
  assert_string_equal(g->stop[1], "y");
  assert_int_equal(g->min_tokens, 2);
  assert_true(g->ignore_eos);
  assert_int_equal(g->top_logprobs, 3);
  assert_false(g->parse_special_tokens);
  Gantry__V1__ChatInput *c = g->chat;
  assert_int_equal(c->n_messages, 4);
  assert_string_equal(c->messages[0]->role, "system");
  assert_string_equal(c->messages[1]->content, "a\nb"); /* parts joined with "\\n", as vLLM */
  assert_string_equal(c->messages[2]->tool_calls[0]->name, "f");
  assert_string_equal(c->messages[3]->tool_call_id, "c1");
  assert_int_equal(c->enable_thinking_opt_case, GANTRY__V1__CHAT_INPUT__ENABLE_THINKING_OPT_ENABLE_THINKING);
  assert_false(c->enable_thinking);
  assert_non_null(strstr(c->tools_json, "\"g\""));
  assert_null(strstr(c->tools_json, "\"f\"")); /* tool_choice names g: only g is offered */
  /* the request packs (every field is valid for the wire) */
  assert_true(protobuf_c_message_get_packed_size(&g->base) > 0);
  oa_req_free(&r);
}

static void test_completion_prompt_forms(void **st) {
  (void)st;
  oa_req_t r;
  oa_error_t e;
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"only one\"],\"logprobs\":2}", &r, &e), 0);
  assert_string_equal(r.gen->prompt, "only one");
  assert_true(r.logprobs);
  assert_int_equal(r.gen->top_logprobs, 2);
  assert_int_equal(r.gen->max_tokens_opt_case, GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT__NOT_SET);
  oa_req_free(&r);
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2,3]}", &r, &e), 0);
  assert_int_equal(r.gen->input_case, GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS);
  assert_int_equal(r.gen->tokens->n_ids, 3);
  oa_req_free(&r);
}

/* logit_bias, stop_token_ids, skip_special_tokens, include_stop_str_in_output -> GenerateRequest */
static void test_token_params(void **st) {
  (void)st;
  oa_req_t r;
  oa_error_t e;
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\"}", &r, &e), 0);
  assert_int_equal(r.gen->n_logit_bias, 0);
  assert_int_equal(r.gen->n_stop_token_ids, 0);
  assert_int_equal(r.gen->skip_special_tokens_opt_case, GANTRY__V1__GENERATE_REQUEST__SKIP_SPECIAL_TOKENS_OPT__NOT_SET);
  assert_false(r.gen->include_stop_str_in_output);
  oa_req_free(&r);
  assert_int_equal(parse(OA_CHAT,
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                         "\"logit_bias\":{\"50256\":-100,\"7\":100,\"12\":0.5},\"stop_token_ids\":[3,151645],"
                         "\"skip_special_tokens\":false,\"include_stop_str_in_output\":true}",
                         &r, &e),
                   0);
  assert_int_equal(r.gen->n_logit_bias, 3);
  assert_int_equal(r.gen->logit_bias[0]->id, 50256);
  assert_true(r.gen->logit_bias[0]->bias == -100.0f);
  assert_int_equal(r.gen->logit_bias[1]->id, 7);
  assert_true(r.gen->logit_bias[2]->bias == 0.5f);
  assert_int_equal(r.gen->n_stop_token_ids, 2);
  assert_int_equal(r.gen->stop_token_ids[1], 151645);
  assert_int_equal(r.gen->skip_special_tokens_opt_case, GANTRY__V1__GENERATE_REQUEST__SKIP_SPECIAL_TOKENS_OPT_SKIP_SPECIAL_TOKENS);
  assert_false(r.gen->skip_special_tokens);
  assert_true(r.gen->include_stop_str_in_output);
  oa_req_free(&r);
#define P "{\"model\":\"m\",\"prompt\":\"x\","
  expect_err(OA_COMPLETION, P "\"logit_bias\":[1]}", 400, "invalid_type", "logit_bias");
  expect_err(OA_COMPLETION, P "\"logit_bias\":{\"abc\":1}}", 400, "invalid_value", "logit_bias");
  expect_err(OA_COMPLETION, P "\"logit_bias\":{\"-1\":1}}", 400, "invalid_value", "logit_bias");
  expect_err(OA_COMPLETION, P "\"logit_bias\":{\"5\":101}}", 400, "invalid_value", "logit_bias");
  expect_err(OA_COMPLETION, P "\"logit_bias\":{\"5\":\"high\"}}", 400, "invalid_value", "logit_bias");
  expect_err(OA_COMPLETION, P "\"stop_token_ids\":5}", 400, "invalid_type", "stop_token_ids");
  expect_err(OA_COMPLETION, P "\"stop_token_ids\":[1,-2]}", 400, "invalid_value", "stop_token_ids");
  expect_err(OA_COMPLETION, P "\"stop_token_ids\":[1.5]}", 400, "invalid_value", "stop_token_ids");
  expect_err(OA_COMPLETION, P "\"skip_special_tokens\":1}", 400, "invalid_type", "skip_special_tokens");
  expect_err(OA_COMPLETION, P "\"include_stop_str_in_output\":\"y\"}", 400, "invalid_type", "include_stop_str_in_output");
#undef P
}

static void test_bad_requests(void **st) {
  (void)st;
  expect_err(OA_CHAT, "", 400, "invalid_json", NULL);
  expect_err(OA_CHAT, "[1,2]", 400, "invalid_json", NULL);
  expect_err(OA_CHAT, "{\"model\":\"m\",", 400, "invalid_json", NULL);
  expect_err(OA_CHAT, "{\"model\":\"m\",\"model\":\"n\",\"messages\":[]}", 400, "invalid_json", NULL);
  expect_err(OA_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "missing_required_parameter", "model");
  expect_err(OA_CHAT, "{\"model\":\"m\"}", 400, "missing_required_parameter", "messages");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[]}", 400, "empty_array", "messages");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[3]}", 400, "invalid_type", "messages[0]");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "invalid_value", NULL);
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", 400, "missing_required_parameter", NULL);
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
             "unsupported_content", NULL);
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", 400, "invalid_value", "max_tokens");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", 400, "invalid_type", "max_tokens");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", 400, "invalid_value", "n");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", 400, "invalid_value", "n");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":9}", 400, "invalid_value", "temperature");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", 400, "invalid_value", "top_p");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", 400, "invalid_type", "stream");
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400, "invalid_value", NULL);
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"sometimes\",\"tools\":[]}", 400, "invalid_value", NULL);
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\"}", 400, "empty_prompt", "prompt");
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",[1]]}", 400, "invalid_type", "prompt");
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",\"\"]}", 400, "empty_prompt", "prompt");
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1],[]]}", 400, "empty_prompt", "prompt");
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", 400, "unsupported_value", "echo");
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2],\"echo\":true}", 400, "unsupported_value", "echo");
  /* issue 16's rule: accepted-and-ignored parameters are refused with a 400 naming them */
  static const char *const refused[][2] = {
      {"\"guided_grammar\":\"root ::= x\"", "guided_grammar"},
      {"\"prompt_logprobs\":1", "prompt_logprobs"},
      {"\"return_tokens_as_token_ids\":true", "return_tokens_as_token_ids"},
      {"\"chat_template\":\"{{ messages }}\"", "chat_template"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", refused[i][0]);
    expect_err(OA_CHAT, body, 400, "unsupported_value", refused[i][1]);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"x\",%s}", refused[i][0]);
    expect_err(OA_COMPLETION, body, 400, "unsupported_value", refused[i][1]);
  }
  expect_err(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":\"json\"}",
             400, "invalid_type", "response_format");
  { /* the defaults stay accepted */
    oa_req_t r;
    oa_error_t e;
    assert_int_equal(parse(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"response_format\":{\"type\":\"text\"},\"prompt_logprobs\":null,"
                                    "\"return_tokens_as_token_ids\":false,\"guided_choice\":null}",
                           &r, &e), 0);
    oa_req_free(&r);
  }
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"caf\xc3\"}", 400, "invalid_utf8", NULL);
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\xed\xa0\x80\"}", 400, "invalid_utf8", NULL); /* surrogate */
  expect_err(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\xc0\xaf\"}", 400, "invalid_utf8", NULL);     /* overlong */
}

static void test_utf8_validator(void **st) {
  (void)st;
  assert_true(oa_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
  assert_false(oa_utf8_valid("\xff", 1));
  assert_false(oa_utf8_valid("\xe2\x82", 2));
  assert_false(oa_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
}

/* ---- responses ---- */
static char *sse_of(oa_resp_t *r, gt_genresp_t *m) {
  oa_sb_t sb = {0};
  if (m->kind_case == GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA) assert_int_equal(oa_resp_delta(r, m->delta, &sb), 0);
  else assert_int_equal(oa_resp_final_sse(r, m->final, &sb), 0);
  gt_genresp_free(m);
  return sb.p ? sb.p : strdup("");
}

static json_t *first_event(const char *sse) {
  const char *p = strstr(sse, "data: ");
  assert_non_null(p);
  const char *end = strstr(p, "\n\n");
  char *s = strndup(p + 6, (size_t)(end - p - 6));
  json_t *j = json_loads(s, 0, NULL);
  free(s);
  assert_non_null(j);
  return j;
}

static void test_chat_stream_logprobs_and_reasoning_field(void **st) {
  (void)st;
  oa_req_t q;
  oa_error_t e;
  assert_int_equal(parse(OA_CHAT, "{\"model\":\"m\",\"stream\":true,\"logprobs\":true,\"top_logprobs\":1,"
                                  "\"stream_options\":{\"continuous_usage_stats\":true},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                   &q, &e), 0);
  oa_resp_t *r = oa_resp_new(&q, "rid", 1700000000, OA_REASONING_CONTENT_ONLY);
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_token(m, 5, NULL, "hmm");
  char *s = sse_of(r, m);
  json_t *j = first_event(s);
  json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
  assert_string_equal(json_string_value(json_object_get(d, "reasoning_content")), "hmm");
  assert_null(json_object_get(d, "reasoning"));
  assert_string_equal(json_string_value(json_object_get(j, "id")), "chatcmpl-rid");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 1);
  json_decref(j);
  free(s);
  /* a token with logprobs; its bytes are a partial UTF-8 sequence -> U+FFFD in "token" */
  m = gt_delta_new();
  gt_delta_add_token(m, 6, "\xe2\x82", NULL);
  Gantry__V1__TokenLogprob *lp = malloc(sizeof *lp);
  gantry__v1__token_logprob__init(lp);
  lp->id = 6;
  lp->logprob = -0.5f;
  lp->token.len = 2;
  lp->token.data = malloc(2);
  memcpy(lp->token.data, "\xe2\x82", 2);
  m->delta->logprobs = malloc(sizeof *m->delta->logprobs);
  m->delta->logprobs[0] = lp;
  m->delta->n_logprobs = 1;
  oa_sb_t sb = {0};
  assert_int_equal(oa_resp_delta(r, m->delta, &sb), 0);
  gt_genresp_free(m);
  j = first_event(sb.p);
  json_t *c0 = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content"), 0);
  assert_string_equal(json_string_value(json_object_get(c0, "token")), "\xef\xbf\xbd\xef\xbf\xbd");
  assert_int_equal(json_array_size(json_object_get(c0, "bytes")), 2);
  assert_true(json_real_value(json_object_get(c0, "logprob")) == -0.5);
  json_decref(j);
  oa_sb_free(&sb);
  oa_resp_free(r);
  oa_req_free(&q);
}

static void test_final_error_and_body(void **st) {
  (void)st;
  oa_req_t q;
  oa_error_t e;
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":true}", &q, &e), 0);
  oa_resp_t *r = oa_resp_new(&q, "1", 1, OA_REASONING_BOTH);
  char *s = sse_of(r, gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR, "out of KV blocks"));
  assert_non_null(strstr(s, "\"error\""));
  assert_non_null(strstr(s, "out of KV blocks"));
  assert_non_null(strstr(s, "data: [DONE]"));
  free(s);
  oa_resp_free(r);
  oa_req_free(&q);
  /* non-streamed chat with a tool call and no text: content null, finish tool_calls */
  assert_int_equal(parse(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &q, &e), 0);
  r = oa_resp_new(&q, "2", 1, OA_REASONING_BOTH);
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_tool_call(m, 0, NULL, "f", "{\"a\":");
  gt_delta_add_tool_call(m, 0, NULL, NULL, "1}");
  assert_int_equal(oa_resp_delta(r, m->delta, NULL), 0);
  gt_genresp_free(m);
  gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP, NULL);
  f->final->usage->prompt_tokens = 3;
  f->final->usage->completion_tokens = 4;
  f->final->usage->cached_prompt_tokens = 2;
  char *body = oa_resp_body(r, f->final);
  gt_genresp_free(f);
  json_t *j = json_loads(body, 0, NULL);
  json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
  assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
  json_t *msg = json_object_get(c0, "message");
  assert_true(json_is_null(json_object_get(msg, "content")));
  json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(tc, "function"), "arguments")), "{\"a\":1}");
  assert_non_null(strstr(json_string_value(json_object_get(tc, "id")), "call_"));
  json_t *u = json_object_get(j, "usage");
  assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 7);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 2);
  json_decref(j);
  free(body);
  oa_resp_free(r);
  oa_req_free(&q);
}

/* echo: the prompt precedes the choice's text, in the body and in the first streamed chunk */
static void test_echo(void **st) {
  (void)st;
  for (int stream = 0; stream < 2; stream++) {
    oa_req_t q;
    oa_error_t e;
    assert_int_equal(parse(OA_COMPLETION, stream ? "{\"model\":\"m\",\"prompt\":\"ab\",\"echo\":true,\"stream\":true}"
                                                 : "{\"model\":\"m\",\"prompt\":\"ab\",\"echo\":true}",
                           &q, &e), 0);
    assert_string_equal(q.echo_texts[0], "ab");
    oa_resp_t *r = oa_resp_new(&q, "1", 1, OA_REASONING_BOTH);
    oa_sb_t out = {0};
    const char *parts[] = {"c", "d"};
    for (int i = 0; i < 2; i++) {
      gt_genresp_t *m = gt_delta_new();
      assert_int_equal(gt_delta_add_token(m, 7 + i, parts[i], NULL), 0);
      assert_int_equal(oa_resp_delta(r, m->delta, &out), 0);
      gt_genresp_free(m);
    }
    gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP, NULL);
    if (stream) {
      assert_int_equal(oa_resp_final_sse(r, f->final, &out), 0);
      assert_non_null(strstr(out.p, "\"text\":\"abc\""));
      assert_non_null(strstr(out.p, "\"text\":\"d\""));
      assert_null(strstr(out.p, "\"text\":\"c\""));
    } else {
      char *body = oa_resp_body(r, f->final);
      assert_non_null(strstr(body, "\"text\":\"abcd\""));
      free(body);
    }
    gt_genresp_free(f);
    oa_sb_free(&out);
    oa_resp_free(r);
    oa_req_free(&q);
  }
}

/* n = 2 over a list of 2 prompts: deltas of 4 choices interleave; each choice gets its own
 * finish chunk; [DONE] and the usage (completion tokens summed, each prompt counted once) come
 * only after the last Final */
static void test_choices_by_index(void **st) {
  (void)st;
  oa_req_t q;
  oa_error_t e;
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"],\"n\":2,\"stream\":true,"
                                        "\"stream_options\":{\"include_usage\":true}}", &q, &e), 0);
  assert_int_equal(q.n_prompts, 2);
  assert_int_equal(q.gen->n, 2);
  assert_int_equal(q.gen->n_more_prompts, 1);
  oa_resp_t *r = oa_resp_new(&q, "1", 1, OA_REASONING_BOTH);
  oa_sb_t out = {0};
  for (int i = 3; i >= 0; i--) {
    gt_genresp_t *m = gt_delta_new();
    char t[2] = {(char)('p' + i), 0};
    assert_int_equal(gt_delta_add_token(m, 7, t, NULL), 0);
    m->delta->index = (uint32_t)i;
    assert_int_equal(oa_resp_delta(r, m->delta, &out), 0);
    gt_genresp_free(m);
  }
  assert_non_null(strstr(out.p, "\"index\":3,\"text\":\"s\""));
  assert_non_null(strstr(out.p, "\"index\":0,\"text\":\"p\""));
  for (int i = 0; i < 4; i++) {
    gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH, NULL);
    f->final->index = (uint32_t)i;
    f->final->usage->prompt_tokens = i < 2 ? 5 : 7;
    f->final->usage->completion_tokens = 1;
    assert_int_equal(oa_resp_final_sse(r, f->final, &out), 0);
    gt_genresp_free(f);
    assert_true((strstr(out.p, "[DONE]") != NULL) == (i == 3));
  }
  assert_non_null(strstr(out.p, "\"prompt_tokens\":12,\"completion_tokens\":4"));
  oa_sb_free(&out);
  oa_resp_free(r);
  oa_req_free(&q);
}

/* Structured outputs: each form -> one Constraint (kind, spec, param); bad forms and a second
 * constraint are 400s naming the param. */
static void expect_constraint(oa_kind_t k, const char *extra, Gantry__V1__Constraint__Kind kind, const char *spec,
                              const char *param) {
  char body[1024];
  if (k == OA_CHAT)
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", extra);
  else
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"x\",%s}", extra);
  oa_req_t r;
  oa_error_t e;
  if (parse(k, body, &r, &e)) fail_msg("refused (%s): %s", e.message, body);
  const Gantry__V1__Constraint *c = r.gen->constraint;
  assert_non_null(c);
  assert_int_equal(c->kind, kind);
  if (spec) assert_string_equal(c->spec, spec);
  assert_string_equal(c->param, param);
  oa_req_free(&r);
}

static void test_constraints(void **st) {
  (void)st;
  const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}},"
                      "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";
  char buf[512];
  for (int k = 0; k < 2; k++) {
    oa_kind_t kind = k ? OA_COMPLETION : OA_CHAT;
    expect_constraint(kind, "\"response_format\":{\"type\":\"json_object\"}", GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_OBJECT,
                      "", "response_format");
    expect_constraint(kind,
                      "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,"
                      "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}",
                      GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA,
                      "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "response_format");
    expect_constraint(kind, "\"guided_json\":{\"type\":\"string\"}", GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA,
                      "{\"type\":\"string\"}", "guided_json");
    expect_constraint(kind, "\"guided_json\":\"{\\\"type\\\": \\\"boolean\\\"}\"", GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA,
                      "{\"type\":\"boolean\"}", "guided_json");
    expect_constraint(kind, "\"guided_choice\":[\"yes\",\"no\"]", GANTRY__V1__CONSTRAINT__KIND__KIND_CHOICE,
                      "[\"yes\",\"no\"]", "guided_choice");
    expect_constraint(kind, "\"guided_regex\":\"[a-z]+@x\\\\.com\"", GANTRY__V1__CONSTRAINT__KIND__KIND_REGEX,
                      "[a-z]+@x\\.com", "guided_regex");
  }
  snprintf(buf, sizeof buf, "%s,\"tool_choice\":\"required\"", tools);
  expect_constraint(OA_CHAT, buf, GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALLS, NULL, "tool_choice"); /* one or more */
  snprintf(buf, sizeof buf, "%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}", tools);
  expect_constraint(OA_CHAT, buf, GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALL,
                    "[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]", "tool_choice");
  { /* auto / none / text: no constraint */
    oa_req_t r;
    oa_error_t e;
    snprintf(buf, sizeof buf, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"auto\","
             "\"response_format\":{\"type\":\"text\"}}", tools);
    assert_int_equal(parse(OA_CHAT, buf, &r, &e), 0);
    assert_null(r.gen->constraint);
    oa_req_free(&r);
  }
  const char *chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
  static const char *const bad[][3] = {
      {"\"response_format\":{\"type\":\"yaml\"}}", "invalid_value", "response_format"},
      {"\"response_format\":{\"type\":\"json_schema\"}}", "invalid_type", "response_format"},
      {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}}", "invalid_value", "response_format"},
      {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":[1]}}}", "invalid_type", "response_format"},
      {"\"guided_json\":\"{not json\"}", "invalid_value", "guided_json"},
      {"\"guided_json\":7}", "invalid_type", "guided_json"},
      {"\"guided_choice\":[]}", "invalid_type", "guided_choice"},
      {"\"guided_choice\":[\"a\",3]}", "invalid_type", "guided_choice"},
      {"\"guided_regex\":\"\"}", "invalid_type", "guided_regex"},
      {"\"tool_choice\":\"required\"}", "invalid_value", "tool_choice"},
      /* one constraint per request: the second one is named */
      {"\"response_format\":{\"type\":\"json_object\"},\"guided_choice\":[\"a\"]}", "invalid_value", "guided_choice"},
      {"\"guided_json\":{},\"guided_regex\":\"a\"}", "invalid_value", "guided_regex"},
      {"\"guided_choice\":[\"a\"],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"}",
       "invalid_value", "tool_choice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(buf, sizeof buf, "%s%s", chat, bad[i][0]);
    expect_err(OA_CHAT, buf, 400, bad[i][1], bad[i][2]);
  }
}


/* Issue 27 item 3: every vLLM / OpenAI parameter is supported or refused with a 400 naming it. */
static void test_params_supported_or_refused(void **st) {
  (void)st;
  oa_req_t r;
  oa_error_t e;
#define CHAT(extra) "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," extra "}"
  /* structured_outputs, every supported form */
  assert_int_equal(parse(OA_CHAT, CHAT("\"structured_outputs\":{\"json\":{\"type\":\"object\"},\"disable_fallback\":true}"), &r, &e), 0);
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_SCHEMA);
  oa_req_free(&r);
  assert_int_equal(parse(OA_CHAT, CHAT("\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"string\\\"}\"}"), &r, &e), 0);
  assert_string_equal(r.gen->constraint->spec, "{\"type\":\"string\"}");
  oa_req_free(&r);
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"[0-9]+\"}}", &r, &e), 0);
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_REGEX);
  oa_req_free(&r);
  assert_int_equal(parse(OA_CHAT, CHAT("\"structured_outputs\":{\"choice\":[\"a\",\"b\"]}"), &r, &e), 0);
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_CHOICE);
  oa_req_free(&r);
  assert_int_equal(parse(OA_CHAT, CHAT("\"structured_outputs\":{\"json_object\":true}"), &r, &e), 0);
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_JSON_OBJECT);
  oa_req_free(&r);
  expect_err(OA_CHAT, CHAT("\"structured_outputs\":{\"grammar\":\"root ::= x\"}"), 400, "unsupported_value", "structured_outputs");
  expect_err(OA_CHAT, CHAT("\"structured_outputs\":{\"structural_tag\":\"{}\"}"), 400, "unsupported_value", "structured_outputs");
  expect_err(OA_CHAT, CHAT("\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"b\"]}"), 400, "invalid_value", "structured_outputs");
  expect_err(OA_CHAT, CHAT("\"structured_outputs\":{\"regex\":\"a\"},\"guided_regex\":\"b\""), 400, "invalid_value", "structured_outputs");
  /* legacy functions -> tools, function_call -> a forced named call; answers use function_call */
  assert_int_equal(parse(OA_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                                  "{\"role\":\"assistant\",\"content\":null,\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
                                  "{\"role\":\"function\",\"name\":\"f\",\"content\":\"ok\"}],"
                                  "\"functions\":[{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],\"function_call\":{\"name\":\"f\"}}",
                         &r, &e), 0);
  assert_true(r.legacy_functions && r.has_tools);
  assert_non_null(strstr(r.gen->chat->tools_json, "\"f\""));
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALL);
  assert_string_equal(r.gen->chat->messages[1]->tool_calls[0]->name, "f");
  assert_string_equal(r.gen->chat->messages[2]->role, "tool");
  assert_string_equal(r.gen->chat->messages[2]->tool_call_id, r.gen->chat->messages[1]->tool_calls[0]->id);
  oa_resp_t *resp = oa_resp_new(&r, "1", 1, OA_REASONING_BOTH);
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_tool_call(m, 0, NULL, "f", "{}");
  assert_int_equal(oa_resp_delta(resp, m->delta, NULL), 0);
  gt_genresp_free(m);
  gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS, NULL);
  char *body = oa_resp_body(resp, f->final);
  assert_non_null(strstr(body, "\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}"));
  assert_non_null(strstr(body, "\"finish_reason\":\"function_call\""));
  assert_null(strstr(body, "tool_calls"));
  free(body);
  gt_genresp_free(f);
  oa_resp_free(resp);
  oa_req_free(&r);
  expect_err(OA_CHAT, CHAT("\"functions\":[],\"tools\":[]"), 400, "invalid_value", "functions");
  /* tool_choice required: one or more calls, unless parallel_tool_calls is false */
  const char *req_tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"";
  char rb[512];
  snprintf(rb, sizeof rb, CHAT("%s"), req_tools);
  assert_int_equal(parse(OA_CHAT, rb, &r, &e), 0);
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALLS);
  oa_req_free(&r);
  snprintf(rb, sizeof rb, CHAT("%s,\"parallel_tool_calls\":false"), req_tools);
  assert_int_equal(parse(OA_CHAT, rb, &r, &e), 0);
  assert_int_equal(r.gen->constraint->kind, GANTRY__V1__CONSTRAINT__KIND__KIND_TOOL_CALL);
  oa_req_free(&r);
  /* parallel_tool_calls false: only the first call */
  assert_int_equal(parse(OA_CHAT, CHAT("\"parallel_tool_calls\":false"), &r, &e), 0);
  resp = oa_resp_new(&r, "2", 1, OA_REASONING_BOTH);
  m = gt_delta_new();
  gt_delta_add_tool_call(m, 0, NULL, "f", "{}");
  gt_delta_add_tool_call(m, 1, NULL, "g", "{}");
  assert_int_equal(oa_resp_delta(resp, m->delta, NULL), 0);
  gt_genresp_free(m);
  f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS, NULL);
  body = oa_resp_body(resp, f->final);
  assert_non_null(strstr(body, "\"f\""));
  assert_null(strstr(body, "\"g\""));
  free(body);
  gt_genresp_free(f);
  oa_resp_free(resp);
  oa_req_free(&r);
  /* request_id, truncate_prompt_tokens, cache_salt, add_generation_prompt, reasoning_effort */
  assert_int_equal(parse(OA_CHAT, CHAT("\"request_id\":\"r-1\",\"truncate_prompt_tokens\":5,\"cache_salt\":\"s\","
                                       "\"add_generation_prompt\":false,\"reasoning_effort\":\"minimal\""), &r, &e), 0);
  assert_string_equal(r.request_id, "r-1");
  assert_int_equal(r.gen->truncate_prompt_tokens, 5);
  assert_string_equal(r.gen->cache_salt, "s");
  assert_int_equal(r.gen->chat->add_generation_prompt_opt_case, GANTRY__V1__CHAT_INPUT__ADD_GENERATION_PROMPT_OPT_ADD_GENERATION_PROMPT);
  assert_false(r.gen->chat->add_generation_prompt);
  assert_true(r.gen->chat->enable_thinking_opt_case && !r.gen->chat->enable_thinking);
  oa_req_free(&r);
  assert_int_equal(parse(OA_CHAT, CHAT("\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":false}"), &r, &e), 0);
  assert_false(r.gen->chat->enable_thinking); /* the explicit kwarg wins */
  oa_req_free(&r);
  expect_err(OA_CHAT, CHAT("\"request_id\":\"a b\""), 400, "invalid_value", "request_id");
  assert_int_equal(parse(OA_CHAT, CHAT("\"allowed_token_ids\":[5,9]"), &r, &e), 0);
  assert_int_equal(r.gen->n_allowed_token_ids, 2);
  assert_int_equal(r.gen->allowed_token_ids[1], 9);
  oa_req_free(&r);
  expect_err(OA_CHAT, CHAT("\"allowed_token_ids\":[-1]"), 400, "invalid_value", "allowed_token_ids");
  assert_int_equal(parse(OA_CHAT, CHAT("\"bad_words\":[\"x\",\"yz\"]"), &r, &e), 0);
  assert_int_equal(r.gen->n_bad_words, 2);
  assert_string_equal(r.gen->bad_words[1], "yz");
  oa_req_free(&r);
  expect_err(OA_CHAT, CHAT("\"bad_words\":\"x\""), 400, "invalid_type", "bad_words");
  expect_err(OA_CHAT, CHAT("\"bad_words\":[\"\"]"), 400, "invalid_value", "bad_words");
  assert_int_equal(parse(OA_CHAT, CHAT("\"continue_final_message\":true"), &r, &e), 0);
  assert_true(r.gen->chat->continue_final_message);
  oa_req_free(&r);
  expect_err(OA_CHAT, CHAT("\"continue_final_message\":true,\"add_generation_prompt\":true"), 400, "invalid_value",
             "continue_final_message");
  expect_err(OA_CHAT, CHAT("\"truncate_prompt_tokens\":0"), 400, "invalid_value", "truncate_prompt_tokens");
  expect_err(OA_CHAT, CHAT("\"cache_salt\":\"\""), 400, "invalid_value", "cache_salt");
  expect_err(OA_CHAT, CHAT("\"reasoning_effort\":\"max\""), 400, "invalid_value", "reasoning_effort");
  /* stream_options without stream (as vLLM) */
  expect_err(OA_CHAT, CHAT("\"stream_options\":{\"include_usage\":true}"), 400, "invalid_value", "stream_options");
  /* refused unless at their default (the default passes) */
  static const char *const refused[][3] = {
      {"\"use_beam_search\":true", "use_beam_search", "\"use_beam_search\":false"},
      {"\"length_penalty\":0.5", "length_penalty", "\"length_penalty\":1"},
      {"\"return_token_ids\":true", "return_token_ids", "\"return_token_ids\":false"},
      {"\"guided_whitespace_pattern\":\" \"", "guided_whitespace_pattern", "\"guided_whitespace_pattern\":null"},
      {"\"structural_tag\":\"{}\"", "structural_tag", "\"structural_tag\":null"},
      {"\"echo\":true", "echo", "\"echo\":false"},
      {"\"documents\":[{\"t\":1}]", "documents", "\"documents\":[]"},
      {"\"add_special_tokens\":true", "add_special_tokens", "\"add_special_tokens\":false"},
      {"\"chat_template_kwargs\":{\"reasoning_effort\":\"low\"}", "chat_template_kwargs", "\"chat_template_kwargs\":{}"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char body2[512];
    snprintf(body2, sizeof body2, CHAT("%s"), refused[i][0]);
    expect_err(OA_CHAT, body2, 400, "unsupported_value", refused[i][1]);
    snprintf(body2, sizeof body2, CHAT("%s"), refused[i][2]);
    if (parse(OA_CHAT, body2, &r, &e)) fail_msg("default refused: %s (%s)", body2, e.message);
    oa_req_free(&r);
  }
#undef CHAT
}

/* ---- non-streaming bodies and their size (--max-response-bytes) ---- */
static Gantry__V1__TokenLogprob *mk_lp(const char *tok, float logprob) {
  Gantry__V1__TokenLogprob *lp = malloc(sizeof *lp);
  gantry__v1__token_logprob__init(lp);
  lp->logprob = logprob;
  lp->token.len = strlen(tok);
  lp->token.data = (uint8_t *)strdup(tok);
  return lp;
}

static Gantry__V1__TopLogprob *mk_top(const char *tok, float logprob) {
  Gantry__V1__TopLogprob *lp = malloc(sizeof *lp);
  gantry__v1__top_logprob__init(lp);
  lp->logprob = logprob;
  lp->token.len = strlen(tok);
  lp->token.data = (uint8_t *)strdup(tok);
  return lp;
}

/* A delta of one token, text t, with its logprob and two alternatives. */
static gt_genresp_t *lp_delta(int id, const char *t) {
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_token(m, id, t, NULL);
  Gantry__V1__TokenLogprob *lp = mk_lp(t, -0.25f * (float)id);
  lp->top = malloc(2 * sizeof *lp->top);
  lp->top[0] = mk_top("a\"", -1.5f);
  lp->top[1] = mk_top("\\b\xe2\x82", -2.0f); /* a partial character too */
  lp->n_top = 2;
  m->delta->logprobs = malloc(sizeof *m->delta->logprobs);
  m->delta->logprobs[0] = lp;
  m->delta->n_logprobs = 1;
  return m;
}

/* The non-streaming body (written as text) says what the stream (jansson chunks) says: the same
 * text and the same logprobs, entry for entry, for chat and completions; and the accumulated
 * bytes the size bound counts are the body less a few hundred bytes. */
static void test_body_matches_stream(void **st) {
  (void)st;
  static const char *const texts[] = {"he said \"hi\"\n", "\xc3\xa9\t\\", "\x01 end/"};
  for (int kind = 0; kind < 2; kind++) {
    const oa_kind_t k = kind ? OA_COMPLETION : OA_CHAT;
    const char *base = kind ? "{\"model\":\"m\",\"prompt\":\"p\",\"logprobs\":2%s}"
                            : "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
                              "\"top_logprobs\":2%s}";
    char body[512];
    oa_req_t qs, qb;
    oa_error_t e;
    snprintf(body, sizeof body, base, ",\"stream\":true");
    assert_int_equal(parse(k, body, &qs, &e), 0);
    snprintf(body, sizeof body, base, "");
    assert_int_equal(parse(k, body, &qb, &e), 0);
    oa_resp_t *rs = oa_resp_new(&qs, "1", 1, OA_REASONING_BOTH), *rb = oa_resp_new(&qb, "1", 1, OA_REASONING_BOTH);
    oa_sb_t sse = {0};
    for (int i = 0; i < 3; i++) {
      gt_genresp_t *m = lp_delta(i + 1, texts[i]);
      assert_int_equal(oa_resp_delta(rs, m->delta, &sse), 0);
      assert_int_equal(oa_resp_delta(rb, m->delta, NULL), 0);
      gt_genresp_free(m);
    }
    /* the stream's text and logprobs, gathered from its chunks */
    static const char *const keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    json_t *want[4] = {json_array(), json_array(), json_array(), json_array()};
    oa_sb_t text = {0};
    for (const char *p = sse.p; (p = strstr(p, "data: ")); p++) {
      const char *end = strstr(p, "\n\n");
      json_t *j = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
      assert_non_null(j);
      json_t *c = json_array_get(json_object_get(j, "choices"), 0);
      json_t *lp = json_object_get(c, "logprobs");
      const char *t = json_string_value(kind ? json_object_get(c, "text")
                                             : json_object_get(json_object_get(c, "delta"), "content"));
      if (t) oa_sb_append(&text, t, strlen(t));
      for (int a = 0; a < (kind ? 4 : 1); a++)
        json_array_extend(want[a], json_object_get(lp, kind ? keys[a] : "content"));
      json_decref(j);
    }
    gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP, NULL);
    f->final->usage->completion_tokens = 3;
    const size_t acc = oa_resp_bytes(rb);
    char *out = oa_resp_body(rb, f->final);
    gt_genresp_free(f);
    assert_true(acc > 0 && strlen(out) > acc && strlen(out) - acc < 512);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(kind ? json_object_get(c, "text")
                                               : json_object_get(json_object_get(c, "message"), "content")),
                        text.p);
    assert_int_equal(json_array_size(want[0]), 3);
    for (int a = 0; a < (kind ? 4 : 1); a++)
      assert_true(json_equal(want[a], json_object_get(json_object_get(c, "logprobs"), kind ? keys[a] : "content")));
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 3);
    json_decref(j);
    free(out);
    for (int a = 0; a < 4; a++) json_decref(want[a]);
    oa_sb_free(&text);
    oa_sb_free(&sse);
    oa_resp_free(rs);
    oa_resp_free(rb);
    oa_req_free(&qs);
    oa_req_free(&qb);
  }
}

/* The admission estimate and its 400, and the count of accumulated bytes once past the bound:
 * the delta is refused (OA_RESP_TOO_LARGE) and so is every later one. */
static void test_response_size(void **st) {
  (void)st;
  oa_req_t q;
  oa_error_t e;
  const char *chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"logprobs\":true,"
                     "\"top_logprobs\":5%s}";
  char body[512];
  snprintf(body, sizeof body, chat, ",\"max_tokens\":100");
  assert_int_equal(parse(OA_CHAT, body, &q, &e), 0);
  const uint64_t per_token = 2 * OA_EST_TEXT_BYTES + OA_EST_LP_TOKEN_BYTES + 6 * OA_EST_LP_ENTRY_BYTES;
  assert_int_equal(oa_resp_estimate(&q, 4096, OA_REASONING_BOTH), 2 * (100 * per_token + OA_EST_CHOICE_BYTES));
  assert_int_equal(oa_resp_estimate(&q, 50, OA_REASONING_BOTH), 2 * (50 * per_token + OA_EST_CHOICE_BYTES));
  assert_int_equal(oa_resp_estimate(&q, 4096, OA_REASONING_ONLY),
                   2 * (100 * (per_token - OA_EST_TEXT_BYTES) + OA_EST_CHOICE_BYTES));
  const size_t est = (size_t)oa_resp_estimate(&q, 4096, OA_REASONING_BOTH);
  assert_int_equal(oa_resp_check_size(&q, 4096, OA_REASONING_BOTH, est, &e), 0);
  assert_int_equal(oa_resp_check_size(&q, 4096, OA_REASONING_BOTH, 0, &e), 0); /* no bound */
  assert_int_equal(oa_resp_check_size(&q, 4096, OA_REASONING_BOTH, est - 1, &e), -1);
  assert_int_equal(e.status, 400);
  assert_string_equal(e.code, "response_too_large");
  assert_string_equal(e.param, "max_tokens");
  assert_non_null(strstr(e.message, "max_tokens 100"));
  assert_non_null(strstr(e.message, "stream: true"));
  oa_req_free(&q);
  snprintf(body, sizeof body, chat, "");
  assert_int_equal(parse(OA_CHAT, body, &q, &e), 0); /* max_tokens unset: the context */
  assert_int_equal(oa_resp_estimate(&q, 1000, OA_REASONING_BOTH), 2 * (1000 * per_token + OA_EST_CHOICE_BYTES));
  assert_int_equal(oa_resp_check_size(&q, 1000, OA_REASONING_BOTH, 1000000, &e), -1);
  assert_non_null(strstr(e.message, "context length"));
  oa_req_free(&q);
  snprintf(body, sizeof body, chat, ",\"stream\":true");
  assert_int_equal(parse(OA_CHAT, body, &q, &e), 0); /* a stream keeps nothing */
  assert_int_equal(oa_resp_estimate(&q, 1000, OA_REASONING_BOTH), 0);
  oa_req_free(&q);
  /* /v1/responses: its text in the body or the four events of a stream's end, and in the stored
   * record on its way to Redis (8 copies) */
  const char *rsp = "{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":10}";
  assert_int_equal(oa_parse_responses(rsp, strlen(rsp), NULL, NULL, &q, &e), 0);
  assert_int_equal(oa_resp_estimate(&q, 4096, OA_REASONING_BOTH), 10 * OA_EST_TEXT_BYTES * 9 + OA_EST_CHOICE_BYTES);
  assert_int_equal(oa_resp_check_size(&q, 4096, OA_REASONING_BOTH, 1000, &e), -1);
  assert_string_equal(e.param, "max_output_tokens");
  assert_null(strstr(e.message, "stream: true")); /* a streamed response object holds its text too */
  oa_req_free(&q);
  rsp = "{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":10,\"stream\":true}";
  assert_int_equal(oa_parse_responses(rsp, strlen(rsp), NULL, NULL, &q, &e), 0);
  assert_int_equal(oa_resp_estimate(&q, 4096, OA_REASONING_BOTH), 10 * OA_EST_TEXT_BYTES * 12 + OA_EST_CHOICE_BYTES);
  oa_req_free(&q);
  /* completions: echo counted once per choice */
  assert_int_equal(parse(OA_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\\\"b\",\"echo\":true,\"n\":3,\"max_tokens\":10}", &q, &e), 0);
  assert_int_equal(oa_resp_estimate(&q, 4096, OA_REASONING_BOTH), 3 * (10 * OA_EST_TEXT_BYTES + OA_EST_CHOICE_BYTES + 4));

  /* the count: 4 bytes of echo each, then text as JSON ("\"" is 2) */
  oa_resp_t *r = oa_resp_new(&q, "1", 1, OA_REASONING_BOTH);
  assert_int_equal(oa_resp_bytes(r), 12);
  oa_resp_set_max_bytes(r, 19);
  gt_genresp_t *m = gt_delta_new();
  gt_delta_add_token(m, 1, "\"xy", NULL);
  assert_int_equal(oa_resp_delta(r, m->delta, NULL), 0);
  assert_int_equal(oa_resp_bytes(r), 16);
  assert_int_equal(oa_resp_delta(r, m->delta, NULL), OA_RESP_TOO_LARGE);
  gt_genresp_free(m);
  m = gt_delta_new();
  gt_delta_add_token(m, 2, "", NULL);
  assert_int_equal(oa_resp_delta(r, m->delta, NULL), OA_RESP_TOO_LARGE); /* sticky */
  gt_genresp_free(m);
  oa_resp_size_error(r, 19, &e);
  assert_int_equal(e.status, 400);
  assert_string_equal(e.code, "response_too_large");
  assert_non_null(strstr(e.message, "after 2 tokens"));
  oa_resp_free(r);
  oa_req_free(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chat_full_mapping),       cmocka_unit_test(test_params_supported_or_refused),       cmocka_unit_test(test_completion_prompt_forms),
      cmocka_unit_test(test_bad_requests),            cmocka_unit_test(test_utf8_validator),
      cmocka_unit_test(test_token_params),            cmocka_unit_test(test_constraints),
      cmocka_unit_test(test_chat_stream_logprobs_and_reasoning_field), cmocka_unit_test(test_final_error_and_body),
      cmocka_unit_test(test_echo),                 cmocka_unit_test(test_choices_by_index),
      cmocka_unit_test(test_body_matches_stream),  cmocka_unit_test(test_response_size),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
