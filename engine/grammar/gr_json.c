/* engine/grammar/gr_json.c — JSON grammars: JSON schema (the subset in grammar.h), any JSON
 * object, and guided choice (alternation of literals). Rules follow llama.cpp's
 * json-schema-to-grammar: properties in schema order, optional ones skippable without
 * dangling commas, bounded whitespace. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_internal.h"

#define JS_MAX_DEPTH 128 /* schema nesting (not output nesting: $ref recursion is unbounded) */

typedef struct {
  json_t *node;
  int32_t rule;
} js_memo_t;

typedef struct {
  gr_builder_t *b;
  json_t *root;
  gt_err_t *err;
  int rc;                     /* first error, sticky */
  js_memo_t *memo;
  size_t n_memo, cap_memo;
  int32_t ws, comma, chr, str, num, integer, boolean, null, value, object, array;
} js_t;

static int32_t js_fail(js_t *j, int code, const char *fmt, const char *arg) {
  if (j->rc == GT_OK) j->rc = gt_err_set(j->err, code, fmt, arg);
  return -1;
}

static void js_init(js_t *j, gr_builder_t *b, gt_err_t *err) {
  memset(j, 0, sizeof *j);
  j->b = b;
  j->err = err;
  j->ws = j->comma = j->chr = j->str = j->num = j->integer = j->boolean = j->null = -1;
  j->value = j->object = j->array = -1;
}

/* ------------------------------------------------------------ shared primitive rules */

/* ws ::= "" | " " | "\n" [ \t]{0,20} */
static int32_t js_ws(js_t *j) {
  if (j->ws >= 0) return j->ws;
  gr_builder_t *b = j->b;
  int32_t ind1 = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, ind1);
  gr_set_t sp = {{0}};
  sp.w[' ' >> 5] |= 1u << (' ' & 31);
  sp.w['\t' >> 5] |= 1u << ('\t' & 31);
  gr_b_set(b, s, &sp);
  int32_t ind = gr_b_repeat(b, ind1, 0, 20);
  j->ws = gr_b_rule(b);
  gr_b_alt(b, j->ws);
  gr_b_lit(b, gr_b_alt(b, j->ws), " ", 1);
  s = gr_b_alt(b, j->ws);
  gr_b_lit(b, s, "\n", 1);
  gr_b_ref(b, s, ind);
  return j->ws;
}

/* "," ws */
static int32_t js_comma(js_t *j) {
  if (j->comma >= 0) return j->comma;
  int32_t ws = js_ws(j);
  j->comma = gr_b_rule(j->b);
  gr_seq_t *s = gr_b_alt(j->b, j->comma);
  gr_b_lit(j->b, s, ",", 1);
  gr_b_ref(j->b, s, ws);
  return j->comma;
}

static void hex_set(gr_set_t *set, const char *digits) {
  memset(set, 0, sizeof *set);
  for (const char *p = digits; *p; p++) set->w[(unsigned char)*p >> 5] |= 1u << (*p & 31);
}

/* The 4 hex digits of a \u escape, except 0000 and the surrogates D800-DFFF, which strict
 * parsers (jansson: the engine's own tool-call parser) reject; raw UTF-8 covers the rest:
 *   [1-9a-cA-Ce-fE-F] h h h | [dD] [0-7] h h | "0" ([1-9a-fA-F] h h | "0" ([1-9a-fA-F] h | "0" [1-9a-fA-F])) */
static int32_t js_hex4(js_t *j) {
  gr_builder_t *b = j->b;
  gr_set_t h, nz, lead, d, lo, zero;
  hex_set(&h, "0123456789abcdefABCDEF");
  hex_set(&nz, "123456789abcdefABCDEF");
  hex_set(&lead, "123456789abcABCefEF");
  hex_set(&d, "dD");
  hex_set(&lo, "01234567");
  hex_set(&zero, "0");
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  gr_b_set(b, s, &lead);
  for (int i = 0; i < 3; i++) gr_b_set(b, s, &h);
  s = gr_b_alt(b, r);
  gr_b_set(b, s, &d);
  gr_b_set(b, s, &lo);
  gr_b_set(b, s, &h);
  gr_b_set(b, s, &h);
  for (int zeros = 1; zeros <= 3; zeros++) {
    s = gr_b_alt(b, r);
    for (int i = 0; i < zeros; i++) gr_b_set(b, s, &zero);
    gr_b_set(b, s, &nz);
    for (int i = zeros + 1; i < 4; i++) gr_b_set(b, s, &h);
  }
  return r;
}

/* one character inside a JSON string: unescaped UTF-8 (no '"', '\\', controls) or an escape */
static int32_t js_char(js_t *j) {
  if (j->chr >= 0) return j->chr;
  gr_builder_t *b = j->b;
  gr_range_t rg[3] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
  int32_t plain = gr_b_utf8_class(b, rg, 3);
  j->chr = gr_b_rule(b);
  gr_b_ref(b, gr_b_alt(b, j->chr), plain);
  gr_seq_t *s = gr_b_alt(b, j->chr);
  gr_b_lit(b, s, "\\", 1);
  gr_set_t esc = {{0}};
  for (const char *p = "\"\\/bfnrt"; *p; p++) esc.w[(unsigned char)*p >> 5] |= 1u << (*p & 31);
  gr_b_set(b, s, &esc);
  s = gr_b_alt(b, j->chr);
  gr_b_lit(b, s, "\\u", 2);
  gr_b_ref(b, s, js_hex4(j));
  return j->chr;
}

/* "\"" body "\"" */
static int32_t js_quoted(js_t *j, int32_t body) {
  int32_t r = gr_b_rule(j->b);
  gr_seq_t *s = gr_b_alt(j->b, r);
  gr_b_lit(j->b, s, "\"", 1);
  gr_b_ref(j->b, s, body);
  gr_b_lit(j->b, s, "\"", 1);
  return r;
}

static int32_t js_string_len(js_t *j, int min, int max) {
  int32_t c = js_char(j);
  return js_quoted(j, (min == 0 && max < 0) ? gr_b_star(j->b, c) : gr_b_repeat(j->b, c, min, max));
}

static int32_t js_string(js_t *j) {
  if (j->str < 0) j->str = js_string_len(j, 0, -1);
  return j->str;
}

