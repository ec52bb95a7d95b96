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
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/grammar/gr_internal.h"
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
  ACCEPTS(g, "{\"a\":\"\\u00e9\\u0001\\uFFFF\\uD7ff\\ue000\\u1000\\u0100\\u0010\"}");
  REFUSES_AT(g, "{\"a\":\"\\ud800\"}", 9);  /* surrogates: strict parsers refuse them */
  REFUSES_AT(g, "{\"a\":\"\\uDfff\"}", 9);
  REFUSES_AT(g, "{\"a\":\"\\u0000\"}", 11); /* NUL */
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

/* pattern: the text (JSON-escaped inside the quotes) matches as a whole; formats */
static void test_schema_pattern_format(void **state) {
  gr_grammar_t *g = compile(GR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^[a-z]+\\\"\\\\d\\\\\\\\$\"}");
  ACCEPTS(g, "\"ab\\\"1\\\\\"");     /* text ab"1\ written "ab\"1\\" */
  REFUSES_AT(g, "\"ab\"", 3);            /* a raw quote would end the string */
  INCOMPLETE(g, "\"ab\\\"1\\\\");
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"pattern\":\"\\\\n[^a]\\\\u00e9?\"}");
  ACCEPTS(g, "\"\\n\\t\"");              /* a newline then a tab, both escaped */
  ACCEPTS(g, "\"\\nb\xc3\xa9\"");
  ACCEPTS(g, "\"\\n\\u0001\"");
  REFUSES_AT(g, "\"\n", 1);                /* raw control characters never */
  REFUSES_AT(g, "\"\\n\\u0000", 8);       /* nor NUL */
  REFUSES_AT(g, "\"\\na", 3);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},"
                              "\"t\":{\"format\":\"date-time\"},\"u\":{\"format\":\"uuid\"},\"i\":{\"format\":\"ipv4\"},"
                              "\"e\":{\"format\":\"email\"}}}");
  ACCEPTS(g, "{\"d\":\"2024-02-28\",\"t\":\"2024-12-31T23:59:59.5+05:30\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\","
             "\"i\":\"192.168.0.255\",\"e\":\"a.b@c-d.example.org\"}");
  REFUSES_AT(g, "{\"d\":\"2024-02-30", 14);
  REFUSES_AT(g, "{\"d\":\"2024-13", 12);
  REFUSES_AT(g, "{\"t\":\"2024-01-01T24", 18);
  REFUSES_AT(g, "{\"t\":\"2024-01-01T10:00:00\"", 25); /* a zone is required */
  REFUSES_AT(g, "{\"i\":\"256", 8);
  REFUSES_AT(g, "{\"e\":\"@", 6);
  gr_grammar_free(g);
}

/* gr_int_range_regex against PCRE2 for every integer around each range (and leading zeros) */
static void test_int_range_regex(void **state) {
  static const long long cases[][2] = {{0, 0}, {5, 123}, {-123, -5}, {-45, 1000}, {1, 9}, {10, 99}, {0, 100000},
                                       {-1, 1}, {7, 7}, {-1000, -1000}, {999, 1001}, {12, 34567}, {-9999, 9999}};
  char re[4096], full[4200], s[40];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    long long lo = cases[c][0], hi = cases[c][1];
    assert_true(gr_int_range_regex(lo, hi, re, sizeof re) > 0);
    snprintf(full, sizeof full, "^(?:%s)$", re);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)full, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    assert_non_null(code);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    for (long long v = lo - 1200; v <= hi + 1200; v++) {
      int k = snprintf(s, sizeof s, "%lld", v);
      int m = pcre2_match(code, (PCRE2_SPTR)s, (size_t)k, 0, 0, md, NULL) >= 0;
      if (m != (v >= lo && v <= hi)) fail_msg("[%lld, %lld]: %lld matched %d (%s)", lo, hi, v, m, re);
      k = snprintf(s, sizeof s, "0%lld", v < 0 ? -v : v);
      assert_true(pcre2_match(code, (PCRE2_SPTR)s, (size_t)k, 0, 0, md, NULL) < 0);
    }
    pcre2_match_data_free(md);
    pcre2_code_free(code);
  }
  assert_int_equal(gr_int_range_regex(2, 1, re, sizeof re), -1);
  assert_int_equal(gr_int_range_regex(-9999999999999999LL, 9999999999999999LL, re, 8), -1); /* too small */
}

