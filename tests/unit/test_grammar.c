/* tests/unit/test_grammar.c — the grammar engine at the byte level: each kind accepts valid
 * texts and rejects invalid ones at the first bad byte; errors name what is unsupported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grammar/grammar.h"
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "tests/common/testutil.h"

static gr_vocab_t *g_vocab; /* qwen3-tiny's: byte tests only need some vocabulary */

static int setup(void **state) {
  gt_err_t err = {0};
  gguf_t *g = NULL;
  tok_t *t = NULL;
  if (gguf_open(tu_golden("qwen3-tiny.bf16.gguf"), &g, &err) != GT_OK) fail_msg("gguf_open: %s", err.msg);
  if (tok_load(g, &t, &err) != GT_OK) fail_msg("tok_load: %s", err.msg);
  gguf_close(g);
  if (gr_vocab_new(t, &g_vocab, &err) != GT_OK) fail_msg("gr_vocab_new: %s", err.msg);
  tok_free(t);
  return 0;
}

static int teardown(void **state) {
  gr_vocab_free(g_vocab);
  return 0;
}

static gr_grammar_t *compile(gr_kind_t kind, const char *spec) {
  gr_grammar_t *g = NULL;
  gt_err_t err = {0};
  int rc = gr_compile(kind, spec, spec ? strlen(spec) : 0, &g, &err);
  if (rc != GT_OK) fail_msg("gr_compile(%s): %s", spec ? spec : "NULL", err.msg);
  return g;
}

/* Feeds text byte by byte: -1 when every byte is taken and the text is a complete match,
 * -2 when every byte is taken but the text is incomplete, else the offset of the first byte
 * refused. */
static long run(const gr_grammar_t *g, const char *text) {
  gr_matcher_t *m = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_matcher_new(g, g_vocab, &m, &err), GT_OK);
  long r = -1;
  size_t n = strlen(text);
  for (size_t i = 0; i < n; i++) {
    if (gr_matcher_accept_bytes(m, text + i, 1) != GT_OK) {
      r = (long)i;
      break;
    }
  }
  if (r == -1 && !gr_matcher_accepting(m)) r = -2;
  gr_matcher_free(m);
  return r;
}

#define ACCEPTS(g, text) \
  do { long r_ = run(g, text); if (r_ != -1) fail_msg("%s: refused at %ld, want accepted", text, r_); } while (0)
#define REFUSES_AT(g, text, at) \
  do { long r_ = run(g, text); if (r_ != (at)) fail_msg("%s: got %ld, want %ld", text, r_, (long)(at)); } while (0)
#define INCOMPLETE(g, text) REFUSES_AT(g, text, -2)

static void test_choice(void **state) {
  gr_grammar_t *g = compile(GR_CHOICE, "[\"yes\", \"no\", \"not sure\", \"caf\\u00e9\"]");
  ACCEPTS(g, "yes");
  ACCEPTS(g, "no");
  ACCEPTS(g, "not sure");
  ACCEPTS(g, "caf\xc3\xa9");
  INCOMPLETE(g, "caf\xc3");
  INCOMPLETE(g, "ye");
  REFUSES_AT(g, "yess", 3);
  REFUSES_AT(g, "maybe", 0);
  REFUSES_AT(g, "no ", 2);
  gr_matcher_t *m = NULL;
  assert_int_equal(gr_matcher_new(g, g_vocab, &m, NULL), GT_OK);
  assert_false(gr_matcher_accepting(m));
  assert_int_equal(gr_matcher_accept_bytes(m, "no", 2), GT_OK);
  assert_true(gr_matcher_accepting(m));
  assert_false(gr_matcher_done(m)); /* "not sure" may continue */
  assert_int_equal(gr_matcher_accept_bytes(m, "t sure", 6), GT_OK);
  assert_true(gr_matcher_done(m));
  assert_int_equal(gr_matcher_accept_bytes(m, "!", 1), GT_EINVAL);
  assert_true(gr_matcher_done(m)); /* state unchanged */
  gr_matcher_reset(m);
  assert_int_equal(gr_matcher_accept_bytes(m, "yes", 3), GT_OK);
  assert_true(gr_matcher_done(m));
  gr_matcher_free(m);
  gr_grammar_free(g);
}

