/* engine/chat.c — Qwen3 / Qwen3.5 chat templates rendered natively (see chat.h).
 * The Jinja semantics reproduced here are quoted next to the code that implements them. */
#include "engine/chat.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 128

/* ---------------------------------------------------------------- string builder */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n) {
  if (b->oom || n == 0) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
static void sb_puts(sbuf_t *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_putc(sbuf_t *b, char c) { sb_put(b, &c, 1); }

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid / truncated. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len;
  uint32_t v, min;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

bool chat_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    size_t k = utf8_seq(u + i, n - i, &cp);
    if (!k) return false;
    i += k;
  }
  return true;
}

size_t chat_utf8_complete_len(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  /* Look back at most 3 bytes for a lead byte whose sequence runs past the end. */
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned c = u[n - back];
    if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking for the lead */
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (c >= 0xF5 || (c >= 0x80 && c < 0xC2)) return n; /* invalid lead: complete */
    if (need > back) {
      /* Incomplete only if the bytes present are a valid prefix of that sequence. */
      for (size_t i = 1; i < back; i++)
        if ((u[n - back + i] & 0xC0) != 0x80) return n;
      if (back >= 2) {
        unsigned c1 = u[n - back + 1];
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) ||
            (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
          return n;
      }
      return n - back;
    }
    return n;
  }
  return n;
}

/* Python str.isspace() for a code point (what Jinja's |trim strips). */
static bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

/* A view of bytes (not NUL-terminated). */
typedef struct sv {
  const char *p;
  size_t n;
} sv_t;

static sv_t sv_of(const char *s) {
  sv_t v = {s ? s : "", s ? strlen(s) : 0};
  return v;
}

/* Python s.strip() (all Unicode whitespace); s must be valid UTF-8. */
static sv_t py_strip(sv_t s) {
  const unsigned char *u = (const unsigned char *)s.p;
  size_t a = 0, b = s.n;
  uint32_t cp;
  while (a < b) {
    size_t k = utf8_seq(u + a, b - a, &cp);
    if (!k || !py_isspace(cp)) break;
    a += k;
  }
  while (b > a) {
    size_t st = b - 1;
    while (st > a && (u[st] & 0xC0) == 0x80) st--;
    size_t k = utf8_seq(u + st, b - st, &cp);
    if (!k || k != b - st || !py_isspace(cp)) break;
    b = st;
  }
  sv_t r = {s.p + a, b - a};
  return r;
}

static sv_t lstrip_nl(sv_t s) {
  while (s.n && s.p[0] == '\n') { s.p++; s.n--; }
  return s;
}
static sv_t rstrip_nl(sv_t s) {
  while (s.n && s.p[s.n - 1] == '\n') s.n--;
  return s;
}

static const char *sv_find(sv_t s, const char *needle) {
  size_t m = strlen(needle);
  if (m > s.n) return NULL;
  for (size_t i = 0; i + m <= s.n; i++)
    if (memcmp(s.p + i, needle, m) == 0) return s.p + i;
  return NULL;
}
static const char *sv_rfind(sv_t s, const char *needle) {
  size_t m = strlen(needle);
  if (m > s.n) return NULL;
  for (size_t i = s.n - m + 1; i-- > 0;)
    if (memcmp(s.p + i, needle, m) == 0) return s.p + i;
  return NULL;
}
static bool sv_starts(sv_t s, const char *p) {
  size_t m = strlen(p);
  return s.n >= m && memcmp(s.p, p, m) == 0;
}
static bool sv_ends(sv_t s, const char *p) {
  size_t m = strlen(p);
  return s.n >= m && memcmp(s.p + s.n - m, p, m) == 0;
}
static void sb_sv(sbuf_t *b, sv_t s) { sb_put(b, s.p, s.n); }

/* Python: s.split('</think>')[-1].lstrip('\n') and
 *         s.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
static void split_think(sv_t s, sv_t *content, sv_t *reasoning) {
  const char *first = sv_find(s, "</think>");
  const char *last = sv_rfind(s, "</think>");
  sv_t after = {last + 8, (size_t)(s.p + s.n - (last + 8))};
  *content = lstrip_nl(after);
  sv_t before = {s.p, (size_t)(first - s.p)};
  before = rstrip_nl(before);
  const char *open = sv_rfind(before, "<think>");
  if (open) {
    before.n = (size_t)(before.p + before.n - (open + 7));
    before.p = open + 7;
  }
  *reasoning = lstrip_nl(before);
}

/* ---------------------------------------------------------------- JSON tree */

typedef enum { J_NULL, J_TRUE, J_FALSE, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jnode {
  jtype_t t;
  char *s;          /* J_STR: decoded bytes; J_INT: digits (with '-'); object keys below */
  size_t len;
  double d;         /* J_FLOAT */
  struct jnode **kids;
  char **keys;      /* J_OBJ: decoded keys */
  size_t *klens;
  size_t n, cap;
} jnode_t;

static void jfree(jnode_t *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n; i++) {
    jfree(j->kids[i]);
    if (j->keys) free(j->keys[i]);
  }
  free(j->kids);
  free(j->keys);
  free(j->klens);
  free(j->s);
  free(j);
}

typedef struct jparser {
  const char *p;
  size_t n, i;
  gt_err_t *err;
  int rc;
} jparser_t;

static int jfail(jparser_t *jp, const char *what) {
  if (jp->rc == GT_OK) jp->rc = gt_err_set(jp->err, GT_EINVAL, "invalid JSON at byte %zu: %s", jp->i, what);
  return jp->rc;
}
static int joom(jparser_t *jp) {
  if (jp->rc == GT_OK) jp->rc = gt_err_set(jp->err, GT_ENOMEM, "out of memory parsing JSON");
  return jp->rc;
}

static void jws(jparser_t *jp) {
  while (jp->i < jp->n) {
    char c = jp->p[jp->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    jp->i++;
  }
}

static int hex4(const char *s, uint32_t *v) {
  uint32_t r = 0;
  for (int k = 0; k < 4; k++) {
    char c = s[k];
    r <<= 4;
    if (c >= '0' && c <= '9') r |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') r |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') r |= (uint32_t)(c - 'A' + 10);
    else return -1;
  }
  *v = r;
  return 0;
}