/* minimum/maximum and their exclusive forms (draft 6 numbers, draft 4 booleans) */
static void test_schema_bounds(void **state) {
  gr_grammar_t *g = compile(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":1,\"maximum\":100}");
  ACCEPTS(g, "1");
  ACCEPTS(g, "57");
  ACCEPTS(g, "100");
  REFUSES_AT(g, "0", 0);
  REFUSES_AT(g, "101", 2);
  REFUSES_AT(g, "-1", 0);
  REFUSES_AT(g, "1.5", 1);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":-5.5,\"exclusiveMaximum\":5}");
  ACCEPTS(g, "-5");
  ACCEPTS(g, "0");
  ACCEPTS(g, "4");
  REFUSES_AT(g, "-6", 1);
  REFUSES_AT(g, "5", 0);
  REFUSES_AT(g, "-0", 1);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}");
  ACCEPTS(g, "1");
  ACCEPTS(g, "9999999999999999");
  REFUSES_AT(g, "0", 0);
  REFUSES_AT(g, "-", 0);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":10}");
  INCOMPLETE(g, "9");
  ACCEPTS(g, "90");
  ACCEPTS(g, "10");
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0}");
  ACCEPTS(g, "0.5");
  ACCEPTS(g, "12e-3");
  REFUSES_AT(g, "-1", 0);
  gr_grammar_free(g);
}

/* What Zod's toJSONSchema and Pydantic emit (issue 27 item 5): number bounds (non-integer
 * numbers, exclusive bounds), multipleOf on integers, tuples (prefixItems), min/maxProperties,
 * records (additionalProperties / patternProperties), format with a pattern (Zod's email). */
static void test_schema_zod_pydantic(void **state) {
  gr_grammar_t *g = compile(GR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}"); /* z.number().min(0).max(1) */
  ACCEPTS(g, "0");
  ACCEPTS(g, "0.5");
  ACCEPTS(g, "0.999");
  ACCEPTS(g, "1");
  ACCEPTS(g, "1.00");
  REFUSES_AT(g, "1.5", 2);
  REFUSES_AT(g, "2", 0);
  REFUSES_AT(g, "-0.1", 0);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"number\",\"exclusiveMinimum\":0}"); /* z.number().positive(), gt=0 */
  ACCEPTS(g, "0.1");
  ACCEPTS(g, "5");
  ACCEPTS(g, "123.4");
  INCOMPLETE(g, "0");
  INCOMPLETE(g, "0.00");
  REFUSES_AT(g, "-1", 0);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":-1,\"exclusiveMaximum\":1}");
  ACCEPTS(g, "-1");
  ACCEPTS(g, "-0.5");
  ACCEPTS(g, "0");
  ACCEPTS(g, "0.25");
  REFUSES_AT(g, "-1.5", 3);
  REFUSES_AT(g, "1", 0);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"number\",\"exclusiveMaximum\":0}"); /* z.number().negative() */
  ACCEPTS(g, "-3.5");
  ACCEPTS(g, "-0.1");
  INCOMPLETE(g, "-0");
  REFUSES_AT(g, "0", 0);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0.5,\"maximum\":10.5}"); /* tightened to [1, 10] */
  ACCEPTS(g, "1");
  ACCEPTS(g, "9.75");
  ACCEPTS(g, "10");
  REFUSES_AT(g, "10.5", 3);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"multipleOf\":3}");
  ACCEPTS(g, "0");
  ACCEPTS(g, "3");
  ACCEPTS(g, "12");
  ACCEPTS(g, "-9");
  ACCEPTS(g, "300");
  INCOMPLETE(g, "10");
  REFUSES_AT(g, "01", 1);
  gr_grammar_free(g);
  /* z.tuple([z.string(), z.number()]) / Tuple[str, int]: exactly the prefix */
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
                              "\"minItems\":2,\"maxItems\":2}");
  ACCEPTS(g, "[\"a\",1]");
  ACCEPTS(g, "[ \"a\" , 1 ]");
  REFUSES_AT(g, "[1", 1);
  REFUSES_AT(g, "[\"a\",1,", 6);
  gr_grammar_free(g);
  /* a tuple with rest items: z.tuple([z.string()]).rest(z.number()) */
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"}}");
  ACCEPTS(g, "[\"a\"]");
  ACCEPTS(g, "[\"a\",1,2]");
  REFUSES_AT(g, "[\"a\",\"b", 5);
  gr_grammar_free(g);
  /* min/maxProperties over known properties: the first optional ones are written */
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
                              "\"c\":{\"type\":\"integer\"}},\"minProperties\":2,\"maxProperties\":2}");
  ACCEPTS(g, "{\"a\":1,\"b\":2}");
  REFUSES_AT(g, "{\"a\":1}", 6);
  REFUSES_AT(g, "{\"c", 2);
  gr_grammar_free(g);
  /* z.record(z.string(), z.number()) */
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\"},"
                              "\"additionalProperties\":{\"type\":\"number\"},\"maxProperties\":2}");
  ACCEPTS(g, "{}");
  ACCEPTS(g, "{\"x\":1,\"y\":2.5}");
  REFUSES_AT(g, "{\"x\":\"", 5);
  REFUSES_AT(g, "{\"x\":1,\"y\":2,", 12);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"object\",\"patternProperties\":{\"^[a-z]+$\":{\"type\":\"integer\"}}}");
  ACCEPTS(g, "{\"ab\":1,\"c\":2}");
  REFUSES_AT(g, "{\"A", 2);
  gr_grammar_free(g);
  /* z.string().email(): format with Zod's pattern, which has lookaheads: the format's regex */
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"email\",\"pattern\":"
                              "\"^(?!\\\\.)(?!.*\\\\.\\\\.)([A-Za-z0-9_'+\\\\-\\\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\\\-]*\\\\.)+[A-Za-z]{2,}$\"}");
  ACCEPTS(g, "\"a.b@c.io\"");
  REFUSES_AT(g, "\"a%", 2); /* not in Zod's pattern */
  gr_grammar_free(g);
  /* a pattern without lookaround wins over the format */
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^[0-9]{3}$\"}");
  ACCEPTS(g, "\"123\"");
  REFUSES_AT(g, "\"1234", 4);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}");
  ACCEPTS(g, "[7]");
  REFUSES_AT(g, "[7,", 2);
  gr_grammar_free(g);
}

