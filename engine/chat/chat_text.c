/* engine/chat/chat_text.c — growable string builder and UTF-8 checks of the chat module. */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_internal.h"

/* ---------------------------------------------------------------- string builder */

void chat__sb_put(sbuf_t *b, const char *s, size_t n) {
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
void chat__sb_puts(sbuf_t *b, const char *s) { chat__sb_put(b, s, strlen(s)); }
void chat__sb_putc(sbuf_t *b, char c) { chat__sb_put(b, &c, 1); }

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid / truncated. */
size_t chat__utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
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
    size_t k = chat__utf8_seq(u + i, n - i, &cp);
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
