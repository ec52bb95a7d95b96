/* tests/unit/test_grammar_vocab.c — the grammar engine with real tokenizers (qwen3-tiny,
 * qwen35-tiny, the demo model, Qwen3's full vocabulary): mask bits agree with
 * gr_matcher_accept for every token, and random walks that always pick an allowed token end in
 * text that parses as JSON and satisfies the schema (checked by a small validator below). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/grammar/grammar.h"
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "tests/common/testutil.h"

static tok_t *load_tok(const char *rel) {
  gt_err_t err = {0};
  gguf_t *g = NULL;
  tok_t *t = NULL;
  if (gguf_open(tu_golden(rel), &g, &err) != GT_OK) fail_msg("gguf_open %s: %s", rel, err.msg);
  if (tok_load(g, &t, &err) != GT_OK) fail_msg("tok_load %s: %s", rel, err.msg);
  gguf_close(g);
  return t;
}

static gr_grammar_t *compile(gr_kind_t kind, const char *spec) {
  gr_grammar_t *g = NULL;
  gt_err_t err = {0};
  if (gr_compile(kind, spec, spec ? strlen(spec) : 0, &g, &err) != GT_OK) fail_msg("gr_compile: %s", err.msg);
  return g;
}

/* ------------------------------------------------------------ a small JSON schema validator
 * for the keywords the test schemas use (type, properties, required, additionalProperties,
 * enum, const, items, minItems, maxItems, minLength, maxLength, anyOf, oneOf, $ref). */

static size_t utf8_len(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
  return c;
}

static int valid(json_t *root, json_t *schema, json_t *v);

/* JSON schema "pattern": a search (unanchored), as ajv does */
static int pattern_ok(const char *re, const char *text, size_t len) {
  int ec;
  PCRE2_SIZE eo;
  pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
  if (!code) return 0;
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
  int ok = pcre2_match(code, (PCRE2_SPTR)text, len, 0, 0, md, NULL) >= 0;
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return ok;
}

static int digits(const char *s, int n) {
  for (int i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

static int date_ok(const char *s) { /* YYYY-MM-DD with a day the month has */
  if (strlen(s) != 10 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2)) return 0;
  int y = atoi(s), m = atoi(s + 5), d = atoi(s + 8);
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m >= 1 && m <= 12 && d >= 1 && d <= (m == 2 ? 28 + leap : mdays[m - 1]);
}

static int time_ok(const char *s) { /* HH:MM:SS(.f+)?(Z|+-HH:MM) */
  if (strlen(s) < 9 || !digits(s, 2) || s[2] != ':' || !digits(s + 3, 2) || s[5] != ':' || !digits(s + 6, 2)) return 0;
  if (atoi(s) > 23 || atoi(s + 3) > 59 || atoi(s + 6) > 59) return 0;
  s += 8;
  if (*s == '.') {
    s++;
    if (!digits(s, 1)) return 0;
    while (*s >= '0' && *s <= '9') s++;
  }
  if (!strcmp(s, "Z")) return 1;
  return (s[0] == '+' || s[0] == '-') && strlen(s) == 6 && digits(s + 1, 2) && s[3] == ':' && digits(s + 4, 2) &&
         atoi(s + 1) <= 23 && atoi(s + 4) <= 59;
}

static int format_ok(const char *f, const char *s) {
  if (!strcmp(f, "date")) return date_ok(s);
  if (!strcmp(f, "time")) return time_ok(s);
  if (!strcmp(f, "date-time")) {
    char d[11];
    if (strlen(s) < 11 || s[10] != 'T') return 0;
    memcpy(d, s, 10);
    d[10] = 0;
    return date_ok(d) && time_ok(s + 11);
  }
  if (!strcmp(f, "uuid")) {
    if (strlen(s) != 36) return 0;
    for (int i = 0; i < 36; i++) {
      int dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? s[i] != '-' : !strchr("0123456789abcdefABCDEF", s[i])) return 0;
    }
    return 1;
  }
  if (!strcmp(f, "ipv4")) {
    for (int part = 0; part < 4; part++) {
      int n = 0, v = 0;
      while (s[n] >= '0' && s[n] <= '9') v = v * 10 + (s[n++] - '0');
      if (n == 0 || n > 3 || v > 255 || (n > 1 && s[0] == '0')) return 0;
      s += n;
      if (part < 3 && *s++ != '.') return 0;
    }
    return *s == 0;
  }
  if (!strcmp(f, "email")) {
    const char *at = strchr(s, '@');
    return at && at > s && !strchr(at + 1, '@') && strchr(at + 1, '.') && !strchr(s, ' ');
  }
  return 0;
}