/* [0-9]{min,max} */
static int32_t js_digits(js_t *j, unsigned lo, int min, int max) {
  int32_t d = gr_b_rule(j->b);
  gr_b_byte_range(j->b, gr_b_alt(j->b, d), lo, '9');
  return gr_b_repeat(j->b, d, min, max);
}

/* "-"? ("0" | [1-9][0-9]{0,15}); without the sign when !sign */
static int32_t js_int_part(js_t *j, int sign) {
  gr_builder_t *b = j->b;
  int32_t nz = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, nz);
  gr_b_byte_range(b, s, '1', '9');
  gr_b_ref(b, s, js_digits(j, '0', 0, 15));
  int32_t mag = gr_b_rule(b);
  gr_b_lit(b, gr_b_alt(b, mag), "0", 1);
  gr_b_ref(b, gr_b_alt(b, mag), nz);
  if (!sign) return mag;
  int32_t r = gr_b_rule(b);
  gr_b_ref(b, gr_b_alt(b, r), mag);
  s = gr_b_alt(b, r);
  gr_b_lit(b, s, "-", 1);
  gr_b_ref(b, s, mag);
  return r;
}

static int32_t js_integer(js_t *j) {
  if (j->integer < 0) j->integer = js_int_part(j, 1);
  return j->integer;
}

/* int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?: every value fits a double; without a sign
 * (non-negative) when !sign */
static int32_t js_number_signed(js_t *j, int sign) {
  gr_builder_t *b = j->b;
  int32_t frac = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, frac);
  gr_b_lit(b, s, ".", 1);
  gr_b_ref(b, s, js_digits(j, '0', 1, 16));
  int32_t esign = gr_b_rule(b);
  gr_b_alt(b, esign);
  gr_b_lit(b, gr_b_alt(b, esign), "-", 1);
  gr_b_lit(b, gr_b_alt(b, esign), "+", 1);
  int32_t exp = gr_b_rule(b);
  s = gr_b_alt(b, exp);
  gr_set_t e = {{0}};
  e.w['e' >> 5] |= 1u << ('e' & 31);
  e.w['E' >> 5] |= 1u << ('E' & 31);
  gr_b_set(b, s, &e);
  gr_b_ref(b, s, esign);
  gr_b_ref(b, s, js_digits(j, '0', 1, 2));
  int32_t r = gr_b_rule(b);
  s = gr_b_alt(b, r);
  gr_b_ref(b, s, sign ? js_integer(j) : js_int_part(j, 0));
  gr_b_ref(b, s, gr_b_opt(b, frac));
  gr_b_ref(b, s, gr_b_opt(b, exp));
  return r;
}

static int32_t js_number(js_t *j) {
  if (j->num < 0) j->num = js_number_signed(j, 1);
  return j->num;
}

#define JS_INT_LIMIT 9999999999999999LL /* 16 digits, as js_int_part */

/* One bound keyword as a number (draft 6+), or draft 4's boolean exclusiveMinimum/Maximum
 * next to minimum/maximum. Returns 0 when absent, 1 when present (*v, *excl), -1 on error. */
static int js_num_bound(js_t *j, json_t *schema, const char *key, const char *ekey, double *v, int *excl) {
  json_t *x = json_object_get(schema, key), *e = json_object_get(schema, ekey);
  *excl = 0;
  if (e && json_is_number(e)) { /* exclusive as its own bound; the tighter one wins below */
    double ev = json_number_value(e);
    if (x && !json_is_number(x)) return js_fail(j, GT_EINVAL, "json schema: %s must be a number", key), -1;
    int lower = key[1] == 'i';
    if (!x || (lower ? ev >= json_number_value(x) : ev <= json_number_value(x))) {
      *v = ev;
      *excl = 1;
      return 1;
    }
  } else if (e && !json_is_boolean(e)) {
    return js_fail(j, GT_EINVAL, "json schema: %s must be a number or a boolean", ekey), -1;
  }
  if (!x) return 0;
  if (!json_is_number(x)) return js_fail(j, GT_EINVAL, "json schema: %s must be a number", key), -1;
  *v = json_number_value(x);
  *excl = e && json_is_true(e);
  return 1;
}

/* re[*n..] += s (cap bytes in all); -1 when it does not fit. */
static int js_cat(char *re, size_t cap, size_t *n, const char *s) {
  size_t l = strlen(s);
  if (*n + l >= cap) return -1;
  memcpy(re + *n, s, l + 1);
  *n += l;
  return 0;
}

/* Appends to re (cap bytes, at *n) a group matching the magnitudes m (no sign) in [a, b] (b < 0:
 * no upper bound), a excluded when ax, b when bx; a, b integers >= 0. Plain decimals, no
 * exponent: integer part a with any fraction (a nonzero one when a is excluded), the integers
 * between with any fraction, b with only zeros. 0 when the set is empty, 1 when written, -1 when
 * too long. */
static int js_mags(char *re, size_t cap, size_t *n, int64_t a, int ax, int64_t b, int bx) {
  static const char *const F = "(\\.[0-9]+)?", *const NZF = "\\.[0-9]*[1-9][0-9]*", *const ZF = "(\\.0+)?";
  if (b >= 0 && (b < a || (b == a && (ax || bx)))) return 0;
  char num[32], mid[4096];
  if (js_cat(re, cap, n, "(")) return -1;
  snprintf(num, sizeof num, "%lld", (long long)a);
  if (b == a) return js_cat(re, cap, n, num) || js_cat(re, cap, n, ZF) || js_cat(re, cap, n, ")") ? -1 : 1;
  if (js_cat(re, cap, n, num) || js_cat(re, cap, n, ax ? NZF : F)) return -1;
  const int64_t m_hi = b < 0 ? JS_INT_LIMIT : b - 1;
  if (a + 1 <= m_hi) {
    if (gr_int_range_regex(a + 1, m_hi, mid, sizeof mid) < 0) return -1;
    if (js_cat(re, cap, n, "|(") || js_cat(re, cap, n, mid) || js_cat(re, cap, n, ")") || js_cat(re, cap, n, F)) return -1;
  }
  if (b >= 0 && !bx) {
    snprintf(num, sizeof num, "|%lld", (long long)b);
    if (js_cat(re, cap, n, num) || js_cat(re, cap, n, ZF)) return -1;
  }
  return js_cat(re, cap, n, ")") ? -1 : 1;
}