static void test_json_object(void **state) {
  gr_grammar_t *g = compile(GR_JSON_OBJECT, NULL);
  ACCEPTS(g, "{}");
  ACCEPTS(g, "{\"a\":1}");
  ACCEPTS(g, "{ \"a\" : [1, -2.5e+10, {\"b\": null}, \"x\\n\\u00e9\\\"\"],\n  \"c\":true,\"d\":false}");
  ACCEPTS(g, "{\"\xe6\x97\xa5\xe6\x9c\xac\": \"\xf0\x9f\x98\x80\"}");
  ACCEPTS(g, "{\"a\":0.5,\"b\":-0,\"c\":[]}");
  REFUSES_AT(g, "[1]", 0);
  REFUSES_AT(g, " {}", 0);  /* no whitespace around the top-level value */
  REFUSES_AT(g, "{} ", 2);
  REFUSES_AT(g, "{\"a\":}", 5);
  REFUSES_AT(g, "{\"a\" 1}", 5);
  REFUSES_AT(g, "{\"a\":1,}", 7);
  REFUSES_AT(g, "{\"a\":01}", 6);
  REFUSES_AT(g, "{\"a\":tru}", 8);
  REFUSES_AT(g, "{\"a\":\"\x01\"}", 6);  /* control character in a string */
  REFUSES_AT(g, "{\"a\":\"\\x\"}", 7); /* bad escape */
  REFUSES_AT(g, "{\"a\":\"\xc3\x28\"}", 7); /* bad UTF-8 continuation */
  REFUSES_AT(g, "{\"a\":\"\xed\xa0\x80\"}", 7); /* surrogate */
  REFUSES_AT(g, "{\"a\":1}}", 7);
  INCOMPLETE(g, "{\"a\":[1,2");
  /* whitespace is bounded: a newline and at most 20 spaces */
  ACCEPTS(g, "{\n                    \"a\":1}");
  REFUSES_AT(g, "{\n                     \"a\":1}", 22);
  REFUSES_AT(g, "{  \"a\":1}", 2);
  /* numbers are bounded: 16 integer digits */
  ACCEPTS(g, "{\"a\":1234567890123456}");
  REFUSES_AT(g, "{\"a\":12345678901234567}", 21);
  gr_grammar_free(g);
}

static const char *person_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":\"string\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",3,null]},\"minItems\":1,\"maxItems\":3},"
    "\"kind\":{\"const\":\"person\"}},"
    "\"required\":[\"name\",\"kind\"]}";

static void test_schema_object(void **state) {
  gr_grammar_t *g = compile(GR_JSON_SCHEMA, person_schema);
  ACCEPTS(g, "{\"name\":\"Al\",\"kind\":\"person\"}");
  ACCEPTS(g, "{\"name\":\"Al\",\"age\":-3,\"email\":\"x@y\",\"tags\":[\"a\",3,null],\"kind\":\"person\"}");
  ACCEPTS(g, "{ \"name\" : \"Al\" , \"tags\" : [ \"b\" ] , \"kind\" : \"person\" }");
  REFUSES_AT(g, "{\"kind\":\"person\"}", 2);             /* name is required and first */
  REFUSES_AT(g, "{\"name\":\"\",", 9);                   /* minLength 1 */
  REFUSES_AT(g, "{\"name\":\"abcdefghi\"", 17);          /* maxLength 8 */
  REFUSES_AT(g, "{\"name\":\"Al\",\"tags\":[],", 21);     /* minItems 1 */
  REFUSES_AT(g, "{\"name\":\"Al\",\"tags\":[3,3,3,3", 26); /* maxItems 3 */
  REFUSES_AT(g, "{\"name\":\"Al\",\"tags\":[4", 21);       /* enum */
  REFUSES_AT(g, "{\"name\":\"Al\",\"age\":1.5", 20);       /* integer */
  REFUSES_AT(g, "{\"name\":\"Al\",\"kind\":\"person\",\"age\":1}", 28); /* schema order */
  REFUSES_AT(g, "{\"name\":\"Al\",\"x\":1", 14);         /* additionalProperties false for generation */
  REFUSES_AT(g, "{\"name\":\"Al\"}", 12);                /* kind missing */
  gr_grammar_free(g);
}