/* enum/const next to a type all their values have; selectors next to annotations */
static void test_schema_typed_enum(void **state) {
  gr_grammar_t *g = compile(GR_JSON_SCHEMA, "{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null],"
                                            "\"title\":\"t\",\"description\":\"d\"}");
  ACCEPTS(g, "\"a\"");
  ACCEPTS(g, "null");
  REFUSES_AT(g, "\"b\"", 1);
  gr_grammar_free(g);
  g = compile(GR_JSON_SCHEMA, "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"default\":null,\"title\":\"x\"}");
  ACCEPTS(g, "-12");
  ACCEPTS(g, "null");
  REFUSES_AT(g, "1.", 1);
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

static void test_regex(void **state) {
  gr_grammar_t *g = compile(GR_REGEX, "^\\d{3}-[A-Z]{2,3}(x|yz)?$");
  ACCEPTS(g, "123-AB");
  ACCEPTS(g, "123-ABCx");
  ACCEPTS(g, "000-ZZyz");
  INCOMPLETE(g, "123-A");
  REFUSES_AT(g, "12a", 2);
  REFUSES_AT(g, "123-ABCD", 7);
  INCOMPLETE(g, "123-ABy");
  REFUSES_AT(g, "123-ABz", 6);
  REFUSES_AT(g, "123-ABxx", 7);
  gr_grammar_free(g);
  /* classes: negation, ranges, escapes inside, non-ASCII; dot; \w \s */
  g = compile(GR_REGEX, "[^a-c\\d]+\\.[\\w\\-]*\\s\u00e9.");
  ACCEPTS(g, "xyz.a_-9 \xc3\xa9\xe6\x97\xa5");
  ACCEPTS(g, "\xc3\xa0.\t\xc3\xa9!");
  REFUSES_AT(g, "a", 0);
  REFUSES_AT(g, "5", 0);
  REFUSES_AT(g, "x.a b", 4); /* [\w-]* then \s then é: b is refused */
  REFUSES_AT(g, "x.a \xc3\xa9\n", 6); /* . is not a newline */
  INCOMPLETE(g, "x. \xc3\xa9\xf0\x9f");
  gr_grammar_free(g);
  /* alternation, groups, nested and lazy quantifiers, braces that are literals, escapes */
  g = compile(GR_REGEX, "(?:ab|a)+?c{2}|x{,}\\{\\}|(?<n>\\x41\\u0042\\u{1F600})|(a*)*z");
  ACCEPTS(g, "ababacc");
  ACCEPTS(g, "acc");
  ACCEPTS(g, "x{,}{}");
  ACCEPTS(g, "AB\xf0\x9f\x98\x80");
  ACCEPTS(g, "z");
  ACCEPTS(g, "aaaz");
  REFUSES_AT(g, "abbcc", 2);
  REFUSES_AT(g, "accc", 3);
  gr_grammar_free(g);
  g = compile(GR_REGEX, "");
  ACCEPTS(g, "");
  REFUSES_AT(g, "a", 0);
  gr_grammar_free(g);
  g = compile(GR_REGEX, "a{2,4}");
  INCOMPLETE(g, "a");
  ACCEPTS(g, "aa");
  ACCEPTS(g, "aaaa");
  REFUSES_AT(g, "aaaaa", 4);
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
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", GT_EUNSUPPORTED,
               "json schema pattern: lookaround");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"(a\"}", GT_EINVAL, "json schema pattern: missing )");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", GT_EUNSUPPORTED,
               "\"pattern\" combined with minLength/maxLength");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"hostname\"}", GT_EUNSUPPORTED,
               "format \"hostname\"");
  expect_error(GR_JSON_SCHEMA, "{\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":0.2,\"maximum\":0.8}}}",
               GT_EUNSUPPORTED, "no number between integer bounds");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"multipleOf\":2,\"minimum\":0}", GT_EUNSUPPORTED, "\"multipleOf\"");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"number\",\"multipleOf\":0.01}", GT_EUNSUPPORTED, "multipleOf");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{}},\"maxProperties\":0,\"required\":[\"a\"]}",
               GT_EUNSUPPORTED, "maxProperties");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{}},\"patternProperties\":{\"x\":{}}}",
               GT_EUNSUPPORTED, "patternProperties");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"a\"}}", GT_EUNSUPPORTED, "propertyNames");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":1e20}", GT_ERANGE, "16 digits");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":3,\"maximum\":2.5}", GT_EINVAL, "no integer");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true}", GT_EUNSUPPORTED, "\"uniqueItems\"");
  expect_error(GR_JSON_SCHEMA, "{\"allOf\":[{},{}]}", GT_EUNSUPPORTED, "allOf");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"array\",\"maxItems\":100000}", GT_ERANGE, "maxItems");
  expect_error(GR_JSON_SCHEMA, "{\"$ref\":\"#/$defs/missing\"}", GT_EINVAL, "#/$defs/missing");
  expect_error(GR_JSON_SCHEMA, "{\"$ref\":\"http://x/y.json\"}", GT_EINVAL, "http://x/y.json");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"strin\"}", GT_EINVAL, "strin");
  expect_error(GR_JSON_SCHEMA, "{\"type\":", GT_EINVAL, "invalid JSON");
  expect_error(GR_JSON_SCHEMA, "{\"additionalProperties\":false,\"required\":[\"x\"]}", GT_EINVAL, "\"x\"");
  expect_error(GR_REGEX, "a(?=b)", GT_EUNSUPPORTED, "lookaround");
  expect_error(GR_REGEX, "(a)\\1", GT_EUNSUPPORTED, "backreference");
  expect_error(GR_REGEX, "\\bword", GT_EUNSUPPORTED, "\\b");
  expect_error(GR_REGEX, "\\p{L}", GT_EUNSUPPORTED, "\\p");
  expect_error(GR_REGEX, "a^b", GT_EUNSUPPORTED, "anchor");
  expect_error(GR_REGEX, "(ab", GT_EINVAL, "missing )");
  expect_error(GR_REGEX, "ab)", GT_EINVAL, "unmatched )");
  expect_error(GR_REGEX, "[a-", GT_EINVAL, "unterminated");
  expect_error(GR_REGEX, "[z-a]", GT_EINVAL, "bad range");
  expect_error(GR_REGEX, "*a", GT_EINVAL, "nothing to repeat");
  expect_error(GR_REGEX, "a{2000}", GT_ERANGE, "1024");
  expect_error(GR_REGEX, "a{3,2}", GT_EINVAL, "n < m");
  expect_error(GR_REGEX, "\\xZZ", GT_EINVAL, "hex");
  /* selectors next to constraints would drop the constraints: refused, not ignored */
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"object\",\"required\":[\"a\"],\"anyOf\":[{\"required\":[\"b\"]}]}",
               GT_EUNSUPPORTED, "\"anyOf\" combined with \"");
  expect_error(GR_JSON_SCHEMA, "{\"enum\":[1],\"const\":1}", GT_EUNSUPPORTED, "combined with");
  expect_error(GR_JSON_SCHEMA, "{\"$ref\":\"#\",\"items\":{}}", GT_EUNSUPPORTED, "\"$ref\" combined with \"items\"");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"string\",\"enum\":[\"a\",2]}", GT_EINVAL, "type");
  expect_error(GR_JSON_SCHEMA, "{\"type\":\"integer\",\"const\":\"1\"}", GT_EINVAL, "type");
  expect_error(GR_CHOICE, "[]", GT_EINVAL, "non-empty");
  expect_error(GR_CHOICE, "[\"a\", 1]", GT_EINVAL, "element 1");
  expect_error(GR_CHOICE, "\"a\"", GT_EINVAL, "array");
}