static int valid_type(const char *t, json_t *v) {
  if (!strcmp(t, "string")) return json_is_string(v);
  if (!strcmp(t, "integer")) return json_is_integer(v);
  if (!strcmp(t, "number")) return json_is_number(v);
  if (!strcmp(t, "boolean")) return json_is_boolean(v);
  if (!strcmp(t, "null")) return json_is_null(v);
  if (!strcmp(t, "object")) return json_is_object(v);
  if (!strcmp(t, "array")) return json_is_array(v);
  return 0;
}

static int valid(json_t *root, json_t *schema, json_t *v) {
  if (json_is_true(schema)) return 1;
  json_t *k;
  if ((k = json_object_get(schema, "$ref"))) {
    const char *ref = json_string_value(k); /* "#/$defs/x" or "#/definitions/x" */
    const char *slash = strrchr(ref, '/');
    char sect[64];
    snprintf(sect, sizeof sect, "%.*s", (int)(slash - ref - 2), ref + 2);
    return valid(root, json_object_get(json_object_get(root, sect), slash + 1), v);
  }
  if ((k = json_object_get(schema, "const")) && !json_equal(k, v)) return 0;
  if ((k = json_object_get(schema, "enum"))) {
    int any = 0;
    for (size_t i = 0; i < json_array_size(k); i++) any |= json_equal(json_array_get(k, i), v);
    if (!any) return 0;
  }
  json_t *alts = json_object_get(schema, "anyOf");
  if (!alts) alts = json_object_get(schema, "oneOf");
  if (alts) {
    int any = 0;
    for (size_t i = 0; i < json_array_size(alts); i++) any |= valid(root, json_array_get(alts, i), v);
    if (!any) return 0;
  }
  if ((k = json_object_get(schema, "type"))) {
    int any = 0;
    if (json_is_string(k)) any = valid_type(json_string_value(k), v);
    for (size_t i = 0; i < json_array_size(k); i++) any |= valid_type(json_string_value(json_array_get(k, i)), v);
    if (!any) return 0;
  }
  if (json_is_string(v)) {
    if ((k = json_object_get(schema, "pattern")) && !pattern_ok(json_string_value(k), json_string_value(v), json_string_length(v)))
      return 0;
    if ((k = json_object_get(schema, "format")) && !format_ok(json_string_value(k), json_string_value(v))) return 0;
    size_t n = utf8_len(json_string_value(v), json_string_length(v));
    if ((k = json_object_get(schema, "minLength")) && n < (size_t)json_integer_value(k)) return 0;
    if ((k = json_object_get(schema, "maxLength")) && n > (size_t)json_integer_value(k)) return 0;
  }
  if (json_is_number(v)) {
    double x = json_number_value(v);
    json_t *e;
    if ((k = json_object_get(schema, "minimum")) && x < json_number_value(k)) return 0;
    if ((k = json_object_get(schema, "maximum")) && x > json_number_value(k)) return 0;
    if ((e = json_object_get(schema, "exclusiveMinimum")) && x <= json_number_value(e)) return 0;
    if ((e = json_object_get(schema, "exclusiveMaximum")) && x >= json_number_value(e)) return 0;
  }
  if (json_is_array(v)) {
    size_t n = json_array_size(v);
    if ((k = json_object_get(schema, "minItems")) && n < (size_t)json_integer_value(k)) return 0;
    if ((k = json_object_get(schema, "maxItems")) && n > (size_t)json_integer_value(k)) return 0;
    json_t *items = json_object_get(schema, "items");
    for (size_t i = 0; items && i < n; i++)
      if (!valid(root, items, json_array_get(v, i))) return 0;
  }
  if (json_is_object(v)) {
    json_t *props = json_object_get(schema, "properties"), *req = json_object_get(schema, "required");
    json_t *addl = json_object_get(schema, "additionalProperties");
    for (size_t i = 0; i < json_array_size(req); i++)
      if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return 0;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
      json_t *ps = json_object_get(props, key);
      if (ps ? !valid(root, ps, val) : (addl && (json_is_false(addl) || !valid(root, addl, val)))) return 0;
    }
  }
  return 1;
}