static void sb_utf8(sbuf_t *b, uint32_t cp) {
  char t[4];
  size_t k;
  if (cp < 0x80) { t[0] = (char)cp; k = 1; }
  else if (cp < 0x800) { t[0] = (char)(0xC0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
  else if (cp < 0x10000) {
    t[0] = (char)(0xE0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    t[2] = (char)(0x80 | (cp & 0x3F)); k = 3;
  } else {
    t[0] = (char)(0xF0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F)); k = 4;
  }
  sb_put(b, t, k);
}

/* Parses a JSON string at jp->i (on the opening quote) into a malloc'd decoded buffer. */
static int jstring(jparser_t *jp, char **out, size_t *outlen) {
  sbuf_t b = {0};
  jp->i++; /* opening quote */
  for (;;) {
    if (jp->i >= jp->n) { free(b.p); return jfail(jp, "unterminated string"); }
    unsigned char c = (unsigned char)jp->p[jp->i];
    if (c == '"') { jp->i++; break; }
    if (c < 0x20) { free(b.p); return jfail(jp, "control character in string"); }
    if (c == '\\') {
      if (jp->i + 1 >= jp->n) { free(b.p); return jfail(jp, "unterminated escape"); }
      char e = jp->p[jp->i + 1];
      jp->i += 2;
      switch (e) {
        case '"': sb_putc(&b, '"'); break;
        case '\\': sb_putc(&b, '\\'); break;
        case '/': sb_putc(&b, '/'); break;
        case 'b': sb_putc(&b, '\b'); break;
        case 'f': sb_putc(&b, '\f'); break;
        case 'n': sb_putc(&b, '\n'); break;
        case 'r': sb_putc(&b, '\r'); break;
        case 't': sb_putc(&b, '\t'); break;
        case 'u': {
          uint32_t v, lo;
          if (jp->i + 4 > jp->n || hex4(jp->p + jp->i, &v)) { free(b.p); return jfail(jp, "bad \\u escape"); }
          jp->i += 4;
          if (v >= 0xD800 && v <= 0xDBFF) {
            if (jp->i + 6 > jp->n || jp->p[jp->i] != '\\' || jp->p[jp->i + 1] != 'u' ||
                hex4(jp->p + jp->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
              free(b.p);
              return jfail(jp, "lone surrogate in \\u escape");
            }
            jp->i += 6;
            v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
          } else if (v >= 0xDC00 && v <= 0xDFFF) {
            free(b.p);
            return jfail(jp, "lone surrogate in \\u escape");
          }
          sb_utf8(&b, v);
          break;
        }
        default: free(b.p); return jfail(jp, "bad escape");
      }
      continue;
    }
    uint32_t cp;
    size_t k = utf8_seq((const unsigned char *)jp->p + jp->i, jp->n - jp->i, &cp);
    if (!k) { free(b.p); return jfail(jp, "invalid UTF-8 in string"); }
    sb_put(&b, jp->p + jp->i, k);
    jp->i += k;
  }
  if (b.oom) { free(b.p); return joom(jp); }
  if (!b.p) {
    b.p = calloc(1, 1);
    if (!b.p) return joom(jp);
  }
  *out = b.p;
  *outlen = b.n;
  return GT_OK;
}

static int jpush(jnode_t *j, jnode_t *kid, char *key, size_t klen) {
  if (j->n == j->cap) {
    size_t cap = j->cap ? j->cap * 2 : 4;
    jnode_t **k = realloc(j->kids, cap * sizeof *k);
    if (!k) return -1;
    j->kids = k;
    if (j->t == J_OBJ) {
      char **ks = realloc(j->keys, cap * sizeof *ks);
      if (!ks) return -1;
      j->keys = ks;
      size_t *kl = realloc(j->klens, cap * sizeof *kl);
      if (!kl) return -1;
      j->klens = kl;
    }
    j->cap = cap;
  }
  j->kids[j->n] = kid;
  if (j->t == J_OBJ) {
    j->keys[j->n] = key;
    j->klens[j->n] = klen;
  }
  j->n++;
  return 0;
}

static jnode_t *jvalue(jparser_t *jp, int depth);

static jnode_t *jnew(jparser_t *jp, jtype_t t) {
  jnode_t *j = calloc(1, sizeof *j);
  if (!j) joom(jp);
  else j->t = t;
  return j;
}

static jnode_t *jnumber(jparser_t *jp) {
  size_t st = jp->i;
  const char *p = jp->p;
  bool is_float = false;
  if (jp->i < jp->n && p[jp->i] == '-') jp->i++;
  if (jp->i >= jp->n || p[jp->i] < '0' || p[jp->i] > '9') { jfail(jp, "bad number"); return NULL; }
  if (p[jp->i] == '0') jp->i++;
  else while (jp->i < jp->n && p[jp->i] >= '0' && p[jp->i] <= '9') jp->i++;
  if (jp->i < jp->n && p[jp->i] == '.') {
    is_float = true;
    jp->i++;
    if (jp->i >= jp->n || p[jp->i] < '0' || p[jp->i] > '9') { jfail(jp, "bad fraction"); return NULL; }
    while (jp->i < jp->n && p[jp->i] >= '0' && p[jp->i] <= '9') jp->i++;
  }
  if (jp->i < jp->n && (p[jp->i] == 'e' || p[jp->i] == 'E')) {
    is_float = true;
    jp->i++;
    if (jp->i < jp->n && (p[jp->i] == '+' || p[jp->i] == '-')) jp->i++;
    if (jp->i >= jp->n || p[jp->i] < '0' || p[jp->i] > '9') { jfail(jp, "bad exponent"); return NULL; }
    while (jp->i < jp->n && p[jp->i] >= '0' && p[jp->i] <= '9') jp->i++;
  }
  jnode_t *j = jnew(jp, is_float ? J_FLOAT : J_INT);
  if (!j) return NULL;
  size_t len = jp->i - st;
  char *t = malloc(len + 1);
  if (!t) { free(j); joom(jp); return NULL; }
  memcpy(t, p + st, len);
  t[len] = 0;
  if (is_float) {
    j->d = strtod(t, NULL); /* overflow gives +-inf, as Python's float() does */
    free(t);
  } else {
    if (strcmp(t, "-0") == 0) { t[0] = '0'; t[1] = 0; len = 1; } /* int("-0") == 0 */
    j->s = t;
    j->len = len;
  }
  return j;
}

static jnode_t *jvalue(jparser_t *jp, int depth) {
  if (depth > JSON_MAX_DEPTH) { jfail(jp, "nested too deeply"); return NULL; }
  jws(jp);
  if (jp->i >= jp->n) { jfail(jp, "unexpected end"); return NULL; }
  char c = jp->p[jp->i];
  if (c == '{' || c == '[') {
    bool obj = c == '{';
    jnode_t *j = jnew(jp, obj ? J_OBJ : J_ARR);
    if (!j) return NULL;
    jp->i++;
    jws(jp);
    if (jp->i < jp->n && jp->p[jp->i] == (obj ? '}' : ']')) {
      jp->i++;
      return j;
    }
    for (;;) {
      char *key = NULL;
      size_t klen = 0;
      jws(jp);
      if (obj) {
        if (jp->i >= jp->n || jp->p[jp->i] != '"') { jfail(jp, "expected object key"); jfree(j); return NULL; }
        if (jstring(jp, &key, &klen)) { jfree(j); return NULL; }
        jws(jp);
        if (jp->i >= jp->n || jp->p[jp->i] != ':') { free(key); jfail(jp, "expected ':'"); jfree(j); return NULL; }
        jp->i++;
      }
      jnode_t *kid = jvalue(jp, depth + 1);
      if (!kid) { free(key); jfree(j); return NULL; }
      bool replaced = false;
      if (obj) { /* Python dict: a repeated key keeps its first position, takes the last value */
        for (size_t k = 0; k < j->n; k++)
          if (j->klens[k] == klen && memcmp(j->keys[k], key, klen) == 0) {
            jfree(j->kids[k]);
            j->kids[k] = kid;
            free(key);
            replaced = true;
            break;
          }
      }
      if (!replaced && jpush(j, kid, key, klen)) { free(key); jfree(kid); jfree(j); joom(jp); return NULL; }
      jws(jp);
      if (jp->i >= jp->n) { jfail(jp, "unexpected end"); jfree(j); return NULL; }
      char d = jp->p[jp->i++];
      if (d == ',') continue;
      if (d == (obj ? '}' : ']')) return j;
      jp->i--;
      jfail(jp, obj ? "expected ',' or '}'" : "expected ',' or ']'");
      jfree(j);
      return NULL;
    }
  }
  if (c == '"') {
    jnode_t *j = jnew(jp, J_STR);
    if (!j) return NULL;
    if (jstring(jp, &j->s, &j->len)) { free(j); return NULL; }
    return j;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return jnumber(jp);
  static const struct { const char *lit; jtype_t t; } lits[] = {
      {"null", J_NULL}, {"true", J_TRUE}, {"false", J_FALSE}};
  for (size_t k = 0; k < 3; k++) {
    size_t m = strlen(lits[k].lit);
    if (jp->n - jp->i >= m && memcmp(jp->p + jp->i, lits[k].lit, m) == 0) {
      jp->i += m;
      return jnew(jp, lits[k].t);
    }
  }
  jfail(jp, "unexpected character");
  return NULL;
}

static int jparse(const char *s, size_t n, jnode_t **out, gt_err_t *err) {
  jparser_t jp = {s, n, 0, err, GT_OK};
  jnode_t *j = jvalue(&jp, 0);
  if (!j) return jp.rc ? jp.rc : gt_err_set(err, GT_EINVAL, "invalid JSON");
  jws(&jp);
  if (jp.i != jp.n) {
    jfree(j);
    return jfail(&jp, "trailing characters");
  }
  *out = j;
  return GT_OK;
}

/* Python json.dumps string escaping with ensure_ascii=False. */
static void py_json_str(sbuf_t *b, const char *s, size_t n) {
  sb_putc(b, '"');
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char tmp[8];
    if (c == '"') esc = "\\\"";
    else if (c == '\\') esc = "\\\\";
    else if (c == '\n') esc = "\\n";
    else if (c == '\r') esc = "\\r";
    else if (c == '\t') esc = "\\t";
    else if (c == '\b') esc = "\\b";
    else if (c == '\f') esc = "\\f";
    else if (c < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", c); esc = tmp; }
    if (esc) {
      sb_put(b, s + i - run, run);
      run = 0;
      sb_puts(b, esc);
    } else {
      run++;
    }
  }
  sb_put(b, s + n - run, run);
  sb_putc(b, '"');
}

/* Python repr(float). */
static void py_float_repr(sbuf_t *b, double d) {
  if (isnan(d)) { sb_puts(b, "NaN"); return; }
  if (isinf(d)) { sb_puts(b, d < 0 ? "-Infinity" : "Infinity"); return; }
  char buf[64];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (strtod(buf, NULL) == d) break;
  }
  /* buf = [-]D[.DDD]e[+-]XX : collect digits and the decimal exponent. */
  char digits[32];
  int nd = 0;
  const char *q = buf;
  bool neg = false;
  if (*q == '-') { neg = true; q++; }
  for (; *q && *q != 'e'; q++)
    if (*q >= '0' && *q <= '9') digits[nd++] = *q;
  int exp10 = atoi(q + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--; /* shortest digits never end in 0 */
  int decpt = exp10 + 1; /* value = 0.DIGITS x 10^decpt */
  if (neg) sb_putc(b, '-');
  if (decpt <= -4 || decpt > 16) {
    sb_putc(b, digits[0]);
    if (nd > 1) {
      sb_putc(b, '.');
      sb_put(b, digits + 1, (size_t)nd - 1);
    }
    snprintf(buf, sizeof buf, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    sb_puts(b, buf);
  } else if (decpt <= 0) {
    sb_puts(b, "0.");
    for (int k = 0; k < -decpt; k++) sb_putc(b, '0');
    sb_put(b, digits, (size_t)nd);
  } else if (decpt < nd) {
    sb_put(b, digits, (size_t)decpt);
    sb_putc(b, '.');
    sb_put(b, digits + decpt, (size_t)(nd - decpt));
  } else {
    sb_put(b, digits, (size_t)nd);
    for (int k = nd; k < decpt; k++) sb_putc(b, '0');
    sb_puts(b, ".0");
  }
}

/* Python json.dumps(x, ensure_ascii=False). */
static void py_dump(sbuf_t *b, const jnode_t *j) {
  switch (j->t) {
    case J_NULL: sb_puts(b, "null"); break;
    case J_TRUE: sb_puts(b, "true"); break;
    case J_FALSE: sb_puts(b, "false"); break;
    case J_INT: sb_put(b, j->s, j->len); break;
    case J_FLOAT: py_float_repr(b, j->d); break;
    case J_STR: py_json_str(b, j->s, j->len); break;
    case J_ARR:
      sb_putc(b, '[');
      for (size_t i = 0; i < j->n; i++) {
        if (i) sb_puts(b, ", ");
        py_dump(b, j->kids[i]);
      }
      sb_putc(b, ']');
      break;
    case J_OBJ:
      sb_putc(b, '{');
      for (size_t i = 0; i < j->n; i++) {
        if (i) sb_puts(b, ", ");
        py_json_str(b, j->keys[i], j->klens[i]);
        sb_puts(b, ": ");
        py_dump(b, j->kids[i]);
      }
      sb_putc(b, '}');
      break;
  }
}

/* Python str(x) (Jinja |string) for a scalar; containers use py_dump. */
static void py_str(sbuf_t *b, const jnode_t *j) {
  switch (j->t) {
    case J_NULL: sb_puts(b, "None"); break;
    case J_TRUE: sb_puts(b, "True"); break;
    case J_FALSE: sb_puts(b, "False"); break;
    case J_STR: sb_put(b, j->s, j->len); break;
    default: py_dump(b, j); break;
  }
}

int chat_json_pydump(const char *json, size_t len, char **out, size_t *out_len, gt_err_t *err) {
  *out = NULL;
  jnode_t *j = NULL;
  int rc = jparse(json, len, &j, err);
  if (rc) return rc;
  sbuf_t b = {0};
  py_dump(&b, j);
  jfree(j);
  if (b.oom) { free(b.p); return gt_err_set(err, GT_ENOMEM, "out of memory"); }
  *out = b.p;
  if (out_len) *out_len = b.n;
  return GT_OK;
}

/* ---------------------------------------------------------------- template detection */

/* Template text with every whitespace run collapsed to one space (Jinja tags tolerate
 * re-indentation; string literals in the Qwen templates have no double spaces). */
static char *normalize_ws(const char *s) {
  size_t n = strlen(s);
  char *o = malloc(n + 1);
  if (!o) return NULL;
  size_t k = 0;
  bool ws = false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ws = true;
      continue;
    }
    if (ws && k) o[k++] = ' ';
    ws = false;
    o[k++] = c;
  }
  o[k] = 0;
  return o;
}

/* Literal texts the renderer emits, as they appear (escaped) in the template source. The
 * renderer's copies (unescaped) are below; a test checks that each pair agrees. */
#define Q3_TOOLS_HEAD                                                                          \
  "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou " \
  "are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
#define Q3_TOOLS_TAIL                                                                          \
  "\\n</tools>\\n\\nFor each function call, return a json object with function name and "    \
  "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "         \
  "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n"
#define Q35_TOOLS_HEAD "# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>"
#define Q35_TOOLS_TAIL                                                                         \
  "\\n\\nIf you choose to call a function ONLY reply in the following format with NO "        \
  "suffix:\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_"         \
  "parameter_1>\\nvalue_1\\n</parameter>\\n<parameter=example_parameter_2>\\nThis is the "    \
  "value for the second parameter\\nthat can span\\nmultiple lines\\n</parameter>\\n</"        \
  "function>\\n</tool_call>\\n\\n<IMPORTANT>\\nReminder:\\n- Function calls MUST follow the " \
  "specified format: an inner <function=...></function> block must be nested within "         \
  "<tool_call></tool_call> XML tags\\n- Required parameters MUST be specified\\n- You may "   \
  "provide optional reasoning for your function call in natural language BEFORE the "         \
  "function call, but NOT after\\n- If there is no function call available, answer the "     \
  "question like normal with your current knowledge and do not tell the user about function " \
  "calls\\n</IMPORTANT>"

/* Unescaped versions (what is rendered). */
static const char q3_tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou "
    "are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char q3_tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
static const char q35_tools_head[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char q35_tools_tail[] =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_"
    "parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the "
    "value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</"
    "function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
    "specified format: an inner <function=...></function> block must be nested within "
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may "
    "provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n- If there is no function call available, answer the "
    "question like normal with your current knowledge and do not tell the user about function "
    "calls\n</IMPORTANT>";

/* Each marker pins one behaviour the renderer implements (matched after whitespace
 * normalisation, see normalize_ws). */
static const char *const q3_markers[] = {
    "<|im_start|>", "<|im_end|>",
    "{{- '<|im_start|>system\\n' }}",
    "{{- messages[0].content + '\\n\\n' }}",
    Q3_TOOLS_HEAD,
    "{%- for tool in tools %} {{- \"\\n\" }} {{- tool | tojson }} {%- endfor %}",
    Q3_TOOLS_TAIL,
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}",
    "namespace(multi_step_tool=true, last_query_index=messages|length - 1)",
    "{%- for message in messages[::-1] %}",
    "ns.multi_step_tool and message.role == \"user\" and "
    "not(message.content.startswith('<tool_response>') and "
    "message.content.endswith('</tool_response>'))",
    "(message.role == \"user\") or (message.role == \"system\" and not loop.first)",
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
    "message.reasoning_content is defined and message.reasoning_content is not none",
    "{%- if '</think>' in message.content %}",
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}",
    "{%- set reasoning_content = "
    "message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}",
    "{%- if loop.index0 > ns.last_query_index %}",
    "{%- if loop.last or (not loop.last and reasoning_content) %}",
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + "
    "'\\n</think>\\n\\n' + content.lstrip('\\n') }}",
    "{{- '<|im_start|>' + message.role + '\\n' + content }}",
    "{%- if (loop.first and content) or (not loop.first) %} {{- '\\n' }}",
    "{{- '<tool_call>\\n{\"name\": \"' }} {{- tool_call.name }} {{- '\", \"arguments\": ' }}",
    "{{- tool_call.arguments | tojson }}",
    "{{- '}\\n</tool_call>' }}",
    "{{- '<|im_end|>\\n' }}",
    "{%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %} {{- '<|im_start|>user' }}",
    "{{- '\\n<tool_response>\\n' }} {{- message.content }} {{- '\\n</tool_response>' }}",
    "{%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %} {{- '<|im_end|>\\n' }}",
    "{%- if add_generation_prompt %} {{- '<|im_start|>assistant\\n' }} {%- if enable_thinking "
    "is defined and enable_thinking is false %} {{- '<think>\\n\\n</think>\\n\\n' }} {%- endif %} "
    "{%- endif %}",
};

static const char *const q35_markers[] = {
    "<|im_start|>", "<|im_end|>",
    "{%- macro render_content(content, do_vision_count, is_system_content=false) %}",
    "{%- if content is string %} {{- content }}",
    "{%- elif content is none or content is undefined %} {{- '' }}",
    "raise_exception('No messages provided.')",
    "{%- if tools and tools is iterable and tools is not mapping %} {{- '<|im_start|>system\\n' }} "
    "{{- \"" Q35_TOOLS_HEAD "\" }} {%- for tool in tools %} {{- \"\\n\" }} {{- tool | tojson }} "
    "{%- endfor %} {{- \"\\n</tools>\" }} {{- '" Q35_TOOLS_TAIL "' }}",
    "{%- set content = render_content(messages[0].content, false, true)|trim %} {%- if content %} "
    "{{- '\\n\\n' + content }} {%- endif %} {%- endif %} {{- '<|im_end|>\\n' }} {%- else %} {%- if "
    "messages[0].role == 'system' %} {%- set content = render_content(messages[0].content, false, "
    "true)|trim %} {{- '<|im_start|>system\\n' + content + '<|im_end|>\\n' }}",
    "namespace(multi_step_tool=true, last_query_index=messages|length - 1)",
    "{%- if ns.multi_step_tool and message.role == \"user\" %} {%- set content = "
    "render_content(message.content, false)|trim %} {%- if "
    "not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}",
    "raise_exception('No user query found in messages.')",
    "{%- set content = render_content(message.content, true)|trim %} {%- if message.role == "
    "\"system\" %} {%- if not loop.first %} {{- raise_exception('System message must be at the "
    "beginning.') }}",
    "{%- elif message.role == \"user\" %} {{- '<|im_start|>' + message.role + '\\n' + content + "
    "'<|im_end|>' + '\\n' }}",
    "{%- if message.reasoning_content is string %} {%- set reasoning_content = "
    "message.reasoning_content %}",
    "'</think>' in content %} {%- set reasoning_content = "
    "content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %} {%- set "
    "content = content.split('</think>')[-1].lstrip('\\n') %}",
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + "
    "'\\n</think>\\n\\n' + content }}",
    "{%- if loop.first %} {%- if content|trim %} {{- '\\n\\n<tool_call>\\n<function=' + "
    "tool_call.name + '>\\n' }} {%- else %} {{- '<tool_call>\\n<function=' + tool_call.name + "
    "'>\\n' }} {%- endif %} {%- else %} {{- '\\n<tool_call>\\n<function=' + tool_call.name + "
    "'>\\n' }}",
    "{%- for args_name, args_value in tool_call.arguments|items %} {{- '<parameter=' + args_name "
    "+ '>\\n' }} {%- set args_value = args_value | tojson | safe if args_value is mapping or "
    "(args_value is sequence and args_value is not string) else args_value | string %} {{- "
    "args_value }} {{- '\\n</parameter>\\n' }} {%- endfor %}",
    "{{- '</function>\\n</tool_call>' }} {%- endfor %} {%- endif %} {{- '<|im_end|>\\n' }}",
    "{%- elif message.role == \"tool\" %} {%- if loop.previtem and loop.previtem.role != "
    "\"tool\" %} {{- '<|im_start|>user' }} {%- endif %} {{- '\\n<tool_response>\\n' }} {{- "
    "content }} {{- '\\n</tool_response>' }} {%- if not loop.last and loop.nextitem.role != "
    "\"tool\" %} {{- '<|im_end|>\\n' }} {%- elif loop.last %} {{- '<|im_end|>\\n' }}",
    "{{- raise_exception('Unexpected message role.') }}",
    "{%- if add_generation_prompt %} {{- '<|im_start|>assistant\\n' }} {%- if enable_thinking "
    "is defined and enable_thinking is false %} {{- '<think>\\n\\n</think>\\n\\n' }} {%- else %} "
    "{{- '<think>\\n' }} {%- endif %} {%- endif %}",
};

/* Features of later Qwen templates that this renderer does not implement. */
static const char *const q35_unsupported[] = {"preserve_thinking", "reasoning_effort",
                                              "reasoning_instructions"};

static const char *missing_marker(const char *norm, const char *const *markers, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char *m = normalize_ws(markers[i]);
    if (!m) return "(out of memory)";
    bool found = strstr(norm, m) != NULL;
    free(m);
    if (!found) return markers[i];
  }
  return NULL;
}

int chat_template_detect(const char *jinja, chat_family_t *out, gt_err_t *err) {
  if (!jinja || !*jinja)
    return gt_err_set(err, GT_ENOTFOUND,
                      "model has no chat template (tokenizer.chat_template missing or empty)");
  char *norm = normalize_ws(jinja);
  if (!norm) return gt_err_set(err, GT_ENOMEM, "out of memory");
  int rc;
  bool is35 = strstr(norm, "<function=") != NULL;
  if (!is35) {
    const char *miss = missing_marker(norm, q3_markers, sizeof q3_markers / sizeof *q3_markers);
    if (miss) {
      rc = gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported chat template: not the Qwen3 template (missing `%.120s`)", miss);
      goto done;
    }
    out->id = CHAT_FAMILY_QWEN3;
    out->history = CHAT_HIST_QWEN3;
    rc = GT_OK;
    goto done;
  }
  for (size_t i = 0; i < sizeof q35_unsupported / sizeof *q35_unsupported; i++)
    if (strstr(norm, q35_unsupported[i])) {
      rc = gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported chat template: Qwen3.5-style template uses `%s`, which the "
                      "native renderer does not implement", q35_unsupported[i]);
      goto done;
    }
  const char *miss = missing_marker(norm, q35_markers, sizeof q35_markers / sizeof *q35_markers);
  if (miss) {
    rc = gt_err_set(err, GT_EUNSUPPORTED,
                    "unsupported chat template: not the Qwen3.5 template (missing `%.120s`)", miss);
    goto done;
  }
  /* Which assistant turns keep their <think> block. */
  bool trims = strstr(norm, "{%- set reasoning_content = reasoning_content|trim %}") != NULL;
  bool has_and = strstr(norm, "{%- if loop.index0 > ns.last_query_index and reasoning_content %}");
  bool has_or = strstr(norm, "{%- if loop.index0 > ns.last_query_index or reasoning_content %}");
  bool has_plain = strstr(norm, "{%- if loop.index0 > ns.last_query_index %}");
  int nrules = (int)has_and + (int)has_or + (int)has_plain;
  if (nrules == 1 && trims) {
    out->history = has_and ? CHAT_HIST_AFTER_QUERY_NONEMPTY
                   : has_or ? CHAT_HIST_AFTER_QUERY_OR_NONEMPTY
                            : CHAT_HIST_AFTER_QUERY;
  } else if (nrules == 0 && !trims && !strstr(norm, "loop.index0 > ns.last_query_index")) {
    out->history = CHAT_HIST_ALWAYS;
  } else {
    rc = gt_err_set(err, GT_EUNSUPPORTED,
                    "unsupported chat template: Qwen3.5-style template with an unknown rule for "
                    "keeping reasoning of earlier assistant turns");
    goto done;
  }
  out->id = CHAT_FAMILY_QWEN35;
  rc = GT_OK;
done:
  free(norm);
  return rc;
}