/* Mutated specs (byte flips, insertions, cuts from structural alphabets) either compile or fail
 * with a message; compiled ones run random bytes and masks. Under ASan this is the memory-safety
 * check for hostile specs. */
static void test_mutated_specs(void **state) {
  static const char *seeds[][2] = {
    {"s", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},"
          "\"maxItems\":3},\"b\":{\"enum\":[1,\"x\",null]},\"c\":{\"anyOf\":[{\"type\":\"string\","
          "\"maxLength\":3},{\"type\":\"number\"}]}},\"required\":[\"b\"]}"},
    {"r", "^(?:[a-z\\d_]{1,5}|\\x41+?)*@(\\w|[^\\s\\]])\\.(com|org){0,2}$"},
    {"c", "[\"yes\",\"no\",\"\\u00e9\"]"},
  };
  static const char alpha_s[] = "{}[]\":,0123456789-.eE#/$tfnul\\ \x80\xff";
  static const char alpha_r[] = "()[]{}|?*+^$\\.-,0123456789dwsDWSxu:<>=!ab\x80\xc3";
  uint32_t *mask = malloc(gr_mask_words(g_vocab) * sizeof *mask);
  uint64_t r = 88172645463325252ULL;
  int compiled = 0, refused = 0;
  for (int it = 0; it < 3000; it++) {
    size_t k = (size_t)it % 3;
    const char *seed = seeds[k][1];
    const char *alpha = seeds[k][0][0] == 'r' ? alpha_r : alpha_s;
    size_t na = strlen(alpha);
    char buf[512];
    size_t n = strlen(seed);
    memcpy(buf, seed, n);
    int muts = 1 + (int)(it % 4);
    for (int q = 0; q < muts; q++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      size_t pos = n ? (size_t)(r >> 8) % n : 0;
      switch (r % 3) {
      case 0: if (n) buf[pos] = alpha[(r >> 40) % na]; break;
      case 1: if (n + 1 < sizeof buf) { memmove(buf + pos + 1, buf + pos, n - pos); buf[pos] = alpha[(r >> 40) % na]; n++; } break;
      default: if (n) { memmove(buf + pos, buf + pos + 1, n - pos - 1); n--; } break;
      }
    }
    gr_kind_t kind = seeds[k][0][0] == 's' ? GR_JSON_SCHEMA : seeds[k][0][0] == 'r' ? GR_REGEX : GR_CHOICE;
    gr_grammar_t *g = NULL;
    gt_err_t err = {0};
    int rc = gr_compile(kind, buf, n, &g, &err);
    if (rc != GT_OK) {
      assert_null(g);
      assert_true(rc < 0 && err.msg[0] != 0);
      refused++;
      continue;
    }
    compiled++;
    gr_matcher_t *m = NULL;
    rc = gr_matcher_new(g, g_vocab, &m, &err);
    if (rc == GT_OK) {
      for (int step = 0; step < 40; step++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        char b = (char)(r >> 24);
        gr_matcher_accept_bytes(m, &b, 1);
        if (step % 10 == 0) assert_true(gr_matcher_fill_mask(m, mask) >= 0);
      }
      gr_matcher_free(m);
    } else { /* e.g. an empty negated class */
      assert_int_equal(rc, GT_EINVAL);
      assert_non_null(strstr(err.msg, "matches nothing"));
    }
    gr_grammar_free(g);
  }
  free(mask);
  print_message("mutated specs: %d compiled, %d refused\n", compiled, refused);
  /* both outcomes happen, or the loop tested nothing */
  assert_true(compiled > 100 && refused > 100);
}

