/* tests/integration/test_engine_serve.c — the Engine service end to end over loopback gRPC on
 * the CPU backend with qwen3-tiny: streaming order and usage, 32 concurrent streams, batch
 * invariance, cancellation and deadline freeing KV, prefix-cache hits, chunked prefill
 * interleaving with a decode, preemption under a small pool, status codes, unary calls and
 * /metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/common/testutil.h"
#include "grpc/health/v1/health.pb-c.h"
#include "tests/integration/engine_fixture.h"

#define MODEL "qwen3-tiny.bf16.gguf"
#define WAIT_MS 30000

static void prompt_ids(int32_t *ids, int n, int seed) {
  for (int i = 0; i < n; i++) ids[i] = (int32_t)(1 + (i * 37 + seed * 101) % 900);
}

static void start(efx_t *f, int max_seqs, int max_batch, int n_blocks) {
  sched_config_t cfg = {.max_num_seqs = max_seqs, .max_batch_tokens = max_batch, .n_ctx = 1024, .n_blocks = n_blocks};
  assert_int_equal(efx_start(f, MODEL, &cfg), 0);
}

/* Deltas, then exactly one Final with usage; ids stream in order. */
static void test_stream_order_usage(void **state) {
  (void)state;
  efx_t f;
  start(&f, 8, 256, 0);
  int32_t ids[20];
  prompt_ids(ids, 20, 1);
  reqb_t b;
  reqb_tokens(&b, ids, 20, 12);
  b.req.top_logprobs_opt_case = GANTRY__V1__GENERATE_REQUEST__TOP_LOGPROBS_OPT_TOP_LOGPROBS;
  b.req.top_logprobs = 3;
  coll_t c;
  coll_init(&c);
  assert_int_equal(coll_start(&f, &c, &b.req, WAIT_MS), 0);
  assert_true(coll_wait_done(&c, WAIT_MS));
  assert_int_equal(c.st.code, GT_RPC_OK);
  assert_true(c.got_final);
  assert_false(c.delta_after_final);
  assert_int_equal(c.n_ids, 12);
  assert_int_equal(c.n_logprobs, 12);
  assert_int_equal(c.finish, GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH);
  assert_int_equal(c.usage.prompt_tokens, 20);
  assert_int_equal(c.usage.completion_tokens, 12);
  assert_true(c.timings.ttft_ms > 0);
  assert_true(c.n_msgs >= 2);
  coll_destroy(&c);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  efx_stop(&f);
}

/* 32 concurrent streams with mixed parameters; the greedy ones equal their solo run. */
static void test_concurrent_batch_invariance(void **state) {
  (void)state;
  efx_t f;
  start(&f, 32, 512, 0);
  enum { N = 32, GEN = 16 };
  static reqb_t b[N];
  static coll_t c[N];
  int32_t ids[64];
  /* solo reference of request 0 */
  prompt_ids(ids, 24, 0);
  assert_int_equal(coll_run_tokens(&f, &c[0], ids, 24, GEN, WAIT_MS), 0);
  assert_int_equal(c[0].n_ids, GEN);
  int32_t solo[GEN];
  memcpy(solo, c[0].ids, sizeof solo);
  coll_destroy(&c[0]);
  for (int i = 0; i < N; i++) {
    prompt_ids(ids, 8 + (i * 7) % 50, i);
    reqb_tokens(&b[i], ids, i == 0 ? 24 : 8 + (i * 7) % 50, GEN);
    if (i == 0) prompt_ids(b[0].ids, 24, 0);
    if (i % 3 == 1) { /* sampled, seeded */
      b[i].sp.temperature = 0.8f;
      b[i].sp.top_k_opt_case = GANTRY__V1__SAMPLING_PARAMS__TOP_K_OPT_TOP_K;
      b[i].sp.top_k = 20;
      b[i].sp.seed_opt_case = GANTRY__V1__SAMPLING_PARAMS__SEED_OPT_SEED;
      b[i].sp.seed = (uint64_t)i;
    }
    if (i % 5 == 2) b[i].req.max_tokens = 4 + (uint32_t)i % 7;
    if (i % 7 == 3) {
      b[i].sp.repetition_penalty_opt_case = GANTRY__V1__SAMPLING_PARAMS__REPETITION_PENALTY_OPT_REPETITION_PENALTY;
      b[i].sp.repetition_penalty = 1.3f;
    }
    coll_init(&c[i]);
  }
  for (int i = 0; i < N; i++) assert_int_equal(coll_start(&f, &c[i], &b[i].req, WAIT_MS), 0);
  for (int i = 0; i < N; i++) {
    assert_true(coll_wait_done(&c[i], WAIT_MS));
    assert_int_equal(c[i].st.code, GT_RPC_OK);
    assert_true(c[i].got_final);
    assert_int_equal(c[i].n_ids, (int)b[i].req.max_tokens);
    assert_int_equal(c[i].usage.completion_tokens, b[i].req.max_tokens);
  }
  assert_memory_equal(c[0].ids, solo, sizeof solo); /* batch invariance under greedy */
  for (int i = 0; i < N; i++) coll_destroy(&c[i]);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  efx_stop(&f);
}

