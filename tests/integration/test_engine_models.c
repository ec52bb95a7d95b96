/* tests/integration/test_engine_models.c — the Engine service on the hybrid qwen35-tiny
 * (a second conversation turn reports cached prompt tokens through the recurrent-state
 * snapshot at the first turn's last block boundary) and on the demo code model (a chat
 * request streams text; with prompt-lookup speculation the same request gives the same tokens,
 * and the engine's /metrics counts the drafts). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/common/testutil.h"
#include "tests/integration/engine_fixture.h"

#define WAIT_MS 60000

static const char *SYSTEM =
    "You are a careful assistant. Answer briefly, cite nothing, and keep every answer to one short "
    "sentence. Never use lists. Prefer plain words over jargon, and say so when you do not know.";

static void run(efx_t *f, reqb_t *b, coll_t *c) {
  coll_init(c);
  assert_int_equal(coll_start(f, c, &b->req, WAIT_MS), 0);
  assert_true(coll_wait_done(c, WAIT_MS));
  if (c->st.code != GT_RPC_OK) print_message("status %d: %s\n", (int)c->st.code, c->st.message);
  assert_int_equal(c->st.code, GT_RPC_OK);
  assert_true(c->got_final);
}

static void test_qwen35_second_turn_cached(void **state) {
  (void)state;
  efx_t f;
  sched_config_t cfg = {.max_num_seqs = 4, .max_batch_tokens = 256, .n_ctx = 1024};
  if (efx_start(&f, "qwen35-tiny.bf16.gguf", &cfg)) {
    print_message("qwen35-tiny does not load yet: hybrid case skipped\n");
    skip();
  }
  reqb_t b;
  reqb_chat(&b, "What is the capital of France?", 8);
  gantry__v1__chat_message__init(&b.msg[1]);
  b.msg[1] = b.msg[0];
  b.msg[0].role = "system";
  b.msg[0].content = (char *)SYSTEM;
  b.msgp[1] = &b.msg[1];
  b.chat.n_messages = 2;
  coll_t c1;
  run(&f, &b, &c1);
  assert_int_equal(c1.n_ids, (int)c1.usage.completion_tokens);
  print_message("turn 1: prompt %u cached %u reasoning %u/%u tokens text=[%s] reasoning=[%s]\n", c1.usage.prompt_tokens,
                c1.usage.cached_prompt_tokens, c1.usage.reasoning_tokens, c1.usage.completion_tokens, c1.text, c1.reasoning);
  assert_true(c1.usage.prompt_tokens > 32);
  /* second turn: history + a new question */
  gantry__v1__chat_message__init(&b.msg[2]);
  gantry__v1__chat_message__init(&b.msg[3]);
  b.msg[2].role = "assistant";
  b.msg[2].content = c1.text;
  b.msg[3].role = "user";
  b.msg[3].content = "And of Italy?";
  b.msgp[2] = &b.msg[2];
  b.msgp[3] = &b.msg[3];
  b.chat.n_messages = 4;
  coll_t c2;
  run(&f, &b, &c2);
  print_message("turn 2: prompt %u cached %u\n", c2.usage.prompt_tokens, c2.usage.cached_prompt_tokens);
  assert_true(c2.usage.cached_prompt_tokens > 0);
  assert_int_equal(c2.usage.cached_prompt_tokens % 16, 0);
  assert_true(c2.usage.cached_prompt_tokens <= c1.usage.prompt_tokens);
  coll_destroy(&c1);
  coll_destroy(&c2);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  efx_stop(&f);
}

static void test_demo_chat(void **state) {
  (void)state;
  efx_t f;
  sched_config_t cfg = {.max_num_seqs = 4, .max_batch_tokens = 256, .n_ctx = 1024};
  assert_int_equal(efx_start(&f, "demo/gantry-demo-code-22m.Q4_K_M.gguf", &cfg), 0);
  Gantry__V1__InfoResponse *info = NULL;
  assert_int_equal(ec_info(f.ec, NULL, &info, NULL), GT_RPC_OK);
  assert_string_equal(info->architecture, "qwen3");
  protobuf_c_message_free_unpacked(&info->base, NULL);
  reqb_t b;
  reqb_chat(&b, "Write a Python function that adds two numbers.", 32);
  coll_t c;
  run(&f, &b, &c);
  print_message("demo: %d tokens, finish %d, text: %.120s | reasoning: %.80s\n", c.n_ids, (int)c.finish, c.text, c.reasoning);
  assert_true(c.n_ids > 0);
  assert_true(c.text_len + c.reasoning_len > 0);
  assert_true(c.finish == GANTRY__V1__FINISH_REASON__FINISH_REASON_STOP ||
              c.finish == GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH);
  coll_destroy(&c);
  efx_stop(&f);
}

/* code whose continuation repeats it (prompt lookup accepts most drafts on the demo model) */
static const char *CODE =
    "class Stack:\n"
    "    def __init__(self):\n"
    "        self.items = []\n\n"
    "    def push(self, item):\n"
    "        self.items.append(item)\n\n"
    "    def pop(self):\n"
    "        if not self.items:\n"
    "            raise IndexError(\"pop from empty stack\")\n"
    "        return self.items.pop()\n\n\n"
    "class Queue:\n"
    "    def __init__(self):\n"
    "        self.items = []\n\n"
    "    def push(self, item):\n";

/* A greedy prompt request on an engine with config cfg into c (its stream released, the engine
 * then stopped: c keeps the tokens and text); *body
 * (when not NULL): its /metrics page afterwards (malloc'd). */
static void demo_run(const sched_config_t *cfg, coll_t *c, char **body) {
  efx_t f;
  assert_int_equal(efx_start(&f, "demo/gantry-demo-code-22m.Q4_K_M.gguf", cfg), 0);
  reqb_t b;
  reqb_prompt(&b, CODE, 64);
  run(&f, &b, c);
  coll_destroy(c);
  assert_true(efx_wait_quiet(&f, 0, WAIT_MS));
  if (body) {
    gt_metrics_http_t *http = NULL;
    int mport = 0;
    assert_int_equal(gt_metrics_http_start(f.reg, "127.0.0.1", 0, &mport, &http, NULL), GT_OK);
    *body = efx_http_get(mport, "/metrics");
    gt_metrics_http_stop(http);
  }
  efx_stop(&f);
}

static void test_demo_speculative(void **state) {
  (void)state;
  sched_config_t cfg = {.max_num_seqs = 4, .max_batch_tokens = 256, .n_ctx = 1024};
  coll_t off, on;
  demo_run(&cfg, &off, NULL);
  cfg.spec_mode = SCHED_SPEC_NGRAM;
  cfg.spec_k = 4;
  char *body = NULL;
  demo_run(&cfg, &on, &body);
  print_message("demo speculative: %d tokens, text: %.160s\n", on.n_ids, on.text);
  assert_int_equal(on.n_ids, off.n_ids);
  assert_memory_equal(on.ids, off.ids, sizeof(int32_t) * (size_t)off.n_ids);
  assert_string_equal(on.text, off.text);
  assert_int_equal(on.n_ids, 64);
  assert_non_null(body);
  const char *p = strstr(body, "gantry_engine_spec_decode_num_accepted_tokens_total{model_name=");
  assert_non_null(p);
  p = strchr(p, '}');
  assert_non_null(p);
  assert_true(atof(p + 1) > 0);
  free(body);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen35_second_turn_cached),
      cmocka_unit_test(test_demo_chat),
      cmocka_unit_test(test_demo_speculative),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