const char *chat_family_name(const chat_family_t *f) {
  if (!f) return "none";
  if (f->id == CHAT_FAMILY_QWEN3) return "qwen3";
  if (f->id != CHAT_FAMILY_QWEN35) return "unknown";
  switch (f->history) {
    case CHAT_HIST_AFTER_QUERY: return "qwen3.5";
    case CHAT_HIST_AFTER_QUERY_NONEMPTY: return "qwen3.5/keep-nonempty-think";
    case CHAT_HIST_AFTER_QUERY_OR_NONEMPTY: return "qwen3.5/keep-any-think";
    case CHAT_HIST_ALWAYS: return "qwen3.5/always-think";
    default: return "qwen3.5/unknown";
  }
}

int chat_role_parse(const char *s, chat_role_t *out, gt_err_t *err) {
  static const char *const names[] = {"system", "user", "assistant", "tool"};
  for (int i = 0; i < 4; i++)
    if (s && strcmp(s, names[i]) == 0) {
      *out = (chat_role_t)i;
      return GT_OK;
    }
  return gt_err_set(err, GT_EINVAL, "unknown message role '%.64s' (expected system, user, "
                    "assistant or tool)", s ? s : "(null)");
}

/* ---------------------------------------------------------------- validation */

static int check_text(const char *s, size_t idx, const char *field, gt_err_t *err) {
  if (s && !chat_utf8_valid(s, strlen(s)))
    return gt_err_set(err, GT_EINVAL, "messages[%zu].%s is not valid UTF-8", idx, field);
  return GT_OK;
}