/* Client cancel mid-stream: CANCELLED, and running / KV return to the baseline. */
static void test_cancel_frees_kv(void **state) {
  (void)state;
  efx_t f;
  start(&f, 4, 256, 0);
  int32_t ids[40];
  prompt_ids(ids, 40, 3);
  reqb_t b;
  reqb_tokens(&b, ids, 40, 900);
  coll_t c;
  coll_init(&c);
  c.cancel_after = 5;
  assert_int_equal(coll_start(&f, &c, &b.req, WAIT_MS), 0);
  assert_true(coll_wait_done(&c, WAIT_MS));
  assert_int_equal(c.st.code, GT_RPC_CANCELLED);
  assert_true(c.n_ids >= 5 && c.n_ids < 900);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  char *m = NULL;
  assert_int_equal(gt_metrics_render(f.reg, &m, NULL, NULL), GT_OK);
  assert_non_null(strstr(m, "gantry_engine_requests_running{model_name=\"tiny\"} 0\n"));
  assert_non_null(strstr(m, "gantry_engine_kv_cache_usage_ratio{model_name=\"tiny\"} 0\n"));
  assert_non_null(strstr(m, "gantry_engine_request_success_total{model_name=\"tiny\",finished_reason=\"cancelled\"} 1\n"));
  free(m);
  coll_destroy(&c);
  efx_stop(&f);
}

/* Deadline expiry: DEADLINE_EXCEEDED and the sequence is freed. */
static void test_deadline(void **state) {
  (void)state;
  efx_t f;
  start(&f, 4, 256, 0);
  int32_t ids[16];
  prompt_ids(ids, 16, 4);
  reqb_t b;
  reqb_tokens(&b, ids, 16, 1000);
  coll_t c;
  coll_init(&c);
  assert_int_equal(coll_start(&f, &c, &b.req, 300), 0);
  assert_true(coll_wait_done(&c, WAIT_MS));
  assert_int_equal(c.st.code, GT_RPC_DEADLINE_EXCEEDED);
  assert_true(c.n_ids < 1000);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  coll_destroy(&c);
  efx_stop(&f);
}

/* The same prompt twice: the second reports cached prompt tokens. */
static void test_prefix_cache(void **state) {
  (void)state;
  efx_t f;
  start(&f, 4, 256, 0);
  int32_t ids[70];
  prompt_ids(ids, 70, 5);
  unsigned cached[2];
  int32_t out[2][8];
  for (int k = 0; k < 2; k++) {
    coll_t c;
    assert_int_equal(coll_run_tokens(&f, &c, ids, 70, 8, WAIT_MS), 0);
    assert_int_equal(c.st.code, GT_RPC_OK);
    cached[k] = c.usage.cached_prompt_tokens;
    memcpy(out[k], c.ids, sizeof out[k]);
    coll_destroy(&c);
  }
  assert_int_equal(cached[0], 0);
  assert_int_equal(cached[1], 64); /* 4 full blocks of 16; the last token is always computed */
  assert_memory_equal(out[0], out[1], sizeof out[0]);
  char *m = NULL;
  assert_int_equal(gt_metrics_render(f.reg, &m, NULL, NULL), GT_OK);
  assert_non_null(strstr(m, "gantry_engine_prefix_cache_hits_total{model_name=\"tiny\"} 64\n"));
  free(m);
  efx_stop(&f);
}