static void test_validator_rejects(void **state) {
  /* the validator must be able to fail, or the walks below prove nothing */
  json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
                         "\"additionalProperties\":false}", 0, NULL);
  const char *bad[] = {"{}", "{\"a\":1.5}", "{\"a\":1,\"b\":2}", "[1]"};
  for (size_t i = 0; i < 4; i++) {
    json_t *v = json_loads(bad[i], JSON_DECODE_ANY, NULL);
    assert_false(valid(s, s, v));
    json_decref(v);
  }
  json_t *v = json_loads("{\"a\":2}", 0, NULL);
  assert_true(valid(s, s, v));
  json_decref(v);
  json_decref(s);
  assert_true(format_ok("date", "2024-02-29") && !format_ok("date", "2023-02-29") && !format_ok("date", "2024-04-31"));
  assert_true(format_ok("date-time", "2024-01-01T00:00:00.5-01:30") && !format_ok("date-time", "2024-01-01T00:00:00"));
  assert_true(format_ok("ipv4", "10.0.0.255") && !format_ok("ipv4", "10.0.0.256") && !format_ok("ipv4", "01.0.0.1"));
  assert_true(format_ok("uuid", "123e4567-e89b-12d3-a456-426614174000") && !format_ok("uuid", "123e4567e89b"));
  assert_true(pattern_ok("b\\d", "ab1c", 4) && !pattern_ok("^b", "ab", 2));
}

/* ------------------------------------------------------------ walks */

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)rng_state;
}

static int bit(const uint32_t *mask, int32_t id) { return mask[id >> 5] >> (id & 31) & 1; }

/* Closing-ish tokens: pieces with '"', ']' or '}', or end-of-generation. Walks prefer them after
 * a while so that strings and containers end. */
static int closing(const tok_t *t, int32_t id) {
  if (id == tok_eos(t) || id == tok_eot(t)) return 1;
  size_t n;
  const char *p = tok_piece(t, id, &n);
  return memchr(p, '"', n) || memchr(p, ']', n) || memchr(p, '}', n);
}

/* One random walk: returns the generated text (malloc'd), ending at done or an end token. */
static char *walk(const tok_t *t, const gr_vocab_t *v, const gr_grammar_t *g, int steps_before_closing) {
  gr_matcher_t *m = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_matcher_new(g, v, &m, &err), GT_OK);
  size_t n_vocab = tok_n_vocab(t), words = gr_mask_words(v);
  assert_int_equal(words, (n_vocab + 31) / 32);
  uint32_t *mask = malloc(words * sizeof *mask);
  int32_t *allowed = malloc(n_vocab * sizeof *allowed), *pref = malloc(n_vocab * sizeof *pref);
  char *text = calloc(1, 1);
  size_t len = 0;
  int ended = 0;
  for (int step = 0; step < 4000 && !gr_matcher_done(m); step++) {
    int count = gr_matcher_fill_mask(m, mask);
    assert_true(count > 0);
    size_t na = 0, np = 0;
    for (size_t id = 0; id < n_vocab; id++) {
      if (!bit(mask, (int32_t)id)) continue;
      allowed[na++] = (int32_t)id;
      if (closing(t, (int32_t)id)) pref[np++] = (int32_t)id;
      assert_false(tok_is_control(t, (int32_t)id) && id != (size_t)tok_eos(t) && id != (size_t)tok_eot(t));
    }
    assert_int_equal(na, (size_t)count);
    int32_t id = (step >= steps_before_closing && np) ? pref[rnd() % np] : allowed[rnd() % na];
    assert_int_equal(gr_matcher_accept(m, id), GT_OK);
    if (id == tok_eos(t) || id == tok_eot(t)) {
      ended = 1;
      break;
    }
    size_t pn;
    const char *p = tok_piece(t, id, &pn);
    text = realloc(text, len + pn + 1);
    memcpy(text + len, p, pn);
    len += pn;
    text[len] = 0;
  }
  if (!ended && !gr_matcher_done(m)) fail_msg("walk did not finish: %s", text);
  assert_true(gr_matcher_accepting(m));
  free(mask);
  free(allowed);
  free(pref);
  gr_matcher_free(m);
  return text;
}

