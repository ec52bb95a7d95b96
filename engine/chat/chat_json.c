/* engine/chat/chat_json.c — JSON parsed into an order-keeping tree and written back as Python's
 * json.dumps(ensure_ascii=False) / str() would (Jinja `tojson` / `|string`, see chat.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_internal.h"

#define JSON_MAX_DEPTH 128

/* ---------------------------------------------------------------- JSON tree */

void chat__jfree(jnode_t *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n; i++) {
    chat__jfree(j->kids[i]);
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

static void sb_utf8(gt_sb_t *b, uint32_t cp) {
  char t[4];
  gt_sb_add(b, t, (size_t)gt_utf8_put(cp, t));
}

/* Parses a JSON string at jp->i (on the opening quote) into a malloc'd decoded buffer. */
static int jstring(jparser_t *jp, char **out, size_t *outlen) {
  gt_sb_t b = {0};
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
        case '"': gt_sb_addc(&b, '"'); break;
        case '\\': gt_sb_addc(&b, '\\'); break;
        case '/': gt_sb_addc(&b, '/'); break;
        case 'b': gt_sb_addc(&b, '\b'); break;
        case 'f': gt_sb_addc(&b, '\f'); break;
        case 'n': gt_sb_addc(&b, '\n'); break;
        case 'r': gt_sb_addc(&b, '\r'); break;
        case 't': gt_sb_addc(&b, '\t'); break;
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
    size_t adv;
    const int k = gt_utf8_next((const unsigned char *)jp->p + jp->i, jp->n - jp->i, &cp, &adv);
    if (k <= 0) { free(b.p); return jfail(jp, "invalid UTF-8 in string"); }
    gt_sb_add(&b, jp->p + jp->i, (size_t)k);
    jp->i += (size_t)k;
  }
  if (b.oom) { free(b.p); return joom(jp); }
  if (!b.p) {
    b.p = calloc(1, 1);
    if (!b.p) return joom(jp);
  }
  *out = b.p;
  *outlen = b.len;
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
        if (jp->i >= jp->n || jp->p[jp->i] != '"') { jfail(jp, "expected object key"); chat__jfree(j); return NULL; }
        if (jstring(jp, &key, &klen)) { chat__jfree(j); return NULL; }
        jws(jp);
        if (jp->i >= jp->n || jp->p[jp->i] != ':') { free(key); jfail(jp, "expected ':'"); chat__jfree(j); return NULL; }
        jp->i++;
      }
      jnode_t *kid = jvalue(jp, depth + 1);
      if (!kid) { free(key); chat__jfree(j); return NULL; }
      bool replaced = false;
      if (obj) { /* Python dict: a repeated key keeps its first position, takes the last value */
        for (size_t k = 0; k < j->n; k++)
          if (j->klens[k] == klen && memcmp(j->keys[k], key, klen) == 0) {
            chat__jfree(j->kids[k]);
            j->kids[k] = kid;
            free(key);
            replaced = true;
            break;
          }
      }
      if (!replaced && jpush(j, kid, key, klen)) { free(key); chat__jfree(kid); chat__jfree(j); joom(jp); return NULL; }
      jws(jp);
      if (jp->i >= jp->n) { jfail(jp, "unexpected end"); chat__jfree(j); return NULL; }
      char d = jp->p[jp->i++];
      if (d == ',') continue;
      if (d == (obj ? '}' : ']')) return j;
      jp->i--;
      jfail(jp, obj ? "expected ',' or '}'" : "expected ',' or ']'");
      chat__jfree(j);
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

int chat__jparse(const char *s, size_t n, jnode_t **out, gt_err_t *err) {
  jparser_t jp = {s, n, 0, err, GT_OK};
  jnode_t *j = jvalue(&jp, 0);
  if (!j) return jp.rc ? jp.rc : gt_err_set(err, GT_EINVAL, "invalid JSON");
  jws(&jp);
  if (jp.i != jp.n) {
    chat__jfree(j);
    return jfail(&jp, "trailing characters");
  }
  *out = j;
  return GT_OK;
}

