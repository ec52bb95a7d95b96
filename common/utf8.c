/* common/utf8.c — see utf8.h. */
#include "common/utf8.h"

int gt_utf8_next(const unsigned char *p, size_t n, uint32_t *cp, size_t *adv) {
  unsigned b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  uint32_t c;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;    /* no overlongs */
    if (b0 == 0xED) hi = 0x9F;    /* no surrogates */
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;    /* no overlongs */
    if (b0 == 0xF4) hi = 0x8F;    /* nothing above U+10FFFF */
  } else {
    *adv = 1;
    return GT_UTF8_INVALID;
  }
  for (int i = 1; i < len; i++) {
    if ((size_t)i >= n) return GT_UTF8_INCOMPLETE;
    unsigned b = p[i];
    unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *adv = (size_t)i;
      return GT_UTF8_INVALID;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

size_t gt_utf8_invalid_at(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) { /* ASCII run fast path */
      i++;
      continue;
    }
    uint32_t cp;
    size_t adv;
    int r = gt_utf8_next(p + i, n - i, &cp, &adv);
    if (r <= 0) return i;
    i += (size_t)r;
  }
  return n;
}

bool gt_utf8_valid(const char *s, size_t n) { return gt_utf8_invalid_at(s, n) == n; }

size_t gt_utf8_complete_len(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  /* the last lead byte is at most 3 bytes back; a character that starts there and runs past
   * the end is cut off when what is there is a valid prefix of it */
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    if ((p[n - back] & 0xC0) == 0x80) continue; /* continuation: keep looking for the lead */
    uint32_t cp;
    size_t adv;
    return gt_utf8_next(p + n - back, back, &cp, &adv) == GT_UTF8_INCOMPLETE ? n - back : n;
  }
  return n;
}

int gt_utf8_put(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}