/* A grammar with more states than a cache holds: GT_ERANGE, the matcher unchanged and usable. */
static void test_state_limit(void **state) {
  gr_grammar_t *g = compile(GR_REGEX, "(a{300}){300}b"); /* 90,000 counting states */
  gr_matcher_t *m = NULL;
  assert_int_equal(gr_matcher_new(g, g_vocab, &m, NULL), GT_OK);
  size_t n = 90000;
  char *as = malloc(n);
  memset(as, 'a', n);
  assert_int_equal(gr_matcher_accept_bytes(m, as, n), GT_ERANGE);
  assert_int_equal(gr_matcher_accept_bytes(m, "aa", 2), GT_OK); /* from the start: still there */
  assert_int_equal(gr_matcher_accept_bytes(m, "b", 1), GT_EINVAL);
  uint32_t *mask = malloc(gr_mask_words(g_vocab) * sizeof *mask);
  int rc = gr_matcher_fill_mask(m, mask);
  assert_true(rc > 0 || rc == GT_ERANGE);
  free(mask);
  free(as);
  gr_matcher_free(m);
  gr_grammar_free(g);
}

/* gr_cache_new_limited: a cache of 50 states refuses the 51st (GT_ERANGE) and says it is full from
 * then on; its other matchers still walk the states it holds; a new cache starts empty. */