/* number with bounds: the decimals in [lo, hi] (each exclusive or not; absent: open), as plain
 * decimals. A bound that is not an integer is tightened to the integer inside it (every output
 * still validates; the values between the bound and that integer are not produced). */
static int32_t js_number_range(js_t *j, int has_lo, double lo_v, int lo_x, int has_hi, double hi_v, int hi_x) {
  int64_t lo = 0, hi = 0;
  if (has_lo) {
    lo = (int64_t)ceil(lo_v);
    if ((double)lo != lo_v) lo_x = 0;
  }
  if (has_hi) {
    hi = (int64_t)floor(hi_v);
    if ((double)hi != hi_v) hi_x = 0;
  }
  char re[16384];
  size_t n = 0;
  int rc;
  if (has_lo && lo >= 0) {
    rc = js_mags(re, sizeof re, &n, lo, lo_x, has_hi ? hi : -1, hi_x);
  } else if (has_hi && hi <= 0) { /* v = -m: m in [-hi, -lo] */
    rc = js_cat(re, sizeof re, &n, "(-") ? -1 : js_mags(re, sizeof re, &n, -hi, hi_x, has_lo ? -lo : -1, lo_x);
    if (rc > 0 && hi == 0 && !hi_x && js_cat(re, sizeof re, &n, "|0")) rc = -1;
    if (rc > 0 && js_cat(re, sizeof re, &n, ")")) rc = -1;
  } else { /* both signs: -m for m in [0, -lo], and [0, hi] */
    rc = js_cat(re, sizeof re, &n, "(-") ? -1 : js_mags(re, sizeof re, &n, 0, 0, has_lo ? -lo : -1, lo_x);
    if (rc > 0 && js_cat(re, sizeof re, &n, "|")) rc = -1;
    if (rc > 0) rc = js_mags(re, sizeof re, &n, 0, 0, has_hi ? hi : -1, hi_x);
    if (rc > 0 && js_cat(re, sizeof re, &n, ")")) rc = -1;
  }
  if (rc == 0)
    return js_fail(j, GT_EUNSUPPORTED, "json schema: %s: no number between integer bounds inside the range",
                   "minimum/maximum");
  if (rc < 0) return js_fail(j, GT_EINTERNAL, "json schema: %s range too complex", "minimum/maximum");
  int32_t r;
  int grc = gr_regex(j->b, re, n, &r, j->err);
  if (grc != GT_OK) {
    if (j->rc == GT_OK) j->rc = grc;
    return -1;
  }
  return r;
}

/* integer or number with minimum/maximum/exclusiveMinimum/exclusiveMaximum: integers in any
 * range within 16 digits; numbers through js_number_range */
static int32_t js_bounded(js_t *j, json_t *schema, int integer) {
  double lo_v = 0, hi_v = 0;
  int lo_x, hi_x;
  int has_lo = js_num_bound(j, schema, "minimum", "exclusiveMinimum", &lo_v, &lo_x);
  int has_hi = js_num_bound(j, schema, "maximum", "exclusiveMaximum", &hi_v, &hi_x);
  if (has_lo < 0 || has_hi < 0) return -1;
  if (!has_lo && !has_hi) return integer ? js_integer(j) : js_number(j);
  double lim = (double)JS_INT_LIMIT;
  if ((has_lo && (lo_v > lim || lo_v < -lim)) || (has_hi && (hi_v > lim || hi_v < -lim)))
    return js_fail(j, GT_ERANGE, "json schema: %s beyond 16 digits", "minimum/maximum");
  if (!integer) {
    if (has_lo && !has_hi && !lo_x && lo_v == 0) return js_number_signed(j, 0); /* exponents too */
    return js_number_range(j, has_lo, lo_v, lo_x, has_hi, hi_v, hi_x);
  }
  int64_t lo = -JS_INT_LIMIT, hi = JS_INT_LIMIT;
  if (has_lo) {
    lo = (int64_t)ceil(lo_v);
    if (lo_x && (double)lo == lo_v) lo++;
  }
  if (has_hi) {
    hi = (int64_t)floor(hi_v);
    if (hi_x && (double)hi == hi_v) hi--;
  }
  if (lo > hi) return js_fail(j, GT_EINVAL, "json schema: no integer satisfies %s", "minimum/maximum");
  char re[4096];
  int n = gr_int_range_regex(lo, hi, re, sizeof re);
  if (n < 0) return js_fail(j, GT_EINTERNAL, "json schema: %s range too complex", "minimum/maximum");
  int32_t r;
  int rc = gr_regex(j->b, re, (size_t)n, &r, j->err);
  if (rc != GT_OK) {
    if (j->rc == GT_OK) j->rc = rc;
    return -1;
  }
  return r;
}

#define JS_MAX_MULTIPLE 64 /* multipleOf: one grammar rule per remainder */

/* multipleOf k (an integer 1..JS_MAX_MULTIPLE; on number too: its integer multiples): the
 * integers whose digits end at remainder 0, R_r ::= "" (r = 0) | d R_{(10r + d) % k}. With
 * minimum / maximum: refused (the two would need a product automaton). */
static int32_t js_multiple(js_t *j, json_t *schema) {
  json_t *m = json_object_get(schema, "multipleOf");
  static const char *const bounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  for (int i = 0; i < 4; i++)
    if (json_object_get(schema, bounds[i]))
      return js_fail(j, GT_EUNSUPPORTED, "json schema: \"multipleOf\" combined with %s is not supported", bounds[i]);
  if (!json_is_number(m) || json_number_value(m) <= 0)
    return js_fail(j, GT_EINVAL, "json schema: %s must be a number > 0", "multipleOf");
  double kd = json_number_value(m);
  if (kd != floor(kd) || kd > JS_MAX_MULTIPLE)
    return js_fail(j, GT_EUNSUPPORTED, "json schema: %s is supported as an integer up to 64", "multipleOf");
  const int k = (int)kd;
  if (k == 1) return js_integer(j);
  gr_builder_t *b = j->b;
  int32_t rem[JS_MAX_MULTIPLE] = {0};
  for (int r = 0; r < k; r++) rem[r] = gr_b_rule(b);
  gr_b_alt(b, rem[0]); /* "" at remainder 0 */
  for (int r = 0; r < k; r++)
    for (int d = 0; d < 10; d++) {
      gr_seq_t *s = gr_b_alt(b, rem[r]);
      char c = (char)('0' + d);
      gr_b_lit(b, s, &c, 1);
      gr_b_ref(b, s, rem[(10 * r + d) % k]);
    }
  int32_t r = gr_b_rule(b);
  gr_b_lit(b, gr_b_alt(b, r), "0", 1);
  for (int neg = 0; neg < 2; neg++)
    for (int d = 1; d < 10; d++) {
      gr_seq_t *s = gr_b_alt(b, r);
      char c = (char)('0' + d);
      if (neg) gr_b_lit(b, s, "-", 1);
      gr_b_lit(b, s, &c, 1);
      gr_b_ref(b, s, rem[d % k]);
    }
  return r;
}