/* A long prompt arriving while a stream decodes: the stream keeps getting a token per step
 * (one per prefill chunk) while the long prompt is prefilled. */
static void test_chunked_prefill_interleaves(void **state) {
  (void)state;
  efx_t f;
  enum { CHUNK = 32, LONG = 640 };
  start(&f, 4, CHUNK, 0);
  int32_t ids[LONG];
  prompt_ids(ids, 8, 6);
  reqb_t a, b;
  reqb_tokens(&a, ids, 8, 600);
  coll_t ca, cb;
  coll_init(&ca);
  coll_init(&cb);
  assert_int_equal(coll_start(&f, &ca, &a.req, WAIT_MS), 0);
  assert_true(coll_wait_tokens(&ca, 2, WAIT_MS) >= 2);
  prompt_ids(ids, LONG, 7);
  reqb_tokens(&b, ids, LONG, 1);
  int before = coll_tokens(&ca);
  assert_int_equal(coll_start(&f, &cb, &b.req, WAIT_MS), 0);
  assert_true(coll_wait_done(&cb, WAIT_MS));
  int after = coll_tokens(&ca);
  assert_int_equal(cb.st.code, GT_RPC_OK);
  assert_int_equal(cb.n_ids, 1);
  /* the long prompt needs >= LONG / (CHUNK - 1) steps (A's decode token shares each step), so
   * A gains about one token per chunk; without interleaving it would gain at most one or two.
   * Half of the steps leaves room for A's deltas still in flight (merged) when B's Final
   * arrives. */
  int steps = LONG / CHUNK;
  print_message("decode tokens of A during the %d-token prefill of B: %d (%d chunks)\n", LONG, after - before, steps);
  assert_true(after - before >= steps / 2);
  assert_true(cb.timings.prefill_ms > 0);
  ec_stream_cancel(ca.s);
  assert_true(coll_wait_done(&ca, WAIT_MS));
  coll_destroy(&ca);
  coll_destroy(&cb);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  efx_stop(&f);
}

/* A pool too small for all requests at once: preemption, and every request still completes
 * with the tokens it gets alone. */
static void test_preemption(void **state) {
  (void)state;
  enum { N = 6, P = 40, GEN = 40 };
  static reqb_t b[N];
  static coll_t c[N];
  int32_t solo[N][GEN];
  int32_t ids[P];
  efx_t f;
  start(&f, 1, 256, 0); /* reference: one at a time */
  for (int i = 0; i < N; i++) {
    prompt_ids(ids, P, 20 + i);
    reqb_tokens(&b[i], ids, P, GEN);
    coll_init(&c[i]);
    assert_int_equal(coll_start(&f, &c[i], &b[i].req, WAIT_MS), 0);
    assert_true(coll_wait_done(&c[i], WAIT_MS));
    assert_int_equal(c[i].n_ids, GEN);
    memcpy(solo[i], c[i].ids, sizeof solo[i]);
    coll_destroy(&c[i]);
  }
  efx_stop(&f);
  /* each request needs 5 blocks at the end (80 tokens); 12 blocks hold two */
  start(&f, N, 256, 12);
  for (int i = 0; i < N; i++) {
    coll_init(&c[i]);
    assert_int_equal(coll_start(&f, &c[i], &b[i].req, WAIT_MS), 0);
  }
  for (int i = 0; i < N; i++) {
    assert_true(coll_wait_done(&c[i], WAIT_MS));
    assert_int_equal(c[i].st.code, GT_RPC_OK);
    assert_int_equal(c[i].n_ids, GEN);
    assert_memory_equal(c[i].ids, solo[i], sizeof solo[i]);
    coll_destroy(&c[i]);
  }
  sched_stats_t st;
  srv_stats(f.srv, &st);
  print_message("preemptions: %llu\n", (unsigned long long)st.preemptions);
  assert_true(st.preemptions > 0);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  efx_stop(&f);
}