static const char *schemas[] = {
  /* flat object, optional properties, bounded strings and arrays, enum and const */
  "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
  "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"},"
  "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":3},"
  "\"color\":{\"enum\":[\"red\",\"green\",7,null]},\"kind\":{\"const\":{\"v\":[1,\"x\"]}}},"
  "\"required\":[\"name\",\"color\",\"kind\"]}",
  /* $ref recursion */
  "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
  "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
  "\"required\":[\"v\"]}}}",
  /* anyOf / oneOf and type lists */
  "{\"type\":\"object\",\"properties\":{\"pet\":{\"anyOf\":[{\"type\":\"object\",\"properties\":"
  "{\"cat\":{\"type\":\"string\"}},\"required\":[\"cat\"]},{\"type\":\"object\",\"properties\":"
  "{\"dog\":{\"type\":\"integer\"}},\"required\":[\"dog\"]},{\"type\":\"null\"}]},"
  "\"id\":{\"oneOf\":[{\"type\":\"string\",\"maxLength\":4},{\"type\":\"integer\"}]},"
  "\"x\":{\"type\":[\"number\",\"null\"]}},\"required\":[\"pet\",\"id\",\"x\"]}",
  /* patterns (JSON-escaped inside strings) and formats */
  "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}[\\\"\\\\\\\\\\\\n]?$\"},"
  "\"when\":{\"type\":\"string\",\"format\":\"date-time\"},\"day\":{\"format\":\"date\"},\"id\":{\"format\":\"uuid\"},"
  "\"ip\":{\"format\":\"ipv4\"},\"mail\":{\"format\":\"email\"},\"at\":{\"format\":\"time\"}},"
  "\"required\":[\"code\",\"when\",\"day\",\"id\",\"ip\",\"mail\",\"at\"]}",
  /* numeric bounds */
  "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
  "\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":3},"
  "\"big\":{\"type\":\"integer\",\"minimum\":1000000},\"w\":{\"type\":\"number\",\"minimum\":0}},"
  "\"required\":[\"age\",\"n\",\"big\",\"w\"]}",
  /* a map and untyped values */
  "{\"type\":\"object\",\"properties\":{\"m\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}},"
  "\"any\":{}},\"required\":[\"m\",\"any\"]}",
};

static void walks_for(const char *rel, int n_walks) {
  tok_t *t = load_tok(rel);
  gr_vocab_t *v = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_vocab_new(t, &v, &err), GT_OK);
  for (size_t s = 0; s < sizeof schemas / sizeof schemas[0]; s++) {
    gr_grammar_t *g = compile(GR_JSON_SCHEMA, schemas[s]);
    json_t *schema = json_loads(schemas[s], 0, NULL);
    assert_non_null(schema);
    for (int w = 0; w < n_walks; w++) {
      char *text = walk(t, v, g, 30 + w * 10);
      json_error_t je;
      json_t *doc = json_loads(text, JSON_DECODE_ANY, &je);
      if (!doc) fail_msg("%s schema %zu: not JSON (%s): %s", rel, s, je.text, text);
      if (!valid(schema, schema, doc)) fail_msg("%s schema %zu: not valid: %s", rel, s, text);
      json_decref(doc);
      free(text);
    }
    json_decref(schema);
    gr_grammar_free(g);
  }
  /* json_object and choice */
  gr_grammar_t *g = compile(GR_JSON_OBJECT, NULL);
  for (int w = 0; w < n_walks; w++) {
    char *text = walk(t, v, g, 30 + w * 10);
    json_t *doc = json_loads(text, 0, NULL);
    if (!json_is_object(doc)) fail_msg("%s json_object: not an object: %s", rel, text);
    json_decref(doc);
    free(text);
  }
  gr_grammar_free(g);
  g = compile(GR_CHOICE, "[\"positive\",\"negative\",\"neutral \\u00e9t\\u00e9\"]");
  for (int w = 0; w < n_walks; w++) {
    char *text = walk(t, v, g, 1000);
    if (strcmp(text, "positive") && strcmp(text, "negative") && strcmp(text, "neutral \xc3\xa9t\xc3\xa9"))
      fail_msg("%s choice: %s", rel, text);
    free(text);
  }
  gr_grammar_free(g);
  /* regexes, checked against PCRE2 (whole-text match) */
  static const char *regexes[] = {
    "\\d{3}-\\d{4}", "[a-z]{1,8}@[a-z]{1,8}\\.(com|org)", "(yes|no|maybe)!?",
    "[A-Z][a-z \u00e9\u65e5]{0,20}\\.", "(\\w{1,6},){0,3}\\w{1,5}", "[^\\n\"]{3,6}"};
  for (size_t r = 0; r < sizeof regexes / sizeof regexes[0]; r++) {
    g = compile(GR_REGEX, regexes[r]);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)regexes[r], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
    assert_non_null(re);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    for (int w = 0; w < n_walks; w++) {
      char *text = walk(t, v, g, 4000);
      if (pcre2_match(re, (PCRE2_SPTR)text, strlen(text), 0, 0, md, NULL) < 0)
        fail_msg("%s regex %s: PCRE2 does not match \"%s\"", rel, regexes[r], text);
      free(text);
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    gr_grammar_free(g);
  }
  gr_vocab_free(v);
  tok_free(t);
}