static int32_t js_boolean(js_t *j) {
  if (j->boolean >= 0) return j->boolean;
  j->boolean = gr_b_rule(j->b);
  gr_b_lit(j->b, gr_b_alt(j->b, j->boolean), "true", 4);
  gr_b_lit(j->b, gr_b_alt(j->b, j->boolean), "false", 5);
  return j->boolean;
}

static int32_t js_null(js_t *j) {
  if (j->null < 0) j->null = gr_b_lit_rule(j->b, "null", 4);
  return j->null;
}

/* open ws (member ("," ws member){min-1,max-1})? close: the shape of arrays and objects */
static int32_t js_container(js_t *j, const char *open, int32_t member, int min, int max, const char *close) {
  gr_builder_t *b = j->b;
  int32_t list = gr_b_list(b, member, js_comma(j), min, max);
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  gr_b_lit(b, s, open, 1);
  gr_b_ref(b, s, js_ws(j));
  gr_b_ref(b, s, list);
  gr_b_lit(b, s, close, 1);
  return r;
}

/* key ws ":" ws value ws, key being a rule for the key's JSON string */
static int32_t js_member(js_t *j, int32_t key, int32_t value) {
  gr_builder_t *b = j->b;
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  gr_b_ref(b, s, key);
  gr_b_ref(b, s, js_ws(j));
  gr_b_lit(b, s, ":", 1);
  gr_b_ref(b, s, js_ws(j));
  gr_b_ref(b, s, value);
  gr_b_ref(b, s, js_ws(j));
  return r;
}

/* "[" ws (item ws ("," ws item ws){min-1,max-1})? "]" */
static int32_t js_array_of(js_t *j, int32_t item, int min, int max) {
  int32_t iw = gr_b_rule(j->b);
  gr_seq_t *s = gr_b_alt(j->b, iw);
  gr_b_ref(j->b, s, item);
  gr_b_ref(j->b, s, js_ws(j));
  return js_container(j, "[", iw, min, max, "]");
}

/* "{" ws (string ws ":" ws value ws ("," ws ...)*)? "}" */
static int32_t js_map_of(js_t *j, int32_t value) {
  return js_container(j, "{", js_member(j, js_string(j), value), 0, -1, "}");
}

/* any JSON value; the object and array rules refer back to it */
static int32_t js_value(js_t *j) {
  if (j->value >= 0) return j->value;
  gr_builder_t *b = j->b;
  j->value = gr_b_rule(b);
  j->object = js_map_of(j, j->value);
  j->array = js_array_of(j, j->value, 0, -1);
  int32_t parts[] = {j->object, j->array, js_string(j), js_number(j), js_boolean(j), js_null(j)};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) gr_b_ref(b, gr_b_alt(b, j->value), parts[i]);
  return j->value;
}

static int32_t js_any_object(js_t *j) {
  js_value(j);
  return j->object;
}

/* ------------------------------------------------------------ schemas */

static int32_t js_gen(js_t *j, json_t *schema, int depth);

/* the JSON text of v, compact, as a literal rule */
static int32_t js_literal(js_t *j, json_t *v) {
  char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!txt) return js_fail(j, GT_ENOMEM, "json schema: %s", "out of memory");
  int32_t r = gr_b_lit_rule(j->b, txt, strlen(txt));
  free(txt);
  return r;
}

/* Resolves a local "#/a/b" JSON pointer against the root schema; NULL if absent. */
static json_t *js_resolve(js_t *j, const char *ref) {
  if (ref[0] != '#') return NULL;
  json_t *cur = j->root;
  const char *p = ref + 1;
  if (*p == 0) return cur;
  if (*p != '/') return NULL;
  char tok[256];
  while (*p == '/') {
    p++;
    size_t n = 0;
    while (*p && *p != '/') {
      char c = *p++;
      if (c == '~' && *p == '0') { c = '~'; p++; }
      else if (c == '~' && *p == '1') { c = '/'; p++; }
      if (n + 1 >= sizeof tok) return NULL;
      tok[n++] = c;
    }
    tok[n] = 0;
    if (json_is_object(cur)) {
      cur = json_object_get(cur, tok);
    } else if (json_is_array(cur)) {
      char *end;
      long i = strtol(tok, &end, 10);
      cur = (*end || n == 0 || i < 0) ? NULL : json_array_get(cur, (size_t)i);
    } else {
      cur = NULL;
    }
    if (!cur) return NULL;
  }
  return cur;
}

/* An integer keyword in [0, GR_MAX_REPEAT] (or absent: def); -2 after an error. */
static int js_bound(js_t *j, json_t *schema, const char *key, int def) {
  json_t *v = json_object_get(schema, key);
  if (!v) return def;
  if (!json_is_integer(v) || json_integer_value(v) < 0) {
    js_fail(j, GT_EINVAL, "json schema: %s must be a non-negative integer", key);
    return -2;
  }
  if (json_integer_value(v) > GR_MAX_REPEAT) {
    js_fail(j, GT_ERANGE, "json schema: %s over the supported limit of 1024", key);
    return -2;
  }
  return (int)json_integer_value(v);
}

typedef struct {
  const char *name;
  json_t *schema;
  int required;
  int32_t kv;  /* "name" ws ":" ws value ws */
} js_prop_t;

/* An object with known properties (in schema order). With A_i = what may follow once some
 * property was written and B_i = what may follow when none was yet:
 *   A_i ::= "," ws kv_i A_{i+1}            (required)  | ("," ws kv_i)? A_{i+1} (optional)
 *   B_i ::= kv_i A_{i+1}                   (required)  | kv_i A_{i+1} | B_{i+1}   (optional)
 * and "{" ws B_1 "}". */