static char g_param[64]; /* the last run_status's trailing metadata gantry-param ("" if none) */

static gt_rpc_code_t run_status(efx_t *f, const Gantry__V1__GenerateRequest *req, char *msg, size_t cap) {
  coll_t c;
  coll_init(&c);
  assert_int_equal(coll_start(f, &c, req, WAIT_MS), 0);
  assert_true(coll_wait_done(&c, WAIT_MS));
  gt_rpc_code_t code = c.st.code;
  snprintf(msg, cap, "%s", c.st.message);
  snprintf(g_param, sizeof g_param, "%s", c.st.param);
  coll_destroy(&c);
  return code;
}

/* A prompt list whose second prompt the scheduler refuses (longer than the context) after the
 * first was submitted: the call ends once with the refusal's status (and is counted as refused),
 * the first prompt's sequence is cancelled and KV, running and live calls return to zero. max_tokens 900: the
 * first is still running when the second is refused; 1: it may have ended already. */
static void test_prompt_list_fails_half_way(void **state) {
  (void)state;
  efx_t f;
  start(&f, 4, 256, 0);
  static int32_t ids[1100], ids3[8];
  prompt_ids(ids, 1100, 11);
  prompt_ids(ids3, 8, 12);
  const int max_tokens[] = {900, 1};
  for (int t = 0; t < 2; t++) {
    reqb_t b;
    reqb_tokens(&b, ids, 20, max_tokens[t]);
    Gantry__V1__TokenIds long_p = GANTRY__V1__TOKEN_IDS__INIT, third = GANTRY__V1__TOKEN_IDS__INIT;
    long_p.ids = ids;
    long_p.n_ids = 1100;
    third.ids = ids3;
    third.n_ids = 8;
    Gantry__V1__TokenIds *more[2] = {&long_p, &third};
    b.req.more_tokens = more;
    b.req.n_more_tokens = 2;
    char msg[512];
    assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_OUT_OF_RANGE);
    assert_non_null(strstr(msg, "1100"));
    assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  }
  char *m = NULL;
  assert_int_equal(gt_metrics_render(f.reg, &m, NULL, NULL), GT_OK);
  assert_non_null(strstr(m, "gantry_engine_requests_running{model_name=\"tiny\"} 0\n"));
  assert_non_null(strstr(m, "gantry_engine_kv_cache_usage_ratio{model_name=\"tiny\"} 0\n"));
  /* both counted as refused, never as finished (cancelled) requests */
  assert_non_null(strstr(m, "gantry_engine_requests_rejected_total{model_name=\"tiny\",code=\"invalid_argument\"} 2\n"));
  assert_non_null(strstr(m, "gantry_engine_request_success_total{model_name=\"tiny\",finished_reason=\"cancelled\"} 0\n"));
  free(m);
  efx_stop(&f);
}

/* Status codes: INVALID_ARGUMENT (unknown field, bad sampling, empty), OUT_OF_RANGE (too long),
 * RESOURCE_EXHAUSTED (queue full), UNAVAILABLE (draining). */