static void test_walk_qwen3_tiny(void **state) { walks_for("qwen3-tiny.bf16.gguf", 12); }
static void test_walk_qwen35_tiny(void **state) { walks_for("qwen35-tiny.bf16.gguf", 12); }
static void test_walk_demo(void **state) { walks_for("demo/gantry-demo-code-22m.Q4_K_M.gguf", 8); }
static void test_walk_qwen3_vocab(void **state) { walks_for("qwen3-vocab.gguf", 3); }

/* For every token at several states: mask bit set <=> gr_matcher_accept succeeds (then rolled
 * back). */
static void agree_for(const char *rel) {
  tok_t *t = load_tok(rel);
  gr_vocab_t *v = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_vocab_new(t, &v, &err), GT_OK);
  size_t n_vocab = tok_n_vocab(t);
  uint32_t *mask = malloc(gr_mask_words(v) * sizeof *mask);
  struct { gr_kind_t kind; const char *spec; const char *prefixes[4]; } cases[] = {
    {GR_JSON_SCHEMA, schemas[0], {"", "{\"name\":\"", "{\"name\":\"x\", \"age\":12", "{\"name\":\"x\",\"color\":null,"}},
    {GR_JSON_SCHEMA, schemas[1], {"{", "{\"v\":1,\"kids\":[", "{\"v\":-", "{\"v\":1,\"kids\":[{\"v\":2}]}"}},
    {GR_JSON_OBJECT, NULL, {"{\"", "{\"a\":\"\xe6\x97", "{\"a\":[1,{}", "{\"a\":1.5e"}},
    {GR_CHOICE, "[\"positive\",\"negative\",\"neutral\"]", {"", "ne", "neg", "negative"}},
    {GR_REGEX, "[a-z]{1,8}@[a-z]{1,8}\\.(com|org)|\\d+\\u00e9", {"", "ab", "ab@c", "12\xc3"}},
    /* loops over plain text (the whole-subtree path) with and without the full UTF-8 range */
    {GR_REGEX, "\"[^\"]*\"!|'[ -~]*'", {"\"", "\"ab", "\"\xe6\x97", "'a"}},
    {GR_JSON_SCHEMA, "{\"type\":\"string\"}", {"\"", "\"\\", "\"\xf0\x9f", "\"x\""}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    gr_grammar_t *g = compile(cases[c].kind, cases[c].spec);
    for (int p = 0; p < 4; p++) {
      gr_matcher_t *m = NULL;
      assert_int_equal(gr_matcher_new(g, v, &m, &err), GT_OK);
      const char *pre = cases[c].prefixes[p];
      assert_int_equal(gr_matcher_accept_bytes(m, pre, strlen(pre)), GT_OK);
      int count = gr_matcher_fill_mask(m, mask);
      int n_ok = 0;
      if (cases[c].kind == GR_JSON_SCHEMA && !strcmp(cases[c].spec, "{\"type\":\"string\"}") && p == 0) {
        /* inside a string: plain-text subtrees are taken whole, not walked node by node */
        gr_stats_t st;
        gr_matcher_stats(m, &st);
        print_message("%s: string state: %d allowed, %zu trie nodes visited\n", rel, count, st.trie_visits);
        if (n_vocab > 4096) assert_true(st.trie_visits < (size_t)count / 4); /* tiny vocabs: the root's 256 children dominate */
      }
      for (size_t id = 0; id < n_vocab; id++) {
        int ok = gr_matcher_accept(m, (int32_t)id) == GT_OK;
        if (ok) {
          assert_int_equal(gr_matcher_rollback(m, 1), GT_OK);
          n_ok++;
        }
        if (ok != bit(mask, (int32_t)id))
          fail_msg("%s case %zu prefix \"%s\": token %zu: accept %d, mask %d", rel, c, pre, id, ok, bit(mask, (int32_t)id));
      }
      assert_int_equal(n_ok, count);
      /* the second fill (cached) equals the first */
      uint32_t *again = malloc(gr_mask_words(v) * sizeof *again);
      assert_int_equal(gr_matcher_fill_mask(m, again), count);
      assert_memory_equal(again, mask, gr_mask_words(v) * sizeof *mask);
      free(again);
      gr_matcher_free(m);
    }
    gr_grammar_free(g);
  }
  free(mask);
  gr_vocab_free(v);
  tok_free(t);
}