static int32_t js_object_props(js_t *j, js_prop_t *p, size_t n) {
  gr_builder_t *b = j->b;
  int32_t a_next = gr_b_rule(b), b_next = gr_b_rule(b);
  gr_b_alt(b, a_next); /* A_{n+1} = B_{n+1} = "" */
  gr_b_alt(b, b_next);
  for (size_t k = n; k-- > 0;) {
    int32_t a = gr_b_rule(b), bb = gr_b_rule(b);
    gr_seq_t *s = gr_b_alt(b, a);
    gr_b_ref(b, s, js_comma(j));
    gr_b_ref(b, s, p[k].kv);
    gr_b_ref(b, s, a_next);
    if (!p[k].required) gr_b_ref(b, gr_b_alt(b, a), a_next);
    s = gr_b_alt(b, bb);
    gr_b_ref(b, s, p[k].kv);
    gr_b_ref(b, s, a_next);
    if (!p[k].required) gr_b_ref(b, gr_b_alt(b, bb), b_next);
    a_next = a;
    b_next = bb;
  }
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  gr_b_lit(b, s, "{", 1);
  gr_b_ref(b, s, js_ws(j));
  gr_b_ref(b, s, b_next);
  gr_b_lit(b, s, "}", 1);
  return r;
}

static int32_t js_object(js_t *j, json_t *schema, int depth) {
  json_t *props = json_object_get(schema, "properties");
  json_t *req = json_object_get(schema, "required");
  json_t *addl = json_object_get(schema, "additionalProperties");
  if (props && !json_is_object(props)) return js_fail(j, GT_EINVAL, "json schema: %s must be an object", "properties");
  if (req && !json_is_array(req)) return js_fail(j, GT_EINVAL, "json schema: %s must be an array", "required");
  if (addl && !json_is_boolean(addl) && !json_is_object(addl))
    return js_fail(j, GT_EINVAL, "json schema: %s must be a boolean or a schema", "additionalProperties");
  json_t *pn = json_object_get(schema, "propertyNames"), *pp = json_object_get(schema, "patternProperties");
  if (pn && !json_is_true(pn) && !(json_is_object(pn) && json_object_size(pn) == 1 &&
                                   json_is_string(json_object_get(pn, "type")) &&
                                   !strcmp(json_string_value(json_object_get(pn, "type")), "string")))
    return js_fail(j, GT_EUNSUPPORTED, "json schema: \"%s\" is supported only as {\"type\": \"string\"}", "propertyNames");
  int minp = js_bound(j, schema, "minProperties", 0), maxp = js_bound(j, schema, "maxProperties", -1);
  if (minp == -2 || maxp == -2) return -1;
  if (maxp >= 0 && maxp < minp) return js_fail(j, GT_EINVAL, "json schema: %s is less than minProperties", "maxProperties");
  size_t n_props = props ? json_object_size(props) : 0;
  if (pp && (!json_is_object(pp) || (json_object_size(pp) && (n_props || json_array_size(req) || (addl && !json_is_false(addl))))))
    return js_fail(j, GT_EUNSUPPORTED,
                   "json schema: \"%s\" is supported only alone (no properties, required or additionalProperties)",
                   "patternProperties");
  if (n_props == 0 && json_array_size(req) == 0) {
    if (pp && json_object_size(pp)) { /* keys matching one of the patterns, each with its schema */
      int32_t member = gr_b_rule(j->b);
      const char *pat;
      json_t *ps;
      json_object_foreach(pp, pat, ps) {
        int32_t body, v;
        int rc = gr_regex_json(j->b, pat, strlen(pat), "json schema patternProperties", &body, j->err);
        if (rc != GT_OK) {
          if (j->rc == GT_OK) j->rc = rc;
          return -1;
        }
        if ((v = js_gen(j, ps, depth + 1)) < 0) return -1;
        gr_b_ref(j->b, gr_b_alt(j->b, member), js_member(j, js_quoted(j, body), v));
      }
      return js_container(j, "{", member, minp, maxp, "}");
    }
    if (json_is_false(addl) || maxp == 0) {
      if (minp > 0) return js_fail(j, GT_EINVAL, "json schema: %s needs properties the schema forbids", "minProperties");
      return gr_b_lit_rule(j->b, "{}", 2);
    }
    if ((!addl || json_is_true(addl)) && minp == 0 && maxp < 0) return js_any_object(j);
    int32_t v = addl && json_is_object(addl) ? js_gen(j, addl, depth + 1) : js_value(j);
    if (v < 0) return -1;
    return js_container(j, "{", js_member(j, js_string(j), v), minp, maxp, "}");
  }
  size_t n = n_props + json_array_size(req);
  js_prop_t *p = calloc(n ? n : 1, sizeof *p);
  if (!p) return js_fail(j, GT_ENOMEM, "json schema: %s", "out of memory");
  size_t k = 0;
  const char *key;
  json_t *sub;
  json_object_foreach(props, key, sub) p[k++] = (js_prop_t){key, sub, 0, -1};
  for (size_t i = 0; i < json_array_size(req); i++) {
    json_t *r = json_array_get(req, i);
    if (!json_is_string(r)) {
      free(p);
      return js_fail(j, GT_EINVAL, "json schema: %s must hold strings", "required");
    }
    size_t q = 0;
    while (q < k && strcmp(p[q].name, json_string_value(r)) != 0) q++;
    if (q == k) { /* required but not described: any value, unless additionalProperties forbids it */
      if (json_is_false(addl)) {
        j->rc = gt_err_set(j->err, GT_EINVAL,
                           "json schema: required property \"%s\" is not in properties and additionalProperties is false",
                           json_string_value(r));
        free(p);
        return -1;
      }
      p[k++] = (js_prop_t){json_string_value(r), addl && json_is_object(addl) ? addl : json_true(), 0, -1};
    }
    p[q].required = 1;
  }
  /* minProperties / maxProperties over known properties (extras are never written): the first
   * optional properties become required up to minProperties; past maxProperties the last
   * optional ones are left out */
  size_t n_req = 0;
  for (size_t i = 0; i < k; i++) n_req += p[i].required;
  if ((size_t)minp > k || (maxp >= 0 && (size_t)maxp < n_req)) {
    free(p);
    return js_fail(j, GT_EUNSUPPORTED, "json schema: %s cannot be met by the schema's properties",
                   (size_t)minp > k ? "minProperties" : "maxProperties");
  }
  for (size_t i = 0; i < k && n_req < (size_t)minp; i++)
    if (!p[i].required) p[i].required = 1, n_req++;
  if (maxp >= 0) {
    size_t keep = (size_t)maxp - n_req, w = 0;
    for (size_t i = 0; i < k; i++)
      if (p[i].required || (keep && keep--)) p[w++] = p[i];
    k = w;
  }
  for (size_t i = 0; i < k && j->rc == GT_OK; i++) {
    int32_t v = js_gen(j, p[i].schema, depth + 1);
    if (v < 0) break;
    json_t *name = json_string(p[i].name);
    int32_t kname = name ? js_literal(j, name) : js_fail(j, GT_ENOMEM, "json schema: %s", "out of memory");
    json_decref(name);
    if (kname < 0) break;
    p[i].kv = js_member(j, kname, v);
  }
  int32_t r = j->rc == GT_OK ? js_object_props(j, p, k) : -1;
  free(p);
  return r;
}