static void test_status_codes(void **state) {
  (void)state;
  efx_t f;
  sched_config_t cfg = {.max_num_seqs = 1, .max_batch_tokens = 256, .n_ctx = 1024, .max_waiting = 1};
  assert_int_equal(efx_start(&f, MODEL, &cfg), 0);
  char msg[512];
  int32_t ids[1100];
  prompt_ids(ids, 1100, 9);
  reqb_t b;

  reqb_tokens(&b, ids, 10, 4);
  b.sp.temperature = -1;
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "temperature"));
  assert_string_equal(g_param, "sampling.temperature"); /* the field, as trailing metadata */

  reqb_tokens(&b, ids, 10, 4);
  b.sp.top_p_opt_case = GANTRY__V1__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
  b.sp.top_p = 1.5f;
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "top_p"));
  assert_string_equal(g_param, "sampling.top_p");

  reqb_tokens(&b, ids, 10, 4);
  b.req.n = 2; /* more than max_num_seqs 1 (checked by the scheduler) */
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);
  assert_string_equal(g_param, "n");

  reqb_tokens(&b, ids, 1100, 4);
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_OUT_OF_RANGE);
  /* OpenAI's wording, which agents match (tests/e2e/openai.test.mjs cites their patterns) */
  assert_non_null(strstr(msg, "This model's maximum context length is 1024 tokens. However, your prompt resulted in 1100 tokens"));
  assert_string_equal(g_param, ""); /* no one field */

  reqb_tokens(&b, ids, 0, 4);
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);

  reqb_tokens(&b, ids, 10, 4);
  b.ids[3] = 5000; /* outside the vocabulary of 1024 */
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "5000"));
  assert_string_equal(g_param, "tokens");

  /* an unknown field (number 99, varint 1) */
  reqb_tokens(&b, ids, 10, 4);
  uint8_t unk_data[1] = {1};
  ProtobufCMessageUnknownField unk = {.tag = 99, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT, .len = 1, .data = unk_data};
  b.req.base.n_unknown_fields = 1;
  b.req.base.unknown_fields = &unk;
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "99"));

  /* chat with a bad role */
  reqb_chat(&b, "hello", 4);
  b.msg[0].role = "wizard";
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_INVALID_ARGUMENT);

  /* queue full: one running, one waiting, the third is refused */
  reqb_t r1, r2, r3;
  reqb_tokens(&r1, ids, 10, 1000);
  reqb_tokens(&r2, ids + 20, 10, 4);
  reqb_tokens(&r3, ids + 40, 10, 4);
  coll_t c1, c2;
  coll_init(&c1);
  coll_init(&c2);
  assert_int_equal(coll_start(&f, &c1, &r1.req, WAIT_MS), 0);
  assert_true(coll_wait_tokens(&c1, 1, WAIT_MS) >= 1);
  assert_int_equal(coll_start(&f, &c2, &r2.req, WAIT_MS), 0);
  /* wait until the second one is queued in the engine */
  for (int i = 0; i < 20000; i++) {
    Gantry__V1__HealthResponse *h = NULL;
    assert_int_equal(ec_health(f.ec, NULL, &h, NULL), GT_RPC_OK);
    int queued = h->waiting >= 1;
    protobuf_c_message_free_unpacked(&h->base, NULL);
    if (queued || c1.done) break;
  }
  if (!c1.done) {
    assert_int_equal(run_status(&f, &r3.req, msg, sizeof msg), GT_RPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(msg, "queue"));
  } else {
    print_message("the long request finished before the queue check: RESOURCE_EXHAUSTED not checked\n");
  }
  ec_stream_cancel(c1.s);
  assert_true(coll_wait_done(&c1, WAIT_MS));
  assert_true(coll_wait_done(&c2, WAIT_MS));
  assert_int_equal(c2.st.code, GT_RPC_OK);
  coll_destroy(&c1);
  coll_destroy(&c2);

  /* draining: UNAVAILABLE, health DRAINING */
  srv_drain(f.srv);
  reqb_tokens(&b, ids, 10, 4);
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_UNAVAILABLE);
  Gantry__V1__HealthResponse *h = NULL;
  assert_int_equal(ec_health(f.ec, NULL, &h, NULL), GT_RPC_OK);
  assert_int_equal(h->status, GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING);
  protobuf_c_message_free_unpacked(&h->base, NULL);
  efx_stop(&f);
}

/* A prompt whose bytes cannot fit the context is refused before tokenization (issue 15 item 4:
 * a 60 MB prompt used to be tokenized first, holding up other requests), and the engine keeps
 * serving. */
