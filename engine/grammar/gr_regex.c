/* engine/grammar/gr_regex.c — an ECMAScript-like regex (the subset in grammar.h) to grammar
 * rules, matched against the whole output. Recursive descent:
 *   alt  := seq ('|' seq)*
 *   seq  := (atom quant?)*
 *   atom := '(' ('?:' | '?<name>')? alt ')' | '[' '^'? class ']' | '.' | '\' escape | literal
 *   quant:= ('*' | '+' | '?' | '{m}' | '{m,}' | '{m,n}') '?'?
 * Character classes are code point ranges, encoded as UTF-8 byte sequences. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_internal.h"

#define RX_MAX_DEPTH 200

typedef struct {
  gr_builder_t *b;
  const unsigned char *s;
  size_t n, i;
  gt_err_t *err;
  int rc;
  int depth;
  gr_range_t *rg; /* class scratch */
  size_t n_rg, cap_rg;
  int json;        /* the text is written inside a JSON string: escape what must be */
  const char *who; /* error prefix */
} rx_t;

static int32_t rx_fail(rx_t *x, int code, const char *what) {
  if (x->rc == GT_OK)
    x->rc = gt_err_set(x->err, code, "%s: %s at offset %zu", x->who, what, x->i);
  return -1;
}

static int rx_more(const rx_t *x) { return x->i < x->n; }
static int rx_peek(const rx_t *x) { return x->i < x->n ? x->s[x->i] : -1; }

/* Decodes one UTF-8 code point of the pattern (the spec must be valid UTF-8). */
static int32_t rx_cp(rx_t *x) {
  unsigned c = x->s[x->i];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (!len || x->i + (size_t)len > x->n) return rx_fail(x, GT_EINVAL, "invalid UTF-8");
  uint32_t cp = len == 1 ? c : c & (0x7F >> len);
  for (int k = 1; k < len; k++) {
    unsigned d = x->s[x->i + k];
    if ((d & 0xC0) != 0x80) return rx_fail(x, GT_EINVAL, "invalid UTF-8");
    cp = cp << 6 | (d & 63);
  }
  x->i += (size_t)len;
  return (int32_t)cp;
}

static int rx_add(rx_t *x, uint32_t lo, uint32_t hi) {
  if (x->n_rg == x->cap_rg) {
    size_t c = x->cap_rg ? x->cap_rg * 2 : 32;
    gr_range_t *r = realloc(x->rg, c * sizeof *r);
    if (!r) return rx_fail(x, GT_ENOMEM, "out of memory"), 0;
    x->rg = r;
    x->cap_rg = c;
  }
  x->rg[x->n_rg++] = (gr_range_t){lo, hi};
  return 1;
}