static bool bad_name_char(unsigned char c) {
  return c < 0x20 || c == 0x7F || c == '"' || c == '\\' || c == '<' || c == '>';
}

/* Validates every message; parses tool-call arguments into args[] (flattened over messages). */
static int validate(const chat_family_t *fam, const chat_msg_t *m, size_t n, jnode_t **args,
                    gt_err_t *err) {
  if (n == 0) return gt_err_set(err, GT_EINVAL, "no messages");
  size_t a = 0;
  for (size_t i = 0; i < n; i++) {
    const chat_msg_t *x = &m[i];
    if ((unsigned)x->role > CHAT_ROLE_TOOL)
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: unknown role %d", i, (int)x->role);
    int rc;
    if ((rc = check_text(x->content, i, "content", err))) return rc;
    if ((rc = check_text(x->reasoning_content, i, "reasoning_content", err))) return rc;
    if (x->role != CHAT_ROLE_ASSISTANT && (x->n_tool_calls || x->reasoning_content))
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: only assistant messages carry %s", i,
                        x->n_tool_calls ? "tool_calls" : "reasoning_content");
    if (x->n_tool_calls && !x->tool_calls)
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: n_tool_calls set without tool_calls", i);
    if (x->role == CHAT_ROLE_SYSTEM && i != 0 && fam->id == CHAT_FAMILY_QWEN35)
      return gt_err_set(err, GT_EINVAL, "messages[%zu]: system message must be at the beginning", i);
    for (size_t k = 0; k < x->n_tool_calls; k++) {
      const chat_tool_call_t *tc = &x->tool_calls[k];
      if (!tc->name || !*tc->name)
        return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu]: missing function name", i, k);
      if (!chat_utf8_valid(tc->name, strlen(tc->name)))
        return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu]: name is not valid UTF-8", i, k);
      for (const char *p = tc->name; *p; p++)
        if (bad_name_char((unsigned char)*p))
          return gt_err_set(err, GT_EINVAL,
                            "messages[%zu].tool_calls[%zu]: function name '%.64s' contains a "
                            "quote, backslash, angle bracket or control character", i, k, tc->name);
      const char *aj = tc->arguments && *tc->arguments ? tc->arguments : "{}";
      gt_err_t jerr = {0};
      jnode_t *j = NULL;
      if (jparse(aj, strlen(aj), &j, &jerr))
        return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu] (%.64s): arguments: %s",
                          i, k, tc->name, jerr.msg);
      if (j->t != J_OBJ) {
        jfree(j);
        return gt_err_set(err, GT_EINVAL,
                          "messages[%zu].tool_calls[%zu] (%.64s): arguments must be a JSON object",
                          i, k, tc->name);
      }
      if (fam->id == CHAT_FAMILY_QWEN35)
        for (size_t q = 0; q < j->n; q++)
          for (size_t c = 0; c < j->klens[q]; c++)
            if (j->keys[q][c] == '>' || j->keys[q][c] == '<' || (unsigned char)j->keys[q][c] < 0x20) {
              jfree(j);
              return gt_err_set(err, GT_EINVAL,
                                "messages[%zu].tool_calls[%zu] (%.64s): argument name contains "
                                "an angle bracket or control character", i, k, tc->name);
            }
      args[a++] = j;
    }
    if (x->role == CHAT_ROLE_TOOL) {
      /* Walk back over earlier results to the assistant turn that made the calls. */
      size_t prev_results = 0, p = i;
      while (p > 0 && m[p - 1].role == CHAT_ROLE_TOOL) { p--; prev_results++; }
      if (p == 0 || m[p - 1].role != CHAT_ROLE_ASSISTANT || m[p - 1].n_tool_calls == 0)
        return gt_err_set(err, GT_EINVAL,
                          "messages[%zu]: tool result without a preceding assistant tool call", i);
      const chat_msg_t *asst = &m[p - 1];
      if (prev_results >= asst->n_tool_calls)
        return gt_err_set(err, GT_EINVAL,
                          "messages[%zu]: more tool results than the %zu tool call(s) of "
                          "messages[%zu]", i, asst->n_tool_calls, p - 1);
      if (x->tool_call_id && *x->tool_call_id) {
        bool any_id = false, found = false;
        for (size_t k = 0; k < asst->n_tool_calls; k++) {
          const char *id = asst->tool_calls[k].id;
          if (id && *id) {
            any_id = true;
            if (strcmp(id, x->tool_call_id) == 0) found = true;
          }
        }
        if (any_id && !found)
          return gt_err_set(err, GT_EINVAL,
                            "messages[%zu]: tool_call_id '%.64s' matches no tool call of "
                            "messages[%zu]", i, x->tool_call_id, p - 1);
      }
    }
  }
  return GT_OK;
}