/* Python json.dumps string escaping with ensure_ascii=False. */
static void py_json_str(gt_sb_t *b, const char *s, size_t n) {
  gt_sb_addc(b, '"');
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
      gt_sb_add(b, s + i - run, run);
      run = 0;
      gt_sb_adds(b, esc);
    } else {
      run++;
    }
  }
  gt_sb_add(b, s + n - run, run);
  gt_sb_addc(b, '"');
}

/* Python repr(float). */
static void py_float_repr(gt_sb_t *b, double d) {
  if (isnan(d)) { gt_sb_adds(b, "NaN"); return; }
  if (isinf(d)) { gt_sb_adds(b, d < 0 ? "-Infinity" : "Infinity"); return; }
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
  if (neg) gt_sb_addc(b, '-');
  if (decpt <= -4 || decpt > 16) {
    gt_sb_addc(b, digits[0]);
    if (nd > 1) {
      gt_sb_addc(b, '.');
      gt_sb_add(b, digits + 1, (size_t)nd - 1);
    }
    snprintf(buf, sizeof buf, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    gt_sb_adds(b, buf);
  } else if (decpt <= 0) {
    gt_sb_adds(b, "0.");
    for (int k = 0; k < -decpt; k++) gt_sb_addc(b, '0');
    gt_sb_add(b, digits, (size_t)nd);
  } else if (decpt < nd) {
    gt_sb_add(b, digits, (size_t)decpt);
    gt_sb_addc(b, '.');
    gt_sb_add(b, digits + decpt, (size_t)(nd - decpt));
  } else {
    gt_sb_add(b, digits, (size_t)nd);
    for (int k = nd; k < decpt; k++) gt_sb_addc(b, '0');
    gt_sb_adds(b, ".0");
  }
}

/* Python json.dumps(x, ensure_ascii=False). */
void chat__py_dump(gt_sb_t *b, const jnode_t *j) {
  switch (j->t) {
    case J_NULL: gt_sb_adds(b, "null"); break;
    case J_TRUE: gt_sb_adds(b, "true"); break;
    case J_FALSE: gt_sb_adds(b, "false"); break;
    case J_INT: gt_sb_add(b, j->s, j->len); break;
    case J_FLOAT: py_float_repr(b, j->d); break;
    case J_STR: py_json_str(b, j->s, j->len); break;
    case J_ARR:
      gt_sb_addc(b, '[');
      for (size_t i = 0; i < j->n; i++) {
        if (i) gt_sb_adds(b, ", ");
        chat__py_dump(b, j->kids[i]);
      }
      gt_sb_addc(b, ']');
      break;
    case J_OBJ:
      gt_sb_addc(b, '{');
      for (size_t i = 0; i < j->n; i++) {
        if (i) gt_sb_adds(b, ", ");
        py_json_str(b, j->keys[i], j->klens[i]);
        gt_sb_adds(b, ": ");
        chat__py_dump(b, j->kids[i]);
      }
      gt_sb_addc(b, '}');
      break;
  }
}

/* Python str(x) (Jinja |string) for a scalar; containers use chat__py_dump. */
void chat__py_str(gt_sb_t *b, const jnode_t *j) {
  switch (j->t) {
    case J_NULL: gt_sb_adds(b, "None"); break;
    case J_TRUE: gt_sb_adds(b, "True"); break;
    case J_FALSE: gt_sb_adds(b, "False"); break;
    case J_STR: gt_sb_add(b, j->s, j->len); break;
    default: chat__py_dump(b, j); break;
  }
}

int chat_json_pydump(const char *json, size_t len, char **out, size_t *out_len, gt_err_t *err) {
  *out = NULL;
  jnode_t *j = NULL;
  int rc = chat__jparse(json, len, &j, err);
  if (rc) return rc;
  gt_sb_t b = {0};
  chat__py_dump(&b, j);
  chat__jfree(j);
  if (b.oom) { free(b.p); return gt_err_set(err, GT_ENOMEM, "out of memory"); }
  *out = b.p;
  if (out_len) *out_len = b.len;
  return GT_OK;
}