static const gr_range_t rx_digit[] = {{'0', '9'}};
static const gr_range_t rx_word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const gr_range_t rx_space[] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                      {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                      {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
static const gr_range_t rx_dot_not[] = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

/* Adds a predefined class (or its complement) to the scratch ranges. */
static int rx_add_class(rx_t *x, const gr_range_t *r, size_t n, int negate) {
  if (!negate) {
    for (size_t k = 0; k < n; k++)
      if (!rx_add(x, r[k].lo, r[k].hi)) return 0;
    return 1;
  }
  gr_range_t out[16];
  size_t m = gr_ranges_negate(r, n, out);
  for (size_t k = 0; k < m; k++)
    if (!rx_add(x, out[k].lo, out[k].hi)) return 0;
  return 1;
}

static int rx_hex(rx_t *x, int digits, uint32_t *out) {
  uint32_t v = 0;
  for (int k = 0; k < digits; k++) {
    int c = rx_peek(x);
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return rx_fail(x, GT_EINVAL, "bad hex escape"), 0;
    v = v << 4 | (uint32_t)d;
    x->i++;
  }
  *out = v;
  return 1;
}

/* After a backslash: a single code point (returns it), or a class escape added to the scratch
 * ranges (returns -2), or -1 on error. in_class: inside [...]. */
static int32_t rx_escape(rx_t *x, int in_class) {
  if (!rx_more(x)) return rx_fail(x, GT_EINVAL, "trailing backslash");
  int c = x->s[x->i++];
  uint32_t v;
  switch (c) {
  case 'n': return '\n';
  case 't': return '\t';
  case 'r': return '\r';
  case 'f': return '\f';
  case 'v': return '\v';
  case '0':
    if (rx_peek(x) >= '0' && rx_peek(x) <= '9') return rx_fail(x, GT_EUNSUPPORTED, "octal escape");
    return 0;
  case 'x': return rx_hex(x, 2, &v) ? (int32_t)v : -1;
  case 'u':
    if (rx_peek(x) == '{') {
      x->i++;
      v = 0;
      int nd = 0;
      while (rx_peek(x) != '}' && nd < 7) {
        uint32_t d;
        if (!rx_hex(x, 1, &d)) return -1;
        v = v << 4 | d;
        nd++;
      }
      if (rx_peek(x) != '}' || nd == 0 || v > 0x10FFFF) return rx_fail(x, GT_EINVAL, "bad \\u{...} escape");
      x->i++;
      return (int32_t)v;
    }
    return rx_hex(x, 4, &v) ? (int32_t)v : -1;
  case 'd': case 'D': return rx_add_class(x, rx_digit, 1, c == 'D') ? -2 : -1;
  case 'w': case 'W': return rx_add_class(x, rx_word, 4, c == 'W') ? -2 : -1;
  case 's': case 'S': return rx_add_class(x, rx_space, 10, c == 'S') ? -2 : -1;
  case 'b':
    if (in_class) return '\b';
    return rx_fail(x, GT_EUNSUPPORTED, "word boundary \\b");
  case 'B': return rx_fail(x, GT_EUNSUPPORTED, "word boundary \\B");
  case 'k': return rx_fail(x, GT_EUNSUPPORTED, "backreference \\k");
  case 'p': case 'P': return rx_fail(x, GT_EUNSUPPORTED, "unicode property escape \\p");
  case 'c': return rx_fail(x, GT_EUNSUPPORTED, "control escape \\c");
  default:
    if (c >= '1' && c <= '9') return rx_fail(x, GT_EUNSUPPORTED, "backreference");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return rx_fail(x, GT_EUNSUPPORTED, "unknown escape");
    if (c >= 0x80) { /* an escaped non-ASCII character is itself */
      x->i--;
      return rx_cp(x);
    }
    return c;
  }
}

/* One code point of r[0..n) as JSON string content: raw UTF-8 where JSON allows it, else its
 * escape (\" \\ \b \f \n \r \t \u00XX; NUL never: strict parsers refuse \u0000). */
static int32_t rx_json_class(rx_t *x, const gr_range_t *r, size_t n) {
  static const gr_range_t raw_ok[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
  gr_range_t *raw = malloc((3 * n + 1) * sizeof *raw);
  if (!raw) return rx_fail(x, GT_ENOMEM, "out of memory");
  size_t nraw = 0;
  int32_t rule = gr_b_rule(x->b);
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < 3; k++) { /* r[i] within the raw-allowed ranges */
      uint32_t lo = r[i].lo > raw_ok[k].lo ? r[i].lo : raw_ok[k].lo;
      uint32_t hi = r[i].hi < raw_ok[k].hi ? r[i].hi : raw_ok[k].hi;
      if (lo <= hi) raw[nraw++] = (gr_range_t){lo, hi};
    }
    for (uint32_t c = r[i].lo; c <= r[i].hi && c <= 0x5C; c++) { /* the escaped ones */
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      if (c == 0) continue;
      char esc[8];
      const char *named = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                        : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
      if (!named) snprintf(esc, sizeof esc, "\\u%04x", (unsigned)c);
      const char *e = named ? named : esc;
      gr_b_lit(x->b, gr_b_alt(x->b, rule), e, strlen(e));
    }
  }
  if (nraw) gr_b_ref(x->b, gr_b_alt(x->b, rule), gr_b_utf8_class(x->b, raw, nraw));
  free(raw);
  return rule;
}

/* The scratch ranges as a one-code-point rule; negate: their complement. */
static int32_t rx_class_rule(rx_t *x, int negate) {
  size_t n = gr_ranges_normalize(x->rg, x->n_rg);
  const gr_range_t *r = x->rg;
  gr_range_t *out = NULL;
  if (negate) {
    out = malloc((n + 1) * sizeof *out);
    if (!out) return rx_fail(x, GT_ENOMEM, "out of memory");
    n = gr_ranges_negate(x->rg, n, out);
    r = out;
  }
  int32_t rule = x->json ? rx_json_class(x, r, n) : gr_b_utf8_class(x->b, r, n);
  free(out);
  return rule;
}

/* One member of a [...] class: a code point, -2 for a class escape (added to the scratch
 * ranges), -1 on error. */
static int32_t rx_class_atom(rx_t *x) {
  if (rx_peek(x) != '\\') return rx_cp(x);
  x->i++;
  return rx_escape(x, 1);
}

static int32_t rx_class(rx_t *x) { /* after '[' */
  x->n_rg = 0;
  int negate = rx_peek(x) == '^';
  if (negate) x->i++;
  while (rx_more(x) && rx_peek(x) != ']') {
    int32_t lo = rx_class_atom(x);
    if (lo == -1) return -1;
    if (lo == -2) continue; /* \d etc. */
    uint32_t hi = (uint32_t)lo;
    if (rx_peek(x) == '-' && x->i + 1 < x->n && x->s[x->i + 1] != ']') {
      x->i++;
      int32_t h = rx_class_atom(x);
      if (h == -1) return -1;
      if (h == -2 || h < lo) return rx_fail(x, GT_EINVAL, "bad range in character class");
      hi = (uint32_t)h;
    }
    if (!rx_add(x, (uint32_t)lo, hi)) return -1;
  }
  if (!rx_more(x)) return rx_fail(x, GT_EINVAL, "unterminated character class");
  x->i++;
  return rx_class_rule(x, negate);
}

static int32_t rx_alt(rx_t *x);

static int32_t rx_atom(rx_t *x) {
  int c = rx_peek(x);
  if (c == '(') {
    x->i++;
    if (rx_peek(x) == '?') {
      if (x->i + 1 < x->n && x->s[x->i + 1] == ':') {
        x->i += 2;
      } else if (x->i + 2 < x->n && x->s[x->i + 1] == '<' && x->s[x->i + 2] != '=' && x->s[x->i + 2] != '!') {
        x->i += 2; /* named group: the name does not matter */
        while (rx_more(x) && rx_peek(x) != '>') x->i++;
        if (!rx_more(x)) return rx_fail(x, GT_EINVAL, "unterminated group name");
        x->i++;
      } else {
        return rx_fail(x, GT_EUNSUPPORTED, "lookaround or group flag (?");
      }
    }
    if (++x->depth > RX_MAX_DEPTH) return rx_fail(x, GT_ERANGE, "groups nested too deep");
    int32_t r = rx_alt(x);
    x->depth--;
    if (r < 0) return -1;
    if (rx_peek(x) != ')') return rx_fail(x, GT_EINVAL, "missing )");
    x->i++;
    return r;
  }
  if (c == '[') {
    x->i++;
    return rx_class(x);
  }
  x->n_rg = 0;
  if (c == '.') {
    x->i++;
    return rx_add_class(x, rx_dot_not, 3, 1) ? rx_class_rule(x, 0) : -1;
  }
  int32_t cp;
  if (c == '\\') {
    x->i++;
    cp = rx_escape(x, 0);
    if (cp == -1) return -1;
    if (cp == -2) return rx_class_rule(x, 0);
  } else if (c == '*' || c == '+' || c == '?') {
    return rx_fail(x, GT_EINVAL, "nothing to repeat");
  } else if (c == '^' || c == '$') {
    return rx_fail(x, GT_EUNSUPPORTED, "anchor inside the pattern");
  } else {
    cp = rx_cp(x);
    if (cp < 0) return -1;
  }
  if (!rx_add(x, (uint32_t)cp, (uint32_t)cp)) return -1;
  return rx_class_rule(x, 0);
}

/* Parses "{m}", "{m,}" or "{m,n}" at x->i; 0 (position unchanged) when it is not one: the
 * brace is then a literal, as in ECMAScript. */
static int rx_braces(rx_t *x, int *min, int *max) {
  size_t i = x->i + 1;
  long m = 0, n = -1;
  size_t d0 = i;
  while (i < x->n && x->s[i] >= '0' && x->s[i] <= '9' && m <= 100000) m = m * 10 + (x->s[i++] - '0');
  if (i == d0) return 0;
  if (i < x->n && x->s[i] == '}') {
    n = m;
  } else if (i < x->n && x->s[i] == ',') {
    i++;
    size_t d1 = i;
    long v = 0;
    while (i < x->n && x->s[i] >= '0' && x->s[i] <= '9' && v <= 100000) v = v * 10 + (x->s[i++] - '0');
    if (i >= x->n || x->s[i] != '}') return 0;
    n = i == d1 ? -1 : v;
  } else {
    return 0;
  }
  x->i = i + 1;
  if (m > GR_MAX_REPEAT || n > GR_MAX_REPEAT) return rx_fail(x, GT_ERANGE, "repeat count over 1024"), -1;
  if (n >= 0 && n < m) return rx_fail(x, GT_EINVAL, "repeat {m,n} with n < m"), -1;
  *min = (int)m;
  *max = (int)n;
  return 1;
}

static int32_t rx_seq(rx_t *x) {
  int32_t r = gr_b_rule(x->b);
  /* the elements go into a list first: building atoms adds alternatives to other rules only */
  int32_t *items = NULL;
  size_t n = 0, cap = 0;
  while (rx_more(x) && rx_peek(x) != '|' && rx_peek(x) != ')') {
    if (rx_peek(x) == '{') {
      int mn, mx, q = rx_braces(x, &mn, &mx);
      if (q < 0) goto fail;
      if (q > 0) {
        rx_fail(x, GT_EINVAL, "nothing to repeat");
        goto fail;
      }
    }
    int32_t a;
    if (rx_peek(x) == '{' || rx_peek(x) == '}' || rx_peek(x) == ']') { /* literal braces */
      x->n_rg = 0;
      if (!rx_add(x, x->s[x->i], x->s[x->i])) goto fail;
      x->i++;
      a = rx_class_rule(x, 0);
    } else {
      a = rx_atom(x);
    }
    if (a < 0) goto fail;
    for (;;) {
      int c = rx_peek(x), mn, mx;
      if (c == '*') { mn = 0; mx = -1; x->i++; }
      else if (c == '+') { mn = 1; mx = -1; x->i++; }
      else if (c == '?') { mn = 0; mx = 1; x->i++; }
      else if (c == '{') {
        int q = rx_braces(x, &mn, &mx);
        if (q < 0) goto fail;
        if (q == 0) break;
      } else break;
      if (rx_peek(x) == '?') x->i++; /* lazy: same language */
      a = (mn == 0 && mx < 0) ? gr_b_star(x->b, a) : gr_b_repeat(x->b, a, mn, mx);
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      int32_t *p = realloc(items, cap * sizeof *p);
      if (!p) {
        rx_fail(x, GT_ENOMEM, "out of memory");
        goto fail;
      }
      items = p;
    }
    items[n++] = a;
  }
  gr_seq_t *s = gr_b_alt(x->b, r);
  for (size_t k = 0; k < n; k++) gr_b_ref(x->b, s, items[k]);
  free(items);
  return r;
fail:
  free(items);
  return -1;
}

static int32_t rx_alt(rx_t *x) {
  int32_t r = gr_b_rule(x->b);
  for (;;) {
    int32_t s = rx_seq(x);
    if (s < 0) return -1;
    gr_b_ref(x->b, gr_b_alt(x->b, r), s);
    if (rx_peek(x) != '|') return r;
    x->i++;
  }
}

static int rx_compile(gr_builder_t *b, const char *spec, size_t len, int json, const char *who, int32_t *root,
                      gt_err_t *err) {
  rx_t x = {.b = b, .s = (const unsigned char *)spec, .n = spec ? len : 0, .err = err, .json = json, .who = who};
  if (x.n && x.s[0] == '^') x.i++;
  if (x.n > x.i && x.s[x.n - 1] == '$') { /* a trailing anchor, unless escaped */
    size_t bs = 0;
    while (bs + 1 < x.n && x.s[x.n - 2 - bs] == '\\') bs++;
    if (bs % 2 == 0) x.n--;
  }
  *root = rx_alt(&x);
  if (x.rc == GT_OK && rx_more(&x)) rx_fail(&x, GT_EINVAL, "unmatched )");
  free(x.rg);
  return x.rc;
}

int gr_regex(gr_builder_t *b, const char *spec, size_t len, int32_t *root, gt_err_t *err) {
  return rx_compile(b, spec, len, 0, "guided_regex", root, err);
}

int gr_regex_json(gr_builder_t *b, const char *spec, size_t len, const char *who, int32_t *root, gt_err_t *err) {
  return rx_compile(b, spec, len, 1, who, root, err);
}