/* ---------------------------------------------------------------- renderers */

static sv_t msg_content(const chat_msg_t *m) { return sv_of(m->content); }

static void render_tools(sbuf_t *b, const jnode_t *tools) {
  for (size_t i = 0; i < tools->n; i++) {
    sb_putc(b, '\n');
    py_dump(b, tools->kids[i]);
  }
}

static void render_qwen3(sbuf_t *b, const chat_msg_t *m, size_t n, const jnode_t *tools,
                         jnode_t **args, const chat_render_opts_t *o) {
  if (tools) {
    sb_puts(b, "<|im_start|>system\n");
    if (m[0].role == CHAT_ROLE_SYSTEM) {
      sb_sv(b, msg_content(&m[0]));
      sb_puts(b, "\n\n");
    }
    sb_puts(b, q3_tools_head);
    render_tools(b, tools);
    sb_puts(b, q3_tools_tail);
  } else if (m[0].role == CHAT_ROLE_SYSTEM) {
    sb_puts(b, "<|im_start|>system\n");
    sb_sv(b, msg_content(&m[0]));
    sb_puts(b, "<|im_end|>\n");
  }
  /* Last user turn that is not a wrapped tool response; n-1 when there is none. */
  size_t lqi = n - 1;
  for (size_t k = n; k-- > 0;) {
    sv_t c = msg_content(&m[k]);
    if (m[k].role == CHAT_ROLE_USER &&
        !(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
      lqi = k;
      break;
    }
  }
  size_t a = 0;
  for (size_t i = 0; i < n; i++) {
    const chat_msg_t *x = &m[i];
    sv_t c = msg_content(x);
    if (x->role == CHAT_ROLE_USER || (x->role == CHAT_ROLE_SYSTEM && i != 0)) {
      sb_puts(b, x->role == CHAT_ROLE_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
      sb_sv(b, c);
      sb_puts(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_ASSISTANT) {
      sv_t content = c, reasoning = {"", 0};
      if (x->reasoning_content) reasoning = sv_of(x->reasoning_content);
      else if (sv_find(c, "</think>")) split_think(c, &content, &reasoning);
      bool last = i == n - 1;
      if (i > lqi && (last || reasoning.n)) {
        sb_puts(b, "<|im_start|>assistant\n<think>\n");
        sv_t r = rstrip_nl(lstrip_nl(reasoning));
        sb_sv(b, r);
        sb_puts(b, "\n</think>\n\n");
        sb_sv(b, lstrip_nl(content));
      } else {
        sb_puts(b, "<|im_start|>assistant\n");
        sb_sv(b, content);
      }
      for (size_t k = 0; k < x->n_tool_calls; k++) {
        if (k > 0 || content.n) sb_putc(b, '\n');
        sb_puts(b, "<tool_call>\n{\"name\": \"");
        sb_puts(b, x->tool_calls[k].name);
        sb_puts(b, "\", \"arguments\": ");
        py_dump(b, args[a++]);
        sb_puts(b, "}\n</tool_call>");
      }
      sb_puts(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_TOOL) {
      if (i == 0 || m[i - 1].role != CHAT_ROLE_TOOL) sb_puts(b, "<|im_start|>user");
      sb_puts(b, "\n<tool_response>\n");
      sb_sv(b, c);
      sb_puts(b, "\n</tool_response>");
      if (i == n - 1 || m[i + 1].role != CHAT_ROLE_TOOL) sb_puts(b, "<|im_end|>\n");
    }
  }
  if (o->add_generation_prompt) {
    sb_puts(b, "<|im_start|>assistant\n");
    if (!o->enable_thinking) sb_puts(b, "<think>\n\n</think>\n\n");
  }
}

static int render_qwen35(sbuf_t *b, const chat_family_t *fam, const chat_msg_t *m, size_t n,
                         const jnode_t *tools, jnode_t **args, const chat_render_opts_t *o,
                         gt_err_t *err) {
  size_t lqi = n;
  for (size_t k = n; k-- > 0;) {
    sv_t c = py_strip(msg_content(&m[k]));
    if (m[k].role == CHAT_ROLE_USER &&
        !(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
      lqi = k;
      break;
    }
  }
  if (lqi == n) return gt_err_set(err, GT_EINVAL, "no user query found in messages");
  if (tools) {
    sb_puts(b, "<|im_start|>system\n");
    sb_puts(b, q35_tools_head);
    render_tools(b, tools);
    sb_puts(b, "\n</tools>");
    sb_puts(b, q35_tools_tail);
    if (m[0].role == CHAT_ROLE_SYSTEM) {
      sv_t c = py_strip(msg_content(&m[0]));
      if (c.n) {
        sb_puts(b, "\n\n");
        sb_sv(b, c);
      }
    }
    sb_puts(b, "<|im_end|>\n");
  } else if (m[0].role == CHAT_ROLE_SYSTEM) {
    sb_puts(b, "<|im_start|>system\n");
    sb_sv(b, py_strip(msg_content(&m[0])));
    sb_puts(b, "<|im_end|>\n");
  }
  size_t a = 0;
  for (size_t i = 0; i < n; i++) {
    const chat_msg_t *x = &m[i];
    sv_t c = py_strip(msg_content(x));
    if (x->role == CHAT_ROLE_USER) {
      sb_puts(b, "<|im_start|>user\n");
      sb_sv(b, c);
      sb_puts(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_ASSISTANT) {
      sv_t content = c, reasoning = {"", 0};
      if (x->reasoning_content) reasoning = sv_of(x->reasoning_content);
      else if (sv_find(c, "</think>")) split_think(c, &content, &reasoning);
      if (fam->history != CHAT_HIST_ALWAYS) reasoning = py_strip(reasoning);
      bool keep;
      switch (fam->history) {
        case CHAT_HIST_AFTER_QUERY_NONEMPTY: keep = i > lqi && reasoning.n; break;
        case CHAT_HIST_AFTER_QUERY_OR_NONEMPTY: keep = i > lqi || reasoning.n; break;
        case CHAT_HIST_ALWAYS: keep = true; break;
        default: keep = i > lqi; break;
      }
      sb_puts(b, "<|im_start|>assistant\n");
      if (keep) {
        sb_puts(b, "<think>\n");
        sb_sv(b, reasoning);
        sb_puts(b, "\n</think>\n\n");
      }
      sb_sv(b, content);
      for (size_t k = 0; k < x->n_tool_calls; k++) {
        if (k == 0) sb_puts(b, py_strip(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
        else sb_puts(b, "\n<tool_call>\n<function=");
        sb_puts(b, x->tool_calls[k].name);
        sb_puts(b, ">\n");
        const jnode_t *j = args[a++];
        for (size_t q = 0; q < j->n; q++) {
          sb_puts(b, "<parameter=");
          sb_put(b, j->keys[q], j->klens[q]);
          sb_puts(b, ">\n");
          py_str(b, j->kids[q]);
          sb_puts(b, "\n</parameter>\n");
        }
        sb_puts(b, "</function>\n</tool_call>");
      }
      sb_puts(b, "<|im_end|>\n");
    } else if (x->role == CHAT_ROLE_TOOL) {
      /* `loop.previtem and ...`: the first message has no previtem (rejected earlier anyway). */
      if (i > 0 && m[i - 1].role != CHAT_ROLE_TOOL) sb_puts(b, "<|im_start|>user");
      sb_puts(b, "\n<tool_response>\n");
      sb_sv(b, c);
      sb_puts(b, "\n</tool_response>");
      if (i == n - 1 || m[i + 1].role != CHAT_ROLE_TOOL) sb_puts(b, "<|im_end|>\n");
    }
  }
  if (o->add_generation_prompt) {
    sb_puts(b, "<|im_start|>assistant\n");
    sb_puts(b, o->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
  }
  return GT_OK;
}

int chat_render(const chat_family_t *fam, const chat_msg_t *msgs, size_t n,
                const chat_render_opts_t *opts, char **out, size_t *out_len, gt_err_t *err) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (!fam || (fam->id != CHAT_FAMILY_QWEN3 && fam->id != CHAT_FAMILY_QWEN35))
    return gt_err_set(err, GT_EINVAL, "chat_render: no template family");
  chat_render_opts_t def = {NULL, true, true};
  const chat_render_opts_t *o = opts ? opts : &def;
  if (n && !msgs) return gt_err_set(err, GT_EINVAL, "chat_render: NULL messages");
  size_t ncalls = 0;
  for (size_t i = 0; i < n; i++) ncalls += msgs[i].n_tool_calls;
  jnode_t **args = calloc(ncalls ? ncalls : 1, sizeof *args);
  if (!args) return gt_err_set(err, GT_ENOMEM, "out of memory");
  jnode_t *tools = NULL;
  sbuf_t b = {0};
  int rc = validate(fam, msgs, n, args, err);
  if (rc) goto done;
  if (o->tools_json && *o->tools_json) {
    gt_err_t jerr = {0};
    if (jparse(o->tools_json, strlen(o->tools_json), &tools, &jerr)) {
      rc = gt_err_set(err, GT_EINVAL, "tools: %s", jerr.msg);
      goto done;
    }
    if (tools->t != J_ARR) {
      rc = gt_err_set(err, GT_EINVAL, "tools must be a JSON array");
      goto done;
    }
    for (size_t i = 0; i < tools->n; i++)
      if (tools->kids[i]->t != J_OBJ) {
        rc = gt_err_set(err, GT_EINVAL, "tools[%zu] must be a JSON object", i);
        goto done;
      }
    if (tools->n == 0) { /* `{%- if tools %}`: an empty list is false */
      jfree(tools);
      tools = NULL;
    }
  }
  if (fam->id == CHAT_FAMILY_QWEN3) render_qwen3(&b, msgs, n, tools, args, o);
  else if ((rc = render_qwen35(&b, fam, msgs, n, tools, args, o, err))) goto done;
  if (b.oom) {
    rc = gt_err_set(err, GT_ENOMEM, "out of memory rendering chat");
    goto done;
  }
  if (!b.p) {
    b.p = calloc(1, 1);
    if (!b.p) { rc = gt_err_set(err, GT_ENOMEM, "out of memory"); goto done; }
  }
  *out = b.p;
  if (out_len) *out_len = b.n;
  b.p = NULL;
done:
  free(b.p);
  for (size_t i = 0; i < ncalls; i++) jfree(args[i]);
  free(args);
  jfree(tools);
  return rc;
}

bool chat_prompt_opens_reasoning(const chat_family_t *fam, const chat_render_opts_t *opts) {
  return fam && opts && fam->id == CHAT_FAMILY_QWEN35 && opts->add_generation_prompt &&
         opts->enable_thinking;
}

/* ---------------------------------------------------------------- messages from JSON */

typedef struct owned {
  void **p;
  size_t n, cap;
} owned_t;

static void *own(owned_t *o, void *ptr) {
  if (!ptr) return NULL;
  if (o->n == o->cap) {
    size_t cap = o->cap ? o->cap * 2 : 16;
    void **p = realloc(o->p, cap * sizeof *p);
    if (!p) { free(ptr); return NULL; }
    o->p = p;
    o->cap = cap;
  }
  o->p[o->n++] = ptr;
  return ptr;
}

static char *own_str(owned_t *o, const char *s, size_t n) {
  char *c = malloc(n + 1);
  if (!c) return NULL;
  memcpy(c, s, n);
  c[n] = 0;
  return own(o, c);
}

void chat_msgs_free(chat_msgs_t *m) {
  if (!m) return;
  owned_t *o = m->owned_;
  if (o) {
    for (size_t i = 0; i < o->n; i++) free(o->p[i]);
    free(o->p);
    free(o);
  }
  memset(m, 0, sizeof *m);
}

/* Optional string field: absent or null -> *out = NULL. */
static int opt_str(owned_t *o, const json_t *obj, const char *key, const char **out, size_t i,
                   gt_err_t *err) {
  *out = NULL;
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return GT_OK;
  if (!json_is_string(v)) return gt_err_set(err, GT_EINVAL, "messages[%zu].%s must be a string", i, key);
  *out = own_str(o, json_string_value(v), json_string_length(v));
  return *out ? GT_OK : gt_err_set(err, GT_ENOMEM, "out of memory");
}

static int parse_content(owned_t *o, const json_t *v, const char **out, size_t i, gt_err_t *err) {
  *out = NULL;
  if (!v || json_is_null(v)) return GT_OK;
  if (json_is_string(v)) {
    *out = own_str(o, json_string_value(v), json_string_length(v));
    return *out ? GT_OK : gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  if (!json_is_array(v))
    return gt_err_set(err, GT_EINVAL, "messages[%zu].content must be a string, null or an array of parts", i);
  sbuf_t b = {0};
  size_t k;
  json_t *part;
  json_array_foreach(v, k, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    const json_t *text = json_object_get(part, "text");
    if (!json_is_object(part) || !type) {
      free(b.p);
      return gt_err_set(err, GT_EINVAL, "messages[%zu].content[%zu]: part without a type", i, k);
    }
    if (strcmp(type, "text") != 0) {
      free(b.p);
      return gt_err_set(err, GT_EUNSUPPORTED, "messages[%zu].content[%zu]: '%.32s' parts are not "
                        "supported (text only)", i, k, type);
    }
    if (!json_is_string(text)) {
      free(b.p);
      return gt_err_set(err, GT_EINVAL, "messages[%zu].content[%zu]: text part without text", i, k);
    }
    if (k) sb_putc(&b, '\n');
    sb_put(&b, json_string_value(text), json_string_length(text));
  }
  if (b.oom) { free(b.p); return gt_err_set(err, GT_ENOMEM, "out of memory"); }
  *out = own(o, b.p ? b.p : calloc(1, 1));
  return *out ? GT_OK : gt_err_set(err, GT_ENOMEM, "out of memory");
}

static int parse_tool_calls(owned_t *o, const json_t *v, chat_msg_t *m, size_t i, gt_err_t *err) {
  if (!v || json_is_null(v)) return GT_OK;
  if (!json_is_array(v)) return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls must be an array", i);
  size_t n = json_array_size(v);
  if (n == 0) return GT_OK;
  chat_tool_call_t *tc = own(o, calloc(n, sizeof *tc));
  if (!tc) return gt_err_set(err, GT_ENOMEM, "out of memory");
  for (size_t k = 0; k < n; k++) {
    const json_t *c = json_array_get(v, k);
    if (!json_is_object(c))
      return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu] must be an object", i, k);
    const json_t *f = json_object_get(c, "function");
    if (!f) f = c; /* HF style: {name, arguments} without the "function" wrapper */
    if (!json_is_object(f))
      return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu].function must be an object", i, k);
    const json_t *id = json_object_get(c, "id");
    if (id && json_is_string(id)) tc[k].id = own_str(o, json_string_value(id), json_string_length(id));
    const json_t *name = json_object_get(f, "name");
    if (!json_is_string(name))
      return gt_err_set(err, GT_EINVAL, "messages[%zu].tool_calls[%zu]: function name missing", i, k);
    tc[k].name = own_str(o, json_string_value(name), json_string_length(name));
    const json_t *args = json_object_get(f, "arguments");
    if (json_is_string(args)) {
      tc[k].arguments = own_str(o, json_string_value(args), json_string_length(args));
    } else if (json_is_object(args)) {
      char *s = json_dumps(args, JSON_COMPACT | JSON_REAL_PRECISION(17));
      tc[k].arguments = own(o, s);
    } else if (args && !json_is_null(args)) {
      return gt_err_set(err, GT_EINVAL,
                        "messages[%zu].tool_calls[%zu].arguments must be a JSON string or object", i, k);
    }
    if (!tc[k].name || (args && !json_is_null(args) && !tc[k].arguments) ||
        (id && json_is_string(id) && !tc[k].id))
      return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  m->tool_calls = tc;
  m->n_tool_calls = n;
  return GT_OK;
}

int chat_msgs_from_json(const json_t *messages, chat_msgs_t *out, gt_err_t *err) {
  memset(out, 0, sizeof *out);
  if (!json_is_array(messages)) return gt_err_set(err, GT_EINVAL, "messages must be a JSON array");
  owned_t *o = calloc(1, sizeof *o);
  size_t n = json_array_size(messages);
  chat_msg_t *m = o ? calloc(n ? n : 1, sizeof *m) : NULL;
  if (!o || !m) {
    free(o);
    free(m);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  chat_msgs_t res = {m, n, o};
  if (!own(o, m)) {
    chat_msgs_free(&res);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  int rc = GT_OK;
  for (size_t i = 0; i < n && rc == GT_OK; i++) {
    const json_t *x = json_array_get(messages, i);
    if (!json_is_object(x)) {
      rc = gt_err_set(err, GT_EINVAL, "messages[%zu] must be an object", i);
      break;
    }
    const char *role = json_string_value(json_object_get(x, "role"));
    if (!role) {
      rc = gt_err_set(err, GT_EINVAL, "messages[%zu]: missing role", i);
      break;
    }
    if ((rc = chat_role_parse(role, &m[i].role, err))) {
      gt_err_wrap(err, "messages[%zu]", i);
      break;
    }
    if ((rc = parse_content(o, json_object_get(x, "content"), &m[i].content, i, err))) break;
    if ((rc = opt_str(o, x, "reasoning_content", &m[i].reasoning_content, i, err))) break;
    if (!m[i].reasoning_content && (rc = opt_str(o, x, "reasoning", &m[i].reasoning_content, i, err))) break;
    if ((rc = parse_tool_calls(o, json_object_get(x, "tool_calls"), &m[i], i, err))) break;
    if ((rc = opt_str(o, x, "tool_call_id", &m[i].tool_call_id, i, err))) break;
  }
  if (rc) {
    chat_msgs_free(&res);
    return rc;
  }
  *out = res;
  return GT_OK;
}