/* prefixItems (a tuple): its first min(len, maxItems) members in order, then items' members
 * (any value when items is absent, none when false): as many as minItems needs, and more up to
 * maxItems only when items is a schema. */
static int32_t js_tuple(js_t *j, json_t *prefix, json_t *items, int min, int max, int depth) {
  if (!json_is_array(prefix) || json_array_size(prefix) == 0)
    return js_fail(j, GT_EINVAL, "json schema: %s must be a non-empty array", "prefixItems");
  int k = (int)json_array_size(prefix);
  if (max >= 0 && max < k) k = max;
  const int nmin = min > k ? min - k : 0;
  if (nmin && json_is_false(items))
    return js_fail(j, GT_EINVAL, "json schema: %s needs more members than prefixItems with items false", "minItems");
  const int nmax = items && !json_is_false(items) ? (max < 0 ? -1 : max - k) : nmin;
  gr_builder_t *b = j->b;
  int32_t r = gr_b_rule(b);
  gr_seq_t *s = gr_b_alt(b, r);
  gr_b_lit(b, s, "[", 1);
  gr_b_ref(b, s, js_ws(j));
  for (int i = 0; i < k; i++) {
    int32_t v = js_gen(j, json_array_get(prefix, (size_t)i), depth + 1);
    if (v < 0) return -1;
    if (i) gr_b_ref(b, s, js_comma(j));
    gr_b_ref(b, s, v);
    gr_b_ref(b, s, js_ws(j));
  }
  if (nmax != 0) {
    int32_t it = items && !json_is_boolean(items) ? js_gen(j, items, depth + 1) : js_value(j);
    if (it < 0) return -1;
    int32_t one = gr_b_rule(b); /* (",")? ws item ws: the comma unless it is the first member */
    gr_seq_t *o = gr_b_alt(b, one);
    if (k) gr_b_ref(b, o, js_comma(j));
    gr_b_ref(b, o, it);
    gr_b_ref(b, o, js_ws(j));
    if (k) gr_b_ref(b, s, gr_b_repeat(b, one, nmin, nmax));
    else gr_b_ref(b, s, gr_b_list(b, it, js_comma(j), nmin, nmax)); /* no prefix kept (maxItems 0) */
  }
  gr_b_lit(b, s, "]", 1);
  return r;
}

static int32_t js_array(js_t *j, json_t *schema, int depth) {
  json_t *items = json_object_get(schema, "items"), *prefix = json_object_get(schema, "prefixItems");
  int min = js_bound(j, schema, "minItems", 0);
  int max = js_bound(j, schema, "maxItems", -1);
  if (min == -2 || max == -2) return -1;
  if (max >= 0 && max < min) return js_fail(j, GT_EINVAL, "json schema: %s is less than minItems", "maxItems");
  if (items && !json_is_object(items) && !json_is_boolean(items))
    return js_fail(j, GT_EUNSUPPORTED, "json schema: unsupported keyword \"%s\" (only a single items schema)", "items");
  /* uniqueItems: the grammar cannot compare members; enforced only where it holds by itself (at
   * most one member), else refused */
  json_t *uniq = json_object_get(schema, "uniqueItems");
  if (uniq && !json_is_boolean(uniq)) return js_fail(j, GT_EINVAL, "json schema: %s must be a boolean", "uniqueItems");
  if (json_is_true(uniq) && !(max >= 0 && max <= 1))
    return js_fail(j, GT_EUNSUPPORTED, "json schema: \"%s\" is supported only with maxItems 0 or 1", "uniqueItems");
  if (prefix) return js_tuple(j, prefix, items, min, max, depth);
  int32_t it = items ? js_gen(j, items, depth + 1) : js_value(j);
  return it < 0 ? -1 : js_array_of(j, it, min, max);
}

/* Formats as regexes over the string's text, each a subset of what ajv-formats' full mode
 * accepts (dates with valid days for every year, times with a zone). */
