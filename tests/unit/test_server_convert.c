/* tests/unit/test_server_convert.c — engine/server_convert: request checks and conversion,
 * and the mapping of scheduler output (a real seqout pipeline fed model-like tokens on the
 * Qwen3 vocabulary: reasoning, content, a tool call; logprobs) to GenerateResponse messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "engine/server/server_convert.h"
#include "tests/common/testutil.h"

static void test_check(void **state) {
  (void)state;
  gt_err_t err = {0};
  Gantry__V1__GenerateRequest r;
  gantry__v1__generate_request__init(&r);
  assert_int_equal(srv_conv_check(&r, &err), GT_EINVAL); /* no input */
  assert_non_null(strstr(err.msg, "input"));
  r.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  r.prompt = "hi";
  assert_int_equal(srv_conv_check(&r, &err), GT_OK);

  Gantry__V1__SamplingParams sp;
  gantry__v1__sampling_params__init(&sp);
  r.sampling = &sp;
  sp.min_p_opt_case = GANTRY__V1__SAMPLING_PARAMS__MIN_P_OPT_MIN_P;
  sp.min_p = 2;
  assert_int_equal(srv_conv_check(&r, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "min_p"));
  sp.min_p = 0.1f;
  sp.presence_penalty_opt_case = GANTRY__V1__SAMPLING_PARAMS__PRESENCE_PENALTY_OPT_PRESENCE_PENALTY;
  sp.presence_penalty = 3;
  assert_int_equal(srv_conv_check(&r, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "presence_penalty"));
  sp.presence_penalty = 0;

  /* unknown field inside a nested message is named */
  uint8_t d[1] = {0};
  ProtobufCMessageUnknownField u = {.tag = 42, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT, .len = 1, .data = d};
  sp.base.n_unknown_fields = 1;
  sp.base.unknown_fields = &u;
  assert_int_equal(srv_conv_check(&r, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "42"));
  assert_non_null(strstr(err.msg, "sampling"));
  sp.base.n_unknown_fields = 0;

  r.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  r.max_tokens = 4;
  r.min_tokens = 5;
  assert_int_equal(srv_conv_check(&r, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "min_tokens"));
  r.min_tokens = 0;
  r.top_logprobs_opt_case = GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS;
  r.top_logprobs = 21;
  assert_int_equal(srv_conv_check(&r, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "top_logprobs"));
}

static void test_request(void **state) {
  (void)state;
  gt_err_t err = {0};
  Gantry__V1__GenerateRequest r;
  gantry__v1__generate_request__init(&r);
  r.input_case = GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT;
  r.prompt = "hi";
  char *stops[2] = {"END", "###"};
  r.stop = stops;
  r.n_stop = 2;
  r.priority = 5;
  sched_req_t q;
  srv_conv_bufs_t buf;
  assert_int_equal(srv_conv_request(&r, 1000, 0, 77, &q, &buf, &err), GT_OK);
  assert_true(q.sampling.temperature == 1.0f); /* unset: default 1 */
  assert_int_equal(q.sampling.seed, 77);
  assert_int_equal(q.max_tokens, 1000);       /* unset: to the context end */
  assert_int_equal(q.priority, -5);           /* larger first -> lower first */
  assert_int_equal(q.logprobs, -1);
  assert_int_equal(q.no_spec, 0);
  assert_int_equal(q.out.n_stop, 2);
  assert_string_equal(q.out.stop[1], "###");
  assert_int_equal(q.out.parse_output, 0);
  srv_conv_bufs_free(&buf);

  Gantry__V1__SamplingParams sp;
  gantry__v1__sampling_params__init(&sp);
  sp.temperature_opt_case = GANTRY__V1__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE; /* set 0 = greedy */
  sp.seed_opt_case = GANTRY__V1__SAMPLING_PARAMS__SEED_OPT_SEED;
  sp.seed = 9;
  r.sampling = &sp;
  r.n_stop = 0;
  r.max_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__MAX_TOKENS_OPT_MAX_TOKENS;
  r.max_tokens = 3;
  r.top_logprobs_opt_case = GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS;
  r.top_logprobs = 0;
  r.no_speculation = 1;
  assert_int_equal(srv_conv_request(&r, 1000, 0, 77, &q, &buf, &err), GT_OK);
  assert_int_equal(q.no_spec, 1);
  assert_true(q.sampling.temperature == 0.0f);
  assert_int_equal(q.sampling.seed, 9);
  assert_int_equal(q.max_tokens, 3);
  assert_int_equal(q.logprobs, 0);
  assert_null(buf.stop);
  assert_null(buf.bias_ids);
  assert_int_equal(q.out.keep_special, 0); /* skip_special_tokens unset: true */
  assert_int_equal(q.out.include_stop, 0);

  /* logit_bias, skip_special_tokens false, include_stop_str_in_output */
  Gantry__V1__TokenBias b0, b1;
  gantry__v1__token_bias__init(&b0);
  gantry__v1__token_bias__init(&b1);
  b0.id = 5;
  b0.bias = 100;
  b1.id = 9;
  b1.bias = -2.5f;
  Gantry__V1__TokenBias *bl[2] = {&b0, &b1};
  r.logit_bias = bl;
  r.n_logit_bias = 2;
  r.skip_special_tokens_opt_case = GANTRY__V1__GENERATE_REQUEST__SKIP_SPECIAL_TOKENS_OPT_SKIP_SPECIAL_TOKENS;
  r.skip_special_tokens = false;
  r.include_stop_str_in_output = true;
  assert_int_equal(srv_conv_check(&r, &err), GT_OK);
  assert_int_equal(srv_conv_request(&r, 1000, 0, 77, &q, &buf, &err), GT_OK);
  assert_int_equal(q.n_bias, 2);
  assert_int_equal(q.bias_ids[1], 9);
  assert_true(q.bias_vals[0] == 100.0f && q.bias_vals[1] == -2.5f);
  assert_int_equal(q.out.keep_special, 1);
  assert_int_equal(q.out.include_stop, 1);
  srv_conv_bufs_free(&buf);
  /* an out-of-range bias is refused by sched_submit (test_sched_params) */
}

