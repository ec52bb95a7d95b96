/* common/json_str.c — see json_str.h. */
#include "common/json_str.h"

#include <stdint.h>
#include <stdio.h>

#include "common/utf8.h"

/* The escape of byte c (< 0x80) into out (7 bytes room); returns its length (1 when c is written as
 * it is). */
static size_t esc(unsigned char c, char *out) {
  switch (c) {
    case '"': out[0] = '\\', out[1] = '"'; return 2;
    case '\\': out[0] = '\\', out[1] = '\\'; return 2;
    case '\b': out[0] = '\\', out[1] = 'b'; return 2;
    case '\f': out[0] = '\\', out[1] = 'f'; return 2;
    case '\n': out[0] = '\\', out[1] = 'n'; return 2;
    case '\r': out[0] = '\\', out[1] = 'r'; return 2;
    case '\t': out[0] = '\\', out[1] = 't'; return 2;
    default:
      if (c < 0x20) return (size_t)snprintf(out, 7, "\\u%04X", c);
      out[0] = (char)c;
      return 1;
  }
}

/* Walks s[0..n): runs of bytes written as they are go to b as one append (b NULL: only counted).
 * Returns the output length, or SIZE_MAX when an append failed. */
static size_t walk(gt_sb_t *b, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t out = 0, run = 0; /* run: bytes of p[i - run .. i) still to copy */
  for (size_t i = 0; i < n;) {
    char e[8];
    size_t adv = 1, el = 0;
    const char *rep = NULL;
    if (p[i] < 0x80) {
      el = esc(p[i], e);
      if (el == 1) el = 0;
      else rep = e;
    } else {
      uint32_t cp;
      int k = gt_utf8_next(p + i, n - i, &cp, &adv);
      if (k > 0) adv = (size_t)k;
      else {
        if (k == GT_UTF8_INCOMPLETE) adv = n - i; /* a truncated last character: one U+FFFD */
        rep = "\xef\xbf\xbd";
        el = 3;
      }
    }
    if (!rep) {
      run += adv;
      i += adv;
      continue;
    }
    if (b && run && gt_sb_add(b, s + i - run, run)) return SIZE_MAX;
    if (b && gt_sb_add(b, rep, el)) return SIZE_MAX;
    out += run + el;
    run = 0;
    i += adv;
  }
  if (b && run && gt_sb_add(b, s + n - run, run)) return SIZE_MAX;
  return out + run;
}

int gt_sb_add_json_chars(gt_sb_t *b, const char *s, size_t n) { return walk(b, s, n) == SIZE_MAX ? -1 : 0; }

int gt_sb_add_json_str(gt_sb_t *b, const char *s, size_t n) {
  return gt_sb_addc(b, '"') || gt_sb_add_json_chars(b, s, n) || gt_sb_addc(b, '"') ? -1 : 0;
}

size_t gt_json_chars_len(const char *s, size_t n) { return walk(NULL, s, n); }