static const char *const js_formats[][2] = {
  {"date", "[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"},
  {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
  {"date-time", "[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"
                "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
  {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
  {"ipv4", "((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"},
  {"email", "[a-zA-Z0-9_+-]{1,32}(\\.[a-zA-Z0-9_+-]{1,32}){0,3}@([a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?\\.){1,3}"
            "[a-zA-Z]{2,10}"},
};

/* A string whose text matches pattern (as a whole: ^ and $ implied, a subset of the strings
 * JSON schema's search semantics allow) or is in a format (js_formats). */
static int32_t js_pattern_string(js_t *j, json_t *schema, json_t *pat, json_t *fmt) {
  /* pattern and format both (Zod's .email(), .uuid(), ...): the pattern, which the validator
   * checks too; a pattern with lookaround (the grammar has none) gives way to the format, whose
   * regex is chosen inside the usual validators' patterns (Zod's email: no '%', no '..') */
  if (pat && fmt) {
    if (json_is_string(pat) && strstr(json_string_value(pat), "(?") && strncmp(json_string_value(pat), "(?:", 3)) pat = NULL;
    else fmt = NULL;
  }
  const char *kw = pat ? "pattern" : "format";
  if (json_object_get(schema, "minLength") || json_object_get(schema, "maxLength"))
    return js_fail(j, GT_EUNSUPPORTED, "json schema: \"%s\" combined with minLength/maxLength is not supported", kw);
  json_t *v = pat ? pat : fmt;
  if (!json_is_string(v)) return js_fail(j, GT_EINVAL, "json schema: %s must be a string", kw);
  const char *re = json_string_value(v);
  size_t len = json_string_length(v);
  if (fmt) {
    size_t k = 0, n = sizeof js_formats / sizeof js_formats[0];
    while (k < n && strcmp(js_formats[k][0], re) != 0) k++;
    if (k == n) return js_fail(j, GT_EUNSUPPORTED, "json schema: unsupported format \"%s\"", re);
    re = js_formats[k][1];
    len = strlen(re);
  }
  int32_t body;
  int rc = gr_regex_json(j->b, re, len, pat ? "json schema pattern" : "json schema format", &body, j->err);
  if (rc != GT_OK) {
    if (j->rc == GT_OK) j->rc = rc;
    return -1;
  }
  return js_quoted(j, body);
}

static int32_t js_type(js_t *j, json_t *schema, const char *t, int depth) {
  if (!strcmp(t, "string")) {
    json_t *pat = json_object_get(schema, "pattern"), *fmt = json_object_get(schema, "format");
    if (pat || fmt) return js_pattern_string(j, schema, pat, fmt);
    int min = js_bound(j, schema, "minLength", 0), max = js_bound(j, schema, "maxLength", -1);
    if (min == -2 || max == -2) return -1;
    if (max >= 0 && max < min) return js_fail(j, GT_EINVAL, "json schema: %s is less than minLength", "maxLength");
    return (min == 0 && max < 0) ? js_string(j) : js_string_len(j, min, max);
  }
  if ((!strcmp(t, "number") || !strcmp(t, "integer")) && json_object_get(schema, "multipleOf"))
    return js_multiple(j, schema);
  if (!strcmp(t, "number")) return js_bounded(j, schema, 0);
  if (!strcmp(t, "integer")) return js_bounded(j, schema, 1);
  if (!strcmp(t, "boolean")) return js_boolean(j);
  if (!strcmp(t, "null")) return js_null(j);
  if (!strcmp(t, "object")) return js_object(j, schema, depth);
  if (!strcmp(t, "array")) return js_array(j, schema, depth);
  return js_fail(j, GT_EINVAL, "json schema: unknown type \"%s\"", t);
}

/* keywords that carry no constraint */
static const char *const js_annotations[] = {
  "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
  "readOnly", "writeOnly", "$defs", "definitions", NULL};
/* keywords handled here */
static const char *const js_keywords[] = {
  "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems",
  "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "minimum",
  "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "prefixItems", "uniqueItems",
  "minProperties", "maxProperties", "patternProperties", "propertyNames", NULL};

static int in_list(const char *const *l, const char *k) {
  for (; *l; l++)
    if (!strcmp(*l, k)) return 1;
  return 0;
}

static int32_t js_alternation(js_t *j, json_t *list, const char *kw, int depth, int literals) {
  if (!json_is_array(list) || json_array_size(list) == 0)
    return js_fail(j, GT_EINVAL, "json schema: %s must be a non-empty array", kw);
  int32_t r = gr_b_rule(j->b);
  for (size_t i = 0; i < json_array_size(list); i++) {
    json_t *m = json_array_get(list, i);
    int32_t x = literals ? js_literal(j, m) : js_gen(j, m, depth + 1);
    if (x < 0) return -1;
    gr_b_ref(j->b, gr_b_alt(j->b, r), x);
  }
  return r;
}

/* keywords that pick the whole value; generated alone, so they cannot be combined with each
 * other or with constraints (which would be silently dropped), except enum/const with a type
 * that all their values have */
static const char *const js_selectors[] = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf", NULL};

static int js_has_type(json_t *v, const char *t) {
  if (!strcmp(t, "string")) return json_is_string(v);
  if (!strcmp(t, "integer")) return json_is_integer(v);
  if (!strcmp(t, "number")) return json_is_number(v);
  if (!strcmp(t, "boolean")) return json_is_boolean(v);
  if (!strcmp(t, "null")) return json_is_null(v);
  if (!strcmp(t, "object")) return json_is_object(v);
  if (!strcmp(t, "array")) return json_is_array(v);
  return 0;
}

/* 1 when v has the type (a name or a list of names) */
static int js_value_typed(json_t *v, json_t *type) {
  if (json_is_string(type)) return js_has_type(v, json_string_value(type));
  for (size_t i = 0; i < json_array_size(type); i++)
    if (js_has_type(v, json_string_value(json_array_get(type, i)))) return 1;
  return 0;
}

/* Checks that a selector keyword stands alone (annotations aside); GT_OK or the error. */
static int js_check_combination(js_t *j, json_t *schema) {
  const char *sel = NULL, *key;
  json_t *v;
  json_object_foreach(schema, key, v) {
    if (!in_list(js_selectors, key)) continue;
    if (sel) {
      j->rc = gt_err_set(j->err, GT_EUNSUPPORTED, "json schema: \"%s\" combined with \"%s\" is not supported", sel, key);
      return j->rc;
    }
    sel = key;
  }
  if (!sel) return GT_OK;
  json_object_foreach(schema, key, v) {
    if (in_list(js_selectors, key) || in_list(js_annotations, key)) continue;
    if (!strcmp(key, "type") && (!strcmp(sel, "enum") || !strcmp(sel, "const"))) {
      json_t *vals = json_object_get(schema, sel);
      for (size_t i = 0; i < (json_is_array(vals) && !strcmp(sel, "enum") ? json_array_size(vals) : 1); i++) {
        json_t *x = !strcmp(sel, "enum") ? json_array_get(vals, i) : vals;
        if (!js_value_typed(x, v)) {
          j->rc = gt_err_set(j->err, GT_EINVAL, "json schema: a value of \"%s\" does not have the schema's type", sel);
          return j->rc;
        }
      }
      continue;
    }
    j->rc = gt_err_set(j->err, GT_EUNSUPPORTED, "json schema: \"%s\" combined with \"%s\" is not supported", sel, key);
    return j->rc;
  }
  return GT_OK;
}

static int32_t js_gen_body(js_t *j, json_t *schema, int depth) {
  const char *key;
  json_t *v;
  json_object_foreach(schema, key, v) {
    if (!in_list(js_annotations, key) && !in_list(js_keywords, key))
      return js_fail(j, GT_EUNSUPPORTED, "json schema: unsupported keyword \"%s\"", key);
  }
  if (js_check_combination(j, schema) != GT_OK) return -1;
  if ((v = json_object_get(schema, "$ref"))) {
    if (!json_is_string(v)) return js_fail(j, GT_EINVAL, "json schema: %s must be a string", "$ref");
    json_t *target = js_resolve(j, json_string_value(v));
    if (!target)
      return js_fail(j, GT_EINVAL, "json schema: $ref \"%s\" does not resolve to a local definition",
                     json_string_value(v));
    return js_gen(j, target, depth + 1);
  }
  if ((v = json_object_get(schema, "const"))) return js_literal(j, v);
  if ((v = json_object_get(schema, "enum"))) return js_alternation(j, v, "enum", depth, 1);
  if ((v = json_object_get(schema, "anyOf"))) return js_alternation(j, v, "anyOf", depth, 0);
  if ((v = json_object_get(schema, "oneOf"))) return js_alternation(j, v, "oneOf", depth, 0);
  if ((v = json_object_get(schema, "allOf"))) {
    if (!json_is_array(v) || json_array_size(v) != 1)
      return js_fail(j, GT_EUNSUPPORTED, "json schema: unsupported keyword \"%s\" (only with one member)", "allOf");
    return js_gen(j, json_array_get(v, 0), depth + 1);
  }
  json_t *type = json_object_get(schema, "type");
  if (json_is_string(type)) return js_type(j, schema, json_string_value(type), depth);
  if (json_is_array(type)) {
    if (json_array_size(type) == 0) return js_fail(j, GT_EINVAL, "json schema: %s must not be empty", "type");
    int32_t r = gr_b_rule(j->b);
    for (size_t i = 0; i < json_array_size(type); i++) {
      json_t *t = json_array_get(type, i);
      if (!json_is_string(t)) return js_fail(j, GT_EINVAL, "json schema: %s must hold strings", "type");
      int32_t x = js_type(j, schema, json_string_value(t), depth);
      if (x < 0) return -1;
      gr_b_ref(j->b, gr_b_alt(j->b, r), x);
    }
    return r;
  }
  if (type) return js_fail(j, GT_EINVAL, "json schema: %s must be a string or an array", "type");
  if (json_object_get(schema, "properties") || json_object_get(schema, "required") ||
      json_object_get(schema, "additionalProperties"))
    return js_object(j, schema, depth);
  if (json_object_get(schema, "items") || json_object_get(schema, "minItems") || json_object_get(schema, "maxItems"))
    return js_array(j, schema, depth);
  if (json_object_get(schema, "minLength") || json_object_get(schema, "maxLength") ||
      json_object_get(schema, "pattern") || json_object_get(schema, "format"))
    return js_type(j, schema, "string", depth);
  return js_value(j);
}

/* The rule for schema; each schema node gets one rule, made before its body so that $ref
 * cycles refer back to it. */
static int32_t js_gen(js_t *j, json_t *schema, int depth) {
  if (j->rc != GT_OK) return -1;
  if (depth > JS_MAX_DEPTH) return js_fail(j, GT_ERANGE, "json schema: nested deeper than %s levels", "128");
  if (json_is_true(schema)) return js_value(j);
  if (json_is_false(schema)) return js_fail(j, GT_EINVAL, "json schema: %s matches nothing", "false");
  if (!json_is_object(schema)) return js_fail(j, GT_EINVAL, "json schema: %s", "a schema must be an object or a boolean");
  for (size_t i = 0; i < j->n_memo; i++)
    if (j->memo[i].node == schema) return j->memo[i].rule;
  if (j->n_memo == j->cap_memo) {
    size_t c = j->cap_memo ? j->cap_memo * 2 : 16;
    js_memo_t *m = realloc(j->memo, c * sizeof *m);
    if (!m) return js_fail(j, GT_ENOMEM, "json schema: %s", "out of memory");
    j->memo = m;
    j->cap_memo = c;
  }
  int32_t r = gr_b_rule(j->b);
  j->memo[j->n_memo++] = (js_memo_t){schema, r};
  int32_t body = js_gen_body(j, schema, depth);
  if (body < 0) return -1;
  gr_b_ref(j->b, gr_b_alt(j->b, r), body);
  return r;
}

static json_t *js_parse(const char *spec, size_t len, const char *what, gt_err_t *err) {
  json_error_t je;
  json_t *root = spec ? json_loadb(spec, len, JSON_DECODE_ANY, &je) : NULL;
  if (!root)
    gt_err_set(err, GT_EINVAL, "%s: invalid JSON at line %d column %d: %s", what, spec ? je.line : 0,
               spec ? je.column : 0, spec ? je.text : "no text");
  return root;
}

int gr_json_schema(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err) {
  json_t *doc = js_parse(spec, len, "json schema", err);
  if (!doc) return GT_EINVAL;
  js_t j;
  js_init(&j, b, err);
  j.root = doc;
  *root = js_gen(&j, doc, 0);
  free(j.memo);
  json_decref(doc);
  return j.rc;
}

int gr_json_object(gr_builder_t *b, int32_t *root, gt_err_t *err) {
  js_t j;
  js_init(&j, b, err);
  *root = js_any_object(&j);
  return GT_OK;
}

int gr_choice(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err) {
  json_t *doc = js_parse(spec, len, "guided_choice", err);
  if (!doc) return GT_EINVAL;
  int rc = GT_OK;
  if (!json_is_array(doc) || json_array_size(doc) == 0)
    rc = gt_err_set(err, GT_EINVAL, "guided_choice: must be a non-empty array of strings");
  int32_t r = gr_b_rule(b);
  for (size_t i = 0; rc == GT_OK && i < json_array_size(doc); i++) {
    json_t *s = json_array_get(doc, i);
    if (!json_is_string(s)) {
      rc = gt_err_set(err, GT_EINVAL, "guided_choice: element %zu is not a string", i);
      break;
    }
    gr_b_lit(b, gr_b_alt(b, r), json_string_value(s), json_string_length(s));
  }
  json_decref(doc);
  *root = r;
  return rc;
}
