/* tests/integration/test_engine_models.c — the Engine service on the hybrid qwen35-tiny
 * (a second conversation turn reports cached prompt tokens through the recurrent-state
 * snapshot at the first turn's last block boundary) and on the demo code model (a chat
 * request streams text). */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen35_second_turn_cached),
      cmocka_unit_test(test_demo_chat),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