/* Feeds text as the model would produce it (TOK_SPECIAL ids) through a seqout and maps every
 * delta, merging them like a slow reader would get them. */
static void test_event_mapping(void **state) {
  (void)state;
  gt_err_t err = {0};
  gguf_t *g = NULL;
  tok_t *tok = NULL;
  assert_int_equal(gguf_open(tu_golden("qwen3-vocab.gguf"), &g, &err), GT_OK);
  assert_int_equal(tok_load(g, &tok, &err), GT_OK);
  const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                      "\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
  seqout_config_t oc = {.parse_output = 1, .parse_tool_calls = 1, .tools_json = tools, .id_seed = 1};
  seqout_t *o = NULL;
  assert_int_equal(seqout_create(tok, &oc, &o, &err), GT_OK);
  const char *out = "<think>\nCheck the weather.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", "
                    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  int32_t *ids = NULL;
  size_t n = 0;
  assert_int_equal(tok_encode(tok, out, strlen(out), TOK_SPECIAL, &ids, &n, &err), GT_OK);
  gt_genresp_t *all = gt_delta_new();
  int n_msgs = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n) {
      seqout_logprob_t lp = {.id = ids[i], .logprob = -0.5f, .n_top = 2, .top_ids = {ids[i], 0}, .top_lps = {-0.5f, -3}};
      seqout_add_logprob(o, &lp);
      assert_true(seqout_push(o, ids[i], 1, &err) >= 0);
    } else {
      assert_int_equal(seqout_finish(o, &err), GT_OK);
    }
    const seqout_delta_t *d = seqout_take(o);
    if (seqout_delta_empty(d)) continue;
    gt_genresp_t *r = srv_conv_delta(d, tok);
    assert_non_null(r);
    assert_int_equal(r->kind_case, GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA);
    assert_int_equal(r->delta->n_logprobs, r->delta->n_token_ids);
    n_msgs++;
    /* the wire round trip keeps everything */
    size_t len = protobuf_c_message_get_packed_size(&r->base);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(&r->base, buf);
    gt_genresp_t *back = (gt_genresp_t *)protobuf_c_message_unpack(&gantry__v1__generate_response__descriptor, NULL, len, buf);
    free(buf);
    assert_non_null(back);
    gt_genresp_free(r);
    assert_int_equal(gt_delta_merge(NULL, &all->base, &back->base), 1);
    gt_genresp_free(back);
  }
  assert_true(n_msgs > 1);
  const Gantry__V1__Delta *d = all->delta;
  assert_int_equal(d->n_token_ids, n);
  assert_memory_equal(d->token_ids, ids, n * sizeof *ids);
  assert_int_equal(d->n_logprobs, n);
  assert_int_equal(d->logprobs[0]->n_top, 2);
  assert_true(d->logprobs[1]->token.len > 0);
  assert_string_equal(d->reasoning_text, "Check the weather.");
  assert_string_equal(d->text, "Let me look.");
  assert_int_equal(d->n_tool_calls, 1);
  assert_string_equal(d->tool_calls[0]->name, "get_weather");
  assert_true(d->tool_calls[0]->id[0] != 0);
  assert_string_equal(d->tool_calls[0]->arguments, "{\"city\": \"Paris\"}");
  assert_int_equal(seqout_tool_calls(o), 1);
  assert_true(seqout_reasoning_tokens(o) > 0);
  gt_genresp_free(all);
  free(ids);
  seqout_free(o);
  tok_free(tok);
  gguf_close(g);
}

static void test_final(void **state) {
  (void)state;
  sched_usage_t u = {.prompt_tokens = 10, .completion_tokens = 5, .reasoning_tokens = 2, .cached_tokens = 8,
                     .queued_ms = 1, .prefill_ms = 2, .ttft_ms = 3, .decode_ms = 4};
  gt_genresp_t *r = srv_conv_final(SCHED_FINISH_TOOL_CALLS, NULL, &u);
  assert_non_null(r);
  assert_int_equal(r->kind_case, GANTRY__V1__GENERATE_RESPONSE__KIND_FINAL);
  assert_int_equal(r->final->finish_reason, GANTRY__V1__FINISH_REASON__FINISH_REASON_TOOL_CALLS);
  assert_int_equal(r->final->usage->cached_prompt_tokens, 8);
  assert_int_equal(r->final->usage->reasoning_tokens, 2);
  assert_true(r->final->timings->decode_ms == 4);
  gt_genresp_free(r);
  r = srv_conv_final(SCHED_FINISH_ERROR, "backend failed", &u);
  assert_int_equal(r->final->finish_reason, GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR);
  assert_string_equal(r->final->error, "backend failed");
  gt_genresp_free(r);
  assert_string_equal(srv_finish_name(SCHED_FINISH_LENGTH), "length");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_check),
      cmocka_unit_test(test_request),
      cmocka_unit_test(test_event_mapping),
      cmocka_unit_test(test_final),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
