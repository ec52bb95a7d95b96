/* tests/unit/test_grpc_delta.c — GenerateResponse builders and the delta merge function
 * (no network): merged content equals the concatenation, finals never merge, and messages
 * survive a pack/unpack round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/grpc_delta.h"

static void test_merge_tokens_text(void **state) {
  (void)state;
  gt_genresp_t *a = gt_delta_new(), *b = gt_delta_new();
  assert_int_equal(gt_delta_add_token(a, 1, "Hel", NULL), 0);
  assert_int_equal(gt_delta_add_token(a, 2, "lo", "r1"), 0);
  assert_int_equal(gt_delta_add_token(b, 3, " world", NULL), 0);
  assert_int_equal(gt_delta_add_token(b, 4, NULL, "r2"), 0);
  assert_int_equal(gt_delta_merge(NULL, &a->base, &b->base), 1);
  gt_genresp_free(b); /* what the glue does after a merge */
  assert_int_equal(a->delta->n_token_ids, 4);
  for (int i = 0; i < 4; i++) assert_int_equal(a->delta->token_ids[i], i + 1);
  assert_string_equal(a->delta->text, "Hello world");
  assert_string_equal(a->delta->reasoning_text, "r1r2");
  gt_genresp_free(a);
}

static void test_merge_tool_calls(void **state) {
  (void)state;
  gt_genresp_t *a = gt_delta_new(), *b = gt_delta_new(), *c = gt_delta_new();
  assert_int_equal(gt_delta_add_tool_call(a, 0, "call_1", "get_weather", "{\"ci"), 0);
  assert_int_equal(gt_delta_add_tool_call(b, 0, NULL, NULL, "ty\": \"Paris\"}"), 0);
  assert_int_equal(gt_delta_add_tool_call(b, 1, "call_2", "get_time", "{}"), 0);
  assert_int_equal(gt_delta_add_tool_call(c, 1, NULL, NULL, ""), 0);
  assert_int_equal(gt_delta_merge(NULL, &a->base, &b->base), 1);
  gt_genresp_free(b);
  assert_int_equal(gt_delta_merge(NULL, &a->base, &c->base), 1);
  gt_genresp_free(c);
  Gantry__V1__Delta *d = a->delta;
  assert_int_equal(d->n_tool_calls, 2);
  assert_string_equal(d->tool_calls[0]->id, "call_1");
  assert_string_equal(d->tool_calls[0]->name, "get_weather");
  assert_string_equal(d->tool_calls[0]->arguments, "{\"city\": \"Paris\"}");
  assert_int_equal(d->tool_calls[1]->index, 1);
  assert_string_equal(d->tool_calls[1]->arguments, "{}");
  gt_genresp_free(a);
}

static void test_final_never_merges(void **state) {
  (void)state;
  gt_genresp_t *a = gt_delta_new();
  gt_genresp_t *f = gt_final_new(GANTRY__V1__FINISH_REASON__FINISH_REASON_ERROR, "boom");
  assert_non_null(f);
  assert_int_equal(gt_delta_merge(NULL, &a->base, &f->base), 0);
  assert_int_equal(gt_delta_merge(NULL, &f->base, &a->base), 0);
  assert_string_equal(f->final->error, "boom");
  gt_genresp_free(a);
  gt_genresp_free(f);
}

/* n > 1: deltas of different choices stay apart (their text must not mix) */
static void test_other_choice_never_merges(void **state) {
  (void)state;
  gt_genresp_t *a = gt_delta_new(), *b = gt_delta_new();
  assert_int_equal(gt_delta_add_token(a, 1, "x", NULL), 0);
  assert_int_equal(gt_delta_add_token(b, 2, "y", NULL), 0);
  b->delta->index = 1;
  assert_int_equal(gt_delta_merge(NULL, &a->base, &b->base), 0);
  assert_string_equal(a->delta->text, "x");
  a->delta->index = 1;
  assert_int_equal(gt_delta_merge(NULL, &a->base, &b->base), 1);
  assert_string_equal(a->delta->text, "xy");
  gt_genresp_free(a);
  gt_genresp_free(b);
}

static void test_round_trip(void **state) {
  (void)state;
  gt_genresp_t *a = gt_delta_new();
  for (int i = 0; i < 100; i++) assert_int_equal(gt_delta_add_token(a, i, "x", NULL), 0);
  size_t n = protobuf_c_message_get_packed_size(&a->base);
  uint8_t *buf = malloc(n);
  protobuf_c_message_pack(&a->base, buf);
  gt_genresp_t *b = gantry__v1__generate_response__unpack(NULL, n, buf);
  assert_non_null(b);
  assert_int_equal(b->kind_case, GANTRY__V1__GENERATE_RESPONSE__KIND_DELTA);
  assert_int_equal(b->delta->n_token_ids, 100);
  assert_int_equal(b->delta->token_ids[99], 99);
  assert_int_equal(strlen(b->delta->text), 100);
  free(buf);
  gt_genresp_free(a);
  gt_genresp_free(b);
  gt_genresp_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_merge_tokens_text),
      cmocka_unit_test(test_merge_tool_calls),
      cmocka_unit_test(test_final_never_merges),
      cmocka_unit_test(test_other_choice_never_merges),
      cmocka_unit_test(test_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