static void test_agree_qwen3_tiny(void **state) { agree_for("qwen3-tiny.bf16.gguf"); }
static void test_agree_demo(void **state) { agree_for("demo/gantry-demo-code-22m.Q4_K_M.gguf"); }
static void test_agree_qwen3_vocab(void **state) { agree_for("qwen3-vocab.gguf"); }

/* End tokens: allowed exactly when accepting; nothing after them; control tokens never. */
static void test_end_tokens(void **state) {
  tok_t *t = load_tok("qwen3-vocab.gguf");
  gr_vocab_t *v = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_vocab_new(t, &v, &err), GT_OK);
  int32_t eos = tok_eos(t), eot = tok_eot(t), im_start = tok_find(t, "<|im_start|>");
  assert_true(eos >= 0 && im_start >= 0);
  uint32_t *mask = malloc(gr_mask_words(v) * sizeof *mask);
  gr_grammar_t *g = compile(GR_CHOICE, "[\"a\",\"ab\"]");
  gr_matcher_t *m = NULL;
  assert_int_equal(gr_matcher_new(g, v, &m, &err), GT_OK);
  assert_true(gr_matcher_fill_mask(m, mask) > 0);
  assert_false(bit(mask, eos));
  assert_false(bit(mask, im_start));
  assert_int_equal(gr_matcher_accept(m, eos), GT_EINVAL);
  assert_int_equal(gr_matcher_accept(m, im_start), GT_EINVAL);
  assert_int_equal(gr_matcher_accept_bytes(m, "a", 1), GT_OK);
  assert_true(gr_matcher_fill_mask(m, mask) > 0);
  assert_true(bit(mask, eos));
  if (eot >= 0) assert_true(bit(mask, eot));
  assert_false(gr_matcher_done(m));
  assert_int_equal(gr_matcher_accept(m, eos), GT_OK);
  assert_true(gr_matcher_done(m));
  assert_int_equal(gr_matcher_fill_mask(m, mask), 0);
  assert_int_equal(gr_matcher_accept(m, eos), GT_EINVAL);
  assert_int_equal(gr_matcher_rollback(m, 1), GT_OK);
  assert_false(gr_matcher_done(m));
  assert_int_equal(gr_matcher_rollback(m, 1), GT_EINVAL); /* "a" came as bytes, not a token */
  gr_matcher_free(m);
  gr_vocab_free(v);
  /* an explicit end set: <|im_end|> and <|endoftext|> (a control token) */
  int32_t eot_text = tok_find(t, "<|endoftext|>"), ends[2] = {eos, eot_text};
  assert_true(eot_text >= 0 && eot_text != eos);
  assert_int_equal(gr_vocab_new_with_ends(t, ends, 2, &v, &err), GT_OK);
  assert_int_equal(gr_matcher_new(g, v, &m, &err), GT_OK);
  assert_int_equal(gr_matcher_accept_bytes(m, "ab", 2), GT_OK);
  assert_int_equal(gr_matcher_fill_mask(m, mask), 2); /* done: only the two end tokens */
  assert_true(bit(mask, eos) && bit(mask, eot_text));
  assert_int_equal(gr_matcher_accept(m, eot_text), GT_OK);
  gr_matcher_free(m);
  gr_vocab_free(v);
  int32_t bad = (int32_t)tok_n_vocab(t);
  assert_int_equal(gr_vocab_new_with_ends(t, &bad, 1, &v, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "out of range"));
  gr_grammar_free(g);
  free(mask);
  tok_free(t);
}

/* Threads share one gr_cache_t: each replays its own token sequence (from walks with private
 * matchers) and every mask must equal the private matcher's mask at the same step. */
typedef struct {
  gr_cache_t *cache;
  const gr_vocab_t *v;
  const int32_t *seq;
  size_t n;
  uint32_t *const *masks; /* [n] reference masks */
  gr_matcher_t *first;    /* made before the creator dropped its reference: keeps c alive */
  int bad;
} share_job_t;