/* every optional: no dangling commas, any subset in order */
static void test_schema_optional(void **state) {
  gr_grammar_t *g = compile(GR_JSON_SCHEMA,
                            "{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},"
                            "\"c\":{\"type\":[\"number\",\"string\"]}}}");
  ACCEPTS(g, "{}");
  ACCEPTS(g, "{\"a\":true}");
  ACCEPTS(g, "{\"b\":null}");
  ACCEPTS(g, "{\"c\":\"s\"}");
  ACCEPTS(g, "{\"c\":2.5}");
  ACCEPTS(g, "{\"a\":false,\"c\":1}");
  ACCEPTS(g, "{\"a\":false,\"b\":null,\"c\":1e5}");
  REFUSES_AT(g, "{,", 1);
  REFUSES_AT(g, "{\"a\":true,}", 10);
  REFUSES_AT(g, "{\"c\":1,\"a\":true}", 6);
  REFUSES_AT(g, "{\"c\":null", 5);
  gr_grammar_free(g);
}

static void test_schema_ref_anyof(void **state) {
  /* a recursive tree through $defs, and anyOf of two object shapes */
  gr_grammar_t *g = compile(GR_JSON_SCHEMA,
                            "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\","
                            "\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
                            "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}}}");
  ACCEPTS(g, "{\"v\":1}");
  ACCEPTS(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}");
  REFUSES_AT(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"kids\"", 25);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA,
              "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"cat\":{\"type\":\"string\"}},\"required\":[\"cat\"]},"
              "{\"type\":\"object\",\"properties\":{\"dog\":{\"type\":\"integer\"}},\"required\":[\"dog\"]},"
              "{\"type\":\"null\"}],\"definitions\":{}}");
  ACCEPTS(g, "{\"cat\":\"tom\"}");
  ACCEPTS(g, "{\"dog\":7}");
  ACCEPTS(g, "null");
  REFUSES_AT(g, "{\"cat\":7}", 7);
  REFUSES_AT(g, "{\"dog\":\"x\"}", 7);
  REFUSES_AT(g, "{\"cow\":1}", 3);
  gr_grammar_free(g);
  /* oneOf as anyOf, definitions, a pointer with an escaped "/" */
  g = compile(GR_JSON_SCHEMA,
              "{\"oneOf\":[{\"$ref\":\"#/definitions/a~1b\"},{\"type\":\"boolean\"}],"
              "\"definitions\":{\"a/b\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":2}}}");
  ACCEPTS(g, "[1,2]");
  ACCEPTS(g, "true");
  REFUSES_AT(g, "[1,2,", 4);
  gr_grammar_free(g);
}

static void expect_error(gr_kind_t kind, const char *spec, int code, const char *needle) {
  gr_grammar_t *g = (gr_grammar_t *)1;
  gt_err_t err = {0};
  int rc = gr_compile(kind, spec, spec ? strlen(spec) : 0, &g, &err);
  if (rc != code) fail_msg("%s: rc %d (%s), want %d", spec, rc, err.msg, code);
  assert_null(g);
  if (!strstr(err.msg, needle)) fail_msg("%s: message \"%s\" does not name \"%s\"", spec, err.msg, needle);
}

static void test_errors(void **state) {
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"a+\"}", GT_EUNSUPPORTED, "\"pattern\"");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\"}", GT_EUNSUPPORTED, "\"format\"");
  expect_error(GR_JSON_SCHEMA, "{\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":0}}}", GT_EUNSUPPORTED,
               "\"minimum\"");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true}", GT_EUNSUPPORTED, "\"uniqueItems\"");
  expect_error(GR_JSON_SCHEMA, "{\"allOf\":[{},{}]}", GT_EUNSUPPORTED, "allOf");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"array\",\"maxItems\":100000}", GT_ERANGE, "maxItems");
  expect_error(GR_JSON_SCHEMA, "{\"$ref\":\"#/$defs/missing\"}", GT_EINVAL, "#/$defs/missing");
  expect_error(GR_JSON_SCHEMA, "{\"$ref\":\"http://x/y.json\"}", GT_EINVAL, "http://x/y.json");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"strin\"}", GT_EINVAL, "strin");
  expect_error(GR_JSON_SCHEMA, "{\"type\":", GT_EINVAL, "invalid JSON");
  expect_error(GR_JSON_SCHEMA, "{\"additionalProperties\":false,\"required\":[\"x\"]}", GT_EINVAL, "\"x\"");
  expect_error(GR_CHOICE, "[]", GT_EINVAL, "non-empty");
  expect_error(GR_CHOICE, "[\"a\", 1]", GT_EINVAL, "element 1");
  expect_error(GR_CHOICE, "\"a\"", GT_EINVAL, "array");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_choice),
    cmocka_unit_test(test_json_object),
    cmocka_unit_test(test_schema_object),
    cmocka_unit_test(test_schema_optional),
    cmocka_unit_test(test_schema_ref_anyof),
    cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