static void test_prompt_bytes_over_context(void **state) {
  (void)state;
  efx_t f;
  sched_config_t cfg = {.max_num_seqs = 2, .max_batch_tokens = 256, .n_ctx = 1024};
  assert_int_equal(efx_start(&f, MODEL, &cfg), 0);
  const size_t n = 8u << 20; /* 8 MiB: more than 1024 tokens of any length */
  char *big = malloc(n + 1);
  for (size_t i = 0; i < n; i++) big[i] = (char)('a' + i % 26);
  big[n] = '\0';
  reqb_t b;
  reqb_prompt(&b, big, 4);
  char msg[512];
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_OUT_OF_RANGE);
  assert_non_null(strstr(msg, "8388608 bytes"));
  assert_non_null(strstr(msg, "maximum context length is 1024 tokens"));
  assert_non_null(strstr(msg, "1024"));
  free(big);
  reqb_prompt(&b, "hello there", 4);
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_OK);
  efx_stop(&f);
}

/* Info, Health, Tokenize, chat + prompt input, /metrics over HTTP. */
static void test_unary_and_metrics(void **state) {
  (void)state;
  efx_t f;
  start(&f, 8, 256, 0);
  Gantry__V1__InfoResponse *info = NULL;
  assert_int_equal(ec_info(f.ec, NULL, &info, NULL), GT_RPC_OK);
  assert_string_equal(info->architecture, "qwen3");
  assert_int_equal(info->context_length, 1024);
  assert_int_equal(info->max_num_seqs, 8);
  assert_true(info->kv_capacity_tokens >= 1024);
  assert_int_equal(info->n_devices, 1);
  assert_string_equal(info->devices[0]->name, "cpu");
  protobuf_c_message_free_unpacked(&info->base, NULL);

  Gantry__V1__HealthResponse *h = NULL;
  assert_int_equal(ec_health(f.ec, NULL, &h, NULL), GT_RPC_OK);
  assert_int_equal(h->status, GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY);
  protobuf_c_message_free_unpacked(&h->base, NULL);

  Gantry__V1__TokenizeRequest tr;
  gantry__v1__tokenize_request__init(&tr);
  tr.input_case = GANTRY__V1__TOKENIZE_REQUEST__INPUT_TEXT;
  tr.text = "hello world";
  Gantry__V1__TokenizeResponse *tk = NULL;
  assert_int_equal(ec_tokenize(f.ec, &tr, NULL, &tk, NULL), GT_RPC_OK);
  int32_t *ref = NULL;
  size_t n_ref = 0;
  assert_int_equal(tok_encode(f.tok, "hello world", 11, 0, &ref, &n_ref, NULL), GT_OK);
  assert_int_equal(tk->n_ids, n_ref);
  assert_int_equal(tk->count, n_ref);
  assert_memory_equal(tk->ids, ref, n_ref * sizeof *ref);
  free(ref);
  protobuf_c_message_free_unpacked(&tk->base, NULL);

  /* chat input: prompt_tokens equal Tokenize(chat, add_generation_prompt) */
  reqb_t b;
  reqb_chat(&b, "Write a haiku.", 6);
  coll_t c;
  coll_init(&c);
  assert_int_equal(coll_start(&f, &c, &b.req, WAIT_MS), 0);
  assert_true(coll_wait_done(&c, WAIT_MS));
  assert_int_equal(c.st.code, GT_RPC_OK);
  assert_true(c.got_final);
  Gantry__V1__TokenizeRequest tc;
  gantry__v1__tokenize_request__init(&tc);
  tc.input_case = GANTRY__V1__TOKENIZE_REQUEST__INPUT_CHAT;
  tc.chat = &b.chat;
  tc.add_generation_prompt = 1;
  assert_int_equal(ec_tokenize(f.ec, &tc, NULL, &tk, NULL), GT_RPC_OK);
  assert_int_equal(c.usage.prompt_tokens, tk->count);
  protobuf_c_message_free_unpacked(&tk->base, NULL);
  coll_destroy(&c);

  /* prompt text input with a stop string present in the output cuts it there */
  reqb_prompt(&b, "The quick brown fox", 12);
  coll_init(&c);
  assert_int_equal(coll_start(&f, &c, &b.req, WAIT_MS), 0);
  assert_true(coll_wait_done(&c, WAIT_MS));
  assert_int_equal(c.st.code, GT_RPC_OK);
  assert_true(c.n_ids >= 1);
  coll_destroy(&c);

  gt_metrics_http_t *http = NULL;
  int mport = 0;
  assert_int_equal(gt_metrics_http_start(f.reg, "127.0.0.1", 0, &mport, &http, NULL), GT_OK);
  char *body = efx_http_get(mport, "/metrics");
  assert_non_null(body);
  assert_non_null(strstr(body, "200 OK"));
  static const char *names[] = {
      "gantry_engine_requests_running{model_name=\"tiny\"} ", "gantry_engine_requests_waiting{model_name=\"tiny\"} ", "gantry_engine_kv_cache_usage_ratio{model_name=\"tiny\"} ",
      "gantry_engine_prefix_cache_queries_total{model_name=\"tiny\"} ", "gantry_engine_prefix_cache_hits_total{model_name=\"tiny\"} ",
      "gantry_engine_prompt_tokens_total{model_name=\"tiny\"} ", "gantry_engine_generation_tokens_total{model_name=\"tiny\"} ", "gantry_engine_preemptions_total{model_name=\"tiny\"} ",
      "gantry_engine_request_success_total{model_name=\"tiny\",finished_reason=\"length\"} ", "gantry_engine_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=",
      "gantry_engine_inter_token_latency_seconds_count{model_name=\"tiny\"} ", "gantry_engine_request_queue_time_seconds_sum{model_name=\"tiny\"} ",
      "gantry_engine_request_prefill_time_seconds_count{model_name=\"tiny\"} ", "gantry_engine_request_decode_time_seconds_count{model_name=\"tiny\"} ",
      "gantry_engine_e2e_request_latency_seconds_count{model_name=\"tiny\"} 2\n", "gantry_engine_iteration_tokens_bucket{model_name=\"tiny\",le=\"+Inf\"} ",
      "gantry_engine_eager_steps_total{model_name=\"tiny\"} 0\n",
      /* speculation is off here: the series exist at 0 (their values: tests/unit/test_sched_spec.c) */
      "gantry_engine_spec_decode_num_drafts_total{model_name=\"tiny\"} 0\n",
      "gantry_engine_spec_decode_num_draft_tokens_total{model_name=\"tiny\"} 0\n",
      "gantry_engine_spec_decode_num_accepted_tokens_total{model_name=\"tiny\"} 0\n",
      "gantry_engine_spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"} 0\n",
      "gantry_engine_spec_decode_num_fill_tokens_total{model_name=\"tiny\"} 0\n",
      "gantry_engine_spec_decode_num_draft_tokens_by_source_total{model_name=\"tiny\",source=\"drafter\"} 0\n",
      "gantry_engine_spec_decode_num_draft_tokens_by_source_total{model_name=\"tiny\",source=\"suffix_cache\"} 0\n",
      "gantry_engine_spec_decode_num_accepted_tokens_by_source_total{model_name=\"tiny\",source=\"mtp_lookup\"} 0\n",
      "gantry_engine_spec_decode_cost_off_steps_total{model_name=\"tiny\"} 0\n"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    if (!strstr(body, names[i])) print_message("missing: %s\n%s\n", names[i], body);
    assert_non_null(strstr(body, names[i]));
  }
  free(body);
  body = efx_http_get(mport, "/nope");
  assert_non_null(body);
  assert_non_null(strstr(body, "404"));
  free(body);
  /* Kubernetes probes on the metrics port (issue 15): /health and /ready, then /ready 503
   * while draining; short bucket bounds */
  body = efx_http_get(mport, "/health");
  assert_non_null(strstr(body, "200 OK"));
  free(body);
  body = efx_http_get(mport, "/ready");
  assert_non_null(strstr(body, "200 OK"));
  assert_non_null(strstr(body, "\"ready\""));
  free(body);
  body = efx_http_get(mport, "/metrics");
  assert_non_null(strstr(body, "gantry_engine_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.005\"}"));
  assert_null(strstr(body, "0000000000"));
  free(body);
  /* grpc.health.v1: SERVING, then NOT_SERVING while draining; unknown service NOT_FOUND */
  Grpc__Health__V1__HealthCheckRequest hq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  ProtobufCMessage *hr = NULL;
  gt_rpc_status_t hs;
  assert_int_equal(gt_rpc_client_unary(ec_rpc(f.ec), "/grpc.health.v1.Health/Check", &hq.base,
                                       &grpc__health__v1__health_check_response__descriptor, 5000, NULL, 0, &hr, &hs),
                   GT_RPC_OK);
  assert_int_equal(((Grpc__Health__V1__HealthCheckResponse *)hr)->status,
                   GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  protobuf_c_message_free_unpacked(hr, NULL);
  hq.service = "nope";
  assert_int_equal(gt_rpc_client_unary(ec_rpc(f.ec), "/grpc.health.v1.Health/Check", &hq.base,
                                       &grpc__health__v1__health_check_response__descriptor, 5000, NULL, 0, &hr, &hs),
                   GT_RPC_NOT_FOUND);
  hq.service = "";
  srv_drain(f.srv);
  assert_int_equal(gt_rpc_client_unary(ec_rpc(f.ec), "/grpc.health.v1.Health/Check", &hq.base,
                                       &grpc__health__v1__health_check_response__descriptor, 5000, NULL, 0, &hr, &hs),
                   GT_RPC_OK);
  assert_int_equal(((Grpc__Health__V1__HealthCheckResponse *)hr)->status,
                   GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
  protobuf_c_message_free_unpacked(hr, NULL);
  body = efx_http_get(mport, "/ready");
  assert_non_null(strstr(body, "503"));
  assert_non_null(strstr(body, "\"draining\""));
  free(body);
  gt_metrics_http_stop(http);
  efx_stop(&f);
}

/* Before the model is attached: LOADING, and Generate / Info answer UNAVAILABLE. */
static void test_loading(void **state) {
  (void)state;
  srv_t *srv = NULL;
  int port = 0;
  gt_err_t err = {0};
  assert_int_equal(srv_create(&(srv_opts_t){.listen = "127.0.0.1:0"}, &srv, &port, &err), GT_OK);
  efx_t f = {0};
  assert_int_equal(efx_connect(&f, port, &err), GT_OK);
  Gantry__V1__HealthResponse *h = NULL;
  assert_int_equal(ec_health(f.ec, NULL, &h, NULL), GT_RPC_OK);
  assert_int_equal(h->status, GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_LOADING);
  protobuf_c_message_free_unpacked(&h->base, NULL);
  Gantry__V1__InfoResponse *info = NULL;
  assert_int_equal(ec_info(f.ec, NULL, &info, NULL), GT_RPC_UNAVAILABLE);
  int32_t ids[4] = {1, 2, 3, 4};
  reqb_t b;
  reqb_tokens(&b, ids, 4, 2);
  char msg[512];
  assert_int_equal(run_status(&f, &b.req, msg, sizeof msg), GT_RPC_UNAVAILABLE);
  assert_non_null(strstr(msg, "loading"));
  assert_int_equal(srv_state(srv), SRV_LOADING);
  ec_close(f.ec);
  srv_free(srv, 1000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loading),
      cmocka_unit_test(test_stream_order_usage),
      cmocka_unit_test(test_concurrent_batch_invariance),
      cmocka_unit_test(test_cancel_frees_kv),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_prefix_cache),
      cmocka_unit_test(test_chunked_prefill_interleaves),
      cmocka_unit_test(test_preemption),
      cmocka_unit_test(test_status_codes),
      cmocka_unit_test(test_prompt_list_fails_half_way),
      cmocka_unit_test(test_prompt_bytes_over_context),
      cmocka_unit_test(test_unary_and_metrics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