static void *share_thread(void *arg) {
  share_job_t *j = arg;
  size_t words = gr_mask_words(j->v);
  uint32_t *mask = malloc(words * sizeof *mask);
  for (int rep = 0; rep < 3; rep++) {
    gr_matcher_t *m = j->first;
    if (rep > 0 && gr_matcher_new_cached(j->cache, &m, NULL) != GT_OK) { j->bad = 1; break; }
    for (size_t i = 0; i < j->n; i++) {
      gr_matcher_fill_mask(m, mask);
      if (memcmp(mask, j->masks[i], words * sizeof *mask) != 0 || gr_matcher_accept(m, j->seq[i]) != GT_OK) j->bad = 1;
    }
    if (rep > 0) gr_matcher_free(m);
  }
  gr_matcher_free(j->first);
  free(mask);
  return NULL;
}

static void test_shared_cache_threads(void **state) {
  tok_t *t = load_tok("qwen3-vocab.gguf");
  gr_vocab_t *v = NULL;
  gt_err_t err = {0};
  assert_int_equal(gr_vocab_new(t, &v, &err), GT_OK);
  gr_grammar_t *g = compile(GR_JSON_SCHEMA, schemas[0]);
  size_t words = gr_mask_words(v), n_vocab = tok_n_vocab(t);
  enum { N_THREADS = 4, MAX_N = 200 };
  int32_t seqs[N_THREADS][MAX_N];
  uint32_t *masks[N_THREADS][MAX_N];
  size_t lens[N_THREADS];
  for (int k = 0; k < N_THREADS; k++) { /* reference: private matchers, random walks */
    gr_matcher_t *m = NULL;
    assert_int_equal(gr_matcher_new(g, v, &m, &err), GT_OK);
    size_t n = 0;
    while (n < MAX_N && !gr_matcher_done(m)) {
      masks[k][n] = malloc(words * sizeof(uint32_t));
      int count = gr_matcher_fill_mask(m, masks[k][n]);
      assert_true(count > 0);
      int32_t pick = (int32_t)(rnd() % (uint32_t)count), id = -1;
      for (size_t i = 0; i < n_vocab && pick >= 0; i++)
        if (bit(masks[k][n], (int32_t)i) && pick-- == 0) id = (int32_t)i;
      if (n > 20 && closing(t, id) == 0) { /* steer towards the end as the walks do */
        for (size_t i = 0; i < n_vocab; i++)
          if (bit(masks[k][n], (int32_t)i) && closing(t, (int32_t)i)) { id = (int32_t)i; break; }
      }
      assert_int_equal(gr_matcher_accept(m, id), GT_OK);
      seqs[k][n++] = id;
      if (id == tok_eos(t) || id == tok_eot(t)) break;
    }
    lens[k] = n;
    gr_matcher_free(m);
  }
  gr_cache_t *cache = NULL;
  assert_int_equal(gr_cache_new(g, v, &cache, &err), GT_OK);
  pthread_t th[N_THREADS];
  share_job_t jobs[N_THREADS];
  for (int k = 0; k < N_THREADS; k++) {
    jobs[k] = (share_job_t){cache, v, seqs[k], lens[k], masks[k], NULL, 0};
    assert_int_equal(gr_matcher_new_cached(cache, &jobs[k].first, &err), GT_OK);
    assert_int_equal(pthread_create(&th[k], NULL, share_thread, &jobs[k]), 0);
  }
  gr_cache_free(cache); /* the matchers keep it alive */
  for (int k = 0; k < N_THREADS; k++) {
    pthread_join(th[k], NULL);
    assert_int_equal(jobs[k].bad, 0);
    for (size_t i = 0; i < lens[k]; i++) free(masks[k][i]);
  }
  gr_grammar_free(g);
  gr_vocab_free(v);
  tok_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_validator_rejects),
    cmocka_unit_test(test_end_tokens),
    cmocka_unit_test(test_shared_cache_threads),
    cmocka_unit_test(test_agree_qwen3_tiny),
    cmocka_unit_test(test_agree_demo),
    cmocka_unit_test(test_agree_qwen3_vocab),
    cmocka_unit_test(test_walk_qwen3_tiny),
    cmocka_unit_test(test_walk_qwen35_tiny),
    cmocka_unit_test(test_walk_demo),
    cmocka_unit_test(test_walk_qwen3_vocab),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