static void test_cache_limited_full(void **state) {
  gr_grammar_t *g = compile(GR_REGEX, "a{200}b");
  gr_cache_t *c = NULL;
  gr_matcher_t *m = NULL, *m2 = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_cache_new_limited(g, g_vocab, 50, &c, &err), GT_OK);
  assert_int_equal(gr_matcher_new_cached(c, &m, &err), GT_OK);
  assert_int_equal(gr_matcher_new_cached(c, &m2, &err), GT_OK);
  char as[100];
  memset(as, 'a', sizeof as);
  assert_int_equal(gr_matcher_accept_bytes(m, as, 49), GT_OK); /* the start state + 49 */
  assert_int_equal(gr_cache_full(c), 0);
  assert_int_equal(gr_matcher_accept_bytes(m, as, 1), GT_ERANGE);
  assert_int_equal(gr_cache_full(c), 1);
  assert_int_equal(gr_matcher_accept_bytes(m2, as, 49), GT_OK); /* states it holds */
  assert_int_equal(gr_matcher_accept_bytes(m2, as, 1), GT_ERANGE);
  gr_matcher_free(m2);
  gr_matcher_free(m);
  gr_cache_free(c);
  assert_int_equal(gr_cache_new_limited(g, g_vocab, 50, &c, &err), GT_OK);
  assert_int_equal(gr_cache_full(c), 0);
  assert_int_equal(gr_matcher_new_cached(c, &m, &err), GT_OK);
  assert_int_equal(gr_matcher_accept_bytes(m, as, 49), GT_OK);
  gr_matcher_free(m);
  gr_cache_free(c);
  gr_grammar_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_choice),
    cmocka_unit_test(test_json_object),
    cmocka_unit_test(test_schema_object),
    cmocka_unit_test(test_schema_optional),
    cmocka_unit_test(test_schema_ref_anyof),
    cmocka_unit_test(test_schema_typed_enum),
    cmocka_unit_test(test_schema_pattern_format),
    cmocka_unit_test(test_int_range_regex),
    cmocka_unit_test(test_schema_bounds),
    cmocka_unit_test(test_schema_zod_pydantic),
    cmocka_unit_test(test_regex),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_mutated_specs),
    cmocka_unit_test(test_state_limit),
    cmocka_unit_test(test_cache_limited_full),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
